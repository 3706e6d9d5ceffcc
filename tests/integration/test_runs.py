"""Journaled runs on a real SQLite file: replay, retries, usage, async, failures."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

import tether
from tether.model import events as ev

pytestmark = pytest.mark.integration


def test_run_journals_every_position_and_completes(app: tether.App) -> None:
    @app.agent
    def triage(run: tether.Run, ticket: str) -> dict[str, Any]:
        facts = run.step("fetch", lambda t: {"ticket": t, "p99": 870}, ticket)
        route = run.decide("route", choice="escalate", why="p99 above SLO")
        run.vars["facts"] = facts
        return {"route": route, "facts": facts}

    h = app.run(triage, "T-1")
    assert h.status == "completed" and h.output["route"] == "escalate"
    state = app.get(h.id)
    assert [(s.position, s.kind, s.name) for s in state.steps] == [
        (1, "step", "fetch"),
        (2, "decide", "route"),
        (3, "var", "vars.facts"),
    ]
    assert state.vars == {"facts": {"ticket": "T-1", "p99": 870}}
    assert state.decisions[0].why == "p99 above SLO"
    types = [e.type for e in app.events(h.id)]
    assert types == [
        ev.RUN_CREATED,
        ev.RUN_STARTED,
        ev.STEP_COMPLETED,
        ev.DECISION,
        ev.VAR_SET,
        ev.RUN_COMPLETED,
    ]
    assert [e.seq for e in app.events(h.id)] == list(range(1, 7))
    assert app.store.get_run(h.id).lease_owner is None


def test_interrupted_run_resumes_without_rerunning_completed_steps(app: tether.App) -> None:
    executed: list[str] = []
    stop_at = {"n": 3}

    def work(i: int) -> int:
        if i == stop_at["n"]:
            stop_at["n"] = -1
            raise KeyboardInterrupt  # a crash-like exit: the run pauses
        executed.append(f"s{i}")
        return i * 10

    @app.agent
    def agent(run: tether.Run) -> list[int]:
        return [run.step(f"s{i}", work, i) for i in range(1, 6)]

    with pytest.raises(KeyboardInterrupt):
        app.run(agent)
    (rid,) = [r.id for r in app.runs()]
    assert app.store.get_run(rid).status == "queued"  # suspended: resumable, no lease
    h = app.resume(rid)
    assert h.output == [10, 20, 30, 40, 50]
    assert executed == ["s1", "s2", "s3", "s4", "s5"]
    assert h.reused == ((1, "s1"), (2, "s2"))
    assert [p for p, _ in h.executed] == [3, 4, 5]


def test_retries_record_every_attempt_and_error(db_path: str) -> None:
    clock = tether.FakeClock()
    app = tether.open(db_path, clock=clock)
    calls = {"n": 0}

    def flaky() -> str:
        calls["n"] += 1
        if calls["n"] < 3:
            raise ConnectionError(f"boom {calls['n']}")
        return "ok"

    @app.agent
    def agent(run: tether.Run) -> str:
        return run.step("flaky", flaky, retry=tether.Retry(max_attempts=5, backoff=2, jitter=0))

    h = app.run(agent)
    step = app.get(h.id).steps[0]
    assert h.output == "ok" and step.attempts == 3
    assert [e["message"] for e in step.errors] == ["boom 1", "boom 2"]
    assert [e["type"] for e in step.errors] == ["ConnectionError", "ConnectionError"]
    assert clock.slept == [2.0, 4.0]
    failed = [e.payload() for e in app.events(h.id) if e.type == ev.STEP_FAILED]
    assert [f["retry_at"] - f["error"]["at"] for f in failed] == [2.0, 4.0]
    app.close()


def test_retry_exhausted_fails_run_with_context(app: tether.App) -> None:
    def broken(x: int) -> None:
        raise ValueError(f"bad input {x}")

    @app.agent
    def agent(run: tether.Run) -> None:
        run.step("ok", lambda: 1)
        run.step("broken", broken, 42, retry=tether.Retry(max_attempts=2, backoff=0))

    with pytest.raises(tether.RunFailed) as info:
        app.run(agent)
    state = app.get(info.value.run_id)
    assert state.status == "failed"
    f = state.failure
    assert f is not None
    assert (f["step"], f["position"], f["type"], f["message"]) == (
        "broken",
        2,
        "ValueError",
        "bad input 42",
    )
    assert "42" in f["input"] and "Traceback" in f["traceback"] and f["input_digest"]
    assert state.steps[1].attempts == 2 and state.steps[1].status == "failed"
    with pytest.raises(tether.InvalidState, match="retry"):
        app.resume(state.run_id)


def test_retry_on_filters_errors(app: tether.App) -> None:
    calls = {"n": 0}

    def typo() -> None:
        calls["n"] += 1
        raise TypeError("a bug, not a flake")

    @app.agent
    def agent(run: tether.Run) -> None:
        run.step(
            "s", typo, retry=tether.Retry(max_attempts=5, backoff=0, retry_on=(ConnectionError,))
        )

    with pytest.raises(tether.RunFailed):
        app.run(agent)
    assert calls["n"] == 1


def test_failed_run_retry_reexecutes_from_failed_step(app: tether.App) -> None:
    calls: list[str] = []
    broken = {"on": True}

    def s2() -> str:
        calls.append("s2")
        if broken["on"]:
            raise RuntimeError("down")
        return "up"

    @app.agent
    def agent(run: tether.Run) -> str:
        run.step("s1", lambda: calls.append("s1"))
        return str(run.step("s2", s2))

    with pytest.raises(tether.RunFailed) as info:
        app.run(agent)
    broken["on"] = False
    h = app.retry_run(info.value.run_id)
    assert h.output == "up" and calls == ["s1", "s2", "s2"]
    assert app.get(h.id).status == "completed"


def test_step_timeout_is_an_attempt_error(app: tether.App) -> None:
    import time

    @app.agent
    def agent(run: tether.Run) -> None:
        run.step("slow", time.sleep, 2, retry=tether.Retry(timeout=0.05))

    with pytest.raises(tether.RunFailed) as info:
        app.run(agent)
    assert info.value.error["type"] == "tether.errors.StepTimeout"


def test_a_read_tools_timeout_is_an_attempt_error(app: tether.App) -> None:
    """A read tool's call is bounded by its policy's timeout, as a step's is (a write
    tool's timeout puts its call in doubt instead: tests/conformance/test_decisions.py)."""
    import threading

    release = threading.Event()

    @app.tool(risk="read", retry=tether.Retry(timeout=0.05))
    def lookup(q: str) -> str:
        release.wait(30)  # the abandoned attempt's thread ends when the test does
        return q

    @app.agent
    def agent(run: tether.Run) -> str:
        return str(run.tool(lookup, "x"))

    try:
        with pytest.raises(tether.RunFailed) as info:
            app.run(agent)
    finally:
        release.set()
    assert info.value.error["type"] == "tether.errors.StepTimeout"


