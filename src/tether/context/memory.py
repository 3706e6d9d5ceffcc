"""Long-term memory: namespaced facts reused across runs and sessions, searchable, with TTL.

::

    app.memory.put(("user", "u-7"), "prefs", {"theme": "dark"}, ttl="30d")
    app.memory.get(("user", "u-7"), "prefs").value        # {'theme': 'dark'}
    app.memory.search(("user",), "dark theme", filter={"theme": "dark"})
    app.memory.delete_namespace(("user", "u-7"))         # forget a user: no rows left

Memory is kept apart from run state: its own tables (schema 4), never folded into
a run, untouched by ``tether gc``. A write is one transaction; ``put`` is an upsert,
so repeating it (an agent replayed after a crash) changes nothing.

*Namespaces* are tuples of non-empty strings, stored as the parts each followed by
:data:`SEPARATOR` (U+001F), which is why a part may not contain it; a prefix
``("user",)`` covers ``("user", "u-7")`` but not ``("users",)``.

*Search* is full text out of the box (SQLite FTS5 ranked by bm25; PostgreSQL
``tsvector`` ranked by ``ts_rank``): any word of the query may match, and items
matching more of the words, or more often, rank first. With an embedder
(``tether.open(..., embed=fn)`` or ``memory.embedder = fn``, ``fn(texts) -> vectors``)
items also carry a unit-length float32 vector, searched by a plain cosine scan of the
items under the prefix (fine for thousands of items per prefix, see docs/memory.md),
and the default becomes hybrid: text and vector rankings fused by reciprocal rank.

*TTL*: an item past its ``expires_at`` (by the injected clock) is invisible at once;
:meth:`Memory.sweep` deletes the expired rows.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from tether.context import vectors
from tether.model import codec
from tether.model.clock import Clock
from tether.model.durations import parse_duration
from tether.store.context_records import MemoryRecord, MemoryScope, MemoryWrite, Ranker, VectorHits
from tether.store.context_rows import MemoryData

SEPARATOR = "\x1f"  # U+001F UNIT SEPARATOR: ends every namespace part in storage
_PAST_SEPARATOR = chr(ord(SEPARATOR) + 1)  # the upper bound of a prefix range
HYBRID_DEPTH = 50  # each ranking contributes at least this many candidates to a fusion
_WORD = re.compile(r"\w+")
_SCALARS = (str, int, float, bool, type(None))

Namespace = tuple[str, ...]
Embedder = Callable[[list[str]], Sequence[Sequence[float]]]
Mode = Literal["auto", "text", "vector", "hybrid"]


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One stored fact. ``score`` is set by :meth:`Memory.search` (higher is better;
    comparable only within one search)."""

    namespace: Namespace
    key: str
    value: Any
    text: str
    created_at: float
    updated_at: float
    expires_at: float | None
    score: float | None = None


