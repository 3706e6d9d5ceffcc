"""The database becomes unavailable under a run (tether.StoreUnavailable): on PostgreSQL
its connections die (a server restart, a failover, an administrator's
pg_terminate_backend); on SQLite another program holds the file's write lock past
busy_timeout. That is a pause, like a crash of the worker, never the run's failure:
the run goes on from its log once the database answers again, and no step committed
before runs again.

It happens for real, between a step's call and the append of its result: the
PostgreSQL backends of the store (found by their ``application_name``) are terminated
on the server; a plain sqlite3 connection takes the SQLite file's write lock.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from _conformance import PG_URL, Backend, until

import tether
from tether.errors import StoreUnavailable
from tether.services.worker import Worker

pytestmark = pytest.mark.conformance


@pytest.fixture
def killable(pg_backend: Backend) -> Iterator[tuple[tether.App, str]]:
    """An app whose connections carry an application_name of their own, and that name.
    The test watches through another app (connections of its own): a read of the killed
    app would meet the dead connection before the step's append does."""
    name = f"tether-kill-{secrets.token_hex(4)}"
    # one group-commit lane: the step's append meets the connection that was killed (with
    # two, it could take the second lane, which may not have been opened yet)
    app = tether.open(f"{pg_backend.url}&application_name={name}", lease_ttl=30, lanes=1)
    yield app, name
    app.close()


def _terminate(name: str) -> int:
    """Terminate every server backend of connections named ``name`` and wait until they
    are gone (the signal is asynchronous); how many."""
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        pids = [
            pid
            for (pid,) in admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,)
            ).fetchall()
        ]
        admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
        gone = "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = ANY(%s::int[])"
        assert until(lambda: admin.execute(gone, (pids,)).fetchone()[0], 10)  # type: ignore[index]
    return len(pids)


@contextmanager
def _lone_worker(app: tether.App, gate: threading.Event) -> Iterator[Worker]:
    """A worker of queue "q" executing one run at a time and claiming nothing ahead, so
    that nothing else of it writes on the group commit's lane while its run does (a claim
    would meet a dead connection first, and the run's write a fresh one)."""
    worker = app.worker(queues=["q"], poll=0.05, concurrency=1, prefetch=0)
    t = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    t.start()
    try:
        yield worker
    finally:
        gate.set()
        worker.stop()
        t.join(15)


def _agent(app: tether.App, gate: threading.Event, calls: list[int]) -> Any:
    def work(i: int) -> int:
        calls.append(i)
        if i == 1 and calls.count(1) == 1:
            gate.wait(10)  # the connections are terminated while this step runs
        return i * 10

    @app.agent
    def three(run: tether.Run) -> int:
        return sum(int(run.step(f"s{i}", work, i)) for i in range(3))

    return three


def test_a_worker_pauses_a_run_whose_connection_died_and_resumes_it(
    killable: tuple[tether.App, str], pg_backend: Backend
) -> None:
    app, name = killable
    watcher = tether.open(pg_backend.url)
    gate, calls = threading.Event(), []
    rid = app.start(_agent(app, gate, calls), queue="q")
    try:
        with _lone_worker(app, gate) as worker:
            assert until(lambda: calls == [0, 1], 10)
            assert _terminate(name) >= 2  # the pool's and the group commit's at least
            gate.set()  # step 1 returns; its append meets the dead connection
            assert until(lambda: watcher.get(rid).status == "completed", 15)
    finally:
        watcher.close()
    state = app.get(rid)
    assert state.output == 30
    types = [e.type for e in app.events(rid)]
    assert "run.failed" not in types and types.count("run.started") == 2
    assert [e.seq for e in app.events(rid)] == list(range(1, len(types) + 1))
    # step 0 was committed before the loss and is reused; step 1's result was lost with
    # the connection (it may or may not have committed: here it had not), so it ran again
    assert calls == [0, 1, 1, 2]
    assert worker.stats.failed == 0 and worker.stats.completed == 1
    assert worker.stats.paused == 1 and worker.stats.errors == []  # a pause is no error


