"""`tether demo` end to end: a real child process killed by SIGKILL, then a resume."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.acceptance

BEFORE_THE_KILL = ["model:plan", "query_metrics", "search_logs", "search_logs", "check_deployments"]
AFTER_THE_KILL = ["check_deployments", "model:diagnose", "rollback_deploy", "model:summarise"]


def tether_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def read_trace(path: Path) -> dict[str, list[str]]:
    """Executed calls per process id, in order."""
    by_pid: dict[str, list[str]] = collections.defaultdict(list)
    for line in path.read_text().splitlines():
        pid, name = line.split(" ", 1)
        by_pid[pid].append(name)
    return dict(by_pid)


def test_demo_kills_its_child_and_resumes_without_running_a_committed_step_twice(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.txt"
    started = time.monotonic()
    proc = tether_cli("demo", cwd=tmp_path, env={"TETHER_DEMO_TRACE": str(trace)})
    elapsed = time.monotonic() - started

    assert proc.returncode == 0, proc.stderr
    # Real time, on purpose: the demo is a process a person watches. It takes ~2 s; the
    # bound stays under the 30 s lease it would wait out if the resume did not take over
    # its SIGKILLed child's lease at once, and tolerates a loaded machine.
    assert elapsed < 25
    out = proc.stdout
    assert "died: killed by signal 9 (SIGKILL)" in out
    assert "running, step 4, 1–3 committed" in out
    assert (
        "reused (from the journal, not run again): 1 plan, 2 query_metrics, 3 search_logs\n" in out
    )
    assert (
        "ran after the crash: 4 check_deployments, 5 diagnose, 6 remediation, "
        "7 vars.remediation\n" in out
    )
    assert "4. It waits for a human: approval 'rollback' by oncall" in out
    assert "approve" in out and "--by oncall" in out
    assert "ran after the approval: 9 rollback_deploy, 10 summarise\n" in out
    assert "The run completed" in out
    assert "tether --db tether-demo.db show " in out and "tether --db tether-demo.db log " in out
    assert len(out.splitlines()) <= 35

    # The trace, written by the tools as they execute: the child ran 1–3 (search_logs twice:
    # its first attempt fails) and died in check_deployments; this process ran 4 onwards only
    # (the rollback once, after the approval).
    runs = read_trace(trace)
    assert list(runs.values()) == [BEFORE_THE_KILL, AFTER_THE_KILL]

    with tether.open(str(tmp_path / "tether-demo.db")) as app:
        (record,) = app.runs()
        state = app.get(record.id)
        events = app.events(record.id)
    assert state.status == "completed"
    assert state.executions == 3
    completed = collections.Counter(
        e.payload()["pos"] for e in events if e.type == "step.completed"
    )
    assert completed == {pos: 1 for pos in (1, 2, 3, 4, 5, 9, 10)}
    approval = state.steps[7]
    assert approval.kind == "approve" and approval.output["by"] == "oncall"
    assert [s.attempts for s in state.steps[:4]] == [1, 1, 2, 1]
    assert state.usage.calls == 3 and state.usage.input_tokens > 0 and state.usage.cost > 0
    assert state.vars == {"remediation": "rollback deploy #4812"}
    assert state.output["action"] == "rollback deploy #4812"


def test_demo_overwrites_its_database_each_time(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    for _ in range(2):
        assert tether_cli("--db", str(db), "demo", cwd=tmp_path).returncode == 0
    with tether.open(str(db)) as app:
        assert len(app.runs()) == 1
    assert not (tmp_path / "tether-demo.db").exists()  # --db was honoured


def test_demo_refuses_to_overwrite_a_file_that_is_not_its_database(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    proc = tether_cli("--db", str(notes), "demo", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("tether: error:") and "not a tether database" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert notes.read_text() == "my notes\n"


def test_demo_refuses_a_database_with_runs_of_other_agents(tmp_path: Path) -> None:
    db = tmp_path / "real.db"
    with tether.open(str(db)) as app:

        @app.agent
        def triage(run: tether.Run) -> int:
            return 1

        app.run(triage)
    proc = tether_cli("--db", str(db), "demo", cwd=tmp_path)
    assert proc.returncode == 1
    assert "holds runs of other agents (triage)" in proc.stderr
    with tether.open(str(db)) as app:
        assert [r.agent for r in app.runs()] == ["triage"]