class Memory:
    """Long-term memory on one store. Get it as ``app.memory``."""

    def __init__(
        self, store: MemoryData, clock: Clock, *, embedder: Embedder | None = None
    ) -> None:
        self.store = store
        self.clock = clock
        self.embedder = embedder

    # -- writing ------------------------------------------------------------

    def put(
        self,
        namespace: Sequence[str],
        key: str,
        value: Any,
        *,
        text: str | None = None,
        ttl: float | str | None = None,
    ) -> MemoryItem:
        """Store ``value`` under ``(namespace, key)``, replacing what was there.

        ``text`` is what search sees (default: :func:`render_text` of the value);
        ``ttl`` is seconds or a duration like ``"7d"``. Everything is validated (and the
        embedding computed) before the one write transaction, so a bad argument raises
        TypeError/ValueError and an unstorable value EncodeError (naming the path inside
        it) with nothing changed.
        """
        ns = _namespace(namespace, "put")
        _check_key(key, "put")
        data = codec.encode(value, what=f"memory value {ns!r}/{key!r}")
        body = _search_text(value, text)
        seconds = _ttl(ttl)
        embedding = self._embed([body], "put")[0] if self.embedder and body.strip() else None
        now = self.clock.now()
        expires = None if seconds is None else now + seconds
        write = MemoryWrite(_encode_namespace(ns), key, data, body, embedding, now, expires)
        created = self.store.put_memory(write)
        return MemoryItem(ns, key, value, body, created, now, expires)

    def delete(self, namespace: Sequence[str], key: str) -> bool:
        """Delete one item; return whether a visible (unexpired) item was deleted."""
        ns = _namespace(namespace, "delete")
        _check_key(key, "delete")
        return self.store.delete_memory(_encode_namespace(ns), key, self.clock.now())

    def delete_namespace(self, prefix: Sequence[str]) -> int:
        """Forget everything under ``prefix`` (a user's right to be forgotten).

        Deletes every item (expired or not) in the namespaces starting with ``prefix``
        and, on SQLite, rewrites the full-text index so that no token of the deleted
        text stays in it; returns how many items were deleted. One transaction. The
        prefix must not be empty (that would forget everything).
        """
        bounds = _bounds(_namespace(prefix, "delete_namespace"))
        return self.store.delete_memory_prefix(bounds["lo"], bounds["hi"])

    def sweep(self) -> int:
        """Delete the items whose TTL has passed (by the clock); return how many."""
        return self.store.sweep_memory(self.clock.now())

    def reembed(self, prefix: Sequence[str] = (), *, all: bool = False, batch: int = 64) -> int:
        """Compute embeddings for the items under ``prefix`` that have none (``all``: for
        every item, e.g. after changing the embedder); return how many were stored.

        The embedder is called outside any transaction, ``batch`` texts at a time; an
        item whose text changed meanwhile keeps its newer embedding.
        """
        parts = _namespace(prefix, "reembed", prefix=True)
        self._need_embedder("reembed")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"memory.reembed: batch must be a positive int, not {batch!r}")
        todo = self.store.memory_to_embed(self._scope(parts), all=all)
        stored = 0
        for i in range(0, len(todo), batch):
            stored += self._store_embeddings(todo[i : i + batch])
        return stored

    def _store_embeddings(self, rows: list[tuple[int, str]]) -> int:
        blobs = self._embed([text for _, text in rows], "reembed")
        return self.store.set_memory_embeddings(
            [(i, text, blob) for (i, text), blob in zip(rows, blobs, strict=True)]
        )

    # -- reading ------------------------------------------------------------

    def get(self, namespace: Sequence[str], key: str) -> MemoryItem | None:
        """The item at ``(namespace, key)``, or None when absent or expired."""
        ns = _namespace(namespace, "get")
        _check_key(key, "get")
        found = self.store.get_memory(_encode_namespace(ns), key, self.clock.now())
        return _item(found) if found is not None else None

    def list_namespaces(
        self, prefix: Sequence[str] = (), *, limit: int | None = None
    ) -> list[Namespace]:
        """The namespaces under ``prefix`` holding at least one visible item, in order."""
        parts = _namespace(prefix, "list_namespaces", prefix=True)
        if limit is not None:
            _check_limit(limit, "list_namespaces")
        stored = self.store.memory_namespaces(self._scope(parts), limit)
        return [_decode_namespace(ns) for ns in stored]

    def search(
        self,
        namespace_prefix: Sequence[str] = (),
        query: str | None = None,
        *,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        mode: Mode = "auto",
    ) -> list[MemoryItem]:
        """The visible items under ``namespace_prefix`` best matching ``query``.

        ``filter`` keeps the items whose value is a dict with those top-level fields
        equal (str, int, float, bool or None; numbers as numbers). ``mode``: ``"text"``
        (full text), ``"vector"`` (cosine, needs an embedder), ``"hybrid"`` (both,
        fused), or ``"auto"`` (hybrid with an embedder, else text). Without a query,
        the most recently written items come first. Each item's ``score`` says how
        well it matched (higher is better).
        """
        prefix = _namespace(namespace_prefix, "search", prefix=True)
        _check_limit(limit, "search")
        if query is not None and not isinstance(query, str):
            raise TypeError(f"memory.search: query must be a str or None, not {query!r}")
        resolved = self._mode(mode)
        base = self._scope(prefix, _filter_json(filter))
        if query is None or not query.strip():
            return [_item(r, r.score) for r in self.store.search_memory(base, None, limit)]
        if resolved == "text":
            return self._text(base, query, limit)
        qvec = vectors.unit(
            self._embed_raw([query], "search")[0], "memory.search: the query's vector"
        )
        if resolved == "vector":
            return self._nearest(base, qvec, limit)
        return self._hybrid(base, query, qvec, limit)

    def _mode(self, mode: str) -> str:
        if mode not in ("auto", "text", "vector", "hybrid"):
            raise ValueError(
                f"memory.search: mode is 'auto', 'text', 'vector' or 'hybrid', not {mode!r}"
            )
        if mode == "auto":
            return "hybrid" if self.embedder else "text"
        if mode != "text":
            self._need_embedder(f"search(mode={mode!r})")
        return mode

    def _scope(self, prefix: Namespace, filter: str | None = None) -> MemoryScope:
        bounds = _bounds(prefix)
        return MemoryScope(bounds["lo"], bounds["hi"], self.clock.now(), filter)

    def _text(self, base: MemoryScope, query: str, limit: int) -> list[MemoryItem]:
        words = _words_of(query)
        if not words:
            return []
        return [_item(r, r.score) for r in self.store.search_memory(base, words, limit)]

    def _nearest(self, base: MemoryScope, qvec: list[float], limit: int) -> list[MemoryItem]:
        hits = self._vector_search(base, qvec, limit)
        found = {i: _item(r) for i, r in hits.items.items()}
        return [_scored(found[i], score) for i, score in hits.near if i in found]

    def _hybrid(
        self, base: MemoryScope, query: str, qvec: list[float], limit: int
    ) -> list[MemoryItem]:
        depth = max(limit, HYBRID_DEPTH)
        hits = self._vector_search(base, qvec, depth, words=_words_of(query))
        found = {i: _item(r) for i, r in hits.items.items()}
        texts = dict.fromkeys(r.id for r in hits.text)
        fused = vectors.fuse([list(texts), [i for i, _ in hits.near]])
        return [_scored(found[i], score) for i, score in fused[:limit] if i in found]

    def _vector_search(
        self, base: MemoryScope, qvec: list[float], depth: int, words: Sequence[str] = ()
    ) -> VectorHits:
        """The store's vector search ranked by :func:`_ranker` (and the text hits of
        ``words``, up to ``depth``), read in one transaction."""
        try:
            return self.store.search_memory_vectors(
                base, _ranker(qvec, depth), words=words, text_limit=depth
            )
        except _Mismatch as e:
            raise self._dimension_error(e.item_id, e.stored, e.asked) from None

    # -- embeddings ---------------------------------------------------------

    def _need_embedder(self, op: str) -> None:
        if self.embedder is None:
            raise ValueError(
                f"memory.{op} needs an embedding function: open with "
                f"tether.open(url, embed=fn) or set app.memory.embedder = fn, where "
                f"fn(list of texts) returns one list of floats per text"
            )

    def _embed_raw(self, texts: list[str], op: str) -> Sequence[Sequence[float]]:
        assert self.embedder is not None
        out = self.embedder(texts)
        if len(out) != len(texts):
            raise ValueError(
                f"memory.{op}: the embedder returned {len(out)} vectors for "
                f"{len(texts)} texts; it must return one per text, in order"
            )
        return out

    def _embed(self, texts: list[str], op: str) -> list[bytes]:
        """Unit-length float32 vectors (little-endian bytes), one per text."""
        raw = self._embed_raw(texts, op)
        return [
            vectors.pack(vectors.unit(v, f"memory.{op}: the embedder's vector {i}"))
            for i, v in enumerate(raw)
        ]

    def _dimension_error(self, item_id: int, stored: int, asked: int) -> ValueError:
        name = self.store.memory_item_name(item_id)
        item = f"{_decode_namespace(name[0])!r}/{name[1]!r}" if name else f"#{item_id}"
        return ValueError(
            f"memory.search: item {item} has a "
            f"{stored}-dimension embedding but the embedder returns {asked} dimensions; "
            f"the embedder changed: run app.memory.reembed(all=True)"
        )


