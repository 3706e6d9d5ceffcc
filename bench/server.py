"""``tether serve`` on a big database: p50/p99 latency of the API calls of each page.

    python bench/server.py                          # SQLite, in a temporary folder
    python bench/server.py --db postgresql://…/test?schema=bench_server
    python bench/server.py --runs 10000 --events 10000 --requests 50   # a quick look

Builds a database of ``--runs`` runs (default 100,000; five agents, newest first by a
second each; 500 of them real runs waiting for an approval, the inbox) and one run of
``--events`` events (default 100,000: ``step.completed`` events of ~230 bytes), all
through the store (``create_run``, ``append`` in batches of 100; PostgreSQL: from 4
threads). Then starts a real ``tether serve`` process on it and measures, with one
keep-alive HTTP client and an admin token, ``--requests`` calls of each:

- the run list: its first page, and a page filtered by agent;
- the big run's page (its folded state, first 500 steps) and its first events page;
- the approvals inbox (its first page, each request's payload folded from its run).

Warm-up calls are not counted (the first load of the big run folds its log and caches a
snapshot, as any read of it does once). The goal is p99 < 100 ms for each call. Nothing
here is a test: no build fails because a number moved.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

import tether
from tether.model import events as ev
from tether.model.clock import new_run_id
from tether.store import NewRun, Transition

AGENTS = ("bench-a", "bench-b", "bench-c", "bench-d", "bench-e")
WAITING = 500
GOAL_MS = 100.0
TEXT = "The p99 latency rose after the 14:02 deploy; the inventory client retries on timeout. "


def build_runs(app: tether.App, n: int, threads: int) -> None:
    """``n`` completed runs (two events each), created a second apart, newest last."""
    start = app.clock.now() - n

    def make(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            at = start + i
            created = {
                "agent": AGENTS[i % len(AGENTS)],
                "version": None,
                "input": {"args": [i], "kwargs": {}},
                "code": {},
            }
            app.store.create_run(
                NewRun(new_run_id(at), AGENTS[i % len(AGENTS)], None, "completed"),
                [ev.new(ev.RUN_CREATED, created, at), ev.new(ev.RUN_COMPLETED, {"output": i}, at)],
                lease_owner=None,
                now=at,
                ttl=30.0,
            )

    chunk = -(-n // threads)
    with ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(make, lo, min(lo + chunk, n)) for lo in range(0, n, chunk)]:
            f.result()


def build_waiting(app: tether.App, n: int) -> None:
    """``n`` real runs waiting for an approval (the inbox)."""

    @app.agent(name="refund")
    def refund(run: tether.Run, order: int) -> Any:
        facts = run.step("lookup", lambda: {"order": order, "amount": 30, "note": TEXT})
        return run.approve("send", payload=facts, approvers=["alice"])

    for i in range(n):
        app.run(refund, i)


def build_big_run(app: tether.App, n_events: int) -> str:
    """A completed run of exactly ``n_events`` events (all but 3 ``step.completed``)."""
    now = app.clock.now()
    run_id = new_run_id(now)
    created = {"agent": "big", "version": None, "input": {"args": [], "kwargs": {}}, "code": {}}
    first = [
        ev.new(ev.RUN_CREATED, created, now),
        ev.new(ev.RUN_STARTED, {"by": app.owner, "epoch": 1}, now, app.owner),
    ]
    lease = app.store.create_run(
        NewRun(run_id, "big", None, "running"), first, lease_owner=app.owner, now=now, ttl=3600.0
    )
    assert lease is not None
    seq = len(first)
    while seq < n_events - 1:
        batch = [_step(seq - 1 + i) for i in range(1, min(100, n_events - 1 - seq) + 1)]
        seq = app.store.append(run_id, batch, expected_seq=seq, epoch=lease.epoch, now=now)
    done = ev.new(ev.RUN_COMPLETED, {"output": {"steps": n_events - 3}}, now, app.owner)
    app.store.append(
        run_id,
        [done],
        expected_seq=seq,
        epoch=lease.epoch,
        now=now,
        transition=Transition("completed", release=True),
    )
    return run_id


def _step(pos: int) -> ev.NewEvent:
    data = {
        "pos": pos,
        "name": f"step{pos}",
        "kind": "step",
        "attempt": 1,
        "digest": "0" * 64,
        "output": {"id": f"msg_{pos:06d}", "text": TEXT * 2, "score": 0.5, "tokens": 133},
        "started": 0.0,
        "duration": 0.001,
    }
    return ev.new(ev.STEP_COMPLETED, data, 0.0, "bench")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(db: str) -> tuple[subprocess.Popen[str], str]:
    """A ``tether serve`` process on ``db``, once it answers."""
    port = _free_port()
    cmd = [sys.executable, "-m", "tether.cli", "--db", db, "serve", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{base}/openapi.json", timeout=1)
            return proc, base
        except httpx.TransportError:
            if proc.poll() is not None:
                raise SystemExit(f"tether serve exited: {proc.communicate()}") from None
            time.sleep(0.1)
    raise SystemExit("tether serve did not answer within 60 s")


def measure(call: Callable[[], httpx.Response], n: int, warm: int = 5) -> tuple[float, float]:
    """p50 and p99 of ``n`` calls, in ms (after ``warm`` uncounted ones)."""
    for _ in range(warm):
        call().raise_for_status()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        answer = call()
        times.append((time.perf_counter() - t0) * 1e3)
        answer.raise_for_status()
    q = statistics.quantiles(times, n=100, method="inclusive")
    return q[49], q[98]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--db", help="a database URL (default: a new SQLite file)")
    p.add_argument("--runs", type=int, default=100_000)
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--requests", type=int, default=200)
    args = p.parse_args()
    folder = tempfile.mkdtemp(prefix="tether-bench-server-")
    db = args.db or os.path.join(folder, "server.db")
    app = tether.open(db)
    threads = 4 if app.store.dialect == "postgres" else 1
    t0 = time.perf_counter()
    build_runs(app, args.runs - WAITING, threads)
    build_waiting(app, WAITING)
    big = build_big_run(app, args.events)
    _, token = app.tokens.create(f"bench-{os.getpid()}", "admin")
    built = time.perf_counter() - t0
    print(f"built {args.runs:,} runs and a run of {args.events:,} events in {built:.0f} s ({db})")
    app.close()
    proc, base = serve(db)
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as http:
            calls = {
                "GET /api/runs (first page, 50)": lambda: http.get("/api/runs"),
                "GET /api/runs?agent=bench-c": lambda: http.get("/api/runs?agent=bench-c"),
                "GET /api/runs/{big} (state, 500 steps)": lambda: http.get(f"/api/runs/{big}"),
                "GET /api/runs/{big}/events (200)": lambda: http.get(f"/api/runs/{big}/events"),
                "GET /api/approvals (first page, 50)": lambda: http.get("/api/approvals"),
            }
            rows = [(name, *measure(call, args.requests)) for name, call in calls.items()]
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    print(
        f"\ntether serve, {app.store.dialect}, commit {commit.stdout.strip()}, "
        f"{args.requests} requests each, goal p99 < {GOAL_MS:.0f} ms"
    )
    print(f"{'call':44} {'p50 ms':>8} {'p99 ms':>8}  goal")
    for name, p50, p99 in rows:
        verdict = "ok" if p99 < GOAL_MS else "MISSED"
        print(f"{name:44} {p50:8.1f} {p99:8.1f}  {verdict}")
    if not args.db:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
