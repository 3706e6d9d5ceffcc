"""Replacing a run's whole log in one transaction: how the owner of a log that only it
writes compacts it (``TetherSaver.prune`` keeps a LangGraph thread's newest checkpoints).

The role :class:`LogRewrite` is part of :class:`~tether.store.Store`;
:class:`LogRewriteRows` implements it for both backends (a mixin of each store) on the
store's ``transaction()`` and the named queries of ``sql/<dialect>/rewrite.sql``. The log
stays append-only for everyone else: the rewrite is fenced by the last seq its caller
read (an append made after that read makes it fail, and an append fenced by a seq of the
old log fails after it unless the new log has grown back past that seq), and it deletes
the run's snapshots (they describe the old log; gc sweeps their pages).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from tether.errors import Conflict, NotFound
from tether.model.events import NewEvent


class LogRewrite(Protocol):
    """Replacing a run's log (one transaction)."""

    def replace_log(
        self, run_id: str, events: Sequence[NewEvent], *, expected_seq: int, now: float
    ) -> int:
        """Replace the events of run ``run_id`` with ``events`` (seq 1…n) and delete its
        snapshots, when its last seq is ``expected_seq``; return n. The run row is kept
        (its status too; ``updated_at`` becomes ``now``). Raises NotFound for no such run
        and Conflict when the log's last seq is another (nothing is changed). Readers
        that cached the old log must read it again: its seqs are reused."""
        ...


class LogRewriteRows:
    """:class:`LogRewrite` on a store's ``transaction()`` and named queries."""

    if TYPE_CHECKING:

        def transaction(self) -> AbstractContextManager[Any]: ...

        def _rows_sql(self, file: str) -> dict[str, str]: ...

    def replace_log(
        self, run_id: str, events: Sequence[NewEvent], *, expected_seq: int, now: float
    ) -> int:
        q = self._rows_sql("rewrite")
        rows = [
            {"id": run_id, "seq": i, "type": e.type, "data": e.data, "at": e.at, "actor": e.actor}
            for i, e in enumerate(events, 1)
        ]
        with self.transaction() as conn:
            if conn.execute(q["lock_run"], {"id": run_id}).fetchone() is None:
                raise NotFound(f"no run {run_id!r}: its log cannot be replaced")
            last = int(conn.execute(q["last_seq"], {"id": run_id}).fetchone()[0])
            if last != expected_seq:
                raise Conflict(
                    f"run {run_id}: its log ends at seq {last}, not {expected_seq} (another "
                    f"writer appended); it was not replaced"
                )
            conn.execute(q["delete_events"], {"id": run_id})
            conn.execute(q["delete_snapshots"], {"id": run_id})
            if rows:
                conn.cursor().executemany(q["insert_event"], rows)
            conn.execute(q["touch_run"], {"id": run_id, "now": now})
        return len(rows)
