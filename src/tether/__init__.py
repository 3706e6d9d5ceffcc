"""tether: durable, auditable state for LLM agents.

One front door::

    import tether
    app = tether.open("agent.db")          # or "sqlite:///agent.db"

    @app.agent
    def triage(run, ticket: str) -> dict:
        facts = run.step("fetch", fetch_ticket, ticket)
        ...

    handle = app.run(triage, ticket="T-1")
"""

from __future__ import annotations

import logging as _logging
import weakref as _weakref
from collections.abc import Iterable as _Iterable
from typing import Any as _Any

from tether import context as context  # tether.context.build: the context window
from tether.app import App
from tether.context.memory import Embedder as _Embedder
from tether.engine import tracing as _traces
from tether.engine.calls import StepInfo, current_step
from tether.engine.contracts import Rule
from tether.engine.executor import RunHandle
from tether.engine.policy import Policy
from tether.engine.registry import AgentDef, agent, source_version, tool
from tether.engine.retry import Retry
from tether.engine.runtime import AsyncRun, Run
from tether.engine.tracing import Tracing
from tether.errors import (
    ApprovalDenied,
    ArtifactCorrupt,
    BudgetExceeded,
    ChildFailed,
    ClockSkew,
    Conflict,
    ContractViolation,
    CorruptRecord,
    DecisionRefused,
    EncodeError,
    Forbidden,
    InvalidInput,
    InvalidState,
    LeaseLost,
    NondeterminismError,
    NotATetherDatabase,
    NotFound,
    QueueFull,
    RevertRefused,
    RunDamaged,
    RunFailed,
    SchemaTooNew,
    StepTimeout,
    StoreError,
    StoreFull,
    StoreUnavailable,
    TetherError,
    VersionConflict,
    WaitTimeout,
    WorkspaceError,
    WorkspaceLimit,
)
from tether.model import budgets as _budgets
from tether.model import redact as _redact
from tether.model.budgets import Limits, Price
from tether.model.clock import Clock, FakeClock, SystemClock
from tether.model.codec import decode, encode
from tether.model.events import Event
from tether.model.redact import Redact
from tether.model.secrets import Secret
from tether.model.state import RunState, fold
from tether.model.steps import StepState, Usage
from tether.model.workspace import Workspace
from tether.model.workspace import workspace_of as _workspace_of
from tether.services import otel_metrics as _otel_metrics
from tether.services.identity import Identity, Role
from tether.services.otel_metrics import Metrics
from tether.store import urls as _urls
from tether.version import __version__

__all__ = [
    "AgentDef",
    "App",
    "ApprovalDenied",
    "ArtifactCorrupt",
    "AsyncRun",
    "BudgetExceeded",
    "ChildFailed",
    "Clock",
    "ClockSkew",
    "Conflict",
    "ContractViolation",
    "CorruptRecord",
    "DecisionRefused",
    "EncodeError",
    "Event",
    "FakeClock",
    "Forbidden",
    "Identity",
    "InvalidInput",
    "InvalidState",
    "LeaseLost",
    "Limits",
    "Metrics",
    "NondeterminismError",
    "NotATetherDatabase",
    "NotFound",
    "Policy",
    "Price",
    "QueueFull",
    "Redact",
    "Retry",
    "RevertRefused",
    "Role",
    "Rule",
    "Run",
    "RunDamaged",
    "RunFailed",
    "RunHandle",
    "RunState",
    "SchemaTooNew",
    "Secret",
    "StepInfo",
    "StepState",
    "StepTimeout",
    "StoreError",
    "StoreFull",
    "StoreUnavailable",
    "SystemClock",
    "TetherError",
    "Tracing",
    "Usage",
    "VersionConflict",
    "WaitTimeout",
    "Workspace",
    "WorkspaceError",
    "WorkspaceLimit",
    "__version__",
    "agent",
    "current_step",
    "decode",
    "encode",
    "fold",
    "open",
    "source_version",
    "tool",
]


