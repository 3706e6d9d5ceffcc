"""docs/langgraph.md runs as written: its first Python block is ``agent.py``; every
``$ …`` line of its console blocks runs as a real command (exit code 0) whose output
starts with the lines the page shows under it; the other Python blocks run last."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _docs import console_commands

PAGE = Path(__file__).resolve().parents[2] / "docs" / "langgraph.md"

pytestmark = pytest.mark.integration


def _blocks() -> list[tuple[str, str]]:
    return re.findall(r"```(python|console)\n(.*?)```", PAGE.read_text(), flags=re.S)


def _shell(command: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "TETHER_DB": "agent.db",
    }
    out = subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, f"{command}: {out.stdout}{out.stderr}"
    return out.stdout


def test_the_langgraph_page_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = _blocks()
    assert blocks[0][0] == "python" and [k for k, _ in blocks].count("console") == 3
    (tmp_path / "agent.py").write_text(blocks[0][1])
    outputs: dict[str, str] = {}
    for kind, body in blocks[1:]:
        if kind != "console":
            continue
        for command, shown in console_commands(body):
            out = outputs[command] = _shell(command, tmp_path)
            assert out.splitlines()[: len(shown)] == shown, command
    assert (tmp_path / "refunds.log").read_text() == "refunded order 42\n"  # once
    assert "T-1" in outputs["tether runs --agent langgraph"]
    assert "step:1" in outputs["tether show T-1"] and "act" in outputs["tether show T-1"]
    assert '"name": "act", "kind": "writes"' in outputs["tether diff T-1:step:1 T-1"]
    assert (
        "would delete 2 run(s)" in outputs["tether gc --older-than 0s --status completed --dry-run"]
    )
    monkeypatch.chdir(tmp_path)
    for index, (kind, body) in enumerate(blocks[1:], start=1):
        if kind == "python":
            exec(compile(body, f"docs/langgraph.md block {index}", "exec"), {"__name__": "doc"})
