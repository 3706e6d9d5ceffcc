"""One SQLite file opened twice in one process keeps its locks.

On Linux, closing any descriptor of a file drops every POSIX lock the process holds on
it, those of its live SQLite connections included. Opening a second store of the same
file read its header with ``open()`` and closed it: the first store's locks were gone, so
another process closing its last connection believed itself the last one and deleted the
-wal and -shm under the live connections. Their commits went to a deleted WAL (lost:
another process saw none of them), and reads failed with "disk I/O error".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.integration

OTHER_PROCESS = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
print(conn.execute("SELECT count(*) FROM events").fetchone()[0])
conn.close()  # the last connection of this process: SQLite may delete -wal and -shm
"""


def _count_in_another_process(db: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", OTHER_PROCESS, db], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


def _agent(app: tether.App) -> tether.AgentDef:
    @app.agent
    def steps(run: tether.Run, n: int) -> int:
        return sum(int(run.step(f"s{i}", lambda i=i: i)) for i in range(n))

    return app.agents()["steps"]


def test_a_second_open_in_one_process_keeps_the_first_ones_locks(tmp_path: Path) -> None:
    db = str(tmp_path / "agent.db")
    first = tether.open(db)
    agent = _agent(first)
    first.run(agent.fn, 3)  # the first store's connections are open, in WAL mode
    second = tether.open(db)  # the trigger: a second store of the same file
    try:
        before = _count_in_another_process(db)
        assert os.path.exists(db + "-wal") and os.path.exists(db + "-shm")
        handle = first.run(agent.fn, 20)  # writes through the first store's connections
        assert handle.status == "completed"
        assert second.get(handle.id).status == "completed"  # and the second one reads them
        rid = second.run(_agent(second).fn, 5).id  # writes through the second one
        assert first.get(rid).output == 10
        after = _count_in_another_process(db)
    finally:
        second.close()
        first.close()
    assert after > before  # another process sees every commit of both stores
    with tether.open(db) as fresh:
        assert [r.status for r in fresh.runs()] == ["completed"] * 3
        assert fresh.get(handle.id).output == sum(range(20))
