"""The values that ``tether.context`` and the store exchange (see tether.store.context_rows).

Frozen dataclasses, never driver rows. Values arrive encoded: JSON text from
:mod:`tether.model.codec`, memory namespaces in their stored form; ``tether.context``
decodes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One session: its id, owner (tenant) and creation time."""

    id: str
    owner: str | None
    created_at: float


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message to append. ``body`` and ``meta`` are JSON text; ``run_add`` (with
    ``run_id``) makes it a run's k-th add, looked up first under ``owner`` (the run, or the
    ancestor whose positions a fork replays)."""

    session_id: str
    role: str
    body: str
    sha256: str
    meta: str
    at: float
    run_id: str | None = None
    run_add: int | None = None
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """A stored message; ``body`` and ``meta`` are JSON text."""

    seq: int
    role: str
    body: str
    sha256: str
    meta: str
    at: float
    run_id: str | None


@dataclass(frozen=True, slots=True)
class MessageKey:
    """What identifies a stored message, without its body (for prompt references)."""

    seq: int
    role: str
    sha256: str
    meta: str


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    """A stored compaction: the summary (JSON text) that replaces messages ``1..upto``."""

    upto: int
    body: str
    sha256: str
    tokens_before: int
    tokens_after: int
    at: float


@dataclass(frozen=True, slots=True)
class MemoryWrite:
    """An upsert of one memory item; ``namespace`` in its stored form, ``value`` JSON text,
    ``embedding`` a packed unit vector (or None)."""

    namespace: str
    key: str
    value: str
    text: str
    embedding: bytes | None
    now: float
    expires_at: float | None


@dataclass(frozen=True, slots=True)
class MemoryScope:
    """Which items a read sees: stored namespaces ``lo <= namespace < hi`` (``hi`` None: no
    upper bound), unexpired at ``now``, whose value has the fields of ``filter`` (a JSON
    object of scalars; None: any)."""

    lo: str
    hi: str | None
    now: float
    filter: str | None = None

    def params(self) -> dict[str, Any]:
        """The scope as named query parameters (lo, hi, now, filter)."""
        return {"lo": self.lo, "hi": self.hi, "now": self.now, "filter": self.filter}


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A stored memory item (``namespace`` stored form, ``value`` JSON text); ``score`` is
    the full-text rank of a search (higher is better), else None."""

    id: int
    namespace: str
    key: str
    value: str
    text: str
    created_at: float
    updated_at: float
    expires_at: float | None
    score: float | None = None


Ranker = Callable[[Iterator[tuple[int, bytes]]], list[tuple[int, float]]]
"""``rank(candidates) -> [(id, score), …]``: ranks ``(id, embedding)`` pairs, best first."""


@dataclass(frozen=True, slots=True)
class VectorHits:
    """What :meth:`ContextData.search_memory_vectors` read in its one transaction: the
    full-text hits (best first), the ranker's ``(id, score)`` list, and every item either
    names, by id."""

    text: list[MemoryRecord]
    near: list[tuple[int, float]]
    items: dict[int, MemoryRecord]
