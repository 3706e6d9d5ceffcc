"""``tether gc`` on a ~1 GB SQLite database: time, bytes given back, and no orphans.

    python bench/gc_big.py                    # ~1 GB: 600 runs of 250 steps
    python bench/gc_big.py --runs 60          # ~100 MB, for a quick look
    python bench/gc_big.py --keep             # leave the database behind (prints its path)

Builds the database quickly: tether creates the schema, then the rows are bulk-inserted
with one ``executemany`` per batch of runs (``synchronous=OFF`` while loading: this is a
benchmark, not a store). Every run is a valid tether run: 250 ``step.completed`` events
with a ~2 KB output each, a snapshot of its folded state every 100 events (as tether's
Journal takes them) and a few effects rows. Half of the runs were last changed 60 days
ago, half today. Then ``app.gc(older_than="30d", status=["completed"])`` runs through the
App, as ``tether gc --older-than 30d --status completed`` would, and the script reports
the time of the deletes and of the VACUUM, the bytes before and after, and the rows left
behind for deleted runs in the events (keyed by the run's ``rk``) and in every table with
a ``run_id`` (it must be 0 everywhere but the audit log, which is kept on purpose).
Finally a kept run must still load exactly.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import tether
from tether.model import codec
from tether.model import events as ev
from tether.model.events import Event
from tether.model.state import fold, to_data

STEPS = 250
SNAPSHOT_EVERY = 100
DAY = 86400.0
TEXT = "The p99 latency rose after the 14:02 deploy; the inventory client retries on timeout. "
TEMPLATE_ID = "R" * 24  # replaced by each run's id in the template rows


def template(now: float) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """One run's events and snapshots (rows without run_id), built and folded for real."""
    payloads = [
        (
            ev.RUN_CREATED,
            {"agent": "bench", "version": None, "input": {"args": [], "kwargs": {}}, "code": {}},
        ),
        (ev.RUN_STARTED, {"by": "bench", "epoch": 1}),
        *(
            (
                ev.STEP_COMPLETED,
                {
                    "pos": p,
                    "name": f"step{p}",
                    "kind": "llm",
                    "attempt": 1,
                    "digest": "0" * 64,
                    "output": {"text": TEXT * 22, "n": p},
                    "started": now,
                    "duration": 0.5,
                },
            )
            for p in range(1, STEPS + 1)
        ),
        (ev.RUN_COMPLETED, {"output": {"steps": STEPS}}),
    ]
    events = [
        Event(TEMPLATE_ID, i, t, codec.encode(d), now, "bench")
        for i, (t, d) in enumerate(payloads, 1)
    ]
    snaps = [
        (seq, codec.encode(to_data(fold(events[:seq]))), now)
        for seq in range(SNAPSHOT_EVERY, len(events) + 1, SNAPSHOT_EVERY)
    ]
    return [(e.seq, e.type, e.data, e.at, e.actor) for e in events], snaps


