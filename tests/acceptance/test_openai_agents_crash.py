"""An OpenAI Agents SDK agent on tether, SIGKILLed inside a tool call and inside a model
call, resumed from another process: each model call paid once, each tool effect once,
the same final output as an uninterrupted run (SQLite and PostgreSQL)."""

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

pytest.importorskip("agents")
pytestmark = pytest.mark.acceptance
AGENT = str(Path(__file__).with_name("_openai_agents.py"))
FINAL = "done: charged 10; charged 20; charged 5"


@pytest.fixture
def ledger() -> Iterator[Ledger]:
    service = Ledger(aware=True).start()
    yield service
    service.stop()


def _child(url: str, ledger: Ledger, log: Path, run_id: str, crash: str) -> Any:
    return subprocess.run(
        [sys.executable, AGENT, url, ledger.url, str(log), run_id, crash],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _turns(log: Path, run_id: str) -> list[str]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split()[1] for line in lines if line.split()[0] == run_id]


def _effects(ledger: Ledger, run_id: str) -> list[Any]:
    return sorted(e["amount"] for e in ledger.entries if e["key"].startswith(run_id + ":"))


@pytest.mark.parametrize("point", ["tool", "model"])
def test_crash_and_resume_pays_each_call_once(
    url: str, tmp_path: Path, ledger: Ledger, point: str
) -> None:
    log = tmp_path / "model.log"
    reference = _child(url, ledger, log, "ref", "none")
    assert reference.returncode == 0, reference.stderr
    assert json.loads(reference.stdout)["output"] == FINAL

    first = _child(url, ledger, log, "crashed", point)
    assert first.returncode == -signal.SIGKILL, first.stderr
    second = _child(url, ledger, log, "crashed", "none")
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == json.loads(reference.stdout)

    # every model call answered once: the resume made only the calls not yet recorded
    assert sorted(_turns(log, "crashed")) == ["1", "2", "3"]
    # every charge took effect once, under the key tether recorded for it
    assert _effects(ledger, "crashed") == [5, 10, 20]
    with tether.open(url) as app:
        state = app.get("crashed")
        assert [(s.kind, s.name) for s in state.steps] == [
            ("llm", "cashier"),
            ("tool", "charge"),
            ("llm", "cashier"),
            ("tool", "charge"),
            ("tool", "charge"),
            ("llm", "cashier"),
        ]
        keys = {s.key for s in state.steps if s.kind == "tool"}
        assert keys == {e["key"] for e in ledger.entries if e["key"].startswith("crashed:")}
        assert state.usage.input_tokens == 60 and state.usage.calls == 3
