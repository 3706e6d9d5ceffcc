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

import hashlib
import importlib
import inspect
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any, TypeVar, cast, overload

from tether.engine.contracts import Rule, tool_rules
from tether.engine.effects import ToolDef, a_function, define_tool, guarded
from tether.engine.retry import Retry
from tether.errors import InvalidInput, NotFound
from tether.model import inputs
from tether.model.budgets import Limits, check_limits
from tether.model.workspace import Workspace, workspace_of
from tether.store import RunRecord, Serving

log = logging.getLogger("tether")
F = TypeVar("F", bound=Callable[..., Any])

CODE_ENV = "TETHER_CODE"
# an agent's declared version, or a function of its code that derives it (source_version)
Version = str | Callable[[Callable[..., Any]], str] | None
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_MISSING = object()


@dataclass(frozen=True, slots=True)
class AgentDef:
    """A registered agent: its name, version, function and where its code lives."""

    name: str
    version: str | None
    fn: Callable[..., Any]
    is_async: bool
    code: dict[str, Any]
    limits: Limits | None = None  # what each of its runs may spend (tether.model.budgets)
    workspace: Workspace | None = None  # the directory it works in (tether.engine.workspace)


class Registry:
    """The agents and tools an App registered, and the modules it may import to find the
    code of the runs it did not register (``code``): the one place user code is found."""

    def __init__(self, code: Iterable[str] | None = None) -> None:
        self.agents: dict[str, AgentDef] = {}  # by name: the newest registered (new runs)
        self.versions: dict[str, dict[str | None, AgentDef]] = {}  # by name, by version
        self.tools: dict[str, ToolDef] = {}
        self.code = check_modules(code)
        self._found: dict[tuple[str, str | None], AgentDef] = {}  # found by recorded code
        self.serving: Serving | None = None  # what a worker of this registry claims

    def add(self, d: AgentDef | ToolDef) -> None:
        """Register an agent or a tool. A later agent of the same name and version replaces
        it; one of another version is registered beside it (and starts the new runs)."""
        if isinstance(d, AgentDef):
            self.agents[d.name] = d
            self.versions.setdefault(d.name, {})[d.version] = d
            self.serving = serving(self.versions)
        else:
            self.tools[d.name] = d

    def registered(self, agent: str, version: str | None, run_id: str) -> AgentDef | None:
        """The agent registered for a run of ``agent`` at ``version`` (None: not
        registered). NotFound when the agent is registered at other versions only."""
        defs = self.versions.get(agent)
        if not defs:
            return None
        found = defs.get(version, defs.get(None) if set(defs) == {None} else None)
        if found is None:
            raise NotFound(
                f"run {run_id}: agent {agent!r} version {version!r} is not served by this "
                f"app, which registers {_versions(defs)}: keep the code that finishes it "
                f"registered beside the new one (@app.agent(name={agent!r}, "
                f"version={version!r})) until no run of that version is in flight "
                f"(tether runs --agent {agent} --version {version or 'none'}; "
                f"docs/deploys.md)"
            )
        return found

    def allow(self, modules: Iterable[str]) -> None:
        """Allow importing ``modules`` (and their submodules)."""
        self.code = self.code | check_modules(modules)

    def may_import(self, module: str) -> bool:
        """Whether a module a run names may be imported: allowed by ``code``, or the module
        of an agent or tool registered here."""
        defs: list[AgentDef | ToolDef] = [*self.agents.values(), *self.tools.values()]
        mine = {d.code.get("module") for d in defs}
        return module in mine or allowed(module, self.code)

    def find_tool(self, name: str, code: Any) -> ToolDef | None:
        """The tool of a step, for its compensation; None (logged) when it cannot be found:
        the run's failure is recorded all the same (``cancel(compensate=True)`` refuses
        instead, see :meth:`lookup_tool`)."""
        try:
            return self.lookup_tool(name, code)
        except NotFound as e:
            log.warning("no compensation for tool %r: %s", name, e)
            return None

    def lookup_tool(self, name: str, code: Any) -> ToolDef | None:
        """The tool ``name`` (registered, or found where its step recorded its ``code``)."""
        found = self.tools.get(name)
        if found is not None or not code:
            return found
        what = f"tool {name!r}"
        d = find(dict(code), "__tether_tool__", self.may_import, what)
        return d if isinstance(d, ToolDef) else None

    def resolve(self, agent: Callable[..., Any] | str) -> AgentDef:
        """The registered agent named ``agent``, or the definition a decorated function carries."""
        if isinstance(agent, str):
            found = self.agents.get(inputs.name(agent, "agent"))
            if found is None:
                raise NotFound(
                    f"no agent named {agent!r} is registered on this app (registered: "
                    f"{', '.join(sorted(self.agents)) or 'none'}); decorate it with @app.agent"
                )
            return found
        d = getattr(agent, "__tether_agent__", None)
        if not isinstance(d, AgentDef):
            raise NotFound(
                f"{getattr(agent, '__qualname__', agent)!r} is not a tether agent; "
                f"decorate it with @app.agent"
            )
        return d

    def agent_for(self, record: RunRecord) -> AgentDef:
        """The agent of a run at its version: registered here, or found where the run
        recorded its code (which must declare no version, or the run's)."""
        found = self.registered(record.agent, record.version, record.id)
        if found is None:
            found = self._found.get((record.agent, record.version))
        if found is not None:
            return found
        what = f"run {record.id}: agent {record.agent!r}"
        d = find(record.code, "__tether_agent__", self.may_import, what)
        if not isinstance(d, AgentDef) or d.name != record.agent:
            found_name = d.name if isinstance(d, AgentDef) else "no agent"
            raise NotFound(
                f"{what}: its recorded code {record.code.get('module')}."
                f"{record.code.get('qualname')} is {found_name!r}, not that agent; "
                f"pass --app pkg.module:app"
            )
        if d.version is not None and d.version != record.version:
            raise NotFound(
                f"{what}: its recorded code {record.code.get('module')}."
                f"{record.code.get('qualname')} is version {d.version!r} now, not the "
                f"run's {record.version!r}; register the code of version "
                f"{record.version!r} (pass --app pkg.module:app; docs/deploys.md)"
            )
        self._found[(record.agent, record.version)] = d
        return d


