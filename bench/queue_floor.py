"""The floor of ``bench/queues.py``: the durable writes of a run and nothing else.

A floor run is what ``sys_floor.py`` does for one run: insert a run row, insert
each step's JSON-encoded result (``common.body``), mark the run completed —
one commit each (7 for a run of 5 steps). There is no queue: each worker
process gets its share of the runs up front and splits it among its threads,
which write on their own connections as fast as the database commits. So the
floor is the rate at which the same processes and threads could commit the
runs' rows: the database's limit for this shape of work.

PostgreSQL: psycopg autocommit connections, prepared statements. SQLite: WAL,
``synchronous=NORMAL``, ``BEGIN IMMEDIATE`` with a 10 s busy timeout (as tether).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from typing import Any

from common import body

_TABLES = (
    "CREATE TABLE IF NOT EXISTS {runs} (id TEXT PRIMARY KEY, status TEXT NOT NULL, output TEXT)",
    "CREATE TABLE IF NOT EXISTS {steps} (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
    "data TEXT NOT NULL, PRIMARY KEY (run_id, seq))",
)


def tables(p: dict[str, Any]) -> dict[str, str]:
    schema = p.get("schema")
    if schema:
        return {"runs": f'"{schema}".floor_runs', "steps": f'"{schema}".floor_steps'}
    return {"runs": "floor_runs", "steps": "floor_steps"}


class Writer:
    """One thread's connection, committing one statement at a time."""

    def __init__(self, p: dict[str, Any]) -> None:
        self.sqlite = p.get("schema") is None
        t = tables(p)
        if self.sqlite:
            self.conn: Any = sqlite3.connect(
                p["url"], isolation_level=None, timeout=10.0, check_same_thread=False
            )
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            mark = "?"
        else:
            import psycopg

            self.conn = psycopg.connect(p["url"], autocommit=True, prepare_threshold=0)
            mark = "%s"
        self.insert_run = f"INSERT INTO {t['runs']} (id, status) VALUES ({mark}, 'running')"
        self.insert_step = f"INSERT INTO {t['steps']} VALUES ({mark}, {mark}, {mark})"
        self.complete = (
            f"UPDATE {t['runs']} SET status = 'completed', output = {mark} WHERE id = {mark}"
        )

    def commit(self, statement: str, params: tuple[Any, ...]) -> None:
        if self.sqlite:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute(statement, params)
            self.conn.execute("COMMIT")
        else:
            self.conn.execute(statement, params)

    def run(self, steps: int) -> int:
        run_id = uuid.uuid4().hex
        self.commit(self.insert_run, (run_id,))
        total = 0
        for k in range(1, steps + 1):
            out = body(k)
            self.commit(self.insert_step, (run_id, k, json.dumps(out)))
            total += out["step"]
        self.commit(self.complete, (json.dumps(total), run_id))
        return total


def enqueue(p: dict[str, Any]) -> None:
    """Nothing is queued: create the tables."""
    w = Writer(p)
    t = tables(p)
    if p.get("schema"):
        w.conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{p["schema"]}"')
    for statement in _TABLES:
        w.conn.execute(statement.format(**t))
    w.conn.close()


_WRITERS: list[Writer] = []


def prepare_worker(p: dict[str, Any]) -> None:
    _WRITERS.extend(Writer(p) for _ in range(p["concurrency"]))


def run_worker(p: dict[str, Any], stop: Any) -> dict[str, Any]:
    """Write this process's share of the runs on ``concurrency`` threads."""
    share = p["share"]
    counts = [share // len(_WRITERS) + (i < share % len(_WRITERS)) for i in range(len(_WRITERS))]
    spans: list[tuple[float, float]] = []
    errors: list[BaseException] = []

    def write(w: Writer, n: int) -> None:
        first = time.time()
        try:
            for _ in range(n):
                w.run(p["steps"])
        except BaseException as e:  # reported by the main thread
            errors.append(e)
        spans.append((first, time.time()))
        w.conn.close()

    threads = [threading.Thread(target=write, args=wc) for wc in zip(_WRITERS, counts, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return {"first": min(s[0] for s in spans), "last": max(s[1] for s in spans)}
