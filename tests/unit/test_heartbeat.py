"""The heartbeat loop on an injected clock: when it beats, and what it does between beats.
No wall clock: the stopping event's ``wait`` moves the fake clock by the tick it waits."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, cast

import pytest

import tether
from tether.engine import leases as leases_module
from tether.engine.deps import Deps
from tether.engine.leases import CANCEL_POLL, Active, Leases, heartbeat


class Ticks:
    """A stopping event whose ``wait(t)`` moves ``now`` by ``t``; set after ``n`` waits."""

    def __init__(self, n: int) -> None:
        self.now, self.left, self.waits = 0.0, n, 0

    def wait(self, timeout: float) -> bool:
        self.now += timeout
        self.waits += 1
        return self.waits > self.left


def _loop(
    interval: float, waits: int, *, executing: bool = False
) -> tuple[list[float], list[float], list[tuple[str, Any]]]:
    """Run the loop for ``waits`` ticks; (beats, cancel reads, interrupts), by fake time."""
    ticks = Ticks(waits)
    beats: list[float] = []
    reads: list[float] = []
    interrupts: list[tuple[str, Any]] = []
    active = SimpleNamespace(
        create_overdue=lambda: None,
        executing=lambda owner: executing,
        interrupt=lambda run_id, exc: interrupts.append((run_id, exc)),
    )
    store = SimpleNamespace(cancel_requests=lambda owner: reads.append(ticks.now) or {"r1": 2})
    leases = SimpleNamespace(
        active=active, deps=SimpleNamespace(store=store), retry_let_go=lambda: None
    )

    def beat() -> dict[str, int]:
        beats.append(ticks.now)
        return {}

    heartbeat(cast(Any, leases), "w", cast(Any, ticks), interval, beat, clock=lambda: ticks.now)
    return beats, reads, interrupts


def test_the_first_beat_comes_after_one_interval_then_every_interval() -> None:
    assert CANCEL_POLL == 1.0  # the tick when the interval is longer
    beats, reads, _ = _loop(3.0, 10)
    assert beats == [3.0, 6.0, 9.0]  # not at once: the claim just set the lease
    assert reads == []  # nothing executes here: no cancel to read between beats


def test_a_beat_due_within_half_a_tick_is_taken_at_that_tick() -> None:
    # due at 2.5; the tick at 2.0 is within half a tick (1.0 / 2) of it: it beats then,
    # not a whole tick late (at 3.0)
    beats, _, _ = _loop(2.5, 5)
    assert beats == [2.0, 4.0]


def test_between_beats_an_executing_owner_reads_its_cancel_requests_every_tick() -> None:
    beats, reads, interrupts = _loop(3.0, 4, executing=True)
    assert beats == [3.0]
    assert reads == [1.0, 2.0, 4.0]  # every tick but the beat's (the beat returns them)
    assert [run_id for run_id, _ in interrupts] == ["r1"] * 3
    assert all(exc.compensate for _, exc in interrupts)  # flag 2: cancel with compensation


def test_a_failed_beat_is_logged_with_its_owner_and_the_next_one_retries(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ticks = Ticks(4)
    beats: list[float] = []
    active = SimpleNamespace(create_overdue=lambda: None, executing=lambda owner: False)
    leases = SimpleNamespace(
        active=active, deps=SimpleNamespace(store=None), retry_let_go=lambda: None
    )

    def beat() -> dict[str, int]:
        beats.append(ticks.now)
        if len(beats) == 1:
            raise RuntimeError("the database is down")
        return {}

    with caplog.at_level(logging.WARNING, logger="tether"):
        heartbeat(cast(Any, leases), "w7", cast(Any, ticks), 2.0, beat, clock=lambda: ticks.now)
    assert beats == [2.0, 4.0]  # the failed beat at 2.0, the next one on time
    assert [r.getMessage() for r in caplog.records] == [
        "w7: heartbeat failed: the database is down"
    ]


def test_an_app_keeps_one_named_daemon_heartbeat_and_starts_another_when_it_died(
    tmp_path: Any,
) -> None:
    """One heartbeat thread per App, however often it is asked for; a daemon, so it never
    keeps the process from exiting; named, so a thread dump says what it is; and started
    again when it died (kept alive, a dead thread would extend no lease)."""
    app = tether.open(str(tmp_path / "hb.db"))
    leases = app._leases
    try:
        leases.keep()
        first = leases._heartbeat
        assert first is not None and first.is_alive()
        assert (first.name, first.daemon) == ("tether-heartbeat", True)
        leases.keep()
        assert leases._heartbeat is first  # not a second thread
        first.stop()  # the thread ends, as if it died
        assert not first.is_alive()
        leases.keep()
        assert leases._heartbeat is not first and leases._heartbeat.is_alive()
    finally:
        leases.stop()
        app.close()
    assert leases._heartbeat is None


def test_the_heartbeat_thread_beats_every_third_of_the_lease_and_no_faster_than_50_ms(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    loops: list[tuple[Any, ...]] = []
    monkeypatch.setattr(leases_module, "heartbeat", lambda *args: loops.append(args))
    for ttl, interval in ((30.0, 10.0), (3.0, 1.0), (0.06, 0.05)):
        app = tether.open(str(tmp_path / f"{ttl}.db"), lease_ttl=ttl)
        thread = leases_module._Heartbeat(app._leases)
        thread.run()  # the loop it would run, called here: it records its arguments
        leases, owner, stopping, every, beat = loops[-1]
        assert (leases, owner, stopping, every) == (
            app._leases,
            app.owner,
            thread._stop_event,
            interval,
        )
        assert beat == thread._beat
        app.close()


def test_a_beat_extends_this_process_s_leases_by_the_ttl_and_returns_its_cancel_requests(
    tmp_path: Any,
) -> None:
    clock = tether.FakeClock()
    app = tether.open(str(tmp_path / "beat.db"), clock=clock, lease_ttl=30)

    @app.agent
    def job(run: tether.Run) -> int:
        return 1

    mine, other = app.start(job, queue="default"), app.start(job, queue="default")
    app._leases.claim(app.store.get_run(mine))
    app.store.claim(other, owner="someone-else", ttl=30, now=clock.now())
    start = clock.now()
    clock.advance(12)
    beat = leases_module._Heartbeat(app._leases)._beat
    assert beat() == {}
    assert app.store.get_run(mine).lease_expires == start + 12 + 30  # renewed from now
    assert app.store.get_run(other).lease_expires == start + 30  # not this process's
    app.store.request_cancel(mine, compensate=True, now=clock.now())
    app.store.request_cancel(other, compensate=False, now=clock.now())
    assert beat() == {mine: 2}  # flag 2: with compensation
    app.close()


class Refusing:
    """A store that refuses ``refusals`` appends (the database down), then takes them."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.appends: list[tuple[str, Any]] = []

    def append(self, run_id: str, events: Any, **kw: Any) -> None:
        if self.refusals:
            self.refusals -= 1
            raise tether.StoreUnavailable("the database is down")
        self.appends.append((run_id, kw["transition"]))


