"""Approval flows end to end: the CLI in separate processes, the run waiting in between."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tether

pytestmark = pytest.mark.acceptance
AGENT = str(Path(__file__).with_name("_approvals.py"))


class Flow:
    def __init__(self, tmp_path: Path) -> None:
        self.db = str(tmp_path / "refunds.db")
        self.env = {**os.environ, "TETHER_TEST_DB": self.db}

    def start(self, timeout: str | None = None) -> dict[str, Any]:
        args = [sys.executable, AGENT, "start", *([timeout] if timeout else [])]
        out = subprocess.run(args, capture_output=True, text=True, env=self.env, timeout=60)
        assert out.returncode == 0, out.stderr
        started: dict[str, Any] = json.loads(out.stdout)
        return started

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tether.cli", "--app", f"{AGENT}:app", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
        )

    def refunds(self) -> list[str]:
        path = Path(self.db + ".refunds")
        return path.read_text().splitlines() if path.exists() else []

    def state(self, run_id: str) -> tether.RunState:
        with tether.open(self.db) as app:
            return app.get(run_id)


@pytest.fixture
def flow(tmp_path: Path) -> Flow:
    return Flow(tmp_path)


def test_request_exit_approve_elsewhere_resume_effect(flow: Flow) -> None:
    started = flow.start()
    assert started["status"] == "waiting"
    assert started["waiting"]["kind"] == "approval"
    assert started["waiting"]["payload"] == {"order": "O-7", "amount": 30}
    rid = started["id"]
    assert flow.refunds() == []
    with tether.open(flow.db) as app:
        record = app.store.get_run(rid)
        assert record.status == "waiting" and record.lease_owner is None

    early = flow.cli("resume", rid)
    assert early.returncode == 1 and "approve" in early.stderr and flow.refunds() == []

    ok = flow.cli("approve", rid, "send_refund", "--by", "alice", "--reason", "checked")
    assert ok.returncode == 0, ok.stderr
    assert f"approved 'send_refund' on run {rid}; `tether resume {rid}` goes on" in ok.stdout
    assert flow.state(rid).status == "queued"
    resumed = flow.cli("resume", rid)
    assert resumed.returncode == 0, resumed.stderr
    state = flow.state(rid)
    assert state.status == "completed"
    assert state.output == {"refunded": 30, "approved_by": "alice"}
    assert len(flow.refunds()) == 1 and flow.refunds()[0].startswith(f"O-7 30 {rid}:3:")
    decision = next(s for s in state.steps if s.kind == "approve")
    assert decision.output == {"approved": True, "by": "alice", "reason": "checked"}


def test_deny_raises_inside_the_agent(flow: Flow) -> None:
    rid = flow.start()["id"]
    out = flow.cli("deny", rid, "send_refund", "--by", "bob", "--reason", "fraud")
    assert out.returncode == 0, out.stderr
    assert flow.cli("resume", rid).returncode == 0
    state = flow.state(rid)
    assert state.output == {"refunded": 0, "denied_by": "bob", "timed_out": False}
    assert flow.refunds() == []


def test_timeout_denies(flow: Flow) -> None:
    rid = flow.start(timeout="0s")["id"]  # due at once: no real time needs to pass
    out = flow.cli("resume", rid)
    assert out.returncode == 0, out.stderr
    assert flow.state(rid).output == {"refunded": 0, "denied_by": "timeout", "timed_out": True}
    late = flow.cli("approve", rid, "send_refund", "--by", "alice")
    assert late.returncode == 1 and "already denied by timeout" in late.stderr
    assert flow.refunds() == []


def test_wrong_approver_and_double_decision_are_refused_and_audited(flow: Flow) -> None:
    rid = flow.start()["id"]
    wrong = flow.cli("approve", rid, "send_refund", "--by", "mallory")
    assert wrong.returncode == 1
    assert "'mallory' is not among the approvers" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    assert flow.state(rid).status == "waiting"
    assert flow.cli("approve", rid, "send_refund", "--by", "alice").returncode == 0
    again = flow.cli("deny", rid, "send_refund", "--by", "bob")
    assert again.returncode == 1 and "already approved by alice" in again.stderr
    unknown = flow.cli("approve", rid, "other", "--by", "alice")
    assert unknown.returncode == 1 and "no approval 'other'" in unknown.stderr
    audit = flow.cli("audit", rid, "--json")
    records = [json.loads(line) for line in audit.stdout.splitlines()]
    assert [(r["actor"], r["action"]) for r in records] == [
        ("mallory", "approval.refused"),
        ("bob", "approval.refused"),
        ("alice", "approval.refused"),
    ]
    assert flow.cli("resume", rid).returncode == 0
    assert len(flow.refunds()) == 1
    after = flow.cli("approve", rid, "send_refund", "--by", "alice")
    assert after.returncode == 1 and "already approved" in after.stderr


def test_policy_gates_risky_tools(tmp_path: Path) -> None:
    app = tether.open(
        str(tmp_path / "p.db"), policy=tether.Policy(approve_at="irreversible", approvers=["lead"])
    )
    sent: list[str] = []

    @app.tool(risk="irreversible")
    def wipe(target: str) -> str:
        sent.append(target)
        return "wiped"

    @app.tool(risk="write")
    def note(text: str) -> str:
        return text

    @app.agent
    def agent(run: tether.Run) -> str:
        run.tool(note, "start")
        return str(run.tool(wipe, "db-1"))

    h = app.run(agent)
    assert h.status == "waiting" and h.waiting is not None
    assert h.waiting["name"] == "approve:wipe"
    assert h.waiting["payload"]["args"] == ["db-1"] and sent == []
    app.approve(h.id, "approve:wipe", by="lead")
    assert app.resume(h.id).output == "wiped" and sent == ["db-1"]
    app.close()
