"""The PostgreSQL backend (psycopg 3 and a ``psycopg_pool.ConnectionPool``).

Many workers on many machines share one database. tether's tables live in
their own PostgreSQL schema (``tether``, or ``?schema=name`` in the URL), named in
every statement (no ``search_path``, nothing a transaction pooler would drop: see
``pooling``), so a user's database is not polluted and tests can use throwaway schemas.

Cost: each hot method is one statement. An ``append`` (events, transition and
snapshot together), a ``load`` (one statement is one consistent read) and a
queue claim go through the store's group commit (``groupcommit``): from one
thread that is one round trip and one commit each; from a worker's many
threads, the statements that arrive while a batch is in flight share the next
one (one pipeline, one transaction, one WAL flush). They are sent on libpq
connections of the group commit's own (``pgwire``: prepared once, parameters
pre-encoded), not through psycopg's cursors; everything else uses the pool's
autocommit connections, with statements prepared on first use. Durability is
the server's ``synchronous_commit`` (``on`` by default: a commit survives a
power loss), so ``tether.open``'s ``durability`` does not apply here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from functools import partial
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row

from tether.errors import (
    Conflict,
    InvalidInput,
    QueueFull,
    StoreError,
    StoreUnavailable,
)
from tether.model.events import NewEvent
from tether.store.board_rows import BoardRows
from tether.store.context_rows import ContextRows
from tether.store.faults import translated
from tether.store.groupcommit import GroupCommit, Pending
from tether.store.log_rewrite import LogRewriteRows
from tether.store.pgwire import WireConnection
from tether.store.postgres.batch import PgBatch
from tether.store.postgres.notify import PgNotifications
from tether.store.postgres.pool import _NO_LIMIT, Conn, _first_line, _lock_key, _record
from tether.store.postgres.pooling import resolve_prepare
from tether.store.postgres.statements import (
    _answer,
    _append_statement,
    _claimed,
    _loaded,
    _lost,
    _moved_params,
    _refusal_raises,
    _run_params,
    _Statement,
    _statement,
    _then_params,
)
from tether.store.prefetch import Prefetched, as_claimed
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

AUTO_LANES = 2  # group-commit lanes of a lone worker (see PostgresStore.workers_sharing)
# How long a writer that finds a lane free waits for the writers the last batches released
# (groupcommit: lingering), about one commit here; bench/README.md item 21 measures it.
LINGER = 0.001
_QUEUE_LOCK_CLASS = 0x7465_7471  # "tetq": the advisory-lock class of queue claims
log = logging.getLogger("tether.postgres")


def _check_read_only(value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"read_only is True or False, not {value!r}")
    return value


def _one(cur: psycopg.Cursor[Any]) -> Any:
    row = cur.fetchone()
    assert row is not None, "the statement always returns one row"
    return row


@translated
class PostgresStore(PgNotifications, PgBatch, ContextRows, LogRewriteRows, BoardRows, ScheduleRows):
    """A :class:`tether.store.Store` on one schema of a PostgreSQL database.

    Options (``tether.open(url, **options)`` passes them on): ``min_size`` and
    ``max_size`` of the connection pool, ``timeout`` (seconds to connect or borrow),
    ``lanes``: how many batches the group commit keeps in flight at once, each on a
    connection of its own (1 makes the biggest batches, more let the server work on
    several at once). By default 2 while this process's worker is the only one on
    the database, and 1 when several workers share it (see :meth:`workers_sharing`).
    ``linger``: seconds a write that finds a lane free waits for the other writes of
    threads that the last commits released, to share one commit with them (default
    0.001; 0 commits at once; a lone writer never waits: see ``groupcommit``).
    ``prepare``: ``"auto"`` (default: prepared statements on a direct connection, none
    behind a transaction pooler), ``"on"`` (also behind a pooler that keeps them, e.g.
    PgBouncer 1.21+ with ``max_prepared_statements``) or ``"off"``. ``pooler``: True
    when the URL is a transaction pooler's (default: detected, see ``pooling``).
    ``listen_url``: where the wake-ups' LISTEN connects (a direct connection); behind a
    pooler without it, waiting workers poll. The URL may carry all three as parameters
    (``?prepare=off&pooler=true``). ``statement_timeout`` and ``lock_timeout``: seconds
    after which the server cancels a statement (or its wait for a lock), so that a stuck
    query never holds a lease forever; the error names the statement. Set per connection
    (not behind a pooler: there, set them on the role). ``read_only``: the URL is a
    read-only one (a replica, or a role that may only read): nothing is migrated (the
    schema must be current), every transaction is read-only, and a write is refused with
    a :class:`~tether.errors.StoreError` saying so (see docs/postgres.md, "Reads from a
    replica").
    """

    concurrent_claims = True  # claims ride the group commit with the appends (see Store)

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 10.0,
        lanes: int | None = None,
        linger: float = LINGER,
        prepare: str | None = None,
        pooler: bool | None = None,
        listen_url: str | None = None,
        statement_timeout: float | None = None,
        lock_timeout: float | None = None,
        read_only: bool = False,
    ) -> None:
        self._auto_lanes = lanes is None
        lanes = AUTO_LANES if lanes is None else lanes
        if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1:
            raise InvalidInput(
                f"lanes (batches the group commit keeps in flight, one connection each) must "
                f"be an int >= 1, not {lanes!r}; e.g. tether.open(url, lanes=2)"
            )
        if isinstance(linger, bool) or not isinstance(linger, int | float) or not linger >= 0:
            raise InvalidInput(
                f"linger (seconds a write waits for others to share its commit) must be a "
                f"number >= 0, not {linger!r}; e.g. tether.open(url, linger=0.002), or 0"
            )
        self.read_only = _check_read_only(read_only)  # before _configure: a startup option
        self._configure(url, schema, prepare, pooler, listen_url, statement_timeout, lock_timeout)
        self.timeout = timeout
        with self._connect() as conn:  # finds out whether a pooler is in the way
            if self.read_only:
                self._check_readable(conn)  # a replica is migrated by its primary
            else:
                self._migrate(conn)
        self.prepare = resolve_prepare(self._prepare_mode, bool(self.pooled))
        self._check_timeouts()
        self._pool = self._open_pool(min_size, max_size)
        self._listener: Conn | None = None
        self._listening = threading.Lock()  # guards the listener thread and connection
        self._listen_thread: threading.Thread | None = None
        self._waiters: dict[int, tuple[threading.Event, frozenset[str]]] = {}
        self.unwritten_end: Callable[[str, int], None] | None = None  # see Store
        self._closing = threading.Event()
        self._commits: GroupCommit[_Statement] = GroupCommit(
            self._flush, lanes=lanes, linger=float(linger)
        )
        self._wires: list[WireConnection | None] = [None] * lanes  # one per group-commit lane
        self._prefetched = Prefetched()  # claimed runs' logs, for the load that follows

    def close(self) -> None:
        """Close the pool and every connection in it, the group commit's and the listener
        (after committing the appends posted without waiting)."""
        with suppress(Exception):  # a failure is logged with the run it concerns
            self.flush()
        self._closing.set()
        self._pool.close()
        for lane, wire in enumerate(self._wires):
            if wire is not None:
                wire.close()
                self._wires[lane] = None
        self._drop_listener()  # the listener thread sees _closing and ends

    # -- runs and their logs ---------------------------------------------

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
        params = {
            **_run_params(run, now, events),
            "epoch": 1 if lease_owner else 0,
            "lease_owner": lease_owner,
            "lease_expires": now + ttl if lease_owner else None,
            **_moved_params(transition),  # the row as the transition leaves it
        }
        with self._transaction() if writes else self._borrow() as conn:  # writes: 2 statements
            try:
                created = _one(conn.execute(self._Q["create_run"], params))[0]
            except pg_errors.UniqueViolation as e:
                if e.diag.constraint_name == "runs_dedup":
                    raise _dedup_conflict(run.queue, run.dedup_key) from None
                created = 0  # events of that id exist: the id is taken all the same
            if not created:  # raised inside: the transaction rolls back
                raise Conflict(f"a run with id {run.id!r} already exists")
            taken = writes and _then_params(run.id, params, len(events), now, writes)
            if taken and not _one(conn.execute(self._Q["append_events"], taken))[1]:
                raise Conflict(f"run {run.id}: a signal it takes was already taken")
        return Lease(run.id, lease_owner, 1, now + ttl) if lease_owner else None

    def load(self, run_id: str, *, upto: int | None = None) -> Loaded:
        if upto is None:
            prefetched = self._prefetched.take(run_id)
            if prefetched is not None:
                return prefetched
        limit = upto if upto is not None else _NO_LIMIT
        params = {"id": run_id, "upto": limit}
        row, snap, events = self._commits.submit(_statement(run_id, "load_run", params, _loaded))
        if row is None:
            raise self._not_found(run_id)
        return Loaded(row, snap, events)

    def append(
        self,
        run_id: str,
        events: Sequence[NewEvent],
        *,
        expected_seq: int,
        epoch: int,
        transition: Transition | None = None,
        snapshot: Snapshot | None = None,
        writes: Sequence[EffectWrite | SignalTake] = (),
        now: float,
        wait: bool = True,
    ) -> int:
        extras = (transition, snapshot, writes)
        statement = _append_statement(run_id, events, expected_seq, epoch, now, extras)
        if not wait:
            posted = statement._replace(
                read=partial(_refusal_raises, statement.read, run_id, epoch)
            )
            self._commits.post(posted, partial(self._posted_failed, statement, epoch))
            return expected_seq + len(events)
        try:
            fenced, ok = self._commits.submit(statement)
        except pg_errors.UniqueViolation as e:
            if e.diag.constraint_name == "runs_dedup":
                raise _dedup_conflict(None, None, run_id) from None
            raise Conflict(
                f"run {run_id}: seq {expected_seq + 1} was already appended by another "
                f"writer; reload the run and try again"
            ) from None
        if not fenced:
            with self._borrow() as conn:
                raise self._refused(conn, run_id, epoch, expected_seq + 1 if events else None)
        if not ok:
            raise Conflict(
                f"run {run_id}: a signal this append takes was already taken by another wait; "
                f"nothing was appended"
            )
        return expected_seq + len(events)

    def _posted_failed(self, statement: _Statement, epoch: int, error: BaseException) -> None:
        """A posted append (a worker run's final event) that was not committed: its lease
        is given back (``unwritten_end``: no thread executes the run any more, and the
        heartbeat would extend it); then a worker claims it and, replaying its log,
        writes the final event again."""
        log.warning(
            "run %s: its final event was not committed (%s); its lease is given back, and "
            "the worker that claims it writes the event again",
            statement.run_id,
            _first_line(error),
        )
        if self.unwritten_end is not None:
            self.unwritten_end(statement.run_id, epoch)

    def _flush(self, batch: list[Pending[_Statement]], lane: int) -> None:
        """Commit a batch of hot statements (see groupcommit): appends, and the loads and
        claims of a worker's threads, in one transaction and one round trip.

        Each append keeps its own fencing; they are sent in run order, so two batches
        lock run rows in one order. When one statement fails (a taken seq, a deadlock), the
        transaction rolls back whole and each statement is retried alone, so only the one
        at fault fails. Only the batch's leader is here, so the connection is its alone.
        """
        try:
            wire = self._wire_connection(lane)
        except StoreError as e:
            for p in batch:
                p.fail(e)
            return
        if len(batch) > 1:
            ordered = sorted(batch, key=lambda p: p.item.run_id)
            try:
                results = wire.pipeline([(p.item.query, p.item.values) for p in ordered])
            except psycopg.Error as e:
                if _lost(wire, e):
                    error = self._wire_lost(e, lane)
                    for p in batch:
                        p.fail(error)
                    return
            else:
                for p, res in zip(ordered, results, strict=True):
                    _answer(p, res)
                return
        for i, p in enumerate(batch):
            try:
                res = wire.execute(p.item.query, p.item.values)
            except pg_errors.UniqueViolation as e:
                p.fail(e)  # append() says which conflict it was
            except psycopg.Error as e:
                if _lost(wire, e):  # the rest cannot be sent either; the next flush reconnects
                    error = self._wire_lost(e, lane)
                    for q in batch[i:]:
                        q.fail(error)
                    return
                name = p.item.query.name.decode().removeprefix("tether_")
                where = f"{name} (run {p.item.run_id!r})" if p.item.run_id else name
                p.fail(self._error(e, where, sent=name.startswith("append")))
            else:
                _answer(p, res)

    def _wire_connection(self, lane: int) -> WireConnection:
        """A group-commit lane's own connection (opened on first use, and after a loss)."""
        wire = self._wires[lane]
        if wire is None:
            try:
                wire = WireConnection(
                    self.conninfo if self.pooled else self.direct_conninfo,
                    prepare=self.prepare,
                    rewrite=self._qualify,
                )
                try:
                    # the claim's plan must not depend on the queue's size (a custom plan per
                    # claim cost more than the claim; see claim_fast); a session setting,
                    # which a pooler would hand to other clients
                    if self.prepare and not self.pooled:
                        wire.plan_once()
                except BaseException:
                    wire.close()
                    raise
                self._wires[lane] = wire
            except (ConnectionError, psycopg.Error) as e:
                raise StoreUnavailable(
                    f"cannot connect to PostgreSQL at {self.where}: {_first_line(e)}. Check "
                    f"that the server is running and accepts connections"
                ) from None
        return wire

    def _wire_lost(self, e: BaseException, lane: int) -> StoreError:
        """Drop a connection that failed outside a statement; the error to report."""
        wire, self._wires[lane] = self._wires[lane], None
        if wire is not None:
            with suppress(Exception):
                wire.close()
        return self._lost(e)

    def flush(self, *, wait: bool = True) -> None:
        """Commit the appends posted without waiting (a worker run's final events).

        ``wait=False`` returns at once: a posted append never waits for a later write
        here (GroupCommit.post: its poster flushes it when a lane is free, or the busy
        lane's leader takes it next). Draining instead would hold the caller, a worker's
        claiming loop, until every lane is free, and have it lead batches of the run
        threads' appends; with one lane per worker that cost several workers 10-15% of
        their runs/s (bench/README.md, item 18)."""
        if wait:
            self._commits.drain()

    # -- signals ----------------------------------------------------------

    def send_signal(
        self, run_id: str, name: str, payload: str, *, sender: str | None, now: float
    ) -> bool:
        params = {
            "id": run_id,
            "name": name,
            "payload": payload,
            "now": now,
            "sender": sender,
            "waiting_for": f"signal:{name}",
        }
        with self._borrow() as conn:
            exists, woke = _one(conn.execute(self._Q["send_signal"], params))
        if not exists:
            raise self._not_found(run_id)
        return bool(woke)

    # -- the queue and its workers ------------------------------------------

    def enqueue(
        self, run: NewRun, events: Sequence[NewEvent], *, now: float, max_depth: int | None
    ) -> tuple[str, bool]:
        params = {**_run_params(run, now, events), "max_depth": max_depth, "channel": self.channel}
        with self._borrow() as conn:
            existing, depth, created = self._enqueue(conn, run.queue, params)
            if not created and existing is None and not (max_depth and depth >= max_depth):
                # a concurrent enqueue of the same id or key committed first: find it
                row = conn.execute(self._Q["find_dedup"], params).fetchone()
                existing = row[0] if row else None
        if created:
            return run.id, True
        if existing is not None:
            return str(existing), False
        if max_depth is not None and depth >= max_depth:
            raise QueueFull(
                f"queue {run.queue!r} already holds {depth} queued runs (max_depth "
                f"{max_depth}); retry later, add workers, or raise max_depth"
            )
        raise Conflict(f"run {run.id}: enqueued concurrently and gone again; enqueue it again")

    def _enqueue(self, conn: Conn, queue: str | None, params: dict[str, Any]) -> Any:
        """(existing id, depth, created); a bounded queue's depth is read under its lock."""
        if params["max_depth"] is None:
            return _one(conn.execute(self._Q["enqueue"], params))[:3]
        with conn.pipeline(), conn.transaction():  # one round trip: lock, count and insert
            conn.execute(self._Q["queue_lock"], (_QUEUE_LOCK_CLASS, self._queue_key(queue)))
            cur = conn.execute(self._Q["enqueue"], params)
        return _one(cur)[:3]

    def _queue_key(self, queue: str | None) -> int:
        return _lock_key(f"{self.schema}:{queue}")

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
        # Queues with limits are claimed under their lock, taken up front in one order (no
        # deadlock between workers listing queues in different orders); the others rely on
        # FOR UPDATE SKIP LOCKED alone.
        keys = sorted({self._queue_key(q.name) for q in queues if q.limited})
        if not keys:
            return self._claim_fast(queues, owner, ttl, now, capacity, serves)
        with self._borrow() as conn, conn.transaction():
            for key in keys:
                conn.execute(self._Q["queue_lock"], (_QUEUE_LOCK_CLASS, key))
            for limits in queues:
                if len(out) >= capacity:
                    break
                most = limits.most(capacity - len(out))
                out += self._claim_from(conn, limits, owner, ttl, now, most, serves)
        return out

    def _claim_fast(
        self, queues: Sequence[QueueLimits], owner: str, ttl: float, now: float, capacity: int,
        serves: Mapping[str, str | None],
    ) -> list[tuple[RunRecord, Lease]]:  # fmt: skip
        """Queues without limits: one statement per queue, riding the group commit.

        The statement also reads each claimed run's log, kept for the load that comes next
        (the worker's): one round trip less per run (see ``prefetch``).
        """
        out: list[tuple[RunRecord, Lease]] = []
        for limits in queues:
            if len(out) >= capacity:
                break
            params = {
                "queue": limits.name,
                "now": now,
                "scan": limits.most(capacity - len(out)),
                "owner": owner,
                "expires": now + ttl,
                **serves,
            }
            rows = self._commits.submit(_statement("", "claim_fast", params, _claimed))
            for before, epoch, snap, events in rows:
                lease = Lease(before.id, owner, epoch, now + ttl)
                record = as_claimed(before, lease, now)
                out.append((record, lease))
                self._prefetched.put(Loaded(record, snap, events))
        return out

    def _claim_from(
        self, conn: Conn, limits: QueueLimits, owner: str, ttl: float, now: float,
        capacity: int, serves: Mapping[str, str | None],
    ) -> list[tuple[RunRecord, Lease]]:  # fmt: skip
        running, budget = self._budget(conn, limits, now, capacity)
        if budget <= 0:
            return []
        scan = budget if limits.per_key is None else budget * 20
        cur = conn.cursor(row_factory=dict_row)
        scope = {"queue": limits.name, "now": now, "scan": scan, **serves}
        rows = cur.execute(self._Q["claim_candidates"], scope).fetchall()
        by_id = {r["id"]: r for r in rows}
        ids = pick_within_limits(
            [(r["id"], r["concurrency_key"]) for r in rows], running, limits, budget
        )
        if not ids:
            return []
        params = {"ids": ids, "owner": owner, "expires": now + ttl, "now": now}
        epochs = dict(conn.execute(self._Q["claim_picked"], params).fetchall())
        out = []
        for i in ids:
            lease = Lease(i, owner, int(epochs[i]), now + ttl)
            out.append((as_claimed(_record(by_id[i]), lease, now), lease))
        return out

    def _budget(
        self, conn: Conn, limits: QueueLimits, now: float, capacity: int
    ) -> tuple[dict[str | None, int], int]:
        """What runs in the queue (by concurrency key) and how many more it may claim."""
        running: dict[str | None, int] = {}
        if limits.concurrency is not None or limits.per_key is not None:
            params = {"queue": limits.name, "now": now}
            running = dict(conn.execute(self._Q["running_in_queue"], params).fetchall())
        budget = capacity
        if limits.concurrency is not None:
            budget = min(budget, limits.concurrency - sum(running.values()))
        if limits.rate is not None:
            n, period = limits.rate
            recent = _one(conn.execute(self._Q["claims_since"], (limits.name, now - period)))[0]
            budget = min(budget, n - recent)
        return running, budget

    def worker_heartbeat(
        self, worker_id: str, *, ttl: float, now: float
    ) -> tuple[bool, dict[str, int]]:
        params = {"id": worker_id, "expires": now + ttl, "now": now}
        with self._borrow() as conn:
            rows = conn.execute(self._Q["worker_heartbeat"], params).fetchall()
        cancels = {run_id: int(flag) for _, run_id, flag in rows if run_id is not None}
        return bool(rows[0][0]), cancels

    def remove_worker(self, worker_id: str, *, expire_leases: bool) -> None:
        with self._borrow() as conn:
            conn.execute(self._Q["remove_worker"], {"id": worker_id, "expire": expire_leases})

    def clock_offset(self, now: Callable[[], float]) -> float:
        """The server's clock against this process's, read three times: the reading of the
        quickest round trip, taken as halfway through it (error under half of it)."""
        readings = []
        with self._borrow() as conn:
            for _ in range(3):
                before = now()
                row = conn.execute(self._Q["server_clock"]).fetchone()
                after = now()
                assert row is not None
                readings.append((after - before, float(row[0]) - (before + after) / 2))
        return min(readings)[1]

    def workers_sharing(self, workers: int) -> None:
        """``workers`` live workers share this database. Unless ``lanes`` was given, a
        lone worker keeps two batches in flight (its runs wait on commit latency), and
        each of several keeps one: together they keep the server busy, with bigger
        batches and fewer commits (bench/README.md has the measurements)."""
        if self._auto_lanes:
            self._commits.set_active(AUTO_LANES if workers <= 1 else 1)

    # -- retention (tether gc) ----------------------------------------------

    def delete_runs(self, run_ids: Sequence[str]) -> int:
        with self._borrow() as conn:
            return int(_one(conn.execute(self._Q["delete_runs"], {"ids": list(run_ids)}))[0])

    def vacuum(self) -> None:
        with self._borrow() as conn:
            conn.execute(self._Q["vacuum"])


def _dedup_conflict(queue: str | None, key: str | None, run_id: str | None = None) -> Conflict:
    if run_id is not None:
        return Conflict(
            f"run {run_id}: another active run of its queue holds its dedup key; it cannot "
            f"become active again until that run finishes"
        )
    return Conflict(f"queue {queue!r} already has an active run with dedup key {key!r}")
