"""Helpers of the conformance tests: store locations, and runs and events with known contents."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tether.model.events import NewEvent
from tether.store import NewRun, Store

PG_URL = os.environ.get("TETHER_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
T0 = 1_700_000_000.0


def with_schema(url: str, schema: str) -> str:
    """``url`` naming a PostgreSQL schema for tether."""
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


@dataclass
class Backend:
    """One fresh tether store location, and raw access to its tables for the tests."""

    name: str
    url: str  # what tether.open takes
    schema: str | None = None  # PostgreSQL only
    opened: list[Any] = field(default_factory=list)

    def open(self, **options: Any) -> Store:
        """A new store on this location (closed after the test)."""
        store: Store
        if self.name == "sqlite":
            from tether.store.sqlite import SQLiteStore

            store = SQLiteStore(self.url, **options)
        else:
            from tether.store.postgres import PostgresStore

            store = PostgresStore(self.url, **options)
        self.opened.append(store)
        return store

    def sql(self, statement: str) -> list[tuple[Any, ...]]:
        """Run one parameterless statement straight on tether's tables; return its rows."""
        if self.name == "sqlite":
            with sqlite3.connect(self.url) as conn:
                return list(conn.execute(statement).fetchall())
        import psycopg

        with psycopg.connect(
            PG_URL, autocommit=True, options=f"-c search_path={self.schema}"
        ) as conn:
            cur = conn.execute(statement.encode())
            return list(cur.fetchall()) if cur.description else []

    def sql_params(self, statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Run one statement with named parameters (psycopg or sqlite3 style); its rows."""
        if self.name == "sqlite":
            with sqlite3.connect(self.url) as conn:
                return list(conn.execute(statement, params).fetchall())
        import psycopg

        with psycopg.connect(
            PG_URL, autocommit=True, options=f"-c search_path={self.schema}"
        ) as conn:
            cur = conn.execute(statement.encode(), params)
            return list(cur.fetchall()) if cur.description else []

    def close_all(self) -> None:
        for store in self.opened:
            with contextlib.suppress(Exception):  # a test may have closed it already
                store.close()


def ev(n: int = 0, *, type_: str = "note", actor: str | None = "tester") -> NewEvent:
    """An event whose data says which one it is."""
    return NewEvent(type_, f'{{"n": {n}}}', T0 + n, actor)


def new_run(
    store: Store,
    run_id: str = "run-1",
    *,
    events: int = 2,
    owner: str | None = "w1",
    now: float = T0,
    ttl: float = 30.0,
    **fields: Any,
) -> None:
    """Create a run with ``events`` events; leased to ``owner`` (epoch 1) unless None."""
    run = NewRun(
        run_id,
        fields.pop("agent", "agent"),
        fields.pop("version", None),
        fields.pop("status", "running"),
        **fields,
    )
    store.create_run(
        run, [ev(i) for i in range(1, events + 1)], lease_owner=owner, now=now, ttl=ttl
    )


def seqs(store: Store, run_id: str = "run-1") -> list[int]:
    """The seqs of a run's log, in order."""
    return [e.seq for e in store.read_events(run_id)]


def until(check: Callable[[], Any], seconds: float = 10.0) -> bool:
    """Poll ``check()`` until it holds or ``seconds`` pass (another thread is doing the
    work); whether it held. The caller asserts what it expects, for a useful message."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True
