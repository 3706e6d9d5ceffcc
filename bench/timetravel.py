"""Time travel as a run grows: the cost of ``state(at=…)`` and of loading the head, and the
bytes stored per step, for runs of 1k, 10k and 100k events.

    python bench/timetravel.py                        # 1k, 10k, 100k events
    python bench/timetravel.py --sizes 1000 10000     # a quicker look

Each run is written the way the runtime writes it, only faster: ``step.completed``
events (a ~230-byte output each) appended through ``Store.append`` under the run's
lease, in batches of 100, with no snapshot (steps never pay for snapshots). Snapshots
are tether's read-side cache: ``App.load`` saves the state it computed whenever it
folded ``snapshot_every`` events or more. So every point is timed twice:

- cold: no snapshot at or before the point, so the read folds the log from seq 1 (and
  leaves a snapshot there);
- warm: read again, from that snapshot (what every later read of the point, and of
  any point a little after it, costs).

Plus ``near``: the state 100 events after a cached point (a snapshot and a short
fold), and the anchor, folding the whole log from nothing. Times are the best of
several reads (the machine is shared). Ratios are against the smallest run.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import tether
from tether.model import events as ev
from tether.model.clock import new_run_id
from tether.model.state import fold
from tether.store import NewRun, Transition

BATCH = 100
FIXED = 900  # a point every run has: reading it must cost the same in a run of any length
DIGEST = "0" * 64
TEXT = "The p99 latency rose after the 14:02 deploy; the inventory client retries on timeout. "


def output(k: int) -> dict[str, Any]:
    """One step's result: a small model-ish answer (~230 bytes of JSON)."""
    return {"id": f"msg_{k:06d}", "text": TEXT * 2, "score": 0.5, "tokens": 133}


def build(app: tether.App, n_events: int) -> str:
    """A completed run of exactly ``n_events`` events (all but 3 are ``step.completed``)."""
    now = app.clock.now()
    run_id = new_run_id(now)
    created = {"agent": "bench", "version": None, "input": {"args": [], "kwargs": {}}, "code": {}}
    first = [
        ev.new(ev.RUN_CREATED, created, now),
        ev.new(ev.RUN_STARTED, {"by": app.owner, "epoch": 1}, now, app.owner),
    ]
    lease = app.store.create_run(
        NewRun(run_id, "bench", None, "running"), first, lease_owner=app.owner, now=now, ttl=3600.0
    )
    assert lease is not None
    seq = len(first)
    while seq < n_events - 1:
        batch = [step_event(app, seq - 1 + i) for i in range(1, min(BATCH, n_events - 1 - seq) + 1)]
        seq = app.store.append(run_id, batch, expected_seq=seq, epoch=lease.epoch, now=now)
    done = ev.new(ev.RUN_COMPLETED, {"output": {"steps": n_events - 3}}, now, app.owner)
    app.store.append(
        run_id,
        [done],
        expected_seq=seq,
        epoch=lease.epoch,
        now=now,
        transition=Transition("completed", release=True),
    )
    return run_id


def step_event(app: tether.App, pos: int) -> ev.NewEvent:
    data = {
        "pos": pos,
        "name": f"step{pos}",
        "kind": "step",
        "attempt": 1,
        "digest": DIGEST,
        "output": output(pos),
        "started": 0.0,
        "duration": 0.001,
    }
    return ev.new(ev.STEP_COMPLETED, data, 0.0, app.owner)


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def table_bytes(path: str, table: str) -> int:
    """Bytes of a table and its indexes, from SQLite's dbstat."""
    with closing(sqlite3.connect(path)) as conn:
        names = [table] + [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (table,)
            )
        ]
        marks = ",".join("?" * len(names))
        row = conn.execute(f"SELECT SUM(pgsize) FROM dbstat WHERE name IN ({marks})", names)
        return int(row.fetchone()[0] or 0)


def forget_snapshots(path: str) -> None:
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DELETE FROM snapshots")


