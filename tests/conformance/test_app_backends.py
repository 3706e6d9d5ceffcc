"""The App runs unchanged on every backend: tether.open(url), run, crash, resume, tools,
approvals, signals and workers."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from _conformance import Backend, until

import tether
from tether.services.worker import Worker

pytestmark = pytest.mark.conformance


class Crash(BaseException):
    """Stands for the process dying mid-run (not an Exception: the run pauses)."""


def _register(app: tether.App, calls: list[str], crash_after_first: list[bool]) -> Any:
    def send(to: str, *, idempotency_key: str) -> str:
        calls.append(f"send:{to}")
        return f"sent to {to} ({len(idempotency_key)})"

    def fetch(who: str) -> str:
        calls.append("fetch")
        return f"facts about {who}"

    app.tool(send, risk="write")

    @app.agent
    def pipeline(run: tether.Run, who: str) -> dict[str, Any]:
        first = run.step("fetch", fetch, who)
        if crash_after_first and crash_after_first.pop():
            raise Crash
        plan = run.decide("route", choice="email", why="short answer")
        run.vars["plan"] = plan
        receipt = run.tool(send, who)
        return {"first": first, "plan": plan, "receipt": receipt}

    return pipeline


def test_open_picks_the_backend_from_the_url(app: tether.App, backend: Backend) -> None:
    expected = "SQLiteStore" if backend.name == "sqlite" else "PostgresStore"
    assert type(app.store).__name__ == expected


def test_a_run_completes_and_its_log_is_contiguous(app: tether.App) -> None:
    calls: list[str] = []
    handle = app.run(_register(app, calls, []), "ada")
    assert handle.status == "completed"
    assert handle.output == {
        "first": "facts about ada",
        "plan": "email",
        "receipt": handle.output["receipt"],
    }
    assert handle.output["receipt"].startswith("sent to ada")
    assert calls == ["fetch", "send:ada"]
    events = app.events(handle.id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    state = app.get(handle.id)
    assert state.status == "completed" and state.vars["plan"] == "email"
    assert [r.id for r in app.runs(status="completed")] == [handle.id]


def test_a_crashed_run_resumes_in_a_new_app_reusing_completed_steps(
    backend: Backend, app: tether.App
) -> None:
    calls: list[str] = []
    agent = _register(app, calls, [True])
    with pytest.raises(Crash):
        app.run(agent, "bob")
    [record] = app.runs()
    assert record.status == "queued" and record.lease_owner is None
    assert calls == ["fetch"]

    with tether.open(backend.url) as again:  # as a new process would
        _register(again, calls, [])
        handle = again.resume(record.id)
        assert handle.status == "completed"
        assert [name for _, name in handle.reused] == ["fetch"]
        assert "fetch" not in [name for _, name in handle.executed]
        assert calls == ["fetch", "send:bob"]  # nothing ran twice
        assert again.resume(record.id).output == handle.output  # finished: no re-execution
    assert calls == ["fetch", "send:bob"]


def test_approvals_and_signals_wait_without_a_process(app: tether.App) -> None:
    @app.agent
    def gated(run: tether.Run) -> object:
        run.approve("go")
        return run.wait("docs", timeout="1h")

    handle = app.run(gated)
    assert handle.status == "waiting"
    assert app.store.get_run(handle.id).waiting_for == "approval:go"
    app.approve(handle.id, "go", by="ops")
    assert app.resume(handle.id).status == "waiting"
    assert app.signal(handle.id, "docs", {"files": 2}, sender="uploader") is True
    done = app.resume(handle.id)
    assert (done.status, done.output) == ("completed", {"files": 2})


def test_a_worker_executes_queued_runs(app: tether.App) -> None:
    seen: list[int] = []

    def compute(n: int) -> int:
        seen.append(n)
        return n * n

    @app.agent
    def square(run: tether.Run, n: int) -> int:
        return int(run.step("square", compute, n))

    ids = [app.start(square, n, queue="default") for n in range(6)]
    stats = app.worker(queues=["default"], concurrency=3, poll=0.05).run(
        until_idle=True, install_signals=False
    )
    assert stats.claimed == 6 and sorted(seen) == list(range(6))
    assert [app.get(i).output for i in ids] == [n * n for n in range(6)]


def test_a_failed_queued_run_retried_in_its_queue_is_retried_by_a_worker(
    app: tether.App,
) -> None:
    calls: list[str] = []
    broken = [True]

    def charge(n: int) -> str:
        calls.append(f"charge {n}")
        if broken[0]:
            raise ConnectionError("payments API down")
        return f"charged {n}"

    @app.agent
    def bill(run: tether.Run, n: int) -> list[str]:
        return [run.step("quote", lambda: f"quote {n}"), run.step("charge", charge, n)]

    rid = app.start(bill, 7, queue="billing")
    app.worker(queues=["billing"], poll=0.05).run(until_idle=True, install_signals=False)
    assert app.get(rid).status == "failed" and calls == ["charge 7"]
    with pytest.raises(tether.InvalidState, match=r"retry .* puts it back in queue 'billing'"):
        app.resume(rid)  # a failed run is not resumed; the error says how to retry it
    broken[0] = False
    handle = app.retry_run(rid, in_queue=True)
    assert (handle.status, handle.error["message"]) == ("queued", "payments API down")
    record = app.store.get_run(rid)
    assert (record.status, record.queue, record.lease_owner) == ("queued", "billing", None)
    assert calls == ["charge 7"]  # not executed here: a worker of the queue retries it
    with pytest.raises(tether.InvalidState, match="is queued, not failed"):
        app.retry_run(rid, in_queue=True)  # asking twice does not queue it twice
    stats = app.worker(queues=["billing"], poll=0.05).run(until_idle=True, install_signals=False)
    assert stats.claimed == 1
    state = app.get(rid)
    assert (state.status, state.output) == ("completed", ["quote 7", "charged 7"])
    assert calls == ["charge 7", "charge 7"]  # the quote was reused, the failed step ran again
    log = [(e.type, e.payload().get("reason")) for e in app.events(rid)]
    assert ("run.suspended", "retry requested") in log
    assert [t for t, _ in log].count("run.started") == 2


def test_a_run_a_worker_cannot_execute_goes_back_to_its_queue_not_held(
    app: tether.App, backend: Backend
) -> None:
    """A worker without the run's agent (it cannot import it: a local function here, say
    a deploy that lacks the module) gives the run back, due one lease ttl later, instead of
    renewing its lease at every heartbeat for as long as it lives; a worker that has the
    agent takes it then."""

    @app.agent
    def local(run: tether.Run) -> str:
        return str(run.step("hello", lambda: "hi"))

    rid = app.start(local, queue="q")
    clock = tether.FakeClock(app.clock.now())
    without = tether.open(backend.url, clock=clock, lease_ttl=30)
    try:
        stats = without.worker(queues=["q"], poll=0.05).run(until_idle=True, install_signals=False)
        assert stats.claimed == 1 and "is not a tether agent" in stats.errors[0]
        record = app.store.get_run(rid)
        assert (record.status, record.lease_owner) == ("queued", None)
        assert record.available_at == pytest.approx(clock.now() + 30)
        assert [e.type for e in app.events(rid)] == ["run.created"]  # nothing appended
        again = without.worker(queues=["q"], poll=0.05).run(until_idle=True, install_signals=False)
        assert again.claimed == 0  # not due yet: no worker spins on it
    finally:
        without.close()
    with_agent = tether.open(backend.url, clock=tether.FakeClock(clock.now() + 31))
    with_agent.agent(local)
    try:
        done = with_agent.worker(queues=["q"], poll=0.05).run(
            until_idle=True, install_signals=False
        )
        assert done.completed == 1 and with_agent.get(rid).output == "hi"
    finally:
        with_agent.close()


def test_a_fork_of_a_queued_run_wakes_its_queues_workers(app: tether.App, backend: Backend) -> None:
    """The fork goes to its parent's queue, and its workers are told at once."""

    @app.agent
    def two(run: tether.Run, n: int) -> int:
        return int(run.step("a", lambda: n) + run.step("b", lambda: 1))

    rid = app.start(two, 5, queue="forks")
    app.worker(queues=["forks"], poll=0.05).run(until_idle=True, install_signals=False)
    with _idle_worker(app, backend, "forks"):
        fork = app.fork(rid, step=1, input={"args": [7], "kwargs": {}})
        assert app.store.get_run(fork).queue == "forks"
        assert until(lambda: app.get(fork).status == "completed", 5), app.get(fork).status
        assert app.get(fork).output == 6  # step a (5) reused, b run: 5 + 1


