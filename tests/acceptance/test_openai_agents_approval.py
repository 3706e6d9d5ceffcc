"""A ``needs_approval`` tool of an OpenAI Agents SDK agent becomes a tether approval: the
run waits without a process, ``tether approve|deny`` decides from another process, and
a third process continues the run (SQLite and PostgreSQL)."""

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

pytest.importorskip("agents")
pytestmark = pytest.mark.acceptance
AGENT = str(Path(__file__).with_name("_openai_agents.py"))
GATE = "charge:call-2"


@pytest.fixture
def ledger() -> Iterator[Ledger]:
    service = Ledger(aware=True).start()
    yield service
    service.stop()


def _child(url: str, ledger: Ledger, log: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, AGENT, url, ledger.url, str(log), "r", "none", "approval"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", "--db", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_approval_round_trip_across_processes(
    url: str, tmp_path: Path, ledger: Ledger, decision: str
) -> None:
    log = tmp_path / "model.log"
    first = _child(url, ledger, log)
    assert first["status"] == "waiting" and first["waiting_for"] == f"approval:{GATE}"
    assert sorted(e["amount"] for e in ledger.entries) == [10]  # 20 waits; 5 after it
    with tether.open(url) as app:
        record = app.record("r")
        assert record.status == "waiting" and record.lease_owner is None
        assert app.get("r").waiting is not None

    early = _child(url, ledger, log)  # nothing decided yet: still waiting, nothing paid
    assert early["status"] == "waiting" and len(ledger.entries) == 1

    decided = _cli(url, decision, "r", GATE, "--by", "alice")
    assert decided.returncode == 0, decided.stderr
    done = _child(url, ledger, log)
    assert done["status"] == "completed"
    if decision == "approve":
        assert done["output"] == "done: charged 10; charged 20; charged 5"
        assert sorted(e["amount"] for e in ledger.entries) == [5, 10, 20]
    else:
        assert done["output"].startswith("done: charged 10; Tool call charge was not approved")
        assert done["output"].endswith("; charged 5")
        assert sorted(e["amount"] for e in ledger.entries) == [5, 10]
    turns = [line.split()[1] for line in log.read_text().splitlines()]
    assert sorted(turns) == ["1", "2", "3"]  # no model call paid twice across the processes