@dataclass
class Point:
    seq: int
    cold: float
    warm: float
    near: float


@dataclass
class Result:
    events: int
    build_s: float
    points: list[Point]
    fold_all_s: float
    events_bytes: int
    snapshot_bytes: int
    blob_bytes: int  # snapshot pages (format 2), shared by every snapshot of the run

    @property
    def steps(self) -> int:
        return self.events - 3


def measure_point(app: tether.App, path: str, run_id: str, seq: int, repeat: int) -> Point:
    forget_snapshots(path)
    t0 = time.perf_counter()
    cold = app.state(run_id, at=seq)  # folds 1..seq and caches it (seq >= snapshot_every)
    cold_s = time.perf_counter() - t0
    assert cold == fold(app.store.read_events(run_id, upto=seq), run_id=run_id)
    warm_s = best(lambda: app.state(run_id, at=seq), repeat)
    near = min(seq + 100, app.state(run_id).seq)
    near_s = best(lambda: app.state(run_id, at=near), repeat)
    return Point(seq, cold_s, warm_s, near_s)


def measure(n_events: int, folder: str) -> Result:
    path = os.path.join(folder, f"tt-{n_events}.db")
    with tether.open(path, snapshot_every=500) as app:
        t0 = time.perf_counter()
        run_id = build(app, n_events)
        build_s = time.perf_counter() - t0
        repeat = 5 if n_events <= 10_000 else 3
        seqs = [FIXED, *(n_events * p // 100 for p in (25, 50, 75)), n_events]
        points = [measure_point(app, path, run_id, s, repeat) for s in seqs]
        fold_all_s = best(lambda: fold(app.store.read_events(run_id)), max(1, repeat // 2))
    return Result(
        n_events,
        build_s,
        points,
        fold_all_s,
        table_bytes(path, "events"),
        table_bytes(path, "snapshots"),
        table_bytes(path, "blobs"),
    )


def report(results: list[Result]) -> None:
    base = results[0]
    print(f"\nms per read (best of several); ratios against the {base.events:,}-event run")
    print("point: the state at that seq; cold: no snapshot before it; warm: cached there;")
    print("near: 100 events after a cached point; head = the last point (a point before")
    print("seq 500 = snapshot_every is never cached: its fold is cheaper than a snapshot)\n")
    print(f"{'events':>8} {'point':>8} {'cold':>9} {'warm':>9} {'near':>9}")
    for r in results:
        for p in r.points:
            print(
                f"{r.events:>8,} {p.seq:>8,} {p.cold * 1000:9.2f} {p.warm * 1000:9.2f} "
                f"{p.near * 1000:9.2f}"
            )
    print(
        f"\n{'events':>8} {'build s':>8} {'fold all ms':>12} {'events B/step':>14} "
        f"{'snapshots B':>12} {'pages B':>12} {'snap B/step':>12} "
        f"{'seq 900 warm x':>15} {'head warm x':>12} {'head cold x':>12} "
        f"{'B/step x':>9}"
    )
    for r in results:
        head, fixed = r.points[-1], r.points[0]
        per_step = r.events_bytes / r.steps
        snap_per_step = (r.snapshot_bytes + r.blob_bytes) / r.steps
        print(
            f"{r.events:>8,} {r.build_s:8.1f} {r.fold_all_s * 1000:12.1f} {per_step:14.0f} "
            f"{r.snapshot_bytes:12,} {r.blob_bytes:12,} {snap_per_step:12.0f} "
            f"{fixed.warm / base.points[0].warm:15.2f} "
            f"{head.warm / base.points[-1].warm:12.2f} "
            f"{head.cold / base.points[-1].cold:12.2f} "
            f"{per_step / (base.events_bytes / base.steps):9.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--dir", help="where to build the databases (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        results = []
        for n in args.sizes:
            results.append(measure(n, folder))
            print(f"built and measured {n:,} events", flush=True)
        report(results)


if __name__ == "__main__":
    main()
