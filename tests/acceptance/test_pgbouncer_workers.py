"""3 worker processes × 8 threads through a PgBouncer in transaction mode whose pool has
4 server connections (default_pool_size=4): every run completes once; a run enqueued
while the workers are idle is woken through ``listen_url`` (the workers poll only every
hour, so nothing else could start it), and without ``listen_url`` by their polling.

Needs PgBouncer: runs when TETHER_PGBOUNCER_URL is set (.ci/run sets it, after starting
one; this test starts its own, with a pool of 4, by .ci/pgbouncer)."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.acceptance
ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = str(Path(__file__).with_name("_bounced.py"))
PG_URL = os.environ.get("TETHER_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
RUNS = 120


@pytest.fixture(scope="module")
def small_bouncer() -> Iterator[str]:
    if not os.environ.get("TETHER_PGBOUNCER_URL"):
        pytest.skip("TETHER_PGBOUNCER_URL is not set (.ci/run starts PgBouncer and sets it)")
    folder = Path(tempfile.mkdtemp(prefix="tether-pgbouncer-4-"))
    folder.chmod(0o755)
    env = {**os.environ, "TETHER_PGBOUNCER_POOL_SIZE": "4"}
    done = subprocess.run(
        [str(ROOT / ".ci" / "pgbouncer"), str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr  # PgBouncer must run: fail, never skip
    try:
        yield done.stdout.strip()
    finally:
        os.kill(int((folder / "pgbouncer.pid").read_text()), signal.SIGTERM)
        shutil.rmtree(folder, ignore_errors=True)


def _workers(env: dict[str, str], poll: str) -> list[subprocess.Popen[bytes]]:
    args = ["--app", f"{WORKLOAD}:app", "worker", "--quiet", "--concurrency", "8"]
    return [
        subprocess.Popen(
            [sys.executable, "-m", "tether.cli", *args, "--poll", poll],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(3)
    ]


def _stop(workers: list[subprocess.Popen[bytes]]) -> str:
    for w in workers:
        w.send_signal(signal.SIGTERM)
    errors = []
    for w in workers:
        try:
            _, err = w.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            w.kill()
            _, err = w.communicate()
        errors.append(err.decode(errors="replace")[-2000:])
    return "\n".join(errors)


def _completed(app: tether.App, ids: list[str], limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if all(app.store.get_run(i).status == "completed" for i in ids):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("wake", ["listen_url", "polling"])
def test_three_workers_of_eight_through_a_pool_of_four(small_bouncer: str, wake: str) -> None:
    import psycopg

    schema = f"bounce_{secrets.token_hex(4)}"
    url = f"{small_bouncer}?schema={schema}"
    env = {**os.environ, "TETHER_TEST_DB": url}
    env.pop("TETHER_TEST_LISTEN", None)
    if wake == "listen_url":
        env["TETHER_TEST_LISTEN"] = PG_URL
    os.environ["TETHER_TEST_DB"] = url
    sys.path.insert(0, str(Path(WORKLOAD).parent))
    try:
        import _bounced
    finally:
        sys.path.pop(0)
    app = tether.open(url)
    assert app.store.pooled is True
    # listen_url: the workers look for work once an hour, so only a NOTIFY starts the
    # late run; polling: every 0.2 s
    workers = _workers(env, "3600" if wake == "listen_url" else "0.2")
    try:
        ids = [app.start(_bounced.three, n) for n in range(RUNS)]
        assert _completed(app, ids, 240), "the runs did not complete through PgBouncer"
        time.sleep(0.5)  # the workers are idle, waiting
        late = app.start(_bounced.three, 999)
        assert _completed(app, [late], 60), f"the late run was not woken by {wake}"
    finally:
        errors = _stop(workers)
    assert all(w.returncode is not None for w in workers)
    for i, n in zip(ids, range(RUNS), strict=True):
        state = app.get(i)
        assert state.output == 30 * n + 3, (i, state.output)
        events = app.events(i)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert sum(1 for s in state.steps if s.kind == "step") == 3
    assert "Traceback" not in errors, errors
    app.close()
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())