def test_an_idle_worker_survives_its_connections_dying_and_takes_the_next_run(
    killable: tuple[tether.App, str], pg_backend: Backend
) -> None:
    """Its claiming loop meets the dead connections first (the LISTEN one, then the
    group commit's at its next claim): it must go on claiming, not exit."""
    app, name = killable

    @app.agent
    def hello(run: tether.Run) -> str:
        return str(run.step("hi", lambda: "hi"))

    worker = app.worker(queues=["q"], poll=0.05)
    t = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    t.start()
    watcher = tether.open(pg_backend.url)
    watcher.agent(hello)
    try:
        assert until(lambda: watcher.store.list_workers(), 5)
        app.start(hello, queue="q")  # the lanes and the pool connect
        assert until(lambda: worker.stats.completed == 1, 10)
        assert _terminate(name) >= 2
        rid = watcher.start(hello, queue="q")
        assert until(lambda: watcher.get(rid).status == "completed", 15), worker.stats
        assert t.is_alive() and worker.stats.failed == 0
    finally:
        worker.stop()
        t.join(15)
        watcher.close()
    assert not t.is_alive()


def test_a_final_event_lost_with_the_connection_is_written_again(pg_backend: Backend) -> None:
    """A worker run's final event is posted (nobody waits for its commit), with the last
    step's record. When the connection dies under it, the worker's next heartbeat gives
    the run's lease back (before, the heartbeat kept extending it, so the run stayed
    running while the worker lived), and a claim writes the events again: the first step
    is replayed, the last one, whose record was lost with the commit, runs again."""
    name = f"tether-kill-{secrets.token_hex(4)}"
    app = tether.open(f"{pg_backend.url}&application_name={name}", lease_ttl=3, lanes=1)
    watcher = tether.open(pg_backend.url)
    gate, calls, executions = threading.Event(), [], []
    last = _last_blocks(app, gate, calls, executions)
    rid = app.start(last, queue="q")
    try:
        with _lone_worker(app, gate):
            assert until(lambda: executions == [1] and calls == [1, 2], 10)
            assert until(lambda: len(watcher.events(rid)) == 3, 5)  # created, started, first
            _terminate(name)
            gate.set()  # the run returns; its posted final event meets the dead connection
            assert until(lambda: watcher.get(rid).status == "completed", 15)
    finally:
        watcher.close()
        app.close()
    assert calls == [1, 2, 2] and len(executions) == 2  # the first step replayed
    types = [e.type for e in _events_of(pg_backend.url, rid)]
    assert types == [
        "run.created",
        "run.started",
        "step.completed",
        "run.started",
        "step.completed",
        "run.completed",
    ]


def _events_of(url: str, rid: str) -> list[Any]:
    with tether.open(url) as app:
        return app.events(rid)


def _last_blocks(
    app: tether.App, gate: threading.Event, calls: list[int], executions: list[int]
) -> Any:
    """An agent of two steps whose first execution waits on ``gate`` after the second,
    before it returns (the connections die there, under its final append, which also
    holds the second step's record; the first one's was appended before the second ran)."""

    @app.agent
    def last(run: tether.Run) -> int:
        executions.append(1)
        run.step("first", lambda: calls.append(1))
        out = int(run.step("last", lambda: calls.append(2) or 7))
        if len(executions) == 1:
            gate.wait(10)
        return out

    return last


def _run_until_unavailable(
    app: tether.App, make_unavailable: Callable[[], object]
) -> tuple[str, BaseException, list[int]]:
    """``app.run`` the three-step agent in a thread; make the database unavailable while
    step 1 runs; the run's id, what app.run raised, and the steps called so far."""
    gate, calls = threading.Event(), []
    agent = _agent(app, gate, calls)
    rid, error = _run_raising(app, agent, gate, lambda: calls == [0, 1], make_unavailable)
    return rid, error, calls


def _run_raising(
    app: tether.App,
    agent: Any,
    gate: threading.Event,
    ready: Callable[[], bool],
    make_unavailable: Callable[[], object],
) -> tuple[str, BaseException]:
    """``app.run(agent)`` in a thread; once ``ready()``, make the database unavailable and
    open ``gate``; the run's id and what app.run raised."""
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            app.run(agent)
        except BaseException as e:
            outcome.append(e)

    t = threading.Thread(target=run)
    t.start()
    assert until(lambda: ready() and len(app._active) == 1, 10)
    (rid,) = app._active
    make_unavailable()
    gate.set()
    t.join(15)
    (error,) = outcome
    return rid, error


