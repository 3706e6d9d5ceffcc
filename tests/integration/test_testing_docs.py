"""docs/testing.md's "Prove your own backend" runs as written: its example, a file of its
own outside this repository (no conftest, no pytest configuration), passes the shipped
suite on the store it names."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "testing.md"

pytestmark = pytest.mark.integration


def test_the_documented_subclass_passes_the_whole_suite(tmp_path: Path) -> None:
    section = PAGE.read_text().split("## Prove your own backend", 1)[1].split("\n## ", 1)[0]
    [example] = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    (tmp_path / "test_my_store.py").write_text(example)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 70, summary  # the suite ran, not a stub of it
    assert "skipped" not in summary and "warning" not in summary, summary


def test_tether_never_imports_tether_testing_nor_pytest() -> None:
    """tether.testing imports pytest; the package itself must work without either."""
    code = (
        "import sys, tether, tether.cli, tether.demo\n"
        "bad = {m for m in sys.modules if m == 'pytest' or m.startswith('tether.testing')}\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
