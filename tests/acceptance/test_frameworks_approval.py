"""A tool needing approval (the Agents SDK's ``needs_approval``, pydantic-ai's
``requires_approval``) becomes a tether approval: the run waits without a process,
``tether approve|deny`` decides from another process, and a third process continues the
run (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
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
FRAMEWORKS = {"openai-agents": "_openai_agents.py", "pydantic-ai": "_pydantic_ai.py"}
MODULES = {"openai-agents": "agents", "pydantic-ai": "pydantic_ai"}


@pytest.fixture(params=sorted(FRAMEWORKS))
def script(request: pytest.FixtureRequest) -> str:
    pytest.importorskip(MODULES[request.param])
    return str(HERE / FRAMEWORKS[request.param])


GATE = "charge:call-2"


@pytest.fixture
def ledger() -> Iterator[Ledger]:
    service = Ledger(aware=True).start()
    yield service
    service.stop()


def _child(script: str, url: str, ledger: Ledger, log: Path, *runs: str) -> list[Any]:
    out = subprocess.run(
        [sys.executable, script, url, ledger.url, str(log), "--approval", *runs],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def _paid(ledger: Ledger, run_id: str) -> list[Any]:
    return sorted(e["amount"] for e in ledger.entries if e["key"].startswith(run_id + ":"))


def test_approval_round_trip_across_processes(
    script: str, url: str, tmp_path: Path, ledger: Ledger
) -> None:
    """Runs ``a`` and ``b`` wait for their charge of 20; ``a`` asked again is still
    waiting; ``tether approve`` decides ``a`` (the CLI, a process of its own) and
    ``app.deny`` ``b``; a last process continues both."""
    log = tmp_path / "model.log"
    a, b, early = _child(script, url, ledger, log, "a:none", "b:none", "a:none")
    for out in (a, b, early):
        assert out["status"] == "waiting" and out["waiting_for"] == f"approval:{GATE}"
    for run_id in "ab":
        paid = _paid(ledger, run_id)
        assert 20 not in paid and 10 in paid  # 20 waits (5 may be paid before it, or after)
    with tether.open(url) as app:
        record = app.record("a")
        assert record.status == "waiting" and record.lease_owner is None
        app.deny("b", GATE, by="bob")

    decided = subprocess.run(
        [sys.executable, "-m", "tether.cli", "--db", url, "approve", "a", GATE, "--by", "alice"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert decided.returncode == 0, decided.stderr
    approved, denied = _child(script, url, ledger, log, "a:none", "b:none")

    assert approved["status"] == denied["status"] == "completed"
    said = approved["output"].removeprefix("done: ").split("; ")
    assert sorted(said) == ["charged 10", "charged 20", "charged 5"]
    assert _paid(ledger, "a") == [5, 10, 20]
    said = denied["output"].removeprefix("done: ").split("; ")
    assert "charged 10" in said and "charged 5" in said and len(said) == 3
    assert any("not approved" in s for s in said), said  # the model was told
    assert _paid(ledger, "b") == [5, 10]
    turns = [line.split() for line in log.read_text().splitlines()]
    for run_id in "ab":  # no model call paid twice across the processes
        assert sorted(t for r, t in turns if r == run_id) == ["1", "2", "3"]
