"""Workspace manifests: what a run's working directory held after a step, as plain data.

A **manifest** maps each file's path (relative, ``/``-separated) to an :class:`Entry`:
its SHA-256, mode and size. A symbolic link is an entry too: its mode says so and its
"content" is the link's target text. A ``workspace`` event stores the change from the
manifest before (``files``: the entries added or changed, ``removed``: the paths gone),
so a step that edits two files of two thousand costs two entries; the manifest at a seq
is the fold of the run's ``workspace`` events up to it (:func:`fold_manifest`).

Everything read back from a log is checked here before it reaches the file system
(:func:`check_path`, :func:`apply`): a path that is absolute, climbs out with ``..``,
or is not in normal form is refused, so a tampered log cannot make a restore write
outside its workspace. Pure: no I/O.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tether.errors import InvalidInput, WorkspaceError

DEFAULT_IGNORE = (".git/", "node_modules/", "__pycache__/")
MAX_FILE_SIZE = 100 * 2**20  # bytes of one file
MAX_TOTAL_SIZE = 2**30  # bytes of all the files
MAX_FILES = 100_000
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_PERMS = 0o777  # a restore never sets setuid, setgid or sticky bits, whatever a log says


class Entry(NamedTuple):
    """One file of a manifest: content digest, mode (type and permission bits), size."""

    sha256: str
    mode: int
    size: int

    @property
    def is_link(self) -> bool:
        return stat.S_ISLNK(self.mode)


Manifest = dict[str, Entry]


def _iterated(value: Any) -> Iterable[Any]:
    return value if isinstance(value, Iterable) else ()


@dataclass(frozen=True, slots=True)
class Workspace:
    """Where an agent works, and the limits of its checkpoints.

    ``path``: the directory (``{run_id}`` in it is replaced by the run's id, so that each
    run has its own). ``ignore``: patterns never checkpointed nor touched by a restore: a
    pattern ending in ``/`` is a directory name at any depth, another one is matched
    (fnmatch) against the relative path and the file name. A checkpoint over a limit
    raises WorkspaceLimit naming it.
    """

    path: str
    ignore: tuple[str, ...] = DEFAULT_IGNORE
    max_file_size: int = MAX_FILE_SIZE
    max_total_size: int = MAX_TOTAL_SIZE
    max_files: int = MAX_FILES
    _dirs: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise InvalidInput(f"a workspace's path is a directory name, not {self.path!r}")
        for name in ("max_file_size", "max_total_size", "max_files"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidInput(f"Workspace({name}=...) is a count (0 or more), not {value!r}")
        ignore = self.ignore
        patterns = () if isinstance(ignore, (str, bytes)) else tuple(_iterated(ignore))
        if (not patterns and ignore) or not all(isinstance(p, str) and p for p in patterns):
            raise InvalidInput(
                f"Workspace(ignore=...) is a list of patterns (non-empty str), e.g. "
                f'[".git/", "*.log"], not {ignore!r}'
            )
        object.__setattr__(self, "ignore", patterns)
        dirs = frozenset(p.rstrip("/") for p in patterns if p.endswith("/"))
        object.__setattr__(self, "_dirs", dirs)

    def root_for(self, run_id: str) -> str:
        """The run's directory, absolute."""
        return os.path.abspath(self.path.replace("{run_id}", run_id))

    def ignores_dir(self, name: str, rel: str) -> bool:
        """Whether the directory ``rel`` (named ``name``) is left out whole."""
        return name in self._dirs or self._matches(name, rel)

    def ignores_file(self, name: str, rel: str) -> bool:
        return self._matches(name, rel)

    def _matches(self, name: str, rel: str) -> bool:
        return any(
            fnmatch.fnmatchcase(rel, p) or fnmatch.fnmatchcase(name, p)
            for p in self.ignore
            if not p.endswith("/")
        )


def workspace_of(value: Any, what: str) -> Workspace | None:
    """A ``workspace=`` argument as a Workspace: a path (str or PathLike), a Workspace,
    or None (no workspace). TypeError, naming ``what``, for anything else."""
    if value is None or isinstance(value, Workspace):
        return value
    if isinstance(value, (str, os.PathLike)):
        return Workspace(str(os.fspath(value)))
    raise TypeError(f"{what} is a directory (str or path) or a tether.Workspace, not {value!r}")


