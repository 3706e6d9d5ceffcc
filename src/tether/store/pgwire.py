"""The PostgreSQL store's write path, straight on libpq (``psycopg.pq``).

A step's append is one prepared statement and one commit; the database work is
a few tens of microseconds, so what the client does around it shows. psycopg's
cursor layer (query conversion, adapters, cursor set-up, the pool's borrow)
costs a step more CPU than the INSERT itself. Appends are the only hot
statements, their parameters are few and of known types, so this module sends
them itself: each statement is prepared once per connection and executed with
its parameters already encoded as text, on one connection owned by the store's
group commit (only the batch's leader uses it, so it needs no lock).

A batch of several appends is sent as one pipeline ending in one Sync: one
round trip, and one implicit transaction, so one commit (and all of it rolls
back when a statement fails).

Behind a transaction pooler that does not keep prepared statements (``prepare=False``)
each statement is sent unnamed (parse, bind and execute in the same round trip): as the
call of its server-side function when it has one (``Prepared.call``: short to parse and
plan, the statement inside planned once per server connection), else whole; a pipeline
is still one transaction, so the pooler keeps it on one server connection.
``rewrite`` turns a statement's text into what this connection sends (the PostgreSQL
store names its schema in it).

Waiting for the server happens in ``select``, outside the GIL: the other
threads of a worker run while this one waits.
"""

from __future__ import annotations

import re
import select
from collections.abc import Callable, Sequence
from typing import Any

from psycopg import errors as pg_errors
from psycopg import pq

_PLACEHOLDER = re.compile(r"%\((\w+)\)s(::\w+(?:\[\])?)?|%%")
_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)

Encoder = Callable[[Any, str], "bytes | None"]


class Prepared:
    """A named query rewritten for libpq: ``$n`` placeholders, and for each parameter its
    name and an encoder chosen by the cast that follows it (``%(seq)s::bigint``).

    ``call``: the same query as a call of a server-side function taking the same
    parameters in the same order, sent instead of the query's text by a connection that
    prepares nothing (see ``postgres.functions``)."""

    __slots__ = ("call", "encoders", "name", "params", "sql")

    def __init__(self, name: str, query: str, call: str | None = None) -> None:
        order: list[str] = []
        encoders: list[Encoder] = []

        def number(m: re.Match[str]) -> str:
            if m.group(0) == "%%":
                return "%"
            key, cast = m.group(1), m.group(2) or ""
            if key not in order:
                order.append(key)
                encoders.append(_ENCODERS.get(cast[2:], encode))
            return f"${order.index(key) + 1}{cast}"

        if "%s" in query:
            raise ValueError(f"query {name!r}: positional %s placeholders are not supported here")
        self.name = f"tether_{name}".encode()
        self.sql = _PLACEHOLDER.sub(number, query).encode()
        self.params = tuple(order)
        self.encoders = tuple(encoders)
        self.call: bytes | None = None
        if call is not None:
            called = Prepared(name, call)
            if called.params != self.params:
                raise ValueError(f"query {name!r}: its call takes other parameters")
            self.call = called.sql

    def values(self, params: dict[str, Any]) -> list[bytes | None]:
        return [
            None if (v := params[k]) is None else enc(v, k)
            for k, enc in zip(self.params, self.encoders, strict=True)
        ]


def encode(value: Any, name: str = "?") -> bytes | None:
    """A parameter in PostgreSQL's text format, by its Python type."""
    if value is None:
        return None
    if isinstance(value, str):
        return _text(value, name)
    if value is True or value is False:
        return b"t" if value else b"f"
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        return repr(value).encode()  # 'inf', 'nan' and the shortest exact digits all parse
    if isinstance(value, list | tuple):
        return _array(value, name, encode)
    raise TypeError(f"parameter {name}: cannot send a {type(value).__name__} to PostgreSQL")


def _text(value: Any, name: str) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"parameter {name}: expected text, got {type(value).__name__}")
    if "\x00" in value:  # libpq sends text parameters as C strings: refuse, do not cut
        raise ValueError(f"parameter {name}: text cannot contain NUL (\\x00) characters")
    try:
        return value.encode()
    except UnicodeEncodeError as e:
        bad = value[e.start : e.end]
        raise ValueError(
            f"parameter {name}: text that is not Unicode ({e.reason}: {bad!r} at index "
            f"{e.start}), which has no UTF-8 bytes"
        ) from None


def _bigint(value: Any, name: str) -> bytes:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"parameter {name}: expected an int, got {type(value).__name__}")
    return str(value).encode()


def _float8(value: Any, name: str) -> bytes:
    if not isinstance(value, float | int) or isinstance(value, bool):
        raise TypeError(f"parameter {name}: expected a number, got {type(value).__name__}")
    return repr(float(value)).encode()


def _bool(value: Any, name: str) -> bytes:
    return b"t" if value else b"f"


