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
from tether.model import inputs
from tether.services import replay
from tether.store.urls import is_postgres

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


def _replays(
    ctx: Context, what: str, runs: Sequence[str] | None, statuses: Sequence[str]
) -> list[ReplayReport]:
    """The dry replays of ``runs`` (else of the runs in ``statuses``) with --app's code."""
    app = ctx.require_admin(what)
    url = app.url or ""
    # PostgreSQL is read through a read-only session: a write would fail at once
    store = ctx.reader(url).store if is_postgres(url) else None
    return list(app._replayer().check(store or app.store, runs, statuses))


def needs_patch(ctx: Context, name: str, agent: str | None) -> str:
    """``tether runs --needs-patch NAME``: the runs in flight (of ``agent``) that rely on
    ``run.patched(NAME)``, found by replaying them with --app's code."""
    inputs.name(name, "--needs-patch")
    reports = _replays(ctx, "runs --needs-patch", None, replay.UNFINISHED)
    if agent is not None:
        reports = [r for r in reports if r.agent in (agent, "?")]
    found = [r for r in reports if name in r.patches]
    unknown = [r for r in reports if r.outcome == FAILS]
    lines = []
    if found:
        rows = [(r.run_id, r.agent, r.status, r.patches[name]) for r in found]
        lines.append(fmt.table(("RUN", "AGENT", "STATUS", "PATH"), rows))
        lines.append(
            f"{fmt.plural(len(found), 'run')} in flight need patch {name!r}: keep "
            f"run.patched({name!r}) until they finish"
        )
    else:
        lines.append(f"no run in flight needs patch {name!r}: it can be retired (docs/deploys.md)")
    if unknown:
        lines.append(
            f"{fmt.plural(len(unknown), 'run')} could not be replayed with this code, so "
            f"whether they need it is unknown: `tether check` lists them"
        )
    return "\n".join(lines)


def _check(args: argparse.Namespace, ctx: Context) -> int:
    statuses = args.status or replay.UNFINISHED
    t0 = time.perf_counter()
    reports = _replays(ctx, "check", args.runs or None, statuses)
    took = time.perf_counter() - t0
    if args.json:
        ctx.print(fmt.codec_json_text([_data(r) for r in reports]))
    else:
        shown = reports if args.all or args.runs else [r for r in reports if _listed(r)]
        if shown:
            ctx.print(_table(shown))
        ctx.print(_summary(reports))
    print(f"checked {fmt.plural(len(reports), 'run')} in {took:.2f} s", file=sys.stderr)
    return 0 if all(r.ok for r in reports) else 1


def _data(r: ReplayReport) -> dict[str, Any]:
    data = asdict(r)
    data["differs"] = {k: list(v) for k, v in r.differs.items()}
    data["unreached"] = list(r.unreached)
    data["patches"] = dict(r.patches)
    return data


def _listed(r: ReplayReport) -> bool:
    """Listed by default: a run that would block or fail, or needs a patch kept."""
    return not r.ok or bool(r.patches)


def _table(reports: Sequence[ReplayReport]) -> str:
    """The runs' table; the NEEDS PATCH column when a run relies on a patch."""
    patched = any(r.patches for r in reports)
    rows = [
        (
            r.run_id,
            r.agent,
            r.status,
            _WOULD[r.outcome],
            r.position or "",
            r.recorded or "",
            _found(r),
            *([", ".join(f"{n} ({how})" for n, how in sorted(r.patches.items()))] * patched),
        )
        for r in reports
    ]
    headers = ("RUN", "AGENT", "STATUS", "WOULD", "AT", "RECORDED", "FOUND")
    return fmt.table(headers + ("NEEDS PATCH",) * patched, rows, "AT")


def _found(r: ReplayReport) -> str:
    if r.outcome == FAILS:  # the error's class and message, less the run id shown
        err = r.error or {}
        message = str(err.get("message")).removeprefix(f"run {r.run_id}: ")
        return fmt.short(f"{str(err.get('type')).rpartition('.')[2]}: {message}", 80)
    return str(r.found or "")


def _summary(reports: Sequence[ReplayReport]) -> str:
    n = Counter(r.outcome for r in reports)
    parts = [f"{n[o]} would {_WOULD[o].lower()}" for o in (FINISHED, CONTINUES, DIVERGES, FAILS)]
    parts.append(f"{sum(1 for r in reports if r.patches)} would need a patch")
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
        "that would block (the position, the recorded and the found step) or fail, and "
        "those that would need a patch kept: they take the old path of a run.patched(NAME) "
        "or recorded its new one (--all: every run, and whether it would finish or "
        "continue). Exit status 1 when any "
        "would block or fail: run it in CI before a deploy (docs/deploys.md).",
    ),
)
