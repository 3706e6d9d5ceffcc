"""``tether worker|workers``: execute queued runs, and list the workers that do."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from tether.app import MAX_CONCURRENCY, App
from tether.cli import format as fmt
from tether.cli import logs
from tether.cli.arguments import positive_int, positive_seconds, whole_number
from tether.cli.context import Command, CommandError, Context
from tether.model.status import RunStatus
from tether.services import cpus
from tether.services.worker import describe, reap_dead_workers
from tether.store.urls import redact


def _worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--queue",
        action="append",
        dest="queues",
        metavar="NAME",
        help="a queue to claim from (repeatable; default: default)",
    )
    parser.add_argument(
        "--concurrency",
        type=whole_number(1, MAX_CONCURRENCY),
        default=8,
        help="runs executed at once by this worker (default 8)",
    )
    parser.add_argument(
        "--prefetch",
        metavar="N|auto",
        type=_prefetch,
        default=None,
        help="runs to claim ahead of the free slots, held under lease until a slot frees "
        "(0: never); auto (the default): up to --concurrency while this worker's runs take "
        "under 50 ms on average, none from queues with limits",
    )
    parser.add_argument(
        "--poll",
        type=positive_seconds,
        default=0.2,
        help="seconds between claims when idle, on SQLite (default 0.2)",
    )
    parser.add_argument(
        "--cpu",
        metavar="N|auto",
        help="pin this worker process to CPU N, or with auto to the CPU the fewest other "
        "auto-pinned workers on this host use (one worker per core: its threads stop "
        "passing the GIL between cores; Linux)",
    )
    parser.add_argument(
        "--until-idle", action="store_true", help="exit once no run is claimable and none executes"
    )
    parser.add_argument("--max-runs", type=positive_int, help="exit after claiming this many runs")
    parser.add_argument("--quiet", action="store_true", help="log warnings only")
    parser.add_argument(
        "--metrics-port",
        type=whole_number(0, 65535),
        metavar="PORT",
        help="serve Prometheus metrics (this worker's steps, model calls, tokens, cost, "
        "retries, leases lost; the database's runs, queues and workers) at "
        "http://HOST:PORT/metrics (0: any free port, printed); needs tether[metrics]",
    )
    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="the address --metrics-port listens on (default 127.0.0.1)",
    )


def _prefetch(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        return _runs_ahead(text)
    except argparse.ArgumentTypeError:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise argparse.ArgumentTypeError(
            f"a number of runs >= 0 or auto (at most {MAX_CONCURRENCY}), not {shown!r}"
        ) from None


_runs_ahead = whole_number(0, MAX_CONCURRENCY)


def _worker(args: argparse.Namespace, ctx: Context) -> int:
    if not ctx.app_ref:
        raise CommandError("tether worker needs the agents' code: --app pkg.module:app", 2)
    level = logging.WARNING if args.quiet else logging.INFO
    logs.configure(ctx.log_format, level)
    try:
        cpu = cpus.check(args.cpu)
        if cpu is not None:
            cpus.allowed()  # Linux only: say so before opening anything
    except (ValueError, OSError) as e:
        raise CommandError(f"--cpu: {e}", 2) from None
    app = ctx.require_admin("worker", create=True)
    worker = app.worker(
        queues=args.queues or ["default"],
        concurrency=args.concurrency,
        poll=args.poll,
        cpu=cpu,
        prefetch=args.prefetch,
    )
    logs.configure(ctx.log_format, level, worker=worker.id)  # every line names the worker
    try:
        pinned = worker.pin()
    except ValueError as e:  # a CPU this process may not run on
        raise CommandError(f"--cpu: {e}", 2) from None
    worker.leases.check_clock()  # before saying it claims (measured once: run() reuses it)
    if args.metrics_port is not None:
        _serve_metrics(ctx, app, args.metrics_host, args.metrics_port)
    if not args.quiet:
        on_cpu = "" if pinned is None else f", pinned to CPU {pinned}"
        ctx.print(
            f"worker {worker.id} claims from {', '.join(worker.queues)} "
            f"(concurrency {worker.concurrency}{on_cpu}) on {redact(app.url or '')}; "
            f"SIGTERM stops it"
        )
    stats = worker.run(until_idle=args.until_idle, max_runs=args.max_runs)
    ctx.print(
        f"worker {worker.id} stopped: claimed {stats.claimed}, completed "
        f"{stats.completed}, failed {stats.failed}, waiting {stats.waiting}, "
        f"interrupted {stats.interrupted}, paused {stats.paused}, blocked {stats.blocked}"
    )
    return 1 if stats.errors else 0


def _serve_metrics(ctx: Context, app: App, host: str, port: int) -> None:
    """Serve this worker's metrics (imported here: without the flag nothing loads them)."""
    from tether.services import metrics

    try:
        reg = metrics.registry(app, with_engine=True)
    except ImportError:
        raise CommandError(metrics.missing_extra(), 2) from None
    try:
        bound = metrics.serve(reg, host, port)
    except OSError as e:
        raise CommandError(f"--metrics-port {port}: cannot listen on {host}: {e}", 2) from None
    ctx.print(f"metrics at http://{bound[0]}:{bound[1]}/metrics")


