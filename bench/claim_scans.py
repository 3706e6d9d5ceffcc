"""What a claim costs when many runs wait for later or execute elsewhere.

    python bench/claim_scans.py [--waiting 20000] [--running 1000] [--rounds 60]

A claim takes the best claimable runs of a queue: queued runs, waiting runs whose time
is due, and running runs whose lease expired. Agents in production leave many runs
waiting (approvals pending for a day, timers) and many running on other workers, none
of them claimable. Before schema 8 a claim read them all, every time.

Two stores of each backend (PostgreSQL: two schemas of the ``test`` database; SQLite:
two files), filled straight with rows: both hold 20,000 completed runs and 3,000 queued
ones; the *busy* one also holds ``--waiting`` runs waiting for timers a day away and
``--running`` runs under live leases of other workers. The statement a worker sends for
a claim of 2 runs (PostgreSQL: ``claim_fast`` through the group commit's libpq
connection, autocommit, so its commit too; SQLite: ``claim_candidates``, the read that
picks the runs) alternates between the two stores, each claim's runs then marked
completed. Prints the median µs per claim of each and busy ÷ empty (1.00: the runs that
are not claimable cost a claim nothing). Then what a rate-limited queue adds to each
claim: its count of the claims of the last minute, among the 20,000 completed runs that
were claimed over the day before (``claims_since``). And what a worker that serves only
some versions of the agents (schema 17: a ``Serving`` filter in the claim) pays per claim
on the busy store, against a worker that serves every version (serving ÷ busy).
"""

from __future__ import annotations

import argparse
import functools
import secrets
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg import sql

from common import PG_ADMIN_URL
from queue_tether import open_app
from tether.store.pgwire import Prepared
from tether.store.postgres import PostgresStore
from tether.store.queries import load_queries
from tether.store.records import CLAIM_ALL, Serving

# a worker that registers the agent "bench" at versions "2" and none (the rows' version)
SERVING = Serving(("bench",), (("bench", "2"), ("bench", None))).params()

COLUMNS = (
    "id, agent, version, status, code, created_at, updated_at, epoch, lease_owner, "
    "lease_expires, queue, priority, available_at"
)


def fill(execute: Callable[[str], object], waiting: int, running: int, now: float) -> None:
    """The rows: ``generate_series`` or SQLite's recursive equivalent, one INSERT a kind."""

    def rows(n: int, values: str) -> None:
        if n:
            execute(
                f"WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {n}) "
                f"INSERT INTO runs ({COLUMNS}) SELECT {values} FROM g"
            )

    rows(
        20_000,
        f"'c' || n, 'bench', NULL, 'completed', '{{}}', {now}, {now}, 1, NULL, NULL, 'q', 0, NULL",
    )
    # each claimed once, over the last day: what a rate limit's count reads past
    execute(f"UPDATE runs SET claimed_at = {now} - 86400 + CAST(substr(id, 2) AS INTEGER) * 4")
    day = now + 86_400
    run = "'bench', NULL"  # agent, version
    rows(
        waiting,
        f"'w' || n, {run}, 'waiting', '{{}}', {now}, {now}, 1, NULL, NULL, 'q', 0, {day} + n",
    )
    rows(
        running,
        f"'r' || n, {run}, 'running', '{{}}', {now}, {now}, 1, 'w' || n, {day}, 'q', 0, NULL",
    )
    queued = f"'queued', '{{}}', {now} + n * 0.001, {now}, 0, NULL, NULL, 'q', 0, NULL"
    rows(3_000, f"'q' || (100000 + n), {run}, {queued}")


