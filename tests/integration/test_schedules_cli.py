"""`tether schedules` and `tether schedule pause|resume|delete NAME`: listed, paused,
resumed, deleted; refused with --tenant; an unknown name says which there are."""

from __future__ import annotations

import json

import pytest

import tether
from tether.cli.main import main

pytestmark = pytest.mark.integration


def _declare(db_path: str) -> None:
    with tether.open(db_path) as app:

        @app.agent
        def report(run: tether.Run) -> None:
            return None

        app.schedule(report, cron="*/5 * * * *", name="report")
        app.schedule(report, every="30s", name="poll", queue="inbox", catch_up=True)


def test_list_pause_resume_delete(db_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    _declare(db_path)
    assert main(["--db", db_path, "schedules"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "AGENT", "WHEN", "QUEUE", "STATE", "NEXT", "LAST"]
    assert lines[1].split()[:4] == ["poll", "report", "30.0s", "inbox"]
    assert "*/5 * * * *  default  active" in lines[2]
    assert main(["--db", db_path, "schedule", "pause", "report"]) == 0
    assert main(["--db", db_path, "schedule", "pause", "report"]) == 0
    out = capsys.readouterr().out
    assert "schedule 'report' paused" in out and "was paused already" in out
    assert main(["--db", db_path, "schedules", "--json"]) == 0
    rows = {r["name"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["report"]["paused"] and not rows["poll"]["paused"] and rows["poll"]["catch_up"]
    assert main(["--db", db_path, "schedule", "resume", "report"]) == 0
    assert main(["--db", db_path, "schedule", "delete", "poll"]) == 0
    out = capsys.readouterr().out
    assert "schedule 'report' resumed" in out and "schedule 'poll' deleted" in out
    with tether.open(db_path) as app:
        assert [(s.name, s.paused) for s in app.schedules()] == [("report", False)]


def test_refusals(db_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    _declare(db_path)
    assert main(["--db", db_path, "schedule", "pause", "nope"]) == 1
    assert "no schedule 'nope' (the schedules: poll, report)" in capsys.readouterr().err
    assert main(["--db", db_path, "--tenant", "acme", "schedules"]) == 2
    assert "spans every tenant" in capsys.readouterr().err
