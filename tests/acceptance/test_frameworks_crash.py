"""An agent of the OpenAI Agents SDK and of pydantic-ai on tether, SIGKILLed inside a tool
call and inside a model call, resumed from another process: each model call paid once,
each tool effect once, the same final output as an uninterrupted run (SQLite and
PostgreSQL)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _ledger import Ledger

import tether

pytestmark = pytest.mark.acceptance
HERE = Path(__file__).parent
# the same agent on each framework (see the scripts' docstrings)
FRAMEWORKS = {
    "openai-agents": "_openai_agents.py",
    "pydantic-ai": "_pydantic_ai.py",
    "pydantic-ai-streamed": "_pydantic_ai_stream.py",  # the model's answers streamed
}
MODULES = {
    "openai-agents": "agents",
    "pydantic-ai": "pydantic_ai",
    "pydantic-ai-streamed": "pydantic_ai",
}


@pytest.fixture(params=sorted(FRAMEWORKS))
def script(request: pytest.FixtureRequest) -> str:
    pytest.importorskip(MODULES[request.param])
    return str(HERE / FRAMEWORKS[request.param])


FINAL = "done: charged 10; charged 20; charged 5"


@pytest.fixture
def ledger() -> Iterator[Ledger]:
    service = Ledger(aware=True).start()
    yield service
    service.stop()


def _child(script: str, url: str, ledger: Ledger, log: Path, *runs: str) -> Any:
    return subprocess.run(
        [sys.executable, script, url, ledger.url, str(log), *runs],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _results(out: Any) -> dict[str, Any]:
    return {r["id"]: r for r in map(json.loads, out.stdout.splitlines())}


def _turns(log: Path, run_id: str) -> list[str]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split()[1] for line in lines if line.split()[0] == run_id]


def _effects(ledger: Ledger, run_id: str) -> list[Any]:
    return sorted(e["amount"] for e in ledger.entries if e["key"].startswith(run_id + ":"))


def test_crash_and_resume_pays_each_call_once(
    script: str, url: str, tmp_path: Path, ledger: Ledger
) -> None:
    """One process runs the reference, then dies inside a tool call of run ``tool``; the
    next resumes ``tool`` and dies inside a model call of run ``model``; the last
    resumes ``model``."""
    log = tmp_path / "model.log"
    first = _child(script, url, ledger, log, "ref:none", "tool:tool")
    assert first.returncode == -signal.SIGKILL, first.stderr
    second = _child(script, url, ledger, log, "tool:none", "model:model")
    assert second.returncode == -signal.SIGKILL, second.stderr
    third = _child(script, url, ledger, log, "model:none")
    assert third.returncode == 0, third.stderr
    reference = _results(first)["ref"]
    assert reference["status"] == "completed" and reference["output"] == FINAL
    for run_id, out in [("tool", _results(second)["tool"]), ("model", _results(third)["model"])]:
        assert out == {**reference, "id": run_id}
        # every model call answered once: the resume made only the calls not yet recorded
        assert sorted(_turns(log, run_id)) == ["1", "2", "3"]
        # every charge took effect once, under the key tether recorded for it
        assert _effects(ledger, run_id) == [5, 10, 20]
        _check_log(url, ledger, run_id, streamed="stream" in script)
    if "stream" in script:  # the handler saw the deltas, live, in the processes that ran
        events = Path(str(log) + ".events").read_text().split()
        assert {"PartDeltaEvent", "FunctionToolCallEvent"} <= set(events[1::2])


def _check_log(url: str, ledger: Ledger, run_id: str, *, streamed: bool = False) -> None:
    with tether.open(url) as app:
        state = app.get(run_id)
        # streamed, each tool event handed to the handler is a step of its own (delivered
        # once: a resume does not hand it again)
        handed = [s for s in state.steps if s.name == "cashier__event_stream_handler"]
        assert len(handed) == (6 if streamed else 0)  # a call and a result per charge
        assert [(s.kind, s.name) for s in state.steps if s not in handed] == [
            ("llm", "cashier"),
            ("tool", "charge"),
            ("llm", "cashier"),
            ("tool", "charge"),
            ("tool", "charge"),
            ("llm", "cashier"),
        ]
        keys = {s.key for s in state.steps if s.kind == "tool"}
        assert keys == {e["key"] for e in ledger.entries if e["key"].startswith(run_id + ":")}
        assert state.usage.calls == 3  # a streamed FunctionModel estimates its tokens
        assert streamed or state.usage.input_tokens == 60
