"""The `tether` command line, run as a real process on real databases."""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.acceptance

COMMANDS = ["demo", "runs", "show", "log", "resume", "retry"]

# An agent module of a user's project: its second step fails while FAIL_FLAG exists; its
# third is interrupted (KeyboardInterrupt, a pause) while STOP_FLAG exists.
AGENTS = textwrap.dedent(
    """
    import os
    import tether

    app = tether.open(os.environ["AGENTS_DB"])

    def add_one(n):
        return n + 1

    def double(n):
        if os.path.exists(os.environ["FAIL_FLAG"]):
            raise RuntimeError("double is broken today")
        return n * 2

    def finish(n):
        if os.path.exists(os.environ["STOP_FLAG"]):
            raise KeyboardInterrupt
        return {"result": n}

    @app.agent
    def arith(run, n):
        a = run.step("add_one", add_one, n)
        b = run.step("double", double, a)
        return run.step("finish", finish, b)
    """
)


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


def python(code: str, *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("tether: error: ")
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A database holding one completed demo run (killed once, resumed): (db, run id)."""
    folder = tmp_path_factory.mktemp("demo")
    proc = tether_cli("demo", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    db = folder / "tether-demo.db"
    with tether.open(str(db)) as app:
        (record,) = app.runs()
    return db, record.id


@pytest.fixture
def project(tmp_path: Path) -> dict[str, str]:
    """A project folder with an agents module; the environment it needs."""
    (tmp_path / "agents.py").write_text(AGENTS)
    return {
        "AGENTS_DB": str(tmp_path / "agents.db"),
        "FAIL_FLAG": str(tmp_path / "fail"),
        "STOP_FLAG": str(tmp_path / "stop"),
    }


def start_arith(tmp_path: Path, env: dict[str, str]) -> str:
    """Run `arith` in its own process (it fails or pauses per the flags); return the run id."""
    code = (
        "import agents, tether\n"
        "try:\n    agents.app.run(agents.arith, 1)\n"
        "except (tether.RunFailed, KeyboardInterrupt):\n    pass\n"
        "print(agents.app.runs()[0].id)\n"
    )
    proc = python(code, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


# -- help ---------------------------------------------------------------------------


def test_tether_help_lists_every_command(tmp_path: Path) -> None:
    proc = tether_cli("--help", cwd=tmp_path)
    assert proc.returncode == 0
    for command in COMMANDS:
        assert f"\n    {command} " in proc.stdout
    assert "--db" in proc.stdout and "--app" in proc.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_text(command: str, tmp_path: Path) -> None:
    proc = tether_cli(command, "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: tether {command}")
    description = proc.stdout.split("\n\n")[1]
    assert len(description.split()) >= 4  # a sentence, not an empty line


def test_no_command_or_a_bad_option_is_a_usage_error(tmp_path: Path) -> None:
    assert tether_cli(cwd=tmp_path).returncode == 2
    proc = tether_cli("runs", "--status", "sleepy", cwd=tmp_path)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


# -- runs, show, log on a real run --------------------------------------------------------


def test_runs_lists_the_run_with_its_position(demo: tuple[Path, str], tmp_path: Path) -> None:
    db, run_id = demo
    proc = tether_cli("--db", str(db), "runs", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    header, row = proc.stdout.strip().splitlines()
    assert header.split() == ["ID", "AGENT", "STATUS", "POSITION", "UPDATED"]
    assert row.startswith(run_id)
    assert "investigate" in row and "completed, 10 of 10 committed" in row

    listed = json.loads(tether_cli("--db", str(db), "runs", "--json", cwd=tmp_path).stdout)
    assert [(r["id"], r["status"], r["committed"]) for r in listed] == [(run_id, "completed", 10)]
    none = tether_cli("--db", str(db), "runs", "--status", "failed", cwd=tmp_path)
    assert none.returncode == 0 and none.stdout.strip() == "no runs match"
    # TETHER_DB is the default database; global options may also follow the command
    env = {"TETHER_DB": str(db)}
    assert run_id in tether_cli("runs", "--agent", "investigate", cwd=tmp_path, env=env).stdout
    assert run_id in tether_cli("runs", "--db", str(db), cwd=tmp_path).stdout


def test_show_prints_status_usage_vars_and_every_step(
    demo: tuple[Path, str], tmp_path: Path
) -> None:
    db, run_id = demo
    proc = tether_cli("--db", str(db), "show", run_id, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    fields = dict(line.split(None, 1) for line in proc.stdout.split("\n\n")[0].splitlines())
    assert fields["run"] == run_id and fields["status"] == "completed"
    assert fields["position"] == "completed, 10 of 10 committed"
    assert fields["usage"].startswith("3 model calls")
    assert fields["var"] == "remediation = rollback deploy #4812"
    steps = proc.stdout.split("\n\n")[1].splitlines()
    assert steps[0].split() == [
        "POS",
        "KIND",
        "NAME",
        "STATUS",
        "ATTEMPTS",
        "MS",
        "IN",
        "OUT",
        "COST",
    ]
    assert [r.split()[:5] for r in steps[1:5]] == [
        ["1", "llm", "plan", "completed", "1"],
        ["2", "step", "query_metrics", "completed", "1"],
        ["3", "step", "search_logs", "completed", "2"],
        ["4", "step", "check_deployments", "completed", "1"],
    ]
    assert len(steps) == 11

    data = json.loads(tether_cli("--db", str(db), "show", run_id, "--json", cwd=tmp_path).stdout)
    assert data["status"] == "completed" and data["executions"] == 3
    assert [s["name"] for s in data["steps"]][-1] == "summarise"
    assert data["steps"][2]["errors"][0]["type"] == "ConnectionError"
    assert data["usage"]["calls"] == 3
    assert data["usage"]["input_tokens"] == sum(s["input_tokens"] or 0 for s in data["steps"])


def test_log_prints_every_event(demo: tuple[Path, str], tmp_path: Path) -> None:
    db, run_id = demo
    with tether.open(str(db)) as app:
        events = app.events(run_id)
    proc = tether_cli("--db", str(db), "log", run_id, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout.strip().splitlines()[1:]
    assert [(int(r.split()[0]), r.split()[2]) for r in rows] == [(e.seq, e.type) for e in events]
    assert "3 search_logs attempt 1: ConnectionError" in proc.stdout

    lines = tether_cli("--db", str(db), "log", run_id, "--json", "--after", "5", cwd=tmp_path)
    parsed = [json.loads(line) for line in lines.stdout.splitlines()]
    assert [p["seq"] for p in parsed] == list(range(6, len(events) + 1))
    assert parsed[-1]["type"] == "run.completed"
    assert parsed[-1]["data"]["output"]["action"] == "rollback deploy #4812"


# -- resume and retry ---------------------------------------------------------------------


def test_resume_a_run_killed_by_sigkill_in_another_process(tmp_path: Path) -> None:
    db = tmp_path / "killed.db"
    child = subprocess.run(
        [sys.executable, "-m", "tether.demo", "child", str(db), "--crash-in", "check_deployments"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    listed = tether_cli("--db", str(db), "runs", cwd=elsewhere)
    assert "running (stalled)" in listed.stdout and "step 4, 1–3 committed" in listed.stdout
    run_id = listed.stdout.splitlines()[1].split()[0]

    refused = tether_cli("--db", str(db), "resume", run_id, cwd=elsewhere)
    assert_one_line_error(refused, "may not import", "--code tether.demo")  # the db's say-so
    proc = tether_cli("--db", str(db), "--code", "tether.demo", "resume", run_id, cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert f"run {run_id}: waiting, step 8, 1–7 committed" in proc.stdout
    assert "(not executed again): 1 plan, 2 query_metrics, 3 search_logs\n" in proc.stdout
    assert (
        "executed now: 4 check_deployments, 5 diagnose, 6 remediation, 7 vars.remediation\n"
        in proc.stdout
    )
    assert '"kind": "approval", "name": "rollback"' in proc.stdout
    approve = ["approve", run_id, "rollback", "--by", "oncall"]
    demo_code = {"TETHER_CODE": "tether.demo"}
    assert tether_cli("--db", str(db), *approve, cwd=elsewhere).returncode == 0
    proc = tether_cli("resume", run_id, cwd=elsewhere, env={"TETHER_DB": str(db), **demo_code})
    assert proc.returncode == 0, proc.stderr
    assert f"run {run_id}: completed, 10 of 10 committed" in proc.stdout
    assert "executed now: 9 rollback_deploy, 10 summarise\n" in proc.stdout
    with tether.open(str(db)) as app:
        events = app.events(run_id)
        assert app.get(run_id).status == "completed"
    completed = collections.Counter(
        e.payload()["pos"] for e in events if e.type == "step.completed"
    )
    assert set(completed.values()) == {1}

    again = tether_cli("--db", str(db), "resume", run_id, cwd=elsewhere)
    assert again.returncode == 0 and "already completed; nothing to resume" in again.stdout


def test_show_a_failed_run_then_retry_it(tmp_path: Path, project: dict[str, str]) -> None:
    Path(project["FAIL_FLAG"]).touch()
    run_id = start_arith(tmp_path, project)
    db = project["AGENTS_DB"]

    shown = tether_cli("--db", db, "show", run_id, cwd=tmp_path)
    assert "failure    RuntimeError: double is broken today" in shown.stdout
    assert "in step 'double' (position 2)" in shown.stdout
    assert "Traceback" not in shown.stdout
    traced = tether_cli("--db", db, "show", run_id, "--traceback", cwd=tmp_path)
    assert "Traceback (most recent call last)" in traced.stdout
    assert 'raise RuntimeError("double is broken today")' in traced.stdout
    assert (
        json.loads(tether_cli("--db", db, "show", run_id, "--json", cwd=tmp_path).stdout)[
            "failure"
        ]["step"]
        == "double"
    )

    resumed = tether_cli("--db", db, "resume", run_id, cwd=tmp_path, env=project)
    assert_one_line_error(resumed, f"tether retry {run_id}")
    code = {**project, "TETHER_CODE": "agents"}  # the module the run names may be imported
    retried = tether_cli("--db", db, "retry", run_id, cwd=tmp_path, env=code)
    assert_one_line_error(retried, f"run {run_id} failed in step 'double'", "broken today")

    os.remove(project["FAIL_FLAG"])
    proc = tether_cli("--db", db, "--code", "agents", "retry", run_id, cwd=tmp_path, env=project)
    assert proc.returncode == 0, proc.stderr
    assert "(not executed again): 1 add_one\n" in proc.stdout
    assert "executed now: 2 double, 3 finish\n" in proc.stdout
    assert 'output: {"result": 4}' in proc.stdout


def test_resume_with_app_option(tmp_path: Path, project: dict[str, str]) -> None:
    Path(project["STOP_FLAG"]).touch()
    run_id = start_arith(tmp_path, project)
    os.remove(project["STOP_FLAG"])
    moved = tmp_path / "src"
    moved.mkdir()
    shutil.move(tmp_path / "agents.py", moved / "agents.py")  # not where the run recorded it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    # by file path; without --db, the database is the one the App opened
    proc = tether_cli(
        "--app", f"{moved}/agents.py:app", "resume", run_id, cwd=elsewhere, env=project
    )
    assert proc.returncode == 0, proc.stderr
    assert "(not executed again): 1 add_one, 2 double\n" in proc.stdout
    assert "executed now: 3 finish\n" in proc.stdout

    again = tether_cli(
        "--db",
        project["AGENTS_DB"],
        "--app",
        "agents:app",
        "resume",
        run_id,
        cwd=moved,
        env=project,
    )  # by module name, from the project folder
    assert again.returncode == 0 and "already completed" in again.stdout


# -- clear errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["show", "log", "resume", "retry"])
def test_an_unknown_run_is_one_line_of_error(
    command: str, demo: tuple[Path, str], tmp_path: Path
) -> None:
    proc = tether_cli("--db", str(demo[0]), command, "no-such-run", cwd=tmp_path)
    assert_one_line_error(proc, "no run 'no-such-run'")


def test_a_text_file_is_not_a_tether_database(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    assert_one_line_error(
        tether_cli("--db", str(notes), "runs", cwd=tmp_path), "not a tether database"
    )
    assert notes.read_text() == "hello\n"


def test_a_directory_is_not_a_tether_database(tmp_path: Path) -> None:
    assert_one_line_error(tether_cli("--db", str(tmp_path), "runs", cwd=tmp_path), "is a directory")


def test_a_missing_database_is_not_created(tmp_path: Path) -> None:
    assert_one_line_error(tether_cli("runs", cwd=tmp_path), "no tether database at tether.db")
    assert not (tmp_path / "tether.db").exists()


def test_an_agent_module_that_cannot_be_imported(tmp_path: Path, project: dict[str, str]) -> None:
    Path(project["STOP_FLAG"]).touch()
    run_id = start_arith(tmp_path, project)
    os.remove(tmp_path / "agents.py")  # the code the run recorded is gone
    db = project["AGENTS_DB"]

    proc = tether_cli("--db", db, "resume", run_id, cwd=tmp_path)
    assert_one_line_error(proc, "--app")
    assert "'agents'" in proc.stderr or "'arith'" in proc.stderr  # names the module or agent
    with tether.open(db) as app:
        assert app.get(run_id).status == "queued"  # untouched: still resumable

    missing = tether_cli("--db", db, "--app", "no_such_module:app", "resume", run_id, cwd=tmp_path)
    assert_one_line_error(missing, "cannot import no_such_module", "ModuleNotFoundError")
    (tmp_path / "broken.py").write_text("import tether\nraise RuntimeError('boom at import')\n")
    broken = tether_cli("--db", db, "--app", "broken.py:app", "runs", cwd=tmp_path)
    assert_one_line_error(broken, "RuntimeError: boom at import")
    (tmp_path / "empty.py").write_text("x = 1\n")
    assert_one_line_error(
        tether_cli("--db", db, "--app", "empty:app", "runs", cwd=tmp_path), "no App named 'app'"
    )
    bad = tether_cli("--db", db, "--app", "no-colon", "runs", cwd=tmp_path)
    assert bad.returncode == 2 and "pkg.module:app" in bad.stderr
