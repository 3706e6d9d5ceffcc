"""The scripts of tools/ loaded as modules, for the tests that check them (tools/ is not a
package, and a script may be run alone: each is loaded from its file)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_tool(name: str) -> ModuleType:
    """tools/<name>.py as module ``name`` (registered: a dataclass there looks it up)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
