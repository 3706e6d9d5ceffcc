"""Store.transaction() (used by store/context_rows.py) on both backends: all or
nothing, and driver errors come out as StoreError."""

from __future__ import annotations

import pytest
from _conformance import Backend

import tether
from tether.store import Store

pytestmark = pytest.mark.conformance


def _insert(backend: Backend) -> str:
    mark = ":" if backend.name == "sqlite" else "%("
    end = "" if backend.name == "sqlite" else ")s"
    names = ["sha256", "size", "data", "now"]
    values = ", ".join(f"{mark}{n}{end}" for n in names)
    return f"INSERT INTO blobs (sha256, size, data, created_at) VALUES ({values})"


def _row(sha: str) -> dict[str, object]:
    return {"sha256": sha, "size": 1, "data": b"x", "now": 1.0}


def test_the_block_commits_together(store: Store, backend: Backend) -> None:
    with store.transaction() as conn:
        conn.execute(_insert(backend), _row("a"))
        conn.execute(_insert(backend), _row("b"))
    assert backend.sql("SELECT sha256 FROM blobs ORDER BY sha256") == [("a",), ("b",)]


def test_an_exception_rolls_the_block_back(store: Store, backend: Backend) -> None:
    with pytest.raises(RuntimeError, match="changed my mind"), store.transaction() as conn:
        conn.execute(_insert(backend), _row("a"))
        raise RuntimeError("changed my mind")
    assert backend.sql("SELECT count(*) FROM blobs") == [(0,)]
    with store.transaction() as conn:  # the store is still usable
        conn.execute(_insert(backend), _row("c"))
    assert backend.sql("SELECT sha256 FROM blobs") == [("c",)]


def test_a_driver_error_is_a_store_error_and_rolls_back(store: Store, backend: Backend) -> None:
    with pytest.raises(tether.StoreError), store.transaction() as conn:
        conn.execute(_insert(backend), _row("a"))
        conn.execute(_insert(backend), _row("a"))  # the same primary key
    assert backend.sql("SELECT count(*) FROM blobs") == [(0,)]


def test_the_dialect_names_the_sql_folder(store: Store, backend: Backend) -> None:
    assert store.dialect == backend.name