def _array_of(element: Encoder) -> Encoder:
    return lambda values, name: _array(values, name, element)


def _array(values: Sequence[Any], name: str, element: Encoder) -> bytes:
    """An array literal: every element quoted (quotes and backslashes escaped), None NULL."""
    items = [
        b"NULL"
        if v is None
        else b'"' + (element(v, name) or b"").replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'
        for v in values
    ]
    return b"{" + b",".join(items) + b"}"


_ENCODERS: dict[str, Encoder] = {
    "text": _text,
    "bigint": _bigint,
    "float8": _float8,
    "bool": _bool,
    "text[]": _array_of(_text),
    "bigint[]": _array_of(_bigint),
    "float8[]": _array_of(_float8),
}


class WireConnection:
    """One libpq connection in blocking mode, for prepared writes (see the module doc)."""

    def __init__(
        self,
        conninfo: str,
        *,
        prepare: bool = True,
        rewrite: Callable[[str], str] | None = None,
    ) -> None:
        self._pg = pq.PGconn.connect(conninfo.encode())
        if self._pg.status != pq.ConnStatus.OK:
            message = self._pg.get_error_message()
            self._pg.finish()
            raise ConnectionError(message.strip() or "could not connect")
        self._prepared: set[bytes] = set()
        self._texts: dict[bytes, bytes] = {}  # a statement's name: the text sent for it
        self._rewrite = rewrite
        self.prepares = prepare

    def _text(self, q: Prepared) -> bytes:
        text = self._texts.get(q.name)
        if text is None:
            rewrite = self._rewrite
            sql = q.sql if self.prepares or q.call is None else q.call
            text = rewrite(sql.decode()).encode() if rewrite is not None else sql
            self._texts[q.name] = text
        return text

    @property
    def broken(self) -> bool:
        return self._pg.status != pq.ConnStatus.OK

    def close(self) -> None:
        self._pg.finish()

    def plan_once(self) -> None:
        """Plan each prepared statement once for all parameters (a generic plan) instead of
        at every execution (PostgreSQL 12+; an older server keeps its default)."""
        if self._pg.server_version >= 120000:
            res = self._pg.exec_(b"SET plan_cache_mode = force_generic_plan")
            if res.status != pq.ExecStatus.COMMAND_OK:
                raise self._error(res)

    def _prepare(self, q: Prepared) -> None:
        if q.name in self._prepared:
            return
        res = self._pg.prepare(q.name, self._text(q))
        if res.status != pq.ExecStatus.COMMAND_OK:
            raise self._error(res)
        self._prepared.add(q.name)

    def execute(self, q: Prepared, values: list[bytes | None]) -> pq.abc.PGresult:
        """Run one statement in its own (autocommit) transaction."""
        # libpq waits without the GIL; a None value is NULL
        if self.prepares:
            self._prepare(q)
            res = self._pg.exec_prepared(q.name, values)  # type: ignore[arg-type]
        else:
            res = self._pg.exec_params(self._text(q), values)
        if res.status not in _OK:
            raise self._error(res)
        return res

    def pipeline(
        self, statements: Sequence[tuple[Prepared, list[bytes | None]]]
    ) -> list[pq.abc.PGresult]:
        """Run the statements as one transaction in one round trip; their results.

        A failing statement rolls the whole transaction back and raises its error.
        """
        prepares = self.prepares
        if prepares:
            for q, _ in statements:
                self._prepare(q)
        pg = self._pg
        pg.enter_pipeline_mode()
        try:
            for q, values in statements:
                if prepares:
                    pg.send_query_prepared(q.name, values)
                else:
                    pg.send_query_params(self._text(q), values)
            pg.pipeline_sync()
            results: list[pq.abc.PGresult] = []
            for _ in statements:  # each statement: one result, then None
                res = self._next()
                if res is None:
                    raise pg_errors.InternalError("pipeline: a statement returned no result")
                results.append(res)
                while self._next() is not None:
                    pass
            sync = self._next()
            if sync is None or sync.status != pq.ExecStatus.PIPELINE_SYNC:
                raise pg_errors.InternalError("pipeline: no sync result from the server")
        finally:
            if pg.status == pq.ConnStatus.OK:
                pg.exit_pipeline_mode()
        for res in results:  # the first error; the statements after it were skipped
            if res.status not in _OK:
                raise self._error(res)
        return results

    def _next(self) -> pq.abc.PGresult | None:
        pg = self._pg
        while pg.is_busy():
            select.select([pg.socket], [], [])  # outside the GIL
            pg.consume_input()
        return pg.get_result()

    def _error(self, res: pq.abc.PGresult) -> Exception:
        if self.broken:
            return pg_errors.OperationalError(self._pg.get_error_message().strip())
        return pg_errors.error_from_result(res, encoding="utf-8")
