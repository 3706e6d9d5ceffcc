"""``tether runs|show|costs|log|resume|retry``: read runs and execute them again."""

from __future__ import annotations

import argparse
import dataclasses

import tether
from tether.cli import check, live, tree
from tether.cli import format as fmt
from tether.cli.arguments import positive_int, positive_seconds, whole_number
from tether.cli.context import Command, Context
from tether.engine.contracts import in_force
from tether.model.status import STATUSES, RunStatus
from tether.scoped import ScopedApp
from tether.services import workers
from tether.store import RunCount, RunRecord

# -- runs ---------------------------------------------------------------------------


def _runs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--status", choices=STATUSES, help="only runs with this status")
    parser.add_argument("--agent", help="only runs of this agent")
    parser.add_argument(
        "--version", help="only runs of this version of their agent (@app.agent(version=...))"
    )
    parser.add_argument("--queue", help="only runs started in this queue")
    parser.add_argument("--session", help="only runs of this session")
    parser.add_argument("--text", help="only runs whose id or agent starts with this text")
    parser.add_argument(
        "--limit", type=positive_int, default=20, help="at most this many (default 20)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--needs-patch",
        metavar="NAME",
        help="list the runs in flight that rely on run.patched(NAME), replaying each with "
        "the code of --app (no other filter but --agent applies): none left, the patch can "
        "be retired",
    )
    parser.add_argument(
        "--count",
        action="store_true",
        help="count the runs (all of them, not --limit) by agent, version and status instead "
        "of listing them: which versions still have runs in flight",
    )
    parser.add_argument(
        "--tree",
        action="store_true",
        help="show each run with its child runs indented under it, and the usage and cost "
        "of its whole tree (child runs are listed under their parent only)",
    )
    parser.add_argument(
        "--watch",
        action="store_true",
        help="redraw the list every --interval seconds until Ctrl-C (not on a terminal: "
        "print it again each time it changes)",
    )
    _interval_argument(parser, 2.0)


def _interval_argument(parser: argparse.ArgumentParser, default: float) -> None:
    parser.add_argument(
        "--interval",
        type=positive_seconds,
        default=default,
        metavar="SECONDS",
        help=f"seconds between two reads of the database (default {default:g})",
    )


def _runs(args: argparse.Namespace, ctx: Context) -> int:
    if args.needs_patch is not None:
        ctx.print(check.needs_patch(ctx, args.needs_patch, args.agent))
        return 0
    app = ctx.read_view()
    if args.watch:
        return live.watch(
            ctx, lambda: _runs_text(args, app), interval=args.interval, title="tether runs"
        )
    ctx.print(_runs_text(args, app))
    return 0


def _runs_text(args: argparse.Namespace, app: ScopedApp) -> str:
    filters = {
        "queue": args.queue,
        "session": args.session,
        "text": args.text,
        "version": args.version,
    }
    if args.count:
        counts = app.count_runs(status=args.status, agent=args.agent, **filters)
        return _counts_text(counts, args) + _unserved_text(app, counts, args)
    records = app.runs(status=args.status, agent=args.agent, limit=args.limit, **filters)
    if args.tree:
        trees = tree.tree_rows(app, records)
        if args.json:
            return fmt.json_text(trees)
        return tree.tree_table(trees) if trees else "no runs"
    expected = _Expected(app)
    rows = [_summary_of(app, r, expected) for r in records]
    if args.json:
        return fmt.json_text(rows)
    if not rows:
        narrowed = args.status or args.agent or any(filters.values())
        return "no runs" + (" match" if narrowed else " yet")
    return fmt.runs_table(rows)


def _counts_text(counts: list[RunCount], args: argparse.Namespace) -> str:
    if args.json:
        return fmt.json_text([dataclasses.asdict(c) for c in counts])
    if not counts:
        return "no runs"
    rows = [(c.agent, c.version or "-", c.status, c.runs) for c in counts]
    total = sum(c.runs for c in counts)
    table = fmt.table(("AGENT", "VERSION", "STATUS", "RUNS"), rows, "RUNS")
    return f"{table}\n{fmt.plural(total, 'run')}"


