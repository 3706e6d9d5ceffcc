"""docs/boards.md and docs/schedules.md run as written: their Python blocks in order, in
one namespace, in an empty directory; their commands exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _docs import console_commands

from tether.cli.main import COMMANDS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "boards.md"

pytestmark = pytest.mark.integration


def test_the_page_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs_boards"}
    for index, body in enumerate(blocks):
        exec(compile(body, f"docs/boards.md block {index}", "exec"), namespace)
    assert (tmp_path / "agent.db").exists()


def test_its_commands_are_tethers() -> None:
    (body,) = re.findall(r"```console\n(.*?)```", PAGE.read_text(), flags=re.S)
    names = {c.name for c in COMMANDS}
    for command, _ in console_commands(body):
        assert command.split()[0] == "tether" and command.split()[1] in names, command


SCHEDULES = PAGE.with_name("schedules.md")


def test_the_schedules_page_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", SCHEDULES.read_text(), flags=re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs_schedules"}
    for index, body in enumerate(blocks):
        exec(compile(body, f"docs/schedules.md block {index}", "exec"), namespace)
    (body,) = re.findall(r"```console\n(.*?)```", SCHEDULES.read_text(), flags=re.S)
    names = {c.name for c in COMMANDS}
    assert all(c.split()[1] in names for c, _ in console_commands(body))
