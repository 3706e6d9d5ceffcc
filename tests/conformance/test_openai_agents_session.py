"""TetherSession: the OpenAI Agents SDK's Session protocol on tether's sessions, on
SQLite and PostgreSQL; removals are messages of the session (auditable)."""

from __future__ import annotations

import asyncio

import pytest

import tether

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner
from agents.memory import Session
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message

from tether.integrations.openai_agents import REMOVED, TetherSession

pytestmark = pytest.mark.conformance
USER = {"role": "user", "content": "hi"}
OUT = {"type": "function_call_output", "call_id": "c-1", "output": "42"}
BYE = {"role": "user", "content": "bye"}


def test_session_protocol_semantics(app: tether.App) -> None:
    async def scenario() -> None:
        s = TetherSession(app, "s-1")
        assert isinstance(s, Session) and s.session_id == "s-1"
        assert await s.get_items() == [] and await s.pop_item() is None
        await s.add_items([USER, OUT])
        await s.add_items([BYE])
        assert await s.get_items() == [USER, OUT, BYE]
        assert await s.get_items(limit=2) == [OUT, BYE]
        assert await s.get_items(limit=0) == []
        assert await s.pop_item() == BYE
        other = TetherSession(app, "s-1")  # another object (another process) sees the same
        assert await other.get_items() == [USER, OUT]
        assert await other.pop_item() == OUT
        assert await s.get_items() == [USER]
        await s.clear_session()
        assert await other.get_items() == [] and await s.pop_item() is None
        await other.add_items([BYE])
        assert await s.get_items() == [BYE]

    asyncio.run(scenario())
    messages = app.session("s-1").messages()
    # nothing said was deleted: every item, then each removal naming what it removed
    assert [m.role for m in messages] == [
        "user",
        "tool",
        "user",
        "system",
        "system",
        "system",
        "user",
    ]
    removals = [m.content["seqs"] for m in messages if m.meta.get("op") == REMOVED]
    assert removals == [[3], [2], [1]]


def test_agent_remembers_through_the_session(app: tether.App) -> None:
    def respond(call: ModelCall) -> ModelStep:
        items = call.input if isinstance(call.input, list) else []
        said = [i["content"] for i in items if isinstance(i, dict) and i.get("role") == "user"]
        return ModelStep(output=[assistant_message(" | ".join(str(x) for x in said))])

    agent = Agent(name="echo", model=ScriptedModel([ModelStep.respond(respond)] * 2))
    config = RunConfig(tracing_disabled=True)

    async def two_turns() -> list[str]:
        first = await Runner.run(agent, "one", session=TetherSession(app, "s-2"), run_config=config)
        again = TetherSession(app, "s-2")
        second = await Runner.run(agent, "two", session=again, run_config=config)
        return [str(first.final_output), str(second.final_output)]

    assert asyncio.run(two_turns()) == ["one", "one | two"]
    roles = [m.role for m in app.session("s-2").messages()]
    assert roles == ["user", "assistant", "user", "assistant"]


def test_compaction_is_tethers(app: tether.App) -> None:
    replaced: list[list[dict[str, object]]] = []

    def summarize(entries: list[dict[str, object]]) -> str:
        replaced.append(entries)
        return f"{len(entries)} earlier messages"

    s = TetherSession(app, "s-3", compact_at_tokens=40, summarize=summarize, keep_last=2)
    said = [{"role": "user", "content": f"message number {i} " + "word " * 10} for i in range(4)]

    async def scenario() -> list[object]:
        await s.add_items(said)
        return list(await s.get_items())

    items = asyncio.run(scenario())
    compactions = app.session("s-3").compactions()
    newest = compactions[-1]  # each add compacts once the view passes 40 tokens
    assert len(compactions) == len(replaced) >= 1 and newest.upto >= 2
    assert items == [{"role": "system", "content": newest.summary}, *said[newest.upto :]]
    assert newest.summary == f"{len(replaced[-1])} earlier messages"
    assert len(app.session("s-3").messages()) == 4  # compaction deletes nothing