def open(
    url: str,
    *,
    durability: str = "normal",
    clock: Clock | None = None,
    retry: Retry | None = None,
    snapshot_every: int = 500,
    lease_ttl: float = 30.0,
    policy: Policy | None = None,
    approver_groups: dict[str, list[str]] | None = None,
    inline_sleep_max: float = 60.0,
    embed: _Embedder | None = None,
    code: _Iterable[str] | None = None,
    redact: _Any = None,
    tracing: bool | Tracing | None = None,
    metrics: bool | Metrics | None = None,
    prices: _Any = None,
    workspace: _Any = None,
    **options: _Any,
) -> App:
    """Open (creating if needed) a tether store and return its App.

    ``url`` is a path or ``sqlite:///path`` for the embedded SQLite store, or
    ``postgresql://user@host/db[?schema=name]`` for PostgreSQL (tables in schema
    ``tether`` unless named; needs ``pip install 'tether[postgres]'``).
    ``durability`` is ``"normal"`` (SQLite ``synchronous=NORMAL``: a power loss
    may drop the last commits, a process crash never does) or ``"full"``;
    PostgreSQL follows the server's ``synchronous_commit``.
    ``embed`` (texts -> one list of floats per text) turns on semantic search in
    ``app.memory`` (see docs/memory.md).
    ``code``: modules (and packages) that a run this App did not register may name
    for its agent or tool code; nothing else a database names is imported (see
    :mod:`tether.engine.registry`).
    ``redact``: the redaction rules applied to every text stored (see docs/secrets.md):
    True the defaults (:attr:`Redact.DEFAULTS`: API keys, tokens, private keys, values of
    credential-named keys), False none, or a list of :class:`Redact` rules and regular
    expressions. The rules are this process's: an ``open`` that names them sets them
    for every App of the process; None (the default) leaves them as they are (the
    defaults, unless an ``open`` changed them).
    ``prices``: model name -> :class:`Price` (per million tokens) or a dict of the same
    keys: the cost of a model call whose result reports none (see docs/budgets.md).
    ``options`` go to the backend: ``busy_timeout`` for SQLite; ``schema``,
    ``min_size``, ``max_size``, ``timeout``, ``lanes`` and ``linger`` for PostgreSQL, and
    ``read_only=True`` for a replica's URL (reads only: see docs/postgres.md, "Reads from
    a replica"); another name is refused, listing these.
    ``tracing``: OpenTelemetry spans of every execution (needs ``tether[otel]``; see
    docs/telemetry.md): True with the global tracer provider, or a :class:`Tracing`
    (its provider, and ``capture_content``); off by default.
    ``metrics``: OpenTelemetry metrics of this process's executions and of the database
    (needs ``tether[otel]``; see docs/metrics.md): True with the global meter provider, or
    a :class:`Metrics` (its provider); off by default.
    ``workspace``: the directory (or a :class:`Workspace`) every agent without its own
    works in, checkpointed after each step and restored on resume (docs/workspace.md).
    """
    from tether.store import Store
    from tether.store.sqlite import SQLiteStore, sqlite_path
    from tether.store.urls import is_postgres, postgres_url

    _check_open(url, durability, lease_ttl, inline_sleep_max, snapshot_every)
    _check_config(clock, retry, policy, approver_groups)
    rules = None if redact is None else _redact.rules_of(redact)  # checked before opening
    traced = _traces.configured(tracing)  # checked before opening
    metered = _otel_metrics.configured(metrics)
    priced = _budgets.check_prices(prices)
    worked = _workspace_of(workspace, "tether.open(workspace=...)")
    if rules is not None and rules != _redact.active():
        _one_rule_set(url)
    store: Store
    if is_postgres(url):
        from tether.store.postgres import PostgresStore

        _check_options(PostgresStore, "PostgreSQL", options)
        store = PostgresStore(postgres_url(url), **options)
    else:
        _check_options(SQLiteStore, "SQLite", options, set_here=frozenset({"synchronous"}))
        store = SQLiteStore(sqlite_path(url), synchronous=durability, **options)
    try:
        app = App(
            store,
            clock=clock,
            retry=retry or Retry(),
            snapshot_every=snapshot_every,
            lease_ttl=lease_ttl,
            url=url,
            policy=policy,
            approver_groups=dict(approver_groups or {}),
            inline_sleep_max=inline_sleep_max,
            code=code,
        )
    except BaseException:
        store.close()
        raise
    app.prices = priced
    app.workspace = worked
    if embed is not None:
        app.memory.embedder = embed
    app._executor.tracing = traced
    if metered is not None:
        _otel_metrics.attach(app, metered)
    if rules is not None:
        _redact.configure(rules)
    _RULED.add(app)
    return app


