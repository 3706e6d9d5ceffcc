"""Storage parameters for ``events.data`` on PostgreSQL: as tether ships it, against
``STORAGE MAIN`` and against lz4 compression, the same steps in one run.

    .venv/bin/python bench/pg_event_storage.py [--steps 200] [--rounds 5]

The same tether on three schemas of one database, altered after migration:

* ``shipped``: as migrated (TEXT's ``STORAGE EXTENDED``, the server's
  ``default_toast_compression``, pglz unless set): a row past ~2 KB has its data
  compressed, and moved to the TOAST table in ~2 KB chunks if it is still past ~2 KB;
* ``main``: ``STORAGE MAIN``: compressed in the row, moved out only past a page;
* ``lz4``: ``EXTENDED`` with ``COMPRESSION lz4`` (the server must be built with it).

For each kind of step output, fresh schemas, and a run of ``--steps`` sequential steps
through ``app.run`` on each, the three taking turns round by round. Reported (medians
of the rounds): µs per step; µs to read the run's whole log back
(``Store.read_events``); bytes per step: the ``events`` table as
``pg_total_relation_size`` counts it (heap, free space map, TOAST table and its index,
primary key) over the steps written. Ratios are against ``shipped``.

Outputs (text: slices of a Python source file, prose and code, which pglz compresses
about 2.5x): ``1 KB text`` (a row under ~2 KB is never compressed nor moved: the
control), ``12 KB text`` (~4 KB once compressed: out of line when shipped, in the row
with ``main``), ``4.5 KB hex`` (does not compress; with ``main`` a row of more than
half a page leaves the rest of its page to smaller rows) and ``mixed`` (a 4.5 KB hex
step, then three 1 KB text steps).
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import psycopg

import tether

PG_URL = os.environ.get("TETHER_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
SOURCE = Path(argparse.__file__).read_text()  # prose and code: compresses as text does


def text(n: int, seed: int) -> str:
    """``n`` characters of text, a different slice for each seed."""
    at = random.Random(seed).randrange(len(SOURCE) - n)
    return SOURCE[at : at + n]


OUTPUTS: dict[str, Callable[[int], str]] = {
    "1 KB text": lambda i: text(1000, i),
    "12 KB text": lambda i: text(12_000, i),
    "4.5 KB hex": lambda i: secrets.token_hex(2250),
    "mixed": lambda i: secrets.token_hex(2250) if i % 4 == 0 else text(1000, i),
}


def events_bytes(schema: str) -> int:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        row = conn.execute(f"SELECT pg_total_relation_size('{schema}.events')".encode())
        return int(row.fetchone()[0])  # type: ignore[index]


def one_round(app: Any, schema: str, output: Any, steps: int) -> tuple[float, float, int]:
    """(µs per step, µs to read the log, bytes per step) of one run of ``steps`` steps."""

    @app.agent(name=f"a{secrets.token_hex(3)}")
    def agent(run: Any) -> int:
        for i in range(steps):
            run.step(f"s{i}", output, i)
        return steps

    before = events_bytes(schema)
    t0 = time.perf_counter()
    handle = app.run(agent)
    per_step = (time.perf_counter() - t0) / steps * 1e6
    t0 = time.perf_counter()
    assert len(app.store.read_events(handle.id)) > steps
    read = (time.perf_counter() - t0) * 1e6
    return per_step, read, (events_bytes(schema) - before) // steps


ARMS = {
    "shipped": None,
    "main": "ALTER TABLE {}.events ALTER data SET STORAGE MAIN",
    "lz4": "ALTER TABLE {}.events ALTER data SET COMPRESSION lz4",
}


def compare(label: str, output: Callable[[int], str], steps: int, rounds: int) -> None:
    """Every arm on a fresh schema for one kind of output, taking turns round by round."""
    schemas = {arm: f"bench_{secrets.token_hex(4)}" for arm in ARMS}
    apps = {arm: tether.open(f"{PG_URL}?schema={s}") for arm, s in schemas.items()}
    try:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            for arm, alter in ARMS.items():
                if alter is not None:
                    conn.execute(alter.format(schemas[arm]).encode())
        got: dict[str, list[tuple[float, float, int]]] = {arm: [] for arm in apps}
        for _ in range(rounds):
            for arm, app in apps.items():
                got[arm].append(one_round(app, schemas[arm], output, steps))
        med = {k: [statistics.median(x[j] for x in v) for j in range(3)] for k, v in got.items()}
        base = med["shipped"]
        for arm, (us, read, size) in med.items():
            print(
                f"{label:11} {arm:8} {us:8.0f} {us / base[0]:5.2f}x {read:8.0f} "
                f"{read / base[1]:5.2f}x {size:8.0f} {size / base[2]:5.2f}x",
                flush=True,
            )
    finally:
        for app in apps.values():
            app.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            for s in schemas.values():
                conn.execute(f"DROP SCHEMA {s} CASCADE".encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{args.steps} steps a run, {args.rounds} rounds, load {os.getloadavg()[0]:.1f}")
    print(f"{'output':11} {'':8} {'µs/step':>15} {'read µs':>15} {'bytes/step':>15}")
    for label, output in OUTPUTS.items():
        compare(label, output, args.steps, args.rounds)
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
