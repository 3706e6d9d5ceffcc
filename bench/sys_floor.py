"""The floor: stdlib sqlite3, one JSON-encoded ~1 KB INSERT + COMMIT per step (WAL).

This is the least a durable step log can do: encode the result, insert one
row, commit. A run also inserts a run row at start and updates it at the end,
as every durable system must. No replay: W3 does not apply.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from typing import Any

from common import body

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, status TEXT NOT NULL, output TEXT);
CREATE TABLE IF NOT EXISTS steps (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run_id, seq)
);
"""


class FloorSession:
    """Raw sqlite3 at the same durability as tether (``normal`` or ``full``)."""

    def __init__(self, db: str, durability: str) -> None:
        sync = "FULL" if durability == "full" else "NORMAL"
        self.conn = sqlite3.connect(db, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {sync}")
        self.conn.executescript(_SCHEMA)

    def _commit(self, sql: str, params: tuple[Any, ...]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(sql, params)
        self.conn.execute("COMMIT")

    def run(self, steps: int) -> int:
        run_id = uuid.uuid4().hex
        self._commit("INSERT INTO runs (id, status) VALUES (?, 'running')", (run_id,))
        total = 0
        for k in range(1, steps + 1):
            out = body(k)
            self._commit("INSERT INTO steps VALUES (?, ?, ?)", (run_id, k, json.dumps(out)))
            total += out["step"]
        self._commit(
            "UPDATE runs SET status = 'completed', output = ? WHERE id = ?",
            (json.dumps(total), run_id),
        )
        return total

    def start_w3(self, steps: int) -> int:
        raise NotImplementedError("the floor has no replay")

    def recover_w3(self) -> int:
        raise NotImplementedError("the floor has no replay")

    def settings(self) -> dict[str, Any]:
        return {
            "journal_mode": self.conn.execute("PRAGMA journal_mode").fetchone()[0],
            "synchronous": {1: "NORMAL", 2: "FULL"}[
                self.conn.execute("PRAGMA synchronous").fetchone()[0]
            ],
        }

    def close(self) -> None:
        self.conn.close()


def open_session(db: str, durability: str) -> FloorSession:
    return FloorSession(db, durability)
