"""Budgets on both backends: every limit stops a run before its next call, durably; a
raise (from another process: the ``tether budget`` CLI, or a python process calling the
App) lets it go on from the call it stopped before; ``on_exceeded="fail"`` fails it.

Time is a FakeClock: a duration limit is reached by moving the clock, never by sleeping.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from _conformance import Backend

import tether
from tether.model import events as ev

pytestmark = pytest.mark.conformance

PRICES = {"small-1": tether.Price(input=1.0, output=2.0)}  # per million tokens


@pytest.fixture
def clock() -> tether.FakeClock:
    return tether.FakeClock()


@pytest.fixture
def app(backend: Backend, clock: tether.FakeClock) -> Iterator[tether.App]:
    a = tether.open(backend.url, clock=clock, prices=PRICES)
    yield a
    a.close()


class Model:
    """A model that reports tokens and no cost; counts its calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, prompt: str) -> dict[str, Any]:
        self.calls.append(prompt)
        return {"model": "small-1", "usage": {"input_tokens": 1000, "output_tokens": 500}}


def _chat(app: tether.App, model: Model, limits: tether.Limits | None = None) -> Any:
    @app.agent(name="chat", limits=limits)
    def chat(run: tether.Run, turns: int) -> int:
        for i in range(turns):
            run.llm(f"turn{i}", model, f"prompt {i}")
        return len(model.calls)

    return chat


def _types(app: tether.App, run_id: str) -> list[str]:
    return [e.type for e in app.events(run_id)]


def _payloads(app: tether.App, run_id: str, type_: str) -> list[dict[str, Any]]:
    return [e.payload() for e in app.events(run_id) if e.type == type_]


def _cli(backend: Backend, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", "--db", backend.url, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_max_steps_waits_and_a_cli_raise_in_another_process_lets_it_go_on(
    app: tether.App, backend: Backend
) -> None:
    done: list[int] = []

    @app.agent(limits=tether.Limits(max_steps=3))
    def counter(run: tether.Run) -> int:
        for i in range(5):
            run.step(f"s{i}", done.append, i)
        return len(done)

    h = app.run(counter)
    assert h.status == "waiting" and done == [0, 1, 2]  # stopped BEFORE the 4th call
    assert h.waiting is not None and h.waiting["kind"] == "budget"
    (hit,) = _payloads(app, h.id, ev.BUDGET_EXCEEDED)
    assert (hit["limit"], hit["max"], hit["used"]["steps"], hit["pos"]) == ("steps", 3, 3, 4)
    assert app.record(h.id).status == "waiting"

    raised = _cli(backend, "budget", h.id, "--add", "steps=2", "--by", "alice", "--reason", "ok")
    assert raised.returncode == 0, raised.stderr
    assert "raised the budget" in raised.stdout

    again = app.resume(h.id)
    assert again.status == "completed" and again.output == 5
    assert done == [0, 1, 2, 3, 4]  # nothing ran twice
    (r,) = _payloads(app, h.id, ev.BUDGET_RAISED)
    assert r == {"add": {"max_steps": 2}, "by": "alice", "reason": "ok"}
    assert [e.actor for e in app.events(h.id) if e.type == ev.BUDGET_RAISED] == ["alice"]


def test_max_model_calls_given_at_the_run(app: tether.App) -> None:
    model = Model()
    chat = _chat(app, model)
    h = app.run(chat, 4, limits=tether.Limits(max_model_calls=2))
    assert h.status == "waiting" and len(model.calls) == 2
    assert app.get(h.id).budget["exceeded"]["limit"] == "model_calls"
    app.raise_budget(h.id, by="bob", add={"model_calls": 1})
    h2 = app.resume(h.id)  # one more call allowed: stops again before the 4th
    assert h2.status == "waiting" and len(model.calls) == 3
    app.raise_budget(h.id, by="bob", add={"model_calls": 5})
    assert app.resume(h.id).output == 4
    assert len(model.calls) == 4


