"""The PostgreSQL backend's connections: the URL, a pool of autocommit connections whose
reconnections are capped, PostgreSQL's errors as tether's, and the hooks of
:class:`tether.store.sqlbase.SqlStore`.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from functools import cache
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from psycopg.rows import DictRow, dict_row
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError(
        f"the PostgreSQL backend of tether needs psycopg 3 and psycopg-pool ({e}); "
        f"install them with: pip install 'tether[postgres]'"
    ) from e

from tether.errors import (
    EncodeError,
    InvalidInput,
    NotATetherDatabase,
    SchemaTooNew,
    StoreError,
    StoreFull,
    StoreUnavailable,
    TetherError,
)
from tether.store.faults import data_fault, schema_number
from tether.store.postgres.pooling import (
    PROBE_SETTING,
    PROBE_VALUE,
    qualify,
    qualify_sql,
    redact,
    refused_options,
    resolve_prepare,
)
from tether.store.queries import load_queries, migrations
from tether.store.records import RunRecord
from tether.store.sqlbase import SqlStore

_Q = load_queries("postgres")
DEFAULT_SCHEMA = "tether"
# The pool tries to reconnect a lost connection at most this many seconds apart, however
# long the database stays away (psycopg_pool doubles the wait after each failure, without
# a bound: after a 35 s outage work resumed ~20 s after the server was back)
RECONNECT_EVERY = 0.5
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_NO_LIMIT = 2**62
_LOCK_CLASS = 0x7465_7468  # "teth": the advisory-lock class of tether's migrations
_MIGRATIONS = migrations("postgres")
SCHEMA_VERSION = _MIGRATIONS[-1][0]

Conn = psycopg.Connection[Any]


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
        raise InvalidInput(
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


# a write on a read-only transaction, a hot standby, or a role without the privilege
_READ_ONLY_REFUSALS = frozenset({"25006", "42501"})
_TLS_PARAMS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "sslcrl")  # named in errors
_TIMED_OUT = {"57014": "statement_timeout", "55P03": "lock_timeout"}


def _timeout_ms(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 2**31:
        raise InvalidInput(f"{name} is in seconds, above 0, not {value!r}; e.g. {name}=30")
    return max(1, round(value * 1000))


def _conninfo_params(url: str) -> dict[str, Any]:
    try:
        return conninfo_to_dict(url)
    except psycopg.ProgrammingError as e:
        raise InvalidInput(
            f"not a PostgreSQL URL ({redact(str(e))}): give postgresql://user@host/db"
        ) from None


def _record(row: DictRow) -> RunRecord:
    return RunRecord(**{**row, "code": json.loads(row["code"])})


def _first_line(e: BaseException) -> str:
    """An error's first line, without any password it quotes (a URL, ``password=``)."""
    return redact((str(e).strip().splitlines() or [type(e).__name__])[0])