# The Apps open in this process: they share its redaction rules (every text any of them
# stores passes through the codec's rules), so an open that changes the rules while
# others are open says so in the log rather than changing what they store silently.
_RULED: _weakref.WeakSet[App] = _weakref.WeakSet()


def _one_rule_set(url: str) -> None:
    live = [a for a in _RULED if not getattr(a, "_closed", False)]
    if live:
        _logging.getLogger("tether").warning(
            "redact: %s sets other redaction rules for this process, where the App on %s "
            "is open: from now on what it stores is redacted by the new rules too (the rules "
            "are the process's; give every App the same redact=, or use separate processes)",
            _urls.redact(url),
            _urls.redact(live[0].url or "(a store)"),
        )


def _check_open(
    url: _Any, durability: _Any, lease_ttl: _Any, inline_sleep_max: _Any, snapshot_every: _Any
) -> None:
    from tether.model import inputs

    if not isinstance(url, str) or not url or "\x00" in url:
        raise InvalidInput(f"tether.open needs a path or a URL, not {url!r}")
    if durability not in ("normal", "full"):
        raise InvalidInput(f"durability is 'normal' or 'full', not {durability!r}")
    inputs.seconds(lease_ttl, "lease_ttl", above=True)
    inputs.seconds(inline_sleep_max, "inline_sleep_max")
    inputs.integer(snapshot_every, "snapshot_every", low=1)


def _check_config(clock: _Any, retry: _Any, policy: _Any, approver_groups: _Any) -> None:
    from tether.model import inputs

    for value, cls, what in ((retry, Retry, "retry"), (policy, Policy, "policy")):
        if value is not None and not isinstance(value, cls):
            raise InvalidInput(f"{what} must be a tether.{cls.__name__}, not {value!r}")
    if clock is not None and not callable(getattr(clock, "now", None)):
        raise InvalidInput(f"clock must have now() and sleep() (tether.SystemClock), not {clock!r}")
    if approver_groups is None:
        return
    if not isinstance(approver_groups, dict):
        raise InvalidInput("approver_groups maps a group's name to its members: {'ops': ['ann']}")
    for group, members in approver_groups.items():
        inputs.name(group, "approver_groups: a group's name")
        if isinstance(members, str) or not isinstance(members, list | tuple | set | frozenset):
            raise InvalidInput(f"approver_groups[{group!r}] is a list of names, not {members!r}")
        for m in members:
            inputs.name(m, f"approver_groups[{group!r}]: a member")


def _check_options(
    store: type, backend: str, options: dict[str, _Any], set_here: frozenset[str] = frozenset()
) -> None:
    """Refuse options the backend does not take, listing those it does."""
    import inspect

    valid = [
        n
        for n, p in inspect.signature(store).parameters.items()
        if p.kind is p.KEYWORD_ONLY and n not in set_here
    ]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise InvalidInput(
            f"tether.open: {', '.join(unknown)} is not an option of the {backend} store; "
            f"its options are {', '.join(valid)} (see help(tether.open))"
        )
    from tether.model import inputs

    for option, value in options.items():
        if value is None and option in ("lanes", "schema"):  # their defaults
            continue
        if option in ("busy_timeout", "timeout"):
            inputs.seconds(value, option, above=True)
        elif option == "linger":
            inputs.seconds(value, option)
        elif option in ("min_size", "max_size", "lanes"):
            inputs.integer(value, option, low=0 if option == "min_size" else 1, high=10_000)
        elif option == "schema":
            inputs.name(value, option)
