"""The SQLite backend's connections: opening the file, a pool of reading connections, the
writer's own connection, and SQLite's errors as tether's.

WAL journal, ``synchronous=NORMAL`` by default (``FULL`` on request), foreign keys on.
A file that is not SQLite, or another program's SQLite file, is refused before anything
is written to it.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any

from tether.errors import (
    CorruptRecord,
    InvalidInput,
    NotATetherDatabase,
    StoreError,
    StoreFull,
    StoreUnavailable,
    TetherError,
)
from tether.model.events import Event
from tether.store.faults import data_fault
from tether.store.prefetch import Prefetched
from tether.store.queries import load_queries
from tether.store.records import RunRecord
from tether.store.sqlbase import SqlStore
from tether.store.sqlite.locks import WAL_AUTOCHECKPOINT, Checkpointer, WriterLock

_Q = load_queries("sqlite")
_RUN_FIELDS = frozenset(RunRecord.__dataclass_fields__)
log = logging.getLogger("tether.sqlite")
# SQLite's primary result codes (sqlite3.h), as tether translates them (_translate)
_BUSY, _LOCKED, _NOMEM, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = (
    5, 6, 7, 8, 10, 11, 13, 14, 26
)  # fmt: skip


def _record(row: sqlite3.Row) -> RunRecord:
    # sqlite3.Row iterates values, not keys: .keys() is needed
    d = {k: row[k] for k in row.keys() if k in _RUN_FIELDS}  # noqa: SIM118
    d["code"] = json.loads(d["code"])
    return RunRecord(**d)


def _event(row: tuple[Any, ...]) -> Event:
    return Event(*row)


def _code(e: sqlite3.Error) -> int:
    """SQLite's primary result code of an error (0 for the sqlite3 module's own)."""
    return (getattr(e, "sqlite_errorcode", None) or 0) & 0xFF


_MAX_SEQ = 2**32 - 1  # events are keyed (run << 32) | seq
IDLE_READERS = 32  # reading connections kept open between reads (a worker's or a server's
# threads read at once: each keeps one); more are closed after use


def _range(run_id: str, after: int, upto: int) -> dict[str, Any]:
    return {"id": run_id, "after": max(0, after), "upto": min(upto, _MAX_SEQ)}


class SQLiteConnections(SqlStore):
    """Connections to one SQLite file, and the hooks of :class:`SqlStore` that only read
    (the write transaction is :class:`tether.store.sqlite.writer.SQLiteWriter`'s)."""

    dialect = "sqlite"
    _Q = _Q
    _unique_violation = sqlite3.IntegrityError
    path: str  # the database file
    concurrent_claims = False  # a claim is a write transaction of its own (see Store)
    # never called: a posted append that failed is queued again for the next transaction
    unwritten_end: Callable[[str, int], None] | None = None

    def __init__(
        self, path: str, *, synchronous: str = "normal", busy_timeout: float = 10.0
    ) -> None:
        if synchronous.lower() not in ("normal", "full"):
            raise InvalidInput(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
        self.path = path
        self.where = path  # for messages (see tether.store.Maintenance)
        self.synchronous = synchronous.upper()
        self.busy_timeout = busy_timeout
        self._all: list[sqlite3.Connection] = []  # every open connection, for close()
        self._idle: list[sqlite3.Connection] = []  # reading connections free to borrow
        self._rpid = os.getpid()  # the process that opened the idle ones
        self._lock = threading.Lock()  # guards only the lists of connections, never a query
        self._writing = WriterLock(path)  # one writer at a time (see _tx)
        self._checkpointer = Checkpointer(path, enabled=self.synchronous == "NORMAL")
        self._writing.on_release = self._released
        self._changes = 0  # the writer connection's total_changes when last seen
        # a store dropped without close() ends its thread (which holds the checkpointer,
        # not the store); close() waits for it
        weakref.finalize(self, self._checkpointer.stop)
        self._wconn: sqlite3.Connection | None = None  # the writer's, under _writing
        self._wpid = 0
        self._prefetched = Prefetched()  # claimed runs' logs, for the load that follows
        self._check_file()
        self._refuse_foreign()

    # -- connections ------------------------------------------------------

    def _check_file(self) -> None:
        """Refuse what cannot be a database file, without opening it.

        Only SQLite opens the file (see :meth:`_refuse_foreign`, which tells a file that
        is not SQLite). On Linux, closing *any* descriptor of a file drops every POSIX
        lock this process holds on it, those of its live SQLite connections included:
        a second store of the same file in this process that read the header with
        ``open()`` let another process, closing its last connection, delete the -wal and
        -shm under this one's ("disk I/O error", commits lost). SQLite itself keeps such
        descriptors open until the process's last connection to the file closes."""
        if self.path == ":memory:":
            raise StoreError("an in-memory SQLite store cannot be shared; give a file path")
        if os.path.isdir(self.path):  # a stat: no descriptor
            raise NotATetherDatabase(
                f"{self.path} is a directory, not a tether database; give a file path"
            )

    def _released(self) -> None:
        """As a writer lets go of the lock, before the file lock (see Checkpointer): the
        WAL's tail copied when the thread asked, and the thread told of rows changed (a
        transaction that changed none, such as opening a store whose schema is current,
        starts no thread). Every write of a process goes through its writer connection,
        which each write opens anew in a forked child."""
        conn = self._wconn
        if conn is None:
            return
        if self._checkpointer.tail_wanted and not conn.in_transaction:
            self._checkpointer.copy_tail(conn)
        if conn.total_changes != self._changes:
            self._changes = conn.total_changes
            self._checkpointer.wrote()

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """A reading connection for the time of one read (or read transaction).

        Connections are pooled, not kept per thread: a program whose threads come and go
        (LangGraph's executor makes new ones for each invocation, a server's thread pool)
        would otherwise open a connection in each thread and keep it, and its descriptors,
        until the store closes. The last connection returned is the next lent (its page
        cache is the warmest); at most ``IDLE_READERS`` wait idle. A read that raised
        gives its connection up: it may have left a statement active, and with it a read
        transaction that would show later reads the database as it was then."""
        with self._lock:
            if self._rpid != os.getpid():  # a forked child: never use the parent's
                self._idle, self._rpid = [], os.getpid()
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._connect()
        try:
            yield conn
        except BaseException:
            self._discard(conn)
            raise
        with self._lock:
            if len(self._idle) < IDLE_READERS and conn in self._all:
                self._idle.append(conn)
                return
        self._discard(conn)

    def _writer(self) -> sqlite3.Connection:
        """The connection every write of this process goes through (hold ``_writing``).

        Writes take turns anyway, so one connection loses nothing, and its page cache
        stays valid from one write to the next (a write through another connection would
        make it re-read its pages: 74 page reads per queued run at concurrency 8, 3 with
        the one writer).
        """
        conn = self._wconn
        if conn is None or self._wpid != os.getpid():  # a forked child opens its own
            conn = self._wconn = self._connect()
            self._wpid = os.getpid()
        return conn

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                timeout=self.busy_timeout,
                check_same_thread=False,
            )
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            self._wal(conn)
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
            if self._checkpointer.enabled:
                conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT}")
        except sqlite3.DatabaseError as e:
            raise self._translate(e) from None
        with self._lock:
            self._all.append(conn)
        return conn

    def _wal(self, conn: sqlite3.Connection) -> None:
        """Switch to WAL. Several processes creating the file at once can find it locked
        (this pragma does not wait on the busy handler): retry until the busy timeout."""
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _refuse_foreign(self) -> None:
        """Refuse a file that is not SQLite, or another program's SQLite file, before
        writing anything to it (read-only, through SQLite: see _check_file)."""
        if not os.path.exists(self.path) or os.path.getsize(self.path) == 0:
            return
        uri = f"file:{urllib.parse.quote(os.path.abspath(self.path))}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout)
            try:
                tables = {r[0] for r in conn.execute(_Q["schema_tables"])}
            finally:
                conn.close()
        except sqlite3.DatabaseError as e:
            if _code(e) == _NOTADB:
                raise NotATetherDatabase(
                    f"{self.path} is not a tether database (not a SQLite file). Check the "
                    f"path; tether never writes to a file it did not create."
                ) from None
            raise self._translate(e) from None
        if tables and "tether_meta" not in tables:
            raise NotATetherDatabase(
                f"{self.path} is a SQLite database of another program (tables: "
                f"{', '.join(sorted(tables)[:5])}); tether will not write to it. "
                f"Give tether its own file."
            )

    def _fault(self, e: Exception, where: str) -> TetherError | None:
        """The tether error of an exception that escaped a store method (see translated).

        (A reading connection that raised was given up already: see _reading.)"""
        if isinstance(e, sqlite3.Error):
            return self._translate(e, where)
        return data_fault(e, f"{self.path}: {where}")

    def _translate(self, e: sqlite3.Error, where: str = "") -> StoreError:
        """SQLite's error as tether's: what happened, where, and what to do."""
        code, msg = _code(e), str(e)
        at = f"{self.path}{f' ({where})' if where else ''}"
        if code == _FULL:
            folder = os.path.dirname(os.path.abspath(self.path))
            return StoreFull(
                f"{at}: the disk is full, or the database reached its size limit ({msg}); "
                f"nothing of this write was stored. Free space on the file system of {folder} "
                f"(df -h {folder}): runs paused by it go on, and workers retry on their own."
            )
        if code in (_CORRUPT, _NOTADB) or "malformed" in msg:
            return NotATetherDatabase(
                f"{at} is corrupt or not a SQLite database ({msg}). Restore it from a "
                f"backup; tether did not write to it."
            )
        if code in (_BUSY, _LOCKED) or "locked" in msg:
            return StoreUnavailable(
                f"{at} stayed locked by another process for {self.busy_timeout}s "
                f"({msg}); retry, or raise busy_timeout."
            )
        if code == _CANTOPEN:
            return StoreError(
                f"{at}: {msg}: check that the folder of {self.path} exists and that this "
                f"process may read and write it (SQLite creates -wal and -shm files there)."
            )
        if code in (_IOERR, _NOMEM):
            return StoreUnavailable(
                f"{at}: {msg}: the file system refused a read or write. Check the disk and the "
                f"permissions of {self.path} and of its -wal and -shm files; tether retries."
            )
        if code == _READONLY:
            return StoreError(
                f"{at}: {msg}: give this process write access to {self.path}, its -wal and "
                f"-shm files and their directory."
            )
        if msg.startswith("Could not decode to UTF-8"):
            return CorruptRecord(
                f"{at}: a stored row cannot be read: {msg}. It holds text that is not UTF-8, "
                f"written by another program or damaged; restore the database from a backup "
                f"(tether did not change it)."
            )
        return StoreError(f"{at}: {msg}")

    def _rollback(self, conn: sqlite3.Connection) -> None:
        """Roll back what is left of a failed transaction. SQLite may have rolled it back
        already (a full disk, an I/O error): a ROLLBACK then fails with "no transaction
        is active" and would hide the real error. A connection that cannot roll back is
        closed, so that the next write opens a fresh one instead of failing with "cannot
        start a transaction within a transaction"."""
        if not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error as e:
            log.warning("%s: a failed transaction could not roll back (%s)", self.path, e)
            self._discard(conn)

    def _discard(self, conn: sqlite3.Connection) -> None:
        """Close a connection left in an unusable state; the next use opens another."""
        if conn is self._wconn:
            self._wconn = None
        with self._lock:
            if conn in self._all:
                self._all.remove(conn)
            if conn in self._idle:
                self._idle.remove(conn)
        with suppress(sqlite3.Error):
            conn.close()

    # -- the hooks of SqlStore ----------------------------------------------

    def _for_read(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._reading()

    def _run_row(self, conn: sqlite3.Connection, run_id: str) -> RunRecord | None:
        row = conn.execute(_Q["get_run"], (run_id,)).fetchone()
        return _record(row) if row is not None else None

    def _run_rows(
        self,
        conn: sqlite3.Connection,
        name: str,
        params: Mapping[str, Any],
        *,
        sql: str | None = None,
    ) -> list[RunRecord]:
        return [_record(r) for r in conn.execute(sql or _Q[name], params)]

    def _range(self, run_id: str, after: int, upto: int | None) -> dict[str, Any]:
        return _range(run_id, after, upto if upto is not None else _MAX_SEQ)

    def _id_list(self, ids: Sequence[str]) -> str:
        return json.dumps(list(ids))  # one parameter, whatever the count (json_each)
