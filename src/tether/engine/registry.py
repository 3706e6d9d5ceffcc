"""Finding the code of a run whose agent (or tool) this App did not register.

A run's row and its events record where its agent's code lives (``{"module",
"qualname", "file"}``), and a tool intent where its tool's. That record is data:
a row written by an older deployment, a ``tether import`` of someone's file, or a
database another person can write. It never decides what code runs here. A module
named by a record is *imported* (its top-level code executed) only when the operator
named it, through:

- ``--app pkg.module:app`` (the App's module, and the modules of the agents and
  tools it registered),
- an allow-list: ``tether.open(..., code=["pkg.agents"])``, ``tether --code
  pkg.agents`` or ``$TETHER_CODE=pkg.agents,pkg.tools``; a package allows its
  submodules (``pkg`` allows ``pkg.agents``).

A module this process has already imported is looked into (no code runs for that);
the object at the recorded qualname must then carry a tether agent (or tool)
definition, read without calling any descriptor or ``__getattr__``. A recorded
``file`` is never executed. Anything else is refused with a message that says what
to pass.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any

from tether.errors import InvalidInput, NotFound

CODE_ENV = "TETHER_CODE"
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_MISSING = object()


def check_modules(modules: Iterable[str] | str | None, *, what: str = "code") -> frozenset[str]:
    """The allow-list ``modules`` as a set of module names (raising ValueError, naming
    ``what``, for anything that is not a dotted Python module name: never a path)."""
    if modules is None:
        return frozenset()
    if isinstance(modules, str):
        modules = [modules]
    if not isinstance(modules, Iterable):
        raise InvalidInput(f"{what} is a list of module names, not {modules!r}")
    out = set()
    for m in modules:
        if not isinstance(m, str) or not _MODULE.match(m) or m.endswith(".py"):
            raise InvalidInput(
                f"{what}: {m!r} is not a module name; name modules as you would import "
                f"them (e.g. code=['myproject.agents']), never as file paths"
            )
        out.add(m)
    return frozenset(out)


def parse_modules(text: str | None, *, what: str = CODE_ENV) -> frozenset[str]:
    """Module names from ``"pkg.agents, pkg.tools"`` (``$TETHER_CODE``, ``--code``)."""
    if not text:
        return frozenset()
    return check_modules([p for p in re.split(r"[,\s]+", text) if p], what=what)


def allowed(module: str, names: Iterable[str]) -> bool:
    """Whether ``module`` is one of ``names`` or inside a package among them."""
    return any(module == n or module.startswith(n + ".") for n in names)


def how_to_allow(module: str) -> str:
    """The sentence every refusal ends with."""
    return (
        f"pass --app pkg.module:app (the App that registers it), or allow the module: "
        f"--code {module}, ${CODE_ENV}={module}, or tether.open(..., code=[{module!r}])"
    )


def find(code: Mapping[str, Any], attr: str, may_import: Callable[[str], bool], what: str) -> Any:
    """The tether definition (``attr``: ``__tether_agent__`` or ``__tether_tool__``) at
    ``code``'s module and qualname. Raises NotFound, naming ``what`` (``agent 'x'``) and
    what to pass, when the record is malformed, the module may not be imported here, the
    import fails, or nothing there is such a definition."""
    module_name, qualname = code.get("module"), code.get("qualname")
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        raise NotFound(
            f"{what} is not registered and its run did not record its code; "
            f"pass --app pkg.module:app"
        )
    if not _MODULE.match(module_name):
        raise NotFound(
            f"{what}: its recorded code location {module_name!r}:{qualname!r} is not a "
            f"module and a name; {how_to_allow('pkg.module')}"
        )
    module = _module(module_name, may_import, what)
    # a name defined inside a function ("f.<locals>.g") cannot be found: missing
    found = _lookup(module, qualname.split("."), attr) if _MODULE.match(qualname) else _MISSING
    if found is _MISSING:
        raise NotFound(
            f"{what}: {module_name}.{qualname} is not a tether "
            f"{attr.strip('_').removeprefix('tether_')} any more; pass --app pkg.module:app"
        )
    return found


def _module(name: str, may_import: Callable[[str], bool], what: str) -> ModuleType:
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded  # imported already: looking into it runs nothing
    if not may_import(name):
        raise NotFound(
            f"{what} is not registered on this app, and its run names module {name!r}, "
            f"which this process may not import: what a database or an imported file "
            f"holds never decides which code runs. To run it, {how_to_allow(name)}"
        )
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise NotFound(
            f"{what}: cannot import its module {name!r} ({e}); run from the project "
            f"directory or pass --app pkg.module:app"
        ) from None
    except Exception as e:  # the module itself raised while importing
        raise NotFound(
            f"{what}: importing its module {name!r} failed: {type(e).__name__}: {e}; fix "
            f"it, or pass --app pkg.module:app"
        ) from e


def _lookup(obj: Any, path: list[str], attr: str) -> Any:
    """``obj.a.b.attr`` read statically: no property, descriptor or module ``__getattr__``
    runs (a lazy-importing package would otherwise import on a recorded name)."""
    for part in [*path, attr]:
        try:
            obj = inspect.getattr_static(obj, part)
        except AttributeError:
            return _MISSING
        if isinstance(obj, staticmethod | classmethod):
            obj = obj.__func__
    return obj
