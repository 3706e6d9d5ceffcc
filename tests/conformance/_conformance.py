"""Helpers of the conformance tests: store locations, and runs and events with known contents."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from tether.store import Store

# The runs and events with known contents are the shipped suite's (tether.testing).
from tether.testing.base import T0, claimed, enqueue, ev, new_run, race, seqs, until

__all__ = ["PG_URL", "T0", "Backend", "claimed", "enqueue", "ev", "new_run", "race", "seqs"]
__all__ += ["until", "with_schema"]

PG_URL = os.environ.get("TETHER_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
PGBOUNCER_URL = os.environ.get("TETHER_PGBOUNCER_URL") or None  # .ci/run starts one


def with_schema(url: str, schema: str) -> str:
    """``url`` naming a PostgreSQL schema for tether."""
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


def pooled(url: str, schema: str) -> str:
    """``url`` (a PgBouncer's) naming ``schema``; with ``prepare=on`` when the pooler keeps
    prepared statements (``TETHER_PGBOUNCER_PREPARED``: PgBouncer 1.21+ started with
    ``max_prepared_statements``, see .ci/pgbouncer), else tether prepares nothing there."""
    keeps = os.environ.get("TETHER_PGBOUNCER_PREPARED", "0") not in ("", "0")
    return with_schema(url, schema) + ("&prepare=on" if keeps else "")


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