def bulk_load(path: str, runs: int, now: float) -> list[str]:
    """Insert ``runs`` runs; return their ids (the first half 60 days old)."""
    events, snaps = template(now)
    ids = [f"{i:012x}{os.urandom(6).hex()}" for i in range(runs)]
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA synchronous = OFF")
        for start in range(0, runs, 50):
            conn.execute("BEGIN")
            for i in range(start, min(start + 50, runs)):
                _insert_run(conn, ids[i], now - (60 * DAY if i < runs // 2 else 0), events, snaps)
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return ids


def _insert_run(
    conn: sqlite3.Connection,
    run_id: str,
    at: float,
    events: list[tuple[Any, ...]],
    snaps: list[tuple[Any, ...]],
) -> None:
    rk = conn.execute(
        "INSERT INTO runs (id, agent, version, status, code, created_at, updated_at) "
        "VALUES (?, 'bench', NULL, 'completed', '{}', ?, ?)",
        (run_id, at, at),
    ).lastrowid  # rk, the run's compact key: an event's key is (rk << 32) | seq
    assert rk is not None
    conn.executemany(
        "INSERT INTO events (key, type, data, at, actor) VALUES (?, ?, ?, ?, ?)",
        (((rk << 32) | seq, *row) for seq, *row in events),
    )
    conn.executemany(
        "INSERT INTO snapshots (run_id, seq, data, at) VALUES (?, ?, ?, ?)",
        ((run_id, seq, data.replace(TEMPLATE_ID, run_id), t) for seq, data, t in snaps),
    )
    conn.executemany(
        "INSERT INTO effects (key, run_id, position, tool, status, result, created_at, "
        "updated_at) VALUES (?, ?, ?, 'send', 'completed', 'null', ?, ?)",
        ((f"{run_id}:{p}:send:h", run_id, p, at, at) for p in range(1, 4)),
    )


def file_bytes(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def orphans(path: str, deleted: set[str], rks: set[int]) -> dict[str, int]:
    """Rows of deleted runs left in every table with a run_id column, in runs, and in the
    events (keyed by the run's rk)."""
    out = {}
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TEMP TABLE gone (id TEXT PRIMARY KEY)")
        conn.executemany("INSERT INTO gone VALUES (?)", ((i,) for i in deleted))
        for table in _tables_with_run_id(conn):
            column = "id" if table == "runs" else "run_id"
            row = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {column} IN gone")
            out[table] = int(row.fetchone()[0])
        conn.execute("CREATE TEMP TABLE gone_rk (rk INTEGER PRIMARY KEY)")
        conn.executemany("INSERT INTO gone_rk VALUES (?)", ((rk,) for rk in rks))
        row = conn.execute("SELECT COUNT(*) FROM events WHERE (key >> 32) IN gone_rk")
        out["events"] = int(row.fetchone()[0])
    return out


def _tables_with_run_id(conn: sqlite3.Connection) -> Iterator[str]:
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        cols = {r[1] for r in conn.execute(f"PRAGMA table_info({name})")}
        if "run_id" in cols or name == "runs":
            yield name


def run_keys(path: str) -> dict[str, int]:
    """Each run's compact key (rk), which its events' keys start with."""
    with closing(sqlite3.connect(path)) as conn:
        return {run_id: rk for rk, run_id in conn.execute("SELECT rk, id FROM runs")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--dir", help="where to build the database (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="do not delete the database")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(dir=args.dir)
    path = os.path.join(folder, "big.db")
    now = time.time()
    tether.open(path).close()  # the schema, by tether's own migrations
    t0 = time.perf_counter()
    ids = bulk_load(path, args.runs, now)
    load_s = time.perf_counter() - t0
    before = file_bytes(path)
    print(
        f"built {path}: {args.runs:,} runs, {args.runs * (STEPS + 3):,} events, "
        f"{before / 1e6:,.0f} MB in {load_s:.1f} s",
        flush=True,
    )
    rks = run_keys(path)
    with tether.open(path) as app:
        t0 = time.perf_counter()
        result = app.gc(older_than="30d", status=["completed"], vacuum=False)
        delete_s = time.perf_counter() - t0
        middle = file_bytes(path)
        t0 = time.perf_counter()
        app.store.vacuum()
        vacuum_s = time.perf_counter() - t0
        after = file_bytes(path)
        kept = ids[-1]
        assert app.load(kept) == fold(app.store.read_events(kept)), "a kept run changed"
        left = len(app.runs(limit=10 * args.runs))
    gone = orphans(path, set(result.run_ids), {rks[i] for i in result.run_ids})
    print(
        f"gc --older-than 30d --status completed: deleted {result.deleted:,} runs "
        f"({len(result.run_ids):,} selected) in {delete_s:.1f} s; {left:,} runs kept"
    )
    print(
        f"size: {before / 1e6:,.1f} MB before, {middle / 1e6:,.1f} MB after the deletes "
        f"(free pages stay in the file), {after / 1e6:,.1f} MB after VACUUM "
        f"({vacuum_s:.1f} s): {(before - after) / 1e6:,.1f} MB freed "
        f"({(before - after) / before:.0%})"
    )
    print(f"rows of deleted runs left behind: {gone} (audit is kept on purpose)")
    assert all(n == 0 for t, n in gone.items() if t != "audit"), gone
    if args.keep:
        print(f"kept: {path}")
    else:
        for p in (path, path + "-wal", path + "-shm", path + "-lock"):
            if os.path.exists(p):
                os.remove(p)
        os.rmdir(folder)


if __name__ == "__main__":
    main()
