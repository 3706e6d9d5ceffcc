"""docs/timetravel.md runs as written: its Python blocks in order in one namespace, and
every ``$ tether …`` line of its console blocks as a real command (exit code 0)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "timetravel.md"

pytestmark = pytest.mark.integration


def _blocks() -> list[tuple[str, str]]:
    return re.findall(r"```(python|console)\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_page_has_python_and_console_examples() -> None:
    kinds = [kind for kind, _ in _blocks()]
    assert kinds.count("python") >= 6 and "console" in kinds


def test_the_timetravel_page_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs_timetravel"}
    outputs: dict[str, str] = {}
    for index, (kind, body) in enumerate(_blocks()):
        if kind == "python":
            exec(compile(body, f"docs/timetravel.md block {index}", "exec"), namespace)
            continue
        for line in body.splitlines():
            if line.startswith("$ "):
                outputs[line] = _shell(line[2:], tmp_path, namespace)
    diff = outputs["$ tether diff $RUN $FORK"]
    assert "~ vars.style: draft -> careful" in diff and "steps[3].output.text" in diff
    assert outputs["$ tether diff $RUN:fetch $FORK:fetch --exit-code"].splitlines()[-1] == (
        "same state"
    )
    assert (tmp_path / "copy.db").exists() and (tmp_path / "fork.jsonl").exists()


def _shell(command: str, cwd: Path, namespace: dict[str, object]) -> str:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "TETHER_DB": "agent.db",
        "RUN": str(namespace["run_id"]),
        "FORK": str(namespace["fork_id"]),
    }
    out = subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, f"{command}: {out.stderr}"
    return out.stdout
