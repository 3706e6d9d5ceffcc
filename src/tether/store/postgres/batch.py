"""PostgreSQL's batch of queued runs (``Store.enqueue_many``): the ``enqueue`` statement
of each run, pipelined in one transaction (one round trip, one commit)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from tether.model.events import NewEvent
from tether.store.postgres.statements import _run_params
from tether.store.records import NewRun


class PgBatch:
    """``enqueue_many`` for :class:`tether.store.postgres.store.PostgresStore` (a mixin)."""

    if TYPE_CHECKING:
        _Q: dict[str, str]
        channel: str

        def _borrow(self) -> AbstractContextManager[Any]: ...

    def enqueue_many(
        self, runs: Sequence[tuple[NewRun, Sequence[NewEvent]]], *, now: float
    ) -> list[bool]:
        extra = {"max_depth": None, "channel": self.channel}
        with self._borrow() as conn, conn.pipeline(), conn.transaction():
            cursors = [
                conn.execute(self._Q["enqueue"], {**_run_params(r, now, e), **extra})
                for r, e in runs
            ]
        return [bool(c.fetchone()[2]) for c in cursors]
