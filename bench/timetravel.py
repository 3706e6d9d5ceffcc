"""Time travel as a run grows: the cost of ``state(at=…)`` and of loading the head, and the
bytes stored per step, for runs of 1k, 10k and 100k events.

    python bench/timetravel.py                         # 1k, 10k, 100k events
    python bench/timetravel.py --sizes 1000 10000      # a quicker look
    python bench/timetravel.py --snapshot-every 2000   # another snapshot cadence
    python bench/timetravel.py --cadence bytes         # the proposed cadence (see below)

Each run is built through the real machinery, only faster than an agent would:
``step.completed`` events (a ~230-byte output each) are appended in batches of 100
through ``Store.append`` under the run's lease, and snapshots are taken with
``tether.state.fold`` and ``to_data`` at a cadence: ``count`` (the default) every
``snapshot_every`` events, the rule tether's Journal applied when this was written.
Then it times (best of several) ``app.state(run, at=k)`` at several points, loading
the head, and folding the whole log from nothing (the anchor: what every read would
cost without snapshots), and reads the table sizes from SQLite's ``dbstat``. Ratios
are against the smallest run measured in the same process.

``--cadence bytes`` measures a *proposal*, not what tether does today: a snapshot is
taken only once the events since the previous snapshot weigh at least as much as that
snapshot (and at least ``snapshot_every`` events have passed). A snapshot holds every
step's output, so it grows with the run; with this rule snapshots become geometrically
rarer as they grow, the snapshots of a run weigh O(its events) instead of O(events²),
and a read costs at most about twice the decoding of the state it returns. It is
prototyped here in :class:`Builder`; reading (``App.load``) is unchanged.
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
from tether import codec
from tether import events as ev
from tether.clock import new_run_id
from tether.state import fold, from_data, to_data
from tether.store import NewRun, Snapshot, Transition

BATCH = 100
FIXED = 900  # a point every run has: reading it must cost the same in a run of any length
DIGEST = "0" * 64
TEXT = "The p99 latency rose after the 14:02 deploy; the inventory client retries on timeout. "


def output(k: int) -> dict[str, Any]:
    """One step's result: a small model-ish answer (~230 bytes of JSON)."""
    return {"id": f"msg_{k:06d}", "text": TEXT * 2, "score": 0.5, "tokens": 133}


class Builder:
    """Appends a run's events through ``Store.append`` under its lease, in batches, and
    snapshots it the way a cadence says: ``count`` every ``snapshot_every`` events (the
    rule tether's Journal has used), ``bytes`` the proposal (see the module docstring)."""

    def __init__(self, app: tether.App, cadence: str) -> None:
        self.app, self.cadence = app, cadence
        now = app.clock.now()
        self.run_id = new_run_id(now)
        first = [
            ev.new(
                ev.RUN_CREATED,
                {
                    "agent": "bench",
                    "version": None,
                    "input": {"args": [], "kwargs": {}},
                    "code": {},
                },
                now,
            ),
            ev.new(ev.RUN_STARTED, {"by": app.owner, "epoch": 1}, now, app.owner),
        ]
        lease = app.store.create_run(
            NewRun(self.run_id, "bench", None, "running"),
            first,
            lease_owner=app.owner,
            now=now,
            ttl=3600.0,
        )
        assert lease is not None
        self.epoch, self.seq = lease.epoch, len(first)
        self.base = fold(self._stored(first, 0))
        self.tail: list[tether.Event] = []
        self.tail_bytes = self.last_snapshot_bytes = 0

    def _stored(self, events: list[ev.NewEvent], after: int) -> list[tether.Event]:
        return [
            tether.Event(self.run_id, after + i, e.type, e.data, e.at, e.actor)
            for i, e in enumerate(events, 1)
        ]

    def append(self, events: list[ev.NewEvent], transition: Transition | None = None) -> None:
        self.tail += self._stored(events, self.seq)
        self.tail_bytes += sum(len(e.data) for e in events)
        snapshot = self._snapshot_due()
        self.seq = self.app.store.append(
            self.run_id,
            events,
            expected_seq=self.seq,
            epoch=self.epoch,
            transition=transition,
            snapshot=snapshot,
            now=self.app.clock.now(),
        )

    def _snapshot_due(self) -> Snapshot | None:
        if len(self.tail) < self.app.snapshot_every:
            return None
        if self.cadence == "bytes" and self.tail_bytes < self.last_snapshot_bytes:
            return None
        self.base = fold(self.tail, start=self.base)  # the real fold and encoding
        data = codec.encode(to_data(self.base))
        self.tail, self.tail_bytes, self.last_snapshot_bytes = [], 0, len(data)
        return Snapshot(self.run_id, self.base.seq, data, self.app.clock.now())