class PgConnections(SqlStore):
    """The pooled connections of a PostgreSQL store, its errors, and the hooks of
    :class:`SqlStore` (every method there that writes is one autocommit statement)."""

    dialect = "postgres"
    _Q = _Q
    _unique_violation = pg_errors.UniqueViolation
    schema: str
    conninfo: str  # no session state: what a transaction pooler passes on
    direct_conninfo: str  # with the startup options a direct connection takes
    pooled: bool | None  # behind a transaction pooler (None: not known yet)
    prepare: bool  # named prepared statements (only where the connection keeps them)
    timeout: float
    _pool: ConnectionPool[Conn]

    def _configure(
        self,
        url: str,
        schema: str | None,
        prepare: Any,
        pooler: Any,
        listen_url: str | None,
        statement_timeout: float | None = None,
        lock_timeout: float | None = None,
    ) -> None:
        """Read the URL and the connection options (see PostgresStore)."""
        from tether.store.postgres.pooling import check_pooler, take_params

        base, url_schema = split_url(url)
        base, extra = take_params(base, ("prepare", "pooler", "listen_url"))
        self.schema = _check_schema(schema or url_schema or DEFAULT_SCHEMA)
        self._Q = qualify(_Q, self.schema)
        self.channel = f"tether_{self.schema}"  # LISTEN/NOTIFY: this schema's work channel
        params = _conninfo_params(base)
        self.where = f"{_describe(params)} (schema {self.schema})"
        self.tls = " ".join(f"{k}={params[k]}" for k in _TLS_PARAMS if params.get(k))
        self.conninfo = make_conninfo(
            base, application_name=params.get("application_name") or "tether"
        )
        # JSON results carry floats as text: ask for the shortest exact digits whatever the
        # server's default (PostgreSQL < 12, or a database set to extra_float_digits <= 0);
        # behind a pooler the server's default applies (shortest exact from PostgreSQL 12)
        # (the search_path is for raw transactions' SQL: on a direct connection it costs
        # nothing; behind a pooler, transaction() sets it in each: see _transaction)
        options = f"{params.get('options') or ''} -c search_path={self.schema}"
        options = f"{options} -c {PROBE_SETTING}={PROBE_VALUE}".strip()
        self.timeouts = {
            name: _timeout_ms(name, value)
            for name, value in (
                ("statement_timeout", statement_timeout),
                ("lock_timeout", lock_timeout),
            )
            if value is not None
        }
        options += "".join(f" -c {name}={ms}" for name, ms in self.timeouts.items())
        if getattr(self, "read_only", False):  # a write fails at once, even on a primary
            options += " -c default_transaction_read_only=on"
        self.direct_conninfo = make_conninfo(self.conninfo, options=options)
        self.pooled = check_pooler(extra.get("pooler") if pooler is None else pooler)
        self._prepare_mode = extra.get("prepare", "auto") if prepare is None else prepare
        resolve_prepare(self._prepare_mode, False)  # refuse a bad value before connecting
        listen = listen_url or extra.get("listen_url")
        if listen is not None:
            listen_params = _conninfo_params(split_url(listen)[0])
            self.listen_conninfo: str | None = make_conninfo(
                split_url(listen)[0],
                application_name=listen_params.get("application_name") or "tether listener",
            )
            self.listen_where = _describe(listen_params)
        else:
            self.listen_conninfo, self.listen_where = None, self.where

    def _check_timeouts(self) -> None:
        """Timeouts are startup settings: behind a transaction pooler there are none."""
        if self.pooled and self.timeouts:
            names = " and ".join(self.timeouts)
            raise InvalidInput(
                f"{names}: behind a transaction pooler ({self.where}) tether cannot set them "
                f"per connection; set them on the role instead (ALTER ROLE … SET "
                f"statement_timeout = '30s'), or give a direct URL"
            )

    @property
    def _search_path(self) -> sql.Composed:
        """``SET LOCAL search_path`` to this store's schema (for one transaction)."""
        return sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(self.schema))

    def _qualify(self, statement: str) -> str:
        return qualify_sql(statement, self.schema)

    def _connect(self) -> Conn:
        """One connection, for migrating (its errors say why it failed). While
        ``pooled`` is None, it finds out: a pooler refuses or drops the startup options
        of a direct connection (see ``pooling.probe``)."""
        from tether.store.postgres.pooling import probe

        wait = max(2, round(self.timeout))
        try:
            if self.pooled is not True:
                try:
                    conn = psycopg.connect(
                        self.direct_conninfo, autocommit=True, connect_timeout=wait
                    )
                except psycopg.Error as e:
                    if self.pooled is not None or not refused_options(e):
                        raise
                    self.pooled = True
                else:
                    if self.pooled is None:
                        self.pooled = probe(conn)
                    return conn
            return psycopg.connect(self.conninfo, autocommit=True, connect_timeout=wait)
        except psycopg.Error as e:
            line = _first_line(e)
            if "SSL" in line or "certificate" in line:  # the URL's TLS settings, named
                raise StoreUnavailable(
                    f"cannot connect to PostgreSQL at {self.where} over TLS "
                    f"({self.tls or 'sslmode=prefer, the default'}): {line}. Check the URL's "
                    f"sslmode and sslrootcert (the CA that signed the server's certificate; "
                    f"verify-full also checks the host name against it)."
                ) from None
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL at {self.where}: {line}. Check that "
                f"the server is running and that the URL's host, port, database, user and "
                f"password are right."
            ) from None

    def _open_pool(self, min_size: int, max_size: int) -> ConnectionPool[Conn]:
        pool: ConnectionPool[Conn] = _POOL(
            self.conninfo if self.pooled else self.direct_conninfo,
            min_size=min_size,
            max_size=max_size,
            open=False,
            timeout=self.timeout,
            name=f"tether {self.where}",
            # prepared on first use, or never (behind a pooler that does not keep them)
            kwargs={"autocommit": True, "prepare_threshold": 0 if self.prepare else None},
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

    def _translate(self, e: psycopg.Error, conn: Conn) -> Exception:
        if e.sqlstate in _TIMED_OUT and not conn.broken:
            return e  # the store method's guard names the operation and its run
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
        if state in _TIMED_OUT:  # the statement was cancelled: nothing of it committed
            return StoreUnavailable(
                f"{at}: {_TIMED_OUT[state]} ran out{self._limit_of(state)} "
                f"({_first_line(e)}); nothing of it was committed; tether retries"
            )
        if getattr(self, "read_only", False) and state in _READ_ONLY_REFUSALS:
            return StoreError(
                f"{at}: refused, this is a read-only URL (a replica's, or read_url=): tether "
                f"reads through it and never writes ({_first_line(e)}). Write through the "
                f"primary's URL (--db / $TETHER_DB, or tether.open without read_only)."
            )
        if state.startswith(("08", "53", "57P")):  # connection, resources, shutting down
            return StoreUnavailable(f"{at}: {_first_line(e)}; tether retries")
        if isinstance(e, psycopg.DataError) and (not state or sent):  # a value, not a row
            return EncodeError(f"{at}: cannot store a value: {_first_line(e)}")
        return StoreError(f"{at}: {_first_line(e)}")

    def _limit_of(self, state: str) -> str:
        ms = getattr(self, "timeouts", {}).get(_TIMED_OUT[state])
        return f" after {ms / 1000:g} s" if ms is not None else ""

    def _fault(self, e: Exception, where: str) -> TetherError | None:
        """The tether error of an exception that escaped a store method (see translated)."""
        if isinstance(e, psycopg.Error):
            broken = isinstance(e, psycopg.OperationalError) and not e.sqlstate
            return self._lost(e) if broken else self._error(e, where)
        return data_fault(e, f"PostgreSQL at {self.where}: {where}")

    # -- schema -----------------------------------------------------------

    def _migrate(self, conn: Conn) -> None:
        try:
            with conn.transaction():
                # the migrations name no schema: theirs for this transaction only
                conn.execute(self._search_path)
                conn.execute(self._Q["migration_lock"], (_LOCK_CLASS, _lock_key(self.schema)))
                version = self._schema_version(conn)
                if not conn.execute(self._Q["schema_exists"], (self.schema,)).fetchone():
                    conn.execute(
                        sql.SQL(self._Q["create_schema"]).format(schema=sql.Identifier(self.schema))
                    )
                for number, _name, text in _MIGRATIONS:
                    if number > version:
                        conn.execute(text)
                        conn.execute(self._Q["set_schema_version"], (str(number),))
        except psycopg.Error as e:
            raise StoreError(
                f"cannot prepare the tether schema at {self.where}: {_first_line(e)}"
            ) from None

    def _check_readable(self, conn: Conn) -> None:
        """A read-only URL's schema: present and current (its primary migrates it)."""
        try:
            version = self._schema_version(conn)
        except psycopg.Error as e:
            raise StoreError(
                f"cannot read the tether schema at {self.where} (a read-only URL): "
                f"{_first_line(e)}. The role needs USAGE on the schema and SELECT on its tables."
            ) from None
        if version < SCHEMA_VERSION:
            raise StoreError(
                f"the tether schema at {self.where} (a read-only URL) is at version {version}, "
                f"this tether needs {SCHEMA_VERSION}: open the primary's URL once (it migrates), "
                f"and wait for the replica to catch up"
            )

    def _schema_version(self, conn: Conn) -> int:
        tables = [r[0] for r in conn.execute(self._Q["schema_tables"], (self.schema,))]
        if "tether_meta" not in tables:
            if tables:
                raise NotATetherDatabase(
                    f"schema {self.schema!r} at {self.where} holds tables of another program "
                    f"({', '.join(tables[:5])}); tether will not write to it. Give tether its "
                    f"own schema with ?schema=<name> in the URL."
                )
            return 0
        row = conn.execute(self._Q["schema_version"]).fetchone()
        version = schema_number(row[0], self.where) if row else 0
        if version > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"PostgreSQL at {self.where} was written by a newer tether (schema {version}; "
                f"this tether knows up to {SCHEMA_VERSION}). Upgrade tether to open it; it was "
                f"not changed."
            )
        return version

    # -- the hooks of SqlStore ----------------------------------------------

    def _rows_sql(self, file: str) -> dict[str, str]:
        """The named queries of ``sql/postgres/<file>.sql``, in this store's schema."""
        return _rows_sql(file, self.schema)

    def _for_read(self) -> AbstractContextManager[Conn]:
        return self._borrow()

    def _for_write(self) -> AbstractContextManager[Conn]:
        return self._borrow()  # autocommit: each of SqlStore's writes is one statement

    @contextmanager
    def _transaction(self) -> Iterator[Conn]:
        with self._borrow() as conn, conn.transaction():
            if self.pooled:  # no startup options behind a pooler: the schema for this one
                conn.execute(self._search_path)
            yield conn

    def _run_row(self, conn: Conn, run_id: str) -> RunRecord | None:
        row = conn.cursor(row_factory=dict_row).execute(self._Q["get_run"], (run_id,)).fetchone()
        return _record(row) if row is not None else None

    def _run_rows(
        self, conn: Conn, name: str, params: Mapping[str, Any], *, sql: str | None = None
    ) -> list[RunRecord]:
        statement = sql or self._Q[name]
        rows = conn.cursor(row_factory=dict_row).execute(statement, params).fetchall()
        return [_record(r) for r in rows]

    def _range(self, run_id: str, after: int, upto: int | None) -> tuple[str, int, int]:
        return (run_id, after, upto if upto is not None else _NO_LIMIT)

    def _limit(self, limit: int) -> int | None:
        return limit if limit >= 0 else None  # SQLite reads a negative LIMIT as none

    def _id_list(self, ids: Sequence[str]) -> list[str]:
        return list(ids)


@cache
def _rows_sql(file: str, schema: str) -> dict[str, str]:
    return qualify(load_queries("postgres", file), schema)


def _lock_key(name: str) -> int:
    """An advisory-lock key for a name: its CRC-32 as a signed 32-bit int."""
    key = zlib.crc32(name.encode())
    return key - 2**32 if key >= 2**31 else key


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
