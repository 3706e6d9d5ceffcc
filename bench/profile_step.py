"""Where the time of one tether step goes: ``python bench/profile_step.py [--cprofile]``.

The hot path of one step is ``run.step`` → ``journal.step_core`` →
``Journal.record_success`` → ``events.new`` (``codec.encode``) →
``SQLiteStore.append``. This script times each piece on its own (no profiler
running, medians of repeats) and derives the rest by subtraction:

- a whole step in a 1000- and a 5000-step run, with snapshots (the default
  ``snapshot_every=500``) and without (``snapshot_every`` past the run's length);
- ``codec.encode`` of a step's event data, split into the Python walk
  (``to_json_value``) and the stdlib C encoder;
- ``codec.digest`` of the step's arguments;
- ``SQLiteStore.append`` of one already-encoded event;
- the floor: ``json.dumps`` plus one raw INSERT + COMMIT.

The pieces other than the whole step use tether's internal modules; if they
moved, those rows say so and the rest still runs. ``--cprofile`` adds the
functions with the most own time in a 1000-step run (cProfile inflates
Python-heavy code; use it for the shape, the table above for the numbers).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sqlite3
import statistics
import tempfile
import time
import timeit
from collections.abc import Callable
from typing import Any

import tether
from common import body, payload, remove_db

REPEATS = 5


def per_call(fn: Callable[[], Any], number: int = 5000) -> float:
    """Median µs per call of ``fn`` over REPEATS timings of ``number`` calls."""
    return statistics.median(timeit.repeat(fn, number=number, repeat=REPEATS)) / number * 1e6


def step_us(tmp: str, steps: int, snapshot_every: int) -> float:
    """Median µs per step of a whole tether run of ``steps`` steps (W1's agent)."""
    times = []
    for r in range(REPEATS):
        db = os.path.join(tmp, f"p-{steps}-{snapshot_every}-{r}.db")
        app = tether.open(db, snapshot_every=snapshot_every)

        @app.agent(name="bench")
        def agent(run: tether.Run, n: int) -> int:
            total = 0
            for k in range(1, n + 1):
                total += run.step("work", body, k)["step"]
            return total

        t = time.perf_counter()
        app.run(agent, steps)
        times.append(time.perf_counter() - t)
        app.close()
        remove_db(db)
    return statistics.median(times) / steps * 1e6


def step_data() -> dict[str, Any]:
    """The data of one step.completed event, as Journal.record_success builds it."""
    return {
        "pos": 600,
        "name": "work",
        "kind": "step",
        "attempt": 1,
        "digest": "0" * 64,
        "output": payload(600),
        "started": time.time(),
        "duration": 1e-6,
    }


def codec_rows() -> list[tuple[str, float | None]]:
    data = step_data()
    rows: list[tuple[str, float | None]] = [
        ("tether.encode(step event data)", per_call(lambda: tether.encode(data))),
    ]
    try:
        from tether.model import codec

        walked, text = codec.to_json_value(data), codec.encode(data)
        rows += [
            (
                "  codec.to_json_value (Python walk + copy)",
                per_call(lambda: codec.to_json_value(data)),
            ),
            ("  C json encoder on the walked value", per_call(lambda: codec._dumps(walked))),
            ("codec.digest([args, kwargs])", per_call(lambda: codec.digest([[600], {}]))),
            ("codec.decode(step event data)", per_call(lambda: codec.decode(text))),
        ]
    except (ImportError, AttributeError) as e:
        rows.append((f"codec internals moved ({e})", None))
    rows.append(("json.dumps(payload) (the floor's encode)", per_call(lambda: json.dumps(data))))
    return rows


def store_append_us(tmp: str) -> float | None:
    """µs per SQLiteStore.append of one already-encoded ~1 KB event."""
    try:
        from tether.model.events import NewEvent
        from tether.store import NewRun
        from tether.store.sqlite import SQLiteStore
    except ImportError:
        return None
    db = os.path.join(tmp, "append.db")
    store = SQLiteStore(db)
    now = time.time()
    store.create_run(
        NewRun("r", "bench", None, "running", code={}), [], lease_owner="me", now=now, ttl=3600
    )
    event = NewEvent("step.completed", tether.encode(step_data()), now, "me")
    seq = 0

    def append() -> None:
        nonlocal seq
        seq = store.append("r", [event], expected_seq=seq, epoch=1, now=now)

    us = per_call(append, 2000)
    store.close()
    remove_db(db)
    return us


def raw_insert_us(tmp: str) -> float:
    """µs per raw INSERT + COMMIT of an already-encoded ~1 KB row (WAL, NORMAL)."""
    db = os.path.join(tmp, "raw.db")
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE e (run_id TEXT, seq INTEGER, data TEXT, PRIMARY KEY (run_id, seq))")
    data = tether.encode(step_data())
    counter = iter(range(1, 10**9))

    def insert() -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO e VALUES ('r', ?, ?)", (next(counter), data))
        conn.execute("COMMIT")

    us = per_call(insert, 2000)
    conn.close()
    remove_db(db)
    return us


def cprofile_lines(tmp: str, steps: int = 1000, top: int = 18) -> list[str]:
    db = os.path.join(tmp, "cprofile.db")
    app = tether.open(db)

    @app.agent(name="bench")
    def agent(run: tether.Run, n: int) -> int:
        return sum(run.step("work", body, k)["step"] for k in range(1, n + 1))

    profile = cProfile.Profile()
    profile.enable()
    app.run(agent, steps)
    profile.disable()
    app.close()
    remove_db(db)
    profiled: Any = pstats.Stats(profile)
    stats = profiled.stats  # {(file, line, fn): (cc, nc, tt, ct, callers)}
    rows = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    lines = [f"{'own µs/step':>12} {'cum µs/step':>12} {'calls/step':>10}  function"]
    for (file, line, fn), (_, nc, tt, ct, _) in rows:
        where = f"{os.path.basename(file)}:{line}({fn})" if line else fn
        lines.append(
            f"{tt / steps * 1e6:12.1f} {ct / steps * 1e6:12.1f} {nc / steps:10.1f}  {where}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cprofile", action="store_true", help="add a cProfile listing")
    args = parser.parse_args()
    results = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(results, exist_ok=True)  # on the repository's disk, as steps.py does
    with tempfile.TemporaryDirectory(prefix="tmp-profile-", dir=results) as tmp:
        whole = {(n, snap): step_us(tmp, n, snap) for n in (1000, 5000) for snap in (500, 10**9)}
        rows: list[tuple[str, float | None]] = []
        for n in (1000, 5000):
            with_snap, without = whole[(n, 500)], whole[(n, 10**9)]
            rows += [
                (f"whole step, {n}-step run, snapshot_every=500 (default)", with_snap),
                (f"whole step, {n}-step run, no snapshots", without),
                (f"  ⇒ snapshots, amortised per step ({n}-step run)", with_snap - without),
            ]
        codec = codec_rows()
        append = store_append_us(tmp)
        raw = raw_insert_us(tmp)
        rows += codec
        rows += [
            ("SQLiteStore.append(one encoded event)", append),
            ("raw INSERT + COMMIT of the same row (floor, no JSON)", raw),
        ]
        encode = codec[0][1]
        digest = next((v for k, v in codec if k.startswith("codec.digest")), None)
        if encode is not None and digest is not None and append is not None:
            rest = whole[(1000, 10**9)] - encode - digest - append
            rows.append(("  ⇒ runtime + journal (the rest of a step without snapshots)", rest))
        width = max(len(k) for k, _ in rows)
        print(f"tether {tether.__version__}: µs per step or per call (median of {REPEATS})")
        for k, v in rows:
            print(f"{k:<{width}}  {'n/a' if v is None else f'{v:8.1f}'}")
        if args.cprofile:
            print("\ncProfile, 1000-step run (snapshot_every=500):")
            print("\n".join(cprofile_lines(tmp)))


if __name__ == "__main__":
    main()