def test_llm_usage_is_recorded_per_step_and_per_run(app: tether.App) -> None:
    def model(prompt: str) -> dict[str, Any]:
        return {
            "text": prompt.upper(),
            "usage": {"prompt_tokens": 12, "completion_tokens": 5, "cost": 0.002},
        }

    @app.agent
    def agent(run: tether.Run) -> str:
        a = run.llm("plan", model, prompt="plan it")
        b = run.llm("act", model, prompt="do it")
        return f"{a['text']} {b['text']}"

    h = app.run(agent)
    state = app.get(h.id)
    assert state.steps[0].usage is not None and state.steps[0].usage.input_tokens == 12
    assert state.usage == tether.Usage(24, 10, pytest.approx(0.004), 2)


def test_nondeterminism_names_run_position_expected_found(app: tether.App) -> None:
    version = {"v": 1}

    @app.agent
    def agent(run: tether.Run) -> None:
        run.step("a", lambda: 1)
        if version["v"] == 1:
            run.step("b", lambda: 2)
            raise KeyboardInterrupt
        run.step("c", lambda: 3)

    with pytest.raises(KeyboardInterrupt):
        app.run(agent)
    rid = app.runs()[0].id
    version["v"] = 2
    with pytest.raises(tether.NondeterminismError) as info:
        app.resume(rid)
    cause = info.value
    assert (cause.run_id, cause.position, cause.expected, cause.found) == (
        rid,
        2,
        "step b",
        "step c",
    )
    assert rid in str(cause) and "position 2" in str(cause)
    assert app.get(rid).status == "blocked"  # not failed: see test_blocked.py


