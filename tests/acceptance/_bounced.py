"""The workload of test_pgbouncer_workers: runs of 3 steps, by worker processes through
PgBouncer. $TETHER_TEST_DB is the pooler's URL; $TETHER_TEST_LISTEN, when set, the direct
URL for wake-ups."""

from __future__ import annotations

import os

import tether

listen = os.environ.get("TETHER_TEST_LISTEN") or None
app = tether.open(os.environ["TETHER_TEST_DB"], lease_ttl=5.0, listen_url=listen)


def work(n: int, k: int) -> int:
    return n * 10 + k


@app.agent
def three(run: tether.Run, n: int) -> int:
    return sum(run.step("work", work, n, k) for k in range(3))
