"""The base of the store suites: one fresh store per test, and the helpers the tests share.

A suite class is a plain pytest class. Its autouse fixture asks the subclass for a
location (the ``store_location`` fixture: by default this test's empty ``tmp_path``), then
for a store on it (``make_store()``), and closes every store it opened after the test.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.model.events import NewEvent
from tether.store import NewRun, QueueLimits, Serving, Store

T0 = 1_700_000_000.0
"""The time the tests start at (a fixed epoch second: stores take ``now`` as an argument)."""


class StoreTest:
    """Base of every store suite: ``self.store`` is a fresh, empty store for each test.

    A subclass provides ``make_store()``; it may override the ``store_location`` fixture
    when a fresh location is more than an empty directory (a database schema to create and
    drop, a server to reset)."""

    store: Store
    location: Any

    def make_store(self) -> Store:
        """A new store on this test's location, ``self.location`` (the value of the
        ``store_location`` fixture). Called once before each test for ``self.store``, and
        again by the tests that open a second store on the same data (``open_store()``), so
        it must not empty the location."""
        raise NotImplementedError(
            f"{type(self).__name__} must define make_store(self) -> Store: a new store on "
            f"self.location (by default this test's empty temporary directory)"
        )

    @pytest.fixture
    def store_location(self, tmp_path: Path) -> Any:
        """This test's fresh location for ``make_store()``: by default its empty temporary
        directory. Override it as a fixture to create (and after ``yield``, drop) anything
        else, e.g. a database schema per test."""
        return tmp_path

    @pytest.fixture(autouse=True)
    def _tether_store(self, store_location: Any) -> Iterator[None]:
        self.location = store_location
        self._opened: list[Store] = []
        self.store = self.open_store()
        try:
            yield
        finally:
            for store in reversed(self._opened):
                with contextlib.suppress(Exception):  # a test may have closed it already
                    store.close()

    def open_store(self) -> Store:
        """Another store on this test's location (``make_store()``), closed after the test."""
        store = self.make_store()
        self._opened.append(store)
        return store


def ev(n: int = 0, *, type_: str = "note", actor: str | None = "tester") -> NewEvent:
    """An event whose data says which one it is."""
    return NewEvent(type_, f'{{"n": {n}}}', T0 + n, actor)


def new_run(
    store: Store,
    run_id: str = "run-1",
    *,
    events: int = 2,
    owner: str | None = "w1",
    now: float = T0,
    ttl: float = 30.0,
    **fields: Any,
) -> None:
    """Create a run with ``events`` events; leased to ``owner`` (epoch 1) unless None."""
    run = NewRun(
        run_id,
        fields.pop("agent", "agent"),
        fields.pop("version", None),
        fields.pop("status", "running"),
        **fields,
    )
    store.create_run(
        run, [ev(i) for i in range(1, events + 1)], lease_owner=owner, now=now, ttl=ttl
    )


def seqs(store: Store, run_id: str = "run-1") -> list[int]:
    """The seqs of a run's log, in order."""
    return [e.seq for e in store.read_events(run_id)]


def enqueue(
    store: Store,
    run_id: str,
    *,
    queue: str = "q",
    now: float = T0,
    max_depth: int | None = None,
    **fields: Any,
) -> tuple[str, bool]:
    """Enqueue a run with one event; what ``store.enqueue`` returns."""
    agent, version = fields.pop("agent", "agent"), fields.pop("version", None)
    run = NewRun(run_id, agent, version, "queued", queue=queue, **fields)
    return store.enqueue(run, [ev(1)], now=now, max_depth=max_depth)


def claimed(
    store: Store,
    *limits: QueueLimits,
    owner: str = "w1",
    now: float = T0 + 10,
    capacity: int = 10,
    ttl: float = 30,
    serving: Serving | None = None,
) -> list[str]:
    """The ids of the runs one ``claim_next`` of these queues takes, in its order."""
    claims = store.claim_next(
        list(limits), owner=owner, ttl=ttl, now=now, capacity=capacity, serving=serving
    )
    return [record.id for record, _ in claims]


def race(n: int, attempt: Callable[[int], Any]) -> list[Any]:
    """Run ``attempt(i)`` in ``n`` threads released together; their results or errors."""
    start = threading.Barrier(n)
    out: list[Any] = [None] * n

    def one(i: int) -> None:
        start.wait()
        try:
            out[i] = attempt(i)
        except Exception as e:  # the caller inspects it
            out[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def until(check: Callable[[], Any], seconds: float = 10.0) -> bool:
    """Poll ``check()`` until it holds or ``seconds`` pass (another thread is doing the
    work); whether it held. The caller asserts what it expects, for a useful message."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True