def test_limits_given_at_start_bind_a_resume_in_another_app(
    app: tether.App, backend: Backend, clock: tether.FakeClock
) -> None:
    model = Model()
    chat = _chat(app, model)
    run_id = app.start(chat, 3, limits=tether.Limits(max_model_calls=1))
    other = tether.open(backend.url, clock=clock)  # another App: knows the agent, not the run
    try:
        _chat(other, model)
        h = other.resume(run_id)
        assert h.status == "waiting" and len(model.calls) == 1
    finally:
        other.close()


def test_max_tokens(app: tether.App) -> None:
    model = Model()
    chat = _chat(app, model, tether.Limits(max_tokens=2500))  # 1500 a call
    h = app.run(chat, 3)
    assert h.status == "waiting" and len(model.calls) == 2  # 3000 >= 2500: no 3rd call
    hit = app.get(h.id).budget["exceeded"]
    assert hit["limit"] == "tokens" and hit["used"]["tokens"] == 3000
    app.raise_budget(h.id, by="carol", add={"tokens": 10_000})
    assert app.resume(h.id).output == 3


def test_max_cost_from_prices_raised_by_another_python_process(
    app: tether.App, backend: Backend
) -> None:
    model = Model()
    chat = _chat(app, model, tether.Limits(max_cost=0.005))  # 0.002 a call (prices)
    h = app.run(chat, 4)
    assert h.status == "waiting" and len(model.calls) == 3  # 0.006 >= 0.005
    state = app.get(h.id)
    assert state.usage.cost == pytest.approx(0.006)
    assert [s.usage.cost for s in state.steps] == [pytest.approx(0.002)] * 3
    code = (
        "import sys, tether\n"
        "app = tether.open(sys.argv[1])\n"
        "app.raise_budget(sys.argv[2], by='dana', add={'cost': 0.01})\n"
        "print(app.record(sys.argv[2]).status)\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code, backend.url, h.id], capture_output=True, text=True, timeout=60
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "queued"
    assert app.resume(h.id).output == 4
    assert app.get(h.id).usage.cost == pytest.approx(0.008)


def test_max_duration_on_a_fake_clock(app: tether.App, clock: tether.FakeClock) -> None:
    @app.agent(limits=tether.Limits(max_duration="10m"))
    def slow(run: tether.Run) -> str:
        for i in range(3):
            run.step(f"work{i}", clock.advance, 360.0)  # six minutes each
        return "done"

    h = app.run(slow)
    assert h.status == "waiting"
    hit = app.get(h.id).budget["exceeded"]
    assert hit["limit"] == "duration" and hit["position"] == 3 and hit["max"] == 600.0
    app.raise_budget(h.id, by="erin", add={"duration": "30m"})
    assert app.resume(h.id).output == "done"


def test_on_exceeded_fail_fails_the_run_and_calls_nothing_more(app: tether.App) -> None:
    model = Model()

    @app.agent(limits=tether.Limits(max_model_calls=1, on_exceeded="fail"))
    def stubborn(run: tether.Run) -> str:
        run.llm("first", model, "a")
        try:
            run.llm("second", model, "b")
        except tether.BudgetExceeded:
            run.llm("third", model, "c")  # catching it does not buy another call
        return "never"

    with pytest.raises(tether.RunFailed, match="budget exceeded"):
        app.run(stubborn)
    assert model.calls == ["a"]
    (run,) = app.runs()
    state = app.get(run.id)
    assert state.status == "failed"
    assert "budget exceeded: model_calls reached (1 of at most 1)" in state.failure["message"]
    assert ev.BUDGET_EXCEEDED in _types(app, run.id)
    with pytest.raises(tether.InvalidState, match="is failed"):
        app.raise_budget(run.id, by="frank", add={"model_calls": 1})


def test_raising_what_cannot_be_raised(app: tether.App, backend: Backend) -> None:
    model = Model()
    chat = _chat(app, model, tether.Limits(max_model_calls=1))
    done = app.run(chat, 1)
    assert done.status == "completed"
    with pytest.raises(tether.InvalidState, match="completed: a finished run's budget"):
        app.raise_budget(done.id, by="gus", add={"steps": 1})
    with pytest.raises(tether.NotFound):
        app.raise_budget("no-such-run", by="gus", add={"steps": 1})
    waiting = app.run(chat, 2)
    for bad, match in [
        ({"stepz": 1}, "unknown limit 'stepz'"),
        ({"steps": -1}, "between 0 and"),
        ({"cost": float("nan")}, "finite number"),
        ({"tokens": 10**20}, "between 0 and"),
        ({}, "at least one limit"),
    ]:
        with pytest.raises(tether.InvalidInput, match=match):
            app.raise_budget(waiting.id, by="gus", add=bad)
    assert _payloads(app, waiting.id, ev.BUDGET_RAISED) == []  # nothing was written
    unknown = _cli(backend, "budget", waiting.id, "--add", "cats=3", "--by", "gus")
    assert unknown.returncode == 2 and "unknown limit 'cats'" in unknown.stderr
    gone = _cli(backend, "budget", done.id, "--add", "steps=3", "--by", "gus")
    assert gone.returncode != 0 and "finished run's budget cannot be raised" in gone.stderr


def test_cost_totals_by_agent_and_by_session(app: tether.App) -> None:
    model = Model()
    chat = _chat(app, model)

    @app.agent(name="reporting")
    def reporting(run: tether.Run) -> None:  # its model reports its own cost
        run.llm(
            "one", lambda: {"usage": {"prompt_tokens": 10, "completion_tokens": 5, "cost": 0.25}}
        )
        run.step("plain", lambda: 1)  # not a model call: not counted

    app.run(chat, 2)
    app.run_in("s-1", chat, 1)
    app.run_in("s-1", reporting)
    by_agent = {t.key: t for t in app.costs(by="agent")}
    assert by_agent["chat"].runs == 2 and by_agent["chat"].calls == 3
    assert by_agent["chat"].cost == pytest.approx(0.006)  # priced: 0.002 a call
    assert (by_agent["chat"].input_tokens, by_agent["chat"].output_tokens) == (3000, 1500)
    assert by_agent["reporting"].cost == pytest.approx(0.25)
    assert by_agent["reporting"].input_tokens == 10 and by_agent["reporting"].calls == 1
    assert [t.key for t in app.costs(by="agent")] == ["reporting", "chat"]  # costliest first
    by_session = {t.key: t for t in app.costs(by="session")}
    assert by_session["s-1"].cost == pytest.approx(0.252) and by_session["s-1"].runs == 2
    assert by_session[None].cost == pytest.approx(0.004)
    (only,) = app.costs(by="session", agent="reporting")
    assert only.key == "s-1" and only.cost == pytest.approx(0.25)
    with pytest.raises(tether.InvalidInput, match="by 'agent' or by 'session'"):
        app.costs(by="tenant")
    with pytest.raises(tether.InvalidInput, match="no filter 'colour'"):
        app.costs(colour="red")


def test_an_async_agent_stops_at_its_budget_too(app: tether.App) -> None:
    import asyncio

    model = Model()

    @app.agent(limits=tether.Limits(max_model_calls=1))
    async def fan(run: tether.AsyncRun) -> int:
        await run.llm("first", model, "a")
        await asyncio.gather(run.llm("second", model, "b"), run.llm("third", model, "c"))
        return len(model.calls)

    h = asyncio.run(app.arun(fan))
    assert h.status == "waiting" and model.calls == ["a"]
    app.raise_budget(h.id, by="hana", add={"model_calls": 2})
    assert asyncio.run(app.aresume(h.id)).output == 3


def test_limits_that_are_not_limits_create_no_run(app: tether.App) -> None:
    model = Model()
    chat = _chat(app, model)
    with pytest.raises(tether.InvalidInput, match=r"takes tether\.Limits"):
        app.run(chat, 1, limits={"max_steps": 1})  # type: ignore[arg-type]
    with pytest.raises(tether.InvalidInput, match=r"takes tether\.Limits"):
        app.start(chat, 1, limits=5)  # type: ignore[arg-type]
    assert app.runs() == [] and model.calls == []


def test_a_run_failed_by_its_budget_still_undoes_its_write_tools(app: tether.App) -> None:
    charged: list[int] = []
    refunded: list[int] = []

    def refund(result: Any, amount: int, *, idempotency_key: str) -> None:
        refunded.append(amount)

    @app.tool(risk="write", compensate=refund)
    def charge(amount: int, *, idempotency_key: str) -> str:
        charged.append(amount)
        return "ok"

    @app.agent(limits=tether.Limits(max_steps=2, on_exceeded="fail"))
    def shop(run: tether.Run) -> None:
        run.tool(charge, 5)
        run.tool(charge, 7)
        run.tool(charge, 9)  # position 3: past max_steps

    with pytest.raises(tether.RunFailed, match="budget exceeded: steps reached"):
        app.run(shop)
    assert charged == [5, 7]
    assert refunded == [7, 5]  # the compensation is not held by the budget it ran out of


def test_runs_and_show_give_the_reason(app: tether.App, backend: Backend) -> None:
    model = Model()
    chat = _chat(app, model, tether.Limits(max_model_calls=1))
    waiting = app.run(chat, 2)

    @app.agent(limits=tether.Limits(max_tokens=10, on_exceeded="fail"))
    def greedy(run: tether.Run) -> None:
        run.llm("one", model, "x")
        run.llm("two", model, "y")

    with pytest.raises(tether.RunFailed):
        app.run(greedy)
    listed = _cli(backend, "runs")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[1]: line for line in listed.stdout.splitlines()[1:]}
    assert "waiting (budget)" in rows["chat"] and "failed (budget)" in rows["greedy"]
    shown = _cli(backend, "show", waiting.id)
    assert (
        f"budget     budget exceeded: model_calls reached (1 of at most 1) before position 2; "
        f"`tether budget {waiting.id} --add model_calls=N` raises it"
    ) in shown.stdout


