"""``tether approve|deny|signal|resolve|cancel|revert|budget|audit``: people and the outside
world deciding for runs (see :mod:`tether.engine.waits`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tether.cli import format as fmt
from tether.cli.arguments import whole_number
from tether.cli.context import Command, CommandError, Context
from tether.errors import NotFound, RevertRefused
from tether.model import codec
from tether.model.status import RunStatus
from tether.scoped import ScopedApp
from tether.services.control import NO_RESULT
from tether.services.worker import CANCEL_POLL


def _decision_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument("name", help="the approval's name (as in run.approve(NAME, …))")
    parser.add_argument(
        "--by",
        help="who decides: a person among the approvers, never a group (required without "
        "--token; with one, the token's name is recorded and a differing --by is refused)",
    )
    parser.add_argument("--reason", help="why, kept in the run's log")


def _goes_on(app: ScopedApp, run_id: str) -> str:
    """Who resumes a run a decision woke: a worker of its queue, or `tether resume`."""
    record = app.record(run_id)
    if record.status != RunStatus.QUEUED:
        return f"it is {record.status}"
    if record.queue is not None:
        return f"a worker of queue {record.queue!r} resumes it"
    return f"`tether resume {run_id}` goes on"


def _approve(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.view()
    app.approve(args.run, args.name, by=args.by, reason=args.reason)
    ctx.print(f"approved {args.name!r} on run {args.run}; {_goes_on(app, args.run)}")
    return 0


def _deny(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.view()
    app.deny(args.run, args.name, by=args.by, reason=args.reason)
    ctx.print(
        f"denied {args.name!r} on run {args.run}; {_goes_on(app, args.run)}, and "
        f"ApprovalDenied is raised in it"
    )
    return 0


def _payload(text: str | None, what: str = "the payload") -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise CommandError(f"{what} must be JSON ({e}); quote strings: '\"text\"'", 2) from None


def _signal_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument("name", help="the signal's name (as in run.wait(NAME))")
    parser.add_argument("payload", nargs="?", help="a JSON payload (default: null)")
    parser.add_argument("--sender", help="who sends it, kept with the signal")


def _signal(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.view()
    woke = app.signal(args.run, args.name, _payload(args.payload), sender=args.sender)
    state = "kept for its wait"
    if woke:
        state = f"the run was waiting for it; {_goes_on(app, args.run)}"
    ctx.print(f"signal {args.name!r} sent to run {args.run}: {state}")
    return 0


def _resolve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--happened",
        action="store_true",
        help="the tool call did happen: give --result, unless the tool returns nothing",
    )
    which.add_argument(
        "--not-happened", action="store_true", help="the tool call did not happen: call it again"
    )
    parser.add_argument(
        "--result",
        help="the call's result as JSON, as the service reports it (with --happened; "
        "'null' if it returned nothing); the run goes on with it",
    )
    parser.add_argument(
        "--by", help="who settles it (required without --token; with one: the token's name)"
    )


def _resolve(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.view()
    if args.not_happened and args.result is not None:
        raise CommandError("--result goes with --happened: a call that did not happen has none")
    result = NO_RESULT if args.result is None else _payload(args.result, "--result")
    app.resolve(args.run, happened=args.happened, by=args.by, result=result)
    verdict = "happened" if args.happened else "did not happen (it will be called again)"
    ctx.print(f"run {args.run}: the call in doubt {verdict}; {_goes_on(app, args.run)}")
    return 0


def _cancel_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument(
        "--compensate",
        action="store_true",
        help="first undo its completed write tools, newest first",
    )
    parser.add_argument("--by", help="who cancels")
    parser.add_argument("--reason", help="why")


def _cancel(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.view()
    handle = app.cancel(args.run, compensate=args.compensate, by=args.by, reason=args.reason)
    if handle.status == RunStatus.RUNNING:  # executing in another process: a request
        holder = app.record(args.run).lease_owner or "another process"
        undo = ", after undoing its completed write tools" if args.compensate else ""
        ctx.print(
            f"run {args.run} is executing in {holder}: asked to cancel. It stops at its next "
            f"step (that process looks every {CANCEL_POLL:g} s) and ends cancelled{undo}; a "
            f"run that finishes first stays finished (`tether show {args.run}` tells)."
        )
        return 0
    ctx.print(fmt.handle_report(app.get(handle.id), handle))
    return 0


def _revert_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument(
        "--step",
        type=whole_number(1),
        required=True,
        metavar="N",
        help="the position of the completed write-tool call to undo (`tether show RUN`)",
    )
    parser.add_argument(
        "--by", help="who reverts (required without --token; with one: the token's name)"
    )
    parser.add_argument("--reason", help="why, kept in the run's log")
    doubt = parser.add_mutually_exclusive_group()
    doubt.add_argument(
        "--happened",
        action="store_true",
        help="an undo a crash interrupted did run: record the revert, do not call it again",
    )
    doubt.add_argument(
        "--not-happened",
        action="store_true",
        help="an undo a crash interrupted did not run: call it again",
    )


def _revert(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.view()
    happened = True if args.happened else False if args.not_happened else None
    try:
        r = app.revert(args.run, step=args.step, by=args.by, reason=args.reason, happened=happened)
    except (RevertRefused, NotFound) as e:  # refused, nothing written: exit 2, as usage
        raise CommandError(str(e), 2) from None
    how = "finished the revert a crash interrupted" if r.resumed else "reverted"
    ctx.print(
        f"run {r.run_id}: step {r.position} ({r.tool}) {how}, by {r.by} (undo key {r.key}); "
        f"the rest of the run is as it was (`tether history {r.run_id}` shows the revert)"
    )
    return 0


def _budget_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id (waiting on its budget)")
    parser.add_argument(
        "--add",
        action="append",
        required=True,
        metavar="LIMIT=AMOUNT",
        help="raise a limit by AMOUNT: steps, model_calls, tokens (whole numbers), cost "
        "(a number), duration (seconds or 10m); repeat for several",
    )
    parser.add_argument(
        "--by", help="who raises it (required without --token; with one: the token's name)"
    )
    parser.add_argument("--reason", help="why, kept in the run's log")


def _amount(item: str) -> tuple[str, Any]:
    name, sep, text = item.partition("=")
    if not sep or not name or not text:
        raise CommandError(f"--add takes LIMIT=AMOUNT, e.g. --add steps=10; not {item!r}", 2)
    for kind in (int, float):
        try:
            return name, kind(text)
        except ValueError:
            pass
    return name, text  # a duration's text ("10m"), or refused by the service


def _budget(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.view()
    add: dict[str, Any] = {}
    for item in args.add:
        name, amount = _amount(item)
        if name in add:
            raise CommandError(f"--add {name} is given twice; give each limit once", 2)
        add[name] = amount
    app.raise_budget(args.run, by=args.by, add=add, reason=args.reason)
    raised = ", ".join(f"{k} by {v}" for k, v in add.items())
    ctx.print(f"raised the budget of run {args.run}: {raised}; {_goes_on(app, args.run)}")
    return 0


def _audit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")


def _audit(args: argparse.Namespace, ctx: Context) -> int:
    records = ctx.view().audit(args.run)
    for r in records:
        detail = codec.decode(r.detail)
        if args.json:
            ctx.print(
                json.dumps(
                    {"id": r.id, "at": r.at, "actor": r.actor, "action": r.action, "detail": detail}
                )
            )
        else:
            ctx.print(
                f"{fmt.when(r.at)}  {r.action:<18} {r.actor or '-':<12} {detail.get('why', '')}"
            )
    if not records and not args.json:
        ctx.print(f"run {args.run}: no audit records")
    return 0


COMMANDS = (
    Command(
        "approve",
        "approve a waiting run's request",
        _decision_arguments,
        _approve,
        "Records the decision (refused, and kept in the audit log, for someone not "
        "among the approvers, a second decision, or a run not waiting for it) and "
        "makes the run resumable.",
    ),
    Command(
        "deny",
        "deny a waiting run's request",
        _decision_arguments,
        _deny,
        "Records the denial; when the run resumes, run.approve raises "
        "tether.ApprovalDenied inside the agent, which may catch it.",
    ),
    Command(
        "signal",
        "send a signal to a run",
        _signal_arguments,
        _signal,
        "Signals are kept until a run.wait(NAME) takes them, so a signal sent before "
        "the run waits is not lost. A finished run refuses signals.",
    ),
    Command(
        "resolve",
        "settle a tool call left in doubt by a crash or a timeout",
        _resolve_arguments,
        _resolve,
        "For tools that ask when in doubt: say whether the call happened (with the "
        "result it returned, --result JSON, unless the tool is known to return None) "
        "or not (it is called again with the same key).",
    ),
    Command(
        "cancel",
        "cancel a run, optionally compensating its effects",
        _cancel_arguments,
        _cancel,
        "Cancels a queued, waiting or stopped run. With "
        "--compensate, the compensations of its completed write tools run first, "
        "newest first, each journaled.",
    ),
    Command(
        "revert",
        "undo one completed effect of a run with its tool's compensation",
        _revert_arguments,
        _revert,
        "Calls the compensation of the write-tool call at --step, journaled (a durable "
        "intent, its own idempotency key, who reverted it), and changes nothing else: the "
        "run keeps its status and output. Refused (exit 2, nothing written) for a step that "
        "is not a completed write call, a tool without compensation, a call already "
        "reverted or compensated, a fork's copied call, or a run executing now. A revert a "
        "crash interrupted is finished by the same command (an undo without "
        "idempotency_key asks first: --happened or --not-happened).",
    ),
    Command(
        "budget",
        "raise the budget of a run waiting on one of its limits",
        _budget_arguments,
        _budget,
        "A run that reached a limit of its tether.Limits (steps, model calls, tokens, "
        "cost, duration) with on_exceeded='wait' waits; this adds to its limits, records "
        "who raised them (--by or --token) in its log, and queues it again: a worker of "
        "its queue, or `tether resume`, goes on from the call it stopped before.",
    ),
    Command("audit", "show a run's audit records (refused decisions)", _audit_arguments, _audit),
)
