"""Artifacts: large values and files, stored once by SHA-256 and referenced.

::

    ref = app.artifacts.put(b"%PDF-1.7 ...", media_type="application/pdf")
    ref = app.artifacts.put_file("report.pdf")          # the same bytes: the same ref
    data = app.artifacts.get(ref)                        # verified against ref.sha256

An :class:`ArtifactRef` (digest, size, media type) is small plain data: keep it in a
step's output, a task variable or a memory item instead of the bytes. Reading
always verifies the digest: bytes that changed in storage raise
:class:`~tether.errors.ArtifactCorrupt` naming it, never come back silently.

Where bytes live is an :class:`ArtifactStore`: :class:`DatabaseArtifacts` (the
``blobs`` table of the tether database, the default of ``app.artifacts``) or
:class:`DirectoryArtifacts` (one file per digest, written atomically). Anything
else (an S3-compatible bucket) plugs in by implementing the four methods of the
protocol; see docs/artifacts.md.

:func:`offload` turns a value whose encoding is larger than a threshold (64 KB by
default) into a reference ``{"$t": "artifact", ...}`` and :func:`restore` turns it
back.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import mimetypes
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tether.errors import ArtifactCorrupt, NotFound
from tether.model import codec
from tether.model.clock import Clock, SystemClock
from tether.store.context_rows import ArtifactData

DEFAULT_THRESHOLD = 64 * 1024  # bytes of encoded value above which offload stores an artifact
OCTET_STREAM = "application/octet-stream"
VALUE_MEDIA_TYPE = "application/vnd.tether.value+json"  # a value encoded by tether.model.codec
REF_TAG = "artifact"
_REF_KEYS = frozenset({codec.TAG, "sha256", "size", "media_type"})
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class ArtifactRef:
    """Where an artifact's bytes are: their SHA-256 (hex), size and media type."""

    sha256: str
    size: int
    media_type: str = OCTET_STREAM

    def __post_init__(self) -> None:
        check_digest(self.sha256)

    def to_value(self) -> dict[str, Any]:
        """The reference as plain data, storable in a step output or memory item."""
        return {
            codec.TAG: REF_TAG,
            "sha256": self.sha256,
            "size": self.size,
            "media_type": self.media_type,
        }

    @classmethod
    def from_value(cls, value: Any) -> ArtifactRef:
        """The inverse of :meth:`to_value`. Raises ValueError for anything else."""
        if not is_ref(value):
            raise ValueError(
                f"not an artifact reference: {value!r}; expected a dict with "
                f"'$t': 'artifact', 'sha256', 'size' and 'media_type'"
            )
        return cls(value["sha256"], int(value["size"]), value["media_type"])


def is_ref(value: Any) -> bool:
    """Whether ``value`` is an artifact reference made by :meth:`ArtifactRef.to_value`."""
    return (
        isinstance(value, dict)
        and value.keys() == _REF_KEYS
        and value[codec.TAG] == REF_TAG
        and isinstance(value["sha256"], str)
    )


def check_digest(sha256: Any) -> str:
    """``sha256`` if it is 64 lowercase hex digits; else ValueError (it may name a file)."""
    if not isinstance(sha256, str) or not _DIGEST.match(sha256):
        raise ValueError(
            f"{sha256!r} is not a SHA-256 digest (64 lowercase hex digits); pass the "
            f"ArtifactRef that put() returned"
        )
    return sha256


def ref_for(data: bytes, media_type: str = OCTET_STREAM) -> ArtifactRef:
    """The reference of ``data`` (its digest and size), without storing it."""
    return ArtifactRef(hashlib.sha256(data).hexdigest(), len(data), media_type)


def verify(ref: ArtifactRef, data: bytes, where: str) -> bytes:
    """``data`` if it hashes to ``ref.sha256``; else ArtifactCorrupt naming the digest
    and ``where`` the bytes were read. Every ArtifactStore's ``get`` calls this."""
    actual = hashlib.sha256(data).hexdigest()
    if actual != ref.sha256:
        raise ArtifactCorrupt(
            f"artifact {ref.sha256} in {where} is corrupt: its {len(data)} stored bytes hash "
            f"to {actual}. They were changed or damaged after they were stored; restore "
            f"them from a backup, or put() the original bytes again after deleting it.",
            sha256=ref.sha256,
        )
    return data


class ArtifactStore(Protocol):
    """Where artifact bytes live. Content-addressed: the same bytes are stored once."""

    def put(self, data: bytes, media_type: str = OCTET_STREAM) -> ArtifactRef:
        """Store ``data`` under its SHA-256 unless already there; return its reference.
        Atomic: a reader never sees part of the bytes."""
        ...

    def get(self, ref: ArtifactRef) -> bytes:
        """The bytes of ``ref``, verified with :func:`verify`. Raises NotFound when they
        are absent, ArtifactCorrupt when they do not match the digest."""
        ...

    def exists(self, ref: ArtifactRef) -> bool:
        """Whether bytes are stored under ``ref.sha256`` (not verified)."""
        ...

    def delete(self, ref: ArtifactRef) -> bool:
        """Delete the bytes of ``ref.sha256`` (for every holder of a reference to them);
        return whether there were any."""
        ...


