"""The PostgreSQL backend (psycopg 3 and a ``psycopg_pool.ConnectionPool``).

Many workers on many machines share one database. tether's tables live in
their own PostgreSQL schema (``tether``, or ``?schema=name`` in the URL), found
through the connections' ``search_path``, so a user's database is not
polluted and tests can use throwaway schemas.

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

import json
import logging
import re
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from functools import partial
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit, urlunsplit

import orjson  # parses the JSON rows of loads and claims (~3x the stdlib's speed)

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from psycopg.pq.abc import PGresult
    from psycopg.rows import DictRow, dict_row
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError(
        f"the PostgreSQL backend of tether needs psycopg 3 and psycopg-pool ({e}); "
        f"install them with: pip install 'tether[postgres]'"
    ) from e

from tether.errors import (
    Conflict,
    EncodeError,
    LeaseLost,
    NotATetherDatabase,
    NotFound,
    QueueFull,
    SchemaTooNew,
    StoreError,
    StoreFull,
    StoreUnavailable,
    TetherError,
)
from tether.model.events import Event, NewEvent
from tether.store import (
    TOUCH_AFTER,
    AuditRecord,
    Effect,
    EffectWrite,
    Lease,
    Loaded,
    NewRun,
    QueueLimits,
    RunRecord,
    Signal,
    SignalTake,
    Snapshot,
    Transition,
    WorkerRecord,
    check_reused_pages,
    gap_conflict,
    pick_within_limits,
)
from tether.store.context_rows import ContextRows
from tether.store.faults import data_fault, schema_number, translated, translating
from tether.store.groupcommit import GroupCommit, Pending
from tether.store.pgwire import Prepared, WireConnection
from tether.store.prefetch import Prefetched, as_claimed
from tether.store.queries import load_queries, migrations

_Q = load_queries("postgres")
_MIGRATIONS = migrations("postgres")
SCHEMA_VERSION = _MIGRATIONS[-1][0]
DEFAULT_SCHEMA = "tether"
AUTO_LANES = 2  # group-commit lanes of a lone worker (see PostgresStore.workers_sharing)
# How long a writer that finds a lane free waits for the writers the last batches released
# (groupcommit: lingering), about one commit here; bench/README.md item 21 measures it.
LINGER = 0.001
# The pool tries to reconnect a lost connection at most this many seconds apart, however
# long the database stays away (psycopg_pool doubles the wait after each failure, without
# a bound: after a 35 s outage work resumed ~20 s after the server was back)
RECONNECT_EVERY = 0.5
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_LOCK_CLASS = 0x7465_7468  # "teth": the advisory-lock class of tether's migrations
_QUEUE_LOCK_CLASS = 0x7465_7471  # "tetq": the advisory-lock class of queue claims
_NO_LIMIT = 2**62
_NEW_RUN_FIELDS = tuple(NewRun.__dataclass_fields__)
_FLOAT_FIELDS = ("created_at", "updated_at", "lease_expires", "available_at", "claimed_at")
_WIRE = {  # the hot statements, sent on the group commit's libpq connection (see pgwire)
    name: Prepared(name, _Q[name])
    for name in (
        "append_event",
        "append_event_effect",
        "append_event_transition",
        "append_events_transition",
        "append_events",
        "load_run",
        "claim_fast",
    )
}

Conn = psycopg.Connection[Any]
log = logging.getLogger("tether.postgres")


def split_url(url: str) -> tuple[str, str | None]:
    """``(libpq URL, schema)``: the ``schema`` query parameter is tether's, not libpq's.

    The rest of the query is kept byte for byte (libpq decodes it itself).
    """
    parts = urlsplit(url)
    items = [i for i in parts.query.split("&") if i]
    schemas = [unquote(i.partition("=")[2]) for i in items if i.partition("=")[0] == "schema"]
    rest = "&".join(i for i in items if i.partition("=")[0] != "schema")
    return urlunsplit(parts._replace(query=rest)), (schemas[-1] if schemas else None)


def _check_schema(name: str) -> str:
    if not _SCHEMA_NAME.match(name):
        raise ValueError(
            f"schema {name!r} is not a plain PostgreSQL name; use lowercase letters, digits "
            f"and _ (at most 63), e.g. ?schema=tether"
        )
    return name


def _describe(params: dict[str, Any]) -> str:
    """``user@host:port/db`` for messages (never the password)."""
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or "5432"
    user = params.get("user")
    db = params.get("dbname") or user or "postgres"
    return f"{user + '@' if user else ''}{host}:{port}/{db}"


def _record(row: DictRow) -> RunRecord:
    return RunRecord(**{**row, "code": json.loads(row["code"])})


def _event(row: tuple[Any, ...]) -> Event:
    return Event(*row)


def _run_params(run: NewRun, now: float, events: Sequence[NewEvent]) -> dict[str, Any]:
    """A new run's columns and its first events, as named parameters."""
    fields = {name: getattr(run, name) for name in _NEW_RUN_FIELDS}
    return {**fields, "code": json.dumps(run.code), "now": now, **_columns(events)}


