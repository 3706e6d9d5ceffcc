"""The embedded SQLite backend (stdlib ``sqlite3``).

WAL journal, ``synchronous=NORMAL`` by default (``FULL`` on request), writes in
``BEGIN IMMEDIATE`` so that concurrent writers wait instead of failing
mid-transaction, one connection per thread. Writers take turns on a lock, and
processes on ``flock(2)`` of ``<db>-lock`` beside the file (see _WriterLock), with
SQLite's busy timeout behind it. Safe for several processes on one machine. A thread
of the store copies the WAL into the database file beside the writers (see
_Checkpointer).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sqlite3
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: writers queue on SQLite's busy handler alone
    fcntl = None  # type: ignore[assignment]

from tether.errors import (
    Conflict,
    CorruptRecord,
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
from tether.store.prefetch import Prefetched
from tether.store.queries import load_queries, migrations

_Q = load_queries("sqlite")
_MIGRATIONS = migrations("sqlite")
SCHEMA_VERSION = _MIGRATIONS[-1][0]
_RUN_FIELDS = frozenset(RunRecord.__dataclass_fields__)
log = logging.getLogger("tether.sqlite")
# SQLite's primary result codes (sqlite3.h), as tether translates them (_translate)
_BUSY, _LOCKED, _NOMEM, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = (
    5, 6, 7, 8, 10, 11, 13, 14, 26
)  # fmt: skip
# An append's arguments: (run_id, events, expected_seq, epoch, transition, snapshot,
# writes, now).
_Args = tuple[
    str,
    Sequence[NewEvent],
    int,
    int,
    "Transition | None",
    "Snapshot | None",
    Sequence["EffectWrite | SignalTake"],
    float,
]


class _Job:
    """An append queued for a write transaction of this process."""

    __slots__ = ("args", "done", "error", "seq", "single", "waiting")

    def __init__(self, args: _Args, waiting: bool) -> None:
        self.args = args
        self.waiting = waiting  # a thread waits for its commit (else: posted)
        _, events, _, _, transition, snapshot, writes, _ = args
        # only events: one statement, which fails whole before writing anything
        self.single = bool(events) and transition is None and snapshot is None and not writes
        self.seq = 0
        self.error: Exception | None = None
        self.done = False


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

# While writes go on, the checkpointer copies the WAL into the database at most this
# often (seconds); at 2,500 runs/s a lone worker adds about 600 frames in that time.
CHECKPOINT_EVERY = 0.01
# Frames of a page (4 KB): once the WAL is this long, the next writer copies its tail
# before it lets go of the writer lock (commits one after another never find the WAL
# all copied, which it must be for a writer to start it over); ~8 MB
WAL_RESTART = 2000
# A commit that leaves the WAL longer than this checkpoints itself, as SQLite does past
# 1,000 by default: the bound where a process (another program, an older tether) has
# no checkpointer; ~16 MB. With synchronous=FULL, SQLite's 1,000 and no thread
WAL_AUTOCHECKPOINT = 4000


def _range(run_id: str, after: int, upto: int) -> dict[str, Any]:
    return {"id": run_id, "after": max(0, after), "upto": min(upto, _MAX_SEQ)}


class _WriterLock:
    """One writer at a time, handed over in microseconds.

    SQLite lets one connection write; the others wait on its busy handler, which polls
    and sleeps 1, 2, 5, 10… milliseconds between tries, so writers that take turns every
    hundred microseconds spend most of their time asleep. Here the threads of a process
    queue on a lock, and processes on ``flock(2)`` of a file beside the database
    (``<db>-lock``), which the kernel hands to the next waiter as soon as it is released.
    Correctness never depends on it: without the file (a read-only directory, a system
    without ``flock``, the file deleted under a running process) writers fall back to the
    busy handler, slower but as safe. Reentrant, like the lock it wraps.

    A writer waits for the lock as long as another tether process writes, with no
    timeout: its holder only runs tether's own statements (a step's append, a claim, a
    gc's VACUUM), so the wait ends when they do, where the busy handler would give up
    after ``busy_timeout`` and fail the write. A process stopped while it writes (a
    debugger, SIGSTOP) holds the other writers until it goes on or exits; the kernel
    releases the lock of a process that exits, however it dies.
    """

    def __init__(self, db_path: str) -> None:
        self._db = db_path
        self.on_release: Callable[[], None] = lambda: None  # as the outermost hold ends
        self._path = f"{db_path}-lock"
        self._threads = threading.RLock()
        self._depth = 0
        self._fd: int | None = None  # -1: no file lock here
        self._pid = 0

    def _file(self) -> int:
        if self._fd is None or self._pid != os.getpid():  # a forked child needs its own
            try:
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError:
                self._fd = -1
            else:  # whoever may write the database may take turns: its mode, like -wal's
                with suppress(OSError):
                    db_mode = os.stat(self._db).st_mode & 0o666
                    if os.fstat(self._fd).st_mode & 0o666 != db_mode:
                        os.fchmod(self._fd, db_mode)
            self._pid = os.getpid()
        return self._fd

    def __enter__(self) -> None:
        self._threads.acquire()
        if self._depth == 0 and fcntl is not None:
            fd = self._file()
            if fd >= 0:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except BaseException:
                    self._threads.release()
                    raise
        self._depth += 1

    @property
    def threads(self) -> threading.RLock:
        """The lock this process's threads take turns on (without the file lock)."""
        return self._threads

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        try:
            if self._depth == 0:
                try:
                    self.on_release()
                finally:
                    if fcntl is not None and self._fd is not None and self._fd >= 0:
                        fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def close(self) -> None:
        with self._threads:
            if self._fd is not None and self._fd >= 0 and self._pid == os.getpid():
                os.close(self._fd)
            self._fd = None


