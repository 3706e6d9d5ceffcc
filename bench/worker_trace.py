"""Where a lone PostgreSQL worker's time goes.

    python bench/worker_trace.py [RUNS] [--lanes=N] [--prefetch=N]


One pinned worker of concurrency 8, in this process, executes RUNS queued runs of
5 steps (the workload of ``bench/queues.py``) on a fresh schema of the ``test``
database (``TETHER_PG_URL`` overrides the server), and prints:

- runs/s, the worker's CPU per run, and the server's CPU per run (every
  ``postgres`` process of this host, from ``/proc``);
- the claims: statements that brought runs, runs per such claim, claims that found
  none, and how many of the runs a slot took from those claimed ahead (``--prefetch``:
  the worker's, default auto);
- per group-commit lane: flushes, the share of the time a flush was in progress,
  the mean flush and the mean batch; and the mean flush by batch size;
- what the lanes' server processes were doing, sampled from ``pg_stat_activity``
  every few ms: on CPU, waiting for the WAL to be flushed (``IO/WALSync``), waiting
  for another backend's flush (``LWLock/WALWrite``), or idle waiting for the client.

A diagnostic, not a comparison: ``bench/queues.py`` is the benchmark.
"""

from __future__ import annotations

import glob
import os
import secrets
import sys
import threading
import time
from collections import Counter
from typing import Any

import psycopg

from common import PG_ADMIN_URL as ADMIN_URL
from queue_tether import QUEUE, open_app
from tether.store import groupcommit

STEPS = 5


def server_cpu_seconds() -> float:
    """CPU time of every postgres process of this host so far (user + system)."""
    total = 0
    for path in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(path) as f:
                stat = f.read()
        except OSError:  # the process ended meanwhile
            continue
        if "(postgres)" in stat:
            fields = stat.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def trace_flushes() -> list[tuple[float, float, int, int]]:
    """Record (start, end, lane, batch size) of every group-commit flush from now on."""
    flushes: list[tuple[float, float, int, int]] = []
    flush_one = groupcommit.GroupCommit._flush_one

    def traced(self: Any, batch: list[Any], lane: int) -> None:
        started = time.perf_counter()
        flush_one(self, batch, lane)
        flushes.append((started, time.perf_counter(), lane, len(batch)))

    groupcommit.GroupCommit._flush_one = traced  # type: ignore[method-assign]
    return flushes


def sample_waits(db_url: str, stop: threading.Event, out: Counter[str]) -> None:
    """Count what the server's active client backends of the database wait for."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        while not stop.wait(0.003):
            rows = conn.execute(
                "SELECT wait_event_type, wait_event FROM pg_stat_activity "
                "WHERE backend_type = 'client backend' AND state = 'active' "
                "AND pid <> pg_backend_pid() AND datname = current_database()"
            ).fetchall()
            out["samples"] += 1
            for kind, event in rows:
                out[f"{kind}/{event}" if kind else "on CPU"] += 1


def count_claims(app: Any, worker: Any) -> dict[str, Any]:
    """Count the worker's claim statements (runs each brought) and the runs its threads
    took from those claimed ahead, from now on."""
    out: dict[str, Any] = {"sizes": [], "ready": 0}
    claim_next, next_ready = app.store.claim_next, worker._next_ready

    def claim(*args: Any, **kwargs: Any) -> Any:
        got = claim_next(*args, **kwargs)
        out["sizes"].append(len(got))
        return got

    def ready() -> Any:
        got = next_ready()
        out["ready"] += bool(got)
        return got

    app.store.claim_next, worker._next_ready = claim, ready
    return out


def main() -> None:
    runs = int(next((a for a in sys.argv[1:] if a.isdigit()), "2000"))
    lanes = next((int(a[8:]) for a in sys.argv[1:] if a.startswith("--lanes=")), None)
    prefetch = next((int(a[11:]) for a in sys.argv[1:] if a.startswith("--prefetch=")), None)
    schema = f"trace_{secrets.token_hex(4)}"
    app, agent = open_app(f"{ADMIN_URL}?schema={schema}", lanes=lanes)
    try:
        for _ in range(runs):
            app.start(agent, STEPS, queue=QUEUE)
        flushes = trace_flushes()
        waits: Counter[str] = Counter()
        stop = threading.Event()
        sampler = threading.Thread(target=sample_waits, args=(ADMIN_URL, stop, waits))
        worker = app.worker(queues=[QUEUE], concurrency=8, cpu="auto", prefetch=prefetch)
        claims = count_claims(app, worker)
        server0, cpu0, t0 = server_cpu_seconds(), time.process_time(), time.perf_counter()
        sampler.start()
        stats = worker.run(until_idle=True)
        seconds = time.perf_counter() - t0
        cpu, server = time.process_time() - cpu0, server_cpu_seconds() - server0
        stop.set()
        sampler.join()
    finally:
        app.close()
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    if stats.completed != runs:
        raise SystemExit(f"only {stats.completed} of {runs} runs completed: {stats.errors[:3]}")
    ahead = "auto" if prefetch is None else prefetch
    print(
        f"{runs} runs of {STEPS} steps, 1 pinned worker × 8, lanes {lanes or 'auto'}, "
        f"prefetch {ahead}"
    )
    print(
        f"{runs / seconds:,.0f} runs/s; CPU per run: worker {cpu / runs * 1e3:.2f} ms, "
        f"server {server / runs * 1e3:.2f} ms ({server / seconds:.0%} of a core); "
        f"{len(flushes) / runs:.2f} commits per run"
    )
    full = [n for n in claims["sizes"] if n]
    print(
        f"claims: {len(full)} brought runs ({sum(full) / max(1, len(full)):.2f} per claim), "
        f"{len(claims['sizes']) - len(full)} found none; "
        f"{claims['ready']} of {runs} runs taken from those claimed ahead"
    )
    span = flushes[-1][1] - flushes[0][0]
    for lane in sorted({f[2] for f in flushes}):
        mine = [f for f in flushes if f[2] == lane]
        busy = sum(f[1] - f[0] for f in mine)
        batch = sum(f[3] for f in mine) / len(mine)
        print(
            f"lane {lane}: {len(mine)} flushes, in progress {busy / span:.0%} of the time, "
            f"mean {busy / len(mine) * 1e6:,.0f} µs, mean batch {batch:.2f}"
        )
    by_size: dict[int, list[float]] = {}
    for start, end, _, size in flushes:
        by_size.setdefault(min(size, 6), []).append(end - start)
    for size, times in sorted(by_size.items()):
        label = f"{size}+" if size == 6 else str(size)
        mean = sum(times) / len(times) * 1e6
        print(f"  batch {label:>2}: {len(times):5} flushes, mean {mean:,.0f} µs")
    samples = waits.pop("samples", 0) or 1
    print("server backends at work (mean number at a sample, by what they wait for):")
    for what, n in waits.most_common():
        print(f"  {n / samples:.2f}  {what}")


if __name__ == "__main__":
    main()