def test_an_imported_queued_run_wakes_its_queues_workers(app: tether.App, backend: Backend) -> None:
    @app.agent
    def one(run: tether.Run) -> str:
        return str(run.step("a", lambda: "done"))

    rid = app.start(one, queue="moved")  # exported while still queued
    out = io.StringIO()
    app.export_run(rid, out)
    app.cancel(rid)  # only the copy is left for the worker
    with _idle_worker(app, backend, "moved"):
        copy = app.import_run(out.getvalue().splitlines(), new_id=True)
        assert until(lambda: app.get(copy).status == "completed", 5), app.get(copy).status


def _waits_for_work(app: tether.App) -> bool:
    """A worker of ``app`` waits for work and, on PostgreSQL, LISTENs already (a NOTIFY
    sent before would be missed until its fallback poll); SQLite workers poll: True."""
    store: Any = app.store
    if not hasattr(store, "_waiters"):
        return True
    with store._listening:
        return bool(store._waiters) and store._listener is not None


@contextmanager
def _idle_worker(app: tether.App, backend: Backend, queue: str) -> Iterator[Worker]:
    """A worker of ``queue`` that found nothing and waits: on PostgreSQL on LISTEN with a
    30 s fallback poll, so only a notification wakes it in time (SQLite has none: its
    workers poll, here every 50 ms)."""
    import threading

    worker = app.worker(queues=[queue], poll=30 if backend.name == "postgres" else 0.05)
    t = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    t.start()
    try:
        assert until(lambda: _waits_for_work(app), 5)
        yield worker
    finally:
        worker.stop()
        t.join(10)