class _Checkpointer:
    """Copies the WAL into the database file beside the writers, in a thread of its own.

    SQLite checkpoints in the commit that takes the WAL past ``wal_autocheckpoint``
    frames: that commit writes every page changed since the last checkpoint into the
    database file and syncs both files, while it holds the writer lock (tether's, and
    SQLite's), so every other writer of the file, in this process or another, waits
    for it. Here a thread runs a PASSIVE checkpoint (it never waits for readers or
    writers, and they never wait for it) at most every ``CHECKPOINT_EVERY`` seconds
    while this process writes, and sleeps while it does not.

    Commits that follow each other never find the WAL all copied, and SQLite starts
    the WAL over only then: once it is ``WAL_RESTART`` frames long, the thread asks for
    its tail (what came since its last pass), which the next writer copies before it
    lets go of the writer lock (:meth:`copy_tail`), and the writer after it starts the
    WAL over. The commits' own checkpoint stays as a bound (``WAL_AUTOCHECKPOINT``).

    Only with ``synchronous=NORMAL``, where a commit syncs nothing and the checkpoint's
    syncs were the only ones on the commit path. With ``FULL`` every commit syncs the WAL
    already, and the thread's syncs, competing with them for the disk, cost more than
    they saved (a step of a 1,000-step run: 213 µs with SQLite's own checkpoints, 296
    with the thread): there, SQLite checkpoints in its commits, as it does by default.

    Started by the first write of a process. A fork waits for the checkpoint in
    progress (SQLite's locks, held by the thread inside it, would stay locked in the
    child forever), and the child, which has no thread, starts its own at its first
    write (the fork hooks below).
    Durability does not depend on it: a committed transaction is in the WAL whether
    or not it was copied.
    """

    def __init__(self, path: str, *, enabled: bool = True) -> None:
        self._path = path
        self.enabled = enabled
        self._fresh()
        self.checkpoints = 0  # PASSIVE checkpoints run (for tests and diagnostics)
        _CHECKPOINTERS.add(self)

    def _fresh(self, *, stopped: bool = False) -> None:
        """New locks and events, and no thread (at creation, and in a forked child)."""
        self._guard = threading.Lock()  # starting and stopping
        self._busy = threading.Lock()  # held by the thread while it calls SQLite
        self._wrote = threading.Event()
        self._stop = threading.Event()
        if stopped:
            self._stop.set()
        self._thread: threading.Thread | None = None  # in this process
        self.tail_wanted = False  # the next writer copies the WAL's tail (copy_tail)

    def wrote(self) -> None:
        """A write transaction of this process committed (or rolled back)."""
        if not self.enabled:
            return
        if self._thread is None:
            self._start()
        if not self._wrote.is_set():
            self._wrote.set()

    def _start(self) -> None:
        with self._guard:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(
                target=self._loop, name="tether-wal-checkpoint", daemon=True
            )
            self._thread.start()

    def _loop(self) -> None:
        with self._busy:
            try:
                conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            except sqlite3.Error as e:  # the commits' own checkpoints bound the WAL
                log.warning("%s: no WAL checkpoint thread (%s)", self._path, e)
                return
        try:
            while True:
                self._wrote.wait()
                if self._stop.is_set():
                    return
                self._wrote.clear()
                if not self.tail_wanted:  # else a writer is about to copy the rest
                    try:
                        with self._busy:
                            length = _checkpoint(conn)
                        self.checkpoints += 1
                        self.tail_wanted = length >= WAL_RESTART
                    except sqlite3.Error as e:  # a full disk, say: next time
                        log.debug("%s: WAL checkpoint: %s", self._path, e)
                if self._stop.wait(CHECKPOINT_EVERY):
                    return
        finally:
            with self._busy:
                conn.close()

    def copy_tail(self, conn: sqlite3.Connection) -> None:
        """Under the writer lock, on the writer's connection, when ``tail_wanted``: copy
        what the thread has not, so that the next writer starts the WAL over."""
        try:
            _checkpoint(conn)
        except sqlite3.Error as e:  # the thread asks again after its next pass
            log.debug("%s: WAL checkpoint: %s", self._path, e)
        self.tail_wanted = False

    def paused(self) -> threading.Lock:
        """Held, the thread runs no checkpoint (it waits for the one in progress)."""
        return self._busy

    def stop(self) -> threading.Thread | None:
        """Tell the thread to end, without waiting; the thread (to join), if any."""
        with self._guard:
            self._stop.set()
            thread, self._thread = self._thread, None
        self._wrote.set()
        return thread

    def close(self) -> None:
        """Stop the thread (after the checkpoint in progress, if any)."""
        thread = self.stop()
        if thread is not None:
            thread.join()


