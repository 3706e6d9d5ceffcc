"""The ``tether`` command line: ``tether [--db PATH_OR_URL] [--app MODULE:APP] COMMAND …``.

This module builds the parser and dispatches; the commands live in one module per group,
named as the service they drive. The tables, times, statuses, JSON and error lines they
print are made in :mod:`tether.cli.format`; a command module keeps only its own
sentences ("run … is queued again in …").

Commands by module:

- :mod:`tether.cli.demo`: demo
- :mod:`tether.cli.runs`: runs, show, log, resume, retry
- :mod:`tether.cli.control`: approve, deny, signal, resolve, cancel, audit
- :mod:`tether.cli.timetravel`: history, state, diff, fork
- :mod:`tether.cli.export`: export, import
- :mod:`tether.cli.check`: check
- :mod:`tether.cli.retention`: gc
- :mod:`tether.cli.worker`: worker, workers
- :mod:`tether.cli.tokens`: token
- :mod:`tether.cli.boards`: board
- :mod:`tether.cli.schedules`: schedules, schedule
- :mod:`tether.cli.serve`: serve (imports :mod:`tether.server` when it runs)

What they share (:class:`~tether.cli.context.Command`, :class:`~tether.cli.context.Context`,
:class:`~tether.cli.context.CommandError`, the global options) is in
:mod:`tether.cli.context`, the argparse types in :mod:`tether.cli.arguments`; none of
them imports this module. A command module lists its commands in ``COMMANDS``; adding a
group is adding its module to :data:`MODULES` (the order there is the order of
``tether --help``).

A failure the user can fix is raised as a :class:`tether.TetherError` (or
``CommandError``) and printed as one line, ``tether: error: …``, exit code 1 (2 for
usage errors, 3 for an action the token's role does not allow); never as a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

import tether
from tether.cli import (
    boards,
    check,
    control,
    demo,
    export,
    logs,
    retention,
    runs,
    schedules,
    serve,
    timetravel,
    tokens,
    worker,
)
from tether.cli.context import (
    Command,
    CommandError,
    Context,
    add_command,
    code_option,
    global_options,
)
from tether.cli.format import error_line

MODULES = (
    demo,
    runs,
    control,
    timetravel,
    export,
    check,
    retention,
    worker,
    schedules,
    tokens,
    boards,
    serve,
)
COMMANDS: tuple[Command, ...] = tuple(c for m in MODULES for c in m.COMMANDS)


def build_parser() -> argparse.ArgumentParser:
    """The ``tether`` parser with every command of :data:`MODULES`."""
    parser = argparse.ArgumentParser(
        prog="tether",
        parents=[global_options(None)],
        description="Durable, auditable state for LLM agents: inspect and resume runs.",
        epilog="`tether COMMAND --help` describes a command. Start with `tether demo`.",
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for command in COMMANDS:
        add_command(subparsers, command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tether`` with ``argv`` (default: the process arguments); return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    command: Command | None = getattr(args, "command", None)
    if command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        ctx_format = logs.chosen(args.log_format)
    except ValueError as e:
        return _fail(str(e), 2)
    if ctx_format == "json":  # the CLI's own warnings too (text: Python's defaults)
        logs.configure("json", logging.WARNING)
    ctx = Context(args.db, args.app)
    ctx.log_format = ctx_format
    ctx.given_tenant, ctx.given_token = args.tenant, args.token
    ctx.given_read_url = args.read_url
    try:
        ctx.code = code_option(args.code)
        return command.run(args, ctx)
    except CommandError as e:
        return _fail(str(e), e.code)
    except tether.InvalidInput as e:  # a value given on the command line: a usage error
        return _fail(str(e), 2)
    except tether.Forbidden as e:  # the token's role: exit 3, as a refusal, not an error
        return _fail(str(e), 3)
    except tether.TetherError as e:
        return _fail(str(e), 1)
    except KeyboardInterrupt:
        run = getattr(args, "run", None) if command.name in ("resume", "retry") else None
        note = f"; run {run} was suspended, `tether resume {run}` continues it" if run else ""
        return _fail("interrupted" + note, 130)
    except BrokenPipeError:  # `tether log RUN | head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stdout must stay open until exit
        return 0
    except Exception as e:
        if os.environ.get("TETHER_DEBUG"):
            raise
        return _fail(f"unexpected {type(e).__name__}: {e} (TETHER_DEBUG=1 shows the traceback)", 1)
    finally:
        ctx.close()


def _fail(message: str, code: int) -> int:
    sys.stdout.flush()
    print(error_line(message), file=sys.stderr)
    return code
