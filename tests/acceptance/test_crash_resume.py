"""A run killed with SIGKILL in a child process resumes in another process."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.acceptance
AGENT = str(Path(__file__).with_name("_twenty.py"))


def _child(db: str, side: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, AGENT, db, side, *args], capture_output=True, text=True, timeout=60
    )


def _counts(side: Path) -> Counter[str]:
    return Counter(side.read_text().split())


def test_sigkill_in_step_12_resumes_from_another_process(tmp_path: Path) -> None:
    db, side = str(tmp_path / "agent.db"), tmp_path / "side.txt"
    first = _child(db, str(side), "start", "-", "--kill-in", "12")
    assert first.returncode == -signal.SIGKILL, first.stderr
    app = tether.open(db)
    (record,) = app.runs()
    state = app.get(record.id)
    assert state.status == "running" and state.committed == 11
    assert state.describe_position() == "step 12, 1–11 committed"
    assert state.describe_position(expected=20) == "step 12 of 20, 1–11 committed"
    app.close()

    second = _child(db, str(side), "resume", record.id)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == f"DONE {record.id} {sum(i * i for i in range(1, 21))}"
    counts = _counts(side)
    assert all(counts[f"step{i}"] == 1 for i in range(1, 12)), counts
    assert counts["step12"] == 2  # in flight at the kill: retried
    assert all(counts[f"step{i}"] == 1 for i in range(13, 21)), counts

    app = tether.open(db)
    events = app.events(record.id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    completed = Counter(e.payload()["pos"] for e in events if e.type == "step.completed")
    assert set(completed.values()) == {1} and len(completed) == 20
    assert app.get(record.id).executions == 2
    app.close()


def test_sigkill_between_two_steps_runs_only_the_last_returned_step_again(
    tmp_path: Path,
) -> None:
    """A step's record is written with the run's next append, before the next call runs
    (journal.record_success): killed after step 7 returned and before step 8 was called,
    the run has steps 1-6 committed, and the resume runs step 7 again, then goes on."""
    db, side = str(tmp_path / "agent.db"), tmp_path / "side.txt"
    first = _child(db, str(side), "start", "-", "--kill-after", "7")
    assert first.returncode == -signal.SIGKILL, first.stderr
    app = tether.open(db)
    (record,) = app.runs()
    assert app.get(record.id).committed == 6
    app.close()
    second = _child(db, str(side), "resume", record.id)
    assert second.returncode == 0, second.stderr
    counts = _counts(side)
    assert counts["step7"] == 2, counts
    assert all(counts[f"step{i}"] == 1 for i in (*range(1, 7), *range(8, 21))), counts


def test_two_processes_resuming_at_once_one_wins(tmp_path: Path) -> None:
    db, side = str(tmp_path / "agent.db"), tmp_path / "side.txt"
    first = _child(db, str(side), "start", "-", "--kill-in", "3")
    assert first.returncode == -signal.SIGKILL
    app = tether.open(db)
    rid = app.runs()[0].id
    app.close()
    procs = [
        subprocess.Popen(
            [sys.executable, AGENT, db, str(side), "resume", rid, "--hold", "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 3], outs
    loser = next(o for p, o in zip(procs, outs, strict=True) if p.returncode == 3)
    assert "CONFLICT" in loser[0] and rid in loser[0]
    counts = _counts(side)
    assert all(counts[f"step{i}"] == 1 for i in (1, 2, *range(4, 21))), counts
    app = tether.open(db)
    events = app.events(rid)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    positions = [e.payload()["pos"] for e in events if e.type == "step.completed"]
    assert sorted(positions) == list(range(1, 21))
    assert app.get(rid).status == "completed"
    app.close()
