"""``tether board [NAME [KEY]]``: the boards of a database (see
:mod:`tether.context.boards` and docs/boards.md).

Without NAME, the boards (of ``--tenant``'s, or every tenant's); with NAME, each key
holding a value with its version and who wrote it; with KEY, the key's every change,
oldest first. ``--at`` reads the board as it was at a time.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from tether.cli import format as fmt
from tether.cli.arguments import positive_int
from tether.cli.context import Command, Context
from tether.cli.format import plain
from tether.context.boards import BoardEntry


def time_arg(text: str) -> float:
    """An argparse type: seconds since the epoch, or an ISO 8601 time (UTC unless it says)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a time: seconds since the epoch or ISO 8601 (2026-11-27T09:30), not {text!r}"
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="the board (left out: list the boards)")
    parser.add_argument("key", nargs="?", help="a key: its every change, oldest first")
    parser.add_argument(
        "--at", type=time_arg, metavar="TIME", help="as it was at TIME (epoch seconds or ISO)"
    )
    parser.add_argument("--limit", type=positive_int, help="KEY: at most this many changes")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")


def _row(e: BoardEntry) -> dict[str, Any]:
    return {
        "key": e.key,
        "version": e.version,
        "value": plain(e.value),
        "deleted": e.deleted,
        "by": e.by,
        "run_id": e.run_id,
        "position": e.position,
        "at": e.at,
    }


def _board(args: argparse.Namespace, ctx: Context) -> int:
    view = ctx.read_view()
    if args.name is None:
        return _list(args, ctx)
    board = view.board(args.name)
    if args.key is not None and args.at is None:
        entries = board.history(args.key, limit=args.limit)
    elif args.key is not None:
        entries = [board.get(args.key, at=args.at)]
        if entries[0].version == 0:
            ctx.print(f"board {args.name!r} key {args.key!r} was not written by then")
            return 0
    else:
        entries = list(board.items(at=args.at).values())
    if args.json:
        for e in entries:
            ctx.print(json.dumps(_row(e), ensure_ascii=False))
    elif not entries:
        ctx.print(f"board {args.name!r} has no " + ("changes" if args.key else "keys"))
    else:
        ctx.print(_table(entries))
    return 0


def _table(entries: list[BoardEntry]) -> str:
    rows = [
        (
            e.key,
            e.version,
            "(deleted)" if e.deleted else fmt.short(e.value, 60),
            e.by,
            None if e.run_id is None else f"{e.run_id}@{e.position}",
            fmt.when(e.at),
        )
        for e in entries
    ]
    return fmt.table(("KEY", "VERSION", "VALUE", "BY", "RUN@STEP", "AT"), rows, right="VERSION")


def _list(args: argparse.Namespace, ctx: Context) -> int:
    found = ctx.read_view().boards()
    if args.json:
        for b in found:
            row = {"tenant": b.tenant or None, "board": b.board, "keys": b.keys}
            ctx.print(json.dumps({**row, "updated_at": b.updated_at}))
    elif not found:
        ctx.print("no boards" + (f" of tenant {ctx.tenant!r}" if ctx.tenant else ""))
    else:
        rows = [(b.board, b.tenant or None, b.keys, fmt.when(b.updated_at)) for b in found]
        ctx.print(fmt.table(("BOARD", "TENANT", "KEYS", "UPDATED"), rows, right="KEYS"))
    return 0


COMMANDS = (
    Command(
        "board",
        "show boards: keys, versions and every change",
        _arguments,
        _board,
        "`tether board` lists the boards; `tether board NAME` shows each key holding a value "
        "with its version and who wrote it (a run and its step, or a name); `tether board "
        "NAME KEY` shows the key's every change, oldest first. `--at TIME` reads the board "
        "as it was then. With --tenant, that tenant's boards alone.",
    ),
)