def _columns(events: Sequence[NewEvent]) -> dict[str, list[Any]]:
    """The events as four parallel arrays, unnested by one multi-row INSERT."""
    return {
        "types": [e.type for e in events],
        "datas": [e.data for e in events],
        "ats": [e.at for e in events],
        "actors": [e.actor for e in events],
    }


def _one(cur: psycopg.Cursor[Any]) -> Any:
    row = cur.fetchone()
    assert row is not None, "the statement always returns one row"
    return row


@translated
class PostgresStore(ContextRows):
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
    """

    dialect = "postgres"
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
    ) -> None:
        self._auto_lanes = lanes is None
        lanes = AUTO_LANES if lanes is None else lanes
        if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1:
            raise ValueError(
                f"lanes (batches the group commit keeps in flight, one connection each) must "
                f"be an int >= 1, not {lanes!r}; e.g. tether.open(url, lanes=2)"
            )
        if isinstance(linger, bool) or not isinstance(linger, int | float) or not linger >= 0:
            raise ValueError(
                f"linger (seconds a write waits for others to share its commit) must be a "
                f"number >= 0, not {linger!r}; e.g. tether.open(url, linger=0.002), or 0"
            )
        base, url_schema = split_url(url)
        self.schema = _check_schema(schema or url_schema or DEFAULT_SCHEMA)
        try:
            params = conninfo_to_dict(base)
        except psycopg.ProgrammingError as e:
            raise ValueError(
                f"not a PostgreSQL URL ({e}): give postgresql://user@host/db"
            ) from None
        self.where = f"{_describe(params)} (schema {self.schema})"
        options = f"{params.get('options') or ''} -c search_path={self.schema}".strip()
        self.conninfo = make_conninfo(
            base, options=options, application_name=params.get("application_name") or "tether"
        )
        self.timeout = timeout
        self.channel = f"tether_{self.schema}"  # LISTEN/NOTIFY: this schema's work channel
        with self._connect() as conn:
            self._migrate(conn)
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
        # JSON results carry floats as text: ask for the shortest exact digits whatever the
        # server's default (PostgreSQL < 12, or a database set to extra_float_digits <= 0)
        self._wire_conninfo = make_conninfo(
            self.conninfo, options=f"{options} -c extra_float_digits=3"
        )

    # -- connections ------------------------------------------------------

    def _connect(self) -> Conn:
        """One direct connection, for migrating (its errors say why it failed)."""
        try:
            return psycopg.connect(
                self.conninfo, autocommit=True, connect_timeout=max(2, round(self.timeout))
            )
        except psycopg.Error as e:
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL at {self.where}: {_first_line(e)}. Check that "
                f"the server is running and that the URL's host, port, database, user and "
                f"password are right."
            ) from None

    def _open_pool(self, min_size: int, max_size: int) -> ConnectionPool[Conn]:
        pool: ConnectionPool[Conn] = _POOL(
            self.conninfo,
            min_size=min_size,
            max_size=max_size,
            open=False,
            timeout=self.timeout,
            name=f"tether {self.where}",
            kwargs={"autocommit": True, "prepare_threshold": 0},
        )
        try:
            pool.open(wait=True, timeout=self.timeout)
        except PoolTimeout:
            pool.close()
            raise StoreError(
                f"PostgreSQL at {self.where} accepted one connection but the pool could not "
                f"open {min_size} within {self.timeout}s; check max_connections"
            ) from None
        return pool

    @contextmanager
    def _borrow(self, *, translate: bool = True) -> Iterator[Conn]:
        """A pooled connection for one transaction; driver errors become StoreError
        (unless ``translate`` is false: the caller sorts them out)."""
        try:
            with self._pool.connection(timeout=self.timeout) as conn:
                try:
                    yield conn
                except psycopg.Error as e:
                    if not translate:
                        raise
                    raise self._translate(e, conn) from None
        except PoolTimeout:
            raise StoreUnavailable(
                f"no connection to PostgreSQL at {self.where} within {self.timeout}s: the "
                f"server is unreachable or all {self._pool.max_size} pooled connections are "
                f"busy; check the server, or open the store with a larger max_size"
            ) from None

    def _translate(self, e: psycopg.Error, conn: Conn) -> TetherError:
        if not conn.broken:
            return self._error(e)
        # The server went away (restart, failover): drop the pool's other dead connections
        # now, so that only this call fails.
        with suppress(psycopg.Error):
            self._pool.check()
        return self._lost(e)

    def _lost(self, e: BaseException) -> StoreUnavailable:
        return StoreUnavailable(
            f"lost the connection to PostgreSQL at {self.where} ({_first_line(e)}); the last "
            f"write may or may not have been committed: reload the run and retry"
        )

    def _error(self, e: psycopg.Error, where: str = "", *, sent: bool = False) -> TetherError:
        """A statement's error (on a connection that still works) as tether's; ``sent``:
        the statement writes values of the caller's (a data exception is then theirs)."""
        at = f"PostgreSQL at {self.where}{f' ({where})' if where else ''}"
        state = e.sqlstate or ""
        if state == "53100":  # disk_full
            return StoreFull(
                f"{at}: the server's disk is full ({_first_line(e)}); nothing of this write "
                f"was stored. Free space on the database server: runs paused by it go on, "
                f"and workers retry on their own."
            )
        if state.startswith(("08", "53", "57P")):  # connection, resources, shutting down
            return StoreUnavailable(f"{at}: {_first_line(e)}; tether retries")
        if isinstance(e, psycopg.DataError) and (not state or sent):  # a value, not a row
            return EncodeError(f"{at}: cannot store a value: {_first_line(e)}")
        return StoreError(f"{at}: {_first_line(e)}")

    def _fault(self, e: Exception, where: str) -> TetherError | None:
        """The tether error of an exception that escaped a store method (see translated)."""
        if isinstance(e, psycopg.Error):
            broken = isinstance(e, psycopg.OperationalError) and not e.sqlstate
            return self._lost(e) if broken else self._error(e, where)
        return data_fault(e, f"PostgreSQL at {self.where}: {where}")

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

    # -- schema -----------------------------------------------------------

    def _migrate(self, conn: Conn) -> None:
        try:
            with conn.transaction():
                conn.execute(_Q["migration_lock"], (_LOCK_CLASS, _lock_key(self.schema)))
                version = self._schema_version(conn)
                if not conn.execute(_Q["schema_exists"], (self.schema,)).fetchone():
                    conn.execute(
                        sql.SQL(_Q["create_schema"]).format(schema=sql.Identifier(self.schema))
                    )
                for number, _name, text in _MIGRATIONS:
                    if number > version:
                        conn.execute(text)
                        conn.execute(_Q["set_schema_version"], (str(number),))
        except psycopg.Error as e:
            raise StoreError(
                f"cannot prepare the tether schema at {self.where}: {_first_line(e)}"
            ) from None

    def _schema_version(self, conn: Conn) -> int:
        tables = [r[0] for r in conn.execute(_Q["schema_tables"], (self.schema,))]
        if "tether_meta" not in tables:
            if tables:
                raise NotATetherDatabase(
                    f"schema {self.schema!r} at {self.where} holds tables of another program "
                    f"({', '.join(tables[:5])}); tether will not write to it. Give tether its "
                    f"own schema with ?schema=<name> in the URL."
                )
            return 0
        row = conn.execute(_Q["schema_version"]).fetchone()
        version = schema_number(row[0], self.where) if row else 0
        if version > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"PostgreSQL at {self.where} was written by a newer tether (schema {version}; "
                f"this tether knows up to {SCHEMA_VERSION}). Upgrade tether to open it; it was "
                f"not changed."
            )
        return version

    def schema_version(self) -> int:
        """The schema version of the open database."""
        with self._borrow() as conn:
            return schema_number(_one(conn.execute(_Q["schema_version"]))[0], self.where)

    # -- runs -------------------------------------------------------------

    def create_run(
        self,
        run: NewRun,
        events: Sequence[NewEvent],
        *,
        lease_owner: str | None,
        now: float,
        ttl: float,
    ) -> Lease | None:
        params = {
            **_run_params(run, now, events),
            "epoch": 1 if lease_owner else 0,
            "lease_owner": lease_owner,
            "lease_expires": now + ttl if lease_owner else None,
        }
        with self._borrow() as conn:
            try:
                created = _one(conn.execute(_Q["create_run"], params))[0]
            except pg_errors.UniqueViolation as e:
                if _constraint(e) == "runs_dedup":
                    raise _dedup_conflict(run.queue, run.dedup_key) from None
                created = 0  # events of that id exist: the id is taken all the same
        if not created:
            raise Conflict(f"a run with id {run.id!r} already exists")
        return Lease(run.id, lease_owner, 1, now + ttl) if lease_owner else None

    def get_run(self, run_id: str) -> RunRecord:
        with self._borrow() as conn:
            row = conn.cursor(row_factory=dict_row).execute(_Q["get_run"], (run_id,)).fetchone()
        if row is None:
            raise self._not_found(run_id)
        return _record(row)

    def list_runs(
        self, *, status: str | None = None, agent: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        # SQLite reads a negative LIMIT as "no limit"; PostgreSQL's is NULL
        params = {"status": status, "agent": agent, "limit": limit if limit >= 0 else None}
        with self._borrow() as conn:
            rows = conn.cursor(row_factory=dict_row).execute(_Q["list_runs"], params).fetchall()
        return [_record(r) for r in rows]

    def _not_found(self, run_id: str) -> NotFound:
        return NotFound(f"no run {run_id!r} in {self.where}; `tether runs` lists the runs")

    # -- the log ----------------------------------------------------------

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

    def read_events(self, run_id: str, *, after: int = 0, upto: int | None = None) -> list[Event]:
        limit = upto if upto is not None else _NO_LIMIT
        with self._borrow() as conn:
            rows = conn.execute(_Q["read_events"], (run_id, after, limit)).fetchall()
        return [_event(r) for r in rows]

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
            if _constraint(e) == "runs_dedup":
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
                wire = WireConnection(self._wire_conninfo)
                try:
                    # the claim's plan must not depend on the queue's size (a custom plan per
                    # claim cost more than the claim; see claim_fast)
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

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Cache a folded state (a snapshot at a seq is always the same state)."""
        params = (snapshot.run_id, snapshot.seq, snapshot.data, snapshot.at)
        with self._borrow() as conn:
            conn.execute(_Q["insert_snapshot"], params)

    def put_blobs(
        self, blobs: Mapping[str, bytes], *, now: float, touch: Sequence[str] = ()
    ) -> None:
        """Store the pages whose digest is not stored yet, and date the others given,
        in one transaction (see Store.put_blobs)."""
        rows = [(digest, len(data), data, now) for digest, data in blobs.items()]
        touched = [(now, d, now - TOUCH_AFTER) for d in touch]
        with self._borrow() as conn, conn.transaction(), conn.cursor() as cur:
            if rows:
                cur.executemany(_Q["put_blob"], rows)
            if touched:
                cur.executemany(_Q["touch_blob"], touched)
                found = _one(cur.execute(_Q["count_blobs"], {"digests": list(touch)}))[0]
                check_reused_pages(touch, int(found))

    def sweep_blobs(self, *, before: float, dry_run: bool = False) -> tuple[int, int]:
        """Delete the unreferenced snapshot pages dated before ``before`` (see Store)."""
        with self._borrow() as conn:
            if not _one(conn.execute(_Q["any_old_page"], {"before": before}))[0]:
                return 0, 0  # reading every snapshot to find none: skipped
            if dry_run:
                row = _one(conn.execute(_Q["count_sweepable_blobs"], {"before": before}))
                return int(row[0]), int(row[1])
            sizes = [r[0] for r in conn.execute(_Q["sweep_blobs"], {"before": before})]
        return len(sizes), sum(sizes)

    def get_blobs(self, digests: Sequence[str]) -> dict[str, bytes]:
        """The stored bytes of these digests (absent ones left out)."""
        out: dict[str, bytes] = {}
        with self._borrow() as conn:
            for digest in digests:
                row = conn.execute(_Q["get_blob"], (digest,)).fetchone()
                if row is not None:
                    out[digest] = bytes(row[0])
        return out

    def _refused(self, conn: Conn, run_id: str, epoch: int, seq: int | None = None) -> Exception:
        row = conn.cursor(row_factory=dict_row).execute(_Q["get_run"], (run_id,)).fetchone()
        if row is None:
            return self._not_found(run_id)
        if row["epoch"] == epoch and seq is not None:
            return gap_conflict(run_id, seq)
        return LeaseLost(
            f"run {run_id}: this writer's lease (epoch {epoch}) was superseded by "
            f"{row['lease_owner'] or 'another claim'} (epoch {row['epoch']}); it must stop. "
            f"Nothing was appended."
        )

    # -- leases -----------------------------------------------------------

    def claim(
        self, run_id: str, *, owner: str, ttl: float, now: float, takeover: str | None = None
    ) -> Lease:
        params = {
            "id": run_id,
            "owner": owner,
            "expires": now + ttl,
            "now": now,
            "takeover": takeover,
        }
        with self._borrow() as conn:
            row = conn.execute(_Q["claim"], params).fetchone()
            if row is None:
                current = (
                    conn.cursor(row_factory=dict_row).execute(_Q["get_run"], (run_id,)).fetchone()
                )
        if row is not None:
            return Lease(run_id, owner, int(row[0]), now + ttl)
        if current is None:
            raise self._not_found(run_id)
        expires = current["lease_expires"]
        raise Conflict(
            f"run {run_id} is being executed by {current['lease_owner'] or 'another worker'} "
            f"(lease until {expires if expires is None else format(expires, '.3f')}); wait for "
            f"it to finish or for its lease to expire"
        )

    def release(self, run_id: str, *, epoch: int) -> None:
        with self._borrow() as conn:
            conn.execute(_Q["release"], (run_id, epoch))

    def renew(self, owner: str, *, ttl: float, now: float) -> int:
        with self._borrow() as conn:
            return conn.execute(_Q["renew"], (now + ttl, owner)).rowcount

    # -- effects, signals, audit --------------------------------------------

    def get_effect(self, key: str) -> Effect | None:
        with self._borrow() as conn:
            row = conn.execute(_Q["get_effect"], (key,)).fetchone()
        return Effect(*row) if row else None

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
            exists, woke = _one(conn.execute(_Q["send_signal"], params))
        if not exists:
            raise self._not_found(run_id)
        return bool(woke)

    def pending_signal(self, run_id: str, name: str) -> Signal | None:
        with self._borrow() as conn:
            row = conn.execute(_Q["pending_signal"], (run_id, name)).fetchone()
        return Signal(*row) if row else None

    def wake(self, run_id: str, waiting_for: str, *, now: float) -> bool:
        params = {"id": run_id, "waiting_for": waiting_for, "now": now}
        with self._borrow() as conn:
            return conn.execute(_Q["wake_for"], params).rowcount == 1

    def record_audit(
        self, run_id: str | None, action: str, detail: str, *, actor: str | None, now: float
    ) -> None:
        with self._borrow() as conn:
            conn.execute(_Q["insert_audit"], (run_id, now, actor, action, detail))

    def read_audit(self, run_id: str) -> list[AuditRecord]:
        with self._borrow() as conn:
            rows = conn.execute(_Q["read_audit"], (run_id,)).fetchall()
        return [AuditRecord(*r) for r in rows]

    def request_cancel(self, run_id: str, *, compensate: bool, now: float) -> None:
        flag = 2 if compensate else 1
        with self._borrow() as conn:
            found = conn.execute(_Q["request_cancel"], (flag, now, run_id)).rowcount
        if not found:
            raise self._not_found(run_id)

    # -- the queue and its workers ------------------------------------------

    def enqueue(
        self, run: NewRun, events: Sequence[NewEvent], *, now: float, max_depth: int | None
    ) -> tuple[str, bool]:
        params = {**_run_params(run, now, events), "max_depth": max_depth, "channel": self.channel}
        with self._borrow() as conn:
            existing, depth, created = self._enqueue(conn, run.queue, params)
            if not created and existing is None and not (max_depth and depth >= max_depth):
                # a concurrent enqueue of the same id or key committed first: find it
                row = conn.execute(_Q["find_dedup"], params).fetchone()
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
            return _one(conn.execute(_Q["enqueue"], params))[:3]
        with conn.pipeline(), conn.transaction():  # one round trip: lock, count and insert
            conn.execute(_Q["queue_lock"], (_QUEUE_LOCK_CLASS, self._queue_key(queue)))
            cur = conn.execute(_Q["enqueue"], params)
        return _one(cur)[:3]

    def _queue_key(self, queue: str | None) -> int:
        return _lock_key(f"{self.schema}:{queue}")

    def claim_next(
        self, queues: Sequence[QueueLimits], *, owner: str, ttl: float, now: float, capacity: int
    ) -> list[tuple[RunRecord, Lease]]:
        out: list[tuple[RunRecord, Lease]] = []
        # Queues with limits are claimed under their lock, taken up front in one order (no
        # deadlock between workers listing queues in different orders); the others rely on
        # FOR UPDATE SKIP LOCKED alone.
        keys = sorted({self._queue_key(q.name) for q in queues if q.limited})
        if not keys:
            return self._claim_fast(queues, owner, ttl, now, capacity)
        with self._borrow() as conn, conn.transaction():
            for key in keys:
                conn.execute(_Q["queue_lock"], (_QUEUE_LOCK_CLASS, key))
            for limits in queues:
                if len(out) >= capacity:
                    break
                out += self._claim_from(
                    conn, limits, owner, ttl, now, limits.most(capacity - len(out))
                )
        return out

    def _claim_fast(
        self, queues: Sequence[QueueLimits], owner: str, ttl: float, now: float, capacity: int
    ) -> list[tuple[RunRecord, Lease]]:
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
            }
            rows = self._commits.submit(_statement("", "claim_fast", params, _claimed))
            for before, epoch, snap, events in rows:
                lease = Lease(before.id, owner, epoch, now + ttl)
                record = as_claimed(before, lease, now)
                out.append((record, lease))
                self._prefetched.put(Loaded(record, snap, events))
        return out

    def _claim_from(
        self, conn: Conn, limits: QueueLimits, owner: str, ttl: float, now: float, capacity: int
    ) -> list[tuple[RunRecord, Lease]]:
        running, budget = self._budget(conn, limits, now, capacity)
        if budget <= 0:
            return []
        scan = budget if limits.per_key is None else budget * 20
        cur = conn.cursor(row_factory=dict_row)
        rows = cur.execute(
            _Q["claim_candidates"], {"queue": limits.name, "now": now, "scan": scan}
        ).fetchall()
        by_id = {r["id"]: r for r in rows}
        ids = pick_within_limits(
            [(r["id"], r["concurrency_key"]) for r in rows], running, limits, budget
        )
        if not ids:
            return []
        params = {"ids": ids, "owner": owner, "expires": now + ttl, "now": now}
        epochs = dict(conn.execute(_Q["claim_runs"], params).fetchall())
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
            running = dict(conn.execute(_Q["running_in_queue"], params).fetchall())
        budget = capacity
        if limits.concurrency is not None:
            budget = min(budget, limits.concurrency - sum(running.values()))
        if limits.rate is not None:
            n, period = limits.rate
            recent = _one(conn.execute(_Q["claims_since"], (limits.name, now - period)))[0]
            budget = min(budget, n - recent)
        return running, budget

    def register_worker(self, worker: WorkerRecord, *, now: float) -> None:
        params = {
            "id": worker.id,
            "host": worker.host,
            "pid": worker.pid,
            "queues": json.dumps(worker.queues),
            "concurrency": worker.concurrency,
            "now": now,
        }
        with self._borrow() as conn:
            conn.execute(_Q["upsert_worker"], params)

    def worker_heartbeat(
        self, worker_id: str, *, ttl: float, now: float
    ) -> tuple[bool, dict[str, int]]:
        params = {"id": worker_id, "expires": now + ttl, "now": now}
        with self._borrow() as conn:
            rows = conn.execute(_Q["worker_heartbeat"], params).fetchall()
        cancels = {run_id: int(flag) for _, run_id, flag in rows if run_id is not None}
        return bool(rows[0][0]), cancels

    def cancel_requests(self, owner: str) -> dict[str, int]:
        with self._borrow() as conn:
            rows = conn.execute(_Q["cancel_requests"], (owner,)).fetchall()
        return {run_id: int(flag) for run_id, flag in rows}

    def list_workers(self) -> list[WorkerRecord]:
        with self._borrow() as conn:
            rows = conn.execute(_Q["list_workers"]).fetchall()
        return [WorkerRecord(r[0], r[1], r[2], json.loads(r[3]), *r[4:]) for r in rows]

    def remove_worker(self, worker_id: str, *, expire_leases: bool) -> None:
        with self._borrow() as conn:
            conn.execute(_Q["remove_worker"], {"id": worker_id, "expire": expire_leases})

    def clock_offset(self, now: Callable[[], float]) -> float:
        """The server's clock against this process's, read three times: the reading of the
        quickest round trip, taken as halfway through it (error under half of it)."""
        readings = []
        with self._borrow() as conn:
            for _ in range(3):
                before = now()
                row = conn.execute(_Q["server_clock"]).fetchone()
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

    def notify_work(self, queue: str) -> None:
        with self._borrow() as conn:
            conn.execute(_Q["notify_work"], (self.channel, queue))

    def wait_for_work(self, queues: Sequence[str], timeout: float, wake: threading.Event) -> None:
        """Wait until ``wake`` is set: by the worker itself (a run ended), by this store's
        listener thread on a NOTIFY naming one of ``queues``, or after ``timeout``."""
        self._ensure_listener()
        key = id(wake)
        with self._listening:
            self._waiters[key] = (wake, frozenset(queues))
        try:
            wake.wait(timeout)
        finally:
            with self._listening:
                self._waiters.pop(key, None)

    def _ensure_listener(self) -> None:
        with self._listening:
            if self._listen_thread is None or not self._listen_thread.is_alive():
                self._listen_thread = threading.Thread(
                    target=self._listen_loop, name="tether-pg-listen", daemon=True
                )
                self._listen_thread.start()

    def _listen_loop(self) -> None:
        """One LISTEN connection per store: every NOTIFY wakes the waiters of its queue."""
        while not self._closing.is_set():
            try:
                listener = self._listener or self._listen()
                for note in listener.notifies(timeout=1.0):
                    self._wake_waiters(note.payload)
            except psycopg.Error as e:  # waiters still wake on their timeout: a poll
                if self._closing.is_set():
                    return
                log.warning("tether: LISTEN on %s failed (%s); polling", self.where, _first_line(e))
                self._drop_listener()
                self._closing.wait(1.0)

    def _wake_waiters(self, queue: str) -> None:
        with self._listening:
            targets = [w for w, queues in self._waiters.values() if queue in queues]
        for wake in targets:
            wake.set()

    def _listen(self) -> Conn:
        conn = psycopg.connect(
            self.conninfo, autocommit=True, connect_timeout=max(2, round(self.timeout))
        )
        conn.execute(sql.SQL(_Q["listen"]).format(channel=sql.Identifier(self.channel)))
        self._listener = conn
        return conn

    def _drop_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with suppress(psycopg.Error):
                listener.close()

    def set_status(self, run_id: str, transition: Transition, *, now: float) -> None:
        """Change a run's row status without an event (used by repairs and tests)."""
        with self._borrow() as conn:
            conn.execute(
                _Q["update_status"], {"id": run_id, "now": now, **_transition_params(transition)}
            )

    # -- retention (tether gc) ----------------------------------------------

    def delete_runs(self, run_ids: Sequence[str]) -> int:
        with self._borrow() as conn:
            return int(_one(conn.execute(_Q["delete_runs"], {"ids": list(run_ids)}))[0])

    def vacuum(self) -> None:
        with self._borrow() as conn:
            conn.execute(_Q["vacuum"])

    # -- raw transactions (tether.context.memory, tether.context.artifacts) -------------------

    @contextmanager
    def transaction(self) -> Iterator[Conn]:
        """A pooled connection inside one transaction (see Store)."""
        with (
            translating(self._fault, "transaction"),
            self._borrow() as conn,
            conn.transaction(),
        ):
            yield conn


def _capped_pool() -> type[ConnectionPool[Conn]]:
    """A pool class whose reconnection attempts are at most RECONNECT_EVERY apart: work
    resumes within about that long of the database's return.

    psycopg_pool waits ~1 s before its first retry and doubles the wait after each failure
    (AttemptWithBackoff), with no option to bound it. The subclass hooks
    ``_add_connection``, which every (re)connection goes through, with a capped schedule;
    a psycopg_pool without these names keeps its own (tests/unit/test_pg_reconnect.py
    checks that this one is capped)."""
    try:
        from psycopg_pool.base import AttemptWithBackoff
    except ImportError:  # pragma: no cover - another psycopg_pool
        return ConnectionPool
    if not callable(getattr(ConnectionPool, "_add_connection", None)):  # pragma: no cover
        return ConnectionPool

    class CappedAttempt(AttemptWithBackoff):
        INITIAL_DELAY = RECONNECT_EVERY

        def update_delay(self, now: float) -> None:
            super().update_delay(now)
            self.delay = min(self.delay, RECONNECT_EVERY)

    class Pool(ConnectionPool[Conn]):
        def _add_connection(self, attempt: Any, growing: bool = False) -> None:
            if attempt is None:
                attempt = CappedAttempt(timeout=self.reconnect_timeout)
            super()._add_connection(attempt, growing)

    Pool.Attempt = CappedAttempt  # type: ignore[attr-defined]  # for the tests
    return Pool


_POOL = _capped_pool()


class _Statement(NamedTuple):
    """One hot statement for the group commit (an append, a load, a claim), and how to
    read its result."""

    run_id: str  # batches run in this order ("" for claims: first)
    query: Prepared
    values: list[bytes | None]
    read: Callable[[PGresult], Any]  # appends: (fenced, signals taken)


def _append_statement(
    run_id: str,
    events: Sequence[NewEvent],
    expected: int,
    epoch: int,
    now: float,
    extras: tuple[Transition | None, Snapshot | None, Sequence[EffectWrite | SignalTake]],
) -> _Statement:
    """The cheapest statement for the append's shape.

    A statement pays for every table it names, so the common shapes (one event; with an
    effects write; with a transition) have their own, and the rest take append_events.
    """
    transition, snapshot, writes = extras
    one = len(events) == 1 and snapshot is None
    if one and transition is None and not writes:
        params = _event_params(run_id, epoch, expected, events[0])
        return _statement(run_id, "append_event", params, _fenced_by_rowcount)
    if one and transition is None and len(writes) == 1 and isinstance(writes[0], EffectWrite):
        query, extra = "append_event_effect", _effect_params(writes[0])
    elif one and transition is not None and not writes:
        query, extra = "append_event_transition", _transition_params(transition)
    else:
        params = {
            "run_id": run_id,
            "epoch": epoch,
            "expected": expected,
            "after": expected if events else 0,  # no events: no seq to check
            "now": now,
            **_columns(events),
            **_transition_params(transition),
        }
        if snapshot is None and not writes and events:
            return _statement(run_id, "append_events_transition", params, _fenced_by_count)
        params.update(_snapshot_params(snapshot))
        params.update(_writes_params(writes))
        return _statement(run_id, "append_events", params, _fenced_and_taken)
    params = {**_event_params(run_id, epoch, expected, events[0]), "now": now, **extra}
    return _statement(run_id, query, params, _fenced_by_count)


def _statement(
    run_id: str, name: str, params: dict[str, Any], read: Callable[[PGresult], Any]
) -> _Statement:
    query = _WIRE[name]
    try:  # before the statement is queued: a value that cannot be sent fails its caller
        values = query.values(params)
    except (ValueError, TypeError) as e:
        raise EncodeError(
            f"run {run_id}: cannot send {name} to PostgreSQL: {e}; nothing was written"
        ) from None
    return _Statement(run_id, query, values, read)


def _loaded(res: PGresult) -> tuple[RunRecord | None, Snapshot | None, list[Event]]:
    run, snap, events = (res.get_value(0, i) for i in range(3))
    return (
        _record_json(run) if run is not None else None,
        Snapshot(*orjson.loads(snap)) if snap is not None else None,
        [Event(*e) for e in orjson.loads(events)] if events is not None else [],
    )


def _claimed(res: PGresult) -> list[tuple[RunRecord, int, Snapshot | None, list[Event]]]:
    out = []
    for i in range(res.ntuples):
        snap, events = res.get_value(i, 2), res.get_value(i, 3)
        out.append(
            (
                _record_json(res.get_value(i, 0)),
                int(res.get_value(i, 1) or 0),
                Snapshot(*orjson.loads(snap)) if snap is not None else None,
                [Event(*e) for e in orjson.loads(events)] if events is not None else [],
            )
        )
    return out


def _record_json(text: bytes | None) -> RunRecord:
    row = orjson.loads(text or b"null")
    row["code"] = orjson.loads(row["code"])
    for name in _FLOAT_FIELDS:  # JSON has no infinity: to_json writes "Infinity" as a string
        if type(row[name]) is str:
            row[name] = float(row[name])
    return RunRecord(**row)


def _answer(p: Pending[_Statement], res: PGresult) -> None:
    """Give a statement's reading of its result to its writer (a reading that raises fails
    that writer alone, not the batch)."""
    try:
        p.succeed(p.item.read(res))
    except Exception as e:
        p.fail(e)


def _lost(wire: WireConnection, e: psycopg.Error) -> bool:
    """The connection failed, not the statement (nothing more can be sent on it)."""
    return wire.broken or not isinstance(e, psycopg.DatabaseError)


def _refusal_raises(
    read: Callable[[PGresult], tuple[bool, bool]], run_id: str, epoch: int, res: PGresult
) -> tuple[bool, bool]:
    """A posted append's reading (nobody checks its outcome): a refusal is an error."""
    fenced, ok = read(res)
    if not fenced:
        raise LeaseLost(
            f"run {run_id}: the lease of epoch {epoch} was superseded (or the log does not "
            f"reach the seq this append follows)"
        )
    return fenced, ok


def _fenced_by_rowcount(res: PGresult) -> tuple[bool, bool]:
    return res.command_tuples == 1, True


def _fenced_by_count(res: PGresult) -> tuple[bool, bool]:
    return res.get_value(0, 0) != b"0", True


def _fenced_and_taken(res: PGresult) -> tuple[bool, bool]:
    return res.get_value(0, 0) != b"0", res.get_value(0, 1) != b"0"


def _event_params(run_id: str, epoch: int, expected: int, e: NewEvent) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "epoch": epoch,
        "seq": expected + 1,
        "after": expected,
        "type": e.type,
        "data": e.data,
        "at": e.at,
        "actor": e.actor,
    }


