"""Retention: ``tether gc`` deletes old runs and gives their space back.

Which runs (:func:`runs_to_collect`, pure):

- ``statuses``: only runs in these statuses; by default the finished ones
  (completed, failed, cancelled; a blocked run is not finished: it waits for its
  code). Naming another status (queued, running, waiting, blocked) collects those
  too, on purpose.
- ``keep_last=N``: the N newest runs (by creation) of each agent among those
  statuses are always kept.
- ``older_than`` seconds: only runs whose last change (``updated_at``) is older.
- A run whose lease is live (a process executes it right now) is never collected.

At least one criterion is required: ``gc`` with none would delete every finished run.

A run is deleted with its events, snapshots and effects rows, in batches of one
transaction each (:meth:`tether.store.Store.delete_runs`); then the store gives the
space back (:meth:`tether.store.Store.vacuum`: SQLite ``VACUUM``; on PostgreSQL,
autovacuum makes the space reusable and ``VACUUM FULL`` would return it to the OS).

Forks are self-contained (a fork copies its parent's prefix), so deleting a parent
never breaks a fork: the fork stays readable and resumable; its ``parent_id`` then
names a run that is gone. Audit records and a session's messages are kept (the audit
trail outlives runs; messages belong to their session).

Snapshot pages are content-addressed blobs that snapshots (of one run, of its forks,
of runs whose steps were the same) share, so deleting a run does not delete them;
then gc sweeps the pages that no snapshot references any more
(:meth:`tether.store.Store.sweep_blobs`). A page written or reused by a snapshot
within ``blob_grace`` seconds (an hour by default) is left for the next gc: the
snapshot that reuses it may not be committed yet. Artifacts (``app.artifacts``) are
never swept, nor are bytes a tenant claims (:mod:`tether.context.tenant_artifacts`);
bytes whose last tenant claim was deleted are swept as pages; blobs written before
schema 7 that no snapshot references are kept, as they may be artifacts. The file
contents of workspace checkpoints (:mod:`tether.services.workspaces`) are swept the same
way: those no ``workspace`` event of any run references, untouched for ``blob_grace``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tether.errors import InvalidInput
from tether.model import inputs
from tether.model.clock import Clock
from tether.model.durations import Duration, parse_duration
from tether.model.status import FINISHED, STATUSES
from tether.services import workspaces
from tether.store import RunRecord, Store

BATCH = 500
BLOB_GRACE = 3600.0  # seconds a snapshot page is kept after it was last written or reused
_ALL = 2**62  # list_runs' limit when every run is wanted


def parse_age(value: Duration) -> float:
    """Seconds in an age: a duration (``"90s"``, ``"15m"``, ``"30d"``, ``"1w"``, seconds
    or a timedelta; see :mod:`tether.model.durations`). Raises ValueError (TypeError)."""
    seconds = parse_duration(value, what="age")
    if seconds is None:
        raise TypeError("an age is a duration (e.g. '30d'), not None")
    return seconds


def runs_to_collect(
    runs: Iterable[RunRecord],
    *,
    now: float,
    older_than: float | None = None,
    statuses: Sequence[str] = (),
    keep_last: int | None = None,
) -> list[RunRecord]:
    """The runs that gc deletes, oldest first (see the module docstring)."""
    _check(older_than, statuses, keep_last)
    wanted = set(statuses or FINISHED)
    pool = [r for r in runs if r.status in wanted and not _live(r, now)]
    if keep_last is not None:
        pool = _beyond_last(pool, keep_last)
    if older_than is not None:
        pool = [r for r in pool if r.updated_at < now - older_than]
    return sorted(pool, key=lambda r: (r.created_at, r.id))


def _check(older_than: float | None, statuses: Sequence[str], keep_last: int | None) -> None:
    if older_than is None and not statuses and keep_last is None:
        raise ValueError(
            "gc needs a criterion: older_than (--older-than 30d), statuses "
            "(--status completed) or keep_last (--keep-last N)"
        )
    unknown = sorted(set(statuses) - set(STATUSES))
    if unknown:
        raise ValueError(f"unknown status {', '.join(unknown)}; a run is {', '.join(STATUSES)}")
    if keep_last is not None and keep_last < 0:
        raise ValueError(f"keep_last is a count of runs (0 or more), not {keep_last}")
    if older_than is not None and older_than < 0:
        raise ValueError(f"older_than is an age in seconds (0 or more), not {older_than}")


def _live(r: RunRecord, now: float) -> bool:
    return r.lease_owner is not None and (r.lease_expires or 0.0) >= now


def _beyond_last(runs: list[RunRecord], keep: int) -> list[RunRecord]:
    """All but the ``keep`` newest runs of each agent."""
    seen: dict[str, int] = {}
    out = []
    for r in sorted(runs, key=lambda r: (r.created_at, r.id), reverse=True):
        seen[r.agent] = seen.get(r.agent, 0) + 1
        if seen[r.agent] > keep:
            out.append(r)
    return out


@dataclass(frozen=True, slots=True)
class GcResult:
    """What gc did (or, with ``dry_run``, would do). Sizes are the database file's bytes
    before and after, when the store is a file (None otherwise)."""

    run_ids: tuple[str, ...]
    deleted: int
    dry_run: bool
    bytes_before: int | None
    bytes_after: int | None
    pages: int = 0  # snapshot pages swept (dry run: unreferenced already, so would be)
    page_bytes: int = 0
    files: int = 0  # workspace file contents swept (dry run: would be)
    file_bytes: int = 0

    @property
    def freed(self) -> int | None:
        """Bytes given back, when known."""
        if self.bytes_before is None or self.bytes_after is None:
            return None
        return self.bytes_before - self.bytes_after


def gc(
    store: Store,
    clock: Clock,
    *,
    older_than: float | None = None,
    statuses: Sequence[str] = (),
    keep_last: int | None = None,
    dry_run: bool = False,
    vacuum: bool = True,
    blob_grace: float = BLOB_GRACE,
) -> GcResult:
    """Delete the runs :func:`runs_to_collect` selects, sweep the snapshot pages no
    snapshot references any more, then vacuum (unless ``dry_run``)."""
    if blob_grace < 0:
        raise ValueError(f"blob_grace is an age in seconds (0 or more), not {blob_grace}")
    now = clock.now()
    chosen = runs_to_collect(
        store.list_runs(limit=_ALL),
        now=now,
        older_than=older_than,
        statuses=statuses,
        keep_last=keep_last,
    )
    ids = tuple(r.id for r in chosen)
    before = store_bytes(store)
    if dry_run:
        pages, page_bytes = store.sweep_blobs(before=now - blob_grace, dry_run=True)
        files = workspaces.sweep(store, now - blob_grace, dry_run=True)
        return GcResult(ids, 0, True, before, before, pages, page_bytes, *files)
    deleted = sum(store.delete_runs(ids[i : i + BATCH]) for i in range(0, len(ids), BATCH))
    pages, page_bytes = store.sweep_blobs(before=now - blob_grace)
    files = workspaces.sweep(store, now - blob_grace)
    if vacuum and (deleted or pages or files[0]):
        store.vacuum()
    return GcResult(ids, deleted, False, before, store_bytes(store), pages, page_bytes, *files)


def store_bytes(store: Store) -> int | None:
    """The size of a file store (the database and its WAL), or None for a server."""
    path = store.path
    if path is None or not os.path.exists(path):
        return None
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def collect(
    store: Store,
    clock: Clock,
    *,
    older_than: Duration | None,
    status: Sequence[str] | str,
    keep_last: int | None,
    dry_run: bool,
    vacuum: bool,
    blob_grace: Duration,
) -> GcResult:
    """:func:`gc` with ``app.gc``'s arguments checked first (durations parsed, a single
    status taken as a list of one)."""
    age = parse_duration(older_than, what="older_than")
    grace = parse_duration(blob_grace, what="blob_grace")
    if grace is None:
        raise InvalidInput("blob_grace is a duration (e.g. '1h'), not None")
    if keep_last is not None:
        inputs.integer(keep_last, "keep_last", low=0)
    statuses = (status,) if isinstance(status, str) else tuple(status)
    return gc(
        store,
        clock,
        older_than=age,
        statuses=statuses,
        keep_last=keep_last,
        dry_run=dry_run,
        vacuum=vacuum,
        blob_grace=grace,
    )
