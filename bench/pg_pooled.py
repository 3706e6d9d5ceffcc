"""What a hot statement costs where nothing is prepared (behind a transaction pooler).

One thread sends the load of a run of 5 events (``load_run``) and the claim of an empty
queue (``claim_fast``: nothing to take, so the time is the statement's parsing,
planning and round trip, not its work) on the store's own libpq connections
(``pgwire``), each way a connection can send them:

- ``prepared``: prepared once, generic plans (a direct connection's default);
- ``whole``: the statement's text every time (what tether sent behind a pooler before
  schema 13): parsed and planned at every execution;
- ``function``: the call of its server-side function (schema 13; what tether sends
  behind a pooler now): the statement inside is planned once per server connection;

straight to PostgreSQL, and ``whole`` and ``function`` through PgBouncer too
(``--pgbouncer URL`` or ``TETHER_PGBOUNCER_URL``; ``.ci/pgbouncer DIR`` starts one), in
alternating blocks (background load hits every way alike), in a throwaway schema.

    python bench/pg_pooled.py [--blocks 40] [--block 25] [--pgbouncer URL]

Prints the median µs per statement of each way and its ratio to ``prepared``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg

from common import PG_ADMIN_URL
from tether.store.pgwire import WireConnection
from tether.store.postgres import PostgresStore
from tether.store.postgres.pooling import qualify_sql
from tether.store.postgres.statements import _WIRE, _statement
from tether.store.records import CLAIM_ALL
from tether.testing.base import new_run

STATEMENTS: dict[str, dict[str, Any]] = {
    "load_run": {"id": "r1", "upto": 2**62},
    "claim_fast": {
        **{"queue": "empty", "now": 1.0, "scan": 8, "owner": "o", "expires": 2.0},
        **CLAIM_ALL,  # a worker that serves every version
    },
}


def way(url: str, schema: str, how: str) -> Callable[[str], None]:
    """Send one statement ``how`` (prepared, whole, function) on a connection of its own."""
    wire = WireConnection(url, prepare=how == "prepared", rewrite=lambda s: qualify_sql(s, schema))
    if how == "prepared":
        wire.plan_once()
    calls = {name: q.call for name, q in _WIRE.items()}

    def send(name: str) -> None:
        q = _WIRE[name]
        q.call = calls[name] if how == "function" else None  # whole: as before schema 13
        st = _statement("r1", name, STATEMENTS[name], lambda res: res)
        wire.execute(st.query, st.values)
        q.call = calls[name]

    return send


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--block", type=int, default=25, help="statements per block")
    parser.add_argument("--pgbouncer", default=os.environ.get("TETHER_PGBOUNCER_URL"))
    args = parser.parse_args()
    schema = f"bench_pooled_{secrets.token_hex(4)}"
    store = PostgresStore(f"{PG_ADMIN_URL}?schema={schema}")
    try:
        new_run(store, "r1", events=5)
        ways = {how: way(PG_ADMIN_URL, schema, how) for how in ("prepared", "whole", "function")}
        if args.pgbouncer:
            for how in ("whole", "function"):
                ways[f"PgBouncer {how}"] = way(args.pgbouncer, schema, how)
        for name in STATEMENTS:
            for send in ways.values():  # warm: plans made, functions compiled
                send(name)
            blocks: dict[str, list[float]] = {how: [] for how in ways}
            for _ in range(args.blocks):
                for how, send in ways.items():
                    start = time.perf_counter()
                    for _ in range(args.block):
                        send(name)
                    blocks[how].append((time.perf_counter() - start) / args.block * 1e6)
            base = statistics.median(blocks["prepared"])
            print(f"{name} (median µs per statement of {args.blocks} blocks of {args.block}):")
            for how, us in blocks.items():
                median = statistics.median(us)
                print(f"  {how:<18} {median:7.0f} µs  {median / base:5.2f}× prepared")
    finally:
        store.close()
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE'.encode())


if __name__ == "__main__":
    main()
