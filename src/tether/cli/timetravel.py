"""``tether history|state|diff|fork``: the log as a debugger, on the command line.

A *step* on the command line is a position (``6``), a name (``plan``: its first match)
or ``name#k`` (the k-th step of that name); a number that is also a step's name is
refused as ambiguous. A *point* for ``diff`` is ``RUN`` (its head), ``RUN@SEQ``,
``RUN:STEP`` (after the step) or ``RUN:STEP:before``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tether.cli import format as fmt
from tether.cli import travel_text
from tether.cli.arguments import whole_number
from tether.cli.context import Command, CommandError, Context, user_errors
from tether.model.state import RunState, to_data
from tether.scoped import ScopedApp
from tether.services.timetravel import StepRef


def _step_arg(app: ScopedApp, run_id: str, text: str) -> StepRef:
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


def _state_of(app: ScopedApp, run_id: str, args: argparse.Namespace) -> RunState:
    step = _step_arg(app, run_id, args.step) if args.step is not None else None
    with user_errors():
        return app.state(run_id, at=args.at, step=step, when=args.when)


# -- history ------------------------------------------------------------------------


def _history_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _history(args: argparse.Namespace, ctx: Context) -> int:
    h = ctx.read_view().history(args.run)
    if args.json:
        ctx.print(fmt.codec_json_text(travel_text.history_data(h)))
        return 0
    ctx.print(travel_text.history_text(h))
    return 0


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
    state = _state_of(ctx.read_view(), args.run, args)
    if args.json:
        ctx.print(fmt.codec_json_text(to_data(state)))
        return 0
    ctx.print(travel_text.state_text(state))
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
    parser.add_argument(
        "--files",
        action="store_true",
        help="compare the runs' workspace files instead: added, removed, modified, sizes",
    )


def _diff(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.read_view()
    if args.files:
        return _files_diff(args, ctx, app)
    d = app.diff(point_state(app, args.a), point_state(app, args.b), bookkeeping=args.all)
    if args.json:
        ctx.print(fmt.codec_json_text(d.to_data()))
    else:
        ctx.print(travel_text.render_diff(d))
    return 1 if args.exit_code and d else 0


def _files_diff(args: argparse.Namespace, ctx: Context, app: ScopedApp) -> int:
    with user_errors():
        changes = app.workspace_diff(point_state(app, args.a), point_state(app, args.b))
    if args.json:
        ctx.print(fmt.codec_json_text([c._asdict() for c in changes]))
    else:
        ctx.print(travel_text.render_files_diff(changes))
    return 1 if args.exit_code and changes else 0


def point_state(app: ScopedApp, point: str) -> RunState:
    """The state ``RUN``, ``RUN@SEQ``, ``RUN:STEP`` or ``RUN:STEP:before`` names."""
    run_id, sep, seq = point.partition("@")
    if sep:
        if not seq.isdigit():
            raise CommandError(f"{point!r}: after @ comes a seq (a number)", 2)
        with user_errors():
            return app.state(run_id, at=int(seq))
    run_id, sep, step = point.partition(":")
    if not sep:
        return app.load(run_id)
    name, colon, moment = step.rpartition(":")
    if not colon or moment not in ("before", "after"):
        name, moment = step, "after"
    with user_errors():
        return app.state(
            run_id,
            step=_step_arg(app, run_id, name),
            when="before" if moment == "before" else "after",
        )


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
    parser.add_argument(
        "--workspace",
        metavar="DIR",
        help="a new (or empty) directory: gets the run's workspace files at the fork point, "
        "and the fork works in it",
    )
    parser.add_argument("--json", action="store_true", help='print {"id": NEW_RUN_ID, …}')


def _fork(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.view()
    step = _step_arg(app, args.run, args.step) if args.step is not None else None
    with user_errors():
        new_id = app.fork(
            args.run,
            at=args.at,
            step=step,
            when=args.when,
            input=_json_arg("--input", args.input),
            vars=_vars_arg(args.var),
            workspace=args.workspace,
        )
    state = app.load(new_id)
    if args.json:
        ctx.print(
            fmt.codec_json_text(
                {
                    "id": new_id,
                    "parent": args.run,
                    "seq": state.fork_seq,
                    "position": state.fork_position,
                }
            )
        )
        return 0
    ctx.print(new_id)
    queue = app.record(new_id).queue
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
)
