"""`tether check`'s cost (issue 32): replaying 1,000 unfinished runs against new code,
against the anchor of merely loading (folding) the same runs' states.

    python bench/replay_check.py                      # SQLite and PostgreSQL
    python bench/replay_check.py --runs 200 --no-pg   # a quicker look

Half the runs charged a customer and wait for a signal (one executed, the rest imported
copies of its log), half are queued and never ran, as in tests/acceptance/test_check.py.
Timed in-process (no CLI start-up): the best of 3 passes of

- ``load``: ``States.load`` of every run (the anchor: reading the logs);
- ``check``: ``Replayer.check`` of every unfinished run (list them, load each, call the
  agent on a dry journal), against code with a step inserted before the charge.

The ratio check / load is what the replay itself adds to reading the logs.
"""

from __future__ import annotations

import argparse
import io
import os
import secrets
import tempfile
import time
from typing import Any

import tether
from tether.engine.states import States

PG_URL = os.environ.get("TETHER_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def build(url: str, runs: int) -> tuple[tether.App, Any]:
    app = tether.open(url)
    version = {"inserted": False}

    @app.tool(risk="write")
    def charge(amount: int, *, idempotency_key: str) -> str:
        return f"charged {amount}"

    @app.agent
    def order(run: tether.Run, amount: int) -> str:
        if version["inserted"]:
            run.step("check_fraud", lambda: "ok")
        receipt = run.tool(charge, amount)
        run.wait("shipped")
        return receipt

    first = app.run(order, 5)
    out = io.StringIO()
    app.export_run(first.id, out)
    lines = out.getvalue().splitlines()
    for _ in range(runs // 2 - 1):
        app.import_run(lines, new_id=True)
    for _ in range(runs // 2):
        app.start(order, 5, queue="orders")
    version["inserted"] = True
    return app, version


def best(fn: Any, n: int = 3) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(name: str, url: str, runs: int) -> None:
    app, _ = build(url, runs)
    try:
        ids = [r.id for r in app.store.list_runs(limit=runs * 2)]
        states = States(app.store, app.clock, 2**62)
        load = best(lambda: [states.load(i) for i in ids])
        replayer = app._replayer()
        reports: list[Any] = []
        check = best(lambda: reports.__setitem__(slice(None), list(replayer.check(app.store))))
        blocked = sum(r.outcome == "diverges" for r in reports)
        print(
            f"{name:10} {len(reports):5} runs  load {load:6.3f} s  check {check:6.3f} s  "
            f"check/load {check / load:4.2f}  per run {check / len(reports) * 1e3:5.2f} ms  "
            f"({blocked} would block)"
        )
    finally:
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--no-pg", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        measure("sqlite", os.path.join(tmp, "bench.db"), args.runs)
    if not args.no_pg:
        import psycopg

        schema = f"bench_{secrets.token_hex(4)}"
        try:
            measure("postgresql", f"{PG_URL}?schema={schema}", args.runs)
        finally:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())


if __name__ == "__main__":
    main()
