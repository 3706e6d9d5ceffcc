"""Leases across machines need their clocks to agree.

A lease is a due time written with its holder's clock and judged expired with other
processes' clocks. On PostgreSQL those processes run on other machines: one whose
clock is ahead would see live leases as expired and take runs that still execute
(a step would run twice). So a process measures its clock against the database's
before its first lease, and refuses leases when it is off by more than a third of a
lease. The skewed clocks below are this machine's real clock shifted, checked against
the real server's.
"""

from __future__ import annotations

import logging
import time

import pytest
from _conformance import Backend

import tether
from tether.store import Store

pytestmark = pytest.mark.conformance


class Shifted(tether.SystemClock):
    """The system clock, ``by`` seconds off: a machine whose clock drifted."""

    def __init__(self, by: float) -> None:
        self.by = by

    def now(self) -> float:
        return time.time() + self.by


def test_a_store_measures_the_databases_clock_against_this_process(store: Store) -> None:
    """This process and the server (or the SQLite file) share this machine's clock, so the
    offset is zero up to the reading's own error: half the quickest round trip it timed
    (the server read its clock between the two readings of ours around it). Bounded by
    what it measured, not by a fixed time a loaded machine could exceed."""
    for ahead in (0.0, 30.0):  # this process's clock as it is, and 30 s fast
        readings: list[float] = []

        def now(ahead: float = ahead, readings: list[float] = readings) -> float:
            readings.append(time.time() + ahead)
            return readings[-1]

        offset = store.clock_offset(now)
        pairs = zip(readings[::2], readings[1::2], strict=True)
        trips = [after - before for before, after in pairs]
        if not trips:  # SQLite: one machine, nothing to measure
            assert offset == 0.0
        else:  # 0.1 ms for the readings' rounding
            assert abs(offset + ahead) <= min(trips) / 2 + 1e-4, (ahead, offset, trips)


@pytest.mark.parametrize("by", [45.0, -45.0])
def test_a_worker_and_a_run_refuse_leases_on_a_skewed_clock(pg_backend: Backend, by: float) -> None:
    good = tether.open(pg_backend.url)

    @good.agent
    def job(run: tether.Run) -> int:
        return run.step("one", lambda: 1)

    queued = good.start(job, queue="default")
    waiting_before = good.store.get_run(queued)

    app = tether.open(pg_backend.url, clock=Shifted(by), lease_ttl=30)
    app.agent(job)
    side = "ahead of" if by > 0 else "behind"
    with pytest.raises(tether.ClockSkew, match=f"clock is 45.0 s {side} the database's") as e:
        app.worker().run(until_idle=True, install_signals=False)
    assert "Synchronise this machine's clock" in str(e.value) and "10.0 s" in str(e.value)
    assert app.store.list_workers() == []  # refused before it registered or claimed
    assert app.store.get_run(queued) == waiting_before  # the queued run untouched
    with pytest.raises(tether.ClockSkew):
        app.run(job)
    assert [r.id for r in good.runs()] == [queued]  # nothing was created
    with pytest.raises(tether.ClockSkew):
        app.resume(queued)
    assert good.store.get_run(queued) == waiting_before

    # with a longer lease the same skew is within a third of it: the worker runs
    patient = tether.open(pg_backend.url, clock=Shifted(by), lease_ttl=180)
    patient.agent(job)
    mine = patient.start(job, queue="default")  # due by its own clock
    stats = patient.worker().run(until_idle=True, install_signals=False)
    assert stats.completed >= 1 and good.get(mine).output == 1
    for a in (good, app, patient):
        a.close()


def test_a_small_skew_is_logged_and_tolerated(
    pg_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    app = tether.open(pg_backend.url, clock=Shifted(3.0), lease_ttl=30)

    @app.agent
    def job(run: tether.Run) -> int:
        return run.step("one", lambda: 1)

    with caplog.at_level(logging.WARNING, logger="tether"):
        assert app.run(job).output == 1
        app.run(job)  # checked once per App: one warning
    warned = [r.getMessage() for r in caplog.records if "clock" in r.getMessage()]
    assert len(warned) == 1 and "3.0 s ahead of the database's" in warned[0]
    app.close()


def test_an_injected_clock_is_the_callers_time_and_is_not_checked(pg_backend: Backend) -> None:
    clock = tether.FakeClock()  # 2023: years behind the server
    app = tether.open(pg_backend.url, clock=clock)

    @app.agent
    def job(run: tether.Run) -> int:
        return run.step("one", lambda: 1)

    assert app.run(job).output == 1
    app.close()
