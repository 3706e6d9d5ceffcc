"""How SQLite writers take turns, and the thread that copies the WAL beside them.

:class:`WriterLock`: one writer at a time, threads on a lock and processes on ``flock(2)``
of ``<db>-lock``. :class:`Checkpointer`: the WAL copied into the database file by a thread
of the store, outside the writers' lock.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable
from contextlib import suppress

try:
    import fcntl
except ImportError:  # Windows: writers queue on SQLite's busy handler alone
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("tether.sqlite")

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


class WriterLock:
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


class Checkpointer:
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


_CHECKPOINTERS: weakref.WeakSet[Checkpointer] = weakref.WeakSet()


_FORKING: list[Checkpointer] = []  # those whose thread a fork in progress holds


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