def test_a_run_a_stopping_worker_gives_back_wakes_another_worker(
    app: tether.App, backend: Backend
) -> None:
    """Stopping (SIGTERM) puts the run back in its queue after its current step and tells
    the queue's workers: on PostgreSQL one waiting on LISTEN with a 30 s fallback poll
    takes it at once."""
    import threading

    gate, started = threading.Event(), threading.Event()

    def slow(i: int) -> int:
        if i == 1:
            started.set()
            gate.wait(10)
        return i

    @app.agent
    def three(run: tether.Run) -> int:
        return sum(int(run.step(f"s{i}", slow, i)) for i in range(3))

    rid = app.start(three, queue="handoff")
    first = app.worker(queues=["handoff"], poll=0.05)
    t1 = threading.Thread(target=first.run, kwargs={"install_signals": False})
    t1.start()
    assert until(started.is_set, 5)
    poll = 30 if backend.name == "postgres" else 0.05
    second = app.worker(queues=["handoff"], poll=poll)
    t2 = threading.Thread(target=second.run, kwargs={"install_signals": False})
    t2.start()
    try:
        assert until(lambda: len(app.store.list_workers()) == 2 and _waits_for_work(app), 5)
        first.stop()
        # the stopping worker tells its run (its loop notices the stop within a poll)
        assert until(lambda: app._active[rid].interrupted is not None, 5)
        gate.set()  # step 1 finishes and is recorded; the run goes back to the queue
        t1.join(10)
        assert until(lambda: app.get(rid).status == "completed", 5), app.get(rid).status
        assert app.get(rid).output == 3
    finally:
        gate.set()
        first.stop()
        second.stop()
        t1.join(10)
        t2.join(10)
    # read once the worker has stopped: it counts a run after its final event is committed,
    # which the status above can show first (a loaded machine did, once)
    assert not t2.is_alive() and second.stats.completed == 1


