"""statement_timeout and lock_timeout of the PostgreSQL store: a statement stuck behind
another transaction's lock is cancelled instead of holding on forever, and the error
names the statement (and its run)."""

from __future__ import annotations

import psycopg
import pytest
from _conformance import PG_URL, Backend, ev, new_run

from tether.errors import StoreUnavailable
from tether.store.postgres import PostgresStore


def _locked(b: Backend, run_id: str) -> psycopg.Connection[tuple[object, ...]]:
    """A direct connection holding run ``run_id``'s row locked (until it is closed)."""
    conn = psycopg.connect(PG_URL)
    conn.execute(f'SELECT 1 FROM "{b.schema}".runs WHERE id = %s FOR UPDATE', (run_id,))
    return conn


def test_a_stuck_append_times_out_naming_its_statement(pg_backend: Backend) -> None:
    store = pg_backend.open(statement_timeout=0.3)
    new_run(store, "r1", events=1)
    holder = _locked(pg_backend, "r1")
    try:
        with pytest.raises(StoreUnavailable) as caught:
            store.append("r1", [ev(2)], expected_seq=1, epoch=1, now=2.0)
    finally:
        holder.close()
    text = str(caught.value)
    assert "statement_timeout ran out after 0.3 s" in text and "append_event" in text, text
    assert "'r1'" in text and "nothing of it was committed" in text
    store.append("r1", [ev(2)], expected_seq=1, epoch=1, now=2.0)  # the lock gone: it works
    assert [e.seq for e in store.load("r1").events] == [1, 2]


def test_a_lock_wait_times_out_naming_the_operation(pg_backend: Backend) -> None:
    store = pg_backend.open(lock_timeout=0.2)
    new_run(store, "r1", events=1)
    holder = _locked(pg_backend, "r1")
    try:
        with pytest.raises(StoreUnavailable) as caught:
            store.request_cancel("r1", compensate=True, now=3.0)
    finally:
        holder.close()
    text = str(caught.value)
    assert "lock_timeout ran out after 0.2 s" in text and "request_cancel" in text, text
    assert "'r1'" in text


def test_timeouts_are_refused_behind_a_pooler_and_checked(pg_backend: Backend) -> None:
    with pytest.raises(ValueError, match="set them on the role"):
        PostgresStore(pg_backend.url, pooler=True, statement_timeout=5)
    with pytest.raises(ValueError, match="in seconds, above 0"):
        PostgresStore(pg_backend.url, lock_timeout=0)
