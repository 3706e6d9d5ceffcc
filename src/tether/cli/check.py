"""``tether check``: replay unfinished runs against the App's current code, before a
deploy (see :func:`tether.services.replay.check` and docs/deploys.md)."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from tether.cli import format as fmt
from tether.cli.context import Command, Context
from tether.engine.dry import CONTINUES, DIVERGES, FAILS, FINISHED, ReplayReport
from tether.services import replay

_WOULD = {FINISHED: "finish", CONTINUES: "continue", DIVERGES: "BLOCK", FAILS: "FAIL"}


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="*", metavar="RUN", help="the runs to check (default: all)")
    parser.add_argument(
        "--status",
        action="append",
        choices=[str(s) for s in replay.UNFINISHED] + ["failed", "completed", "cancelled"],
        help="check the runs of this status (repeatable; default: queued, running, waiting "
        "and blocked)",
    )
    parser.add_argument("--json", action="store_true", help="print one report per run as JSON")
    parser.add_argument(
        "--all", action="store_true", help="list every run (default: those that would block)"
    )


def _check(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.require_admin("check")
    url = app.url or ""
    # PostgreSQL is read through a read-only session: a write would fail at once
    store = ctx.reader(url).store if url.startswith(("postgres://", "postgresql://")) else None
    statuses = args.status or replay.UNFINISHED
    t0 = time.perf_counter()
    reports = list(app._replayer().check(store or app.store, args.runs or None, statuses))
    took = time.perf_counter() - t0
    if args.json:
        ctx.print(fmt.codec_json_text([_data(r) for r in reports]))
    else:
        shown = reports if args.all or args.runs else [r for r in reports if not r.ok]
        if shown:
            ctx.print(_table(shown))
        ctx.print(_summary(reports))
    print(f"checked {fmt.plural(len(reports), 'run')} in {took:.2f} s", file=sys.stderr)
    return 0 if all(r.ok for r in reports) else 1


def _data(r: ReplayReport) -> dict[str, Any]:
    data = asdict(r)
    data["differs"] = {k: list(v) for k, v in r.differs.items()}
    data["unreached"] = list(r.unreached)
    return data


def _table(reports: Sequence[ReplayReport]) -> str:
    rows = [
        (
            r.run_id,
            r.agent,
            r.status,
            _WOULD[r.outcome],
            r.position or "",
            r.recorded or "",
            _found(r),
        )
        for r in reports
    ]
    return fmt.table(("RUN", "AGENT", "STATUS", "WOULD", "AT", "RECORDED", "FOUND"), rows, "AT")


def _found(r: ReplayReport) -> str:
    if r.outcome == FAILS:
        err = r.error or {}
        return fmt.short(f"{err.get('type')}: {err.get('message')}", 60)
    return str(r.found or "")


def _summary(reports: Sequence[ReplayReport]) -> str:
    n = Counter(r.outcome for r in reports)
    parts = [f"{n[o]} would {_WOULD[o].lower()}" for o in (FINISHED, CONTINUES, DIVERGES, FAILS)]
    return f"{fmt.plural(len(reports), 'run')}: " + ", ".join(parts)


COMMANDS = (
    Command(
        "check",
        "replay unfinished runs against the current code (before a deploy)",
        _arguments,
        _check,
        "Replays each run (the ones named, else every queued, running, waiting and blocked "
        "run) against the agents of --app from the log alone: no step, model or tool runs "
        "and nothing is written (PostgreSQL is read in read-only sessions). Lists the runs "
        "that would block (the position, the recorded and the found step) or fail (--all: "
        "every run, and whether it would finish or continue). Exit status 1 when any "
        "would block or fail: run it in CI before a deploy (docs/deploys.md).",
    ),
)
