"""``Store.gauges`` on both backends: the unfinished runs by status and agent, the queues'
depth and oldest claimable run; finished runs are never counted."""

from __future__ import annotations

import threading

import pytest

import tether

pytestmark = pytest.mark.conformance


def test_gauges_count_unfinished_runs_and_queues(app: tether.App) -> None:
    @app.agent
    def a(run: tether.Run) -> int:
        return 1

    @app.agent
    def b(run: tether.Run) -> None:
        run.approve("go")

    app.run(a)  # completed: not counted
    app.run(b)  # waiting for "go"
    app.start(a, queue="q1")
    app.start(b, queue="q1")
    app.start(a, queue="q2", delay=3600)  # queued, not claimable for an hour
    now = app.clock.now()
    g = app.store.gauges(now)
    assert sorted(g.active) == [("queued", "a", 2), ("queued", "b", 1), ("waiting", "b", 1)]
    by_queue = {q: (n, oldest) for q, n, oldest in g.queues}
    assert set(by_queue) == {"q1", "q2"}
    assert by_queue["q1"][0] == 2
    oldest = by_queue["q1"][1]
    assert oldest is not None and oldest <= now
    assert by_queue["q2"] == (1, None)  # nothing claimable there yet
    assert g.in_doubt == 0
    later = app.store.gauges(now + 7200)
    assert dict((q, o is not None) for q, _, o in later.queues)["q2"]


def test_gauges_count_the_runs_in_doubt(app: tether.App) -> None:
    answer = threading.Event()

    def hangs(amount: int) -> int:
        answer.wait(60)
        return amount

    tool = app.tool(risk="write", on_doubt="ask", retry=tether.Retry(timeout=0.05))(hangs)

    @app.agent
    def pay(run: tether.Run) -> int:
        return int(run.tool(tool, 40))

    @app.agent
    def asks(run: tether.Run) -> None:
        run.approve("go")

    try:
        assert app.run(pay).status == "waiting"
        app.run(asks)  # waiting for a person too, but not in doubt
    finally:
        answer.set()  # the abandoned call returns
    g = app.store.gauges(app.clock.now())
    assert g.in_doubt == 1
    assert sorted(g.active) == [("waiting", "asks", 1), ("waiting", "pay", 1)]
