"""A one-second schedule fired by three worker processes, one of them SIGKILLed and
replaced every two seconds, on SQLite and PostgreSQL: every tick of the window has
exactly one run, and every run completes.

The issue asks for 30 s; CI runs TETHER_SCHEDULE_SECONDS (default 10) to keep its time
down: `TETHER_SCHEDULE_SECONDS=30 pytest tests/acceptance/test_schedules_workers.py`
runs the issue's length.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.acceptance
CHILD = str(Path(__file__).with_name("_schedules.py"))
SECONDS = float(os.environ.get("TETHER_SCHEDULE_SECONDS", "10"))
WORKERS, KILL_EVERY = 3, 2.0


def _worker(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, CHILD, "worker", url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_three_workers_with_kills_fire_one_run_per_tick(url: str) -> None:
    app = tether.open(url)  # migrated before the workers race
    began = time.time()
    workers = [_worker(url) for _ in range(WORKERS)]
    deadline = time.monotonic() + 120  # a loaded machine starts Python slowly
    while not app.schedules() and time.monotonic() < deadline:
        time.sleep(0.1)  # the window starts when the first worker declared the schedule
    kills, next_kill = 0, time.monotonic() + KILL_EVERY
    until = time.monotonic() + SECONDS
    while time.monotonic() < until:
        time.sleep(0.1)
        if time.monotonic() >= next_kill:
            victim = workers.pop(random.randrange(len(workers)))
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            workers.append(_worker(url))
            kills, next_kill = kills + 1, next_kill + KILL_EVERY
    assert app.pause_schedule("ticker")
    paused = time.time()
    for w in workers:
        w.send_signal(signal.SIGTERM)
    for w in workers:
        _, err = w.communicate(timeout=60)
        assert w.returncode in (0, -signal.SIGTERM), err  # -15: before its handler was set
    drain = subprocess.run(
        [sys.executable, CHILD, "drain", url], capture_output=True, text=True, timeout=120
    )
    assert drain.returncode == 0, drain.stderr

    runs = app.runs(agent="tick", limit=10_000)
    ticks = sorted(int(r.id.split("@")[1]) for r in runs)
    assert len(ticks) == len(set(ticks))
    assert ticks == list(range(ticks[0], ticks[-1] + 1000, 1000))  # none missed, none twice
    (schedule,) = app.schedules()  # created by the first worker to start
    assert began <= schedule.created_at and ticks[0] / 1000 <= schedule.created_at + 2
    assert ticks[-1] / 1000 >= paused - 3 and kills >= SECONDS // KILL_EVERY - 1
    assert {r.status for r in runs} == {"completed"}
    assert all(app.get(r.id).output == f"tick {r.id}" for r in runs)
    assert schedule.paused and schedule.last_tick == ticks[-1] / 1000
    app.close()
