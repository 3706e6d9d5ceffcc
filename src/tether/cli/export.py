"""``tether export|import``: a run as a file of JSON lines, and back
(see :mod:`tether.services.export`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

import tether
from tether.cli import format as fmt
from tether.cli.context import Command, CommandError, Context, user_errors
from tether.scoped import ScopedApp
from tether.services import replay


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE instead of standard output"
    )
    parser.add_argument(
        "--as-test",
        metavar="PATH",
        help="write a pytest file to PATH that replays the run (embedded) against its "
        "agent's current code and fails when a resume would block or fail it",
    )


def _export(args: argparse.Namespace, ctx: Context) -> int:
    app = ctx.read_view()
    if args.as_test is not None:
        return _as_test(args, app)
    if args.output is None:
        app.export_run(args.run, ctx.out)
        return 0
    app.record(args.run)  # an unknown run leaves no empty file
    try:
        f = open(args.output, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as e:
        raise CommandError(f"cannot write {args.output}: {e.strerror}") from None
    with f:
        n = app.export_run(args.run, f)
    print(f"exported run {args.run} ({n} events) to {args.output}", file=sys.stderr)
    return 0


def _as_test(args: argparse.Namespace, app: ScopedApp) -> int:
    if args.output is not None:
        raise CommandError("--as-test writes the test file; drop -o/--output", 2)
    app.record(args.run)  # an unknown run (or another tenant's) leaves no file
    with user_errors():
        text = replay.regression_test(app.app.store, args.run)
    try:
        with open(args.as_test, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise CommandError(f"cannot write {args.as_test}: {e.strerror}") from None
    print(f"wrote a replay test of run {args.run} to {args.as_test}", file=sys.stderr)
    return 0


def _import_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a `tether export` file (- for standard input)")
    parser.add_argument(
        "--new-id",
        action="store_true",
        help="give the run a fresh id (else the exported id, refused if taken)",
    )
    parser.add_argument(
        "--secret-env",
        action="append",
        default=[],
        metavar="VAR",
        help="an environment variable the file's Secret.env references may read (repeatable;"
        " without it such a file is refused: the file would choose what this process reveals)",
    )
    parser.add_argument("--json", action="store_true", help='print {"id": RUN_ID}')


def _import(args: argparse.Namespace, ctx: Context) -> int:
    app = _app_creating(ctx)
    source = "<stdin>" if args.file == "-" else args.file
    with user_errors(), _opened(args.file) as f:
        run_id = app.import_run(f, new_id=args.new_id, source=source, secret_env=args.secret_env)
    if args.json:
        ctx.print(fmt.codec_json_text({"id": run_id}))
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
    return ctx.require_admin("import", create=True)


COMMANDS = (
    Command(
        "export",
        "write a run (its row and every event) as JSON lines",
        _export_arguments,
        _export,
        "Writes a tether-run (format 1) file: a header line with the run's row, then one "
        "line per event (seq, type, data, at, actor). `tether import` reads it back. "
        "--as-test PATH writes a pytest file instead, which replays the run with "
        "tether.testing.replay (no model, tool or database): a production failure becomes "
        "a regression test (docs/testing.md).",
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
)
