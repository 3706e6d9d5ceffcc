"""The queue and its workers on SQLite: claims, leases, fencing, flow control, wake-ups.

Lease expiry and timers use an injected clock: nothing here sleeps to let time pass.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from _wait import until

import tether
from tether.model import events as ev
from tether.services.worker import CANCEL_POLL
from tether.store import QueueLimits, WorkerRecord

pytestmark = pytest.mark.integration


@pytest.fixture
def clock() -> tether.FakeClock:
    return tether.FakeClock()


@pytest.fixture
def qapp(tmp_path: Path, clock: tether.FakeClock) -> tether.App:
    app = tether.open(str(tmp_path / "q.db"), clock=clock, lease_ttl=30)

    @app.agent
    def job(run: tether.Run, n: int) -> int:
        return int(sum(run.step(f"s{i}", lambda i=i: i * n) for i in range(3)))

    return app


def _claim(app: tether.App, owner: str, n: int = 10, **limits: object) -> list[str]:
    got = app.store.claim_next(
        [QueueLimits("default", **limits)],
        owner=owner,  # type: ignore[arg-type]
        ttl=app.lease_ttl,
        now=app.clock.now(),
        capacity=n,
    )
    return [record.id for record, _ in got]


def test_start_enqueues_and_a_worker_runs_it(qapp: tether.App) -> None:
    rid = qapp.start("job", 2)
    assert qapp.get(rid).status == "queued" and qapp.store.get_run(rid).status == "queued"
    stats = qapp.worker(concurrency=2).run(until_idle=True, install_signals=False)
    assert stats.completed == 1 and qapp.get(rid).output == 6


def test_start_with_existing_run_id_or_dedup_key_returns_that_run(qapp: tether.App) -> None:
    rid = qapp.start("job", 1, run_id="order-42")
    assert rid == "order-42" and qapp.start("job", 9, run_id="order-42") == "order-42"
    a = qapp.start("job", 1, dedup_key="tenant-7")
    assert qapp.start("job", 2, dedup_key="tenant-7") == a
    qapp.worker().run(until_idle=True, install_signals=False)
    b = qapp.start("job", 3, dedup_key="tenant-7")  # the first finished: the key is free
    assert b != a
    assert len(qapp.runs()) == 3


def test_two_workers_racing_exactly_one_holds_the_lease(qapp: tether.App) -> None:
    rid = qapp.start("job", 1)
    first, second = _claim(qapp, "w1"), _claim(qapp, "w2")
    assert first == [rid] and second == []
    assert qapp.store.get_run(rid).lease_owner == "w1"


def test_expired_lease_is_claimed_by_another_and_the_zombie_cannot_append(
    qapp: tether.App, clock: tether.FakeClock
) -> None:
    rid = qapp.start("job", 1)
    ((_, zombie),) = qapp.store.claim_next(
        [QueueLimits("default")], owner="w1", ttl=30, now=clock.now(), capacity=1
    )
    clock.advance(31)  # w1 stopped heartbeating
    assert _claim(qapp, "w2") == [rid]
    event = ev.new(ev.RUN_STARTED, {"by": "w1"}, clock.now())
    seq = len(qapp.events(rid))
    with pytest.raises(tether.LeaseLost, match="superseded by w2"):
        qapp.store.append(rid, [event], expected_seq=seq, epoch=zombie.epoch, now=clock.now())
    assert len(qapp.events(rid)) == seq  # nothing was appended


def test_heartbeat_keeps_the_lease(qapp: tether.App, clock: tether.FakeClock) -> None:
    rid = qapp.start("job", 1)
    _claim(qapp, "w1")
    for _ in range(5):
        clock.advance(20)
        qapp.store.worker_heartbeat("w1", ttl=30, now=clock.now())
        assert _claim(qapp, "w2") == []
    clock.advance(31)
    assert _claim(qapp, "w2") == [rid]


def test_priorities_and_delays(qapp: tether.App, clock: tether.FakeClock) -> None:
    low = qapp.start("job", 1, priority=0)
    high = qapp.start("job", 2, priority=5)
    later = qapp.start("job", 3, priority=9, delay="10m")
    assert _claim(qapp, "w", n=1) == [high]
    assert _claim(qapp, "w", n=5) == [low]  # `later` is not due
    clock.advance(601)  # `later` is due (and the other two leases have expired)
    assert _claim(qapp, "w", n=1) == [later]


def test_global_and_per_key_concurrency(qapp: tether.App) -> None:
    for n in range(6):
        qapp.start("job", n, concurrency_key=f"tenant-{n % 2}")
    assert len(_claim(qapp, "w1", n=10, concurrency=3)) == 3
    assert _claim(qapp, "w2", n=10, concurrency=3) == []  # all workers together
    for r in qapp.runs(status="running"):
        qapp.store.release(r.id, epoch=qapp.store.get_run(r.id).epoch)
        qapp.store.set_status(r.id, tether.store.Transition("completed"), now=0)
    waiting = {r.concurrency_key for r in qapp.runs(status="queued")}
    got = _claim(qapp, "w1", n=10, per_key=1)
    keys = sorted(qapp.store.get_run(r).concurrency_key or "" for r in got)
    assert keys == sorted(waiting)  # one per tenant that has work, never two


def test_rate_limit(qapp: tether.App, clock: tether.FakeClock) -> None:
    for n in range(5):
        qapp.start("job", n)
    assert len(_claim(qapp, "w", n=10, rate=(2, 60.0))) == 2
    assert _claim(qapp, "w", n=10, rate=(2, 60.0)) == []
    clock.advance(61)
    assert len(_claim(qapp, "w", n=10, rate=(2, 60.0))) == 2


def test_max_depth_refuses_new_work(qapp: tether.App) -> None:
    qapp.queue("default", max_depth=2)
    qapp.start("job", 1)
    qapp.start("job", 2)
    with pytest.raises(tether.QueueFull, match="max_depth 2"):
        qapp.start("job", 3)
    assert len(qapp.runs()) == 2


def test_bad_queue_settings(qapp: tether.App) -> None:
    with pytest.raises(ValueError, match="concurrency must be a positive int"):
        qapp.queue("q", concurrency=0)
    with pytest.raises(ValueError, match="rate's period must be a finite number of seconds"):
        qapp.queue("q", rate=(5, 0))
    with pytest.raises(ValueError, match="not a duration"):
        qapp.start("job", 1, delay="soon")


def test_waiting_runs_hold_no_lease_and_wake_into_the_queue(
    tmp_path: Path, clock: tether.FakeClock
) -> None:
    app = tether.open(str(tmp_path / "w.db"), clock=clock)

    @app.agent
    def gated(run: tether.Run) -> object:
        run.approve("go")
        run.sleep("1h")
        return run.wait("done")

    rid = app.start(gated)
    worker = app.worker()
    worker.run(until_idle=True, install_signals=False)
    record = app.store.get_run(rid)
    assert record.status == "waiting" and record.lease_owner is None
    assert _claim(app, "w") == []  # nothing to do while it waits
    app.approve(rid, "go", by="ops")
    app.worker().run(until_idle=True, install_signals=False)
    record = app.store.get_run(rid)
    assert record.waiting_for == "timer" and record.available_at == clock.now() + 3600
    clock.advance(3600)  # the timer is due: a worker picks the run up again
    app.worker().run(until_idle=True, install_signals=False)
    assert app.store.get_run(rid).waiting_for == "signal:done"
    app.signal(rid, "done", "ok")
    app.worker().run(until_idle=True, install_signals=False)
    assert app.get(rid).output == "ok"


def test_cancel_a_run_executing_elsewhere_stops_it_at_its_next_step(tmp_path: Path) -> None:
    import threading

    app = tether.open(str(tmp_path / "c.db"), lease_ttl=0.3)
    gate = threading.Event()
    seen: list[int] = []

    def slow(i: int) -> int:
        seen.append(i)
        if i == 1:
            gate.wait(30)
        return i

    @app.agent
    def long(run: tether.Run) -> int:
        return sum(run.step(f"s{i}", slow, i) for i in range(10))

    rid = app.start(long)
    worker = app.worker()
    t = threading.Thread(target=worker.run, kwargs={"until_idle": True, "install_signals": False})
    t.start()
    assert until(lambda: len(seen) == 2, 30)
    other = tether.open(str(tmp_path / "c.db"))
    handle = other.cancel(rid, by="ops")
    assert handle.status == "running" and handle.waiting == {"cancel": "requested"}
    journal = app._active[rid]  # the heartbeat (every ttl/3) carries the request to it
    assert until(lambda: journal.interrupted is not None, 30)
    gate.set()
    t.join(30)
    state = app.get(rid)
    assert state.status == "cancelled"
    assert seen == [0, 1]  # step 1 finished and was recorded; step 2 never started
    assert state.committed == 2


@pytest.mark.parametrize("executor", ["worker", "app.run"])
def test_a_cancel_reaches_a_run_executing_elsewhere_between_heartbeats(
    tmp_path: Path, executor: str
) -> None:
    """The lease's ttl is a minute (a heartbeat every 20 s); the executing process looks
    for cancel requests every second between beats, so the run stops at its next step
    after about a second. With compensate, the undo runs to its end even though the
    request keeps being delivered until the run ends."""
    import threading

    app = tether.open(str(tmp_path / "c.db"), lease_ttl=60)
    gate = threading.Event()
    seen: list[int] = []
    undone: list[int] = []

    def undo(result: object, i: int, *, idempotency_key: str) -> None:
        threading.Event().wait(1.5 * CANCEL_POLL)  # polls happen meanwhile
        undone.append(i)

    @app.tool(risk="write", compensate=undo)
    def write(i: int, *, idempotency_key: str) -> int:
        seen.append(i)
        if i == 1:
            gate.wait(10)
        return i

    @app.agent
    def long(run: tether.Run) -> int:
        return sum(run.tool(write, i) for i in range(10))

    if executor == "worker":
        app.start(long)
        target = partial(app.worker().run, until_idle=True, install_signals=False)
    else:
        target = partial(app.run, long)
    t = threading.Thread(target=target)
    t.start()
    assert until(lambda: len(seen) == 2, 10)
    (rid,) = app._active
    if executor == "worker":  # through the CLI, in another process
        cli = [sys.executable, "-m", "tether.cli", "--db", str(tmp_path / "c.db")]
        said = subprocess.run(
            [*cli, "cancel", rid, "--compensate", "--by", "ops", "--reason", "wrong tenant"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert said.returncode == 0, said.stderr
        assert f"run {rid} is executing in worker:" in said.stdout
        assert "asked to cancel" in said.stdout and "after undoing" in said.stdout
    else:
        other = tether.open(str(tmp_path / "c.db"))
        handle = other.cancel(rid, compensate=True, by="ops", reason="wrong tenant")
        assert handle.status == "running"
    journal = app._active[rid]
    assert until(lambda: journal.interrupted is not None, 5 * CANCEL_POLL)
    gate.set()
    t.join(20)
    state = app.get(rid)
    assert state.status == "cancelled"
    assert seen == [0, 1]  # step 1 finished and was recorded; step 2 never started
    assert undone == [1, 0]  # both undone, newest first, though the request came again
    (end,) = [e for e in app.events(rid) if e.type == "run.cancelled"]
    assert (end.payload()["by"], end.payload()["reason"]) == ("ops", "wrong tenant")
    (asked,) = app.audit(rid)  # who asked, from where the run was not executing
    assert (asked.action, asked.actor) == ("cancel.requested", "ops")


def test_deciding_a_queued_runs_approval_says_a_worker_resumes_it(tmp_path: Path) -> None:
    db = str(tmp_path / "d.db")
    app = tether.open(db)

    @app.agent
    def gated(run: tether.Run) -> str:
        run.approve("ship", approvers=["ops"])
        return "shipped"

    rid = app.start(gated, queue="deploys")
    app.worker(queues=["deploys"]).run(until_idle=True, install_signals=False)
    assert app.get(rid).status == "waiting"
    cli = [sys.executable, "-m", "tether.cli", "--db", db, "approve", rid, "ship", "--by", "ops"]
    said = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    assert said.returncode == 0, said.stderr
    assert said.stdout.strip() == (
        f"approved 'ship' on run {rid}; a worker of queue 'deploys' resumes it"
    )
    app.worker(queues=["deploys"]).run(until_idle=True, install_signals=False)
    assert app.get(rid).output == "shipped"


@pytest.mark.parametrize("here", [False, True])
def test_tether_retry_puts_a_failed_queued_run_back_in_its_queue(
    tmp_path: Path, here: bool
) -> None:
    db, flag = str(tmp_path / "r.db"), tmp_path / "api-down"
    flag.touch()
    module = f"billing_{'here' if here else 'queue'}"  # a module of its own per case
    (tmp_path / f"{module}.py").write_text(
        "import pathlib, tether\n"
        f"app = tether.open({db!r})\n"
        "def charge() -> str:\n"
        f"    if pathlib.Path({str(flag)!r}).exists():\n"
        "        raise ConnectionError('payments API down')\n"
        "    return 'charged'\n"
        "@app.agent\n"
        "def bill(run: tether.Run) -> str:\n"
        "    return run.step('charge', charge)\n"
    )
    sys.path.insert(0, str(tmp_path))
    sys.modules.pop(module, None)  # a second run in one process (mutmut) imports this file's
    try:
        app = importlib.import_module(module).app
    finally:
        sys.path.remove(str(tmp_path))
    rid = app.start("bill", queue="billing")
    app.worker(queues=["billing"]).run(until_idle=True, install_signals=False)
    assert app.get(rid).status == "failed"
    flag.unlink()
    cli = [sys.executable, "-m", "tether.cli", "--app", f"{module}:app", "retry", rid]
    cli += ["--here"] * here
    said = subprocess.run(cli, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert said.returncode == 0, said.stderr
    if here:  # executed by the CLI's process, as for a run started without a queue
        assert "executed now: 1 charge" in said.stdout and app.get(rid).output == "charged"
        return
    assert said.stdout.strip() == (
        f"run {rid} is queued again in 'billing': a worker of that queue retries it from its "
        f"failed step (`tether retry {rid} --here` executes it in this process)"
    )
    assert app.store.get_run(rid).status == "queued"
    stats = app.worker(queues=["billing"]).run(until_idle=True, install_signals=False)
    assert stats.completed == 1 and app.get(rid).output == "charged"
    log = subprocess.run(
        [*cli[:5], "log", rid], capture_output=True, text=True, timeout=60, cwd=tmp_path
    ).stdout
    assert "run.suspended   retry requested; queued in 'billing'" in log


def test_tether_show_says_where_a_queued_run_is_and_who_holds_it(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    app = tether.open(db)  # the real clock: the CLI compares due times with it

    @app.agent
    def job(run: tether.Run) -> None:
        return None

    later = app.start(job, queue="mail", priority=3, delay=600)
    now = app.start(job, queue="mail")
    limits = [QueueLimits("mail")]
    got = app.store.claim_next(limits, owner="w-busy", ttl=60, now=app.clock.now(), capacity=5)
    assert [record.id for record, _ in got] == [now]  # the delayed run is not due
    app.close()

    def show(rid: str) -> dict[str, str]:
        cli = [sys.executable, "-m", "tether.cli", "--db", db, "show", rid]
        out = subprocess.run(cli, capture_output=True, text=True, timeout=60, check=True).stdout
        return {line[:10].strip(): line[11:] for line in out.splitlines() if line[:1].strip()}

    shown = show(later)
    due = re.fullmatch(r"mail, priority 3, due \S+ \S+ \(in (\d+) s\)", shown["queue"])
    assert due is not None, shown["queue"]
    assert 540 <= int(due.group(1)) <= 600  # the CLI starts a while after the enqueue
    assert "held by" not in shown
    held = show(now)
    assert held["queue"] == "mail" and held["held by"].startswith("w-busy (lease until ")


def test_tether_fork_of_a_queued_run_says_a_worker_of_its_queue_runs_it(tmp_path: Path) -> None:
    db = str(tmp_path / "f.db")
    app = tether.open(db)

    @app.agent
    def job(run: tether.Run) -> int:
        return int(run.step("one", lambda: 1))

    rid = app.start(job, queue="mail")
    app.worker(queues=["mail"]).run(until_idle=True, install_signals=False)
    cli = [sys.executable, "-m", "tether.cli", "--db", db, "fork", rid, "--step", "1"]
    out = subprocess.run(cli, capture_output=True, text=True, timeout=60, check=True)
    new = out.stdout.strip()
    assert out.stderr.strip().endswith(
        f"a worker of queue 'mail' runs it (`tether resume {new}` runs it here)"
    )
    assert app.store.get_run(new).queue == "mail"


def test_tether_workers_shows_each_workers_runs(tmp_path: Path) -> None:
    db = str(tmp_path / "w.db")
    app = tether.open(db)  # the real clock: the CLI reads heartbeats against it

    @app.agent
    def job(run: tether.Run) -> None:
        return None

    now = app.clock.now()
    host, pid = os.uname().nodename, os.getpid()  # alive (this process): not reaped
    for wid in ("w-idle", "w-busy"):
        app.store.register_worker(WorkerRecord(wid, host, pid, ["default"], 8, now, now), now=now)
    ids = [app.start(job) for _ in range(5)]
    _claim(app, "w-busy")
    app.close()
    cli = [sys.executable, "-m", "tether.cli", "--db", db, "workers"]
    out = subprocess.run(cli, capture_output=True, text=True, timeout=60, check=True).stdout
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert lines["w-idle"].rstrip().endswith(" 0")
    busy = lines["w-busy"].split("5: ", 1)[1].split()
    assert busy[-1] == "…" and set(busy[:4]) < set(ids)


def test_a_worker_keeps_its_queue_limits_while_its_threads_claim_the_next_runs(
    tmp_path: Path,
) -> None:
    """A thread whose run ends claims the next run itself: the worker's limits (per
    queue in this worker, and all workers together) still hold, and every run runs once."""
    import threading

    app = tether.open(str(tmp_path / "lim.db"))
    app.queue("narrow", worker_concurrency=2)
    app.queue("shared", concurrency=3)
    lock = threading.Lock()
    now: dict[str, int] = {"narrow": 0, "shared": 0}
    peak: dict[str, int] = {"narrow": 0, "shared": 0}
    ran: list[int] = []

    limit = {"narrow": 2, "shared": 3}
    full = {q: threading.Event() for q in limit}  # the queue once ran at its limit

    @app.agent
    def hold(run: tether.Run, queue: str, n: int) -> int:
        def body() -> int:
            with lock:
                now[queue] += 1
                peak[queue] = max(peak[queue], now[queue])
                ran.append(n)
                if now[queue] >= limit[queue]:
                    full[queue].set()
            # the first runs hold their slots until the queue is full: its limit is reached
            # whatever the machine's speed (a worker that never fills it fails after 30 s)
            full[queue].wait(30)
            with lock:
                now[queue] -= 1
            return n

        return run.step("hold", body)

    ids = [app.start(hold, q, n, queue=q) for n in range(24) for q in ("narrow", "shared")]
    stats = app.worker(queues=["narrow", "shared"], concurrency=8).run(
        until_idle=True, install_signals=False
    )
    assert stats.completed == len(ids) and stats.claimed == len(ids)
    assert all(app.get(i).status == "completed" for i in ids)
    assert sorted(ran) == sorted(list(range(24)) * 2)  # each run's body once
    assert peak["narrow"] == 2 and peak["shared"] == 3


def test_until_idle_waits_for_a_claim_in_flight(tmp_path: Path) -> None:
    """Where a worker's threads claim at once (Store.concurrent_claims), the claiming loop
    may find nothing and no run executing while a thread's claim is still in flight:
    the worker is not idle until that claim has returned, and it executes every run.
    Ordered by events: the in-flight claim lets the slow run end, and returns only once
    the loop has found nothing to claim with no run executing."""
    import threading

    app = tether.open(str(tmp_path / "inflight.db"), clock=tether.FakeClock())
    app.store.concurrent_claims = True  # as on PostgreSQL: claims do not wait for each other
    slow_may_end, loop_found_nothing = threading.Event(), threading.Event()

    @app.agent
    def nap(run: tether.Run, slow: bool) -> bool:
        return bool(run.step("nap", lambda: slow_may_end.wait(30) if slow else True))

    first = [app.start(nap, False), app.start(nap, True)]
    late: list[str] = []
    waited: list[bool] = []
    claim_next = app.store.claim_next

    def claim(*args: object, **kwargs: object) -> object:
        if threading.current_thread() is not threading.main_thread() and not late:
            # the quick run's thread claims its next run while the slow run holds the
            # other slot; the slow run ends meanwhile, and the loop finds nothing to claim
            late.append("")
            slow_may_end.set()
            waited.append(loop_found_nothing.wait(30))
            late[:] = [app.start(nap, False), app.start(nap, False)]
        found = claim_next(*args, **kwargs)  # type: ignore[arg-type]
        in_loop = threading.current_thread() is threading.main_thread()
        if in_loop and slow_may_end.is_set() and not found and first[1] not in app._active:
            loop_found_nothing.set()
        return found

    app.store.claim_next = claim  # type: ignore[method-assign]
    stats = app.worker(concurrency=2, poll=0.02).run(until_idle=True, install_signals=False)
    assert waited == [True] and len(late) == 2
    assert [app.get(i).status for i in [*first, *late]] == ["completed"] * 4
    assert stats.completed == 4


def test_runs_a_claim_brings_after_stop_are_executed_not_stranded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim in flight when the worker stops may return after its pool began shutting
    down: the claiming thread executes those runs itself (as the pool executes the runs
    it was already given), instead of leaving them leased to a stopped worker. Ordered by
    events: the first run ends once the loop found nothing and parked in its 60 s poll;
    its thread's claim stops the worker and returns once the pool is shutting down."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    app = tether.open(str(tmp_path / "stop.db"), clock=tether.FakeClock())  # the late runs
    app.store.concurrent_claims = True  # are due for the claim that started before them
    loop_parked, pool_closing = threading.Event(), threading.Event()

    @app.agent
    def nap(run: tether.Run, first: bool) -> bool:
        return bool(run.step("nap", lambda: loop_parked.wait(30) if first else True))

    shutdown = ThreadPoolExecutor.shutdown

    def closing(pool: ThreadPoolExecutor, wait: bool = True, **kwargs: bool) -> None:
        shutdown(pool, wait=False, **kwargs)  # the pool takes no more work from here
        pool_closing.set()
        shutdown(pool, wait=wait, **kwargs)

    monkeypatch.setattr(ThreadPoolExecutor, "shutdown", closing)
    first = app.start(nap, True)
    worker = app.worker(concurrency=2, poll=60)
    late: list[str] = []
    waited: list[bool] = []
    claim_next = app.store.claim_next

    def claim(*args: object, **kwargs: object) -> object:
        if threading.current_thread() is not threading.main_thread() and not late:
            late.append("")
            worker.stop()
            waited.append(pool_closing.wait(30))  # the loop ended, the pool shuts down
            late[:] = [app.start(nap, False), app.start(nap, False)]
        found = claim_next(*args, **kwargs)  # type: ignore[arg-type]
        if threading.current_thread() is threading.main_thread() and not found:
            loop_parked.set()  # the loop found nothing: it waits for work (poll 60 s)
        return found

    app.store.claim_next = claim  # type: ignore[method-assign]
    stats = worker.run(install_signals=False)  # stop() wakes the parked loop
    assert waited == [True] and len(late) == 2
    assert [app.get(i).status for i in [first, *late]] == ["completed"] * 3
    assert stats.completed == 3


@pytest.mark.parametrize("bad", ["-1", "many", "1.5"])
def test_tether_worker_refuses_a_bad_prefetch(tmp_path: Path, bad: str) -> None:
    cli = [sys.executable, "-m", "tether.cli", "--db", str(tmp_path / "p.db"), "worker"]
    out = subprocess.run([*cli, "--prefetch", bad], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--prefetch" in out.stderr and "a number of runs >= 0 or auto" in out.stderr


@pytest.mark.parametrize(
    ("flag", "bad", "says"),
    [
        ("--concurrency", "0", "a whole number of 1 or more, not '0'"),
        ("--concurrency", "-1", "a whole number of 1 or more, not '-1'"),
        ("--max-runs", "0", "a whole number of 1 or more, not '0'"),
        ("--poll", "-1", "a number of seconds above 0, not '-1'"),
        ("--poll", "nan", "a number of seconds above 0, not 'nan'"),
    ],
)
def test_tether_worker_refuses_bad_numbers(tmp_path: Path, flag: str, bad: str, says: str) -> None:
    """Each used to start a worker anyway (a negative poll, max-runs 0), or to end in
    'unexpected ValueError' (concurrency)."""
    cli = [sys.executable, "-m", "tether.cli", "--db", str(tmp_path / "p.db"), "worker"]
    out = subprocess.run([*cli, flag, bad], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "unexpected" not in out.stderr
    assert f"argument {flag}: {says}" in out.stderr


def test_tether_runs_refuses_a_limit_below_one(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "tether.cli", "--db", str(tmp_path / "p.db"), "runs"]
    out = subprocess.run([*cli, "--limit", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "argument --limit: a whole number of 1 or more" in out.stderr


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"concurrency": 0}, "concurrency is how many runs execute at once"),
        ({"concurrency": 2.5}, "concurrency is how many runs execute at once"),
        ({"poll": 0}, "poll is the seconds between claims"),
        ({"poll": -0.5}, "poll is the seconds between claims"),
        ({"poll": "fast"}, "poll is the seconds between claims"),
    ],
)
def test_a_worker_refuses_bad_settings(
    qapp: tether.App, options: dict[str, object], says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        qapp.worker(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -3, True, 1.5])
def test_a_worker_refuses_a_bad_max_runs(qapp: tether.App, bad: object) -> None:
    qapp.start("job", 1)
    with pytest.raises(ValueError, match="max_runs is a number of claims"):
        qapp.worker().run(max_runs=bad, install_signals=False)  # type: ignore[arg-type]
    assert qapp.store.list_workers() == []  # refused before it registered or claimed
    assert qapp.store.get_run(qapp.runs()[0].id).status == "queued"


def test_a_worker_of_another_pid_namespace_is_not_reaped_by_pid(tmp_path: Path) -> None:
    """Two containers on host networking share the host's name; a pid of one means
    nothing in the other. A worker starting here must not take the runs of a worker
    there because no process here has its pid: only its heartbeat's age can tell."""
    from tether.model.clock import pid_space
    from tether.services.workers import reap_dead_workers

    clock = tether.FakeClock()
    app = tether.open(str(tmp_path / "ns.db"), clock=clock)

    @app.agent
    def job(run: tether.Run) -> None:
        return None

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # its pid is free here, as another container's worker's pid would be
    host, now = os.uname().nodename, app.clock.now()
    other = "0badf00d" if pid_space() != "0badf00d" else "0badf00e"
    there = f"worker:{host}:{child.pid}:{other}:abc123"
    gone = f"worker:{host}:{child.pid}:{pid_space()}:def456"
    for wid in (there, gone):
        record = WorkerRecord(wid, host, child.pid, ["default"], 8, now, now)
        app.store.register_worker(record, now=now)
    held = app.start(job)
    clock.advance(1)  # claims take the oldest first
    lost = app.start(job)
    assert _claim(app, there, 1) == [held] and _claim(app, gone, 1) == [lost]

    left = reap_dead_workers(app)
    assert [w.id for w in left] == [there]
    assert app.store.get_run(held).lease_owner == there  # still its
    assert app.store.get_run(lost).lease_expires <= now  # claimable at once
    clock.advance(10 * app.lease_ttl + 1)  # its heartbeat is long past: now it goes
    assert reap_dead_workers(app) == []
    app.close()


