"""docs/budgets.md runs as written: its Python and console blocks run in the page's order
(in a fresh directory: ``agent.db``), the Python ones in one namespace, every ``$ …`` line
as a real ``tether`` command in its own process, whose output starts with the lines the
page shows under it (a command shown failing, ``tether: error: …``, must fail so)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _docs import console_commands

PAGE = Path(__file__).resolve().parents[2] / "docs" / "budgets.md"

pytestmark = pytest.mark.integration


def _console(body: str, env: dict[str, str]) -> int:
    ran = 0
    for command, shown in console_commands(body):
        out = subprocess.run(
            ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60
        )
        fails = bool(shown) and shown[0].startswith("tether: error:")
        assert (out.returncode != 0) == fails, f"{command}: {out.stdout}{out.stderr}"
        text = out.stderr if fails else out.stdout
        assert text.splitlines()[: len(shown)] == shown, command
        ran += 1
    return ran


def test_the_budgets_page_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```(python|console)\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert [k for k, _ in blocks].count("python") == 7
    monkeypatch.chdir(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("TETHER_TENANT", "TETHER_TOKEN")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TETHER_DB"] = "agent.db"
    namespace: dict[str, object] = {}
    ran = 0
    for kind, body in blocks:
        if kind == "python":
            exec(compile(body, str(PAGE), "exec"), namespace)  # the page's own code
        else:
            ran += _console(body, env)
    assert ran == 4
