"""The package as users get it: a wheel and an sdist built from a clean copy of the checkout,
installed (never editable) into fresh environments outside it, and an install from a git URL.

Each must hold every SQL file of both dialects, ``py.typed`` and the LICENSE, and the
installed tether must open a database (its migrations are read from the package) and run
an agent. Builds use hatchling from this environment when it has it (``.[test]`` does),
else from the package index, as pip's isolated builds do.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SQL_DIR = ROOT / "src" / "tether" / "store" / "sql"
SQL = sorted(f"tether/store/sql/{p.parent.name}/{p.name}" for p in SQL_DIR.glob("*/*.sql"))
# Left out of the copy when the checkout is not a git one (an unpacked sdist): what
# .gitignore leaves out, and what a test run leaves behind.
IGNORED = (".git", ".venv*", "__pycache__", "*.pyc", "*_cache", ".hypothesis", "dist", "build")

# Run by the installed interpreter in an empty directory: tether must come from the
# environment (not the checkout) and find its SQL there.
SMOKE = """
import sys
from pathlib import Path

import tether
from tether.store.queries import load_queries, migrations

where = Path(tether.__file__).resolve()
assert where.is_relative_to(Path(sys.prefix).resolve()), f"tether imported from {where}"
assert (where.parent / "py.typed").is_file()
for dialect in ("sqlite", "postgres"):
    assert migrations(dialect) and load_queries(dialect), dialect

app = tether.open("smoke.db")

@app.tool(risk="write")
def note(text: str, *, idempotency_key: str) -> dict:
    return {"noted": text}

@app.agent
def hello(run, name: str) -> dict:
    greeting = run.step("greet", lambda: f"hi {name}")
    return run.tool(note, greeting)

handle = app.run(hello, name="pip")
assert handle.output == {"noted": "hi pip"}, handle
print("installed at", where)
"""


def _run(args: list[str], cwd: Path | None = None) -> str:
    out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{' '.join(args)}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def _venv(path: Path) -> Path:
    """A fresh environment without pip (the test's pip installs into it with --python)."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(path)])
    return path / "bin" / "python"


def _install(python: Path, *what: str) -> None:
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *what])


def _files(root: Path) -> list[Path]:
    """The checkout's files as a clone would hold them (tracked or new, never ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    if listed.returncode == 0:
        return [Path(p) for p in listed.stdout.split("\0") if p and (root / p).is_file()]
    ignore = shutil.ignore_patterns(*IGNORED)
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ignore(dirpath, dirnames)]
        kept = set(filenames) - ignore(dirpath, filenames)
        found += [(Path(dirpath) / f).relative_to(root) for f in sorted(kept)]
    return found


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout committed in a repository of its own: what a clone holds."""
    repo = tmp_path_factory.mktemp("clone") / "tether"
    for rel in _files(ROOT):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, repo / rel)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@localhost"]
    _run([*git, "init", "-q"], repo)
    _run([*git, "add", "-A"], repo)
    _run([*git, "commit", "-q", "-m", "a clone of the checkout"], repo)
    return repo


def _hatchling(tmp: Path) -> Path:
    """An interpreter that has hatchling: this one, or a venv it is installed into."""
    if importlib.util.find_spec("hatchling") is not None:
        return Path(sys.executable)
    python = _venv(tmp / "hatchling")
    _install(python, "hatchling>=1.21")
    return python


@pytest.fixture(scope="module")
def dist(source: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheel and the sdist built from the clone."""
    tmp = tmp_path_factory.mktemp("dist")
    _run([str(_hatchling(tmp)), "-m", "hatchling", "build", "-d", str(tmp / "out")], source)
    (wheel,) = (tmp / "out").glob("*.whl")
    (sdist,) = (tmp / "out").glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def _smoke(python: Path, where: Path) -> None:
    where.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TETHER_DB")}
    out = subprocess.run(
        [str(python), "-c", SMOKE], cwd=where, capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    help_ = subprocess.run(
        [str(python.parent / "tether"), "--help"], cwd=where, capture_output=True, text=True
    )
    assert help_.returncode == 0 and "demo" in help_.stdout, help_.stderr


def test_the_wheel_holds_the_sql_py_typed_and_the_license(dist: dict[str, Path]) -> None:
    names = set(zipfile.ZipFile(dist["wheel"]).namelist())
    assert {"sqlite", "postgres"} <= {Path(p).parent.name for p in SQL}
    assert set(SQL) <= names, sorted(set(SQL) - names)
    assert "tether/py.typed" in names
    (license_,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    text = zipfile.ZipFile(dist["wheel"]).read(license_).decode()
    assert "Apache License" in text and "Version 2.0" in text
    assert not [n for n in names if "__pycache__" in n or n.endswith((".db", ".pyc"))]


def test_the_sdist_holds_the_sql_py_typed_and_the_license(dist: dict[str, Path]) -> None:
    with tarfile.open(dist["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {f"src/{p}" for p in SQL} <= names
    assert {"src/tether/py.typed", "LICENSE", "pyproject.toml", "README.md"} <= names
    assert not [n for n in names if n.startswith(".venv") or "__pycache__" in n]


def test_the_wheel_installs_and_runs_outside_the_checkout(
    dist: dict[str, Path], tmp_path: Path
) -> None:
    python = _venv(tmp_path / "venv")
    _install(python, str(dist["wheel"]))
    _smoke(python, tmp_path / "work")


def test_the_sdist_installs_and_runs(dist: dict[str, Path], tmp_path: Path) -> None:
    python = _venv(tmp_path / "venv")
    _install(python, str(dist["sdist"]))
    _smoke(python, tmp_path / "work")


def test_a_git_url_installs_and_runs(source: Path, tmp_path: Path) -> None:
    python = _venv(tmp_path / "venv")
    _install(python, f"git+file://{source}")
    _smoke(python, tmp_path / "work")
