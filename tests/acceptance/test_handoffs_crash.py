"""Handoffs across a crash (issue 31), on both databases: a worker SIGKILLed right after
a handoff's target was created, before the giver recorded its handoff step, never starts
the target twice: the worker that takes the giver over finds the target by its id, and
the giver completes with the target's output."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tether
from tether.engine.children import child_id

pytestmark = pytest.mark.acceptance
GIVER = str(Path(__file__).with_name("_handoff.py"))
WORKER = [sys.executable, "-m", "tether.cli", "--app", f"{GIVER}:app", "worker"]
LEASE_TTL = 2.0  # _handoff.py's


def _worker(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WORKER, "--queue", "default", "--queue", "desk", "--until-idle", "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_worker_killed_after_creating_the_target_starts_it_once(url: str, tmp_path: Path) -> None:
    env = {**os.environ, "TETHER_TEST_DB": url, "TETHER_TEST_DIR": str(tmp_path)}
    os.environ.update({"TETHER_TEST_DB": url, "TETHER_TEST_DIR": str(tmp_path)})
    sys.path.insert(0, str(Path(GIVER).parent))
    try:
        import _handoff
    finally:
        sys.path.pop(0)
    app = tether.open(url, lease_ttl=LEASE_TTL)
    try:
        chat = app.session("ticket-1")
        chat.add("user", "I was charged twice")
        rid = app.start_in(chat, _handoff.triage, queue="desk")
        target = child_id(rid, 2)

        killed = _worker({**env, "TETHER_KILL_AT_HANDOFF": "1"})
        assert killed.returncode == -9, killed.stderr
        assert (tmp_path / "killed").exists()
        # the target was committed, the giver's handoff step was not
        assert [s.kind for s in app.get(rid).steps] == ["var"]
        targets = [r.id for r in app.runs() if r.agent == "billing"]
        assert len(targets) == 1 and app.get(targets[0]).handed is not None

        time.sleep(LEASE_TTL + 0.5)  # the dead worker's lease on the giver runs out
        done = _worker(env)
        assert done.returncode == 0, done.stderr
        state = app.get(rid)
        assert state.status == "completed", state
        assert state.output == "refund for A-17 after 1 messages"
        assert [s.kind for s in state.steps] == ["var", "handoff", "join"]
        assert [r.id for r in app.runs() if r.agent == "billing"] == targets  # started once
        assert targets == [target] and state.steps[1].output["run"] == target
        assert [e.type for e in app.events(target)].count("run.created") == 1
        lines = (tmp_path / "ledger.txt").read_text().split()
        assert lines == [target, "work"]  # the target's step ran once
    finally:
        app.close()
