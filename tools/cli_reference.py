"""Write docs/cli.md, the reference of every ``tether`` command, from the parser itself.

    python tools/cli_reference.py           # rewrite docs/cli.md
    python tools/cli_reference.py --check   # exit 1 if docs/cli.md is stale

The page is made from what ``tether --help`` and ``tether COMMAND --help`` are made of:
each command's one-line help, its description, its usage line and the help of each of its
arguments, so the reference cannot say something the command line does not.
``tests/unit/test_cli_reference.py`` regenerates it in memory and fails when the file
differs, or when a command or an argument has no help text (:func:`missing_help`).

The arguments are listed from the parser's actions rather than pasted from the printed
help: argparse lays its help out differently from one Python version to the next, and
the reference must be the same file on every version the tests run on.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from tether.cli.main import build_parser

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
STALE = "docs/cli.md is stale: run python tools/cli_reference.py"
GLOBAL = ("--db", "--app", "--code")  # accepted before and after every command

HEADER = """\
# CLI reference

<!-- Generated from the parser's help by tools/cli_reference.py: do not edit by hand.
     Change the help in src/tether/cli/ and run `python tools/cli_reference.py`;
     tests/unit/test_cli_reference.py fails while this file is stale. -->

`tether` is installed with the package (`python -m tether.cli` runs the same). Every
command prints its own help: `tether COMMAND --help`. An error prints one line,
`tether: error: …`, and exits with 1 (2 for a usage error, 130 when interrupted).
"""


def reference() -> str:
    """The text of docs/cli.md for the parser as it is now."""
    parser = build_parser()
    commands = list(_commands(parser))
    options = [f"[{_flag_part(a)}]" for a in _arguments(parser) if _is_global(a)]
    usage = " ".join(["tether", *options, "COMMAND ..."])
    out = [HEADER, str(parser.description), "", f"```\n{usage}\n```", ""]
    out += ["## Global options", "", "Given before the command or after it:", ""]
    out += [_argument(a) for a in _arguments(parser) if _is_global(a)]
    out += ["", "## Commands", "", "| command | what it does |", "| --- | --- |"]
    out += [f"| [`{name}`](#tether-{name}) | {help_} |" for name, help_, _ in commands]
    for name, _, sub in commands:
        out += ["", f"## tether {name}", "", str(sub.description), ""]
        out += [f"```\n{_synopsis(f'tether {name}', sub)}\n```"]
        own = [a for a in _arguments(sub) if not _is_global(a)]
        if own:
            out += ["", *(_argument(a) for a in own)]
    return "\n".join(out) + "\n"


def missing_help() -> list[str]:
    """Every command and argument without help text (``tether runs --json``, …)."""
    parser = build_parser()
    missing = [f"tether {a.option_strings[0]}" for a in _arguments(parser) if not _helped(a)]
    for name, help_, sub in _commands(parser):
        if not help_ or not sub.description:
            missing.append(f"tether {name}")
        missing += [
            f"tether {name} {_name(a)}"
            for a in _arguments(sub)
            if not _is_global(a) and not _helped(a)
        ]
    return missing


def _commands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """Each command's name, one-line help and parser, in the order of ``tether --help``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {c.dest: c.help or "" for c in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name, ""), sub


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
    ]


def _is_global(action: argparse.Action) -> bool:
    return any(flag in GLOBAL for flag in action.option_strings)


def _helped(action: argparse.Action) -> bool:
    return bool(action.help) and action.help != argparse.SUPPRESS


def _argument(action: argparse.Action) -> str:
    """``- `--limit LIMIT`: at most this many (default 20)``."""
    return f"- `{_name(action)}`: {' '.join(str(action.help).split())}"


def _name(action: argparse.Action) -> str:
    """The argument as the usage line writes it: ``run``, ``[payload]``, ``-o, --output FILE``."""
    if not action.option_strings:
        name = str(action.metavar or action.dest)
        return f"[{name}]" if action.nargs == "?" else name
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return flags
    if action.metavar is not None:
        return f"{flags} {action.metavar}"
    if action.choices is not None:
        return f"{flags} {{{','.join(map(str, action.choices))}}}"
    return f"{flags} {action.dest.upper()}"


def _synopsis(prog: str, parser: argparse.ArgumentParser) -> str:
    """``tether resolve run (--happened | --not-happened) [--result RESULT] --by BY``:
    positionals first, then the options; the global options and -h left out."""
    own = [a for a in _arguments(parser) if not _is_global(a)]
    grouped = {id(a): g for g in parser._mutually_exclusive_groups for a in g._group_actions}
    parts: list[str] = []
    done: set[int] = set()
    for action in sorted(own, key=lambda a: bool(a.option_strings)):
        group = grouped.get(id(action))
        if group is None:
            parts.append(_usage_part(action))
        elif id(group) not in done:
            done.add(id(group))
            alternatives = " | ".join(_flag_part(a) for a in group._group_actions)
            parts.append(f"({alternatives})" if group.required else f"[{alternatives}]")
    return " ".join([prog, *parts])


def _usage_part(action: argparse.Action) -> str:
    if not action.option_strings:
        return _name(action)
    return _flag_part(action) if action.required else f"[{_flag_part(action)}]"


def _flag_part(action: argparse.Action) -> str:
    """``--limit LIMIT`` (the first flag only: ``-o FILE``)."""
    first = action.option_strings[0]
    return _name(action).replace(", ".join(action.option_strings), first, 1)


def main(argv: list[str] | None = None) -> int:
    """Write docs/cli.md, or with ``--check`` say whether it is stale (exit 1)."""
    args = argparse.ArgumentParser(description="Write docs/cli.md from tether's help.")
    args.add_argument("--check", action="store_true", help="only check, exit 1 if stale")
    check = args.parse_args(argv).check
    if missing := missing_help():
        print(f"no help text: {', '.join(missing)}", file=sys.stderr)
        return 1
    text = reference()
    if check:
        stale = not DOC.exists() or DOC.read_text(encoding="utf-8") != text
        print(STALE if stale else "docs/cli.md is up to date", file=sys.stderr)
        return 1 if stale else 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
