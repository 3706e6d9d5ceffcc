"""docs/secrets.md runs as written: its Python blocks in order in one namespace, and
every ``$ …`` line of its console blocks as a real command (exit code 0) whose output
starts with the lines the page shows under it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tether.model import redact

PAGE = Path(__file__).resolve().parents[2] / "docs" / "secrets.md"

pytestmark = pytest.mark.integration


def _blocks() -> list[tuple[str, str]]:
    return re.findall(r"```(python|console)\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_secrets_page_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = _blocks()
    assert [k for k, _ in blocks].count("python") >= 6 and ("console", blocks[1][1]) in blocks
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CRM_TOKEN", raising=False)
    rules = redact.active()
    namespace: dict[str, object] = {"__name__": "docs_secrets"}
    ran = 0
    try:
        for index, (kind, body) in enumerate(blocks):
            if kind == "python":
                exec(compile(body, f"docs/secrets.md block {index}", "exec"), namespace)
                continue
            command: str | None = None
            shown: list[str] = []
            for line in [*body.splitlines(), "$ "]:
                if line.startswith("$ "):
                    if command:
                        out = _shell(command, tmp_path, str(namespace["run_id"]))
                        assert out.splitlines()[: len(shown)] == shown, command
                        ran += 1
                    command, shown = line[2:], []
                else:
                    shown.append(line)
    finally:
        redact.configure(rules)
        os.environ.pop("CRM_TOKEN", None)
    assert ran == 2


def _shell(command: str, cwd: Path, run_id: str) -> str:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "TETHER_DB": "agent.db",
        "RUN": run_id,
    }
    out = subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, f"{command}: {out.stdout}{out.stderr}"
    return out.stdout
