"""Tenants' claims on artifacts: which tenant stored which digest (schema 12).

The role :class:`ArtifactClaims` is what :mod:`tether.context.tenant_artifacts` needs of
a store; :class:`ArtifactClaimRows` implements it for both backends (a mixin of
:class:`~tether.store.context_rows.ContextRows`), with the named queries of
``sql/<dialect>/artifacts.sql``. The bytes stay content-addressed and stored once: a
claim is a row ``(tenant, sha256)`` beside them.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol


class ArtifactClaims(Protocol):
    """Tenants' claims on artifact digests. Each method is one transaction."""

    def put_claimed_artifact(self, tenant: str, sha256: str, data: bytes, now: float) -> None:
        """Store ``data`` in the blobs table under ``sha256`` unless there, and ``tenant``'s
        claim on it, in one transaction. Bytes that only tenants stored are never swept
        by gc while claimed; bytes also stored unscoped stay an unscoped artifact."""
        ...

    def claim_artifact(self, tenant: str, sha256: str, now: float) -> None:
        """Record ``tenant``'s claim on ``sha256`` (bytes stored elsewhere, e.g. in an
        artifact directory); an existing claim is kept."""
        ...

    def has_artifact_claim(self, tenant: str, sha256: str) -> bool:
        """Whether ``tenant`` claims ``sha256``."""
        ...

    def release_artifact(self, tenant: str, sha256: str, now: float) -> bool:
        """Delete ``tenant``'s claim on ``sha256``; return whether there was one. If no
        tenant claims the digest any more and only tenants stored its bytes in the blobs
        table, they become a page that gc sweeps after its grace period (unless a
        snapshot references the same bytes); other tenants' claims and unscoped
        artifacts keep them."""
        ...


class ArtifactClaimRows:
    """:class:`ArtifactClaims` on a store's ``transaction()`` and named queries."""

    if TYPE_CHECKING:

        def transaction(self) -> AbstractContextManager[Any]: ...

        def _rows_sql(self, file: str) -> dict[str, str]: ...

    def put_claimed_artifact(self, tenant: str, sha256: str, data: bytes, now: float) -> None:
        q = self._rows_sql("artifacts")
        params = {"tenant": tenant, "sha256": sha256, "size": len(data), "data": data, "now": now}
        with self.transaction() as conn:
            conn.execute(q["put_claimed_blob"], params)
            conn.execute(q["add_claim"], params)

    def claim_artifact(self, tenant: str, sha256: str, now: float) -> None:
        params = {"tenant": tenant, "sha256": sha256, "now": now}
        with self.transaction() as conn:
            conn.execute(self._rows_sql("artifacts")["add_claim"], params)

    def has_artifact_claim(self, tenant: str, sha256: str) -> bool:
        params = {"tenant": tenant, "sha256": sha256}
        with self.transaction() as conn:
            return bool(conn.execute(self._rows_sql("artifacts")["has_claim"], params).fetchall())

    def release_artifact(self, tenant: str, sha256: str, now: float) -> bool:
        q = self._rows_sql("artifacts")
        params = {"tenant": tenant, "sha256": sha256, "now": now}
        with self.transaction() as conn:
            had = bool(conn.execute(q["delete_claim"], params).rowcount)
            if had:
                conn.execute(q["release_blob"], params)
            return had
