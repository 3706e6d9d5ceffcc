"""Runs with their child runs (issue 31): ``tether show``'s children and ``tether runs --tree``.

A run's children are read from its own log (its ``child`` steps, engine.children), so a
tree costs one state read per run in it. Usage and cost add up over the whole tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tether
from tether.cli import format as fmt
from tether.engine.children import children_of
from tether.engine.handoffs import handoffs_of
from tether.model.state import RunState
from tether.model.status import FINISHED
from tether.model.steps import Usage, usage_data
from tether.store import RunRecord

MAX_DEPTH = 20  # a tree deeper than this is cut (and says so): a view, not a walk forever
RUNNING_MAX = 100  # a running parent's children looked up by id, at most (kids_of)


def kids_of(app: Any, record: RunRecord, state: RunState) -> list[str]:
    """The ids of the children of a run: those its log records (:func:`children_of`) and,
    while it executes (holds a lease), an inline child executing now, which its log
    records only once it ended (engine.inline): found by its id, ``{parent}~{position}``."""
    kids = children_of(state)
    if record.lease_owner is None or record.status in FINISHED:  # not executing
        return kids
    prefix, known = f"{state.run_id}~", set(kids)
    found = [
        r.id
        for r in app.runs(text=prefix, limit=RUNNING_MAX)
        if r.id not in known and r.id[len(prefix) :].isdigit()  # a child, not a grandchild
    ]
    return kids + sorted(found, key=lambda rid: int(rid[len(prefix) :]))


def child_rows(app: Any, record: RunRecord, state: RunState) -> list[dict[str, Any]]:
    """One row per child run ``state`` started: id, agent, status, its usage."""
    rows = []
    for kid in kids_of(app, record, state):
        try:
            rows.append(_row(app.record(kid), app.get(kid), 1))
        except tether.NotFound:  # collected by gc
            rows.append({"id": kid, "agent": None, "status": "gone", "depth": 1})
    return rows


_CHILD_CELLS = ("id", "agent", "status", "input_tokens", "output_tokens")


def children_text(rows: Sequence[dict[str, Any]]) -> str:
    """``tether show``'s child runs."""
    return "children:\n" + fmt.table(
        ["ID", "AGENT", "STATUS", "IN", "OUT", "COST"],
        [[*(r.get(c) for c in _CHILD_CELLS), fmt.money(r.get("cost"))] for r in rows],
        right="IN OUT COST",
    )


def handoff_text(state: RunState) -> str:
    """``tether show``'s handoffs: what the run was handed (from whom), and what it handed
    (to whom), one line each; empty when it was neither."""
    out = []
    h = state.handed
    if h is not None:
        out.append(("handed", f"from {h.get('from')} at position {h.get('pos')}: {_what(h)}"))
    for o in handoffs_of(state.steps):
        text = f"to {o.get('run')} ({o.get('agent')}) at position {o['pos']}: {_what(o)}"
        out.append(("handoff", text))
    return fmt.fields(out) if out else ""


def _what(h: Any) -> str:
    names = h.get("vars") or ()
    what = [f"vars {', '.join(names)}" if names else "no vars"]
    if h.get("session") is not None:
        what.append(f"session {h['session']} up to message {h.get('upto')}")
    elif h.get("messages") is not None:
        n = h["messages"] if isinstance(h["messages"], int) else len(h["messages"])
        what.append(f"{n} messages")
    return ", ".join(what)


def handoff_data(state: RunState) -> dict[str, Any]:
    """``show --json``'s ``handed`` (what the run got, or None) and ``handoffs``."""
    return {"handed": state.handed, "handoffs": handoffs_of(state.steps)}


def tree_rows(app: Any, records: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """The runs of ``records`` that are no run's child, each followed by its descendants
    (depth-first, in the order they were started); a root row carries the ``tree``'s
    usage: its own and all its descendants'."""
    out: list[dict[str, Any]] = []
    for record in records:
        state = app.get(record.id)
        if state.caller is not None:
            continue  # shown under its parent
        rows = _walk(app, record, state, 0)
        total = sum((_usage(r) for r in rows), Usage())
        rows[0]["tree"] = _usage_data(total) | {"runs": len(rows)}
        out += rows
    return out


def _walk(app: Any, record: RunRecord, state: RunState, depth: int) -> list[dict[str, Any]]:
    kids = kids_of(app, record, state)
    rows = [_row(record, state, depth) | {"children": len(kids)}]
    if depth >= MAX_DEPTH:
        rows[0]["cut"] = True
        return rows
    for kid in kids:
        try:
            rows += _walk(app, app.record(kid), app.get(kid), depth + 1)
        except tether.NotFound:
            rows.append({"id": kid, "agent": None, "status": "gone", "depth": depth + 1})
    return rows


def _row(record: RunRecord, state: RunState, depth: int) -> dict[str, Any]:
    return {
        "id": record.id,
        "agent": record.agent,
        "status": str(state.status),
        "depth": depth,
        "position": state.describe_position(),
        "children": len(children_of(state)),
        **_usage_data(state.usage),
    }


def _usage(row: dict[str, Any]) -> Usage:
    return Usage(**{k: row.get(k) or 0 for k in ("input_tokens", "output_tokens", "cost", "calls")})


def _usage_data(u: Usage) -> dict[str, Any]:
    data = usage_data(u)
    assert data is not None
    return data


def tree_table(rows: Sequence[dict[str, Any]]) -> str:
    """``tether runs --tree``: children indented under their parent; a root's TREE
    columns add up its whole tree."""
    body = []
    for r in rows:
        tree = r.get("tree")
        ident = ("  " * (r["depth"] - 1) + "└ " if r["depth"] else "") + r["id"]
        body.append(
            [
                ident + (" …" if r.get("cut") else ""),
                r["agent"],
                r["status"],
                r.get("position"),
                fmt.money(r.get("cost")) if "cost" in r else None,
                tree["runs"] if tree else None,
                tree["input_tokens"] + tree["output_tokens"] if tree else None,
                fmt.money(tree["cost"]) if tree else None,
            ]
        )
    heads = ["ID", "AGENT", "STATUS", "POSITION", "COST", "TREE:RUNS", "TREE:TOKENS", "TREE:COST"]
    return fmt.table(heads, body, right="COST TREE:RUNS TREE:TOKENS TREE:COST")
