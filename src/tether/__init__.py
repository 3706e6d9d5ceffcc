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

from typing import Any as _Any

from . import context as context  # tether.context.build(…): the context window as a cache
from .app import AgentDef, App, RunHandle, agent, tool
from .clock import Clock, FakeClock, SystemClock
from .codec import decode, encode
from .errors import (
    ApprovalDenied,
    ArtifactCorrupt,
    ClockSkew,
    Conflict,
    CorruptRecord,
    DecisionRefused,
    EncodeError,
    InvalidState,
    LeaseLost,
    NondeterminismError,
    NotATetherDatabase,
    NotFound,
    QueueFull,
    RunFailed,
    SchemaTooNew,
    StepTimeout,
    StoreError,
    StoreFull,
    StoreUnavailable,
    TetherError,
    WaitTimeout,
)
from .events import Event
from .journal import StepInfo, current_step
from .memory import Embedder as _Embedder
from .retry import Retry
from .runtime import AsyncRun, Policy, Run
from .state import RunState, StepState, Usage, fold

__all__ = [
    "AgentDef",
    "App",
    "ApprovalDenied",
    "ArtifactCorrupt",
    "AsyncRun",
    "Clock",
    "ClockSkew",
    "Conflict",
    "CorruptRecord",
    "DecisionRefused",
    "EncodeError",
    "Event",
    "FakeClock",
    "InvalidState",
    "LeaseLost",
    "NondeterminismError",
    "NotATetherDatabase",
    "NotFound",
    "Policy",
    "QueueFull",
    "Retry",
    "Run",
    "RunFailed",
    "RunHandle",
    "RunState",
    "SchemaTooNew",
    "StepInfo",
    "StepState",
    "StepTimeout",
    "StoreError",
    "StoreFull",
    "StoreUnavailable",
    "SystemClock",
    "TetherError",
    "Usage",
    "WaitTimeout",
    "__version__",
    "agent",
    "current_step",
    "decode",
    "encode",
    "fold",
    "open",
    "tool",
]

__version__ = "0.1.0"


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
    """
    from .store import Store
    from .store.sqlite import SQLiteStore, sqlite_path

    if not isinstance(url, str) or not url:
        raise ValueError(f"tether.open needs a path or a URL, not {url!r}")
    if durability not in ("normal", "full"):
        raise ValueError(f"durability is 'normal' or 'full', not {durability!r}")
    store: Store
    if url.startswith(("postgres://", "postgresql://")):
        from .store.postgres import PostgresStore  # psycopg is imported only for PostgreSQL

        store = PostgresStore(url, **options)
    else:
        store = SQLiteStore(sqlite_path(url), synchronous=durability, **options)
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
    )
    if embed is not None:
        app.memory.embedder = embed
    return app
