"""The run list and the approvals inbox, a page at a time (keyset cursors).

A page is read as ``limit + 1`` rows: the extra row says whether there is a next page, and
the cursor is the last row's ``(created_at, id)`` (the inbox: ``(updated_at, id)``),
encoded opaquely. A page costs the same at any depth and runs created meanwhile never shift
one. The filters and the tenant go to the store, which has an index for each.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from tether.errors import InvalidInput
from tether.model import inputs
from tether.store import RunRecord, Store

Cursor = tuple[float, str]


@dataclass(frozen=True, slots=True)
class RunQuery:
    """The filters of ``GET /api/runs``; each given narrows the list (None: any)."""

    status: str | None = None
    agent: str | None = None
    queue: str | None = None
    session: str | None = None
    text: str | None = None
    created_after: float | None = None
    created_before: float | None = None


@dataclass(frozen=True, slots=True)
class Page:
    """One page of runs and the cursor of the next (None: this is the last)."""

    runs: list[RunRecord]
    next_cursor: str | None


def encode_cursor(key: Cursor) -> str:
    """An opaque cursor for the row keyed ``key``."""
    return base64.urlsafe_b64encode(orjson.dumps(list(key))).decode().rstrip("=")


def decode_cursor(text: str | None) -> Cursor | None:
    """The key a cursor holds; InvalidInput for anything :func:`encode_cursor` did not make."""
    if text is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        at, run_id = orjson.loads(raw)
        if isinstance(at, int | float) and not isinstance(at, bool) and isinstance(run_id, str):
            return float(at), run_id
    except (ValueError, TypeError, binascii.Error, orjson.JSONDecodeError):
        pass
    raise InvalidInput(
        f"cursor {inputs.show(text)} is not one this server gave: pass the next_cursor of "
        f"the previous page, or leave it out for the first page"
    )


def _page(rows: list[RunRecord], limit: int, key: Callable[[RunRecord], Cursor]) -> Page:
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, encode_cursor(key(rows[-1])) if more and rows else None)


def runs_page(
    store: Store, query: RunQuery, tenant: str | None, *, limit: int, cursor: str | None
) -> Page:
    """A page of the runs ``tenant`` may see (None: every tenant), newest first."""
    after = decode_cursor(cursor)
    rows = _fallback_runs(store, query, tenant, limit + 1, after)
    return _page(rows, limit, lambda r: (r.created_at, r.id))


def inbox_page(store: Store, tenant: str | None, *, limit: int, cursor: str | None) -> Page:
    """A page of the runs waiting for a person (an approval, or a tool call in doubt),
    oldest request first."""
    after = decode_cursor(cursor)
    rows = _fallback_inbox(store, tenant, limit + 1, after)
    return _page(rows, limit, lambda r: (r.updated_at, r.id))


# -- NOT YET WIRED: the store's keyset queries (page_runs, inbox_runs) come from branch
# i29-auth; until it is merged these scan list_runs in Python, which is correct but reads
# every run: fine for tests, not for a database of a million runs.

_SCAN = 1_000_000


def _matches(r: RunRecord, q: RunQuery, tenant: str | None) -> bool:
    checks = (
        tenant is None or r.owner == tenant,
        q.queue is None or r.queue == q.queue,
        q.session is None or r.session_id == q.session,
        q.text is None or r.id.startswith(q.text) or r.agent.startswith(q.text),
        q.created_after is None or r.created_at >= q.created_after,
        q.created_before is None or r.created_at < q.created_before,
    )
    return all(checks)


def _fallback_runs(
    store: Store, q: RunQuery, tenant: str | None, limit: int, after: Cursor | None
) -> list[RunRecord]:
    rows = store.list_runs(status=q.status, agent=q.agent, limit=_SCAN)
    rows.sort(key=lambda r: (r.created_at, r.id), reverse=True)
    rows = [r for r in rows if _matches(r, q, tenant)]
    if after is not None:
        rows = [r for r in rows if (r.created_at, r.id) < after]
    return rows[:limit]


def _fallback_inbox(
    store: Store, tenant: str | None, limit: int, after: Cursor | None
) -> list[RunRecord]:
    rows = store.list_runs(status="waiting", limit=_SCAN)
    rows = [
        r
        for r in rows
        if (r.waiting_for or "").startswith(("approval:", "doubt:"))
        and (tenant is None or r.owner == tenant)
    ]
    rows.sort(key=lambda r: (r.updated_at, r.id))
    if after is not None:
        rows = [r for r in rows if (r.updated_at, r.id) > after]
    return rows[:limit]
