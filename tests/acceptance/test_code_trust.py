"""The database never decides what code runs (issue 25, point 8).

A run's row and its tool intents record where their code lives. A crafted run (one
imported JSONL file) names a module, and a file, that write a marker when executed:
no worker and no CLI command executes either; each refusal says what to pass. The
operator's own allow-list (``--code``, ``$TETHER_CODE``, ``code=``) keeps the app-less
``@tether.agent`` workflow working.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import tether

pytestmark = pytest.mark.acceptance

HOSTILE = "import pathlib\npathlib.Path({marker!r}).write_text('executed')\n"
KEY = "r1:1:refund:" + "0" * 16


def cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("TETHER_DB", "TETHER_CODE")}
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", *args],
        cwd=cwd,  # on sys.path: a module named by a run would be importable from here
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode != 0, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _line(value: dict[str, Any]) -> str:
    return json.dumps(value) + "\n"


def crafted(run_id: str, status: str, code: dict[str, str], tool_code: dict[str, str]) -> str:
    """A tether-run file: a run whose agent and whose one completed refund tool are
    located by ``code`` and ``tool_code``; it failed (``status`` failed) or was stopped."""
    events: list[dict[str, Any]] = [
        {
            "type": "run.created",
            "data": {"agent": "ghost", "version": None, "input": {"args": [], "kwargs": {}}}
            | {"code": code, "queue": "default"},
        },
        {"type": "run.started", "data": {"by": "somewhere", "epoch": 1}},
        {
            "type": "tool.intent",
            "data": {
                "pos": 1,
                "name": "refund",
                "kind": "tool",
                "key": KEY.replace("r1", run_id),
                "attempt": 1,
                "digest": "0" * 64,
                "risk": "write",
                "input": {"args": [], "kwargs": {}},
                "code": tool_code,
            },
        },
        {
            "type": "step.completed",
            "data": {"pos": 1, "name": "refund", "kind": "tool", "attempt": 1, "output": 1}
            | {"digest": "0" * 64, "duration": 0.001, "key": KEY.replace("r1", run_id)},
        },
    ]
    if status == "failed":
        error = {"type": "RuntimeError", "message": "boom", "step": None, "position": None}
        events.append({"type": "run.failed", "data": {"error": error}})
    row = {"id": run_id, "agent": "ghost", "version": None, "status": status, "code": code}
    row |= {"created_at": 1.7e9, "updated_at": 1.7e9, "queue": "default"}
    header = {"format": "tether-run", "version": 1, "events": len(events), "run": row}
    body = [{"seq": i, **e, "at": 1.7e9 + i, "actor": None} for i, e in enumerate(events, 1)]
    return "".join(_line(v) for v in [header, *body])


@pytest.fixture
def hostile(tmp_path: Path) -> dict[str, Any]:
    """A database holding three crafted runs, and the code they name (never to run)."""
    markers = {n: tmp_path / f"MARKER-{n}" for n in ("module", "file", "tool")}
    (tmp_path / "evil_agent.py").write_text(HOSTILE.format(marker=str(markers["module"])))
    (tmp_path / "evil_tool.py").write_text(HOSTILE.format(marker=str(markers["tool"])))
    payload = tmp_path / "payload.py"
    payload.write_text(HOSTILE.format(marker=str(markers["file"])))
    by_module = {"module": "evil_agent", "qualname": "ghost", "file": str(payload)}
    by_file = {"module": "not_installed_anywhere", "qualname": "ghost", "file": str(payload)}
    tool = {"module": "evil_tool", "qualname": "refund", "file": str(payload)}
    db = tmp_path / "runs.db"
    files = {
        "r1": crafted("r1", "queued", by_module, tool),
        "r2": crafted("r2", "queued", by_file, tool),
        "r3": crafted("r3", "failed", by_module, tool),
    }
    for run_id, text in files.items():
        (tmp_path / f"{run_id}.jsonl").write_text(text)
        proc = cli("--db", str(db), "import", f"{run_id}.jsonl", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    return {"db": str(db), "markers": markers, "cwd": tmp_path}


def assert_nothing_ran(hostile: dict[str, Any]) -> None:
    ran = [str(m) for m in hostile["markers"].values() if m.exists()]
    assert ran == [], f"a database made this process execute: {ran}"


@pytest.mark.parametrize(
    ("command", "run_id", "names"),
    [
        (["resume"], "r1", "evil_agent"),
        (["resume"], "r2", "not_installed_anywhere"),
        (["retry", "--here"], "r3", "evil_agent"),
        (["cancel", "--compensate"], "r1", "evil_tool"),
    ],
)
def test_the_cli_never_executes_what_a_run_names(
    hostile: dict[str, Any], command: list[str], run_id: str, names: str
) -> None:
    proc = cli("--db", hostile["db"], *command[:1], run_id, *command[1:], cwd=hostile["cwd"])
    one_line_error(proc, f"--code {names}", "--app")
    assert_nothing_ran(hostile)
    with tether.open(hostile["db"]) as app:
        assert app.store.get_run(run_id).status in ("queued", "failed")  # left as it was


def test_a_worker_never_executes_what_a_run_names(hostile: dict[str, Any]) -> None:
    cwd: Path = hostile["cwd"]
    (cwd / "myapp.py").write_text(
        f"import tether\napp = tether.open({hostile['db']!r})\n"
        "@app.agent\ndef other(run):\n    return 1\n"
    )
    proc = cli("--app", "myapp:app", "worker", "--until-idle", "--max-runs", "2", cwd=cwd)
    assert_nothing_ran(hostile)
    assert "--code evil_agent" in proc.stderr and "--code not_installed_anywhere" in proc.stderr
    with tether.open(hostile["db"]) as app:
        for run_id in ("r1", "r2"):  # given back to the queue, for a worker allowed to
            row = app.store.get_run(run_id)
            assert row.status == "queued" and row.lease_owner is None


def test_the_api_never_executes_what_a_run_names(hostile: dict[str, Any]) -> None:
    with tether.open(hostile["db"]) as app:
        for call in (
            lambda: app.resume("r1"),
            lambda: app.resume("r2"),
            lambda: app.cancel("r1", compensate=True),
        ):
            with pytest.raises(tether.NotFound, match=r"may not import.*code=\["):
                call()
    assert_nothing_ran(hostile)


AGENT_MODULE = textwrap.dedent(
    """
    import tether

    @tether.tool(risk="write")
    def note(text, *, idempotency_key):
        return text.upper()

    @tether.agent
    def hello(run, name):
        return run.tool(note, f"hello {name}")
    """
)


def test_a_module_the_operator_names_is_imported(tmp_path: Path) -> None:
    """The app-less ``@tether.agent`` workflow: a run queued from the project's code is
    resumed by `tether resume` once the operator names the module (and only then)."""
    (tmp_path / "greeter.py").write_text(AGENT_MODULE)
    db = str(tmp_path / "g.db")
    start = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import greeter, tether\nprint(tether.open({db!r}).start(greeter.hello, 'ann'))",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert start.returncode == 0, start.stderr
    run_id = start.stdout.strip()
    one_line_error(cli("--db", db, "resume", run_id, cwd=tmp_path), "--code greeter")
    done = cli("--db", db, "resume", run_id, cwd=tmp_path, env={"TETHER_CODE": "greeter"})
    assert done.returncode == 0, done.stderr
    assert "output: HELLO ANN" in done.stdout


def test_an_allow_list_names_modules_never_files(tmp_path: Path) -> None:
    for bad in (["evil.py"], ["../x"], ["a/b"], [""], "pkg mod"):
        with pytest.raises(ValueError, match="not a module name"):
            tether.open(str(tmp_path / "x.db"), code=bad)
    proc = cli("--code", "payload.py", "runs", cwd=tmp_path)
    assert proc.returncode == 2 and "not a module name" in proc.stderr
    proc = cli("runs", cwd=tmp_path, env={"TETHER_CODE": "/tmp/payload.py"})
    one_line_error(proc, "$TETHER_CODE", "not a module name")
