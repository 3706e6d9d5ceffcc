"""The framework runners' ``run_sync`` start an event loop of their own; called from async
code (a thread running a loop) they refuse at once, saying to await ``run``, and create
nothing (asyncio.run raised after a coroutine was made, which Python then reported as
never awaited)."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

import tether

pytest.importorskip("agents")
pytest.importorskip("pydantic_ai")

from agents import Agent, RunConfig
from agents.testing import ScriptedModel, assistant_message
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.test import TestModel

from tether.integrations.openai_agents import TetherRunner
from tether.integrations.pydantic_ai import TetherAgentRunner


def test_run_sync_in_a_running_loop_refuses_and_creates_nothing(app: tether.App) -> None:
    sdk_agent = Agent(name="a", instructions="x", model=ScriptedModel([[assistant_message("hi")]]))
    pyd_agent = PydanticAgent(TestModel(custom_output_text="hi"))
    calls: list[tuple[str, Any]] = [
        ("TetherRunner", lambda: TetherRunner(app).run_sync(
            sdk_agent, "go", run_id="r1", run_config=RunConfig(tracing_disabled=True))),
        ("TetherAgentRunner", lambda: TetherAgentRunner(app).run_sync(
            pyd_agent, "go", run_id="r2")),
    ]  # fmt: skip

    async def main() -> None:
        for runner, call in calls:
            with pytest.raises(tether.InvalidState, match=rf"await {runner}\.run\(\.\.\.\)"):
                call()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
    assert not [w for w in caught if "never awaited" in str(w.message)]
    assert app.runs() == []
    assert (
        TetherRunner(app)
        .run_sync(  # outside a loop: as before
            sdk_agent, "go", run_id="r1", run_config=RunConfig(tracing_disabled=True)
        )
        .final_output
        == "hi"
    )


def test_an_empty_run_id_is_refused_not_taken_for_a_new_run(app: tether.App) -> None:
    """``run_id=""`` (an unset variable) made a new run each call, so a resume never found
    the one it meant; it is refused as app.start refuses it."""
    sdk_agent = Agent(name="a", instructions="x", model=ScriptedModel([[assistant_message("hi")]]))
    with pytest.raises(tether.InvalidInput, match="run_id must be a non-empty str"):
        TetherRunner(app).run_sync(
            sdk_agent, "go", run_id="", run_config=RunConfig(tracing_disabled=True)
        )
    with pytest.raises(tether.InvalidInput, match="run_id must be a non-empty str"):
        TetherAgentRunner(app).run_sync(PydanticAgent(TestModel()), "go", run_id="")
    assert app.runs() == []
