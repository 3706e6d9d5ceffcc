"""One tenant's artifacts: ``app.for_tenant(t).artifacts``, ``app.scoped(i).artifacts``.

The same methods as ``app.artifacts`` (:class:`~tether.context.artifacts.Artifacts`), on
the same store: the bytes stay content-addressed and stored once. What a tenant may
reach is what it has a **claim** on (the ``artifact_claims`` table, schema 12): its own
``put`` (or ``put_file``, ``offload``) records the claim, in the same transaction as the
bytes when they are in the database. ``get``, ``open``, ``exists``, ``delete`` and
``restore`` of a digest the tenant has not claimed (another tenant's, or one never
stored) behave as for an unknown digest: NotFound with the same message, False.

``delete`` deletes the tenant's claim alone. Bytes that another tenant claims, or that
were stored unscoped (``app.artifacts``), stay; bytes in the database that no one claims
any more are left to gc, which sweeps them after its grace period (unless a snapshot
page has the same bytes). Bytes in another store (a directory) stay until the operator
deletes them with ``app.artifacts.delete``: it cannot know who else holds them.
"""

from __future__ import annotations

import io
import os
from typing import Any

from tether.context.artifacts import (
    OCTET_STREAM,
    ArtifactRef,
    Artifacts,
    DatabaseArtifacts,
    _as_ref,
    offload,
    ref_for,
    restore,
)
from tether.errors import NotFound
from tether.model.clock import Clock
from tether.store.artifact_claims import ArtifactClaims


class TenantArtifacts:
    """:class:`~tether.context.artifacts.Artifacts` limited to one tenant's claims (see
    the module docstring); the same methods."""

    def __init__(
        self, artifacts: Artifacts, claims: ArtifactClaims, tenant: str, clock: Clock
    ) -> None:
        self.artifacts = artifacts
        self.claims = claims
        self.tenant = tenant
        self.clock = clock

    @property
    def threshold(self) -> int:
        """Above how many encoded bytes :meth:`offload` stores a value (the app's)."""
        return self.artifacts.threshold

    def put(
        self, data: bytes | bytearray | memoryview, media_type: str = OCTET_STREAM
    ) -> ArtifactRef:
        """Store bytes (once per content) and this tenant's claim; return their reference."""
        return _Claiming(self).put(_checked(data), media_type)

    def put_file(self, path: str | os.PathLike[str], media_type: str | None = None) -> ArtifactRef:
        """Store a file's bytes and this tenant's claim (see :meth:`Artifacts.put_file`)."""
        return Artifacts(_Claiming(self)).put_file(path, media_type)

    def get(self, ref: ArtifactRef | dict[str, Any]) -> bytes:
        """The verified bytes of a reference this tenant stored; NotFound otherwise."""
        return self.artifacts.get(self._claimed(_as_ref(ref)))

    def open(self, ref: ArtifactRef | dict[str, Any]) -> io.BytesIO:
        """The verified bytes of a reference this tenant stored, as a binary file object."""
        return io.BytesIO(self.get(ref))

    def exists(self, ref: ArtifactRef | dict[str, Any]) -> bool:
        """Whether this tenant stored the reference and its bytes are there."""
        r = _as_ref(ref)
        return self.claims.has_artifact_claim(self.tenant, r.sha256) and self.artifacts.exists(r)

    def delete(self, ref: ArtifactRef | dict[str, Any]) -> bool:
        """Delete this tenant's claim on the reference (see the module docstring for the
        bytes); return whether it had one."""
        r = _as_ref(ref)
        return self.claims.release_artifact(self.tenant, r.sha256, self.clock.now())

    def offload(self, value: Any) -> Any:
        """:func:`~tether.context.artifacts.offload`, claiming what it stores."""
        return offload(value, _Claiming(self), self.threshold)

    def restore(self, value: Any) -> Any:
        """:func:`~tether.context.artifacts.restore` of a reference this tenant stored."""
        return restore(value, _Claiming(self))

    def _claimed(self, ref: ArtifactRef) -> ArtifactRef:
        if not self.claims.has_artifact_claim(self.tenant, ref.sha256):
            # the same message whether another tenant stored the digest or no one did
            raise NotFound(
                f"no artifact {ref.sha256} among tenant {self.tenant!r}'s artifacts; a "
                f"tenant reads the artifacts it put"
            )
        return ref


class _Claiming:
    """An ArtifactStore over a tenant's view: puts record the claim, reads check it."""

    def __init__(self, view: TenantArtifacts) -> None:
        self.view = view

    def put(self, data: bytes, media_type: str = OCTET_STREAM) -> ArtifactRef:
        v = self.view
        backend = v.artifacts.backend
        if isinstance(backend, DatabaseArtifacts) and backend.store is _as_object(v.claims):
            # bytes and claim in one transaction: never a claim without its bytes
            ref = ref_for(data, media_type)
            v.claims.put_claimed_artifact(v.tenant, ref.sha256, data, v.clock.now())
            return ref
        ref = backend.put(data, media_type)  # bytes first: a crash leaves no empty claim
        v.claims.claim_artifact(v.tenant, ref.sha256, v.clock.now())
        return ref

    def get(self, ref: ArtifactRef) -> bytes:
        return self.view.get(ref)

    def exists(self, ref: ArtifactRef) -> bool:
        return self.view.exists(ref)

    def delete(self, ref: ArtifactRef) -> bool:
        return self.view.delete(ref)


def _checked(data: Any) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"artifacts.put takes bytes, not {type(data).__name__}; encode text first "
            f"(data.encode()), or use put_file(path) for a file"
        )
    return bytes(data)


def _as_object(claims: ArtifactClaims) -> object:
    return claims  # the same store object plays both roles (ArtifactData, ArtifactClaims)
