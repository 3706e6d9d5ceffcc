"""A budget end to end, each actor its own process: a worker runs the agent until it
reaches its limit (the run waits, holding no process), an operator raises the budget with
``tether budget --token`` (the token's identity is recorded), and another worker goes on
from the call the run stopped before: no model call is made twice."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.acceptance
AGENT = str(Path(__file__).with_name("_budgets.py"))


def test_a_worker_stops_at_the_budget_and_another_goes_on_after_a_raise(tmp_path: Path) -> None:
    db = str(tmp_path / "budget.db")
    env = {**os.environ, "TETHER_TEST_DB": db}
    env.pop("TETHER_TOKEN", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run(sys.executable, "-m", "tether.cli", "--app", f"{AGENT}:app", *args)

    def calls() -> list[str]:
        return Path(db + ".calls").read_text().splitlines()

    started = run(sys.executable, AGENT, "start")
    assert started.returncode == 0, started.stderr
    rid = started.stdout.strip()

    first = cli("worker", "--until-idle", "--quiet")
    assert first.returncode == 0, first.stderr
    assert "waiting 1" in first.stdout and calls() == ["a", "b"]
    with tether.open(db) as app:
        record = app.record(rid)
        assert record.status == "waiting" and record.lease_owner is None
        assert app.get(rid).budget["exceeded"]["limit"] == "model_calls"
        _, token = app.tokens.create("ops-oncall", "operator")
        _, viewer = app.tokens.create("watcher", "viewer")

    refused = cli("--token", viewer, "budget", rid, "--add", "model_calls=2")
    assert refused.returncode != 0 and "watcher (viewer) may not raise a budget" in refused.stderr
    raised = cli("--token", token, "budget", rid, "--add", "model_calls=2", "--reason", "ok")
    assert raised.returncode == 0, raised.stderr
    assert "a worker of queue 'default' resumes it" in raised.stdout

    second = cli("worker", "--until-idle", "--quiet")
    assert second.returncode == 0, second.stderr
    assert "completed 1" in second.stdout
    assert calls() == ["a", "b", "c", "d"]  # nothing called twice, across processes
    with tether.open(db) as app:
        state = app.get(rid)
        assert state.status == "completed" and state.output == 4
        assert state.usage.cost == pytest.approx(0.008)
        raise_event = next(e for e in app.events(rid) if e.type == "budget.raised")
        assert raise_event.actor == "ops-oncall"
        assert raise_event.payload() == {
            "add": {"max_model_calls": 2},
            "by": "ops-oncall",
            "reason": "ok",
        }
