"""A batch of child runs (issue 31): ``run.children(agent, items)`` starts a child per
item in one transaction, their positions taken in item order; a replay starts none,
a parent that crashed before recording them finds them by their ids, and bad input
starts none. On both backends."""

from __future__ import annotations

from typing import Any

import pytest

import tether
from tether.engine.children import child_id
from tether.errors import EncodeError

pytestmark = pytest.mark.conformance


def drain(app: tether.App) -> tether.WorkerStats:
    return app.worker(queues=["default"], concurrency=2).run(until_idle=True, install_signals=False)


def _agents(app: tether.App) -> tuple[Any, Any]:
    @app.agent
    def square(run: tether.Run, n: int) -> int:
        return int(run.step("sq", lambda: n * n))

    @app.agent
    def fan(run: tether.Run, n: int) -> list[int]:
        run.step("before", lambda: None)
        kids = run.children(square, range(n))
        return list(run.join(kids))

    return square, fan


def test_children_are_started_in_one_transaction_and_joined(
    app: tether.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, fan = _agents(app)
    batches: list[int] = []
    enqueue_many = app.store.enqueue_many

    def counted(runs: Any, **kw: Any) -> list[bool]:
        batches.append(len(runs))
        return enqueue_many(runs, **kw)

    monkeypatch.setattr(app.store, "enqueue_many", counted)
    rid = app.start(fan, 5)
    drain(app)
    state = app.get(rid)
    assert (state.status, state.output) == ("completed", [0, 1, 4, 9, 16])
    kids = [child_id(rid, p) for p in range(2, 7)]  # positions 2..6, in item order
    assert [s.output for s in state.steps if s.kind == "child"] == kids
    assert [app.get(k).caller for k in kids] == [{"run": rid, "pos": p} for p in range(2, 7)]
    assert batches == [5]  # one transaction; the parent's replay after its wake: none
    assert [e.type for e in app.events(kids[0])].count("run.created") == 1


def test_a_parent_that_lost_its_records_finds_its_children(app: tether.App) -> None:
    """As after a crash between the batch's commit and the parent's records (which ride
    with its next commit): a child of the batch exists already; it is not started again."""
    square, _ = _agents(app)

    @app.agent
    def fan(run: tether.Run) -> list[int]:
        return list(run.join(run.children(square, [1, 2])))

    rid = app.start(fan)
    # the batch's first child, already there as the batch created it: with its caller, so
    # that its end wakes the parent (a child without one would leave the parent to its
    # join's recheck, 30 s later, whenever the worker ran the parent first)
    spawner = app._executor.spawner
    assert spawner is not None
    caller = {"run": rid, "pos": 1}
    first = spawner.start(
        square.__tether_agent__, (1,), {}, "default", child_id(rid, 1), caller, None
    )
    drain(app)
    assert app.get(rid).output == [1, 4]
    assert [e.type for e in app.events(first)].count("run.created") == 1
    runs = [r.id for r in app.runs() if r.agent == "square"]
    assert sorted(runs) == [child_id(rid, 1), child_id(rid, 2)]


def test_bad_input_starts_no_child(app: tether.App) -> None:
    square, _ = _agents(app)

    @app.agent
    def fan(run: tether.Run) -> list[str]:
        return run.children(square, [1, object()])

    with pytest.raises(tether.RunFailed, match=r"run\.children, item 1") as e:
        app.run(fan)
    assert e.value.error["type"] == f"{EncodeError.__module__}.EncodeError"
    assert [r.agent for r in app.runs()] == ["fan"]


def test_async_parents_start_a_batch(app: tether.App) -> None:
    square, _ = _agents(app)

    @app.agent
    async def fan(run: tether.AsyncRun, n: int) -> list[int]:
        return list(await run.join(await run.children(square, range(n))))

    rid = app.start(fan, 3)
    drain(app)
    assert app.get(rid).output == [0, 1, 4]


def test_a_bounded_queue_checks_its_depth_for_each_child(app: tether.App) -> None:
    square, _ = _agents(app)
    app.queue("small", max_depth=2)

    @app.agent
    def fan(run: tether.Run) -> Any:
        try:
            return run.children(square, [1, 2, 3], queue="small")
        except tether.QueueFull as e:
            return str(e)

    out = app.run(fan).output
    assert "'small' already holds 2 queued runs" in out
    assert sorted(r.id for r in app.runs() if r.agent == "square") == [
        child_id(r.id, p) for r in app.runs() if r.agent == "fan" for p in (1, 2)
    ]
