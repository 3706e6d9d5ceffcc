"""A production failure becomes a regression test in one command: `tether export RUN
--as-test PATH` writes a pytest file that fails on the code that failed and passes once
it is fixed, run by a real pytest with no model (the model's reply is gone) and no
production database (the agent's module opens an empty one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.acceptance
TIMEOUT = 120  # seconds for one command (never reached when green)

AGENT = """
import json, os, tether

app = tether.open(os.environ["TETHER_TEST_DB"])
REPLY = os.path.join(os.path.dirname(__file__), "model_reply.json")


def model(ticket):
    with open(REPLY) as f:  # the model: its reply is on disk only while production runs
        return json.load(f)


@app.agent
def triage(run, ticket):
    verdict = run.llm("classify", model, ticket)
    return #RETURN#
"""
FAILING = AGENT.replace("#RETURN#", 'verdict["priority"]')  # the model left it out once
FIXED = AGENT.replace("#RETURN#", 'verdict.get("priority", "normal")')


def _pytest(test: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # the written test needs no pytest plugin: not loading the installed ones saves ~15 s
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(test), "-q", "-p", "no:cacheprovider"],
        env={**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        cwd=test.parent,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_a_failed_run_exported_as_a_test_fails_on_the_old_code_and_passes_on_the_fix(
    url: str, tmp_path: Path
) -> None:
    module = tmp_path / "triage.py"
    module.write_text(FAILING)
    (tmp_path / "model_reply.json").write_text('{"label": "bug"}')
    env = {
        **os.environ,
        "TETHER_TEST_DB": url,
        "PYTHONPATH": str(tmp_path),
        "PYTHONDONTWRITEBYTECODE": "1",  # the fix is read from its source
    }
    produced = subprocess.run(
        [
            sys.executable,
            "-c",
            "import tether, triage\n"
            "try:\n    triage.app.run(triage.triage, 'it crashes')\n"
            "except tether.RunFailed as e:\n    print(e.run_id)\n",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    rid = produced.stdout.strip()
    assert rid, produced.stderr
    test = tmp_path / "tests" / "test_triage_regression.py"
    test.parent.mkdir()
    command = ["export", rid, "--as-test", str(test)]
    exported = subprocess.run(
        [sys.executable, "-m", "tether.cli", "--app", f"{module}:app", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert exported.returncode == 0, exported.stderr
    assert test.exists() and rid in test.read_text()

    # no model from here on, and a database with nothing in it
    (tmp_path / "model_reply.json").unlink()
    offline = {**env, "TETHER_TEST_DB": str(tmp_path / "empty.db")}
    old = _pytest(test, offline)
    assert old.returncode == 1, old.stdout + old.stderr
    assert "would fail: KeyError" in old.stdout and "1 failed" in old.stdout

    module.write_text(FIXED)
    fixed = _pytest(test, offline)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "1 passed" in fixed.stdout