def test_until_idle_does_not_stop_while_a_run_that_ends_frees_a_queue_slot(tmp_path: Path) -> None:
    """A claim finds the queue's only slot taken; the run holding it ends before the
    worker asks whether it is idle: the worker claims again (the next run is claimable
    now) instead of stopping with work left in the queue."""
    app = tether.open(str(tmp_path / "idle.db"))
    app.queue("solo", concurrency=1)
    go = threading.Event()

    @app.agent
    def slow(run: tether.Run) -> str:
        go.wait(10)
        return "slow"

    @app.agent
    def quick(run: tether.Run) -> str:
        return "quick"

    first, second = app.start(slow, queue="solo"), app.start(quick, queue="solo")
    worker = app.worker(queues=["solo"], concurrency=2)
    claim = app.store.claim_next

    def claim_then_let_the_slot_free(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():
            # the slow run's thread claims next once its run ended: it comes second, after
            # the claiming loop decided whether the worker is idle (a stopping worker's
            # thread claims nothing)
            if worker._stopping.wait(1):
                return []
            return claim(*args, **kwargs)
        got = claim(*args, **kwargs)
        if not got and not go.is_set():  # the slot is taken: the run holding it ends now
            go.set()
            until(lambda: not worker._active, 10)
        return got

    app.store.claim_next = claim_then_let_the_slot_free  # type: ignore[method-assign]
    stats = worker.run(until_idle=True, install_signals=False)
    assert stats.completed == 2, stats
    assert app.get(first).output == "slow" and app.get(second).output == "quick"
    app.close()
