"""`tether worker` on a SQLite database whose disk fills up mid-run, a real tmpfs.

On main the worker logged "heartbeat failed: cannot rollback - no transaction is active"
and exited ("unexpected OperationalError"), its run left `running` under a lease. Now:
it logs that the disk is full, stays up, and once there is room the run goes on from its
log under the same worker and completes; only the step whose record met the full disk
runs again.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tether

sys.path.insert(0, str(Path(__file__).parent.parent / "integration"))
from _disk import small_disk  # the helper lives with the integration tests

pytestmark = pytest.mark.acceptance

WORKLOAD = """
import os, tether
app = tether.open(os.environ["TETHER_TEST_DB"], lease_ttl=3)

def chunk(i):
    with open(os.environ["TETHER_TEST_STEPS"], "a") as f:
        f.write(f"start {i}\\n")
    return f"{i:04d}" * 16384  # 64 KB

@app.agent
def big(run):
    return len("".join(run.step(f"s{i}", chunk, i) for i in range(20)))
"""


def _wait(check: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_worker_survives_a_full_disk_and_finishes_the_run_once_there_is_room(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk", size="8m") as disk:
        if not disk.real:
            pytest.skip("needs a tmpfs of its own (root): a worker process fills a real disk")
        (tmp_path / "work.py").write_text(WORKLOAD)
        db, steps = str(disk.path / "w.db"), tmp_path / "steps.txt"
        env = {**os.environ, "TETHER_TEST_DB": db, "TETHER_TEST_STEPS": str(steps)}
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
        start = "import work; print(work.app.start(work.big))"
        rid = subprocess.run(
            [sys.executable, "-c", start], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        room = shutil.disk_usage(disk.path).free - 600 * 1024  # leave ~600 KB free
        with open(disk.path / "filler", "wb") as f:  # (the schema's size changes with it)
            f.write(b"\0" * room)
        log = tmp_path / "worker.log"
        with open(log, "w") as err_file:
            worker = subprocess.Popen(
                [sys.executable, "-m", "tether.cli", "--app", "work:app", "worker"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err_file,
                text=True,
            )
        try:

            def starts() -> int:
                return steps.read_text().count("start") if steps.exists() else 0

            # the disk fills after a few steps: the worker says so, and keeps trying
            assert _wait(lambda: "the disk is full" in log.read_text(), 60), log.read_text()
            assert starts() < 20  # it is stuck on the full disk, not done
            time.sleep(3)  # several heartbeats and claims meet the full disk meanwhile
            assert worker.poll() is None, log.read_text()[-2000:]
            os.remove(disk.path / "filler")
            with tether.open(db) as app:
                assert _wait(lambda: app.get(rid).status == "completed", 60), app.get(rid)
                assert app.get(rid).output == 20 * 64 * 1024
                assert "run.failed" not in [e.type for e in app.events(rid)]
            assert worker.poll() is None
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
        err = log.read_text()
        assert worker.returncode == 0, err[-2000:]
        assert "the disk is full" in err and "cannot rollback" not in err
        assert "unexpected" not in err
        started = steps.read_text().splitlines()
        # every step started once, but for the one (or two: the ones in flight as the disk
        # filled) whose record met the full disk
        repeats = {line for line in started if started.count(line) > 1}
        assert len(repeats) <= 2 and set(started) == {f"start {i}" for i in range(20)}
