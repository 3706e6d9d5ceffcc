"""The hot statements of the PostgreSQL backend, as the group commit sends them: an
append (the cheapest statement for its shape), a load and a claim, prepared once on the
group commit's libpq connections (``pgwire``), and how each reads its result."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import orjson  # parses the JSON rows of loads and claims (~3x the stdlib's speed)
import psycopg
from psycopg.pq.abc import PGresult

from tether.errors import EncodeError, LeaseLost
from tether.model.events import Event, NewEvent
from tether.store.groupcommit import Pending
from tether.store.pgwire import Prepared, WireConnection
from tether.store.postgres import functions
from tether.store.postgres.pool import _Q
from tether.store.records import (
    EffectWrite,
    NewRun,
    RunRecord,
    SignalTake,
    Snapshot,
    Transition,
)

_FLOAT_FIELDS = ("created_at", "updated_at", "lease_expires", "available_at", "claimed_at")
# the hot statements, sent on the group commit's libpq connection (see pgwire), and their
# calls of the server-side functions that hold them (sent where nothing is prepared)
_WIRE = {name: Prepared(name, _Q[name], functions.call(name, _Q[name])) for name in functions.HOT}


_NEW_RUN_FIELDS = tuple(NewRun.__dataclass_fields__)


def _run_params(run: NewRun, now: float, events: Sequence[NewEvent]) -> dict[str, Any]:
    """A new run's columns and its first events, as named parameters."""
    fields = {name: getattr(run, name) for name in _NEW_RUN_FIELDS}
    return {**fields, "code": json.dumps(run.code), "now": now, **_columns(events)}


def _columns(events: Sequence[NewEvent]) -> dict[str, list[Any]]:
    """The events as four parallel arrays, unnested by one multi-row INSERT."""
    return {
        "types": [e.type for e in events],
        "datas": [e.data for e in events],
        "ats": [e.at for e in events],
        "actors": [e.actor for e in events],
    }


class _Statement(NamedTuple):
    """One hot statement for the group commit (an append, a load, a claim), and how to
    read its result."""

    run_id: str  # batches run in this order ("" for claims: first)
    query: Prepared
    values: list[bytes | None]
    read: Callable[[PGresult], Any]  # appends: (fenced, signals taken)


def _append_statement(
    run_id: str,
    events: Sequence[NewEvent],
    expected: int,
    epoch: int,
    now: float,
    extras: tuple[Transition | None, Snapshot | None, Sequence[EffectWrite | SignalTake]],
) -> _Statement:
    """The cheapest statement for the append's shape.

    A statement pays for every table it names, so the common shapes (one event; with an
    effects write; with a transition) have their own, and the rest take append_events.
    """
    transition, snapshot, writes = extras
    one = len(events) == 1 and snapshot is None
    if one and transition is None and not writes:
        params = _event_params(run_id, epoch, expected, events[0])
        return _statement(run_id, "append_event", params, _fenced_by_rowcount)
    if one and transition is None and len(writes) == 1 and isinstance(writes[0], EffectWrite):
        query, extra = "append_event_effect", _effect_params(writes[0])
    elif one and transition is not None and not writes:
        query, extra = "append_event_transition", _transition_params(transition)
    else:
        params = {
            "run_id": run_id,
            "epoch": epoch,
            "expected": expected,
            "after": expected if events else 0,  # no events: no seq to check
            "now": now,
            **_columns(events),
            **_transition_params(transition),
        }
        if snapshot is None and not writes and events:
            return _statement(run_id, "append_events_transition", params, _fenced_by_count)
        params.update(_snapshot_params(snapshot))
        params.update(_writes_params(writes))
        return _statement(run_id, "append_events", params, _fenced_and_taken)
    params = {**_event_params(run_id, epoch, expected, events[0]), "now": now, **extra}
    return _statement(run_id, query, params, _fenced_by_count)


def _moved_params(t: Transition | None) -> dict[str, Any]:
    """create_run's columns that a transition riding with the creation sets (none: as the
    new run gives them)."""
    if t is None:
        return {"waiting_for": None}
    moved = {"status": t.status, "available_at": t.available_at, "waiting_for": t.waiting_for}
    return moved | ({"lease_owner": None, "lease_expires": None} if t.release else {})


def _then_params(
    run_id: str, created: dict[str, Any], seq: int, now: float, writes: Sequence[Any]
) -> dict[str, Any]:
    """append_events' parameters for a new run's effects writes and signal takes, no
    events (the run's creation in the same transaction wrote them: see
    PostgresStore.create_run), ``created``: the creation's parameters (its epoch)."""
    return {
        "run_id": run_id,
        "epoch": created["epoch"],
        "expected": seq,
        "after": 0,
        "now": now,
        **_columns(()),
        **_transition_params(None),
        **_snapshot_params(None),
        **_writes_params(writes),
    }


