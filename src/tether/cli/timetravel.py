"""``tether history|state|diff|fork|export|import|gc``: the log as a debugger, on the CLI.

:mod:`tether.cli` imports this module and calls :func:`register`. A *step* on the
command line is a position (``6``), a name (``plan``: its first match) or ``name#k``
(the k-th step of that name); a number that is also a step's name is refused as
ambiguous. A *point* for ``diff`` is ``RUN`` (its head), ``RUN@SEQ``, ``RUN:STEP``
(after the step) or ``RUN:STEP:before``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import tether
from tether.cli.main import (
    Command,
    CommandError,
    Context,
    Subparsers,
    add_command,
    event_summary,
    short,
    status_line,
    table,
    when,
    whole_number,
)
from tether.model import codec, inputs
from tether.model.state import STATUSES, RunState, to_data
from tether.services.retention import BLOB_GRACE, parse_age
from tether.services.timetravel import Diff, History, StepRef


def _json_out(ctx: Context, value: Any) -> None:
    """Print plain JSON data (codec tags kept: tuples, sets, bytes… stay recognisable)."""
    ctx.print(json.dumps(codec.to_json_value(value), ensure_ascii=False, indent=2))


@contextmanager
def _user_errors() -> Iterator[None]:
    """Bad arguments and bad files are the user's to fix: one line, not a traceback."""
    try:
        yield
    except (ValueError, TypeError) as e:
        if isinstance(e, tether.TetherError):
            raise
        raise CommandError(str(e)) from None


def _step_arg(app: tether.App, run_id: str, text: str) -> StepRef:
    """A --step value: digits are a position, unless a step is also named so (ambiguous)."""
    if not text.isdigit():
        return text
    head = app.load(run_id)
    named = [s.position for s in head.steps if s.name == text]
    if not named or named == [int(text)]:
        return int(text)
    at = head.step(int(text))
    other = f"no step is at position {text}"
    if at is not None:
        nth = [s.position for s in head.steps if s.name == at.name].index(at.position) + 1
        other = f"position {text} is {at.name!r} ({at.name}#{nth} names it)"
    raise CommandError(
        f"--step {text} is ambiguous: {other}, and a step named {text!r} is at "
        f"position(s) {', '.join(map(str, named))} ({text}#1 names the first)"
    )


def _point_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--at", type=whole_number(), metavar="SEQ", help=f"{what} at this seq of the log"
    )
    group.add_argument(
        "--step",
        metavar="STEP",
        help=f"{what} at this step: a position, a name (first match) or name#k",
    )
    parser.add_argument(
        "--when",
        choices=("before", "after"),
        default="after",
        help="just before the step (or seq), or after it (default)",
    )


def _state_of(app: tether.App, run_id: str, args: argparse.Namespace) -> RunState:
    step = _step_arg(app, run_id, args.step) if args.step is not None else None
    with _user_errors():
        return app.state(run_id, at=args.at, step=step, when=args.when)


# -- history ------------------------------------------------------------------------


def _history_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _history(args: argparse.Namespace, ctx: Context) -> int:
    h = ctx.app().history(args.run)
    if args.json:
        _json_out(ctx, history_data(h))
        return 0
    lineage = f", forked from {h.run.parent_id} at seq {h.run.fork_seq}" if h.run.parent_id else ""
    ctx.print(
        f"run {h.run.id} ({h.run.agent}, {h.run.status}): {len(h.entries)} events, "
        f"{len(h.steps)} steps{lineage}"
    )
    rows = [
        [e.seq, when(e.at, date=False), e.type, e.position, event_summary(e.type, dict(e.data))]
        for e in h.entries
    ]
    ctx.print(table(["SEQ", "TIME", "TYPE", "POS", "SUMMARY"], rows, right="SEQ POS"))
    if h.steps:
        ctx.print()
        ctx.print(
            table(
                ["POS", "KIND", "NAME", "STATUS", "SEQ"],
                [[s.position, s.kind, s.name, s.status, s.seq] for s in h.steps],
                right="POS SEQ",
            )
        )
    return 0


