"""The public surface: __all__ sorted and complete; lint and types clean."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tether

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.unit
def test_all_is_sorted_and_complete() -> None:
    assert tether.__all__ == sorted(tether.__all__)
    public = {n for n in vars(tether) if not n.startswith("_") and n != "annotations"}
    modules = {n for n in public if type(getattr(tether, n)).__name__ == "module"}
    assert public - modules == set(tether.__all__) - {"__version__"}


@pytest.mark.unit
def test_errors_are_one_tree() -> None:
    for name in tether.__all__:
        obj = getattr(tether, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, tether.TetherError), name


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is not installed beside {sys.executable}; pip install -e '.[test]'")
    return found


@pytest.mark.integration
def test_ruff_is_clean() -> None:
    out = subprocess.run(
        [_tool("ruff"), "check", "src", "tests", "bench"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.integration
def test_mypy_strict_is_clean() -> None:
    out = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.unit
def test_the_version_is_the_packages() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert f'\nversion = "{tether.__version__}"\n' in text, "pyproject.toml and tether/version.py"
