"""Group commit: appends that arrive while one commit is in flight share the next one.

A worker executing many runs at once appends from many threads. Each append
must be durable before its caller goes on, but nothing says each must be a
transaction of its own: while one thread waits for the database to commit,
the appends of the other threads queue up, and the next commit takes them all.
Every caller still returns only after its own write is committed (or refused),
so the durability of a step is unchanged; the database sees one commit, one
round trip and one WAL flush for the batch instead of one per step.

There is no committer thread and no timer (a lone writer pays nothing: its
batch is itself, committed at once). A thread that finds a free *lane* leads:
it takes every queued write, commits them on that lane, hands each its outcome
and steps down; a thread whose write was queued meanwhile either finds it done
or leads the next batch (leader/follower). One lane gives the biggest batches;
a few lanes let the database work on several batches at once (each lane is one
connection, so one server process).

*Lingering.* A batch's commit releases its writers together, and on a worker
they come back together: each runs its next step (they take the GIL one after
another) and writes again. Leading at once, the first of them would commit
alone, and the rest would queue behind it for the next commit. With ``linger``
set, a writer that finds a lane free waits up to that long while writers that
a batch released have not written again, until the queue holds its share of
the writers (those out, queued and in flight, over the lanes: with two lanes,
two cohorts take turns, one committing while the other runs), then leads the
queue in one batch (PostgreSQL's ``commit_delay`` and ``commit_siblings``, here
counted rather than guessed). Such writers that do not come back within ``linger`` (their run
ended, or their next step is slow) stop being waited for. A write nobody waits
for (``post``) never holds its thread for them: the first writer that comes
back takes it over.

The store supplies ``flush(batch, lane)``, which must set an outcome on every
:class:`Pending` it is given (and should isolate one write's failure from the
others: a batch that fails is retried write by write).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from tether.errors import InvalidInput

T = TypeVar("T")
log = logging.getLogger("tether.store")


class Pending(Generic[T]):
    """One queued write and, once its batch is flushed, its outcome."""

    __slots__ = ("done", "error", "gate", "item", "on_error", "result", "signalled", "taken")

    def __init__(self, item: T, on_error: Callable[[BaseException], None] | None = None) -> None:
        self.item = item
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.taken = False  # in a batch that a leader is flushing
        self.on_error = on_error  # set for a posted write: nobody waits for it
        # The thread that waits for this write sleeps on its own gate, a lock held until
        # the write is done or the thread should lead: a batch wakes only its own writers.
        self.gate: threading.Lock | None = None
        self.signalled = False  # the gate was opened and its thread has not woken yet

    def succeed(self, result: Any) -> None:
        self.result, self.done = result, True

    def fail(self, error: BaseException) -> None:
        self.error, self.done = error, True

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


class GroupCommit(Generic[T]):
    """Leader/follower batching of writes from many threads (see the module doc)."""

    def __init__(
        self,
        flush: Callable[[list[Pending[T]], int], None],
        *,
        lanes: int = 1,
        max_batch: int = 64,
        linger: float = 0.0,
    ) -> None:
        if not linger >= 0:
            raise InvalidInput(f"linger must be >= 0 seconds, not {linger}")
        if max_batch < 1:
            raise InvalidInput(f"max_batch must be >= 1, not {max_batch}")
        if lanes < 1:
            raise InvalidInput(f"lanes must be >= 1, not {lanes}")
        self._flush = flush
        self.max_batch = max_batch
        self.lanes = lanes  # at most; ``active`` of them are used (set_active)
        self.active = lanes
        self._cv = threading.Condition(threading.Lock())
        self._queue: list[Pending[T]] = []
        self._free = list(range(lanes - 1, -1, -1))  # active lanes without a leader (0 first)
        self._busy: set[int] = set()  # lanes with a leader
        self._waiting = 0  # queued writes whose thread waits (submit), not posted ones
        self.linger = linger
        self._awake = 0  # writers that batches released and that have not written since
        self._lingerer: Pending[T] | None = None  # the queued write whose thread lingers
        self._inflight = 0  # writes with a waiting thread in batches being flushed
        self.batches = 0  # flushes so far, and the writes they carried: for benchmarks
        self.writes = 0

    def set_active(self, n: int) -> None:
        """Use ``n`` of the lanes from now on (1 to ``lanes``); a busy lane above ``n``
        finishes its batch first."""
        n = max(1, min(n, self.lanes))
        with self._cv:
            if n == self.active:
                return
            self.active = n
            self._free = [lane for lane in range(n - 1, -1, -1) if lane not in self._busy]
            self._wake_leaders()
            self._cv.notify_all()

    def submit(self, item: T) -> Any:
        """Queue ``item``, wait until a batch holding it is committed; its result.

        The flush's exception for this item (or for its whole batch) is raised here,
        in the thread that submitted it.
        """
        pending = Pending(item)
        batch: list[Pending[T]] = []
        with self._cv:
            self._came_back()
            may_lead = bool(self._free) and not self._waiting  # a lane free, no writer queued
            lingering = may_lead and self._should_linger(pending)
            if may_lead and not lingering:
                lane, batch = self._take(pending)  # lead now
            else:
                lane = -1
                pending.gate = threading.Lock()
                pending.gate.acquire()
                self._queue.append(pending)
                self._waiting += 1
                if lingering:
                    self._hand_over(pending)
                elif self._lingerer is not None and self._enough():
                    self._cv.notify_all()  # the lingerer need not wait more
        if lingering:
            lane, batch = self._linger(pending)
        if lane >= 0:
            self._lead(batch, lane)
            if pending.done:
                return pending.outcome()
        while True:
            gate = pending.gate
            assert gate is not None
            gate.acquire()  # until a leader opens it: this write is done, or lead
            with self._cv:
                pending.signalled = False
                if pending.done:
                    return pending.outcome()
                if pending.taken or not self._free:
                    continue  # another thread took the lane or the write: wait again
                lane, batch = self._take()
            self._lead(batch, lane)

    def post(self, item: T, on_error: Callable[[BaseException], None]) -> None:
        """Queue ``item`` without waiting for its commit (nothing reads its result).

        When every lane is busy the call returns at once and a leader flushes the write
        with its next batch; otherwise this thread flushes it now. A failure goes to
        ``on_error`` (in whichever thread flushed it). Writes posted and not yet flushed
        are lost if the process dies: post only what can be redone (see the store).
        """
        pending = Pending(item, on_error)
        with self._cv:
            self._came_back()
            self._queue.append(pending)
            if not self._free or self._lingerer is not None:
                return  # a busy lane's leader, or the lingerer, takes it
            lingering = self._should_linger(pending)
            if lingering:
                self._hand_over(pending)
            else:
                lane, batch = self._take()
        if lingering:
            lane, batch = self._linger(pending)
            if lane < 0:
                return  # a writer that came back took it over
        self._lead(batch, lane)

    def drain(self) -> None:
        """Flush every queued write (posted ones included) before returning."""
        while True:
            with self._cv:
                while not self._free:
                    self._cv.wait()
                if not self._queue:
                    return
                lane, batch = self._take()
            self._lead(batch, lane)

    def _came_back(self) -> None:
        """Under the lock: a writer writes again (or a released thread posts)."""
        if self._awake:
            self._awake -= 1
            if self._lingerer is not None and self._enough():
                self._cv.notify_all()  # the lingerer need not wait more

    def _should_linger(self, pending: Pending[T]) -> bool:
        """Under the lock, with a lane free: should ``pending``'s thread wait for the
        writers a batch released? Not if none is out, or another writer already waits
        (a posted write's lingerer is taken over by a writer that waits)."""
        if not self.linger or not self._awake:
            return False
        current = self._lingerer
        return current is None or (current.on_error is not None and pending.on_error is None)

    def _enough(self) -> bool:
        """Under the lock: the lingerer's batch is as big as it should wait for: no writer a
        batch released is still out, or the queue holds its share of the writers (those
        out, queued and in flight, over the lanes), or a full batch."""
        waiting = self._waiting
        if not self._awake or len(self._queue) >= self.max_batch:
            return True
        return waiting * self.active >= self._awake + waiting + self._inflight

    def _hand_over(self, pending: Pending[T]) -> None:
        """Under the lock: ``pending``'s thread lingers now (a posting one leaves)."""
        if self._lingerer is not None:
            self._cv.notify_all()
        self._lingerer = pending

    def _linger(self, pending: Pending[T]) -> tuple[int, list[Pending[T]]]:
        """Wait while writers a batch released may still write (see the module doc), then
        take a lane and the queue; ``(-1, [])`` if another thread took ``pending`` (or the
        lingering over), or no lane is free."""
        deadline = time.monotonic() + self.linger
        with self._cv:
            while self._lingerer is pending and not pending.taken and not self._enough():
                left = deadline - time.monotonic()
                if left <= 0:
                    self._awake = 0  # the others are busy elsewhere: wait for them no more
                    break
                self._cv.wait(left)
            if self._lingerer is not pending:
                return -1, []
            self._lingerer = None
            if pending.taken or not self._free:
                return -1, []
            return self._take()

    def _take(self, first: Pending[T] | None = None) -> tuple[int, list[Pending[T]]]:
        """Under the lock: a free lane and the oldest queued writes (after ``first``, a
        write of the calling thread that was not queued)."""
        lane = self._free.pop()
        self._busy.add(lane)
        room = self.max_batch - (first is not None)
        batch = self._queue[:room]  # oldest first: a write may wait a round
        del self._queue[:room]
        for p in batch:
            p.taken = True
            if p.on_error is None:
                self._waiting -= 1
                self._inflight += 1
        if first is not None:
            first.taken = True
            batch.insert(0, first)
            self._inflight += 1
        if self._lingerer is not None and self._lingerer.taken:
            self._lingerer = None  # its write was taken: its thread stops lingering
            self._cv.notify_all()
        return lane, batch

    def _lead(self, batch: list[Pending[T]], lane: int) -> None:
        while True:
            self._flush_one(batch, lane)
            with self._cv:
                self.batches += 1
                self.writes += len(batch)
                self._release(lane)
                for p in batch:
                    self._open(p)
                    if p.on_error is None:
                        self._inflight -= 1
                        self._awake += 1  # its thread goes on, and may write again soon
                if not self._queue or self._waiting or not self._free:
                    self._wake_leaders()
                    self._cv.notify_all()  # drain() waits here (submit waits on gates)
                    return
                # only posted writes are queued and no thread waits to lead them: go on
                lane, batch = self._take()

    @staticmethod
    def _open(p: Pending[T]) -> None:
        """Under the lock: wake the thread waiting on ``p`` (once until it wakes)."""
        if p.gate is not None and not p.signalled:
            p.signalled = True
            p.gate.release()

    def _wake_leaders(self) -> None:
        """Under the lock: one waiting thread per free lane leads the queued writes (the
        oldest waiting writes' threads; one already woken counts; a lingering thread will
        lead one)."""
        room = len(self._free) - (self._lingerer is not None)
        for p in self._queue:
            if room <= 0:
                return
            if p.gate is not None and not p.taken:
                self._open(p)
                room -= 1

    def _release(self, lane: int) -> None:
        """Under the lock: ``lane`` has no leader any more (and stays unused if it is
        above the active count)."""
        self._busy.discard(lane)
        if lane < self.active:
            self._free.append(lane)

    def _flush_one(self, batch: list[Pending[T]], lane: int) -> None:
        try:
            self._flush(batch, lane)
        except BaseException as e:  # the flush itself broke: every write left in it failed
            for p in batch:
                if not p.done:
                    p.fail(e)
        for p in batch:  # a flush must answer every write; never leave one hanging
            if not p.done:
                p.fail(RuntimeError(f"group commit: {self._flush!r} gave this write no outcome"))
            if p.on_error is not None and p.error is not None:
                try:
                    p.on_error(p.error)
                except Exception:  # a reporting callback must not break the batch
                    log.exception("group commit: on_error of a posted write raised")
