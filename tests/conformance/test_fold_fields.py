"""The fold's fields as a user reads them (``app.get(run)``), pinned on both backends: a
timer's step and what the run waits for, a settled doubt's step, a run's steps by
position and the sentence that says where a run is. Each assertion kills mutants of
tether.model.state that the behavioural tests let through (tools/mutation.sh)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import tether
from tether import FakeClock

pytestmark = pytest.mark.conformance

T0 = 5_000.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def app(backend: Any, clock: FakeClock) -> Iterator[tether.App]:
    a = tether.open(backend.url, clock=clock)
    yield a
    a.close()


def _seq_of(app: tether.App, run_id: str, type_: str) -> int:
    return [e.seq for e in app.events(run_id) if e.type == type_][-1]


def test_a_timer_s_step_and_what_the_run_waits_for(app: tether.App, clock: FakeClock) -> None:
    @app.agent
    def agent(run: tether.Run) -> str:
        run.step("first", lambda: 1)
        clock.advance(2)
        run.sleep(3_600, name="cool-down")
        return "woke"

    h = app.run(agent)
    state = app.get(h.id)
    timer = state.steps[1]
    assert (timer.position, timer.name, timer.kind, timer.status) == (
        2, "cool-down", "sleep", "waiting",
    )  # fmt: skip
    assert timer.started_at == T0 + 2 and timer.due_at == T0 + 2 + 3_600
    assert timer.seq == _seq_of(app, h.id, "timer.started")
    assert state.waiting == {
        "kind": "timer", "name": "cool-down", "position": 2, "since": T0 + 2,
        "until": T0 + 2 + 3_600,
    }  # fmt: skip
    clock.advance(3_600)
    assert app.resume(h.id).output == "woke"


_ANSWER = threading.Event()


@pytest.fixture(autouse=True)
def _answer() -> Iterator[None]:
    _ANSWER.clear()
    yield
    _ANSWER.set()  # the abandoned calls return


def _hangs(amount: int) -> dict[str, int]:
    _ANSWER.wait(60)
    return {"charge_id": 1}


def _in_doubt(app: tether.App) -> str:
    tool = app.tool(risk="write", on_doubt="ask", retry=tether.Retry(timeout=0.05))(_hangs)

    @app.agent
    def pay(run: tether.Run) -> Any:
        return {"result": run.tool(tool, 40)}

    handle = app.run(pay)
    assert handle.status == "waiting"
    return handle.id


def test_a_doubt_settled_as_happened_is_a_completed_step_with_its_result(
    app: tether.App, clock: FakeClock
) -> None:
    run_id = _in_doubt(app)
    clock.advance(30)
    app.resolve(run_id, happened=True, by="alice", result={"charge_id": 7})
    state = app.get(run_id)
    (step,) = state.steps
    assert step.status == "completed" and step.output == {"charge_id": 7}
    assert step.finished_at == T0 + 30
    assert step.seq == _seq_of(app, run_id, "tool.resolved")
    assert state.status == "queued" and state.waiting is None
    assert app.resume(run_id).output == {"result": {"charge_id": 7}}


def test_a_doubt_settled_as_not_happened_is_called_again(app: tether.App) -> None:
    run_id = _in_doubt(app)
    app.resolve(run_id, happened=False, by="alice")
    (step,) = app.get(run_id).steps
    assert step.status == "retrying"
    assert step.seq == _seq_of(app, run_id, "tool.resolved")
    _ANSWER.set()  # the call made again answers at once
    assert app.resume(run_id).output == {"result": {"charge_id": 1}}


def test_a_run_s_steps_by_position(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run) -> None:
        run.step("a", lambda: 1)
        run.step("b", lambda: 2)

    state = app.get(app.run(agent).id)
    assert state.step(1) is not None and state.step(1).name == "a"  # type: ignore[union-attr]
    assert state.step(2) is not None and state.step(2).name == "b"  # type: ignore[union-attr]
    assert state.step(0) is None and state.step(3) is None and state.step(-1) is None


def test_where_a_run_is_in_words(app: tether.App) -> None:
    @app.agent
    def first_asks(run: tether.Run) -> Any:
        return run.approve("go")

    @app.agent
    def asks_after_two(run: tether.Run) -> Any:
        run.step("a", lambda: 1)
        run.step("b", lambda: 2)
        return run.approve("go")

    @app.agent
    def done(run: tether.Run) -> int:
        run.step("a", lambda: 1)
        return 2

    assert app.get(app.run(first_asks).id).describe_position() == "step 1, none committed"
    waiting = app.get(app.run(asks_after_two).id)
    assert waiting.describe_position() == "step 3, 1–2 committed"
    assert waiting.describe_position(expected=9) == "step 3 of 9, 1–2 committed"
    finished = app.get(app.run(done).id)
    assert finished.describe_position() == "completed, 1 of 1 committed"


def test_a_failed_undo_is_recorded_and_the_other_undos_still_run(
    app: tether.App, clock: FakeClock
) -> None:
    undone: list[str] = []

    def refund_fails(result: str, amount: int) -> None:
        raise RuntimeError(f"the bank refused to refund {result}")

    def release(result: str, item: str) -> None:
        undone.append(result)

    charge = app.tool(name="charge", compensate=refund_fails)(lambda amount: f"ch-{amount}")
    reserve = app.tool(name="reserve", compensate=release)(lambda item: f"rs-{item}")

    @app.agent
    def order(run: tether.Run) -> None:
        run.tool(charge, 40)
        run.tool(reserve, "book")
        clock.advance(3)
        raise ValueError("out of stock")

    with pytest.raises(tether.RunFailed):
        app.run(order)
    (record,) = app.runs()
    state = app.get(record.id)
    assert undone == ["rs-book"]  # the second call was undone though the first's undo failed
    assert state.failure is not None
    assert state.failure["compensation_failures"] == [
        {"position": 1, "tool": "charge", "type": "RuntimeError",
         "message": "the bank refused to refund ch-40"},
    ]  # fmt: skip
    assert state.compensating is not None
    assert state.compensating["reason"] == "failed" and state.compensating["at"] == T0 + 3
    assert state.compensating["from_position"] == 3


def test_a_doubt_s_step_and_what_the_run_waits_for(app: tether.App) -> None:
    run_id = _in_doubt(app)
    state = app.get(run_id)
    (step,) = state.steps
    (doubt,) = [e for e in app.events(run_id) if e.type == "tool.in_doubt"]
    assert step.status == "in_doubt" and step.seq == doubt.seq
    assert [e["type"] for e in step.errors] == ["tether.errors.StepTimeout"]
    assert state.waiting == {
        "kind": "doubt", "name": "_hangs", "position": 1, "since": T0,
        "key": doubt.payload()["key"], "reason": "timeout",
    }  # fmt: skip


def test_a_cancelled_run_says_who_cancelled_it_and_why(app: tether.App, clock: FakeClock) -> None:
    @app.agent
    def asks(run: tether.Run) -> Any:
        return run.approve("go")

    waiting, quiet = app.run(asks).id, app.run(asks).id
    clock.advance(7)
    app.cancel(waiting, by="alice", reason="customer left")
    app.cancel(quiet)
    state = app.get(waiting)
    assert state.status == "cancelled" and state.waiting is None
    assert state.failure == {
        "type": "cancelled", "message": "customer left", "by": "alice", "at": T0 + 7,
    }  # fmt: skip
    assert app.get(quiet).failure == {
        "type": "cancelled", "message": "cancelled", "by": None, "at": T0 + 7,
    }  # fmt: skip


def test_a_deleted_task_variable_is_gone_from_the_state(app: tether.App) -> None:
    @app.agent
    def agent(run: tether.Run) -> Any:
        run.vars["draft"] = "v1"
        run.vars["keep"] = 1
        del run.vars["draft"]
        return run.approve("go")

    state = app.get(app.run(agent).id)
    assert state.vars == {"keep": 1}
