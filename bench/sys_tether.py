"""tether: the benchmark agent as an ordinary function, one ``run.step`` per step.

Only the public API is used: ``tether.open``, ``@app.agent``, ``app.run``,
``app.runs`` and ``app.resume``. The recovering process of W3 finds the
interrupted run the way an operator would (``app.runs(status="running")``)
and resumes it; the lease of the killed process is taken over because its
owner is a dead local process.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

import tether
from common import body


class TetherSession:
    """tether on one SQLite file; ``durability`` is ``normal``, ``full`` or ``shipped``."""

    def __init__(self, db: str, durability: str) -> None:
        self.db = db
        self.durability = "normal" if durability == "shipped" else durability
        if durability == "shipped":
            self.app = tether.open(db)
        else:
            self.app = tether.open(db, durability=durability)

        @self.app.agent(name="bench")
        def agent(run: tether.Run, steps: int) -> int:
            total = 0
            for k in range(1, steps + 1):
                total += run.step("work", body, k)["step"]
            return total

        self.agent = agent

    def run(self, steps: int) -> int:
        handle = self.app.run(self.agent, steps)
        return int(handle.output)

    def start_w3(self, steps: int) -> int:
        return self.run(steps)

    def recover_w3(self) -> int:
        pending = self.app.runs(status="running", agent="bench")
        if len(pending) != 1:
            raise RuntimeError(f"expected one interrupted run, found {len(pending)}")
        handle = self.app.resume(pending[0].id)
        if handle.status != "completed":
            raise RuntimeError(f"resume ended {handle.status}")
        return int(handle.output)

    def settings(self) -> dict[str, Any]:
        return {"journal_mode": "wal", "synchronous": self.durability.upper()}

    def storage(self, steps: int) -> dict[str, float]:
        """Events and bytes stored per step, over every run in the file."""
        with closing(sqlite3.connect(self.db)) as conn:
            n_ev, ev_bytes = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(data AS BLOB))), 0) FROM events"
            ).fetchone()
            n_snap, snap_bytes = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(data AS BLOB))), 0) FROM snapshots"
            ).fetchone()
        return {
            "events_per_step": n_ev / steps,
            "event_bytes_per_step": ev_bytes / steps,
            "snapshots": n_snap,
            "snapshot_bytes_per_step": snap_bytes / steps,
        }

    def close(self) -> None:
        self.app.close()


def open_session(db: str, durability: str) -> TetherSession:
    return TetherSession(db, durability)
