"""docs/auth.md runs as written: its Python blocks run in order in one namespace (in a
fresh directory: ``agent.db``), then every ``$ …`` line of its console blocks runs as a
real command whose output starts with the lines the page shows under it (a command shown
failing, ``tether: error: …``, must fail with that message)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _docs import console_commands

PAGE = Path(__file__).resolve().parents[2] / "docs" / "auth.md"

pytestmark = pytest.mark.integration


def test_the_auth_page_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```(python|console)\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert [k for k, _ in blocks].count("python") == 4
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    for kind, body in blocks:
        if kind == "python":
            exec(compile(body, str(PAGE), "exec"), namespace)  # the page's own code
    namespace["app"].close()  # type: ignore[attr-defined]
    env = {k: v for k, v in os.environ.items() if k not in ("TETHER_TENANT", "TETHER_TOKEN")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TETHER_DB"] = "agent.db"
    ran = 0
    for kind, body in blocks:
        if kind != "console":
            continue
        for command, shown in console_commands(body):
            out = subprocess.run(
                ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60
            )
            fails = bool(shown) and shown[0].startswith("tether: error:")
            assert (out.returncode != 0) == fails, f"{command}: {out.stdout}{out.stderr}"
            text = out.stderr if fails else out.stdout
            assert text.splitlines()[: len(shown)] == shown, command
            ran += 1
    assert ran == 4