def _statement(
    run_id: str, name: str, params: dict[str, Any], read: Callable[[PGresult], Any]
) -> _Statement:
    query = _WIRE[name]
    try:  # before the statement is queued: a value that cannot be sent fails its caller
        values = query.values(params)
    except (ValueError, TypeError) as e:
        raise EncodeError(
            f"run {run_id}: cannot send {name} to PostgreSQL: {e}; nothing was written"
        ) from None
    return _Statement(run_id, query, values, read)


def _loaded(res: PGresult) -> tuple[RunRecord | None, Snapshot | None, list[Event]]:
    run, snap, events = (res.get_value(0, i) for i in range(3))
    return (
        _record_json(run) if run is not None else None,
        Snapshot(*orjson.loads(snap)) if snap is not None else None,
        [Event(*e) for e in orjson.loads(events)] if events is not None else [],
    )


def _claimed(res: PGresult) -> list[tuple[RunRecord, int, Snapshot | None, list[Event]]]:
    out = []
    for i in range(res.ntuples):
        snap, events = res.get_value(i, 2), res.get_value(i, 3)
        out.append(
            (
                _record_json(res.get_value(i, 0)),
                int(res.get_value(i, 1) or 0),
                Snapshot(*orjson.loads(snap)) if snap is not None else None,
                [Event(*e) for e in orjson.loads(events)] if events is not None else [],
            )
        )
    return out


def _record_json(text: bytes | None) -> RunRecord:
    row = orjson.loads(text or b"null")
    row["code"] = orjson.loads(row["code"])
    for name in _FLOAT_FIELDS:  # JSON has no infinity: to_json writes "Infinity" as a string
        if type(row[name]) is str:
            row[name] = float(row[name])
    return RunRecord(**row)


def _answer(p: Pending[_Statement], res: PGresult) -> None:
    """Give a statement's reading of its result to its writer (a reading that raises fails
    that writer alone, not the batch)."""
    try:
        p.succeed(p.item.read(res))
    except Exception as e:
        p.fail(e)


def _lost(wire: WireConnection, e: psycopg.Error) -> bool:
    """The connection failed, not the statement (nothing more can be sent on it)."""
    return wire.broken or not isinstance(e, psycopg.DatabaseError)


def _refusal_raises(
    read: Callable[[PGresult], tuple[bool, bool]], run_id: str, epoch: int, res: PGresult
) -> tuple[bool, bool]:
    """A posted append's reading (nobody checks its outcome): a refusal is an error."""
    fenced, ok = read(res)
    if not fenced:
        raise LeaseLost(
            f"run {run_id}: the lease of epoch {epoch} was superseded (or the log does not "
            f"reach the seq this append follows)"
        )
    return fenced, ok


def _fenced_by_rowcount(res: PGresult) -> tuple[bool, bool]:
    if res.nfields:  # the call of its function: the row count, as a row
        return res.get_value(0, 0) == b"1", True
    return res.command_tuples == 1, True


def _fenced_by_count(res: PGresult) -> tuple[bool, bool]:
    return res.get_value(0, 0) != b"0", True


def _fenced_and_taken(res: PGresult) -> tuple[bool, bool]:
    return res.get_value(0, 0) != b"0", res.get_value(0, 1) != b"0"


def _event_params(run_id: str, epoch: int, expected: int, e: NewEvent) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "epoch": epoch,
        "seq": expected + 1,
        "after": expected,
        "type": e.type,
        "data": e.data,
        "at": e.at,
        "actor": e.actor,
    }


def _effect_params(w: EffectWrite) -> dict[str, Any]:
    return {
        "fx_key": w.key,
        "fx_run": w.run_id,
        "fx_position": w.position,
        "fx_tool": w.tool,
        "fx_status": w.status,
        "fx_result": w.result,
    }


def _transition_params(t: Transition | None) -> dict[str, Any]:
    if t is None:
        return {"status": None, "release": False, "available_at": None, "waiting_for": None}
    return {
        "status": t.status,
        "release": t.release,
        "available_at": t.available_at,
        "waiting_for": t.waiting_for,
    }


def _writes_params(writes: Sequence[EffectWrite | SignalTake]) -> dict[str, list[Any]]:
    """Effects writes and signal takes as parallel arrays.

    Several writes of one key keep the last (as applying them in order would): one
    INSERT … ON CONFLICT DO UPDATE cannot touch a row twice.
    """
    effects = {w.key: w for w in writes if isinstance(w, EffectWrite)}.values()
    takes = [w for w in writes if isinstance(w, SignalTake)]
    return {
        "fx_keys": [w.key for w in effects],
        "fx_runs": [w.run_id for w in effects],
        "fx_positions": [w.position for w in effects],
        "fx_tools": [w.tool for w in effects],
        "fx_statuses": [w.status for w in effects],
        "fx_results": [w.result for w in effects],
        "take_ids": [t.signal_id for t in takes],
        "take_seqs": [t.seq for t in takes],
    }


def _snapshot_params(s: Snapshot | None) -> dict[str, Any]:
    if s is None:
        return {"snap_run": None, "snap_seq": None, "snap_data": None, "snap_at": None}
    return {"snap_run": s.run_id, "snap_seq": s.seq, "snap_data": s.data, "snap_at": s.at}
