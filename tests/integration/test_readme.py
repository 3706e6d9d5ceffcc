"""The README's Python examples run as written."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"

pytestmark = pytest.mark.integration


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples() -> None:
    assert _python_blocks()


@pytest.mark.parametrize("index", range(len(_python_blocks())))
def test_readme_example_runs(index: int, tmp_path: Path) -> None:
    code = _python_blocks()[index]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(code, f"README.md block {index}", "exec"), {"__name__": "readme"})
    finally:
        os.chdir(cwd)
    assert (tmp_path / "agent.db").exists()
