"""Logs read by a claim, kept for the load that follows it.

A worker claims a run and loads it at once. A store that can read the claimed
runs' logs in the claim's own round trip or transaction keeps them here, and
its next ``load`` of such a run (the head, with no ``upto``) takes the log
instead of reading it again: a round trip (PostgreSQL) or a transaction
(SQLite) less per run.

Only a fresh entry is used, once: the worker loads within milliseconds of its
claim, and the claim's lease keeps other writers out meanwhile (a same-epoch
write, e.g. a decision, would make the run's first append conflict, as after
any load). Entries no load took (a worker stopped between claim and load) are
dropped when they grow old or too many.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from tether.model.status import RunStatus
from tether.store import Lease, Loaded, RunRecord

FRESH = 2.0  # seconds
LIMIT = 1024  # entries


class Prefetched:
    """Claimed runs' logs by run id, each taken at most once while fresh."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[float, Loaded]] = {}
        self._lock = threading.Lock()

    def put(self, loaded: Loaded) -> None:
        """Keep a claimed run's log (``loaded.run``: the row as the claim left it)."""
        with self._lock:
            if len(self._entries) >= LIMIT:
                self._entries.clear()
            self._entries[loaded.run.id] = (time.monotonic(), loaded)

    def take(self, run_id: str) -> Loaded | None:
        with self._lock:
            entry = self._entries.pop(run_id, None)
        if entry is None or time.monotonic() - entry[0] >= FRESH:
            return None
        return entry[1]


def as_claimed(record: RunRecord, lease: Lease, now: float) -> RunRecord:
    """A run's row as read before its claim, as the claim (``lease``, at ``now``) left it."""
    return replace(
        record,
        status=RunStatus.RUNNING,
        epoch=lease.epoch,
        lease_owner=lease.owner,
        lease_expires=lease.expires,
        claimed_at=now,
        updated_at=now,
        waiting_for=None,
    )
