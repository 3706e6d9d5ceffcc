"""Group commit: appends that arrive while one commit is in flight share the next one.

A worker executing many runs at once appends from many threads. Each append
must be durable before its caller goes on, but nothing says each must be a
transaction of its own: while one thread waits for the database to commit,
the appends of the other threads queue up, and the next commit takes them all.
Every caller still returns only after its own write is committed (or refused),
so the durability of a step is unchanged; the database sees one commit, one
round trip and one WAL flush for the batch instead of one per step.

There is no committer thread and no timer (a lone writer pays nothing: its
batch is itself, committed at once). The first thread to find no commit in
flight leads: it takes every queued write, commits them, hands each its
outcome and steps down; a thread whose write was queued meanwhile either finds
it done or leads the next batch (leader/follower).

The store supplies ``flush(batch)``, which must set an outcome on every
:class:`Pending` it is given (and should isolate one write's failure from the
others: a batch that fails is retried write by write).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Pending(Generic[T]):
    """One queued write and, once its batch is flushed, its outcome."""

    __slots__ = ("done", "error", "item", "result")

    def __init__(self, item: T) -> None:
        self.item = item
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False

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

    def __init__(self, flush: Callable[[list[Pending[T]]], None], *, max_batch: int = 64) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, not {max_batch}")
        self._flush = flush
        self.max_batch = max_batch
        self._cv = threading.Condition(threading.Lock())
        self._queue: list[Pending[T]] = []
        self._leading = False
        self.batches = 0  # flushes so far, and the writes they carried: for benchmarks
        self.writes = 0

    def submit(self, item: T) -> Any:
        """Queue ``item``, wait until a batch holding it is committed; its result.

        The flush's exception for this item (or for its whole batch) is raised here,
        in the thread that submitted it.
        """
        pending = Pending(item)
        with self._cv:
            self._queue.append(pending)
        while True:
            with self._cv:
                while self._leading and not pending.done:
                    self._cv.wait()
                if pending.done:
                    return pending.outcome()
                self._leading = True
                batch = self._queue[: self.max_batch]  # oldest first: this write may wait
                del self._queue[: self.max_batch]
            self._lead(batch)

    def _lead(self, batch: list[Pending[T]]) -> None:
        try:
            self._flush(batch)
        except BaseException as e:  # the flush itself broke: every write left in it failed
            for p in batch:
                if not p.done:
                    p.fail(e)
        finally:
            for p in batch:  # a flush must answer every write; never leave one hanging
                if not p.done:
                    p.fail(
                        RuntimeError(f"group commit: {self._flush!r} gave this write no outcome")
                    )
            with self._cv:
                self._leading = False
                self.batches += 1
                self.writes += len(batch)
                self._cv.notify_all()