def _checkpoint(conn: sqlite3.Connection) -> int:
    """A PASSIVE checkpoint: copy what the WAL holds and no reader still needs into the
    database file. Returns the WAL's length in frames (-1 when another was running)."""
    row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(row[1]) if row is not None else -1


_CHECKPOINTERS: weakref.WeakSet[_Checkpointer] = weakref.WeakSet()


_FORKING: list[_Checkpointer] = []  # those whose thread a fork in progress holds


def _before_fork() -> None:
    _FORKING[:] = _CHECKPOINTERS
    for c in _FORKING:
        c._busy.acquire()


def _after_fork_in_parent() -> None:
    for c in _FORKING:
        c._busy.release()
    _FORKING.clear()


def _after_fork_in_child() -> None:
    for c in _FORKING:
        c._fresh(stopped=c._stop.is_set())
    _FORKING.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )


@translated
class SQLiteStore(ContextRows):
    """A :class:`tether.store.Store` on one SQLite file."""

    dialect = "sqlite"
    concurrent_claims = False  # a claim is a write transaction of its own (see Store)
    # never called: a posted append that failed is queued again for the next transaction
    unwritten_end: Callable[[str, int], None] | None = None

    def __init__(
        self, path: str, *, synchronous: str = "normal", busy_timeout: float = 10.0
    ) -> None:
        if synchronous.lower() not in ("normal", "full"):
            raise ValueError(f"synchronous must be 'normal' or 'full', not {synchronous!r}")
        self.path = path
        self.synchronous = synchronous.upper()
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()  # guards only the list of connections, never a query
        self._writing = _WriterLock(path)  # one writer at a time (see _tx)
        self._checkpointer = _Checkpointer(path, enabled=self.synchronous == "NORMAL")
        self._writing.on_release = self._released
        self._changes = 0  # the writer connection's total_changes when last seen
        # a store dropped without close() ends its thread (which holds the checkpointer,
        # not the store); close() waits for it
        weakref.finalize(self, self._checkpointer.stop)
        self._wconn: sqlite3.Connection | None = None  # the writer's, under _writing
        self._wpid = 0
        self._prefetched = Prefetched()  # claimed runs' logs, for the load that follows
        self._queued: list[_Job] = []  # appends waiting for a transaction (group commit)
        self._posted: list[_Job] = []  # appends made with wait=False, not yet written
        self._queueing = threading.Lock()  # guards both lists
        self._check_file()
        self._refuse_foreign()
        self._migrate()

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
        """As a writer lets go of the lock, before the file lock (see _Checkpointer): the
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

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

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
                tables = {
                    r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
                }
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

        This thread's reading connection is replaced: a read that failed half-way (a row
        that cannot be decoded) leaves its statement active, and with it a read transaction
        that would show every later read of the thread the database as it was then."""
        reader = getattr(self._local, "conn", None)
        if reader is not None:
            self._discard(reader)
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

    @contextmanager
    def _tx(self, immediate: bool = True) -> Iterator[sqlite3.Connection]:
        if not immediate:
            yield from self._tx_unlocked(False)
            return
        # SQLite has one writer: writers queue on _WriterLock, not on the busy handler.
        with self._writing:
            yield from self._tx_unlocked(True)

    def _tx_unlocked(self, immediate: bool) -> Iterator[sqlite3.Connection]:
        """One transaction, which writes this process's queued appends first (a write).
        Whatever fails in it, it is rolled back and the connection left usable; the
        queued appends that did not fail on their own queue again."""
        conn = self._writer() if immediate else self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
        except sqlite3.Error as e:
            raise self._translate(e) from None
        jobs = self._take_jobs() if immediate else []
        try:
            self._write_jobs(conn, jobs)
            yield conn
        except BaseException:
            self._rollback(conn)
            self._requeue(jobs)
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            self._rollback(conn)
            err = self._translate(e)
            self._requeue(jobs, failed=err)
            raise err from None
        self._finish(jobs)

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
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            if conn in self._all:
                self._all.remove(conn)
        with suppress(sqlite3.Error):
            conn.close()

    # -- group commit: appends that wait for a transaction of this process ------

    def _append_waiting(self, job: _Job) -> int:
        """Commit an append, with every other append of this process that queued while
        another thread or process wrote: a leader (whoever gets the writer lock first)
        commits the queue in one transaction, and its followers, when they get the
        lock, find theirs committed. Alone, an append of events is one statement.

        When the transaction fails as a whole (a full disk), the leader's append leaves the
        queue with the error, and each follower, finding its own not done, leads the next
        try and meets the error itself: a thread told that its append failed is never
        committed later."""
        with self._queueing:
            self._queued.append(job)
        with self._writing.threads:
            if not job.done:
                try:
                    self._commit_queued()
                except BaseException:
                    if self._withdraw(job):
                        raise
        if job.error is not None:
            raise job.error
        return job.seq

    def _withdraw(self, job: _Job) -> bool:
        """Take a job that is not done out of the queue (with the writer lock held, no
        transaction has it); whether it was not done."""
        with self._queueing:
            if job in self._queued:
                self._queued.remove(job)
        return not job.done

    def _commit_queued(self) -> None:
        with self._writing:
            with self._queueing:
                alone = len(self._queued) == 1 and self._queued[0].single
                if alone:
                    job = self._queued.pop()
            if not alone:
                with self._tx():
                    return
            try:  # autocommit: one statement, its own transaction
                job.seq = self._append_rows(self._writer(), *job.args[:4])
            except TetherError as e:
                job.error = e
            job.done = True

    def _take_jobs(self) -> list[_Job]:
        """The queued and posted appends, for the transaction that begins."""
        with self._queueing:
            jobs, self._queued, self._posted = [*self._queued, *self._posted], [], []
        return jobs

    def _write_jobs(self, conn: sqlite3.Connection, jobs: list[_Job]) -> None:
        """Write the queued appends into this transaction. One refused (a lost lease, a
        taken seq, a value the driver cannot send) gets its error and writes nothing (in a
        savepoint when it has more than its events' one statement), and the others go on.
        Any other failure (a full disk) fails the transaction: it is raised."""
        for job in jobs:
            if not job.single:
                conn.execute("SAVEPOINT job")
            try:
                job.seq = self._write(conn, job.args)
            except Exception as e:
                own = self._own_fault(e, job)
                if own is None or not conn.in_transaction:
                    raise
                if not job.single:
                    conn.execute("ROLLBACK TO job")
                job.error = own
            if not job.single:
                conn.execute("RELEASE job")

    def _own_fault(self, e: Exception, job: _Job) -> TetherError | None:
        """The error of an append that failed on its own (refused, or a value that cannot
        be sent), or None when the failure is the transaction's."""
        if isinstance(e, Conflict | NotFound | EncodeError):  # LeaseLost is a Conflict
            return e
        if isinstance(e, sqlite3.Error):
            return None
        return data_fault(e, f"{self.path}: append (run {job.args[0]!r})")

    def _finish(self, jobs: list[_Job]) -> None:
        """The transaction that wrote ``jobs`` committed."""
        for job in jobs:
            job.done = True
            if job.error is not None and not job.waiting:
                log.warning(  # as on PostgreSQL (see PostgresStore._posted_failed)
                    "run %s: its final event was not committed (%s); it will be written "
                    "again when the run is claimed after its lease expires",
                    job.args[0],
                    str(job.error).splitlines()[0],
                )

    def _requeue(self, jobs: list[_Job], failed: Exception | None = None) -> None:
        """The transaction that wrote ``jobs`` rolled back: the refused ones are done, the
        others queue again — or, when its commit ``failed``, the waiting ones fail."""
        again = [j for j in jobs if j.error is None and not (failed and j.waiting)]
        for job in jobs:
            if job not in again:
                job.error = job.error or failed
        self._finish([j for j in jobs if j not in again])
        with self._queueing:
            self._queued[:0] = [j for j in again if j.waiting]
            self._posted[:0] = [j for j in again if not j.waiting]

    def close(self) -> None:
        """Close every connection this store opened (after committing the appends posted
        without waiting)."""
        try:
            self.flush()
        except TetherError as e:  # each posted append is written again when its run resumes
            log.warning("%s: posted appends not committed at close: %s", self.path, e)
        self._checkpointer.close()
        with self._lock:
            conns, self._all = self._all, []
        for c in conns:
            c.close()
        self._local = threading.local()
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
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "tether_meta" not in tables:
            if tables:
                raise NotATetherDatabase(
                    f"{self.path} is a SQLite database of another program (tables: "
                    f"{', '.join(sorted(tables)[:5])}); tether will not write to it. "
                    f"Give tether its own file."
                )
            return 0
        row = conn.execute("SELECT value FROM tether_meta WHERE key='schema_version'").fetchone()
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
        conn.execute(
            "INSERT INTO tether_meta (key, value) VALUES ('schema_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(number),),
        )

    def schema_version(self) -> int:
        """The schema version of the open database."""
        row = (
            self._conn()
            .execute("SELECT value FROM tether_meta WHERE key='schema_version'")
            .fetchone()
        )
        return schema_number(row[0], self.path)

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
        with self._tx() as conn:
            self._insert_run(conn, run, events, lease_owner=lease_owner, now=now, ttl=ttl)
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
    ) -> None:
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
        }
        try:
            conn.execute(_Q["insert_run"], params)
        except sqlite3.IntegrityError:
            raise Conflict(f"a run with id {run.id!r} already exists") from None
        conn.executemany(
            _Q["insert_event"],
            [
                {
                    "id": run.id,
                    "seq": i,
                    "type": e.type,
                    "data": e.data,
                    "at": e.at,
                    "actor": e.actor,
                }
                for i, e in enumerate(events, 1)
            ],
        )

    def get_run(self, run_id: str) -> RunRecord:
        row = self._conn().execute(_Q["get_run"], (run_id,)).fetchone()
        if row is None:
            raise NotFound(f"no run {run_id!r} in {self.path}; `tether runs` lists the runs")
        return _record(row)

    def list_runs(
        self, *, status: str | None = None, agent: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        rows = self._conn().execute(
            _Q["list_runs"], {"status": status, "agent": agent, "limit": limit}
        )
        return [_record(r) for r in rows]

    # -- the log ----------------------------------------------------------

    def load(self, run_id: str, *, upto: int | None = None) -> Loaded:
        if upto is None:
            prefetched = self._prefetched.take(run_id)
            if prefetched is not None:
                return prefetched
        with self._tx(immediate=False) as conn:
            return self._read(conn, run_id, upto)

    def _read(self, conn: sqlite3.Connection, run_id: str, upto: int | None) -> Loaded:
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

    def read_events(self, run_id: str, *, after: int = 0, upto: int | None = None) -> list[Event]:
        limit = upto if upto is not None else _MAX_SEQ
        rows = self._conn().execute(_Q["read_events"], _range(run_id, after, limit))
        return [_event(tuple(r)) for r in rows]

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
        _sendable(run_id, events, snapshot, writes)  # before any transaction: see _sendable
        if wait and events and transition is None and snapshot is None and not writes:
            threads = self._writing.threads
            if threads.acquire(blocking=False):  # no writer in this process: no queue
                try:
                    if not self._queued:
                        with self._writing:  # autocommit: one statement, one commit
                            return self._append_rows(
                                self._writer(), run_id, events, expected_seq, epoch
                            )
                finally:
                    threads.release()
        job = _Job((run_id, events, expected_seq, epoch, transition, snapshot, writes, now), wait)
        if wait:
            return self._append_waiting(job)
        # Posted: written by this process's next write transaction (a worker's next claim),
        # saving a commit per run; flush() writes it at once.
        with self._queueing:
            self._posted.append(job)
        return expected_seq + len(events)

    def _write(self, conn: sqlite3.Connection, args: _Args) -> int:
        """An append's statements, in the caller's transaction."""
        run_id, events, expected_seq, epoch, transition, snapshot, writes, now = args
        seq = expected_seq
        if events:
            seq = self._append_rows(conn, run_id, events, expected_seq, epoch)
        else:
            self._check_epoch(conn, run_id, epoch)
        if transition is not None:
            self._transition(conn, run_id, transition, now)
        for w in writes:
            self._side_write(conn, w, now)
        if snapshot is not None:
            self._put_snapshot(conn, snapshot)
        return seq

    def _append_rows(
        self,
        conn: sqlite3.Connection,
        run_id: str,
        events: Sequence[NewEvent],
        expected_seq: int,
        epoch: int,
    ) -> int:
        """Append ``events`` in one statement: all of them or none (autocommit: one
        commit). Each statement a thread runs hands the GIL to another, so fewer is
        faster with several runs in flight."""
        if len(events) == 1:
            return self._append_one(conn, run_id, events[0], expected_seq + 1, epoch)
        params: list[Any] = []
        for n, e in enumerate(events, expected_seq + 1):
            params += (n, e.type, e.data, e.at, e.actor)
        params += (run_id, epoch, expected_seq + 1, expected_seq + 1)
        last = expected_seq + len(events)
        return self._insert(
            conn, _append_many(len(events)), params, run_id, expected_seq + 1, epoch, last
        )

    def _append_one(
        self, conn: sqlite3.Connection, run_id: str, e: NewEvent, seq: int, epoch: int
    ) -> int:
        params = {
            "id": run_id,
            "seq": seq,
            "type": e.type,
            "data": e.data,
            "at": e.at,
            "actor": e.actor,
            "epoch": epoch,
        }
        return self._insert(conn, _Q["append_event"], params, run_id, seq, epoch, seq)

    def _insert(
        self,
        conn: sqlite3.Connection,
        sql: str,
        params: Any,
        run_id: str,
        seq: int,
        epoch: int,
        last: int,
    ) -> int:
        try:
            cur = conn.execute(sql, params)
        except sqlite3.IntegrityError:
            raise Conflict(
                f"run {run_id}: seq {seq} was already appended by another writer; "
                f"reload the run and try again"
            ) from None
        except sqlite3.OperationalError as err:
            raise self._translate(err) from None
        if cur.rowcount == 0:
            raise self._refused(conn, run_id, epoch, seq)
        return last

    def _check_epoch(self, conn: sqlite3.Connection, run_id: str, epoch: int) -> None:
        row = conn.execute(_Q["get_run"], (run_id,)).fetchone()
        if row is None or row["epoch"] != epoch:
            raise self._refused(conn, run_id, epoch)

    def _put_snapshot(self, conn: sqlite3.Connection, snapshot: Snapshot) -> None:
        conn.execute(
            _Q["insert_snapshot"], (snapshot.run_id, snapshot.seq, snapshot.data, snapshot.at)
        )

    def flush(self, *, wait: bool = True) -> None:
        """Commit the appends posted without waiting (a worker run's final events). They
        wait for this process's next write transaction, so ``wait=False`` commits them
        too."""
        if self._posted:
            with self._tx():
                pass

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Cache a folded state (a snapshot at a seq is always the same state)."""
        with self._tx() as conn:
            self._put_snapshot(conn, snapshot)

    def put_blobs(
        self, blobs: Mapping[str, bytes], *, now: float, touch: Sequence[str] = ()
    ) -> None:
        rows = [(digest, len(data), data, now) for digest, data in blobs.items()]
        with self.transaction() as conn:
            conn.executemany(_Q["put_blob"], rows)
            conn.executemany(_Q["touch_blob"], [(now, d, now - TOUCH_AFTER) for d in touch])
            if touch:
                found = conn.execute(_Q["count_blobs"], {"digests": json.dumps(list(touch))})
                check_reused_pages(touch, int(found.fetchone()[0]))

    def sweep_blobs(self, *, before: float, dry_run: bool = False) -> tuple[int, int]:
        with self.transaction() as conn:
            if not conn.execute(_Q["any_old_page"], {"before": before}).fetchone()[0]:
                return 0, 0  # reading every snapshot to find none: skipped
            if dry_run:
                row = conn.execute(_Q["count_sweepable_blobs"], {"before": before}).fetchone()
                return int(row[0]), int(row[1])
            sizes = [r[0] for r in conn.execute(_Q["sweep_blobs"], {"before": before})]
        return len(sizes), sum(sizes)

    def get_blobs(self, digests: Sequence[str]) -> dict[str, bytes]:
        """The stored bytes of these digests (absent ones left out)."""
        out: dict[str, bytes] = {}
        try:
            for digest in digests:
                row = self._conn().execute(_Q["get_blob"], (digest,)).fetchone()
                if row is not None:
                    out[digest] = bytes(row[0])
        except sqlite3.Error as e:
            raise self._translate(e) from None
        return out

    def _transition(self, conn: sqlite3.Connection, run_id: str, t: Transition, now: float) -> None:
        try:
            self._update_status(conn, run_id, t, now)
        except sqlite3.IntegrityError:
            raise Conflict(
                f"run {run_id} cannot become {t.status}: another active run of its queue holds "
                f"the same dedup key; wait for that run to finish"
            ) from None

    def _update_status(
        self, conn: sqlite3.Connection, run_id: str, t: Transition, now: float
    ) -> None:
        conn.execute(
            _Q["update_status"],
            {
                "id": run_id,
                "status": t.status,
                "now": now,
                "release": t.release,
                "available_at": t.available_at,
                "waiting_for": t.waiting_for,
            },
        )

    def _side_write(
        self, conn: sqlite3.Connection, w: EffectWrite | SignalTake, now: float
    ) -> None:
        if isinstance(w, SignalTake):
            if conn.execute(_Q["take_signal"], (w.seq, w.signal_id)).rowcount != 1:
                raise Conflict(f"signal {w.signal_id} was already taken by another wait")
            return
        conn.execute(
            _Q["put_effect"],
            {
                "key": w.key,
                "run_id": w.run_id,
                "position": w.position,
                "tool": w.tool,
                "status": w.status,
                "result": w.result,
                "now": now,
            },
        )

    def _refused(
        self, conn: sqlite3.Connection, run_id: str, epoch: int, seq: int | None = None
    ) -> Exception:
        row = conn.execute(_Q["get_run"], (run_id,)).fetchone()
        if row is None:
            return NotFound(f"no run {run_id!r} in {self.path}")
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
        with self._tx() as conn:
            row = conn.execute(
                _Q["claim"],
                {
                    "id": run_id,
                    "owner": owner,
                    "expires": now + ttl,
                    "now": now,
                    "takeover": takeover,
                },
            ).fetchone()
            if row is None:
                current = conn.execute(_Q["get_run"], (run_id,)).fetchone()
        if row is not None:
            return Lease(run_id, owner, int(row[0]), now + ttl)
        if current is None:
            raise NotFound(f"no run {run_id!r} in {self.path}; `tether runs` lists the runs")
        raise Conflict(
            f"run {run_id} is being executed by {current['lease_owner']} (lease until "
            f"{current['lease_expires']:.3f}); wait for it to finish or for its lease to expire",
        )

    def release(self, run_id: str, *, epoch: int) -> None:
        with self._tx() as conn:
            conn.execute(_Q["release"], (run_id, epoch))

    def renew(self, owner: str, *, ttl: float, now: float) -> int:
        with self._tx() as conn:
            return conn.execute(_Q["renew"], (now + ttl, owner)).rowcount

    # -- effects, signals, audit --------------------------------------------

    def get_effect(self, key: str) -> Effect | None:
        row = self._conn().execute(_Q["get_effect"], (key,)).fetchone()
        return Effect(*row) if row else None

    def send_signal(
        self, run_id: str, name: str, payload: str, *, sender: str | None, now: float
    ) -> bool:
        with self._tx() as conn:
            if conn.execute(_Q["get_run"], (run_id,)).fetchone() is None:
                raise NotFound(f"no run {run_id!r} in {self.path}; `tether runs` lists the runs")
            conn.execute(_Q["insert_signal"], (run_id, name, payload, now, sender))
            woke = conn.execute(
                _Q["wake_for"], {"id": run_id, "waiting_for": f"signal:{name}", "now": now}
            ).rowcount
        return woke == 1

    def pending_signal(self, run_id: str, name: str) -> Signal | None:
        row = self._conn().execute(_Q["pending_signal"], (run_id, name)).fetchone()
        return Signal(*row) if row else None

    def wake(self, run_id: str, waiting_for: str, *, now: float) -> bool:
        with self._tx() as conn:
            n = conn.execute(
                _Q["wake_for"], {"id": run_id, "waiting_for": waiting_for, "now": now}
            ).rowcount
        return n == 1

    def record_audit(
        self, run_id: str | None, action: str, detail: str, *, actor: str | None, now: float
    ) -> None:
        with self._tx() as conn:
            conn.execute(_Q["insert_audit"], (run_id, now, actor, action, detail))

    def read_audit(self, run_id: str) -> list[AuditRecord]:
        return [AuditRecord(*r) for r in self._conn().execute(_Q["read_audit"], (run_id,))]

    def request_cancel(self, run_id: str, *, compensate: bool, now: float) -> None:
        with self._tx() as conn:
            flag = 2 if compensate else 1
            if conn.execute(_Q["request_cancel"], (flag, now, run_id)).rowcount == 0:
                raise NotFound(f"no run {run_id!r} in {self.path}; `tether runs` lists the runs")

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

    def claim_next(
        self, queues: Sequence[QueueLimits], *, owner: str, ttl: float, now: float, capacity: int
    ) -> list[tuple[RunRecord, Lease]]:
        out: list[tuple[RunRecord, Lease]] = []
        with self._tx() as conn:
            for limits in queues:
                if len(out) >= capacity:
                    break
                for run_id in self._pick(conn, limits, now, limits.most(capacity - len(out))):
                    row = conn.execute(
                        _Q["claim_run"],
                        {"id": run_id, "owner": owner, "expires": now + ttl, "now": now},
                    ).fetchone()
                    claimed = self._log(conn, _record(row), _MAX_SEQ)  # the worker loads it next
                    lease = Lease(run_id, owner, claimed.run.epoch, now + ttl)
                    out.append((claimed.run, lease))
                    self._prefetched.put(claimed)
        return out

    def _pick(
        self, conn: sqlite3.Connection, limits: QueueLimits, now: float, capacity: int
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
        rows = conn.execute(
            _Q["claim_candidates"], {"queue": limits.name, "now": now, "scan": scan}
        ).fetchall()
        return pick_within_limits([(r[0], r[1]) for r in rows], running, limits, budget)

    def register_worker(self, worker: WorkerRecord, *, now: float) -> None:
        with self._tx() as conn:
            conn.execute(
                _Q["upsert_worker"],
                {
                    "id": worker.id,
                    "host": worker.host,
                    "pid": worker.pid,
                    "queues": json.dumps(worker.queues),
                    "concurrency": worker.concurrency,
                    "now": now,
                },
            )

    def worker_heartbeat(
        self, worker_id: str, *, ttl: float, now: float
    ) -> tuple[bool, dict[str, int]]:
        with self._tx() as conn:
            conn.execute(_Q["renew"], (now + ttl, worker_id))
            row = conn.execute(_Q["worker_beat"], (now, worker_id)).fetchone()
            cancels = self._cancel_requests(conn, worker_id)
        return bool(row and row[0]), cancels

    def cancel_requests(self, owner: str) -> dict[str, int]:
        return self._cancel_requests(self._conn(), owner)

    @staticmethod
    def _cancel_requests(conn: sqlite3.Connection, owner: str) -> dict[str, int]:
        return {r[0]: int(r[1]) for r in conn.execute(_Q["cancel_requests"], (owner,))}

    def list_workers(self) -> list[WorkerRecord]:
        rows = self._conn().execute(_Q["list_workers"]).fetchall()
        return [WorkerRecord(r[0], r[1], r[2], json.loads(r[3]), *r[4:]) for r in rows]

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

    def set_status(self, run_id: str, transition: Transition, *, now: float) -> None:
        """Change a run's row status without an event (used by repairs and tests)."""
        with self._tx() as conn:
            self._transition(conn, run_id, transition, now)

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

    # -- raw transactions (tether.context.memory, tether.context.artifacts) -------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection inside one ``BEGIN IMMEDIATE`` transaction (see Store)."""
        with translating(self._fault, "transaction"), self._tx() as conn:
            yield conn


def _sendable(
    run_id: str,
    events: Sequence[NewEvent],
    snapshot: Snapshot | None,
    writes: Sequence[EffectWrite | SignalTake],
) -> None:
    """Check that sqlite3 can send an append's text (as UTF-8), in the caller's thread
    before it queues: one that fails inside the group's transaction fails alone, but it
    should not get there. EncodeError naming the run and the field; the codec's text
    always passes (an ASCII str costs O(1))."""
    for e in events:  # the common case, at O(1) a text: every text ASCII
        if not (e.data.isascii() and e.type.isascii()) or (e.actor and not e.actor.isascii()):
            break
    else:
        if run_id.isascii() and snapshot is None and not writes:
            return
    texts: list[tuple[str, str | None]] = [("run id", run_id)]
    for n, e in enumerate(events, 1):
        texts += [(f"event {n}'s type", e.type), (f"event {n}'s data", e.data)]
        texts.append((f"event {n}'s actor", e.actor))
    for w in writes:
        if isinstance(w, EffectWrite):
            texts += [("effect key", w.key), ("effect tool", w.tool), ("effect", w.result)]
    if snapshot is not None:
        texts.append(("snapshot", snapshot.data))
    for what, text in texts:
        if text is not None and not text.isascii():
            try:
                text.encode()
            except UnicodeEncodeError as e:
                raise EncodeError(
                    f"run {run_id}: cannot append: the {what} holds text that is not Unicode "
                    f"({e.reason}: {text[e.start : e.end]!r} at index {e.start}); nothing was "
                    f"written. Encode values with tether.model.codec, which refuses them by path.",
                    type_name="str",
                ) from None


@functools.cache
def _append_many(n: int) -> str:
    """append_event for ``n`` events in one statement (the same fencing and gap checks,
    on the first seq): VALUES rows joined to the run's row, so either every row is
    inserted or, when the token is stale, none."""
    rows = ", ".join(["(?, ?, ?, ?, ?)"] * n)
    return (
        "INSERT INTO events (key, type, data, at, actor) "
        "SELECT (runs.rk << 32) | v.column1, v.column2, v.column3, v.column4, v.column5 "
        f"FROM (VALUES {rows}) AS v, runs "
        "WHERE runs.id = ? AND runs.epoch = ? AND (? = 1 OR EXISTS "
        "(SELECT 1 FROM events WHERE key = (runs.rk << 32) | (? - 1)))"
    )


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


def sqlite_path(url: str) -> str:
    """The file path of ``url``: a plain path, ``sqlite:///rel.db`` or ``sqlite:////abs.db``."""
    if url.startswith("sqlite://"):
        rest = url[len("sqlite://") :]
        path = rest[1:] if rest.startswith("/") else rest
        return path.split("?", 1)[0]
    return os.fspath(url)
