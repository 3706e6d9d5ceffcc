"""``tether demo``: an agent killed mid-run by SIGKILL resumes (see :mod:`tether.demo`)."""

from __future__ import annotations

import argparse

from tether.cli.context import Command, Context


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # the demo takes only the global --db


def _demo(args: argparse.Namespace, ctx: Context) -> int:
    from tether import demo  # the demo sits above the CLI: imported only when it runs

    return demo.run_demo(ctx.explicit_db or demo.DEFAULT_DB)


COMMANDS = (
    Command(
        "demo",
        "run the demo: an agent killed mid-run by SIGKILL resumes",
        _demo_arguments,
        _demo,
        "Starts a sample incident-investigation agent in a child process that kills "
        "itself mid-run, then resumes the run here and shows which steps were reused from "
        "the journal and which ran. Uses its own database, ./tether-demo.db (overwritten; "
        "--db to choose another; $TETHER_DB is not used). No network, no API key.",
    ),
)