# -- namespaces, keys and arguments --------------------------------------------


def _namespace(ns: Any, op: str, *, prefix: bool = False) -> Namespace:
    """``ns`` checked as a namespace (non-empty) or a prefix (may be empty for search)."""
    what = "prefix" if prefix or op == "delete_namespace" else "namespace"
    if isinstance(ns, str):
        raise TypeError(
            f"memory.{op}: the {what} is a tuple of strings, not the string {ns!r}; write ({ns!r},)"
        )
    if not isinstance(ns, (tuple, list)):
        raise TypeError(
            f"memory.{op}: the {what} must be a tuple of strings like ('user', 'u-7'), "
            f"not {type(ns).__name__} {ns!r}"
        )
    if not ns and not prefix:
        everything = ", which would forget every namespace" if op == "delete_namespace" else ""
        raise ValueError(
            f"memory.{op}: the {what} is empty{everything}; name at least one part, "
            f"e.g. ('user', 'u-7')"
        )
    for i, part in enumerate(ns):
        _check_name(part, f"memory.{op}: part {i} of the {what} {tuple(ns)!r}")
    return tuple(ns)


def _check_key(key: Any, op: str) -> None:
    _check_name(key, f"memory.{op}: the key")


def _check_name(value: Any, where: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{where} must be a str, not {type(value).__name__} {value!r}")
    if not value:
        raise ValueError(f"{where} is empty; give a non-empty string")
    for bad, name in ((SEPARATOR, "the separator U+001F"), ("\x00", "a NUL character")):
        if bad in value:
            raise ValueError(f"{where} ({value!r}) contains {name}; remove it")


def _check_limit(limit: Any, op: str) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"memory.{op}: limit must be a positive int, not {limit!r}")