def test_async_agent_uses_the_same_core(app: tether.App) -> None:
    executed: list[str] = []

    async def fetch(x: int) -> int:
        await asyncio.sleep(0)
        executed.append(f"fetch{x}")
        return x + 1

    @app.agent
    async def agent(run: tether.AsyncRun, n: int) -> int:
        a = await run.step("one", fetch, n)
        b = await run.step("two", lambda: a * 2)
        if not executed or executed[-1] != "crash":
            executed.append("crash")
            raise KeyboardInterrupt
        c = await run.decide("route", choice=b + 1, why="math")
        run.vars["c"] = c
        return int(c)

    with pytest.raises(KeyboardInterrupt):
        app.run(agent, 1)
    h = app.resume(app.runs()[0].id)
    assert h.output == 5
    assert executed.count("fetch1") == 1


def test_async_run_inside_a_running_loop(app: tether.App) -> None:
    @app.agent
    async def agent(run: tether.AsyncRun) -> int:
        return int(await run.step("s", asyncio.sleep, 0, 7))

    async def main() -> tether.RunHandle:
        return await app.arun(agent)

    assert asyncio.run(main()).output == 7


def test_snapshots_make_loading_start_from_the_newest(db_path: str) -> None:
    app = tether.open(db_path, snapshot_every=10)

    @app.agent
    def agent(run: tether.Run) -> int:
        return sum(run.step(f"s{i}", lambda i=i: i) for i in range(35))

    h = app.run(agent)
    assert app.store.load(h.id).snapshot is None  # steps never pay for snapshots
    full = tether.fold(app.store.read_events(h.id))
    assert app.get(h.id) == full  # this load folded 38 events: it caches a snapshot
    loaded = app.store.load(h.id)
    assert loaded.snapshot is not None and loaded.snapshot.seq == full.seq
    assert loaded.events == []
    assert app.get(h.id) == full
    app.close()


def test_a_tool_called_directly_in_an_agent_is_refused_before_it_runs(app: tether.App) -> None:
    """`send(...)` in an agent instead of `run.tool(send, ...)` would run outside the
    journal: no key, no intent, no record, and again at every replay. It raises instead,
    and the tool's body never runs; anywhere else the tool is its plain function."""
    sent: list[str] = []

    @app.tool(risk="write")
    def send(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    @app.agent
    def direct(run: tether.Run) -> str:
        return send("ada")

    @app.agent
    def through(run: tether.Run) -> list[str]:
        inside_a_step = run.step("fan", lambda: send("bob"))  # the step's own business
        return [run.tool(send, "cy"), inside_a_step]

    with pytest.raises(tether.RunFailed, match=r"run\.tool\(send, \.\.\.\)") as e:
        app.run(direct)
    failure = app.get(e.value.run_id).failure or {}
    assert failure["type"].endswith("InvalidState")
    assert "called directly in the agent" in failure["message"]
    assert sent == []  # refused before it ran
    assert app.run(through).output == ["sent to cy", "sent to bob"]
    assert send("dee") == "sent to dee"  # outside a run: the plain function
    assert sent == ["bob", "cy", "dee"]


def test_an_async_tool_called_directly_in_an_async_agent_is_refused(app: tether.App) -> None:
    calls: list[str] = []

    @tether.tool(risk="irreversible")
    async def charge(amount: int) -> int:
        calls.append("charge")
        return amount

    @app.agent
    async def pay(run: tether.AsyncRun) -> int:
        return await charge(5)

    @app.agent
    async def pay_through(run: tether.AsyncRun) -> int:
        return int(await run.tool(charge, 7))

    # still an async function to whoever inspects it (the agent SDKs tell async tools so)
    assert inspect.iscoroutinefunction(charge)
    with pytest.raises(tether.RunFailed, match="called directly in the agent"):
        app.run(pay)
    assert calls == []
    assert app.run(pay_through).output == 7 and calls == ["charge"]
    assert asyncio.run(charge(9)) == 9


def test_a_function_registered_by_a_call_is_the_tool_itself(app: tether.App) -> None:
    def notify(who: str) -> str:
        return f"told {who}"

    app.tool(notify, risk="write")  # not rebound: the function carries its definition

    @app.agent
    def tell(run: tether.Run) -> str:
        return str(run.tool(notify, "ada"))

    assert app.run(tell).output == "told ada"


def test_an_interrupt_inside_a_step_leaves_no_step_marked(app: tether.App) -> None:
    """Ctrl-C in a step (a notebook, a CLI) goes up as it is; the step stops being the
    current one on the way (tether.current_step() and the direct-tool guard read it)."""

    def interrupted() -> None:
        raise KeyboardInterrupt

    @app.agent
    def stopped(run: tether.Run) -> None:
        run.step("wait", interrupted)

    with pytest.raises(KeyboardInterrupt):
        app.run(stopped)
    with pytest.raises(LookupError):
        tether.current_step()
