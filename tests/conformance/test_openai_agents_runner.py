"""TetherRunner on SQLite and PostgreSQL: every model response a journaled ``run.llm``
with its usage, every function tool call a ``run.tool`` keyed by the run and the
model's call_id, handoffs followed, a second call with the same run_id reusing it all,
and ``tether show``/``history`` naming the model calls and tool calls."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest
from _conformance import Backend

import tether

pytest.importorskip("agents")

from agents import Agent, RunConfig, function_tool
from agents.testing import (
    ModelCall,
    ModelStep,
    ScriptedModel,
    assistant_message,
    function_call,
)
from agents.usage import Usage

from tether.integrations.openai_agents import AGENT_NAME, QUEUE, AgentNotBound, TetherRunner

pytestmark = pytest.mark.conformance
CONFIG = RunConfig(tracing_disabled=True)


def _outputs(call: ModelCall) -> list[str]:
    items = call.input if isinstance(call.input, list) else []
    return [
        str(i["output"])
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]


def _calculator() -> tuple[Agent[Any], ScriptedModel, list[tuple[int, str]]]:
    effects: list[tuple[int, str]] = []

    @function_tool
    def square(x: int) -> str:
        """Square a number."""
        effects.append((x, tether.current_step().idempotency_key))
        return str(x * x)

    def respond(call: ModelCall) -> ModelStep:
        done = _outputs(call)
        usage = Usage(requests=1, input_tokens=7, output_tokens=2, total_tokens=9)
        if not done:  # the same arguments twice: only the call_id tells the calls apart
            calls = [function_call("square", {"x": 3}, call_id=f"call-{i}") for i in (1, 2)]
            return ModelStep(output=calls, usage=usage)
        return ModelStep(output=[assistant_message("squares " + ", ".join(done))], usage=usage)

    model = ScriptedModel([ModelStep.respond(respond)] * 4)
    return Agent(name="calc", instructions="Square.", model=model, tools=[square]), model, effects


def test_model_and_tool_calls_are_journaled_and_reused(app: tether.App) -> None:
    agent, model, effects = _calculator()
    runner = TetherRunner(app)
    result = runner.run_sync(agent, "square 3 twice", run_id="r-1", run_config=CONFIG)
    assert (result.status, result.final_output, result.last_agent) == (
        "completed",
        "squares 9, 9",
        "calc",
    )
    state = app.get("r-1")
    assert [(s.kind, s.name) for s in state.steps] == [
        ("llm", "calc"),
        ("tool", "square"),
        ("tool", "square"),
        ("llm", "calc"),
    ]
    assert (state.usage.calls, state.usage.input_tokens, state.usage.output_tokens) == (2, 14, 4)
    keys = [s.key for s in state.steps if s.kind == "tool"]
    assert [k for _, k in effects] == keys and len(set(keys)) == 2
    assert all(k is not None and k.startswith("r-1:") for k in keys)
    recorded = state.steps[0].output["output"]
    assert [i["call_id"] for i in recorded] == ["call-1", "call-2"]

    again = runner.run_sync(agent, "square 3 twice", run_id="r-1", run_config=CONFIG)
    assert again == result
    assert len(model.calls) == 2 and len(effects) == 2  # nothing called a second time


def test_a_runner_sees_what_changed_in_an_agent_between_runs(app: tether.App) -> None:
    agent, _, effects = _calculator()
    runner = TetherRunner(app)
    runner.run_sync(agent, "square 3 twice", run_id="c-1", run_config=CONFIG)

    @function_tool
    def cube(x: int) -> str:
        """Cube a number."""
        effects.append((x**3, tether.current_step().idempotency_key))
        return str(x**3)

    agent.instructions = "Square or cube."
    agent.tools.append(cube)  # in place: the same list
    agent.model = model = ScriptedModel(
        [
            ModelStep(output=[function_call("cube", {"x": 2}, call_id="k-1")]),
            ModelStep(output=[assistant_message("cubed")]),
        ]
    )
    result = runner.run_sync(agent, "cube 2", run_id="c-2", run_config=CONFIG)
    assert result.final_output == "cubed"
    seen = model.calls[0]
    assert len(model.calls) == 2 and seen.system_instructions == "Square or cube."
    assert [t.name for t in seen.tools] == ["square", "cube"]
    assert [(s.kind, s.name) for s in app.get("c-2").steps] == [
        ("llm", "calc"),
        ("tool", "cube"),
        ("llm", "calc"),
    ]
    assert effects[-1][0] == 8 and effects[-1][1].startswith("c-2:")


def test_concurrent_runs_of_one_agent_journal_into_their_own_runs(app: tether.App) -> None:
    agent, model, effects = _calculator()
    runner = TetherRunner(app)

    async def both() -> list[Any]:
        return list(
            await asyncio.gather(
                runner.run(agent, "square 3 twice", run_id="x", run_config=CONFIG),
                runner.run(agent, "square 3 twice", run_id="y", run_config=CONFIG),
            )
        )

    results = asyncio.run(both())
    assert [r.final_output for r in results] == ["squares 9, 9", "squares 9, 9"]
    for rid in ("x", "y"):  # the same call_ids in both: each call keyed by its own run
        keys = [s.key for s in app.get(rid).steps if s.kind == "tool"]
        assert len(keys) == 2 and all(k is not None and k.startswith(f"{rid}:") for k in keys)
    assert sorted(k[:2] for _, k in effects) == ["x:", "x:", "y:", "y:"]
    assert len(model.calls) == 4  # two per run


def test_handoffs_are_followed(app: tether.App) -> None:
    def specialist_says(call: ModelCall) -> ModelStep:
        return ModelStep(output=[assistant_message("handled by billing")])

    def triage_says(call: ModelCall) -> ModelStep:
        return ModelStep(output=[function_call("transfer_to_billing", {}, call_id="h-1")])

    billing = Agent(name="billing", model=ScriptedModel([ModelStep.respond(specialist_says)]))
    triage = Agent(
        name="triage", model=ScriptedModel([ModelStep.respond(triage_says)]), handoffs=[billing]
    )
    result = TetherRunner(app).run_sync(triage, "my invoice", run_id="h", run_config=CONFIG)
    assert (result.final_output, result.last_agent) == ("handled by billing", "billing")
    assert [(s.kind, s.name) for s in app.get("h").steps] == [
        ("llm", "triage"),
        ("llm", "billing"),
    ]


def test_show_and_history_name_the_model_and_tool_calls(backend: Backend) -> None:
    with tether.open(backend.url) as app:
        agent, _, _ = _calculator()
        TetherRunner(app).run_sync(agent, "square 3 twice", run_id="r-2", run_config=CONFIG)

    def cli(*args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "tether.cli", "--db", backend.url, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    show = cli("show", "r-2")
    rows = [line.split()[:3] for line in show.splitlines() if line.strip()[:1].isdigit()]
    assert rows == [["1", "llm", "calc"], ["2", "tool", "square"], ["3", "tool", "square"],
                    ["4", "llm", "calc"]]  # fmt: skip
    assert "2 model calls, 14 tokens in, 4 out" in show
    history = cli("history", "r-2")
    assert "calc (llm)" in history and "square (tool)" in history
    assert "squares 9, 9" in history  # the model's last message


def test_a_process_without_the_agent_pauses_the_run(app: tether.App) -> None:
    agent, model, _ = _calculator()
    runner = TetherRunner(app)
    app.start(AGENT_NAME, "calc", "square 3 twice", 10, queue=QUEUE, run_id="r-3")
    with pytest.raises(AgentNotBound, match="TetherRunner"):
        app.resume("r-3")  # as `tether resume` would: this process has no SDK agent
    assert app.get("r-3").status not in ("failed", "completed") and not model.calls
    result = runner.run_sync(agent, "square 3 twice", run_id="r-3", run_config=CONFIG)
    assert result.final_output == "squares 9, 9"


def test_a_fork_reuses_the_model_calls_before_it_and_diff_shows_the_change(
    backend: Backend,
) -> None:
    with tether.open(backend.url) as app:
        agent, _, effects = _calculator()
        runner = TetherRunner(app)
        runner.run_sync(agent, "square 3 twice", run_id="r-4", run_config=CONFIG)
        fork = app.fork("r-4", step=1)  # after the model asked for the two calls

        def answer(call: ModelCall) -> ModelStep:
            return ModelStep(output=[assistant_message("forked " + ", ".join(_outputs(call)))])

        model = ScriptedModel([ModelStep.respond(answer)])
        changed = agent.clone(model=model)
        result = runner.run_sync(changed, "square 3 twice", run_id=fork, run_config=CONFIG)
        assert result.final_output == "forked 9, 9"
        assert len(model.calls) == 1  # the first model call came from the parent's log
        steps = app.get(fork).steps
        assert [(s.kind, s.name) for s in steps] == [(s.kind, s.name) for s in app.get("r-4").steps]
        assert len(effects) == 4 and all(k.startswith(f"{fork}:") for _, k in effects[2:])

    out = subprocess.run(
        [sys.executable, "-m", "tether.cli", "--db", backend.url, "diff", "r-4", fork],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "steps[4].output.output[0].content[0].text: squares 9, 9 -> forked 9, 9" in out.stdout


def test_streaming_is_refused_not_silently_undurable(app: tether.App) -> None:
    from agents import ModelSettings, ModelTracing

    from tether.integrations.openai_agents import TetherModel

    seen: list[TetherModel] = []

    async def stream(run: tether.AsyncRun) -> None:
        model = TetherModel(ScriptedModel([]), run, "calc")
        seen.append(model)
        model.stream_response(
            None,
            "hi",
            ModelSettings(),
            [],
            None,
            [],
            ModelTracing.DISABLED,
            previous_response_id=None,
            conversation_id=None,
            prompt=None,
        )

    app.agent(name="stream")(stream)
    with pytest.raises(
        tether.RunFailed, match="streaming the model of agent 'calc' is not durable"
    ):
        app.run("stream")
    assert len(seen) == 1