# -- paths read back ----------------------------------------------------------------


def check_path(path: Any, where: str) -> str:
    """``path`` if it names a file inside a workspace: relative, ``/``-separated, in
    normal form, no ``..`` or ``.`` component, no NUL. Else WorkspaceError."""
    ok = (
        isinstance(path, str)
        and path != ""
        and "\x00" not in path
        and "\\" not in path
        and not path.startswith("/")
        and posixpath.normpath(path) == path
        and all(part not in ("", ".", "..") for part in path.split("/"))
    )
    if not ok:
        raise WorkspaceError(
            f"{where}: the path {path!r} does not name a file inside the workspace (it is "
            f"absolute, climbs out with '..' or is not in normal form); refused, nothing "
            f"was written. The log was changed by hand or damaged: fork the run from an "
            f"earlier point, or restore the database from a backup"
        )
    return str(path)


def _entry(item: Any, where: str) -> tuple[str, Entry]:
    if not isinstance(item, list) or len(item) != 4:
        raise WorkspaceError(f"{where}: a file entry is [path, sha256, mode, size], not {item!r}")
    path, sha, mode, size = item
    check_path(path, where)
    if not isinstance(sha, str) or not _DIGEST.match(sha):
        raise WorkspaceError(f"{where}: {path!r} has no SHA-256 digest ({sha!r}); refused")
    if not isinstance(mode, int) or not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise WorkspaceError(f"{where}: {path!r} is not a file or a link (mode {mode!r})")
    if not isinstance(size, int) or size < 0:
        raise WorkspaceError(f"{where}: {path!r} has no size ({size!r}); refused")
    return path, Entry(sha, stat.S_IFMT(mode) | (mode & _PERMS), size)


# -- changes ------------------------------------------------------------------------


def change(before: Mapping[str, Entry], after: Mapping[str, Entry]) -> dict[str, Any]:
    """The ``files`` and ``removed`` of a workspace event from ``before`` to ``after``."""
    files = [[p, *e] for p, e in sorted(after.items()) if before.get(p) != e]
    removed = sorted(p for p in before if p not in after)
    return {"files": files, "removed": removed}


def apply(manifest: Manifest, data: Mapping[str, Any], where: str) -> None:
    """Apply a workspace event's change to ``manifest`` (in place), checking every path."""
    files, removed = data.get("files", []), data.get("removed", [])
    if not isinstance(files, list) or not isinstance(removed, list):
        raise WorkspaceError(f"{where}: files and removed are lists; the event is damaged")
    for path in removed:
        manifest.pop(check_path(path, where), None)
    for item in files:
        path, entry = _entry(item, where)
        manifest[path] = entry


def fold_manifest(events: Iterable[tuple[int, Mapping[str, Any]]], run_id: str) -> Manifest:
    """The manifest after ``events`` (``(seq, data)`` of a run's workspace events, in order)."""
    manifest: Manifest = {}
    for seq, data in events:
        apply(manifest, data, f"run {run_id}: workspace event {seq}")
    return manifest


def has_change(data: Mapping[str, Any]) -> bool:
    return bool(data["files"] or data["removed"])


# -- diffs --------------------------------------------------------------------------


class FileChange(NamedTuple):
    """A file that differs between two points: ``change`` is added, removed or modified;
    sizes are None where the file is absent."""

    path: str
    change: str
    size_before: int | None
    size_after: int | None


def diff(a: Mapping[str, Entry], b: Mapping[str, Entry]) -> list[FileChange]:
    """The files that differ from manifest ``a`` to ``b``, by path."""
    out = []
    for path in sorted(set(a) | set(b)):
        old, new = a.get(path), b.get(path)
        if old == new:
            continue
        kind = "added" if old is None else "removed" if new is None else "modified"
        out.append(FileChange(path, kind, old.size if old else None, new.size if new else None))
    return out
