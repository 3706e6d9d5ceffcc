"""Stored values as the API's JSON: rows, states, events (values keep the codec's tags, so
a tuple, bytes or a datetime stays recognisable)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import orjson

from tether.context.boards import BoardEntry
from tether.model import codec
from tether.model.events import Event
from tether.model.state import RunState, head_data
from tether.model.steps import StepState, step_data
from tether.server import schemas
from tether.services.listing import InboxItem
from tether.store import RunRecord
from tether.store.schedule_rows import ScheduleRecord


def summary(r: RunRecord) -> schemas.RunSummary:
    """The list's view of a run: its row."""
    return schemas.RunSummary(
        id=r.id,
        agent=r.agent,
        version=r.version,
        status=r.status,
        queue=r.queue,
        session=r.session_id,
        tenant=r.owner,
        parent_id=r.parent_id,
        waiting_for=r.waiting_for,
        created_at=r.created_at,
        updated_at=r.updated_at,
    )


def head(state: RunState) -> dict[str, Any]:
    """The folded state without its steps (as JSON values)."""
    data = head_data(state)
    data.pop("steps")
    data["position"] = state.position
    data["committed"] = state.committed
    out: dict[str, Any] = codec.to_json_value(data)
    return out


def steps(state: RunState, after: int, limit: int) -> list[dict[str, Any]]:
    """Positions ``after + 1 .. after + limit``: only their pages of a long run load."""
    chosen: Sequence[StepState] = state.steps[after : after + limit]
    return [codec.to_json_value(step_data(s)) for s in chosen]


def lineage(state: RunState) -> dict[str, Any]:
    """Where a fork comes from: parent, seq and position, and the vars edited there."""
    data = {
        "parent_id": state.parent_id,
        "fork_seq": state.fork_seq,
        "fork_position": state.fork_position,
        "fork_vars": state.fork_vars,
    }
    out: dict[str, Any] = codec.to_json_value(data)
    return out


def event(e: Event) -> schemas.EventOut:
    """One event; its data is already JSON (the codec's), parsed once."""
    data = orjson.loads(e.data)
    return schemas.EventOut(
        seq=e.seq,
        type=e.type,
        at=e.at,
        actor=e.actor,
        data=data if isinstance(data, dict) else {"value": data},
    )


def state(s: RunState) -> dict[str, Any]:
    """A whole state at a point (steps included): what ``tether state --json`` shows."""
    out = head(s)
    out["steps"] = [codec.to_json_value(step_data(x)) for x in s.steps]
    return out


def codec_json(value: dict[str, Any]) -> dict[str, Any]:
    """A mapping of stored values as JSON values."""
    out: dict[str, Any] = codec.to_json_value(value)
    return out


def inbox_item(i: InboxItem) -> schemas.InboxItem:
    """One request of the inbox (its payload as JSON values)."""
    return schemas.InboxItem(
        run_id=i.run_id,
        agent=i.agent,
        tenant=i.tenant,
        kind=i.kind,
        name=i.name,
        position=i.position,
        since=i.since,
        payload=codec.to_json_value(i.payload),
        approvers=i.approvers,
        key=i.key,
        until=i.until,
        problem=i.problem,
    )


def schedule(s: ScheduleRecord) -> schemas.ScheduleOut:
    """A schedule's row (its inputs stay in the database: the runs it starts show them)."""
    row = dataclasses.asdict(s)
    row["when"] = row.pop("spec")
    del row["inputs"]
    return schemas.ScheduleOut(**row)


def board_entry(e: BoardEntry) -> schemas.BoardEntryOut:
    """A key at one version (its value as JSON values)."""
    return schemas.BoardEntryOut(
        key=e.key,
        version=e.version,
        value=codec.to_json_value(e.value),
        deleted=e.deleted,
        run_id=e.run_id,
        position=e.position,
        by=e.by,
        at=e.at,
    )
