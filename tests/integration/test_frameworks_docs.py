"""The examples of docs/openai-agents.md and docs/pydantic-ai.md run as written, each in
a directory of its own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("page", "module"), [("openai-agents", "agents"), ("pydantic-ai", "pydantic_ai")]
)
def test_the_documented_example_runs(tmp_path: Path, page: str, module: str) -> None:
    pytest.importorskip(module)
    [example] = re.findall(r"```python\n(.*?)```", (DOCS / f"{page}.md").read_text(), flags=re.S)
    (tmp_path / "example.py").write_text(example)
    done = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "agents.db").exists()
