"""The layout holds: imports flow one way between the layers (TYPE_CHECKING imports
included) and no module grows past ~600 lines (usually two concepts)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parents[2] / "src" / "tether"
MAX_LINES = 600

# Lowest first. A module may import its own layer and the layers below it, never above.
LAYERS = [
    {"errors", "version"},
    {"model"},
    {"store"},
    {"context"},
    {"engine"},
    {"services"},
    {"app", "registration", "scoped", "settings", "decisions", "travel", "scheduling"},  # App
    {"__init__"},  # the package's front door: tether.open, __all__
    # on top: they use the App (the CLI imports the server only inside `tether serve`)
    {"cli", "demo", "testing", "integrations", "server"},
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _module(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every tether module ``path`` imports (absolute names), with the line."""
    return _imports_in(path.read_text(), _module(path), path.name == "__init__.py")


def _imports_in(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for a in node.names:  # `from tether import context` names a module
                full = f"{base}.{a.name}"
                sub = SRC.parent.joinpath(*full.split("."))
                is_module = sub.is_dir() or sub.with_suffix(".py").exists()
                found.append((node.lineno, full if is_module else base))
    ours = [(line, name) for line, name in found if name == "tether" or name.startswith("tether.")]
    return sorted(ours)


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    unplaced = {_layer(_module(p)) for p in _sources()} - set(RANK)
    assert not unplaced, f"place these in LAYERS (tests/unit/test_layout.py): {sorted(unplaced)}"


def test_imports_flow_one_way() -> None:
    upward = []
    for path in _sources():
        module = _module(path)
        mine = RANK[_layer(module)]
        for line, name in _imports(path):
            theirs = RANK.get(_layer(name), len(LAYERS))
            if theirs > mine:
                upward.append(f"{path.relative_to(SRC.parent)}:{line} imports {name}")
    assert not upward, "a lower layer imports a higher one:\n" + "\n".join(upward)


def test_no_module_is_over_600_lines() -> None:
    big = {
        str(p.relative_to(SRC.parent)): n
        for p in _sources()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not big, f"modules over {MAX_LINES} lines (split the second concept out): {big}"


def test_the_walk_sees_guarded_and_relative_imports() -> None:
    """The check is not blind: an import under TYPE_CHECKING, a relative import and a
    module named in ``from tether import ...`` all count, with their lines."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from tether.app import App\n"
        "from ..engine import journal\n"
        "from tether import services\n"
        "from . import events\n"
    )
    found = _imports_in(source, "tether.model.codec", is_package=False)
    assert found == [
        (3, "tether.app"),
        (4, "tether.engine.journal"),
        (5, "tether.services"),
        (6, "tether.model.events"),
    ]
    assert [RANK[_layer(name)] > RANK["model"] for _, name in found] == [True, True, True, False]
