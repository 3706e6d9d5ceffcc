"""The run list and the approvals inbox, paged for a database of millions of runs.

Both are keyset pages: a page is one indexed read of ``limit + 1`` rows (schema 11's
indexes; the extra row says whether there is a next page), never a count, never an
offset, so page 10,000 costs what page 1 does and runs created meanwhile never shift a
page. A page's ``next_cursor`` is opaque text (URL-safe, for a query string) that gives
the next page; None on the last page. A cursor that was not returned by the same
listing is refused with InvalidInput, never passed to the database.

Filters of the run list (all optional, combined with AND): ``status``, ``agent``,
``queue``, ``session``, ``tenant`` (a run's owner), ``text`` (the run id **or** the agent
name starts with it: a prefix is an index range, a substring would read every row), and
``created_after <= created_at < created_before`` (seconds since the epoch).

The inbox lists the runs waiting for a person: an approval (``waiting_for`` =
``approval:NAME``), a tool call in doubt (``doubt:KEY``) or a budget reached
(``budget:LIMIT``), oldest request first, each with what is to be decided, read from the
run's state: the approval's payload and approvers, the tool's name and arguments, or the
limit reached, its max and what the run had used.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass, replace
from typing import Any

from tether.engine.states import States
from tether.errors import InvalidInput, TetherError
from tether.model import inputs
from tether.store import RunFilter, RunRecord

PAGE_MAX = 1000  # runs in one page at most
PAGE_DEFAULT = 50


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of the run list: ``runs`` newest first; ``next_cursor`` gives the next
    page (None: this is the last)."""

    runs: list[RunRecord]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class InboxItem:
    """A run waiting for a person, and what is to be decided.

    ``kind`` is ``approval`` (``name``: the approval's; ``payload``: what is being
    approved; ``approvers``: who may decide, None for anyone; ``until``: its timeout) or
    ``doubt`` (``name``: the tool's; ``payload``: ``{"tool", "input", "reason"}``;
    ``key``: the call's idempotency key) or ``budget`` (``name``: the limit reached;
    ``payload``: ``{"limit", "max", "used", "kind"}``, ``used`` every limit's usage then,
    ``kind`` the call it stopped before). ``problem``: why the run's state could not be
    read (payload then None), e.g. a damaged log."""

    run_id: str
    agent: str
    tenant: str | None
    kind: str
    name: str | None
    position: int | None
    since: float | None
    payload: Any
    approvers: list[str] | None = None
    key: str | None = None
    until: float | None = None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class InboxPage:
    """One page of the inbox, oldest request first; ``next_cursor`` as in RunPage."""

    items: list[InboxItem]
    next_cursor: str | None


def check_filter(
    *,
    status: str | None = None,
    agent: str | None = None,
    queue: str | None = None,
    session: str | None = None,
    tenant: str | None = None,
    text: str | None = None,
    created_after: float | None = None,
    created_before: float | None = None,
    version: str | None = None,
) -> RunFilter:
    """The filters as a RunFilter, each checked (see :mod:`tether.model.inputs`)."""
    for value, what in ((status, "status"), (agent, "agent"), (queue, "queue")):
        inputs.optional_name(value, what)
    inputs.optional_name(session, "session")
    inputs.optional_name(tenant, "tenant")
    inputs.optional_name(text, "text")
    inputs.optional_name(version, "version")
    after = None if created_after is None else inputs.seconds(created_after, "created_after")
    before = None if created_before is None else inputs.seconds(created_before, "created_before")
    return RunFilter(status, agent, queue, session, tenant, text, after, before, version)


def page_limit(limit: Any) -> int:
    """A page size: an int from 1 to PAGE_MAX."""
    return inputs.integer(limit, "limit", low=1, high=PAGE_MAX)


def encode_cursor(kind: str, at: float, run_id: str) -> str:
    """The opaque cursor after the run ``(at, run_id)`` of listing ``kind``."""
    raw = json.dumps([kind, at, run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(kind: str, cursor: Any) -> tuple[float, str] | None:
    """``(at, run_id)`` of a cursor this listing returned; None for None; InvalidInput
    for anything else (a cursor of another listing, edited, truncated, not text)."""
    if cursor is None:
        return None
    found = _decoded(cursor)
    if found is None or found[0] != kind:
        listing = "run list" if kind == "runs" else "inbox"
        raise InvalidInput(
            f"cursor {inputs.show(cursor)} is not one the {listing} returned: pass the "
            f"next_cursor of the previous page unchanged, or leave it out for the first page"
        )
    return found[1], found[2]


def _decoded(cursor: Any) -> tuple[str, float, str] | None:
    if not isinstance(cursor, str) or len(cursor) > 2048:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        kind, at, run_id = json.loads(raw)
    except (binascii.Error, ValueError, TypeError):  # bad base64, JSON or shape
        return None
    if not isinstance(kind, str) or not isinstance(run_id, str):
        return None
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        return None
    try:
        inputs.lookup_id(run_id)
    except InvalidInput:
        return None
    return kind, float(at), run_id


def list_runs(
    states: States, filters: RunFilter, *, limit: int = PAGE_DEFAULT, cursor: str | None = None
) -> RunPage:
    """A page of the runs matching ``filters``, newest first (see the module docstring)."""
    limit = page_limit(limit)
    after = decode_cursor("runs", cursor)
    rows = states.store.page_runs(filters, limit=limit + 1, after=after)
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if more else None
    return RunPage(rows, encode_cursor("runs", last.created_at, last.id) if last else None)


def inbox(
    states: States,
    *,
    tenant: str | None = None,
    limit: int = PAGE_DEFAULT,
    cursor: str | None = None,
) -> InboxPage:
    """A page of the runs waiting for a person, oldest first, with what is to be decided."""
    inputs.optional_name(tenant, "tenant")
    limit = page_limit(limit)
    after = decode_cursor("inbox", cursor)
    rows = states.store.inbox_runs(tenant=tenant, limit=limit + 1, after=after)
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if more else None
    nxt = encode_cursor("inbox", last.updated_at, last.id) if last else None
    return InboxPage([_item(states, r) for r in rows], nxt)


def _item(states: States, record: RunRecord) -> InboxItem:
    kind, _, name = (record.waiting_for or "").partition(":")
    base = InboxItem(record.id, record.agent, record.owner, kind, name or None, None, None, None)
    try:
        state = states.load(record.id)
    except TetherError as e:  # one damaged run must not hide the others
        return replace(base, problem=str(e))
    w = dict(state.waiting or {})
    if w.get("kind") != kind:  # decided between the two reads: shown as the row says
        return base
    position, since = w.get("position"), w.get("since")
    if kind == "approval":
        return replace(
            base,
            position=position,
            since=since,
            payload=w.get("payload"),
            approvers=w.get("approvers"),
            until=w.get("until"),
        )
    if kind == "budget":  # the limit reached, its max and what the run had used then
        exceeded = dict((state.budget or {}).get("exceeded") or {})
        payload = {k: exceeded.get(k) for k in ("limit", "max", "used", "kind")}
        return replace(base, position=position, since=since, payload=payload)
    step = next((s for s in state.steps if s.position == position), None)
    detail = dict(step.detail or {}) if step is not None else {}
    payload = {"tool": w.get("name"), "input": detail.get("input"), "reason": w.get("reason")}
    return replace(
        base, name=w.get("name"), position=position, since=since, payload=payload, key=w.get("key")
    )