def test_retry_in_queue_refuses_a_run_started_without_a_queue(app: tether.App) -> None:
    @app.agent
    def flaky(run: tether.Run) -> None:
        run.step("boom", lambda: 1 / 0)

    with pytest.raises(tether.RunFailed) as failed:
        app.run(flaky)
    rid = failed.value.run_id
    with pytest.raises(tether.InvalidState, match=f"not started in a queue.*retry {rid} --here"):
        app.retry_run(rid, in_queue=True)
    assert app.store.get_run(rid).status == "failed" and app.store.get_run(rid).lease_owner is None


@pytest.mark.parametrize("prefetch", [0, 3])
def test_a_workers_claims_stay_within_its_room_at_once_where_they_share_commits(
    app: tether.App, backend: Backend, prefetch: int
) -> None:
    """A claim waits for a commit. On PostgreSQL a worker's threads claim at the same
    time (their claims ride the group commit with the appends; one at a time capped a
    worker at one claim per commit latency); on SQLite, where each claim is a write
    transaction of its own, one at a time. Either way each claims only the room it
    reserved: the worker never holds more claimed runs than its concurrency plus the
    runs it may claim ahead, and never executes more than its concurrency at once."""
    import threading
    import time

    @app.agent
    def quick(run: tether.Run, n: int) -> int:
        return int(run.step("s", lambda: n))

    ids = [app.start(quick, n) for n in range(40)]
    worker = app.worker(concurrency=4, prefetch=prefetch)
    lock = threading.Lock()
    seen = dict.fromkeys(("claiming", "peak_claiming", "held", "peak_held"), 0)
    seen |= dict.fromkeys(("running", "peak_running"), 0)
    claim_next, execute_claimed = app.store.claim_next, app._executor.execute_claimed

    def slow_claim(*args: Any, **kwargs: Any) -> Any:
        with lock:
            seen["claiming"] += 1
            seen["peak_claiming"] = max(seen["peak_claiming"], seen["claiming"])
        time.sleep(0.02)  # a commit's latency, long enough for the other threads to claim
        got = claim_next(*args, **kwargs)
        with lock:
            seen["claiming"] -= 1
            seen["held"] += len(got)
            seen["peak_held"] = max(seen["peak_held"], seen["held"])
        return got

    full = threading.Event()  # every slot ran at once

    def counted(*args: Any, **kwargs: Any) -> Any:
        with lock:
            seen["running"] += 1
            seen["peak_running"] = max(seen["peak_running"], seen["running"])
            if seen["running"] == 4:
                full.set()
        try:
            # the first runs hold their slots until all 4 are taken (the claims ahead fill
            # meanwhile), whatever the machine's speed; a worker that never fills them
            # fails on peak_running after this 30 s bound
            full.wait(30)
            return execute_claimed(*args, **kwargs)
        finally:
            with lock:
                seen["held"] -= 1
                seen["running"] -= 1

    app.store.claim_next = slow_claim  # type: ignore[method-assign]
    app._executor.execute_claimed = counted  # type: ignore[method-assign]
    stats = worker.run(until_idle=True, install_signals=False)
    assert stats.completed == len(ids) == stats.claimed
    assert all(app.get(i).status == "completed" for i in ids)
    assert app.store.concurrent_claims == (backend.name == "postgres")
    if app.store.concurrent_claims:
        assert seen["peak_claiming"] >= 2  # claims overlapped
    else:
        assert seen["peak_claiming"] == 1
    assert seen["peak_held"] <= 4 + prefetch  # never claimed past the worker's room
    assert seen["peak_running"] == 4  # every slot used, never more
    if prefetch:
        assert seen["peak_held"] > 4  # and it did claim ahead
    assert seen["held"] == seen["running"] == 0


def _held_by(app: tether.App, owner: str) -> list[str]:
    """Runs whose lease ``owner`` holds, as the database has them."""
    running = app.store.list_runs(status="running", limit=1000)
    return [r.id for r in running if r.lease_owner == owner]