def _ttl(ttl: float | str | None) -> float | None:
    seconds = parse_duration(ttl, what="memory.put: ttl")
    if seconds is not None and seconds <= 0:
        raise ValueError(f"memory.put: ttl must be positive (or None: never expires), not {ttl!r}")
    return seconds


def _encode_namespace(ns: Namespace) -> str:
    return "".join(part + SEPARATOR for part in ns)


def _decode_namespace(stored: str) -> Namespace:
    return tuple(stored.split(SEPARATOR)[:-1])


def _bounds(prefix: Namespace) -> dict[str, Any]:
    """The stored namespaces under ``prefix`` are exactly ``lo <= namespace < hi``."""
    lo = _encode_namespace(prefix)
    return {"lo": lo, "hi": lo[:-1] + _PAST_SEPARATOR if lo else None}


def _filter_json(filter: Mapping[str, Any] | None) -> str | None:
    """The filter as a JSON object of scalars (None: no filter)."""
    if filter is None:
        return None
    if not isinstance(filter, Mapping):
        raise TypeError(f"memory.search: filter must be a dict of field -> value, not {filter!r}")
    for field, value in filter.items():
        _check_filter_field(field, value)
    return json.dumps(codec.to_json_value(dict(filter)), ensure_ascii=False) if filter else None


def _check_filter_field(field: Any, value: Any) -> None:
    if not isinstance(field, str) or field == codec.TAG:
        raise TypeError(f"memory.search: filter keys are field names (str), not {field!r}")
    if not isinstance(value, _SCALARS):
        raise TypeError(
            f"memory.search: filter[{field!r}] is {type(value).__name__}; a filter compares "
            f"top-level fields for equality with a str, int, float, bool or None"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"memory.search: filter[{field!r}] must be a finite number")


# -- text ----------------------------------------------------------------------


def render_text(value: Any) -> str:
    """The default searchable text of a value: its strings, numbers and dict keys,
    space-separated, in order (bytes and None contribute nothing)."""
    return " ".join(w for w in _words(value) if w)


def _words(value: Any) -> Iterator[str]:
    if value is None or isinstance(value, (bytes, bytearray)):
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _words(k)
            yield from _words(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _words(v)
    elif isinstance(value, (set, frozenset)):
        for v in sorted(value, key=repr):
            yield from _words(v)
    else:
        yield str(value)


def _search_text(value: Any, text: str | None) -> str:
    if text is not None and not isinstance(text, str):
        raise TypeError(f"memory.put: text must be a str or None, not {type(text).__name__}")
    body = render_text(value) if text is None else text
    return body.replace("\x00", " ")  # PostgreSQL text cannot hold NUL


# -- rows ------------------------------------------------------------------------


def _item(row: MemoryRecord, score: float | None = None) -> MemoryItem:
    """The item of a stored record."""
    return MemoryItem(
        _decode_namespace(row.namespace),
        row.key,
        codec.decode(row.value),
        row.text,
        row.created_at,
        row.updated_at,
        row.expires_at,
        score,
    )


def _scored(item: MemoryItem, score: float) -> MemoryItem:
    return replace(item, score=score)


# -- vector ranking --------------------------------------------------------------


class _Mismatch(Exception):
    """Internal: a stored embedding's dimension differs from the query's."""

    def __init__(self, item_id: int, stored: int, asked: int) -> None:
        super().__init__(item_id, stored, asked)
        self.item_id, self.stored, self.asked = item_id, stored, asked


def _ranker(qvec: list[float], limit: int) -> Ranker:
    """Rank ``(id, embedding)`` candidates by cosine with ``qvec``: the ``limit`` nearest
    as (id, cosine), best first. A plain scan: the vectors are stored at unit length, so
    cosine is a dot product."""

    def rank(candidates: Iterator[tuple[int, bytes]]) -> list[tuple[int, float]]:
        scored = []
        for item_id, blob in candidates:
            vector = vectors.unpack(blob)
            if len(vector) != len(qvec):
                raise _Mismatch(item_id, len(vector), len(qvec))
            scored.append((vectors.dot(vector, qvec), item_id))
        return vectors.nearest(scored, limit)

    return rank


def _words_of(query: str) -> list[str]:
    """The distinct words of a query, lowercased, in order (what full-text search ORs)."""
    return list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