def _unserved_text(app: ScopedApp, counts: list[RunCount], args: argparse.Namespace) -> str:
    """A line per agent version whose unfinished runs no live worker serves."""
    if args.json:
        return ""
    core = app.app
    found = workers.unserved(core.store.list_workers(), counts, core.clock.now(), core.lease_ttl)
    return "".join(
        f"\nno live worker serves {agent}@{version or '(no version)'} ({fmt.plural(n, 'run')} "
        f"in flight): they wait for a worker with that version's code (docs/deploys.md)"
        for agent, version, n in found
    )


def _summary_of(app: ScopedApp, record: RunRecord, expected: _Expected) -> dict[str, object]:
    """``run_summary``, or for a damaged run what its row says (status ``damaged``)."""
    try:
        return fmt.run_summary(record, app.get(record.id), expected(record))
    except tether.RunDamaged:
        return fmt.damaged_summary(record)


class _Expected:
    """How many positions the newest completed run of a run's agent and version had
    (looked up once per agent and version)."""

    def __init__(self, app: ScopedApp) -> None:
        self.app = app
        self.known: dict[tuple[str, str | None], int | None] = {}

    def __call__(self, record: RunRecord) -> int | None:
        key = (record.agent, record.version)
        if key not in self.known:
            self.known[key] = self._look_up(record)
        return self.known[key]

    def _look_up(self, record: RunRecord) -> int | None:
        done = [
            r
            for r in self.app.runs(status=RunStatus.COMPLETED, agent=record.agent, limit=20)
            if r.version == record.version
        ]
        try:
            return len(self.app.get(done[0].id).steps) if done else None
        except tether.RunDamaged:
            return None


# -- show ---------------------------------------------------------------------------


def _show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument("--traceback", action="store_true", help="print the failure's traceback")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _show(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.read_view()
    record = app.record(args.run)
    try:
        state = app.get(args.run)
    except tether.RunDamaged as e:
        return _show_damaged(ctx, record, e, args.json)
    kids = tree.child_rows(app, record, state) if state.steps or record.lease_owner else []
    if args.json:
        details = fmt.run_details(record, state) | {"children": kids}
        ctx.print(fmt.json_text(details | tree.handoff_data(state)))
        return 0
    ctx.print(fmt.header_text(record, state, _Expected(app)(record)))
    if handed := tree.handoff_text(state):
        ctx.print(handed)
    if state.blocked:
        ctx.print(fmt.blocked_text(state.blocked, record))
    if state.failure:
        ctx.print(fmt.failure_text(state.failure, record.id, args.traceback))
    if state.steps:
        ctx.print()
        ctx.print(fmt.steps_table(state.steps, state.reverts))
    if contracts := _contracts_text(ctx, state):
        ctx.print()
        ctx.print(contracts)
    if kids:
        ctx.print()
        ctx.print(tree.children_text(kids))
    return 0


def _contracts_text(ctx: Context, state: tether.RunState) -> str:
    """The verdicts on the run's tool calls; with --app, the contracts in force too."""
    forced = []
    if ctx.app_ref:
        app = ctx.app()
        forced = in_force(app.policy, app.tools())
    return fmt.contracts_text(state.steps, forced) if forced or state.steps else ""


def _show_damaged(ctx: Context, record: RunRecord, e: tether.RunDamaged, as_json: bool) -> int:
    """What the row says of a run whose log is damaged, and the damage (exit 1)."""
    if as_json:
        missing = [list(r) for r in e.missing]
        ctx.print(
            fmt.json_text(
                {"id": record.id, "agent": record.agent, "status": "damaged"}
                | {"row_status": record.status, "damage": str(e), "missing": missing}
            )
        )
        return 1
    ctx.print(fmt.damaged_text(record, str(e)))
    return 1


# -- log ----------------------------------------------------------------------------


def _log_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument(
        "--after", type=whole_number(), default=0, metavar="N", help="only events with seq > N"
    )
    parser.add_argument("--json", action="store_true", help="print the full events as JSON lines")
    parser.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing events as any process writes them, until the run ends (exit 0) "
        "or Ctrl-C (exit 130)",
    )
    _interval_argument(parser, 0.2)


def _log(args: argparse.Namespace, ctx: Context) -> int:
    view = ctx.read_view()
    if args.follow:
        return live.follow(
            ctx, view, args.run, after=args.after, as_json=args.json, interval=args.interval
        )
    events = view.events(args.run, after=args.after)
    if args.json:
        for e in events:
            ctx.print(fmt.event_line(e))
        return 0
    ctx.print(fmt.events_table(events))
    return 0