def build(app: tether.App, n_events: int, cadence: str) -> str:
    """A completed run of exactly ``n_events`` events (``step.completed`` but 3)."""
    b = Builder(app, cadence)
    while b.seq < n_events - 1:
        count = min(BATCH, n_events - 1 - b.seq)
        b.append([step_event(app, b.seq - 1 + i) for i in range(1, count + 1)])
    done = ev.new(ev.RUN_COMPLETED, {"output": {"steps": n_events - 3}}, app.clock.now())
    b.append([done], Transition("completed", release=True))
    return b.run_id


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
    return ev.new(ev.STEP_COMPLETED, data, app.clock.now(), app.owner)


def median_time(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)  # best of: the machine is shared and noisy


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


@dataclass
class Result:
    events: int
    steps: int
    build_s: float
    points: dict[int, float]  # seq -> seconds of state(at=seq)
    head_s: float
    head_decode_s: float  # of which: decoding the newest snapshot
    fold_all_s: float
    snapshots: int
    head_snapshot_bytes: int
    events_bytes: int
    snapshot_bytes: int


def measure(n_events: int, snapshot_every: int, folder: str, cadence: str) -> Result:
    path = os.path.join(folder, f"tt-{n_events}-{cadence}.db")
    with tether.open(path, snapshot_every=snapshot_every) as app:
        t0 = time.perf_counter()
        run_id = build(app, n_events, cadence)
        build_s = time.perf_counter() - t0
        repeat = 7 if n_events <= 10_000 else 3
        seqs = [FIXED, *(n_events * p // 100 for p in (25, 50, 75, 99))]
        points = {k: median_time(lambda k=k: app.state(run_id, at=k), repeat) for k in seqs}
        head_s = median_time(lambda: app.load(run_id), repeat)
        snap = app.store.load(run_id).snapshot
        assert snap is not None
        decode_s = median_time(lambda: from_data(codec.decode(snap.data)), repeat)
        fold_all_s = median_time(lambda: fold(app.store.read_events(run_id)), max(1, repeat // 2))
        assert app.load(run_id) == fold(app.store.read_events(run_id))
        with closing(sqlite3.connect(path)) as conn:
            snapshots = conn.execute("SELECT COUNT(*) FROM snapshots").fetchone()[0]
    return Result(
        n_events,
        n_events - 3,
        build_s,
        points,
        head_s,
        decode_s,
        fold_all_s,
        snapshots,
        len(snap.data),
        table_bytes(path, "events"),
        table_bytes(path, "snapshots"),
    )


def report(results: list[Result], snapshot_every: int, cadence: str) -> None:
    base = results[0]
    print(
        f"\ncadence={cadence}, snapshot_every={snapshot_every}; best-of-N times in ms; "
        f"ratios against the {base.events:,}-event run\n"
    )
    print(
        f"{'events':>8} {'build s':>8} {'state(at) ms: seq 900, 25%, 50%, 75%, 99%':>44} "
        f"{'head ms':>8} {'(decode)':>9} {'fold all':>9} {'snaps':>6}"
    )
    for r in results:
        pts = " ".join(f"{s * 1000:8.2f}" for s in r.points.values())
        print(
            f"{r.events:>8,} {r.build_s:8.1f} {pts:>44} {r.head_s * 1000:8.2f} "
            f"{r.head_decode_s * 1000:9.2f} {r.fold_all_s * 1000:9.1f} {r.snapshots:>6}"
        )
    print(
        f"\n{'events':>8} {'events B/step':>14} {'snapshots B/step':>17} "
        f"{'head snapshot B':>16} {'state(at=900) x':>15} {'head x':>8} {'fold all x':>11} "
        f"{'events B/step x':>16}"
    )
    for r in results:
        print(
            f"{r.events:>8,} {r.events_bytes / r.steps:14.0f} "
            f"{r.snapshot_bytes / r.steps:17.0f} {r.head_snapshot_bytes:16,} "
            f"{first(r.points) / first(base.points):15.2f} {r.head_s / base.head_s:8.2f} "
            f"{r.fold_all_s / base.fold_all_s:11.2f} "
            f"{(r.events_bytes / r.steps) / (base.events_bytes / base.steps):16.2f}"
        )


def first(points: dict[int, float]) -> float:
    return next(iter(points.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--snapshot-every", type=int, default=500)
    parser.add_argument(
        "--cadence",
        choices=("count", "bytes"),
        default="count",
        help="count: tether's snapshot cadence; bytes: the proposal",
    )
    parser.add_argument("--dir", help="where to build the databases (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        results = []
        for n in args.sizes:
            results.append(measure(n, args.snapshot_every, folder, args.cadence))
            print(f"built and measured {n:,} events", flush=True)
        report(results, args.snapshot_every, args.cadence)


if __name__ == "__main__":
    main()
