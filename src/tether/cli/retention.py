"""``tether gc``: delete old runs and give the space back
(see :mod:`tether.services.retention`)."""

from __future__ import annotations

import argparse

from tether.cli import format as fmt
from tether.cli.arguments import age, whole_number
from tether.cli.context import Command, Context, user_errors
from tether.model.status import STATUSES
from tether.services.retention import BLOB_GRACE


def _gc_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--older-than",
        metavar="AGE",
        type=age,
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
        type=age,
        default=BLOB_GRACE,
        help="keep unreferenced snapshot pages and workspace files written or reused within "
        "AGE (default 1h)",
    )
    parser.add_argument(
        "--no-vacuum",
        action="store_true",
        help="do not give the space back to the file system afterwards",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _gc(args: argparse.Namespace, ctx: Context) -> int:
    with user_errors():
        result = ctx.require_admin("gc").gc(
            older_than=args.older_than,
            status=args.status,
            keep_last=args.keep_last,
            dry_run=args.dry_run,
            vacuum=not args.no_vacuum,
            blob_grace=args.blob_grace,
        )
    if args.json:
        ctx.print(
            fmt.codec_json_text(
                {
                    "runs": list(result.run_ids),
                    "deleted": result.deleted,
                    "dry_run": result.dry_run,
                    "bytes_before": result.bytes_before,
                    "bytes_after": result.bytes_after,
                    "bytes_freed": result.freed,
                    "pages_swept": result.pages,
                    "page_bytes_swept": result.page_bytes,
                    "files_swept": result.files,
                    "file_bytes_swept": result.file_bytes,
                }
            )
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
    if result.files:
        ctx.print(
            f"{'would sweep' if result.dry_run else 'swept'} {result.files} unreferenced "
            f"workspace file content(s), {result.file_bytes} bytes"
        )
    if not result.dry_run and result.freed is not None:
        ctx.print(
            f"database: {result.bytes_before} -> {result.bytes_after} bytes ({result.freed} freed)"
        )
    return 0


COMMANDS = (
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
