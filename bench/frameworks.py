"""What tether adds to an agent turn of the OpenAI Agents SDK and of pydantic-ai.

One turn: the model asks for one tool call, the tool answers, the model replies (two
model calls, one tool call) with an *instant* model (the frameworks' own scripted test
models), so what is measured is the framework's own per-turn cost and what each kind of
persistence adds to it. Every variant runs in the same process, alternating, on SQLite
files in one temporary directory:

- ``plain``: the framework alone, nothing persisted (its own per-turn cost);
- ``own-session`` (Agents SDK): the SDK's ``SQLiteSession`` (a file), its own store of
  the conversation, the anchor;
- ``tether``: ``TetherRunner`` / ``TetherAgentRunner``: a tether run per turn, every
  model response and the tool call journaled (durable: resumable after a crash);
- ``tether+session`` (Agents SDK): the same, with ``TetherSession`` as the SDK session;
- ``plain+6 commits``: the framework alone, then six commits of stdlib ``sqlite3`` (WAL,
  ``synchronous=NORMAL``, as tether's SQLite store), each one ~300-byte row: the floor,
  what the six transactions of a durable turn cost with no work around them (the run
  created, each model response, the tool's intent and its completion, the run's end).

Prints the µs per turn of each variant's fastest sample (the least disturbed: on a
shared machine other tenants only add time), wall clock and CPU time (the process's
own), and each variant's overhead over ``plain`` as a ratio of the framework's own
cost. The goal of issue 28: tether's overhead under 10% of the framework's per-turn
cost. Not a test: nothing fails on a number.

usage: python bench/frameworks.py [--turns N] [--rounds R]   (a sample: N turns)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import tether

Turn = Callable[[int], Awaitable[Any]]
COMMITS = 6  # the transactions of a durable turn (see the module's docstring)


def floor(plain: Turn, tmp: str, name: str) -> Turn:
    """``plain``, then COMMITS raw commits of a ~300-byte row each."""
    db = sqlite3.connect(os.path.join(tmp, f"{name}-floor.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("CREATE TABLE events (run TEXT, seq INTEGER, data TEXT, PRIMARY KEY (run, seq))")
    row = "x" * 300

    async def turn(i: int) -> Any:
        result = await plain(i)
        for seq in range(COMMITS):
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO events VALUES (?, ?, ?)", (f"r-{i}", seq, row))
            db.execute("COMMIT")
        return result

    return turn


def agents_variants(tmp: str) -> dict[str, Turn]:
    from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool
    from agents.testing import (
        ModelCall,
        ModelStep,
        ScriptedModel,
        assistant_message,
        function_call,
    )

    from tether.integrations.openai_agents import TetherRunner, TetherSession

    @function_tool
    def lookup(order: str) -> str:
        """Look an order up."""
        return f"order {order}: shipped"

    def respond(call: ModelCall) -> ModelStep:
        items = call.input if isinstance(call.input, list) else []
        done = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not done:
            return ModelStep(output=[function_call("lookup", {"order": "O-7"}, call_id="c-1")])
        return ModelStep(output=[assistant_message("It shipped.")])

    class Endless(ScriptedModel):
        """A scripted model that never runs out of steps."""

        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            self.enqueue(ModelStep.respond(respond))
            return await super().get_response(*args, **kwargs)

    agent = Agent(name="support", instructions="Help.", model=Endless(), tools=[lookup])
    config = RunConfig(tracing_disabled=True)
    app = tether.open(os.path.join(tmp, "agents-tether.db"))
    runner = TetherRunner(app)
    own = os.path.join(tmp, "agents-own.db")

    async def plain(i: int) -> Any:
        return await Runner.run(agent, "where is O-7?", run_config=config)

    async def own_session(i: int) -> Any:
        session = SQLiteSession(f"s-{i}", own)
        return await Runner.run(agent, "where is O-7?", session=session, run_config=config)

    async def durable(i: int) -> Any:
        return await runner.run(agent, "where is O-7?", run_id=f"r-{i}", run_config=config)

    async def durable_session(i: int) -> Any:
        session = TetherSession(app, f"s-{i}")
        result = await runner.run(agent, "where is O-7?", run_id=f"rs-{i}", run_config=config)
        await session.add_items([{"role": "user", "content": "where is O-7?"}])
        await session.add_items([{"role": "assistant", "content": str(result.final_output)}])
        return result

    return {
        "plain": plain,
        f"plain+{COMMITS} commits": floor(plain, tmp, "agents"),
        "own-session": own_session,
        "tether": durable,
        "tether+session": durable_session,
    }


def pydantic_ai_variants(tmp: str) -> dict[str, Turn]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from tether.integrations.pydantic_ai import TetherAgentRunner, TetherDurability

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = [p for m in messages for p in getattr(m, "parts", [])]
        if not any(isinstance(p, ToolReturnPart) for p in parts):
            return ModelResponse(parts=[ToolCallPart("lookup", {"order": "O-7"}, tool_call_id="c")])
        return ModelResponse(parts=[TextPart("It shipped.")])

    agent: Agent[None, str] = Agent(
        FunctionModel(respond), name="support", capabilities=[TetherDurability()]
    )

    @agent.tool_plain
    def lookup(order: str) -> str:
        return f"order {order}: shipped"

    runner = TetherAgentRunner(tether.open(os.path.join(tmp, "pydantic-tether.db")))

    async def plain(i: int) -> Any:
        return await agent.run("where is O-7?")  # outside a tether run: nothing journaled

    async def durable(i: int) -> Any:
        return await runner.run(agent, "where is O-7?", run_id=f"r-{i}")

    return {
        "plain": plain,
        f"plain+{COMMITS} commits": floor(plain, tmp, "pydantic"),
        "tether": durable,
    }


async def measure(
    variants: dict[str, Turn], turns: int, rounds: int
) -> dict[str, tuple[float, float]]:
    """The fastest sample's (wall, CPU) µs per turn of each variant, rounds alternating
    between the variants."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    n = 0
    for _ in range(rounds):
        for name, turn in variants.items():
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(turns):
                n += 1
                await turn(n)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            samples[name].append((wall / turns * 1e6, cpu / turns * 1e6))
    return {name: (min(w for w, _ in s), min(c for _, c in s)) for name, s in samples.items()}


def report(framework: str, fastest: dict[str, tuple[float, float]]) -> None:
    wall0, cpu0 = fastest["plain"]
    print(f"\n{framework}: µs per turn (2 model calls + 1 tool call, instant model)")
    print(f"  {'variant':<18}{'wall':>8}{'overhead':>16}{'CPU':>8}{'overhead':>16}")
    for name, (wall, cpu) in fastest.items():
        over_wall = f"{wall - wall0:+.0f} ({(wall - wall0) / wall0:+.0%})"
        over_cpu = f"{cpu - cpu0:+.0f} ({(cpu - cpu0) / cpu0:+.0%})"
        print(f"  {name:<18}{wall:>8.0f}{over_wall:>16}{cpu:>8.0f}{over_cpu:>16}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20, help="turns per sample")
    parser.add_argument("--rounds", type=int, default=15, help="samples per variant")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for framework, build in [
            ("OpenAI Agents SDK", agents_variants),
            ("pydantic-ai", pydantic_ai_variants),
        ]:
            try:
                variants = build(tmp)
            except ImportError as e:
                print(f"\n{framework}: not installed ({e}); pip install -e '.[test]'")
                continue
            report(framework, asyncio.run(measure(variants, args.turns, args.rounds)))


if __name__ == "__main__":
    main()