def test_calls_without_usage_count_the_same_in_every_process(
    app: tether.App, backend: Backend, clock: tether.FakeClock
) -> None:
    said: list[str] = []

    def plain(prompt: str) -> str:  # a model that reports no usage at all
        said.append(prompt)
        return prompt

    def register(a: tether.App) -> Any:
        @a.agent(name="talk", limits=tether.Limits(max_model_calls=2))
        def talk(run: tether.Run) -> int:
            for i in range(5):
                run.llm(f"say{i}", plain, str(i))
            return len(said)

        return talk

    h = app.run(register(app))
    assert h.status == "waiting" and said == ["0", "1"]
    other = tether.open(backend.url, clock=clock)  # folds the log afresh
    try:
        register(other)
        assert other.get(h.id).usage.calls == 2
        other.raise_budget(h.id, by="ivy", add={"model_calls": 1})
        assert other.resume(h.id).status == "waiting" and said == ["0", "1", "2"]
    finally:
        other.close()


def test_a_call_whose_result_names_no_model_is_priced_by_its_model_keyword(
    app: tether.App,
) -> None:
    """The result reports tokens but no model: the price is the ``model=`` the call was
    given (docs/budgets.md), recorded with the step; an unpriced model costs 0."""

    def client(messages: list[dict[str, str]], model: str) -> dict[str, object]:
        return {"text": "ok", "usage": {"input_tokens": 1_000_000, "output_tokens": 500_000}}

    @app.agent
    def agent(run: tether.Run) -> None:
        run.llm("priced", client, messages=[{"role": "user", "content": "hi"}], model="small-1")
        run.llm("unpriced", client, messages=[{"role": "user", "content": "hi"}], model="other")

    state = app.get(app.run(agent).id)
    costs = [round(s.usage.cost, 6) for s in state.steps if s.usage is not None]
    assert costs == [2.0, 0.0]  # 1M input at 1.0 + 0.5M output at 2.0
    assert round(state.usage.cost, 6) == 2.0
