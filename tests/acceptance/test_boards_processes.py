"""Boards across real processes, on SQLite and PostgreSQL: eight processes incrementing
one key with compare-and-set lose no increment and leave a history without a gap; a
process killed after a run's board write committed, before its step was recorded,
leaves one change, which the resumed run finds instead of writing it again."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.acceptance
CHILD = str(Path(__file__).with_name("_boards.py"))
PROCESSES, TOTAL = 8, 1000


def test_eight_processes_increment_one_key_a_thousand_times(url: str) -> None:
    tether.open(url).close()  # migrated once, before the processes race
    start = time.time() + 2.0
    each = TOTAL // PROCESSES
    children = [
        subprocess.Popen(
            [sys.executable, CHILD, "incr", url, str(each), str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    conflicts = 0
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        conflicts += int(out)
    app = tether.open(url)
    board = app.board("counter")
    assert board.get("n").value == TOTAL and board.get("n").version == TOTAL
    history = board.history("n")
    assert [e.version for e in history] == list(range(1, TOTAL + 1))
    assert all(e.value == e.version for e in history)  # each change added one to the last
    assert len({e.by for e in history}) == PROCESSES
    print(f"{conflicts} conflicts retried")
    app.close()


def test_a_write_committed_before_a_crash_is_not_applied_again(url: str) -> None:
    first = subprocess.run(
        [sys.executable, CHILD, "crash", url], capture_output=True, text=True, timeout=120
    )
    assert first.returncode == -signal.SIGKILL, first.stderr
    app = tether.open(url)
    (record,) = app.runs()
    (change,) = app.board("incident").history("owner")
    assert change.run_id == record.id and change.value == record.id
    assert all(s.name != "board incident set owner" for s in app.get(record.id).steps)
    app.close()

    second = subprocess.run(
        [sys.executable, CHILD, "resume", url, record.id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert second.returncode == 0, second.stderr
    # the resumed step found the change its position made: no VersionConflict, version 1
    assert second.stdout.strip() == str([1, "went on", record.id])
    app = tether.open(url)
    assert [e.version for e in app.board("incident").history("owner")] == [1]
    app.close()
