"""`--log-format json` / $TETHER_LOG_FORMAT: a real worker's log lines are one JSON object
each, naming the worker, and the run and step a line was logged from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.acceptance

WORKLOAD = """
import logging, os, sys, tether
app = tether.open(os.environ["TETHER_TEST_DB"])

def charge(n):
    loaded = "prometheus_client" in sys.modules  # no --metrics-port: never imported
    logging.getLogger("work.billing").warning("charging %s \\"units\\" (metrics %s)", n, loaded)
    return n

@app.agent
def billed(run, n):
    return run.step("charge", charge, n)
"""


def _start(tmp_path: Path, env: dict[str, str]) -> str:
    (tmp_path / "work.py").write_text(WORKLOAD)
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); import work; "
            "print(work.app.start(work.billed, 3))",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return made.stdout.strip()


@pytest.mark.parametrize("how", ["flag", "env"])
def test_worker_log_lines_are_json_objects(tmp_path: Path, how: str) -> None:
    env = {**os.environ, "TETHER_TEST_DB": str(tmp_path / "t.db")}
    env.pop("TETHER_LOG_FORMAT", None)
    run_id = _start(tmp_path, env)
    flag = ["--log-format", "json"] if how == "flag" else []
    if how == "env":
        env["TETHER_LOG_FORMAT"] = "json"
    app_ref = f"{tmp_path / 'work.py'}:app"
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", *flag, "--app", app_ref, "worker", "--until-idle"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]  # every line parses
    assert lines, "the worker logged nothing"
    assert all({"time", "level", "logger", "message", "worker"} <= set(x) for x in lines)
    worker_ids = {x["worker"] for x in lines}
    assert len(worker_ids) == 1 and worker_ids.pop() in done.stdout
    charged = [x for x in lines if x["logger"] == "work.billing"]
    said = 'charging 3 "units" (metrics False)'
    assert charged == [charged[0] | {"level": "warning", "message": said, "run_id": run_id}]
    assert charged[0]["step"] == "charge"
    assert charged[0]["time"].endswith("Z")


def test_text_stays_the_default_and_a_bad_format_is_a_usage_error(tmp_path: Path) -> None:
    env = {**os.environ, "TETHER_TEST_DB": str(tmp_path / "t.db")}
    env.pop("TETHER_LOG_FORMAT", None)
    _start(tmp_path, env)
    cmd = [sys.executable, "-m", "tether.cli", "--app", f"{tmp_path / 'work.py'}:app"]
    done = subprocess.run(
        [*cmd, "worker", "--until-idle"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    billing = [line for line in done.stderr.splitlines() if "work.billing" in line]
    assert len(billing) == 1 and not billing[0].startswith("{")
    bad = subprocess.run(
        [*cmd, "runs"],
        env={**env, "TETHER_LOG_FORMAT": "yaml"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2
    assert "TETHER_LOG_FORMAT must be text or json, not 'yaml'" in bad.stderr
