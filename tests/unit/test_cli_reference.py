"""docs/cli.md is the reference generated from the parser's help (tools/cli_reference.py):
it is up to date, and every command and argument has help text to generate it from."""

from __future__ import annotations

import argparse
import difflib

import pytest
from _tools import ROOT, load_tool

pytestmark = pytest.mark.unit


def test_every_command_and_argument_has_help_text() -> None:
    assert load_tool("cli_reference").missing_help() == []


def test_docs_cli_md_is_the_reference_generated_from_the_help() -> None:
    tool = load_tool("cli_reference")
    wanted = tool.reference()
    found = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    if found != wanted:
        diff = difflib.unified_diff(
            found.splitlines(), wanted.splitlines(), "docs/cli.md", "generated", lineterm=""
        )
        pytest.fail(f"{tool.STALE}\n" + "\n".join(list(diff)[:40]), pytrace=False)


def test_the_reference_lists_every_command_and_flag() -> None:
    tool = load_tool("cli_reference")
    text = tool.reference()
    parser = tool.build_parser()
    for name, _, sub in tool._commands(parser):
        assert f"\n## tether {name}\n" in text
        for action in tool._arguments(sub):
            if not tool._is_global(action):
                assert f"- `{tool._name(action)}`: " in text, (name, action.dest)
    for flag in tool.GLOBAL:
        assert f"- `{flag} " in text


def test_a_missing_help_text_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    tool = load_tool("cli_reference")
    real = tool.build_parser

    def without_help() -> argparse.ArgumentParser:
        parser = real()
        for _, _, sub in tool._commands(parser):
            for action in sub._actions:
                if action.dest == "json":
                    action.help = None
        return parser

    monkeypatch.setattr(tool, "build_parser", without_help)
    assert "tether runs --json" in tool.missing_help()