def _workers_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON object per worker")


def _workers(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.require_admin("workers")
    left = reap_dead_workers(app)  # the workers still registered, as list_workers gives them
    now = app.clock.now()
    leases: dict[str, list[str]] = {}
    for r in app.runs(status=RunStatus.RUNNING, limit=10_000):
        if r.lease_owner and (r.lease_expires or 0) >= now:
            leases.setdefault(r.lease_owner, []).append(r.id)
    rows = describe(left, leases, now)
    if args.json:
        for row in rows:
            ctx.print(json.dumps(row))
        return 0
    ctx.print(_workers_table(rows) if rows else "no live workers")
    budget = app.connection_budget
    if budget is not None:  # the worker rows do not record their own: this configuration's
        ctx.print(
            f"connections per worker process, as configured here: at most {budget['total']} "
            f"(pool {budget['pool']} + lanes {budget['lanes']} + listener "
            f"{budget['listener']}); a worker opened with other options has its own "
            f'(docs/postgres.md, "Connections per process")'
        )
    return 0


def _workers_table(rows: list[dict[str, Any]]) -> str:
    """``tether workers``: the rows of ``tether.services.workers.describe``; ``serves``:
    ``all``, or the agents' versions its code registers (docs/deploys.md)."""
    return fmt.table(
        ["worker", "queues", "serves", "conc", "heartbeat", "runs"],
        [
            [
                r["id"],
                ",".join(r["queues"]),
                r["serves"] or "all",
                r["concurrency"],
                f"{r['heartbeat_age_s']:.1f}s ago",
                _runs_cell(r["runs"]),
            ]
            for r in rows
        ],
    )


def _runs_cell(runs: list[str]) -> str:
    """How many runs a worker holds, and the first few: ``0``, ``2: a b``, ``9: a b c d …``."""
    if not runs:
        return "0"
    more = " …" if len(runs) > 4 else ""
    return f"{len(runs)}: {' '.join(runs[:4])}{more}"


COMMANDS = (
    Command(
        "worker",
        "claim queued runs and execute them",
        _worker_arguments,
        _worker,
        "Claims runs from the queues (a lease with a fencing token per run), heartbeats "
        "while they execute, and resumes runs whose worker died. SIGTERM: stop claiming, "
        "let each run finish its current step, put it back in the queue.",
    ),
    Command(
        "workers",
        "list live workers, their leases and heartbeats",
        _workers_arguments,
        _workers,
        "Workers of this host and pid namespace whose process is gone are forgotten "
        "first, and their runs become claimable at once.",
    ),
)