def postgres(args: argparse.Namespace) -> dict[str, list[float]]:
    admin = psycopg.connect(PG_ADMIN_URL, autocommit=True)
    claim = Prepared("bench_claim", load_queries("postgres")["claim_fast"])
    claimers: dict[str, Callable[[], None]] = {}
    schemas = []
    for kind in ("empty", "busy"):
        schema = f"bench_claims_{secrets.token_hex(3)}"
        schemas.append(schema)
        app, _ = open_app(f"{PG_ADMIN_URL}?schema={schema}")
        store = app.store
        assert isinstance(store, PostgresStore)
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
            busy = kind == "busy"
            fill(
                conn.execute, args.waiting if busy else 0, args.running if busy else 0, time.time()
            )  # type: ignore[arg-type]
            conn.execute("ANALYZE runs")
        lane = store._wire_connection(0)  # the connection a worker's claims go through
        done = sql.SQL(
            "UPDATE {}.runs SET status = 'completed', lease_owner = NULL "
            "WHERE lease_owner = 'bench'"
        ).format(sql.Identifier(schema))

        def one(lane=lane, done=done, serves=CLAIM_ALL) -> None:  # type: ignore[no-untyped-def]
            now = time.time()
            values = {"queue": "q", "now": now, "scan": 2, "owner": "bench", "expires": now + 60}
            assert lane.execute(claim, claim.values({**values, **serves})).ntuples == 2
            admin.execute(done)

        claimers[kind] = one
        if busy:
            claimers["serving"] = functools.partial(one, serves=SERVING)
        claimers[kind + "_app"] = app.close
    since = load_queries("postgres")["claims_since"].replace("runs", f"{schemas[-1]}.runs")
    claimers["count"] = lambda: admin.execute(since.encode(), ("q", time.time() - 60)).fetchone()
    try:
        return measure(claimers, args.rounds)
    finally:
        for kind in ("empty", "busy"):
            claimers[kind + "_app"]()
        for schema in schemas:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
        admin.close()


def sqlite(args: argparse.Namespace) -> dict[str, list[float]]:
    query = load_queries("sqlite")["claim_candidates"]
    claimers: dict[str, Callable[[], None]] = {}
    with tempfile.TemporaryDirectory(dir=Path(__file__).parent) as folder:
        conns = []
        for kind in ("empty", "busy"):
            path = str(Path(folder) / f"{kind}.db")
            app, _ = open_app(path)
            app.close()
            conn = sqlite3.connect(path, isolation_level=None)
            conns.append(conn)
            busy = kind == "busy"
            fill(
                conn.execute, args.waiting if busy else 0, args.running if busy else 0, time.time()
            )
            conn.execute("ANALYZE")

            def one(conn=conn, serves=CLAIM_ALL) -> None:  # type: ignore[no-untyped-def]
                values = {"queue": "q", "now": time.time(), "scan": 2, **serves}
                rows = conn.execute(query, values).fetchall()
                assert len(rows) == 2
                ids = [r[0] for r in rows]
                conn.execute("UPDATE runs SET status = 'completed' WHERE id IN (?, ?)", ids)

            claimers[kind] = one
            if busy:
                claimers["serving"] = functools.partial(one, serves=SERVING)
        since = load_queries("sqlite")["claims_since"]
        claimers["count"] = lambda: conn.execute(since, ("q", time.time() - 60)).fetchone()
        try:
            return measure(claimers, args.rounds)
        finally:
            for conn in conns:
                conn.close()


def measure(claimers: dict[str, Callable[[], None]], rounds: int) -> dict[str, list[float]]:
    """µs per claim, in blocks of 5 claims, the two stores alternating which goes first;
    and a rate limit's count on the busy one."""
    kinds = ["empty", "busy", "count", "serving"]
    out: dict[str, list[float]] = {k: [] for k in kinds}
    for k in kinds:
        for _ in range(5):  # warm up: prepare, cache
            claimers[k]()
    for r in range(rounds):
        for k in kinds[r % 4 :] + kinds[: r % 4]:
            start = time.perf_counter()
            for _ in range(5):
                claimers[k]()
            out[k].append((time.perf_counter() - start) / 5 * 1e6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--waiting", type=int, default=20_000)
    parser.add_argument("--running", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    print(
        f"a claim of 2 runs; busy: {args.waiting:,} runs waiting for later and "
        f"{args.running:,} running elsewhere, beside 20,000 completed and 3,000 queued"
    )
    for name, bench in (("PostgreSQL", postgres), ("SQLite", sqlite)):
        times = bench(args)
        empty, busy = (statistics.median(times[k]) for k in ("empty", "busy"))
        ratio = busy / empty
        print(f"{name:10}  empty {empty:8.1f} µs  busy {busy:8.1f} µs  busy/empty {ratio:5.2f}×")
        count = statistics.median(times["count"])
        print(f"{'':10}  a rate limit's count of the last minute's claims: {count:6.1f} µs")
        serving = statistics.median(times["serving"])
        print(
            f"{'':10}  busy, by a worker serving some versions: {serving:8.1f} µs  "
            f"serving/busy {serving / busy:5.2f}×"
        )


if __name__ == "__main__":
    main()
