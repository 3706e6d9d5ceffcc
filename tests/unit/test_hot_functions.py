"""PostgreSQL's hot statements as server-side functions (schema 13): each function is its
statement of queries.sql, so the pooled path runs the SQL the direct path prepares."""

from __future__ import annotations

import pytest

from tether.store.pgwire import Prepared
from tether.store.postgres import functions
from tether.store.queries import load_queries, migrations


def _newest_definitions() -> dict[str, str]:
    """Each function as the newest migration that defines it left it."""
    out: dict[str, str] = {}
    for _number, _name, text in migrations("postgres"):
        out.update(functions.defined(text))
    return out


def test_every_hot_statement_is_a_function_of_the_migrations() -> None:
    assert sorted(_newest_definitions()) == sorted(functions.HOT)


def test_each_function_is_its_statement_as_queries_sql_has_it_now() -> None:
    """A statement changed in queries.sql needs a migration that replaces its function
    (written by ``python -m tether.store.postgres.functions``)."""
    queries = load_queries("postgres")
    stored = _newest_definitions()
    for name in functions.HOT:
        assert stored[name] == functions.definition(name, queries[name]), (
            f"{name}: queries.sql's statement differs from its function in the migrations; "
            f"add a migration replacing it (python -m tether.store.postgres.functions)"
        )


def test_a_call_takes_the_statements_parameters_in_order() -> None:
    queries = load_queries("postgres")
    for name in functions.HOT:
        q = Prepared(name, queries[name], functions.call(name, queries[name]))
        assert q.call is not None and q.call.startswith(f"SELECT * FROM {name}($1::".encode())
        assert q.call.count(b"$") == len(q.params)
        body = functions.definition(name, queries[name])
        assert q.sql.decode() in body


def test_a_parameter_cast_two_ways_or_a_call_of_other_parameters_is_refused() -> None:
    with pytest.raises(ValueError, match="cast to both text and bigint"):
        functions.arguments("SELECT %(a)s::text, %(a)s::bigint")
    with pytest.raises(ValueError, match="its call takes other parameters"):
        Prepared("q", "SELECT %(a)s::text, %(b)s::text", "SELECT * FROM f(%(b)s::text)")