def _effect_params(w: EffectWrite) -> dict[str, Any]:
    return {
        "fx_key": w.key,
        "fx_run": w.run_id,
        "fx_position": w.position,
        "fx_tool": w.tool,
        "fx_status": w.status,
        "fx_result": w.result,
    }


def _transition_params(t: Transition | None) -> dict[str, Any]:
    if t is None:
        return {"status": None, "release": False, "available_at": None, "waiting_for": None}
    return {
        "status": t.status,
        "release": t.release,
        "available_at": t.available_at,
        "waiting_for": t.waiting_for,
    }


def _writes_params(writes: Sequence[EffectWrite | SignalTake]) -> dict[str, list[Any]]:
    """Effects writes and signal takes as parallel arrays.

    Several writes of one key keep the last (as applying them in order would): one
    INSERT … ON CONFLICT DO UPDATE cannot touch a row twice.
    """
    effects = {w.key: w for w in writes if isinstance(w, EffectWrite)}.values()
    takes = [w for w in writes if isinstance(w, SignalTake)]
    return {
        "fx_keys": [w.key for w in effects],
        "fx_runs": [w.run_id for w in effects],
        "fx_positions": [w.position for w in effects],
        "fx_tools": [w.tool for w in effects],
        "fx_statuses": [w.status for w in effects],
        "fx_results": [w.result for w in effects],
        "take_ids": [t.signal_id for t in takes],
        "take_seqs": [t.seq for t in takes],
    }


def _snapshot_params(s: Snapshot | None) -> dict[str, Any]:
    if s is None:
        return {"snap_run": None, "snap_seq": None, "snap_data": None, "snap_at": None}
    return {"snap_run": s.run_id, "snap_seq": s.seq, "snap_data": s.data, "snap_at": s.at}


def _lock_key(name: str) -> int:
    """An advisory-lock key for a name: its CRC-32 as a signed 32-bit int."""
    key = zlib.crc32(name.encode())
    return key - 2**32 if key >= 2**31 else key


def _constraint(e: psycopg.Error) -> str | None:
    return e.diag.constraint_name


def _dedup_conflict(queue: str | None, key: str | None, run_id: str | None = None) -> Conflict:
    if run_id is not None:
        return Conflict(
            f"run {run_id}: another active run of its queue holds its dedup key; it cannot "
            f"become active again until that run finishes"
        )
    return Conflict(f"queue {queue!r} already has an active run with dedup key {key!r}")


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
