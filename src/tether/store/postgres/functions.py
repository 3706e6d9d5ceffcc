"""The hot statements as server-side functions: what a connection that prepares nothing
(behind a transaction pooler) sends instead of each statement's whole text.

A statement sent whole is parsed and planned by the server every time; behind a pooler
that keeps no prepared statements, that was most of the cost of an append or a claim
(bench/README.md, "PgBouncer"). A PL/pgSQL function's statements are planned once per
server connection and their plans kept, and a pooler keeps its server connections: the
client sends a short ``SELECT * FROM "schema".append_event($1, …)`` (cheap to parse and
plan), and the statement inside runs on its cached plan.

Each function's body is the statement of ``sql/postgres/queries.sql`` (its ``$n`` are
the function's arguments, in the order of :class:`tether.store.pgwire.Prepared`), so
both paths run the same SQL and read the same result: a row count is returned as a
row, JSON texts as text columns. The functions are created by a migration (schema 13),
whose text :func:`migration` writes; a test checks that the newest migration defining
each function still matches its statement, so a changed statement needs a migration
that replaces its function (``python -m tether.store.postgres.functions``).

Two settings are the function's own (a ``SET`` clause: no session state): its
``search_path``, tether's schema as the migration found it (callers name none behind a
pooler), and ``plan_cache_mode = force_generic_plan``, the plans a direct connection
uses (see ``pgwire.WireConnection.plan_once`` and ``claim_fast``).
"""

from __future__ import annotations

import re

from tether.store.pgwire import Prepared
from tether.store.queries import load_queries

# name: what it returns, and how its body ends (a statement without a result returns its
# row count, as the direct path reads it: PGresult.command_tuples)
RETURNS = {
    "append_event": "bigint",
    "append_event_effect": "SETOF bigint",
    "append_event_transition": "SETOF bigint",
    "append_events_transition": "SETOF bigint",
    "append_events": "TABLE (n_fenced bigint, n_ok bigint)",
    "load_run": "TABLE (run_row text, snapshot_row text, event_rows text)",
    "claim_fast": "TABLE (claimed_row text, new_epoch bigint, snapshot_row text, event_rows text)",
}
HOT = tuple(RETURNS)
_CAST = re.compile(r"%\((\w+)\)s::(\w+(?:\[\])?)")


def arguments(statement: str) -> list[tuple[str, str]]:
    """``(name, type)`` of a statement's parameters, in the order of their first use
    (``Prepared``'s ``$n``)."""
    out: dict[str, str] = {}
    for name, cast in _CAST.findall(statement):
        if out.setdefault(name, cast) != cast:
            raise ValueError(f"parameter {name} is cast to both {out[name]} and {cast}")
    return list(out.items())


def call(name: str, statement: str) -> str:
    """The call of ``name``'s function, with the statement's named parameters."""
    args = ", ".join(f"%({n})s::{t}" for n, t in arguments(statement))
    return f"SELECT * FROM {name}({args})"


def definition(name: str, statement: str) -> str:
    """``CREATE OR REPLACE FUNCTION`` for the hot statement ``name``."""
    types = ", ".join(t for _n, t in arguments(statement))
    body = Prepared(name, statement).sql.decode()
    if RETURNS[name] == "bigint":  # no result: the count of rows it wrote
        code = f"DECLARE n bigint;\nBEGIN\n{body};\nGET DIAGNOSTICS n = ROW_COUNT;\nRETURN n;"
    else:
        code = f"BEGIN\nRETURN QUERY\n{body};"
    volatility = "STABLE" if name == "load_run" else "VOLATILE"
    return (
        f"CREATE OR REPLACE FUNCTION {name}({types}) RETURNS {RETURNS[name]}\n"
        f"LANGUAGE plpgsql {volatility}\n"
        f"SET search_path FROM CURRENT\n"
        f"SET plan_cache_mode = force_generic_plan\n"
        f"AS $fn$\n#variable_conflict use_column\n{code}\nEND\n$fn$;\n"
    )


def migration() -> str:
    """The functions of every hot statement as they are now (a migration's text)."""
    queries = load_queries("postgres")
    return "\n".join(definition(name, queries[name]) for name in HOT)


def defined(text: str) -> dict[str, str]:
    """The function definitions in a migration's text, by name."""
    found = re.finditer(r"^CREATE OR REPLACE FUNCTION (\w+)\(.*?^\$fn\$;\n", text, re.M | re.S)
    return {m.group(1): m.group(0) for m in found}


if __name__ == "__main__":
    print(migration(), end="")
