"""The PostgreSQL pool's reconnection schedule is capped (item 25.13).

psycopg_pool waits ~1 s before it retries a lost connection and doubles the wait after
each failure, without a bound: after a 35 s outage the next try came ~10-20 s after the
server was back. tether's pool class keeps every wait at most RECONNECT_EVERY.
"""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg_pool")

from psycopg_pool import ConnectionPool

from tether.store.postgres import pool as postgres

pytestmark = pytest.mark.unit


def test_the_pool_class_hooks_the_installed_psycopg_pool() -> None:
    """Without the hook (a psycopg_pool that renamed what it overrides) the pool would keep
    its own doubling schedule: this fails then, so that the hook is mended."""
    assert postgres._POOL is not ConnectionPool
    assert issubclass(postgres._POOL, ConnectionPool)
    assert "_add_connection" in vars(ConnectionPool)


def test_reconnect_waits_never_exceed_the_cap_however_long_the_outage() -> None:
    attempt = postgres._POOL.Attempt(timeout=300.0)  # type: ignore[attr-defined]
    now, waits = 0.0, []
    while not attempt.time_to_give_up(now) and len(waits) < 1000:
        attempt.update_delay(now)
        waits.append(attempt.delay)
        now += attempt.delay
    cap = postgres.RECONNECT_EVERY * 1.1  # psycopg_pool adds up to 10% jitter to the first
    assert max(waits) <= cap and len(waits) > 300 / cap - 2
    assert now >= 300.0  # and it keeps trying for the whole reconnect_timeout
