"""A real worker process: SIGTERM stops it gracefully; `tether workers` shows it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.acceptance

WORKLOAD = """
import os, time, tether
app = tether.open(os.environ["TETHER_TEST_DB"], lease_ttl=3.0)

def slow(i):
    with open(os.environ["TETHER_TEST_DB"] + ".steps", "a") as f:
        f.write(f"start {i}\\n")
    time.sleep(0.4)
    return i

@app.agent
def long(run):
    return sum(run.step(f"s{i}", slow, i) for i in range(8))
"""


def _cli(env: dict[str, str], app_ref: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tether.cli", "--app", app_ref, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_finishes_the_step_releases_the_lease_and_requeues(tmp_path: Path) -> None:
    (tmp_path / "work.py").write_text(WORKLOAD)
    db = str(tmp_path / "w.db")
    env = {**os.environ, "TETHER_TEST_DB": db}
    ref = f"{tmp_path / 'work.py'}:app"
    setup = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); import work; "
            "print(work.app.start(work.long))",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rid = setup.stdout.strip()
    worker = _cli(env, ref, "worker", "--concurrency", "2")
    steps = Path(db + ".steps")
    deadline = time.monotonic() + 20
    while (
        not steps.exists() or steps.read_text().count("start") < 3
    ) and time.monotonic() < deadline:
        time.sleep(0.05)

    listed = subprocess.run(
        [sys.executable, "-m", "tether.cli", "--db", db, "workers", "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert len(rows) == 1 and rows[0]["runs"] == [rid] and rows[0]["pid"] == worker.pid

    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=20)
    assert worker.returncode == 0, err
    assert "stopped" in out and "interrupted 1" in out
    with tether.open(db) as app:
        record = app.store.get_run(rid)
        state = app.get(rid)
        started = steps.read_text().count("start")
        assert record.status == "queued" and record.lease_owner is None
        assert state.committed == started  # the step in progress finished and was recorded
        assert app.store.list_workers() == []
    again = _cli(env, ref, "worker", "--until-idle")
    out, err = again.communicate(timeout=30)
    assert again.returncode == 0, err
    with tether.open(db) as app:
        assert app.get(rid).output == sum(range(8))
    assert steps.read_text().count("start") == 8  # no step ran twice
