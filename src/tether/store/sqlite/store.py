"""The embedded SQLite backend (stdlib ``sqlite3``): :class:`SQLiteStore`.

WAL journal, ``synchronous=NORMAL`` by default (``FULL`` on request), writes in
``BEGIN IMMEDIATE`` so that concurrent writers wait instead of failing
mid-transaction, one connection per thread. Writers take turns on a lock, and
processes on ``flock(2)`` of ``<db>-lock`` beside the file (see WriterLock), with
SQLite's busy timeout behind it. Safe for several processes on one machine. A thread
of the store copies the WAL into the database file beside the writers (see
Checkpointer). The cold-path methods are :class:`tether.store.sqlbase.SqlStore`'s.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from tether.errors import (
    Conflict,
    NotATetherDatabase,
    NotFound,
    QueueFull,
    SchemaTooNew,
    StoreError,
    TetherError,
)
from tether.model.events import NewEvent
from tether.store.board_rows import BoardRows
from tether.store.context_rows import ContextRows
from tether.store.faults import schema_number, translated
from tether.store.log_rewrite import LogRewriteRows
from tether.store.queries import migrations
from tether.store.records import (
    CLAIM_ALL,
    EffectWrite,
    Lease,
    Loaded,
    NewRun,
    QueueLimits,
    RunRecord,
    Serving,
    SignalTake,
    Snapshot,
    Transition,
    pick_within_limits,
)
from tether.store.schedule_rows import ScheduleRows
from tether.store.sqlite.connections import _MAX_SEQ, _Q, _event, _range, _record, log
from tether.store.sqlite.writer import SQLiteWriter

_MIGRATIONS = migrations("sqlite")
SCHEMA_VERSION = _MIGRATIONS[-1][0]


@translated
class SQLiteStore(SQLiteWriter, ContextRows, LogRewriteRows, BoardRows, ScheduleRows):
    """A :class:`tether.store.Store` on one SQLite file."""

    def __init__(
        self, path: str, *, synchronous: str = "normal", busy_timeout: float = 10.0
    ) -> None:
        super().__init__(path, synchronous=synchronous, busy_timeout=busy_timeout)
        self._migrate()

    def close(self) -> None:
        """Close every connection this store opened (after committing the appends posted
        without waiting)."""
        try:
            self.flush()
        except TetherError as e:  # each posted append is written again when its run resumes
            log.warning("%s: posted appends not committed at close: %s", self.path, e)
        self._checkpointer.close()
        with self._lock:
            conns, self._all, self._idle = self._all, [], []
        for c in conns:
            c.close()
        self._wconn = None
        self._writing.close()

    # -- schema -----------------------------------------------------------

    def _migrate(self) -> None:
        try:
            with self._tx() as conn:
                version = self._schema_version(conn)
                for number, name, sql in _MIGRATIONS:
                    if number > version:
                        self._apply(conn, number, name, sql)
        except sqlite3.DatabaseError as e:
            raise self._translate(e) from None

    def _schema_version(self, conn: sqlite3.Connection) -> int:
        tables = {r[0] for r in conn.execute(_Q["schema_tables"])}
        if "tether_meta" not in tables:
            if tables:
                raise NotATetherDatabase(
                    f"{self.path} is a SQLite database of another program (tables: "
                    f"{', '.join(sorted(tables)[:5])}); tether will not write to it. "
                    f"Give tether its own file."
                )
            return 0
        row = conn.execute(_Q["schema_version"]).fetchone()
        version = schema_number(row[0], self.path) if row else 0
        if version > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"{self.path} was written by a newer tether (schema {version}; this tether "
                f"knows up to {SCHEMA_VERSION}). Upgrade tether to open it; it was not changed."
            )
        return version

    def _apply(self, conn: sqlite3.Connection, number: int, name: str, sql: str) -> None:
        for statement in _statements(sql):
            conn.execute(statement)
        conn.execute(_Q["set_schema_version"], (str(number),))

    # -- runs -------------------------------------------------------------

    def create_run(
        self,
        run: NewRun,
        events: Sequence[NewEvent],
        *,
        lease_owner: str | None,
        now: float,
        ttl: float,
        transition: Transition | None = None,
        writes: Sequence[EffectWrite | SignalTake] = (),
    ) -> Lease | None:
        with self._tx() as conn:
            self._insert_run(
                conn, run, events, lease_owner=lease_owner, now=now, ttl=ttl, moved=transition
            )
            for w in writes:
                self._side_write(conn, w, now)
        if lease_owner is None:
            return None
        return Lease(run.id, lease_owner, 1, now + ttl)

    def _insert_run(
        self,
        conn: sqlite3.Connection,
        run: NewRun,
        events: Sequence[NewEvent],
        *,
        lease_owner: str | None,
        now: float,
        ttl: float,
        moved: Transition | None = None,
    ) -> None:
        """The run's row, as ``moved`` (its first append's transition) leaves it, and its
        events. (One INSERT: an UPDATE after it would write the pages of the indexes that
        name a running run's lease, for nothing.)"""
        params = {
            "id": run.id,
            "agent": run.agent,
            "version": run.version,
            "status": run.status,
            "code": json.dumps(run.code),
            "now": now,
            "epoch": 1 if lease_owner else 0,
            "lease_owner": lease_owner,
            "lease_expires": now + ttl if lease_owner else None,
            "parent_id": run.parent_id,
            "fork_seq": run.fork_seq,
            "session_id": run.session_id,
            "owner": run.owner,
            "queue": run.queue,
            "priority": run.priority,
            "available_at": run.available_at,
            "dedup_key": run.dedup_key,
            "concurrency_key": run.concurrency_key,
            "waiting_for": None,
        }
        if moved is not None:
            params.update(status=moved.status, available_at=moved.available_at)
            params["waiting_for"] = moved.waiting_for
            if moved.release:
                params.update(lease_owner=None, lease_expires=None)
        try:
            rk = conn.execute(_Q["insert_run"], params).lastrowid  # runs.rk: the rowid
        except sqlite3.IntegrityError:
            raise Conflict(f"a run with id {run.id!r} already exists") from None
        assert rk is not None
        rows = [((rk << 32) | i, e.type, e.data, e.at, e.actor) for i, e in enumerate(events, 1)]
        conn.executemany(_Q["insert_run_event"], rows)

    # -- the log ----------------------------------------------------------

    def load(self, run_id: str, *, upto: int | None = None) -> Loaded:
        if upto is None:
            prefetched = self._prefetched.take(run_id)
            if prefetched is not None:
                return prefetched
        with self._tx(immediate=False) as conn:
            return self._read_log(conn, run_id, upto)

    def _read_log(self, conn: sqlite3.Connection, run_id: str, upto: int | None) -> Loaded:
        limit = upto if upto is not None else _MAX_SEQ
        row = conn.execute(_Q["get_run"], (run_id,)).fetchone()
        if row is None:
            raise NotFound(f"no run {run_id!r} in {self.path}; `tether runs` lists the runs")
        return self._log(conn, _record(row), limit)

    def _log(self, conn: sqlite3.Connection, record: RunRecord, limit: int) -> Loaded:
        """A run's log up to seq ``limit``: its latest snapshot there and the events after."""
        run_id = record.id
        snap_row = conn.execute(_Q["latest_snapshot"], (run_id, limit)).fetchone()
        snap = Snapshot(*snap_row) if snap_row else None
        after = snap.seq if snap else 0
        events = [_event(r) for r in conn.execute(_Q["read_events"], _range(run_id, after, limit))]
        return Loaded(record, snap, events)

    # -- signals ----------------------------------------------------------

    def send_signal(
        self, run_id: str, name: str, payload: str, *, sender: str | None, now: float
    ) -> bool:
        with self._tx() as conn:
            if conn.execute(_Q["get_run"], (run_id,)).fetchone() is None:
                raise NotFound(f"no run {run_id!r} in {self.path}; `tether runs` lists the runs")
            conn.execute(_Q["send_signal"], (run_id, name, payload, now, sender))
            woke = conn.execute(
                _Q["wake_for"], {"id": run_id, "waiting_for": f"signal:{name}", "now": now}
            ).rowcount
        return woke == 1

    # -- the queue and its workers ------------------------------------------

    def enqueue(
        self, run: NewRun, events: Sequence[NewEvent], *, now: float, max_depth: int | None
    ) -> tuple[str, bool]:
        with self._tx() as conn:
            if conn.execute(_Q["get_run"], (run.id,)).fetchone() is not None:
                return run.id, False
            if run.dedup_key is not None:
                row = conn.execute(_Q["find_dedup"], (run.queue, run.dedup_key)).fetchone()
                if row is not None:
                    return str(row[0]), False
            if max_depth is not None:
                depth = conn.execute(_Q["queue_depth"], (run.queue,)).fetchone()[0]
                if depth >= max_depth:
                    raise QueueFull(
                        f"queue {run.queue!r} already holds {depth} queued runs (max_depth "
                        f"{max_depth}); retry later, add workers, or raise max_depth"
                    )
            self._insert_run(conn, run, events, lease_owner=None, now=now, ttl=0.0)
        return run.id, True

    def enqueue_many(
        self, runs: Sequence[tuple[NewRun, Sequence[NewEvent]]], *, now: float
    ) -> list[bool]:
        created = []
        with self._tx() as conn:
            for run, events in runs:
                fresh = conn.execute(_Q["get_run"], (run.id,)).fetchone() is None
                if fresh:
                    self._insert_run(conn, run, events, lease_owner=None, now=now, ttl=0.0)
                created.append(fresh)
        return created

    def claim_next(
        self,
        queues: Sequence[QueueLimits],
        *,
        owner: str,
        ttl: float,
        now: float,
        capacity: int,
        serving: Serving | None = None,
    ) -> list[tuple[RunRecord, Lease]]:
        out: list[tuple[RunRecord, Lease]] = []
        serves = CLAIM_ALL if serving is None else serving.params()
        with self._tx() as conn:
            for limits in queues:
                if len(out) >= capacity:
                    break
                most = limits.most(capacity - len(out))
                for run_id in self._pick(conn, limits, now, most, serves):
                    row = conn.execute(
                        _Q["claim_picked"],
                        {"id": run_id, "owner": owner, "expires": now + ttl, "now": now},
                    ).fetchone()
                    claimed = self._log(conn, _record(row), _MAX_SEQ)  # the worker loads it next
                    lease = Lease(run_id, owner, claimed.run.epoch, now + ttl)
                    out.append((claimed.run, lease))
                    self._prefetched.put(claimed)
        return out

    def _pick(
        self,
        conn: sqlite3.Connection,
        limits: QueueLimits,
        now: float,
        capacity: int,
        serves: Mapping[str, str | None],
    ) -> list[str]:
        """Which candidates of one queue this claim may take, within the queue's limits."""
        limited = limits.concurrency is not None or limits.per_key is not None
        running = (
            dict(conn.execute(_Q["running_in_queue"], {"queue": limits.name, "now": now}))
            if limited
            else {}
        )
        budget = capacity
        if limits.concurrency is not None:
            budget = min(budget, limits.concurrency - sum(running.values()))
        if limits.rate is not None:
            n, period = limits.rate
            recent = conn.execute(_Q["claims_since"], (limits.name, now - period)).fetchone()[0]
            budget = min(budget, n - recent)
        if budget <= 0:
            return []
        scan = budget if limits.per_key is None else budget * 20
        params = {"queue": limits.name, "now": now, "scan": scan, **serves}
        rows = conn.execute(_Q["claim_candidates"], params).fetchall()
        return pick_within_limits([(r[0], r[1]) for r in rows], running, limits, budget)

    def worker_heartbeat(
        self, worker_id: str, *, ttl: float, now: float
    ) -> tuple[bool, dict[str, int]]:
        with self._tx() as conn:
            conn.execute(_Q["renew"], (now + ttl, worker_id))
            row = conn.execute(_Q["worker_heartbeat"], (now, worker_id)).fetchone()
            cancels = self._cancel_requests(conn, worker_id)
        return bool(row and row[0]), cancels

    @staticmethod
    def _cancel_requests(conn: sqlite3.Connection, owner: str) -> dict[str, int]:
        return {r[0]: int(r[1]) for r in conn.execute(_Q["cancel_requests"], (owner,))}

    def clock_offset(self, now: Callable[[], float]) -> float:
        """Every process of a SQLite database runs on its machine: one clock."""
        return 0.0

    def workers_sharing(self, workers: int) -> None:
        """SQLite has one writer whatever the number of workers: nothing to size."""

    def notify_work(self, queue: str) -> None:
        """SQLite has no notifications: workers poll."""

    def wait_for_work(self, queues: Sequence[str], timeout: float, wake: threading.Event) -> None:
        wake.wait(timeout)

    def remove_worker(self, worker_id: str, *, expire_leases: bool) -> None:
        with self._tx() as conn:
            conn.execute(_Q["delete_worker"], (worker_id,))
            if expire_leases:
                conn.execute(_Q["expire_leases"], (worker_id,))

    # -- retention (tether gc) ----------------------------------------------

    def delete_runs(self, run_ids: Sequence[str]) -> int:
        ids = json.dumps(list(run_ids))  # one parameter, whatever the count
        with self._tx() as conn:
            for run_id in run_ids:
                conn.execute(_Q["delete_run_events"], {"id": run_id})
            for table in ("snapshots", "effects", "signals"):
                conn.execute(_Q[f"delete_runs_{table}"], (ids,))
            return int(conn.execute(_Q["delete_runs_rows"], (ids,)).rowcount)

    def vacuum(self) -> None:
        """Rebuild the file, then empty the WAL. A checkpoint of another process's thread
        in progress makes the truncating checkpoint give up at once (SQLite does not wait
        for that lock): it is tried again for up to ``busy_timeout``; this process's
        thread waits meanwhile."""
        deadline = time.monotonic() + self.busy_timeout
        try:
            with self._writing, self._checkpointer.paused():
                conn = self._writer()
                conn.execute(_Q["vacuum"])
                while conn.execute(_Q["wal_truncate"]).fetchone()[0] and (
                    time.monotonic() < deadline
                ):
                    time.sleep(0.01)
        except sqlite3.Error as e:
            raise self._translate(e) from None


def _statements(sql: str) -> list[str]:
    """Split a script into complete statements (as sqlite3 itself sees them)."""
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip() and not all(
        ln.strip().startswith("--") or not ln.strip() for ln in buf.splitlines()
    ):
        raise StoreError(f"incomplete SQL statement at the end of a migration: {buf[:80]!r}")
    return out
