"""Workspace blobs: the file contents of workspace checkpoints, in the blobs table.

The role :class:`WorkspaceBlobs` is what :mod:`tether.engine.workspace` and gc need of a
store; :class:`WorkspaceBlobRows` implements it for both backends (a mixin of
:class:`~tether.store.context_rows.ContextRows`) with the named queries of
``sql/<dialect>/workspace.sql``. A file's bytes are stored once by SHA-256 as a blob of
kind ``'workspace'`` (the ``kind`` column of schema 7: no migration); gc sweeps those no
``workspace`` event references once they are older than its grace period. Bytes that
are also an artifact or a snapshot page are never swept as workspace bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol


class WorkspaceBlobs(Protocol):
    """File contents of workspace checkpoints. Each method is one transaction."""

    def put_workspace_blobs(self, blobs: Sequence[tuple[str, bytes]], now: float) -> None:
        """Store each ``(sha256, data)`` as workspace bytes unless there, in one
        transaction; stored workspace bytes are touched (``now``), so that a sweep running
        meanwhile keeps them; bytes stored as something else keep their kind (a snapshot
        page becomes a plain artifact, never swept, as two holders now rely on it)."""
        ...

    def get_workspace_blob(self, sha256: str) -> bytes | None:
        """The bytes stored under ``sha256`` (of any kind), or None (not verified)."""
        ...

    def workspace_event_data(self) -> Iterable[str]:
        """The data (JSON text) of every ``workspace`` event of every run: what gc keeps."""
        ...

    def old_workspace_blobs(self, before: float) -> list[tuple[str, int]]:
        """``(sha256, size)`` of the workspace blobs last stored or touched before ``before``."""
        ...

    def delete_workspace_blob(self, sha256: str, before: float) -> bool:
        """Delete a workspace blob unless it was touched at or after ``before`` (a put
        racing the sweep wins); return whether it was deleted."""
        ...


class WorkspaceBlobRows:
    """:class:`WorkspaceBlobs` on a store's ``transaction()`` and named queries."""

    if TYPE_CHECKING:

        def transaction(self) -> AbstractContextManager[Any]: ...

        def _rows_sql(self, file: str) -> dict[str, str]: ...

    def put_workspace_blobs(self, blobs: Sequence[tuple[str, bytes]], now: float) -> None:
        q = self._rows_sql("workspace")["put_blob"]
        rows = [{"sha256": s, "size": len(d), "data": d, "now": now} for s, d in blobs]
        with self.transaction() as conn:
            for params in rows:
                conn.execute(q, params)

    def get_workspace_blob(self, sha256: str) -> bytes | None:
        with self.transaction() as conn:
            q = self._rows_sql("workspace")["get_blob"]
            rows = conn.execute(q, {"sha256": sha256}).fetchall()
        return bytes(rows[0][0]) if rows else None

    def workspace_event_data(self) -> Iterable[str]:
        with self.transaction() as conn:
            rows = conn.execute(self._rows_sql("workspace")["event_data"], {}).fetchall()
        return [r[0] for r in rows]

    def old_workspace_blobs(self, before: float) -> list[tuple[str, int]]:
        with self.transaction() as conn:
            q = self._rows_sql("workspace")["old_blobs"]
            rows = conn.execute(q, {"before": before}).fetchall()
        return [(r[0], int(r[1])) for r in rows]

    def delete_workspace_blob(self, sha256: str, before: float) -> bool:
        with self.transaction() as conn:
            q = self._rows_sql("workspace")["delete_blob"]
            return bool(conn.execute(q, {"sha256": sha256, "before": before}).rowcount)