def history_data(h: History) -> dict[str, Any]:
    """``history --json``: the run row, the events (decoded) and the steps with their seq."""
    return {
        "run": {
            "id": h.run.id,
            "agent": h.run.agent,
            "status": h.run.status,
            "parent_id": h.run.parent_id,
            "fork_seq": h.run.fork_seq,
        },
        "events": [
            {
                "seq": e.seq,
                "type": e.type,
                "at": e.at,
                "actor": e.actor,
                "position": e.position,
                "name": e.name,
                "data": e.data,
            }
            for e in h.entries
        ],
        "steps": [
            {
                "position": s.position,
                "kind": s.kind,
                "name": s.name,
                "status": s.status,
                "seq": s.seq,
            }
            for s in h.steps
        ],
    }


# -- state --------------------------------------------------------------------------


def _state_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    _point_arguments(parser, "the state")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the whole state as JSON (tether.model.state.to_data)",
    )


def _state(args: argparse.Namespace, ctx: Context) -> int:
    state = _state_of(ctx.app(), args.run, args)
    if args.json:
        _json_out(ctx, to_data(state))
        return 0
    fields = [
        ("run", state.run_id),
        ("seq", str(state.seq)),
        ("status", status_line(state)),
        ("input", short(state.input)),
        ("output", short(state.output)),
    ]
    fields += [("var", f"{k} = {short(v)}") for k, v in state.vars.items()]
    if state.failure:
        fields.append(("failure", f"{state.failure.get('type')}: {state.failure.get('message')}"))
    ctx.print("\n".join(f"{k:<8} {v}" for k, v in fields))
    if state.steps:
        ctx.print()
        rows = [
            [s.position, s.kind, s.name, s.status, s.seq, short(s.output, 60)] for s in state.steps
        ]
        ctx.print(table(["POS", "KIND", "NAME", "STATUS", "SEQ", "OUTPUT"], rows, right="POS SEQ"))
    return 0


# -- diff ---------------------------------------------------------------------------


def _diff_arguments(parser: argparse.ArgumentParser) -> None:
    point = "RUN, RUN@SEQ, RUN:STEP or RUN:STEP:before"
    parser.add_argument("a", help=f"the first state: {point}")
    parser.add_argument("b", help=f"the second state: {point}")
    parser.add_argument(
        "--json", action="store_true", help="print {added, removed, changed} as JSON"
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="also compare bookkeeping (ids, seqs, timestamps, tracebacks)",
    )
    parser.add_argument(
        "--exit-code",
        action="store_true",
        help="exit with 1 when the states differ (like git diff --exit-code)",
    )


def _diff(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.app()
    d = app.diff(point_state(app, args.a), point_state(app, args.b), bookkeeping=args.all)
    if args.json:
        _json_out(ctx, d.to_data())
    else:
        ctx.print(render_diff(d))
    return 1 if args.exit_code and d else 0


def point_state(app: tether.App, point: str) -> RunState:
    """The state ``RUN``, ``RUN@SEQ``, ``RUN:STEP`` or ``RUN:STEP:before`` names."""
    run_id, sep, seq = point.partition("@")
    if sep:
        if not seq.isdigit():
            raise CommandError(f"{point!r}: after @ comes a seq (a number)", 2)
        with _user_errors():
            return app.state(run_id, at=int(seq))
    run_id, sep, step = point.partition(":")
    if not sep:
        return app.load(run_id)
    name, colon, moment = step.rpartition(":")
    if not colon or moment not in ("before", "after"):
        name, moment = step, "after"
    with _user_errors():
        return app.state(
            run_id,
            step=_step_arg(app, run_id, name),
            when="before" if moment == "before" else "after",
        )


def render_diff(d: Diff) -> str:
    """The diff for people: one line per change, ``~`` changed, ``+`` added, ``-`` removed."""
    counts = ", ".join(f"{len(d.of(k))} {k}" for k in ("changed", "added", "removed"))
    lines = [f"--- {d.a}", f"+++ {d.b}", "same state" if not d else counts]
    for c in d.changes:
        if c.kind == "changed":
            lines.append(f"~ {c.where}: {short(c.old, 60)} -> {short(c.new, 60)}")
        else:
            sign, value = ("+", c.new) if c.kind == "added" else ("-", c.old)
            lines.append(f"{sign} {c.where}: {short(value, 100)}")
    return "\n".join(lines)


# -- fork ---------------------------------------------------------------------------


def _fork_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run to fork")
    _point_arguments(parser, "fork")
    parser.add_argument(
        "--input", metavar="JSON", help='new input: {"args": [...], "kwargs": {...}}'
    )
    parser.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="set a task variable in the fork (repeatable; a value that is "
        "not JSON is taken as a string)",
    )
    parser.add_argument("--json", action="store_true", help='print {"id": NEW_RUN_ID, …}')


