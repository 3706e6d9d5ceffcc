"""Schedules (``app.schedule``) on SQLite and PostgreSQL, with a fake clock: their rows,
redeclaring one, pausing and resuming, and the ticks a worker fires (missed ticks all
or only the newest; two apps firing one tick start one run)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from _conformance import Backend

import tether
from tether.model.clock import FakeClock

pytestmark = pytest.mark.conformance
T0 = 1_800_000_000.0  # a whole minute (2027-01-15T08:00:00Z)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0 + 0.5)


def _app(backend: Backend, clock: FakeClock) -> tether.App:
    app = tether.open(backend.url, clock=clock)

    @app.agent
    def report(run: tether.Run, kind: str, *, to: str = "ops") -> str:
        return f"{kind} to {to}"

    return app


@pytest.fixture
def app(backend: Backend, clock: FakeClock) -> Iterator[tether.App]:
    a = _app(backend, clock)
    yield a
    a.close()


def _fire(app: tether.App, queues: tuple[str, ...] = ("default",)) -> list[str]:
    app.worker(queues=queues, poll=0.01).run(until_idle=True, install_signals=False)
    return sorted(r.id for r in app.runs(agent="report", limit=1000))


def test_a_schedule_is_a_row_that_redeclaring_changes(app: tether.App, clock: FakeClock) -> None:
    s = app.schedule("report", "daily", cron="0 9 * * *", to="me")
    assert (s.name, s.agent, s.spec, s.queue, s.paused) == (
        "report",
        "report",
        "cron:0 9 * * *",
        "default",
        False,
    )
    assert s.next_at == T0 + 3600  # 09:00 the same day
    clock.advance(60)
    again = app.schedule("report", "weekly", cron="0  9 * * *")  # the same timing
    assert again.next_at == s.next_at and again.inputs != s.inputs
    moved = app.schedule("report", "weekly", cron="30 8 * * *")
    assert moved.next_at == T0 + 1800
    assert [x.name for x in app.schedules()] == ["report"]


def test_bad_schedules_are_refused(app: tether.App) -> None:
    with pytest.raises(tether.InvalidInput, match=r"cron=.*or every="):
        app.schedule("report", "x")
    with pytest.raises(tether.InvalidInput, match=r"cron=.*or every="):
        app.schedule("report", "x", cron="* * * * *", every=5)
    with pytest.raises(tether.InvalidInput, match="the hour field '25'"):
        app.schedule("report", "x", cron="0 25 * * *")
    with pytest.raises(tether.InvalidInput, match="schedule name"):
        app.schedule("report", "x", every=5, name="no spaces")
    with pytest.raises(tether.NotFound):
        app.schedule("nobody", every=5)
    with pytest.raises(tether.NotFound, match="no schedule 'gone'"):
        app.pause_schedule("gone")
    assert app.schedules() == []


def test_a_worker_fires_each_due_tick_once(app: tether.App, clock: FakeClock) -> None:
    app.schedule("report", "tick", every=10, name="ten", catch_up=True)
    assert _fire(app) == []  # nothing due yet
    clock.advance(10)
    assert _fire(app) == [f"ten@{int(T0 + 10) * 1000}"]
    assert _fire(app) == [f"ten@{int(T0 + 10) * 1000}"]  # fired once
    clock.advance(35)  # three ticks missed: all fired (catch_up)
    fired = _fire(app)
    assert fired == [f"ten@{int(T0 + k) * 1000}" for k in (10, 20, 30, 40)]
    assert {app.get(r).output for r in fired} == {"tick to ops"}
    (s,) = app.schedules()
    assert s.last_tick == T0 + 40 and s.next_at == T0 + 50


def test_missed_ticks_are_skipped_unless_caught_up(app: tether.App, clock: FakeClock) -> None:
    app.schedule("report", "tick", cron="* * * * *", name="minutely")
    clock.advance(60 * 5)  # five ticks due: only the newest is fired
    assert _fire(app) == [f"minutely@{int(T0 + 300) * 1000}"]


def test_a_paused_schedule_fires_nothing_and_resumes_from_now(
    app: tether.App, clock: FakeClock
) -> None:
    app.schedule("report", "tick", every=10, name="ten", catch_up=True)
    assert app.pause_schedule("ten") and not app.pause_schedule("ten")
    clock.advance(30)
    assert _fire(app) == [] and app.schedules()[0].paused
    assert app.resume_schedule("ten") and not app.resume_schedule("ten")
    assert app.schedules()[0].next_at == T0 + 40  # the paused ticks are not fired
    clock.advance(10)
    assert _fire(app) == [f"ten@{int(T0 + 40) * 1000}"]
    assert app.unschedule("ten") and not app.unschedule("ten") and app.schedules() == []
    assert len(_fire(app)) == 1  # its runs stay


def test_a_worker_fires_only_its_queues_schedules(app: tether.App, clock: FakeClock) -> None:
    app.schedule("report", "tick", every=10, name="other", queue="reports")
    clock.advance(10)
    assert _fire(app, ("default",)) == []
    assert _fire(app, ("reports",)) == [f"other@{int(T0 + 10) * 1000}"]


def test_two_apps_firing_one_tick_start_one_run(
    app: tether.App, backend: Backend, clock: FakeClock
) -> None:
    app.schedule("report", "tick", every=10, name="ten")
    other = _app(backend, clock)
    clock.advance(10)
    stale = other.schedules()[0]  # what a racing worker read before the first fired
    assert _fire(app) == [f"ten@{int(T0 + 10) * 1000}"]
    assert not other.store.advance_schedule(
        "ten", from_at=stale.next_at, to_at=stale.next_at + 10, tick=stale.next_at, now=clock.now()
    )
    assert _fire(other) == [f"ten@{int(T0 + 10) * 1000}"]  # found, not started again
    other.close()


def test_a_pause_between_a_tick_and_its_advance_keeps_the_tick_recorded(
    app: tether.App, clock: FakeClock
) -> None:
    """A worker fired a tick (its run exists), then a pause landed before the worker moved
    the schedule on: the schedule still says that tick was its last (it stays paused)."""
    app.schedule("report", "tick", every=10, name="ten")
    clock.advance(10)
    due = app.schedules()[0]  # what the firing worker read
    assert app.pause_schedule("ten")  # lands between the tick's run and the advance
    tick = due.next_at
    assert app.store.advance_schedule(
        "ten", from_at=tick, to_at=tick + 10, tick=tick, now=clock.now()
    )
    (after,) = app.schedules()
    assert after.paused and after.last_tick == tick
    assert app.resume_schedule("ten")
    clock.advance(10)
    assert _fire(app) == [f"ten@{int(T0 + 20) * 1000}"]  # the next tick, once


def test_a_process_without_the_agent_leaves_the_tick(
    app: tether.App, backend: Backend, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    app.schedule("report", "tick", every=10, name="ten")
    bare = tether.open(backend.url, clock=clock)  # no agent "report" here
    clock.advance(10)
    with caplog.at_level(logging.WARNING, "tether.services.schedules"):
        bare.worker(poll=0.01).run(until_idle=True, install_signals=False)
    assert "schedule ten cannot fire here" in caplog.text and bare.runs() == []
    bare.close()
    assert _fire(app) == [f"ten@{int(T0 + 10) * 1000}"]


def test_a_full_queue_leaves_the_tick_due_and_the_worker_working(
    app: tether.App, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    app.queue("reports", max_depth=1)
    waiting = app.start("report", "later", queue="reports", delay=3600)  # fills the queue
    app.schedule("report", "tick", every=10, name="ten", queue="reports")
    clock.advance(10)
    with caplog.at_level(logging.WARNING, "tether.services.schedules"):
        assert _fire(app, ("reports",)) == [waiting]
    assert "schedule ten cannot fire here: queue 'reports' already holds 1" in caplog.text
    assert app.schedules()[0].next_at == T0 + 10  # still due
    app.cancel(waiting)
    assert _fire(app, ("reports",)) == sorted([waiting, f"ten@{int(T0 + 10) * 1000}"])
