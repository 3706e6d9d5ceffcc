"""PostgreSQL's hot statements as server-side functions (schema 13; see
``tether.store.postgres.functions``): a connection that prepares nothing (behind a
transaction pooler, or ``prepare="off"``) calls them; the functions find tether's tables
whatever the caller's search_path. (The store suite runs through them as ``pgbouncer``.)"""

from __future__ import annotations

import json

import psycopg
import pytest
from _conformance import PG_URL, Backend, ev, new_run

from tether.errors import StoreError
from tether.store.postgres import functions

_FAILING_LOAD = """
CREATE OR REPLACE FUNCTION load_run(text, bigint)
RETURNS TABLE (run_row text, snapshot_row text, event_rows text)
LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'load_run was called'; END $$
"""


def test_a_store_that_prepares_nothing_calls_the_functions(pg_backend: Backend) -> None:
    prepared, whole = pg_backend.open(), pg_backend.open(prepare="off")
    new_run(prepared, "r1", events=3)
    assert [e.seq for e in whole.load("r1").events] == [1, 2, 3]
    assert whole.append("r1", [ev(4)], expected_seq=3, epoch=1, now=1.0) == 4
    pg_backend.sql(_FAILING_LOAD)  # the function's body, not the statement, now runs
    with pytest.raises(StoreError, match="load_run was called"):
        pg_backend.open(prepare="off").load("r1")
    assert [e.seq for e in prepared.load("r1").events] == [1, 2, 3, 4]


def test_the_functions_find_tethers_tables_whatever_the_search_path(
    pg_backend: Backend,
) -> None:
    new_run(pg_backend.open(), "r1", events=2)
    schema = pg_backend.schema
    with psycopg.connect(PG_URL, autocommit=True) as conn:  # search_path: the default
        row = conn.execute(f'SELECT * FROM "{schema}".load_run(%s, %s)', ("r1", 10)).fetchone()
        assert row is not None and json.loads(row[0])["id"] == "r1"
        assert [e[1] for e in json.loads(row[2])] == [1, 2]
        fenced = conn.execute(  # epoch 7 is not the run's: nothing appended, 0 rows
            f'SELECT "{schema}".append_event(3, %s, %s, 1.0, NULL, %s, 7, 2)',
            ("note", "{}", "r1"),
        ).fetchone()
        assert fenced == (0,)
        settings = conn.execute(
            "SELECT p.proname, p.proconfig FROM pg_proc p JOIN pg_namespace n "
            "ON n.oid = p.pronamespace WHERE n.nspname = %s ORDER BY p.proname",
            (schema,),
        ).fetchall()
    # claim_fast twice: schema 17's beside schema 13's (kept for an older tether's
    # processes still running while the first upgraded one migrates the store)
    assert sorted({name for name, _ in settings}) == sorted(functions.HOT)
    assert [name for name, _ in settings].count("claim_fast") == 2
    for name, config in settings:
        assert sorted(config) == [
            "plan_cache_mode=force_generic_plan",
            f"search_path={schema}",
        ], name