# -- resume and retry -----------------------------------------------------------------


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")


def _resume(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.view()
    before = app.get(args.run)
    handle = app.resume(args.run)
    if before.status in (RunStatus.COMPLETED, RunStatus.CANCELLED):
        ctx.print(f"run {handle.id} is already {handle.status}; nothing to resume")
    ctx.print(fmt.handle_report(app.get(handle.id), handle))
    return 0


def _retry_arguments(parser: argparse.ArgumentParser) -> None:
    _run_arguments(parser)
    parser.add_argument(
        "--here",
        action="store_true",
        help="execute it in this process even if it was started in a queue",
    )


def _retry(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.view()
    record = app.record(args.run)
    queue = record.queue
    if queue is None or args.here:
        handle = app.retry_run(args.run, in_queue=False)
        ctx.print(fmt.handle_report(app.get(handle.id), handle))
        return 0
    handle = app.retry_run(args.run, in_queue=True)
    what = "retries it from its failed step"
    if record.status == RunStatus.BLOCKED:
        what = "goes on with it (blocked again if its code still differs from its log)"
    ctx.print(
        f"run {handle.id} is queued again in {queue!r}: a worker of that queue {what} "
        f"(`tether retry {handle.id} --here` executes it in this process)"
    )
    return 0


def _costs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--by", choices=("agent", "session"), default="agent", help="sum per (default: agent)"
    )
    parser.add_argument("--agent", help="only runs of this agent")
    parser.add_argument("--session", help="only runs of this session")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _costs(args: argparse.Namespace, ctx: Context) -> int:
    found = ctx.read_view().costs(by=args.by, agent=args.agent, session=args.session)
    rows = [dataclasses.asdict(t) for t in found]
    if args.json:
        ctx.print(fmt.json_text(rows))
    elif not rows:
        ctx.print("no model calls" + (" match" if args.agent or args.session else " yet"))
    else:
        ctx.print(fmt.costs_table(args.by, rows))
    return 0


COMMANDS = (
    Command(
        "runs",
        "list runs, newest first",
        _runs_arguments,
        _runs,
        "Lists runs with their status and position (e.g. 'step 6 of 9, 1–5 committed'). "
        "'running (stalled)' means no live process holds the run: resume it. 'blocked' "
        "means its agent's code no longer matches its log: `tether show RUN` says where.",
    ),
    Command(
        "show",
        "show one run: status, position, failure, usage, vars, steps",
        _show_arguments,
        _show,
        "Shows a run's status, agent, position, usage totals, task variables and decisions, "
        "its failure (type, message, step, position; the traceback with --traceback) and a "
        "table of its steps: position, kind, name, status, attempts, duration, tokens, cost; "
        "then the verdicts of its tools' contracts (the rules that judged each call) and, "
        "with --app, the contracts in force (docs/contracts.md).",
    ),
    Command(
        "costs",
        "what model calls cost, per agent or per session",
        _costs_arguments,
        _costs,
        "Sums the usage of the runs' model calls (cost, tokens, calls, runs) per agent or "
        "per session, costliest first. A cost is the one the model reported, or the one "
        "computed from the app's prices when the call was made (see docs/budgets.md).",
    ),
    Command(
        "log",
        "print a run's events (its append-only log)",
        _log_arguments,
        _log,
        "Prints a run's events in order: seq, time, type and a summary of the data. "
        "--json prints each full event as one JSON line.",
    ),
    Command(
        "resume",
        "continue a stopped run: committed steps are reused, the rest run",
        _run_arguments,
        _resume,
        "Continues a run that stopped (its process died, or was interrupted). The agent's "
        "code is found through --app, or else where the run recorded it (module and file).",
    ),
    Command(
        "retry",
        "execute a failed (or blocked) run again from where it stopped",
        _retry_arguments,
        _retry,
        "Executes a failed run again; its committed steps are reused from the journal. A "
        "blocked run (its code changed under it) goes on the same way once its code is "
        "restored or patched. A run started in a queue (app.start) goes back to that queue, "
        "where a worker retries it; --here executes it in this process instead.",
    ),
)