def serving(versions: Mapping[str, Mapping[str | None, AgentDef]]) -> Serving | None:
    """The claim filter of an app's registered versions; None when no agent declares one."""
    pinned = sorted(name for name, defs in versions.items() if set(defs) != {None})
    if not pinned:
        return None
    served = tuple((name, v) for name in pinned for v in versions[name])
    return Serving(tuple(pinned), served)


def _versions(defs: Mapping[str | None, AgentDef]) -> str:
    names = sorted(repr(v) for v in defs)
    return "version " + names[0] if len(names) == 1 else "versions " + ", ".join(names)


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


@overload
def agent(fn: F) -> F: ...


@overload
def agent(
    fn: None = None,
    *,
    name: str | None = None,
    version: Version = None,
    limits: Limits | None = None,
    workspace: Workspace | str | os.PathLike[str] | None = None,
) -> Callable[[F], F]: ...


def agent(
    fn: F | None = None,
    *,
    name: str | None = None,
    version: Version = None,
    limits: Limits | None = None,
    workspace: Workspace | str | os.PathLike[str] | None = None,
) -> F | Callable[[F], F]:
    """Declare an agent without an App (``@tether.agent``): any App runs it, and a
    resume in another process finds it by the module its run recorded, once the
    operator allows that module (``code=``, ``--code``: see :mod:`tether.engine.registry`)."""

    def declare(f: F) -> F:
        d = _define(f, name, version, check_limits(limits, "@agent(limits=...)"))
        d = replace(d, workspace=workspace_of(workspace, "@agent(workspace=...)"))
        f.__tether_agent__ = d  # type: ignore[attr-defined]
        return f

    return declare(fn) if fn is not None else declare


@overload
def tool(fn: F) -> F: ...


@overload
def tool(
    fn: None = None,
    *,
    risk: str = "write",
    compensate: Callable[..., Any] | None = None,
    on_doubt: str | None = None,
    retry: Retry | None = None,
    name: str | None = None,
    secret: Sequence[str] = (),
    contract: bool | Sequence[Rule] | None = None,
) -> Callable[[F], F]: ...


def tool(
    fn: F | None = None,
    *,
    risk: str = "write",
    compensate: Callable[..., Any] | None = None,
    on_doubt: str | None = None,
    retry: Retry | None = None,
    name: str | None = None,
    secret: Sequence[str] = (),
    contract: bool | Sequence[Rule] | None = None,
) -> F | Callable[[F], F]:
    """Declare a tool without an App (``@tether.tool(risk=…)``); see :meth:`App.tool`."""

    def declare(f: F) -> F:
        a_function(f)  # before its name is read
        d = define_tool(
            f,
            name=name,
            risk=risk,
            compensate=compensate,
            on_doubt=on_doubt,
            retry=retry,
            secret=secret,
            rules=tool_rules(name or f.__name__, contract),
        )
        # the function is the tool too (app.tool(send) without rebinding send); what the
        # decorator returns also refuses a direct call in an agent (effects.guarded)
        f.__tether_tool__ = d  # type: ignore[attr-defined]
        return cast(F, guarded(d))

    return declare(fn) if fn is not None else declare


def source_version(fn: Callable[..., Any]) -> str:
    """A version derived from an agent's code: the first 12 hex digits of the SHA-256 of
    its function's source text. ``@app.agent(version=tether.source_version)``: any edit
    of the function (a comment too) is a new version, whose runs only workers with that
    code claim (docs/deploys.md, "Versions")."""
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError) as e:
        raise InvalidInput(
            f"source_version: the source of {getattr(fn, '__qualname__', fn)!r} cannot be "
            f"read ({e}); declare its version instead (version='2')"
        ) from None
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _define(
    fn: Callable[..., Any],
    name: str | None,
    version: Version,
    limits: Limits | None = None,
) -> AgentDef:
    if not inspect.isfunction(fn):  # a bound method, a partial, a callable object, a builtin
        raise TypeError(
            f"@app.agent decorates a function (def name(run, ...)), not {fn!r}: a run records "
            f"its agent's module and name, and a resume (in another process too) finds it "
            f"by them. Wrap it: def my_agent(run, *args): return obj.method(run, *args)"
        )
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"agent {fn.__qualname__!r} is a generator (it yields): a run's result is what "
            f"its agent returns, stored and replayed. Return the items (a list), or record "
            f"each with run.step as it is made"
        )
    params = list(inspect.signature(fn).parameters)
    if not params:
        raise TypeError(
            f"agent {fn.__qualname__!r} must take the run object as its first parameter, "
            f"e.g. def {fn.__name__}(run, ...)"
        )
    name = fn.__name__ if name is None else name
    inputs.name(name, "the agent's name")
    if callable(version):  # derived from the code (source_version)
        version = version(fn)
    inputs.optional_name(version, "the agent's version")
    code = {"module": fn.__module__, "qualname": fn.__qualname__}
    source = inspect.getsourcefile(fn)
    if source:
        code["file"] = os.path.abspath(source)
    return AgentDef(name, version, fn, inspect.iscoroutinefunction(fn), code, limits)
