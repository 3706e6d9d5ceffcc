"""Chaos: worker processes SIGKILLed at random while they execute 200 runs.

At the end every run completed, no step whose completion was recorded ran again,
every run's write tool used one idempotency key and took effect once, and every
run's log has contiguous seqs. A third case also cuts the database from under the
workers: every other blow terminates all their PostgreSQL backends on the server
(a restart, a failover) instead of killing a worker; runs pause, none fails.
With TETHER_PGBOUNCER_URL set (.ci/run sets it), a fourth case runs the PostgreSQL
workers through PgBouncer in transaction mode (nothing prepared, wake-ups by polling).
"""

from __future__ import annotations

import collections
import os
import random
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _workers import kill_one, stop_all

import tether

pytestmark = pytest.mark.acceptance
WORKLOAD = str(Path(__file__).with_name("_chaos.py"))
PG_URL = os.environ.get("TETHER_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
PGBOUNCER_URL = os.environ.get("TETHER_PGBOUNCER_URL") or None
_BOUNCED = [("pgbouncer", 4)] if PGBOUNCER_URL else []
RUNS, STEPS = 200, 10
TIME_LIMIT = 150.0  # seconds of blows at most
DRAIN_LIMIT = 600.0  # then seconds for the workers to finish without blows, at most


@pytest.fixture(
    params=[("sqlite", 2), ("postgres", 4), ("postgres-connections", 4), *_BOUNCED],
    ids=["sqlite-2", "postgres-4", "postgres-4-connections-cut", "pgbouncer-4"][
        : 3 + len(_BOUNCED)
    ],
)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, int]]:
    backend, workers = request.param
    if backend == "sqlite":
        yield str(tmp_path / "chaos.db"), workers
        return
    import psycopg

    schema = f"chaos_{secrets.token_hex(4)}"
    try:
        psycopg.connect(PG_URL, connect_timeout=5).close()
    except Exception as e:
        pytest.fail(f"PostgreSQL at {PG_URL} cannot be reached ({e}); the chaos test needs it")
    # the workers' connections carry the schema's name: the cuts find them by it
    cut = f"&application_name={schema}" if backend == "postgres-connections" else ""
    if backend == "pgbouncer":
        assert PGBOUNCER_URL is not None
        try:  # CI started it: a PgBouncer that does not answer fails the test
            psycopg.connect(PGBOUNCER_URL, connect_timeout=5).close()
        except Exception as e:
            pytest.fail(f"PgBouncer at {PGBOUNCER_URL} cannot be reached ({e})")
        keeps = os.environ.get("TETHER_PGBOUNCER_PREPARED", "0") not in ("", "0")
        prepared = "&prepare=on" if keeps else ""  # a PgBouncer 1.21+ that keeps them
        yield f"{PGBOUNCER_URL}?schema={schema}{prepared}", workers
    else:
        yield f"{PG_URL}?schema={schema}{cut}", workers
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())


def _worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tether.cli",
            "--app",
            f"{WORKLOAD}:app",
            "worker",
            "--quiet",
            "--concurrency",
            "4",
            "--poll",
            "0.05",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _cut_connections(name: str) -> int:
    """Terminate every PostgreSQL backend of connections named ``name``; how many."""
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as admin:
        query = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s"
        return len(admin.execute(query, (name,)).fetchall())


def test_chaos(target: tuple[str, int], tmp_path: Path) -> None:
    url, n_workers = target
    (tmp_path / "effects").mkdir()
    env = {**os.environ, "TETHER_TEST_DB": url, "TETHER_TEST_DIR": str(tmp_path)}
    os.environ.update({"TETHER_TEST_DB": url, "TETHER_TEST_DIR": str(tmp_path)})
    sys.path.insert(0, str(Path(WORKLOAD).parent))
    try:
        import _chaos
    finally:
        sys.path.pop(0)
    app = tether.open(url.split("&application_name=")[0], lease_ttl=2.0)  # never cut
    ids = [app.start(_chaos.chaos, i) for i in range(RUNS)]
    rng = random.Random(7)
    workers = [_worker(env) for _ in range(n_workers)]
    cut = url.split("application_name=", 1)[1] if "application_name=" in url else None
    kills = cuts = 0

    def all_completed() -> bool:
        return sum(1 for r in app.runs(status="completed", limit=RUNS + 1)) == RUNS

    # Real time, on purpose: blows land at random moments of real executions. The chaos
    # lasts until every run completed or TIME_LIMIT; then the workers finish in peace
    # (DRAIN_LIMIT), so a slow, loaded machine gets fewer blows, not a failed test: how
    # fast runs complete under blows is bench/'s business, that they all do is this test's.
    deadline = time.monotonic() + TIME_LIMIT
    try:
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.3, 0.7))
            if all_completed():
                break
            if cut is not None and (kills + cuts) % 2:
                cuts += _cut_connections(cut) > 0
                continue
            kill_one(workers, rng, lambda: _worker(env))
            kills += 1
        calm = time.monotonic() + DRAIN_LIMIT
        while not all_completed() and time.monotonic() < calm:
            time.sleep(0.5)
    finally:
        stop_all(workers)
    statuses = collections.Counter(app.store.get_run(i).status for i in ids)
    assert statuses == {"completed": RUNS}, f"{statuses} after {kills} kills, {cuts} cuts"
    assert kills >= 5, "the killer hardly ran: the test proved little"
    assert cut is None or cuts >= 5, "the connections were hardly cut: the test proved little"

    executions = collections.defaultdict(list)
    for line in (tmp_path / "ledger.txt").read_text().splitlines():
        run_id, pos, token = line.split()
        executions[(run_id, int(pos))].append(token)
    calls = collections.defaultdict(set)
    for line in (tmp_path / "calls.txt").read_text().splitlines():
        run_id, key = line.split()
        calls[run_id].add(key)
    effects = os.listdir(tmp_path / "effects")
    for run_id in ids:
        events = app.events(run_id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1)), run_id
        state = app.get(run_id)
        steps = [s for s in state.steps if s.kind == "step"]
        assert len(steps) == STEPS and state.output == STEPS
        for s in steps:
            tokens = executions[(run_id, s.position if s.position <= 5 else s.position - 1)]
            # the recorded execution is the last one: nothing ran after its completion
            assert tokens and tokens[-1] == s.output, (run_id, s.name, tokens, s.output)
        assert len(calls[run_id]) == 1, calls[run_id]  # one key, whatever the retries
        tool = next(s for s in state.steps if s.kind == "tool")
        assert calls[run_id] == {tool.key}
    assert len(effects) == RUNS  # one effect per run: none duplicated, none lost
    started = len((tmp_path / "started.txt").read_text().splitlines())
    print(
        f"\nchaos on {url.split('?')[0]}: {RUNS} runs, {kills} workers killed, {cuts} times "
        f"all their connections cut, {started - RUNS * STEPS} steps re-entered (in flight at "
        f"a blow)"
    )
    app.close()