class DatabaseArtifacts:
    """Artifacts in the ``blobs`` table of the tether database (SQLite or PostgreSQL).

    Each artifact is read and written whole, in one transaction: best for values and
    files up to some megabytes (the hard limit is 1 GB per artifact on both
    databases). Larger files belong in a :class:`DirectoryArtifacts` or a bucket.
    """

    def __init__(self, store: ArtifactData, clock: Clock | None = None) -> None:
        self.store = store
        self.clock = clock or SystemClock()

    def put(self, data: bytes, media_type: str = OCTET_STREAM) -> ArtifactRef:
        ref = ref_for(data, media_type)
        self.store.put_artifact(ref.sha256, data, self.clock.now())
        return ref

    def get(self, ref: ArtifactRef) -> bytes:
        data = self.store.get_artifact(ref.sha256)
        if data is None:
            raise NotFound(f"no artifact {ref.sha256} in the database's blobs table")
        return verify(ref, data, "the database's blobs table")

    def exists(self, ref: ArtifactRef) -> bool:
        return self.store.has_artifact(ref.sha256)

    def delete(self, ref: ArtifactRef) -> bool:
        return self.store.delete_artifact(ref.sha256)


class DirectoryArtifacts:
    """Artifacts as files ``<root>/<first 2 hex digits>/<sha256>``.

    A file is written to a temporary name in the same directory, flushed to disk and
    renamed into place, so a crash leaves either the whole file or none (stray
    ``.tmp-*`` files of a crash may be deleted). Several processes may share the
    directory.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise ValueError(f"artifact directory {self.root} is a file; give a directory")

    def path(self, ref: ArtifactRef) -> Path:
        """The file holding ``ref``'s bytes (which may not exist)."""
        return self.root / ref.sha256[:2] / ref.sha256

    def put(self, data: bytes, media_type: str = OCTET_STREAM) -> ArtifactRef:
        ref = ref_for(data, media_type)
        target = self.path(ref)
        if not target.exists():
            _write_atomically(target, data)
        return ref

    def get(self, ref: ArtifactRef) -> bytes:
        target = self.path(ref)
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            raise NotFound(f"no artifact {ref.sha256} in {self.root} (no file {target})") from None
        return verify(ref, data, str(target))

    def exists(self, ref: ArtifactRef) -> bool:
        return self.path(ref).is_file()

    def delete(self, ref: ArtifactRef) -> bool:
        try:
            self.path(ref).unlink()
        except FileNotFoundError:
            return False
        return True


def _write_atomically(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)


def _fsync_dir(path: Path) -> None:
    """Make a rename durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- values above a threshold ----------------------------------------------------


def offload(value: Any, store: ArtifactStore, threshold: int = DEFAULT_THRESHOLD) -> Any:
    """``value`` itself when its encoding (tether.model.codec) is at most ``threshold`` bytes;
    otherwise the encoding is stored as an artifact and its reference returned (a
    ``{"$t": "artifact", ...}`` dict). :func:`restore` is the inverse. Raises
    EncodeError (naming the path) for a value that cannot be stored at all."""
    data = codec.encode(value, what="the value to offload").encode()
    if len(data) <= threshold:
        return value
    return store.put(data, VALUE_MEDIA_TYPE).to_value()


def restore(value: Any, store: ArtifactStore) -> Any:
    """The inverse of :func:`offload`: a reference to an offloaded value becomes the
    value again, a reference to other bytes (a file) becomes the bytes, and anything
    else is returned as it is. Reading verifies the digest."""
    if not is_ref(value):
        return value
    ref = ArtifactRef.from_value(value)
    data = store.get(ref)
    return codec.decode(data) if ref.media_type == VALUE_MEDIA_TYPE else data


class Artifacts:
    """``app.artifacts``: put and get artifacts on one :class:`ArtifactStore`."""

    def __init__(self, backend: ArtifactStore, *, threshold: int = DEFAULT_THRESHOLD) -> None:
        self.backend = backend
        self.threshold = threshold

    def put(
        self, data: bytes | bytearray | memoryview, media_type: str = OCTET_STREAM
    ) -> ArtifactRef:
        """Store bytes (once per content); return their reference."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(
                f"artifacts.put takes bytes, not {type(data).__name__}; encode text first "
                f"(data.encode()), or use put_file(path) for a file"
            )
        return self.backend.put(bytes(data), media_type)

    def put_file(self, path: str | os.PathLike[str], media_type: str | None = None) -> ArtifactRef:
        """Store a file's bytes; the media type is guessed from its name unless given."""
        p = Path(path)
        if not p.is_file():
            raise NotFound(f"artifacts.put_file: {p} is not a file")
        guessed = mimetypes.guess_type(p.name)[0]
        return self.backend.put(p.read_bytes(), media_type or guessed or OCTET_STREAM)

    def get(self, ref: ArtifactRef | dict[str, Any]) -> bytes:
        """The verified bytes of a reference (an ArtifactRef or its ``to_value`` dict)."""
        return self.backend.get(_as_ref(ref))

    def open(self, ref: ArtifactRef | dict[str, Any]) -> io.BytesIO:
        """The verified bytes of a reference as a binary file object."""
        return io.BytesIO(self.get(ref))

    def exists(self, ref: ArtifactRef | dict[str, Any]) -> bool:
        """Whether the reference's bytes are stored."""
        return self.backend.exists(_as_ref(ref))

    def delete(self, ref: ArtifactRef | dict[str, Any]) -> bool:
        """Delete the reference's bytes (for every holder); return whether they existed."""
        return self.backend.delete(_as_ref(ref))

    def offload(self, value: Any) -> Any:
        """:func:`offload` with this store and threshold."""
        return offload(value, self.backend, self.threshold)

    def restore(self, value: Any) -> Any:
        """:func:`restore` with this store."""
        return restore(value, self.backend)


def _as_ref(ref: Any) -> ArtifactRef:
    if isinstance(ref, ArtifactRef):
        return ref
    if is_ref(ref):
        return ArtifactRef.from_value(ref)
    raise TypeError(
        f"expected an ArtifactRef (what put() returns) or its to_value() dict, not {ref!r}"
    )