def _fork(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.app()
    step = _step_arg(app, args.run, args.step) if args.step is not None else None
    with _user_errors():
        new_id = app.fork(
            args.run,
            at=args.at,
            step=step,
            when=args.when,
            input=_json_arg("--input", args.input),
            vars=_vars_arg(args.var),
        )
    state = app.load(new_id)
    if args.json:
        _json_out(
            ctx,
            {
                "id": new_id,
                "parent": args.run,
                "seq": state.fork_seq,
                "position": state.fork_position,
            },
        )
        return 0
    ctx.print(new_id)
    queue = app.store.get_run(new_id).queue
    runs = (
        f"a worker of queue {queue!r} runs it (`tether resume {new_id}` runs it here)"
        if queue is not None
        else f"run it with `tether resume {new_id}`"
    )
    print(
        f"forked {args.run} at seq {state.fork_seq} (positions 1–{state.fork_position} "
        f"are reused); {runs}",
        file=sys.stderr,
    )
    return 0


def _json_arg(flag: str, text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as e:
        raise CommandError(f"{flag} is JSON: {e}", 2) from None


def _vars_arg(items: list[str]) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise CommandError(f"--var takes NAME=JSON, not {item!r}", 2)
        try:
            out[name] = json.loads(text)
        except ValueError:
            out[name] = text
    return out or None


# -- export and import --------------------------------------------------------------


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE instead of standard output"
    )


def _export(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.app()
    if args.output is None:
        app.export_run(args.run, ctx.out)
        return 0
    app.store.get_run(inputs.lookup_id(args.run))  # an unknown run leaves no empty file
    try:
        f = open(args.output, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as e:
        raise CommandError(f"cannot write {args.output}: {e.strerror}") from None
    with f:
        n = app.export_run(args.run, f)
    print(f"exported run {args.run} ({n} events) to {args.output}", file=sys.stderr)
    return 0


def _import_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a `tether export` file (- for standard input)")
    parser.add_argument(
        "--new-id",
        action="store_true",
        help="give the run a fresh id (else the exported id, refused if taken)",
    )
    parser.add_argument("--json", action="store_true", help='print {"id": RUN_ID}')


def _import(args: argparse.Namespace, ctx: Context) -> int:
    app = _app_creating(ctx)
    source = "<stdin>" if args.file == "-" else args.file
    with _user_errors(), _opened(args.file) as f:
        run_id = app.import_run(f, new_id=args.new_id, source=source)
    if args.json:
        _json_out(ctx, {"id": run_id})
    else:
        ctx.print(run_id)
    return 0


@contextmanager
def _opened(path: str) -> Iterator[TextIO]:
    if path == "-":
        yield sys.stdin
        return
    try:
        f = open(path, encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as e:
        raise CommandError(f"cannot read {path}: {e.strerror}") from None
    with f:
        yield f


def _app_creating(ctx: Context) -> tether.App:
    """``import`` may be the first thing a new database receives: create it if needed."""
    return ctx.app(create=True)


# -- gc -----------------------------------------------------------------------------


def _gc_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--older-than",
        metavar="AGE",
        type=_age,
        help="only runs last changed longer ago than AGE: 90s, 15m, 12h, 30d, 2w",
    )
    parser.add_argument(
        "--status",
        action="append",
        default=[],
        choices=STATUSES,
        help="only runs with this status (repeatable; default: completed, failed and cancelled)",
    )
    parser.add_argument(
        "--keep-last",
        type=whole_number(),
        metavar="N",
        help="always keep the N newest runs of each agent",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list what would be deleted; delete nothing"
    )
    parser.add_argument(
        "--blob-grace",
        metavar="AGE",
        type=_age,
        default=BLOB_GRACE,
        help="keep unreferenced snapshot pages written or reused within AGE (default 1h)",
    )
    parser.add_argument(
        "--no-vacuum",
        action="store_true",
        help="do not give the space back to the file system afterwards",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _age(text: str) -> float:
    try:
        return parse_age(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _gc(args: argparse.Namespace, ctx: Context) -> int:
    with _user_errors():
        result = ctx.app().gc(
            older_than=args.older_than,
            status=args.status,
            keep_last=args.keep_last,
            dry_run=args.dry_run,
            vacuum=not args.no_vacuum,
            blob_grace=args.blob_grace,
        )
    if args.json:
        _json_out(
            ctx,
            {
                "runs": list(result.run_ids),
                "deleted": result.deleted,
                "dry_run": result.dry_run,
                "bytes_before": result.bytes_before,
                "bytes_after": result.bytes_after,
                "bytes_freed": result.freed,
                "pages_swept": result.pages,
                "page_bytes_swept": result.page_bytes,
            },
        )
        return 0
    verb = "would delete" if result.dry_run else "deleted"
    count = len(result.run_ids) if result.dry_run else result.deleted
    ctx.print(
        f"{verb} {count} run(s)"
        + "".join(f"\n  {r}" for r in result.run_ids[:50])
        + (f"\n  … and {len(result.run_ids) - 50} more" if len(result.run_ids) > 50 else "")
    )
    if result.pages or result.dry_run:
        ctx.print(
            f"{'would sweep' if result.dry_run else 'swept'} {result.pages} unreferenced "
            f"snapshot page(s), {result.page_bytes} bytes"
            + (" (pages of the runs above not counted)" if result.dry_run else "")
        )
    if not result.dry_run and result.freed is not None:
        ctx.print(
            f"database: {result.bytes_before} -> {result.bytes_after} bytes ({result.freed} freed)"
        )
    return 0


# -- registration -------------------------------------------------------------------

COMMANDS = (
    Command(
        "history",
        "a run's events and steps, each with its seq",
        _history_arguments,
        _history,
        "Prints every event of the run's log with its seq, the position and "
        "name of the step it belongs to, then the steps with the seq that last changed "
        "each (the seq to give state, diff or fork).",
    ),
    Command(
        "state",
        "the exact state of a run at a seq or a step",
        _state_arguments,
        _state,
        "The state at --at SEQ or --step STEP (after it, or --when before), loaded from "
        "the nearest snapshot and the events after it; the head without a point.",
    ),
    Command(
        "diff",
        "what differs between two states (two points, or two branches)",
        _diff_arguments,
        _diff,
        "Compares two states: of one run at two points (RUN@5 RUN@9) or of two runs, such "
        "as a run and its fork, at their heads or at chosen points. Lists changed, added "
        "and removed paths (steps[7].output, vars.tone) with old and new values. Ignores "
        "bookkeeping that always differs (ids, seqs, timestamps, tracebacks) unless --all.",
    ),
    Command(
        "fork",
        "branch a new run off a run at a step or seq, with new input or vars",
        _fork_arguments,
        _fork,
        "Creates a new queued run whose log is a copy of RUN's events up to the point "
        "(default: its head; --step N: after step N), then a run.forked event with the "
        "new --input and --var edits. `tether resume NEW_ID` reuses every step completed "
        "at the fork point and runs the rest. RUN is not changed, even while it runs.",
    ),
    Command(
        "export",
        "write a run (its row and every event) as JSON lines",
        _export_arguments,
        _export,
        "Writes a tether-run (format 1) file: a header line with the run's row, then one "
        "line per event (seq, type, data, at, actor). `tether import` reads it back.",
    ),
    Command(
        "import",
        "create a run from a `tether export` file",
        _import_arguments,
        _import,
        "Creates the run with its exported id (refused if taken; --new-id for a fresh "
        "one) and its events, after checking the header, the format version and that the "
        "seqs are contiguous. Creates the database if it does not exist.",
    ),
    Command(
        "gc",
        "delete old runs (by age, status, keep-last) and give the space back",
        _gc_arguments,
        _gc,
        "Deletes runs with their events, snapshots and effects, then VACUUMs. Needs at "
        "least one of --older-than, --status, --keep-last; without --status it only "
        "collects finished runs, and never a run a live process holds. Forks do not "
        "depend on their parent (they copy its prefix), so deleting a parent is safe.",
    ),
)


def register(subparsers: Subparsers) -> None:
    """Add history, state, diff, fork, export, import and gc to ``tether``."""
    for command in COMMANDS:
        add_command(subparsers, command)