def test_a_worker_claims_ahead_only_while_its_runs_are_short(
    app: tether.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prefetch=None (the default): a worker holds runs claimed ahead of its slots only
    while its runs took under PREFETCH_BELOW seconds on average, and never from a queue
    with limits (a held run would count against them)."""
    import threading

    from tether.services import worker as worker_mod

    gate = threading.Event()

    @app.agent
    def gated(run: tether.Run, n: int) -> int:
        if n >= 100:  # the second batch blocks the slots until the test has looked
            run.step("wait", gate.wait, 30)
        return n

    wait_for_work = app.store.wait_for_work

    def scenario(below: float, queue: str) -> tuple[int, int]:
        """A worker of concurrency 2 executes 4 quick runs, then 8 blocking ones are
        queued: (runs it holds once its slots block, runs left queued)."""
        monkeypatch.setattr(worker_mod, "PREFETCH_BELOW", below)
        gate.clear()
        quick = [app.start(gated, n, queue=queue) for n in range(4)]
        w = app.worker(queues=[queue], concurrency=2, poll=0.02)
        rounds = [0]  # the claiming loop's rounds: it claims (or has no room), then waits

        def counting(*args: Any, **kwargs: Any) -> Any:
            rounds[0] += 1
            return wait_for_work(*args, **kwargs)

        monkeypatch.setattr(app.store, "wait_for_work", counting)
        thread = threading.Thread(target=w.run, kwargs={"install_signals": False})
        thread.start()
        try:
            assert until(lambda: all(app.get(i).status == "completed" for i in quick))
            assert w.run_time is not None  # it measured its runs
            blocked = [app.start(gated, 100 + n, queue=queue) for n in range(8)]
            assert until(lambda: len(_held_by(app, w.id)) >= 2)
            # room for any claim beyond the bound to land: the loop goes round a few more
            # times (counted), instead of a 0.3 s sleep
            after = rounds[0]
            assert until(lambda: rounds[0] >= after + 3, 30)
            held = len(_held_by(app, w.id))
            queued = sum(app.store.get_run(i).status == "queued" for i in blocked)
        finally:
            gate.set()
            w.stop()
            thread.join(30)
        assert not thread.is_alive()
        return held, queued

    app.queue("limited", concurrency=50)
    # every run counts as short: 2 executing and 2 (its concurrency) claimed ahead
    assert scenario(10.0, "short") == (4, 4)
    # no run counts as short: only its slots (a queue of its own: the runs the first
    # scenario left are not for this worker)
    assert scenario(0.0, "long") == (2, 6)
    # a queue with limits: only its slots, however short the runs
    assert scenario(10.0, "limited") == (2, 6)


def test_runs_claimed_ahead_are_released_when_the_worker_stops(app: tether.App) -> None:
    """A worker that stops gives back the leases of the runs it claimed ahead and never
    started, so that another worker takes them at once (not at lease expiry), and each
    of them runs once."""
    import threading

    gate = threading.Event()
    ran: list[int] = []

    @app.agent
    def gated(run: tether.Run, n: int) -> int:
        def body() -> int:
            ran.append(n)
            gate.wait(30)
            return n

        return int(run.step("body", body))

    ids = [app.start(gated, n) for n in range(6)]
    w = app.worker(concurrency=2, prefetch=3, poll=0.02)
    thread = threading.Thread(target=w.run, kwargs={"install_signals": False})
    thread.start()
    assert until(lambda: len(_held_by(app, w.id)) >= 5 and len(ran) >= 2)
    held = _held_by(app, w.id)
    assert len(held) == 5 and len(ran) == 2  # 2 executing, 3 claimed ahead
    w.stop()
    gate.set()
    thread.join(30)
    assert not thread.is_alive()
    ahead = [i for i in held if app.store.get_run(i).status == "running"]
    assert len(ahead) == 3
    for rid in ahead:  # released: no owner, no expiry; claimable now
        record = app.store.get_run(rid)
        assert record.lease_owner is None and record.lease_expires is None
    stats = app.worker(concurrency=4, prefetch=0).run(until_idle=True, install_signals=False)
    assert stats.claimed == 4  # the 3 released and the one left queued
    assert all(app.get(i).status == "completed" for i in ids)
    assert sorted(ran) == list(range(6))  # each body once (the stopped ones finished theirs)


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_bad_prefetch_is_refused(app: tether.App, bad: Any) -> None:
    with pytest.raises(ValueError, match="prefetch"):
        app.worker(prefetch=bad)
