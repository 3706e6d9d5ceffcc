"""Per-append latency of the PostgreSQL store against a plain INSERT + COMMIT.

The floor is the cheapest durable write a client can make: one prepared
``INSERT`` of a 1 KB row in autocommit mode (one round trip, one commit).
tether's ``append`` of one 1 KB event does the same work plus the fencing check
(a row lock on the run), the gap check and its bookkeeping, also in one round
trip and one commit. Both run in the same process against the same server, in
alternating blocks of a few operations (so that background load hits both
alike), in a throwaway schema that is dropped at the end.

    python bench/pg_append_floor.py [postgresql://…] [--blocks 300] [--block 20]

Prints the median per-operation latency (µs) of each and its ratio to the floor
(target for the plain append: ≤ 1.3). For information it also times an append
that carries an effects-table write, as a tool call's intent does.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import time
from collections.abc import Callable

import psycopg
from psycopg import sql

from common import PG_ADMIN_URL
from tether.model.events import NewEvent
from tether.store import EffectWrite, NewRun
from tether.store.postgres import PostgresStore

PAYLOAD = '{"output": "' + "x" * 1000 + '"}'  # 1 KB of JSON, like a small step result


def per_op_us(fn: Callable[[], None], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def floor_writer(url: str, schema: str) -> tuple[psycopg.Connection[object], Callable[[], None]]:
    conn = psycopg.connect(url, autocommit=True, prepare_threshold=0)
    conn.execute(
        sql.SQL("CREATE TABLE {}.floor (k BIGINT PRIMARY KEY, data TEXT NOT NULL)").format(
            sql.Identifier(schema)
        )
    )
    insert = sql.SQL("INSERT INTO {}.floor (k, data) VALUES (%s, %s)").format(
        sql.Identifier(schema)
    )
    counter = iter(range(1, 10**9))

    def write() -> None:
        conn.execute(insert, (next(counter), PAYLOAD))

    return conn, write


def tether_writer(store: PostgresStore, run_id: str, *, effect: bool) -> Callable[[], None]:
    """Appends of one 1 KB event to a run; with ``effect``, plus an effects-table write (the
    shape of a tool call's intent, which takes the general one-statement path)."""
    store.create_run(
        NewRun(run_id, "bench", None, "running"),
        [],
        lease_owner="bench",
        now=time.time(),
        ttl=3600,
    )
    seq = 0

    def write() -> None:
        nonlocal seq
        writes = [EffectWrite(f"{run_id}:{seq}", run_id, seq + 1, "tool", "intent")]
        seq = store.append(
            run_id,
            [NewEvent("step.completed", PAYLOAD, time.time(), "bench")],
            expected_seq=seq,
            epoch=1,
            writes=writes if effect else (),
            now=time.time(),
        )

    return write


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "url",
        nargs="?",
        default=PG_ADMIN_URL,
    )
    parser.add_argument("--blocks", type=int, default=300, help="blocks of each kind")
    parser.add_argument("--block", type=int, default=20, help="operations per block")
    args = parser.parse_args()
    schema = f"bench_{secrets.token_hex(4)}"
    store = PostgresStore(args.url, schema=schema)
    conn, floor = floor_writer(args.url, schema)
    kinds = {
        "floor  INSERT 1 KB + COMMIT (autocommit, prepared)": floor,
        "tether append of one 1 KB event": tether_writer(store, "bench", effect=False),
        "  (info) append + effects write (a tool intent)": tether_writer(
            store, "bench-tool", effect=True
        ),
    }
    try:
        for write in kinds.values():  # warm up: connect, prepare, cache
            per_op_us(write, 200)
        times: dict[str, list[float]] = {name: [] for name in kinds}
        for _ in range(args.blocks):
            for name, write in kinds.items():
                times[name].append(per_op_us(write, args.block))
        medians = {name: statistics.median(t) for name, t in times.items()}
        f = medians[next(iter(kinds))]
        for name, m in medians.items():
            print(f"{name:52}: {m:8.1f} µs/op  {m / f:5.2f}x the floor")
    finally:
        store.close()
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
        conn.close()


if __name__ == "__main__":
    main()
