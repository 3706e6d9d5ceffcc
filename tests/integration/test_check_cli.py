"""`tether check` in process: what it lists (the runs that would block or fail; --all:
every run), for the runs named or of a status, and its exit status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.cli.main import main

pytestmark = pytest.mark.integration

MODULE = """
import tether

app = tether.open({db!r})


@app.agent
def job(run, n):
    x = run.step({step!r}, lambda: n)
    run.wait("go")
    return x
"""


def _module(tmp_path: Path, name: str, step: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(MODULE.format(db=str(tmp_path / "check.db"), step=step))
    return f"{path}:app"


def _runs(tmp_path: Path) -> tuple[str, str, str]:
    import tether

    with tether.open(str(tmp_path / "check.db")) as app:
        app.agent(name="job")(lambda run, n: (run.step("fetch", lambda: n), run.wait("go"))[0])
        waiting = app.run("job", 1).id
        queued = app.start("job", 2)
        done = app.run("job", 3).id
        app.signal(done, "go")
        assert app.resume(done).status == "completed"
    return waiting, queued, done


def test_check_lists_what_would_block_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    waiting, queued, done = _runs(tmp_path)
    same = _module(tmp_path, "same", "fetch")
    assert main(["--app", same, "check"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "2 runs: 0 would finish, 2 would continue, 0 would block, 0 would fail, "
        "0 would need a patch"
    ]
    assert main(["--app", same, "check", "--all", "--status", "completed"]) == 0
    out = capsys.readouterr().out
    assert done in out and "finish" in out and waiting not in out

    renamed = _module(tmp_path, "renamed", "load")
    assert main(["--app", renamed, "check"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["RUN", "AGENT", "STATUS", "WOULD", "AT", "RECORDED", "FOUND"]
    assert lines[1].split() == [
        waiting,
        "job",
        "waiting",
        "BLOCK",
        "1",
        "step",
        "fetch",
        "step",
        "load",
    ]
    assert len(lines) == 3 and lines[2].startswith("2 runs: 0 would finish, 1 would continue, 1")
    # the queued run has recorded nothing: the new code is fine for it
    assert main(["--app", renamed, "check", queued]) == 0
    assert "continue" in capsys.readouterr().out
    assert main(["--app", renamed, "check", "no-such-run"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "NotFound" in out


def test_runs_counts_and_filters_by_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import tether

    db = str(tmp_path / "versions.db")
    with tether.open(db) as app:
        for version in ("1", "2"):
            app.agent(name="job", version=version)(lambda run, n: run.wait("go"))
            app.run("job", 1)
            app.start("job", 2)
        app.agent(name="mail")(lambda run: None)
        app.run("mail")
    assert main(["--db", db, "runs", "--count"]) == 0
    lines = [ln.split() for ln in capsys.readouterr().out.splitlines()]
    assert lines == [
        ["AGENT", "VERSION", "STATUS", "RUNS"],
        ["job", "1", "queued", "1"],
        ["job", "1", "waiting", "1"],
        ["job", "2", "queued", "1"],
        ["job", "2", "waiting", "1"],
        ["mail", "-", "completed", "1"],
        ["5", "runs"],
    ]
    assert main(["--db", db, "runs", "--version", "2", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert sorted(r["status"] for r in listed) == ["queued", "waiting"]
    assert main(["--db", db, "runs", "--count", "--version", "1", "--status", "queued"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 run"
    assert main(["--db", db, "runs", "--count", "--agent", "nobody"]) == 0
    assert capsys.readouterr().out.strip() == "no runs"


def test_a_run_of_a_version_the_new_code_drops_would_fail_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import tether

    db = str(tmp_path / "dropped.db")
    with tether.open(db) as app:
        app.agent(name="job", version="1")(lambda run: run.wait("go"))
        old = app.run("job").id
    module = tmp_path / "v2only.py"
    module.write_text(
        f"import tether\napp = tether.open({db!r})\n"
        "app.agent(name='job', version='2')(lambda run: run.wait('go'))\n"
    )
    assert main(["--app", f"{module}:app", "check"]) == 1
    out = capsys.readouterr().out.splitlines()
    row = out[1].split(maxsplit=4)
    assert row[:4] == [old, "job", "waiting", "FAIL"]
    assert row[4].startswith("NotFound: agent 'job' version '1' is not served by this app")
    assert main(["--db", db, "runs"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:3] == [old, "job@1", "waiting"]


def test_workers_show_what_they_serve_and_count_names_the_versions_none_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import tether
    from tether.store import Serving, WorkerRecord

    db = str(tmp_path / "serves.db")
    with tether.open(db) as app:
        app.agent(name="job", version="1")(lambda run: run.wait("go"))
        app.run("job")
        app.agent(name="job", version="2")(lambda run: run.wait("go"))
        app.run("job")
        now = app.clock.now()
        only2 = Serving(("job",), (("job", "2"),))  # a worker id that names no process
        worker = WorkerRecord("w-v2", "elsewhere", 1, ["default"], 4, now, now, serves=only2)
        app.store.register_worker(worker, now=now)
    assert main(["--db", db, "workers"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["worker", "queues", "serves"]
    assert "job@2 + other agents" in lines[1]
    assert main(["--db", db, "runs", "--count"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("no live worker serves job@1 (1 run in flight): they wait")
    assert not any("job@2" in line for line in out)
