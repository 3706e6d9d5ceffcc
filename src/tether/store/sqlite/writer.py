"""The SQLite backend's writes: one write transaction at a time, and the group commit of
appends (a leader commits every append queued meanwhile), the hot path of a step.

Writers take turns on a lock, and processes on ``flock(2)`` of ``<db>-lock`` beside the
file (see :class:`tether.store.sqlite.locks.WriterLock`), with SQLite's busy timeout
behind it. An append alone is one statement (autocommit); appends posted without waiting
(a worker run's final event) ride this process's next write transaction.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from tether.errors import Conflict, EncodeError, NotFound, TetherError
from tether.model.events import NewEvent
from tether.store.faults import data_fault
from tether.store.records import EffectWrite, SignalTake, Snapshot, Transition
from tether.store.sqlite.connections import _Q, SQLiteConnections, log

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


class Job:
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


class SQLiteWriter(SQLiteConnections):
    """The write transactions of a SQLite store, and its appends (group commit)."""

    def __init__(
        self, path: str, *, synchronous: str = "normal", busy_timeout: float = 10.0
    ) -> None:
        self._queued: list[Job] = []  # appends waiting for a transaction (group commit)
        self._posted: list[Job] = []  # appends made with wait=False, not yet written
        self._queueing = threading.Lock()  # guards both lists
        super().__init__(path, synchronous=synchronous, busy_timeout=busy_timeout)

    @contextmanager
    def _tx(self, immediate: bool = True) -> Iterator[sqlite3.Connection]:
        if not immediate:
            yield from self._tx_unlocked(False)
            return
        # SQLite has one writer: writers queue on WriterLock, not on the busy handler.
        with self._writing:
            yield from self._tx_unlocked(True)

    def _tx_unlocked(self, immediate: bool) -> Iterator[sqlite3.Connection]:
        """One transaction, which writes this process's queued appends first (a write;
        a read transaction is on a borrowed reading connection)."""
        if immediate:
            yield from self._tx_on(self._writer(), True)
        else:
            with self._reading() as conn:
                yield from self._tx_on(conn, False)

    def _tx_on(self, conn: sqlite3.Connection, immediate: bool) -> Iterator[sqlite3.Connection]:
        """The transaction on ``conn``. Whatever fails in it, it is rolled back and the
        connection left usable; the queued appends that did not fail on their own queue
        again."""
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

    def _for_write(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._tx()

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._tx()

    # -- group commit: appends that wait for a transaction of this process ------

    def _append_waiting(self, job: Job) -> int:
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

    def _withdraw(self, job: Job) -> bool:
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

    def _take_jobs(self) -> list[Job]:
        """The queued and posted appends, for the transaction that begins."""
        with self._queueing:
            jobs, self._queued, self._posted = [*self._queued, *self._posted], [], []
        return jobs

    def _write_jobs(self, conn: sqlite3.Connection, jobs: list[Job]) -> None:
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

    def _own_fault(self, e: Exception, job: Job) -> TetherError | None:
        """The error of an append that failed on its own (refused, or a value that cannot
        be sent), or None when the failure is the transaction's."""
        if isinstance(e, Conflict | NotFound | EncodeError):  # LeaseLost is a Conflict
            return e
        if isinstance(e, sqlite3.Error):
            return None
        return data_fault(e, f"{self.path}: append (run {job.args[0]!r})")

    def _finish(self, jobs: list[Job]) -> None:
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

    def _requeue(self, jobs: list[Job], failed: Exception | None = None) -> None:
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

    # -- the log ----------------------------------------------------------

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
        job = Job((run_id, events, expected_seq, epoch, transition, snapshot, writes, now), wait)
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