def _resumes(app: tether.App, rid: str, calls: list[int]) -> None:
    """Paused, not failed, free to resume: and resume goes on, running only step 1 again."""
    record = app.store.get_run(rid)
    assert (record.status, record.lease_owner) == ("running", None)
    assert "run.failed" not in [e.type for e in app.events(rid)]
    handle = app.resume(rid)
    assert (handle.status, handle.output) == ("completed", 30)
    assert calls == [0, 1, 1, 2]  # step 0 reused; step 1's result was never committed


def test_app_run_raises_leaves_the_run_resumable_and_not_failed(
    killable: tuple[tether.App, str],
) -> None:
    app, name = killable
    rid, error, calls = _run_until_unavailable(app, lambda: _terminate(name))
    assert isinstance(error, StoreUnavailable) and "lost the connection" in str(error)
    _resumes(app, rid, calls)


def test_app_run_whose_final_event_meets_a_dead_connection_is_resumable(
    killable: tuple[tether.App, str], pg_backend: Backend
) -> None:
    """The connection dies after the last step, so the run's final append fails: the run
    is left resumable (its lease given back), and resume completes it without running the
    first step again (the last step's record was in the lost append: it runs again)."""
    app, name = killable
    gate, calls, executions = threading.Event(), [], []
    last = _last_blocks(app, gate, calls, executions)
    rid, error = _run_raising(app, last, gate, lambda: calls == [1, 2], lambda: _terminate(name))
    assert isinstance(error, StoreUnavailable)
    with tether.open(pg_backend.url) as watcher:  # connections of its own
        record = watcher.store.get_run(rid)
    assert (record.status, record.lease_owner) == ("running", None)
    handle = app.resume(rid)
    assert (handle.status, handle.output, calls) == ("completed", 7, [1, 2, 2])


def test_a_sqlite_file_locked_too_long_pauses_the_run(sqlite_backend: Backend) -> None:
    app = tether.open(sqlite_backend.url, busy_timeout=0.3)
    other = sqlite3.connect(sqlite_backend.url, isolation_level=None)  # not tether
    try:
        rid, error, calls = _run_until_unavailable(
            app,
            lambda: other.execute("BEGIN IMMEDIATE"),  # holds the write lock
        )
        assert isinstance(error, StoreUnavailable) and "stayed locked" in str(error)
        # the lease could not be given back while the file was locked: the next heartbeat
        # gives it back (without that, it would extend it while the process lives)
        assert app.store.get_run(rid).lease_owner == app.owner
        other.execute("ROLLBACK")
        app._leases.retry_let_go()  # what the heartbeat does
        _resumes(app, rid, calls)
    finally:
        other.close()
        app.close()


def test_an_agent_that_catches_the_lost_database_writes_nothing_more(
    sqlite_backend: Backend,
) -> None:
    """An agent may catch StoreUnavailable and go on. Its run must not: the failed append
    may or may not have committed, so the journal refuses every later write, and the run
    is paused (resumable), never completed over the records the failed append held.
    Here the database answers again before the next step: a journal that forgot the loss
    would append that step and complete the run without them."""
    app = tether.open(sqlite_backend.url, busy_timeout=0.3)
    other = sqlite3.connect(sqlite_backend.url, isolation_level=None)  # not tether
    calls: list[str] = []
    caught: list[BaseException] = []

    def call(name: str) -> str:
        calls.append(name)
        return name

    @app.agent
    def careless(run: tether.Run) -> list[str]:
        done = [str(run.step("s0", call, "s0"))]
        if not caught:
            other.execute("BEGIN IMMEDIATE")  # holds the write lock
        try:
            done += [str(run.step("s1", call, "s1")), str(run.step("s2", call, "s2"))]
        except StoreUnavailable as e:
            caught.append(e)
            other.execute("ROLLBACK")  # the database answers again
        return [*done, str(run.step("s3", call, "s3"))]

    try:
        with pytest.raises(StoreUnavailable, match="stayed locked"):
            app.run(careless)
        assert len(caught) == 1
        (rid,) = [r.id for r in app.store.list_runs()]
        assert app.store.get_run(rid).status == "running"  # paused, not completed
        assert "run.completed" not in [e.type for e in app.events(rid)]
        app._leases.retry_let_go()  # what the heartbeat does
        handle = app.resume(rid)
        assert (handle.status, handle.output) == ("completed", ["s0", "s1", "s2", "s3"])
        assert [s.name for s in app.get(rid).steps] == ["s0", "s1", "s2", "s3"]
    finally:
        other.close()
        app.close()
