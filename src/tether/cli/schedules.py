"""``tether schedules`` and ``tether schedule pause|resume|delete NAME``: the schedules of
a database (see :mod:`tether.services.schedules` and docs/schedules.md).

Schedules span tenants: the commands refuse ``--tenant``, and with a token need an
admin's. Firing them is the workers' (``tether worker``).
"""

from __future__ import annotations

import argparse
import json

from tether.cli import format as fmt
from tether.cli.context import Command, Context

ACTIONS = ("pause", "resume", "delete")


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON object per schedule")


def _list(args: argparse.Namespace, ctx: Context) -> int:
    found = ctx.require_admin("schedules").schedules()
    if args.json:
        for s in found:
            row = {
                "name": s.name,
                "agent": s.agent,
                "when": s.spec,
                "queue": s.queue,
                "catch_up": s.catch_up,
                "paused": s.paused,
                "next_at": s.next_at,
                "last_tick": s.last_tick,
            }
            ctx.print(json.dumps(row))
    elif not found:
        ctx.print("no schedules")
    else:
        rows = [
            (
                s.name,
                s.agent,
                s.spec.partition(":")[2] + ("s" if s.spec.startswith("every:") else ""),
                s.queue,
                "paused" if s.paused else "active",
                fmt.when(None if s.paused else s.next_at),
                fmt.when(s.last_tick),
            )
            for s in found
        ]
        headers = ("NAME", "AGENT", "WHEN", "QUEUE", "STATE", "NEXT", "LAST")
        ctx.print(fmt.table(headers, rows))
    return 0


def _change_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=ACTIONS, help="pause, resume or delete")
    parser.add_argument("name", help="the schedule's name (`tether schedules` lists them)")


def _change(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.require_admin("schedule")
    if args.action == "pause":
        done = app.pause_schedule(args.name)
        ctx.print(f"schedule {args.name!r} " + ("paused" if done else "was paused already"))
    elif args.action == "resume":
        done = app.resume_schedule(args.name)
        ctx.print(f"schedule {args.name!r} " + ("resumed" if done else "was not paused"))
    else:
        done = app.unschedule(args.name)
        ctx.print(f"schedule {args.name!r} " + ("deleted" if done else "did not exist"))
    return 0


COMMANDS = (
    Command(
        "schedules",
        "list the schedules: agent, timing, next and last tick",
        _list_arguments,
        _list,
        "Each schedule with its agent, its timing (a cron line, in UTC, or a period), its "
        "queue, whether it is paused, its next tick and the last one fired. Workers of its "
        "queue fire its ticks, one run each.",
    ),
    Command(
        "schedule",
        "pause, resume or delete a schedule",
        _change_arguments,
        _change,
        "`tether schedule pause NAME` fires no tick of it until `tether schedule resume "
        "NAME`, which goes on from its next tick after now (the paused ticks are not "
        "fired); `tether schedule delete NAME` forgets it (the runs it started stay).",
    ),
)
