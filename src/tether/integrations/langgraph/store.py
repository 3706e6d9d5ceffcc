"""TetherStore: LangGraph's long-term memory (``BaseStore``) on tether's memory.

Items are ``app.memory`` items (:mod:`tether.context.memory`): namespaced, full-text
searchable, with TTL on the App's clock, and with vectors when an ``IndexConfig`` gives
an embedding; each operation of a batch is one memory call (one transaction).

What BaseStore asks beyond tether's memory is done here: an item's TTL (in minutes) is
kept in its value under ``"__ttl"`` (stripped on read) so that a read can refresh it;
filters with operators (``$ne``, ``$gt``…) and namespace conditions with wildcards are
applied to the candidates memory returns (equality filters go to the database).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path

from tether.app import App
from tether.context.memory import Memory, MemoryItem

TTL_KEY = "__ttl"  # minutes, inside a stored value: what a refreshing read extends by
SCALARS = (str, int, float, bool, type(None))
MOST = 10_000  # candidates read when a filter or an offset is applied here


class TetherStore(BaseStore):
    """A LangGraph ``BaseStore`` on a tether App's memory (SQLite or PostgreSQL).

    ``index``: LangGraph's ``IndexConfig`` (``embed``, ``dims``, ``fields``) for semantic
    search with your embeddings; without it, a ``query`` is a full-text search.
    ``ttl``: LangGraph's ``TTLConfig`` (``default_ttl`` in minutes, ``refresh_on_read``).
    """

    supports_ttl = True

    def __init__(
        self, app: App, *, index: IndexConfig | None = None, ttl: TTLConfig | None = None
    ) -> None:
        self.app = app
        self.index_config = index
        self.ttl_config = ttl
        self._fields: list[str] = list((index or {}).get("fields") or ["$"])
        embedder = None
        if index is not None:
            embeddings = ensure_embeddings(index["embed"])
            embedder = embeddings.embed_documents
        self.memory = Memory(app.store, app.clock, embedder=embedder)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run each operation in order; their results in the same order."""
        return [self._one(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` off the event loop."""
        todo = list(ops)
        return await asyncio.to_thread(self.batch, todo)

    def _one(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, PutOp):
            self._put(op)
            return None
        if isinstance(op, ListNamespacesOp):
            return self._namespaces(op)
        raise TypeError(f"TetherStore: unknown operation {type(op).__name__}")

    # -- operations ------------------------------------------------------------------------

    def _refresh(self, wanted: bool | None) -> bool:
        if wanted is not None:
            return wanted
        return bool((self.ttl_config or {}).get("refresh_on_read", True))

    def _get(self, op: GetOp) -> Item | None:
        found = self.memory.get(op.namespace, op.key)
        if found is None:
            return None
        if self._refresh(op.refresh_ttl):
            found = self._touch(found)
        return _item(found)

    def _touch(self, found: MemoryItem) -> MemoryItem:
        """Extend an expiring item's TTL from now (the item is written again)."""
        minutes = found.value.get(TTL_KEY) if isinstance(found.value, dict) else None
        if minutes is None:
            return found
        ns, key, value, text = found.namespace, found.key, found.value, found.text
        return self.memory.put(ns, key, value, text=text, ttl=float(minutes) * 60)

    def _put(self, op: PutOp) -> None:
        if op.value is None:
            self.memory.delete(op.namespace, op.key)
            return
        minutes = op.ttl  # BaseStore.put resolved the default (None: never expires)
        value = dict(op.value)
        if minutes is not None:
            value[TTL_KEY] = minutes
        text = self._text(op.value, op.index)
        ttl = None if minutes is None else float(minutes) * 60
        self.memory.put(op.namespace, op.key, value, text=text, ttl=ttl)

    def _text(self, value: Mapping[str, Any], index: Any) -> str | None:
        """What search sees: the indexed fields' text (None: tether's rendering of the
        whole value); ``index=False``: nothing."""
        if index is False:
            return ""
        fields = list(index) if isinstance(index, list) else self._fields
        if fields == ["$"]:
            return None
        return "\n".join(t for f in fields for t in get_text_at_path(value, f))

    def _search(self, op: SearchOp) -> list[SearchItem]:
        equal, rest = _split_filter(op.filter)
        want = op.offset + op.limit
        limit = MOST if rest else want
        mode: Literal["text", "vector"] = "text"
        if self.index_config is not None and op.query:
            mode = "vector"
        found = self.memory.search(
            op.namespace_prefix, op.query, filter=equal or None, limit=limit, mode=mode
        )
        kept = [f for f in found if _matches(_value(f), rest)][op.offset : want]
        if self._refresh(op.refresh_ttl):
            kept = [
                MemoryItem(
                    t.namespace,
                    t.key,
                    t.value,
                    t.text,
                    t.created_at,
                    t.updated_at,
                    t.expires_at,
                    f.score,
                )
                for f in kept
                for t in [self._touch(f)]
            ]
        return [_search_item(f) for f in kept]

    def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        prefix = _fixed_prefix(conditions)
        found = self.memory.list_namespaces(prefix)
        kept = [ns for ns in found if all(_condition(ns, c) for c in conditions)]
        if op.max_depth is not None:
            kept = list(dict.fromkeys(ns[: op.max_depth] for ns in kept))
        return sorted(kept)[op.offset : op.offset + op.limit]


# -- helpers ------------------------------------------------------------------------------


def _when(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def _value(found: MemoryItem) -> dict[str, Any]:
    value = found.value if isinstance(found.value, dict) else {"value": found.value}
    return {k: v for k, v in value.items() if k != TTL_KEY}


def _item(found: MemoryItem) -> Item:
    return Item(
        value=_value(found),
        key=found.key,
        namespace=tuple(found.namespace),
        created_at=_when(found.created_at),
        updated_at=_when(found.updated_at),
    )


def _search_item(found: MemoryItem) -> SearchItem:
    return SearchItem(
        namespace=tuple(found.namespace),
        key=found.key,
        value=_value(found),
        created_at=_when(found.created_at),
        updated_at=_when(found.updated_at),
        score=found.score,
    )


def _split_filter(
    filter: dict[str, Any] | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Equality on scalars (for the database) and the rest (operators, nested values)."""
    equal: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for field, want in (filter or {}).items():
        if isinstance(want, dict) and set(want) == {"$eq"} and isinstance(want["$eq"], SCALARS):
            equal[field] = want["$eq"]
        elif isinstance(want, SCALARS) and not isinstance(want, float):
            equal[field] = want
        else:
            rest[field] = want
    return equal, rest


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a is not None and a > b,
    "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b,
    "$lte": lambda a, b: a is not None and a <= b,
}


def _matches(value: dict[str, Any], rest: dict[str, Any]) -> bool:
    for field, want in rest.items():
        have = value.get(field)
        if isinstance(want, dict) and want and all(k in _OPS for k in want):
            try:
                if not all(_OPS[k](have, v) for k, v in want.items()):
                    return False
            except TypeError:  # an ordering between unlike types: no match
                return False
        elif have != want:
            return False
    return True


def _fixed_prefix(conditions: Sequence[MatchCondition]) -> tuple[str, ...]:
    """The longest namespace prefix every listed namespace must start with."""
    for c in conditions:
        if c.match_type == "prefix":
            fixed = []
            for part in c.path:
                if part == "*":
                    break
                fixed.append(part)
            return tuple(fixed)
    return ()


def _condition(ns: tuple[str, ...], c: MatchCondition) -> bool:
    path = tuple(c.path)
    if len(path) > len(ns):
        return False
    part = ns[: len(path)] if c.match_type == "prefix" else ns[len(ns) - len(path) :]
    return all(p == "*" or p == q for p, q in zip(path, part, strict=True))
