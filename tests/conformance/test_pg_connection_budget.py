"""A worker process's connections stay within its stated budget (issue 34;
docs/postgres.md, "Connections per process"): the pool's ``max_size``, one per
group-commit lane and the listener, counted by the server (``pg_stat_activity``, by the
worker's ``application_name``) while it executes runs on many threads."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import psycopg
from _conformance import PG_URL, Backend

import tether

APP = """
import tether

app = tether.open({url!r}, max_size=3, lanes=2)


@app.agent
def work(run, n: int) -> int:
    total = 0
    for i in range(5):
        total += run.step(f"s{{i}}", lambda i=i: n + i)
    return total
"""


def _connections(name: str) -> int:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_busy_worker_stays_within_its_connection_budget(
    pg_backend: Backend, tmp_path: Path
) -> None:
    name = f"tether_budget_{secrets.token_hex(4)}"
    url = f"{pg_backend.url}&application_name={name}"
    module = tmp_path / "budget_app.py"
    module.write_text(APP.format(url=url))
    with tether.open(url, max_size=3, lanes=2) as app:
        budget = app.store.connection_budget  # type: ignore[attr-defined]
        assert budget == {"pool": 3, "lanes": 2, "listener": 1, "total": 6}

        @app.agent
        def work(run: tether.Run, n: int) -> int:  # the module's, by name
            raise AssertionError("executed by the worker process only")

        ids = [app.start(work, n) for n in range(120)]
    env = {k: v for k, v in os.environ.items() if k != "TETHER_DB"}
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tether.cli",
            "--app",
            f"{module}:app",
            "worker",
            "--until-idle",
            "--concurrency",
            "16",
            "--poll",
            "0.05",
            "--quiet",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = []
    while worker.poll() is None:  # the server's count, as often as it can be read
        seen.append(_connections(name))
    _out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    with tether.open(pg_backend.url) as app:
        assert {app.get(i).status for i in ids} == {"completed"}
    assert seen and max(seen) >= 2, seen  # it was observed at work
    assert max(seen) <= budget["total"], (max(seen), budget)
    print(f"connections seen: max {max(seen)} of budget {budget['total']}, {len(seen)} samples")


def test_tether_workers_states_the_budget(pg_backend: Backend) -> None:
    tether.open(pg_backend.url).close()
    env = {k: v for k, v in os.environ.items() if k != "TETHER_DB"}
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", "--db", pg_backend.url, "workers"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "as configured here: at most 13 (pool 10 + lanes 2 + listener 1)" in done.stdout
