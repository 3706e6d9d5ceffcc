"""Sessions that a transaction pooler cannot break (PgBouncer in transaction mode, RDS
Proxy, Supabase's pooler), and URLs shown without their passwords.

Behind a transaction pooler each transaction may run on another server connection, so
nothing set on a connection lasts: no startup ``options`` (PgBouncer refuses them), no
``SET``, no named prepared statements (before PgBouncer 1.21), no LISTEN. tether keeps
no such state it needs:

- every statement names tether's schema (:func:`qualify`: the tables and functions of
  the migrations, written ``"schema".table``), and a migration sets its ``search_path``
  with ``SET LOCAL`` inside its own transaction (the hot statements' functions keep it
  as their own setting: see ``functions``);
- statements are prepared only where the connection keeps them (:func:`resolve_prepare`:
  ``prepare="auto"`` prepares on a direct connection and not behind a pooler, detected
  by :func:`probe` or declared with ``pooler=True``);
- the listener of wake-ups connects to ``listen_url`` (a direct connection or a
  session-mode pool); behind a pooler without one, waiting workers poll.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg

from tether.errors import InvalidInput
from tether.store.queries import migrations
from tether.store.urls import redact

__all__ = ["qualify", "qualify_sql", "redact", "resolve_prepare"]

PREPARE_MODES = ("auto", "on", "off")
# the extra startup setting a direct connection takes; a pooler refuses or drops it
PROBE_SETTING = "extra_float_digits"
PROBE_VALUE = "3"
_TABLES = tuple(
    sorted(
        {
            m.group(1)
            for _n, _f, text in migrations("postgres")
            for m in re.finditer(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", text)
        }
    )
)
# the functions of the migrations (schema 13: the hot statements, see functions)
_FUNCTIONS = tuple(
    sorted(
        {
            m.group(1)
            for _n, _f, text in migrations("postgres")
            for m in re.finditer(r"^CREATE (?:OR REPLACE )?FUNCTION (\w+)", text, re.M)
        }
    )
)
# a table's (or function's) name standing alone: not a column of it (runs.id), not
# already qualified (x.runs), not in quotes or a parameter's name (%(runs)s)
_TABLE = re.compile(r'(?<![\w."])(?<!%\()\b(' + "|".join(_TABLES + _FUNCTIONS) + r')\b(?![\w."])')


def qualify_sql(statement: str, schema: str) -> str:
    """``statement`` with each of tether's tables named in ``schema``."""
    return _TABLE.sub(lambda m: f'"{schema}".{m.group(1)}', statement)


@cache
def _qualified(frozen: tuple[tuple[str, str], ...], schema: str) -> dict[str, str]:
    return {name: qualify_sql(text, schema) for name, text in frozen}


def qualify(queries: Mapping[str, str], schema: str) -> dict[str, str]:
    """Named queries with every table named in ``schema`` (computed once per schema)."""
    return _qualified(tuple(queries.items()), schema)


def resolve_prepare(prepare: Any, pooled: bool) -> bool:
    """Whether to prepare statements: ``on``/``off`` as said; ``auto``: not behind a pooler."""
    if prepare is True or prepare is False:
        return prepare
    if prepare not in PREPARE_MODES:
        raise InvalidInput(
            f"prepare must be one of {', '.join(PREPARE_MODES)} (auto: prepared statements on "
            f"a direct connection, none behind a transaction pooler), not {prepare!r}"
        )
    return prepare == "on" or (prepare == "auto" and not pooled)


def check_pooler(pooler: Any) -> bool | None:
    """``pooler``: True (declared behind a transaction pooler), False (direct), or None
    (detect); also given as a URL parameter (``?pooler=true``)."""
    if pooler is None or pooler is True or pooler is False:
        return pooler
    text = str(pooler).lower()
    if text in ("auto", ""):
        return None
    if text in ("1", "true", "on", "yes"):
        return True
    if text in ("0", "false", "off", "no"):
        return False
    raise InvalidInput(f"pooler must be true, false or auto (detect), not {pooler!r}")


def take_params(url: str, names: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """``(url without tether's parameters, {name: value})`` for the query parameters
    ``names`` (the last of each wins); the rest of the query is kept byte for byte."""
    parts = urlsplit(url)
    items = [i for i in parts.query.split("&") if i]
    found = {
        key: unquote(value) for key, _, value in (i.partition("=") for i in items) if key in names
    }
    rest = "&".join(i for i in items if i.partition("=")[0] not in names)
    return urlunsplit(parts._replace(query=rest)), found


def probe(conn: psycopg.Connection[Any]) -> bool:
    """Whether the connection (opened with the probe's startup option) lost it on the way:
    a pooler that drops startup options (PgBouncer's ``ignore_startup_parameters``)."""
    row = conn.execute(f"SELECT current_setting('{PROBE_SETTING}')").fetchone()
    return row is None or row[0] != PROBE_VALUE


def refused_options(e: BaseException) -> bool:
    """A connection refused for its startup options: a pooler (PgBouncer says
    ``unsupported startup parameter: options``)."""
    return "unsupported startup parameter" in str(e)
