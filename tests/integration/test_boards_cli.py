"""`tether board [NAME [KEY]]`: the boards, a board's keys with their versions and
writers, a key's every change, the board at a time, a tenant's boards alone."""

from __future__ import annotations

import json

import pytest

import tether
from tether.cli.main import main
from tether.model.clock import FakeClock

pytestmark = pytest.mark.integration
T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def _fill(db_path: str) -> str:
    clock = FakeClock(T0)
    with tether.open(db_path, clock=clock) as app:

        @app.agent
        def triage(run: tether.Run) -> int:
            return int(run.board("incident-42").set("owner", "agent", expected_version=1))

        board = app.board("incident-42", by="alice")
        board.set("owner", "alice")
        board.set("severity", 2)
        clock.advance(3600)
        run_id = app.run(triage).id
        app.for_tenant("acme").board("private").set("k", "acme's")
    return run_id


def test_board_lists_shows_a_board_and_a_key(
    db_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = _fill(db_path)
    assert main(["--db", db_path, "board"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["BOARD", "TENANT", "KEYS", "UPDATED"]
    assert [line.split()[:3] for line in out[1:]] == [
        ["incident-42", "-", "2"],
        ["private", "acme", "1"],
    ]
    assert main(["--db", db_path, "board", "incident-42"]) == 0
    out = capsys.readouterr().out
    assert f"agent  triage  {run_id}@1" in out and "severity        1  2      alice" in out
    assert main(["--db", db_path, "board", "incident-42", "owner", "--json"]) == 0
    changes = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(c["version"], c["value"], c["by"], c["run_id"]) for c in changes] == [
        (1, "alice", "alice", None),
        (2, "agent", "triage", run_id),
    ]


def test_board_at_a_time_and_a_tenants_boards(
    db_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _fill(db_path)
    assert (
        main(["--db", db_path, "board", "incident-42", "--at", "2027-01-15T08:30", "--json"]) == 0
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["key"], r["value"]) for r in rows] == [("owner", "alice"), ("severity", 2)]
    assert main(["--db", db_path, "board", "incident-42", "owner", "--at", str(T0 - 1)]) == 0
    assert "was not written by then" in capsys.readouterr().out
    assert main(["--db", db_path, "--tenant", "acme", "board"]) == 0
    out = capsys.readouterr().out
    assert "private" in out and "incident-42" not in out
    assert main(["--db", db_path, "--tenant", "globex", "board", "private"]) == 0
    assert "board 'private' has no keys" in capsys.readouterr().out
    with pytest.raises(SystemExit) as usage:
        main(["--db", db_path, "board", "x", "--at", "yesterday"])
    assert usage.value.code == 2
    assert "a time: seconds since the epoch or ISO 8601" in capsys.readouterr().err
