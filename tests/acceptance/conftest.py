"""Fixtures of the acceptance tests: a fresh database on each backend for real processes."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_URL = os.environ.get("TETHER_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """What tether.open takes, for the test's processes: a SQLite file in ``tmp_path``, or
    a PostgreSQL schema of its own (dropped after the test)."""
    if request.param == "sqlite":
        yield str(tmp_path / "tether.db")
        return
    import psycopg

    schema = f"acc_{secrets.token_hex(4)}"
    try:
        psycopg.connect(PG_URL, connect_timeout=5).close()
    except Exception as e:
        pytest.fail(f"PostgreSQL at {PG_URL} cannot be reached ({e}); this test needs it")
    yield f"{PG_URL}?schema={schema}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())
