"""When a step's record is written: with the run's next append, before the next position
runs anything (journal.record_success). On both backends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from _conformance import Backend

import tether
from tether.engine.journal import DEFER_BELOW

pytestmark = pytest.mark.conformance


@pytest.fixture
def other(backend: Backend) -> Iterator[tether.App]:
    """A second handle on the same store: what another process would read."""
    a = tether.open(backend.url)
    yield a
    a.close()


def _appends(app: tether.App) -> list[list[str]]:
    """Record the event types of every store append from now on."""
    seen: list[list[str]] = []
    append = app.store.append

    def counted(run_id: str, events: Any, **kwargs: Any) -> int:
        seen.append([e.type for e in events])
        return append(run_id, events, **kwargs)

    app.store.append = counted  # type: ignore[method-assign]
    return seen


def _steps_seen(app: tether.App, rid: str) -> list[str]:
    return [e.payload()["name"] for e in app.events(rid) if e.type == "step.completed"]


def test_a_step_is_in_the_log_before_the_next_step_runs(app: tether.App, other: tether.App) -> None:
    seen: dict[str, list[str]] = {}

    @app.agent
    def three(run: tether.Run) -> int:
        rid = run.id
        run.step("a", lambda: 1)
        run.step("b", lambda: seen.setdefault("in b", _steps_seen(other, rid)) and 2)
        run.step("c", lambda: seen.setdefault("in c", _steps_seen(other, rid)) and 3)
        return 6

    handle = app.run(three)
    assert seen == {"in b": ["a"], "in c": ["a", "b"]}
    assert _steps_seen(other, handle.id) == ["a", "b", "c"]


def test_the_last_step_shares_the_final_commit(app: tether.App) -> None:
    @app.agent
    def three(run: tether.Run) -> int:
        return sum(run.step(name, lambda i=i: i) for i, name in enumerate("abc"))

    appends = _appends(app)
    handle = app.run(three)
    assert handle.output == 3
    assert appends == [
        ["step.completed"],  # a, written when b is called (run.started: with the run)
        ["step.completed"],  # b, when c is called
        ["step.completed", "run.completed"],
    ]
    events = app.events(handle.id)
    assert [e.seq for e in events] == list(range(1, 7))  # created, started, a, b, c, completed


def test_a_wait_and_a_decision_carry_the_step_before_them(app: tether.App) -> None:
    @app.agent
    def gated(run: tether.Run) -> str:
        run.step("draft", lambda: "text")
        choice = run.decide("route", choice="email", why="short")
        run.step("polish", lambda: "better")
        return str(run.wait("go")) + choice

    appends = _appends(app)
    handle = app.run(gated)
    assert handle.status == "waiting"
    assert appends == [["step.completed", "decision"], ["step.completed", "wait.started"]]
    app.signal(handle.id, "go", "ok-")
    assert app.resume(handle.id).output == "ok-email"


def test_the_context_of_a_run_holds_the_step_just_before(app: tether.App) -> None:
    seen: list[Any] = []

    @app.agent
    def reader(run: tether.Run) -> int:
        run.step("fetch", lambda: {"facts": "the sky is blue"})
        seen.append([e.content for e in tether.context.entries(run)])
        return 1

    app.run(reader)
    assert len(seen) == 1 and any("the sky is blue" in str(c) for c in seen[0]), seen


def test_a_failure_after_a_step_keeps_the_step(app: tether.App) -> None:
    calls: list[str] = []
    failing = [True]

    @app.agent
    def flaky(run: tether.Run) -> str:
        run.step("fetch", lambda: calls.append("fetch") or "facts")
        if failing and failing.pop():
            raise ValueError("the model said no")
        return "done"

    with pytest.raises(tether.RunFailed) as failed:
        app.run(flaky)
    rid = failed.value.run_id
    types = [e.type for e in app.events(rid)]
    assert types[-2:] == ["step.completed", "run.failed"]
    assert app.retry_run(rid).output == "done"
    assert calls == ["fetch"]  # the retry replayed it


def test_a_write_tool_outcome_is_written_before_the_agent_goes_on(
    app: tether.App, other: tether.App
) -> None:
    seen: list[list[str]] = []

    @app.tool(risk="write")
    def send(to: str, *, idempotency_key: str) -> str:
        return f"sent to {to}"

    @app.agent
    def mailer(run: tether.Run) -> str:
        run.step("draft", lambda: "hello")
        receipt = str(run.tool(send, "ada"))
        seen.append([e.type for e in other.events(run.id)])  # no position taken since
        return receipt

    appends = _appends(app)
    app.run(mailer)
    assert seen[0][-3:] == ["step.completed", "tool.intent", "step.completed"], seen
    assert appends == [  # the draft rides with the intent; the outcome is written at once
        ["step.completed", "tool.intent"],
        ["step.completed"],
        ["run.completed"],
    ]


def test_a_slow_step_and_a_model_call_are_written_at_once(
    app: tether.App, other: tether.App
) -> None:
    """Running them again would cost more than the commit deferring saves; a fast step's
    record waits for the run's next append."""
    seen: list[list[str]] = []

    @app.agent
    def costly(run: tether.Run) -> str:
        run.step("slow", time.sleep, DEFER_BELOW * 1.5)
        seen.append(_steps_seen(other, run.id))
        run.llm("model", lambda: {"content": "hi", "usage": {"input": 3, "output": 1}})
        seen.append(_steps_seen(other, run.id))
        run.step("fast", lambda: 1)
        seen.append(_steps_seen(other, run.id))
        return "done"

    app.run(costly)
    assert seen == [["slow"], ["slow", "model"], ["slow", "model"]]


def test_an_async_agent_defers_the_same_way(app: tether.App, other: tether.App) -> None:
    seen: list[list[str]] = []

    async def fetch(x: int) -> int:
        await asyncio.sleep(0)
        return x + 1

    @app.agent
    async def twice(run: tether.AsyncRun) -> int:
        a = await run.step("a", fetch, 1)
        b = await run.step("b", lambda: seen.append(_steps_seen(other, run.id)) or a * 2)
        return int(b)

    appends = _appends(app)
    assert app.run(twice).output == 4
    assert seen == [["a"]]
    assert appends == [["step.completed"], ["step.completed", "run.completed"]]
