"""Contracts on tools across processes: a script process works the run until its contract
refuses a call or escalates it; the CLI decides the escalation in another process; a
worker in a third finishes it. The tools count every call that reaches them in a file."""

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
AGENT = str(Path(__file__).with_name("_contracts.py"))
OK_PAY = {"to": "bob@example.com", "amount": 120}


class Flow:
    def __init__(self, url: str, tmp_path: Path) -> None:
        self.url = url
        self.calls = tmp_path / "calls.txt"
        self.env = {**os.environ, "TETHER_TEST_DB": url, "TETHER_TEST_CALLS": str(self.calls)}

    def start(self, pay: dict[str, Any], to: str) -> dict[str, Any]:
        proposal = json.dumps({"pay": pay, "email": {"to": to, "body": "your payout"}})
        out = subprocess.run(
            [sys.executable, AGENT, "start", proposal],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        started: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
        return started

    def cli(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tether.cli", "--app", f"{AGENT}:app", *args],
            capture_output=True,
            text=True,
            env={**self.env, **env},
            timeout=120,
        )

    def called(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def state(self, run_id: str) -> tether.RunState:
        with tether.open(self.url) as app:
            return app.get(run_id)

    def types(self, run_id: str, *names: str) -> list[str]:
        """The types of the run's events (of the steps ``names``, if given), from the CLI."""
        out = self.cli("log", run_id, "--json")
        assert out.returncode == 0, out.stderr
        events = [json.loads(line) for line in out.stdout.splitlines()]
        return [e["type"] for e in events if not names or e["data"].get("name") in names]


@pytest.fixture
def flow(url: str, tmp_path: Path) -> Flow:
    return Flow(url, tmp_path)


def test_escalation_approved_elsewhere_then_a_worker_finishes(flow: Flow) -> None:
    started = flow.start(OK_PAY, "eve@elsewhere.org")
    rid = started["id"]
    assert started["status"] == "waiting"
    waiting = started["waiting"]
    assert (waiting["kind"], waiting["name"]) == ("approval", "approve:send_email")
    fired = waiting["payload"]["contract"]["rules"]
    assert [(r["rule"], r["value"], r["version"]) for r in fired] == [
        ("to-domain", "eve@elsewhere.org", "2")
    ]
    assert flow.called() == ["pay bob@example.com 120"]  # the email waits for a human

    ok = flow.cli("approve", rid, "approve:send_email", "--by", "alice", "--reason", "known")
    assert ok.returncode == 0, ok.stderr
    worker = flow.cli("worker", "--until-idle", "--quiet")
    assert worker.returncode == 0, worker.stderr
    state = flow.state(rid)
    assert state.status == "completed", state.failure
    assert state.output["mail"] == {"sent": "eve@elsewhere.org"}
    assert flow.called() == ["pay bob@example.com 120", "send_email eve@elsewhere.org"]

    # the proposed call, the verdict and the effect: distinct records, in order
    assert flow.types(rid, "send_email", "approve:send_email") == [
        "tool.proposed",
        "tool.verdict",
        "approval.requested",
        "approval.decided",
        "tool.intent",
        "step.completed",
    ]
    text = flow.cli("log", rid).stdout
    assert "4 send_email(to='eve@elsewhere.org', body='your payout')" in text
    assert "4 send_email args: escalate; to-domain v2 (to ends with @example.com)" in text
    shown = flow.cli("show", rid).stdout
    assert "judged" in shown and "2 pay args: allow; passed: max-amount" in shown
    assert "in force" in shown and "send_email: shape; to-domain v2" in shown


def test_escalation_denied_elsewhere_refuses_the_call(flow: Flow) -> None:
    rid = flow.start(OK_PAY, "eve@elsewhere.org")["id"]
    no = flow.cli("deny", rid, "approve:send_email", "--by", "alice", "--reason", "not ours")
    assert no.returncode == 0, no.stderr
    assert flow.cli("worker", "--until-idle", "--quiet").returncode == 0
    state = flow.state(rid)
    assert state.status == "failed"
    assert state.failure is not None
    assert state.failure["type"] == "tether.errors.ContractViolation"
    assert "its approval was refused by alice: not ours" in state.failure["message"]
    assert "'to-domain'" in state.failure["message"]
    assert flow.called() == ["pay bob@example.com 120"]  # the email never went out
    shown = flow.cli("show", rid).stdout
    assert "ContractViolation" in shown
    assert "4 send_email approval: refuse by alice (not ours)" in shown


def test_refused_arguments_never_reach_the_tool_and_replay_refuses_again(flow: Flow) -> None:
    started = flow.start({"to": "bob@example.com", "amount": 900}, "bob@example.com")
    rid = started["id"]
    assert started["status"] == "failed"
    assert flow.called() == []
    shown = flow.cli("show", rid).stdout
    assert "tether.errors.ContractViolation" in shown
    assert "2 pay args: refuse; max-amount (amount <= 500): breach, amount=900" in shown
    assert flow.types(rid)[-3:] == ["tool.proposed", "tool.verdict", "run.failed"]

    # a process whose rule would allow it retries the run: the recorded verdict stands
    again = flow.cli("retry", rid, "--here", TETHER_TEST_MAX="1000")
    assert again.returncode != 0
    assert "rule 'max-amount' (amount <= 500) judging amount=900" in again.stderr
    assert flow.called() == []
    assert flow.state(rid).status == "failed"


def test_a_wrong_type_from_the_model_never_reaches_the_tool(flow: Flow) -> None:
    started = flow.start({"to": "bob@example.com", "amount": "120"}, "bob@example.com")
    assert started["status"] == "failed"
    assert flow.called() == []
    failure = flow.state(started["id"]).failure
    assert failure is not None
    assert "amount: expected int, got str '120'" in failure["message"]
