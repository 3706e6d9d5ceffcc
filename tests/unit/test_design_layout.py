"""docs/design.md's layout block is the package as it is (tools/design_layout.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.unit
def test_the_design_page_shows_the_modules_that_exist() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "design_layout.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
