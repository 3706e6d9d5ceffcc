"""docs/openai-agents.md's example runs as written, in a directory of its own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("agents")
PAGE = Path(__file__).resolve().parents[2] / "docs" / "openai-agents.md"

pytestmark = pytest.mark.integration


def test_the_documented_example_runs(tmp_path: Path) -> None:
    [example] = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    (tmp_path / "example.py").write_text(example)
    done = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "agents.db").exists()
