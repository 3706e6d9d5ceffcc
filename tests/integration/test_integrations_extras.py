"""An integration imported without its extra says which package is missing and the one
command that installs it (not a bare ModuleNotFoundError from deep inside)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

# A child process in which the framework cannot be imported, as in a core-only install.
PROBE = """
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Absent())
try:
    import {module}
except ImportError as e:
    print(type(e).__name__, e)
else:
    print("imported")
"""


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("tether.integrations.langgraph", "langgraph", "langgraph"),
        ("tether.integrations.openai_agents", "agents", "openai-agents"),
        ("tether.integrations.pydantic_ai", "pydantic_ai", "pydantic-ai"),
        ("tether.server", "fastapi", "server"),
        ("tether.server", "uvicorn", "server"),
    ],
)
def test_a_missing_framework_names_the_extra(module: str, blocked: str, extra: str) -> None:
    code = PROBE.format(module=module, blocked=blocked)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ImportError "), out.stdout
    assert f"pip install 'tether[{extra}]'" in out.stdout and repr(blocked) in out.stdout


def test_the_core_does_not_import_any_framework() -> None:
    code = (
        "import sys, tether, tether.cli, tether.integrations\n"
        "import tether.cli.main\n"  # `tether serve` imports the server only when it runs
        "frameworks = ('langgraph', 'agents', 'pydantic_ai', 'fastapi', 'starlette', 'uvicorn')\n"
        "print(sorted(m for m in frameworks if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_tether_serve_without_the_extra_says_how_to_install_it(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    subprocess.run([sys.executable, "-c", f"import tether; tether.open({str(db)!r}).close()"])
    code = PROBE.split("try:")[0] + (
        f"from tether.cli.main import main\nsys.exit(main(['--db', {str(db)!r}, 'serve']))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code.format(blocked="fastapi")], capture_output=True, text=True
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "pip install 'tether[server]'" in out.stderr and "Traceback" not in out.stderr