def test_a_lease_not_given_back_is_retried_with_its_transition_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = Refusing(refusals=4)  # each try is two appends: a lost connection is retried once
    leases = Leases(Deps(cast(Any, store), tether.FakeClock(), "me"), Active())
    later = cast(Any, "queued again, due later")  # the transition, passed through as is
    with caplog.at_level(logging.WARNING, logger="tether"):
        assert leases.let_go("r1", 4, later) is False  # refused twice (a lost connection's retry)
        leases.retry_let_go()  # refused once more: kept, said nothing
        assert store.appends == []
        leases.retry_let_go()
        leases.retry_let_go()  # given back: nothing left to try
    assert store.appends == [("r1", later)]
    assert [r.getMessage() for r in caplog.records] == [
        "could not give run r1 back yet (retried every second): the database is down"
    ]


def test_a_refused_creation_does_not_keep_the_other_overdue_runs_from_being_created() -> None:
    flushed: list[str] = []

    def journal(run_id: str, refused: bool) -> Any:
        def flush(born: bool) -> None:
            assert born
            if refused:  # the journal is poisoned by it: its execution stops at its next call
                raise tether.StoreUnavailable("refused")
            flushed.append(run_id)

        birth = SimpleNamespace(overdue=lambda: True)
        return SimpleNamespace(run_id=run_id, birth=birth, flush=flush)

    active = Active()
    for run_id, refused in (("r1", True), ("r2", False)):
        active.add(journal(run_id, refused))
    active.create_overdue()
    assert flushed == ["r2"]
