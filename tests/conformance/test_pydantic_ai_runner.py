"""pydantic-ai on tether (SQLite and PostgreSQL): TetherDurability journals every model
request as a ``run.llm`` with its usage and every tool call as a ``run.tool`` keyed by
the run and the ``tool_call_id``; a second call with the same run_id reuses them all;
approvals wait for tether; TetherMessageHistory keeps the conversation in a session."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from _conformance import Backend

import tether

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from tether.integrations.pydantic_ai import (
    TetherAgentRunner,
    TetherDurability,
    TetherMessageHistory,
)

pytestmark = pytest.mark.conformance


def _returns(messages: list[ModelMessage]) -> list[str]:
    parts = [p for m in messages for p in getattr(m, "parts", [])]
    return [str(p.content) for p in parts if isinstance(p, ToolReturnPart)]


def _calculator(
    **options: Any,
) -> tuple[Agent[None, Any], list[int], list[str]]:
    calls: list[int] = []
    effects: list[str] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        done = _returns(messages)
        usage = RequestUsage(input_tokens=7, output_tokens=2)
        if not done:  # the same arguments twice: only the tool_call_id tells them apart
            parts = [ToolCallPart("square", {"x": 3}, tool_call_id=f"t-{i}") for i in (1, 2)]
            return ModelResponse(parts=list(parts), usage=usage)
        return ModelResponse(parts=[TextPart("squares " + ", ".join(done))], usage=usage)

    agent: Agent[None, Any] = Agent(
        FunctionModel(respond), name="calc", capabilities=[TetherDurability(**options)]
    )

    @agent.tool_plain
    def square(x: int) -> int:
        """Square a number."""
        try:
            effects.append(tether.current_step().idempotency_key)
        except LookupError:  # outside a tether step
            effects.append("outside")
        return x * x

    return agent, calls, effects


def test_model_and_tool_calls_are_journaled_and_reused(app: tether.App) -> None:
    agent, calls, effects = _calculator()
    runner = TetherAgentRunner(app)
    result = runner.run_sync(agent, "square 3 twice", run_id="p-1")
    assert (result.status, result.output) == ("completed", "squares 9, 9")
    state = app.get("p-1")
    assert [(s.kind, s.name) for s in state.steps] == [
        ("llm", "calc"),
        ("tool", "square"),
        ("tool", "square"),
        ("llm", "calc"),
    ]
    assert (state.usage.calls, state.usage.input_tokens, state.usage.output_tokens) == (2, 14, 4)
    keys = [s.key for s in state.steps if s.kind == "tool"]
    assert effects == keys and len(set(keys)) == 2
    assert [s.kind for s in app.get("p-1").steps].count("tool") == 2

    again = runner.run_sync(agent, "square 3 twice", run_id="p-1")
    assert again == result and len(calls) == 2 and len(effects) == 2  # nothing twice


def test_a_tools_risk_changed_between_runs_takes_effect(app: tether.App) -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not _returns(messages):
            return ModelResponse(parts=[ToolCallPart("square", {"x": 3}, tool_call_id="t-1")])
        return ModelResponse(parts=[TextPart("done")])

    durability = TetherDurability()
    agent: Agent[None, Any] = Agent(FunctionModel(respond), name="calc", capabilities=[durability])
    keys: list[str] = []

    @agent.tool_plain
    def square(x: int) -> int:
        keys.append(tether.current_step().idempotency_key)
        return x * x

    runner = TetherAgentRunner(app)
    runner.run_sync(agent, "square 3", run_id="k-1")
    durability.risk["square"] = "read"  # a read tool's call writes no intent first
    runner.run_sync(agent, "square 3", run_id="k-2")
    intents = [len([e for e in app.events(r) if e.type == "tool.intent"]) for r in ("k-1", "k-2")]
    assert intents == [1, 0]
    assert [k[:4] for k in keys] == ["k-1:", "k-2:"]


def test_outside_a_tether_run_the_capability_is_transparent() -> None:
    agent, calls, effects = _calculator()
    assert agent.run_sync("square 3 twice").output == "squares 9, 9"
    assert len(calls) == 2 and effects == ["outside", "outside"]  # no tether step around


def test_approvals_wait_for_tether(app: tether.App) -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = _returns(messages)
        if not done:
            return ModelResponse(parts=[ToolCallPart("refund", {"amount": 30}, tool_call_id="r")])
        return ModelResponse(parts=[TextPart(done[0])])

    refunds: list[int] = []
    agent: Agent[None, Any] = Agent(
        FunctionModel(respond),
        name="desk",
        output_type=[str, DeferredToolRequests],
        capabilities=[TetherDurability()],
    )

    @agent.tool_plain(requires_approval=True)
    def refund(amount: int) -> str:
        refunds.append(amount)
        return f"refunded {amount}"

    runner = TetherAgentRunner(app)
    for run_id, decide in [("yes", app.approve), ("no", app.deny)]:
        first = runner.run_sync(agent, "refund", run_id=run_id)
        assert (first.status, first.waiting_for) == ("waiting", "approval:refund:r")
        decide(run_id, "refund:r", by="alice")
    assert refunds == []
    assert runner.run_sync(agent, "refund", run_id="yes").output == "refunded 30"
    assert "not approved" in runner.run_sync(agent, "refund", run_id="no").output
    assert refunds == [30]


def test_message_history_lives_in_a_session(app: tether.App) -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = [p for m in messages for p in getattr(m, "parts", [])]
        said = [str(p.content) for p in parts if isinstance(p, UserPromptPart)]
        return ModelResponse(parts=[TextPart(" | ".join(said))])

    agent: Agent[None, str] = Agent(FunctionModel(respond))
    history = TetherMessageHistory(app, "chat-1")
    assert history.load() == []
    first = agent.run_sync("one", message_history=history.load())
    history.save(first.new_messages())
    again = TetherMessageHistory(app, "chat-1")  # another object, another process
    second = agent.run_sync("two", message_history=again.load())
    again.save(second.new_messages())
    assert second.output == "one | two"
    loaded = history.load()
    assert [type(m) for m in loaded] == [ModelRequest, ModelResponse] * 2
    assert loaded == [*first.new_messages(), *second.new_messages()]
    roles = [m.role for m in app.session("chat-1").messages()]
    assert roles == ["user", "assistant", "user", "assistant"]


def test_show_and_history_name_the_model_and_tool_calls(backend: Backend) -> None:
    with tether.open(backend.url) as app:
        agent, _, _ = _calculator()
        TetherAgentRunner(app).run_sync(agent, "square 3 twice", run_id="p-2")

    def cli(*args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "tether.cli", "--db", backend.url, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    show = cli("show", "p-2")
    rows = [line.split()[:3] for line in show.splitlines() if line.strip()[:1].isdigit()]
    assert rows == [["1", "llm", "calc"], ["2", "tool", "square"], ["3", "tool", "square"],
                    ["4", "llm", "calc"]]  # fmt: skip
    assert "2 model calls, 14 tokens in, 4 out" in show
    history = cli("history", "p-2")
    assert "calc (llm)" in history and "square (tool)" in history
    assert "squares 9, 9" in history  # the model's last message
