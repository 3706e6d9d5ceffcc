"""SIGKILL in the middle of a fan-out (asyncio.gather, run.map on threads): some branches
completed, one in flight. Resumed in another process, on SQLite and on PostgreSQL, the
completed branches are reused (never executed again), the one in flight runs again, and
the run ends with the output of an uninterrupted run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.acceptance
AGENT = str(Path(__file__).with_name("_fanout.py"))
BOUND = 60.0  # seconds to wait for the child's branches (never reached when green)
UNINTERRUPTED = [1000, 0, 10, 20, 30, 2000]


def _completed(app: tether.App) -> tuple[str | None, set[str]]:
    runs = app.runs()
    if not runs:
        return None, set()
    return runs[0].id, {s.name for s in app.get(runs[0].id).steps if s.status == "completed"}


def _kill_when_committed(child: subprocess.Popen[str], url: str, names: set[str]) -> str:
    """SIGKILL ``child`` once its run has committed every step of ``names``; its run id."""
    with tether.open(url) as app:
        deadline = time.monotonic() + BOUND
        run_id, done = _completed(app)
        while not names <= done:
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, f"only {sorted(done)} completed"
            time.sleep(0.05)
            run_id, done = _completed(app)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=BOUND)
    assert run_id is not None
    return run_id


@pytest.mark.parametrize("mode", ["gather", "map"])
def test_sigkill_mid_fan_out_resumes_reusing_the_completed_branches(
    url: str, tmp_path: Path, mode: str
) -> None:
    ledger = tmp_path / "ledger.txt"
    command = [sys.executable, AGENT, url, str(ledger), mode]
    child = subprocess.Popen([*command, "start"], stdout=subprocess.PIPE, text=True)
    branches = {"b0", "b1", "b3"} if mode == "gather" else {"b[0]", "b[1]", "b[3]"}
    run_id = _kill_when_committed(child, url, {"before", *branches})
    assert child.returncode == -signal.SIGKILL

    with tether.open(url) as app:
        state = app.get(run_id)
        # branch 2 was in flight: no record (status "unrecorded"), while the later one has
        assert [s.status == "completed" for s in state.steps] == [True, True, True, False, True]
        assert state.committed == 3 and state.status == "running"
    shown = subprocess.run(
        [sys.executable, "-m", "tether.cli", "--db", url, "show", run_id],
        capture_output=True,
        text=True,
        timeout=BOUND,
    )
    assert ["4", "-", "-", "unrecorded"] in [row.split()[:4] for row in shown.stdout.splitlines()]

    resumed = subprocess.run(
        [*command, "resume", run_id], capture_output=True, text=True, timeout=BOUND
    )
    assert resumed.returncode == 0, resumed.stderr
    handle = json.loads(resumed.stdout)
    assert handle["output"] == UNINTERRUPTED
    assert sorted(pos for pos, _ in handle["reused"]) == [1, 2, 3, 5]
    assert sorted(pos for pos, _ in handle["executed"]) == [4, 6]
    starts = Counter(ledger.read_text().split("\n"))
    assert starts == Counter(
        {
            "start 100": 1,
            "start 0": 1,
            "start 1": 1,
            "start 3": 1,
            "start 2": 2,
            "start 200": 1,
            "": 1,
        }
    )
    with tether.open(url) as app:
        events = app.events(run_id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert app.get(run_id).status == "completed"
