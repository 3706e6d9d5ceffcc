"""End to end: a model's bad answer at step 7, fixed by forking after step 6 with a new
task variable. The fork reuses steps 1–6 (a side file proves they do not run again),
runs 7–10, and ``tether diff`` (the real CLI, in a subprocess) shows the branches differ."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tether

pytestmark = pytest.mark.integration

# The scripted model: its answer depends on the style the prompt asks for.
ANSWERS = {"draft": "BAD: lorem ipsum", "careful": "GOOD: p99 rose after deploy 42"}


def _cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TETHER_DEBUG": "1"},
    )


def _app(db: Path, trace: Path) -> tuple[tether.App, Any]:
    app = tether.open(str(db), snapshot_every=4)

    def tool(position: int, name: str, value: Any) -> Any:
        with trace.open("a") as f:
            f.write(f"{position} {name}\n")
        return value

    def model(prompt: str, style: str) -> dict[str, Any]:
        tool(7, "write", None)
        return {"text": ANSWERS[style], "usage": {"input_tokens": len(prompt), "output_tokens": 9}}

    @app.agent
    def report(run: tether.Run, incident: str) -> dict[str, Any]:
        config = run.step("load", tool, 1, "load", {"style": "draft"})  # 1
        run.vars["style"] = config["style"]  # 2: a task variable
        metrics = run.step("metrics", tool, 3, "metrics", {"p99": 2.1})  # 3
        logs = run.step("logs", tool, 4, "logs", ["timeout x3"])  # 4
        deploys = run.step("deploys", tool, 5, "deploys", [42])  # 5
        notes = run.step("notes", tool, 6, "notes", f"{incident}: {metrics} {logs} {deploys}")
        answer = run.llm("write", model, f"summarise {notes}", style=run.vars["style"])  # 7
        ok = run.step("check", tool, 8, "check", answer["text"].startswith("GOOD"))  # 8
        text = run.step("format", tool, 9, "format", answer["text"].upper())  # 9
        return run.step("publish", tool, 10, "publish", {"ok": ok, "text": text})  # 10

    return app, report


def _executed(trace: Path) -> list[int]:
    return [int(line.split()[0]) for line in trace.read_text().splitlines()]


def test_fork_after_step_6_with_a_new_variable_fixes_step_7(tmp_path: Path) -> None:
    db, trace = tmp_path / "agent.db", tmp_path / "trace.txt"
    app, report = _app(db, trace)
    parent = app.run(report, "INC-7")
    assert parent.output == {"ok": False, "text": "BAD: LOREM IPSUM"}
    assert _executed(trace) == [1, 3, 4, 5, 6, 7, 8, 9, 10]

    forked = _cli(db, "fork", parent.id, "--step", "6", "--var", "style=careful")
    assert forked.returncode == 0, forked.stderr
    child = forked.stdout.strip()
    assert "positions 1–6 are reused" in forked.stderr

    trace.write_text("")
    handle = app.resume(child)
    assert _executed(trace) == [7, 8, 9, 10]  # 1–6 came from the journal
    assert [p for p, _ in handle.reused] == [1, 2, 3, 4, 5, 6]
    assert [p for p, _ in handle.executed] == [7, 8, 9, 10]
    assert handle.output == {"ok": True, "text": "GOOD: P99 ROSE AFTER DEPLOY 42"}

    shown = _cli(db, "diff", parent.id, child)
    assert shown.returncode == 0, shown.stderr
    assert "~ vars.style: draft -> careful" in shown.stdout
    assert "~ steps[7].output.text: BAD: lorem ipsum -> GOOD: p99 rose after deploy 42" in (
        shown.stdout
    )
    assert "steps[6]" not in shown.stdout  # steps 1–6 are the same on both branches

    as_json = json.loads(_cli(db, "diff", parent.id, child, "--json").stdout)
    changed = {c["path"] for c in as_json["changed"]}
    assert {"vars.style", "steps[7].output.text", "output.ok", "steps[8].output"} <= changed
    assert not as_json["same"]
    assert _cli(db, "diff", parent.id, child, "--exit-code").returncode == 1

    same = _cli(db, "diff", f"{parent.id}:6", f"{child}:6", "--exit-code")
    assert same.returncode == 0 and "same state" in same.stdout, same.stdout + same.stderr
    app.close()


def test_the_cli_refuses_an_ambiguous_step_number(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    with tether.open(str(db)) as app:

        @app.agent
        def numbered(run: tether.Run) -> None:
            run.step("a", lambda: 1)
            run.step("1", lambda: 2)  # a step whose name is a number

        run_id = app.run(numbered).id
    out = _cli(db, "state", run_id, "--step", "1")
    assert out.returncode == 1
    assert "--step 1 is ambiguous: position 1 is 'a' (a#1 names it)" in out.stderr
    assert "1#1 names the first" in out.stderr
    assert _cli(db, "state", run_id, "--step", "1#1", "--json").returncode == 0
