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

# Step 2 on is held until the test creates the gate file: the test kills or stops the
# worker while step 2 is in progress, whatever the machine's speed (60 s bound).
WORKLOAD = """
import os, time, tether
ttl = float(os.environ.get("TETHER_TEST_TTL", "3"))
app = tether.open(os.environ["TETHER_TEST_DB"], lease_ttl=ttl)
gate = os.environ["TETHER_TEST_DB"] + ".gate"

def slow(i):
    with open(os.environ["TETHER_TEST_DB"] + ".steps", "a") as f:
        f.write(f"start {i}\\n")
    deadline = time.monotonic() + 60
    while i >= 2 and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
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


def _enqueue(tmp_path: Path, ttl: float = 3.0) -> tuple[str, dict[str, str], str, str]:
    """The workload's module in ``tmp_path`` and one run of it queued: (db, env, app
    reference, run id)."""
    (tmp_path / "work.py").write_text(WORKLOAD)
    db = str(tmp_path / "w.db")
    env = {**os.environ, "TETHER_TEST_DB": db, "TETHER_TEST_TTL": str(ttl)}
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
    return db, env, ref, setup.stdout.strip()


def _until_started(steps: Path, n: int) -> None:
    deadline = time.monotonic() + 20
    while (
        not steps.exists() or steps.read_text().count("start") < n
    ) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_sigterm_finishes_the_step_releases_the_lease_and_requeues(tmp_path: Path) -> None:
    db, env, ref, rid = _enqueue(tmp_path)
    worker = _cli(env, ref, "worker", "--concurrency", "2")
    steps = Path(db + ".steps")
    _until_started(steps, 3)

    listed = subprocess.run(
        [sys.executable, "-m", "tether.cli", "--db", db, "workers", "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert len(rows) == 1 and rows[0]["runs"] == [rid] and rows[0]["pid"] == worker.pid

    worker.send_signal(signal.SIGTERM)
    Path(db + ".gate").touch()  # step 2, in progress, may finish now
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
        suspended = [e.payload() for e in app.events(rid) if e.type == "run.suspended"]
        assert suspended == [{"reason": "its worker is stopping", "status": "queued"}]
    again = _cli(env, ref, "worker", "--until-idle")
    out, err = again.communicate(timeout=30)
    assert again.returncode == 0, err
    with tether.open(db) as app:
        assert app.get(rid).output == sum(range(8))
    assert steps.read_text().count("start") == 8  # no step ran twice


def test_a_worker_started_after_a_sigkill_takes_the_dead_workers_run_at_once(
    tmp_path: Path,
) -> None:
    """The lease would hold for a minute; a worker on the same host sees that its
    holder's process is gone before its first claim, so even `--until-idle` (which exits
    when nothing is claimable) resumes the run instead of leaving it to the expiry."""
    db, env, ref, rid = _enqueue(tmp_path, ttl=60.0)
    worker = _cli(env, ref, "worker")
    steps = Path(db + ".steps")
    _until_started(steps, 3)  # steps 0 and 1 are committed, step 2 is in progress
    worker.kill()
    worker.communicate(timeout=20)
    Path(db + ".gate").touch()
    with tether.open(db) as app:
        held = app.store.get_run(rid)
        assert held.status == "running" and held.lease_expires > app.clock.now() + 30

    again = _cli(env, ref, "worker", "--until-idle")
    out, err = again.communicate(timeout=30)
    assert again.returncode == 0, err
    assert "claimed 1, completed 1" in out
    with tether.open(db) as app:
        assert app.get(rid).output == sum(range(8))
        assert [w.pid for w in app.store.list_workers()] == []
    started = steps.read_text().split("\n")
    assert started.count("start 0") == started.count("start 1") == 1  # committed: not again
    assert {f"start {i}" for i in range(8)} <= set(started)
