"""docs/workspace.md runs as written: its Python blocks in order in one namespace, in an
empty directory, then its commands as real ``tether`` processes on the run it made."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "workspace.md"

pytestmark = pytest.mark.integration


def test_the_page_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = PAGE.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs_workspace"}
    for index, body in enumerate(blocks):
        exec(compile(body, f"docs/workspace.md block {index}", "exec"), namespace)
    namespace["app"].close()  # type: ignore[attr-defined]
    (console,) = re.findall(r"```console\n(.*?)```", text, flags=re.S)
    env = dict(os.environ)  # the tether this interpreter imports (installed, or PYTHONPATH)
    outputs = []
    for line in console.splitlines():
        command = line[2:].replace("RUN", str(namespace["run_id"]))
        command = command.replace("fork-at-2", "fork-cli")
        args = [sys.executable, "-m", "tether.cli", "--db", "agent.db", *command.split()[1:]]
        done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert sorted(p.name for p in (tmp_path / "fork-cli").iterdir()) == [
        "section1.md",
        "section2.md",
    ]
    assert "+ section2.md" in outputs[1] and "+ section3.md" in outputs[1]
