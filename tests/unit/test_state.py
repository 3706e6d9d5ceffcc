"""fold() is pure and snapshots are only a cache: fold(all) == fold(rest, start=snapshot)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.model import codec
from tether.model import events as ev
from tether.model.events import Event
from tether.model.state import RunState, fold, from_data, to_data
from tether.store import snapshots

pytestmark = pytest.mark.unit

outputs = st.recursive(
    st.none() | st.integers() | st.text(max_size=8) | st.floats(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)

# One "op" of an agent: what happens at the next position.
ops = st.one_of(
    st.tuples(st.just("step"), st.sampled_from(["step", "llm"]), outputs, st.integers(0, 2)),
    st.tuples(st.just("decide"), st.text(max_size=5), st.text(max_size=10)),
    st.tuples(st.just("var"), st.sampled_from(["a", "b"]), outputs),
    st.tuples(st.just("del"), st.sampled_from(["a", "b"])),
    st.tuples(st.just("crash")),
    # a fan-out of 3 branches finishing in this order, this many before a crash
    st.tuples(st.just("fan"), st.permutations(range(3)), st.integers(0, 3)),
)


def _log(run_id: str, program: list[tuple[Any, ...]], end: str) -> list[Event]:
    raw: list[tuple[str, dict[str, Any]]] = [
        (
            ev.RUN_CREATED,
            {"agent": "a", "version": "1", "input": {"args": [1], "kwargs": {}}, "code": {}},
        ),
        (ev.RUN_STARTED, {"by": "w1", "epoch": 1}),
    ]
    pos, defined = 0, set()
    for op in program:
        if op[0] == "crash":
            raw.append((ev.RUN_STARTED, {"by": "w2", "epoch": 2}))
            continue
        if op[0] == "del" and op[1] not in defined:
            continue
        if op[0] == "fan":
            raw.extend(_fan_events(pos, op[1], op[2]))
            pos += len(op[1])
            continue
        pos += 1
        raw.extend(_op_events(pos, op, defined))
    if end == "completed":
        raw.append((ev.RUN_COMPLETED, {"output": {"n": pos}}))
    elif end == "failed":
        raw.append((ev.RUN_FAILED, {"error": {"type": "ValueError", "message": "x"}}))
    return [
        Event(run_id, i, t, codec.encode(d), 1000.0 + i, "w") for i, (t, d) in enumerate(raw, 1)
    ]


def _op_events(
    pos: int, op: tuple[Any, ...], defined: set[str]
) -> list[tuple[str, dict[str, Any]]]:
    kind = op[0]
    if kind == "step":
        _, k, out, failures = op
        base = {"pos": pos, "name": f"s{pos}", "kind": k}
        out_events: list[tuple[str, dict[str, Any]]] = [
            (
                ev.STEP_FAILED,
                {**base, "attempt": a + 1, "error": {"type": "E", "message": "m"}, "retry_at": 5.0},
            )
            for a in range(failures)
        ]
        usage = {"input_tokens": 3, "output_tokens": 4, "cost": 0.5, "calls": 1}
        done = {
            **base,
            "attempt": failures + 1,
            "digest": "d",
            "output": out,
            "started": 1.0,
            "duration": 0.1,
        }
        if k == "llm":
            done["usage"] = usage
        return [*out_events, (ev.STEP_COMPLETED, done)]
    if kind == "decide":
        return [
            (
                ev.DECISION,
                {"pos": pos, "name": f"d{pos}", "choice": op[1], "why": op[2], "details": {}},
            )
        ]
    if kind == "var":
        defined.add(op[1])
        return [(ev.VAR_SET, {"pos": pos, "name": f"vars.{op[1]}", "key": op[1], "value": op[2]})]
    defined.discard(op[1])
    return [(ev.VAR_DELETED, {"pos": pos, "name": f"vars.{op[1]}", "key": op[1]})]


def _fan_events(before: int, order: list[int], done: int) -> list[tuple[str, dict[str, Any]]]:
    """Branches at positions before+1.. finishing in ``order``; the process dies after
    ``done`` of them, and the resume runs the others (in position order)."""

    def completed(i: int) -> tuple[str, dict[str, Any]]:
        pos = before + 1 + i
        return ev.STEP_COMPLETED, {"pos": pos, "name": f"b{pos}", "kind": "step", "output": i}

    first = [completed(i) for i in order[:done]]
    if done == len(order):
        return first
    return [
        *first,
        (ev.RUN_STARTED, {"by": "w2", "epoch": 2}),
        *map(completed, sorted(order[done:])),
    ]


def _snapshot_round_trip(state: RunState) -> RunState:
    return from_data(codec.decode(codec.encode(to_data(state))))


@given(st.lists(ops, max_size=12), st.sampled_from(["completed", "failed", "open"]), st.data())
def test_fold_all_equals_fold_from_snapshot_at_any_cut(
    program: list[tuple[Any, ...]], end: str, data: st.DataObject
) -> None:
    log = _log("r1", program, end)
    k = data.draw(st.integers(0, len(log)))
    whole = fold(log)
    snapshot = _snapshot_round_trip(fold(log[:k], run_id="r1"))
    assert fold(log[k:], start=snapshot) == whole


def _paged_round_trip(state: RunState, pages: dict[str, bytes]) -> RunState:
    encoded = snapshots.encode(state, page_size=2)
    pages.update(encoded.pages)
    return snapshots.decode(encoded.root, pages.__getitem__)


@given(st.lists(ops, max_size=12), st.sampled_from(["completed", "failed", "open"]), st.data())
def test_fold_all_equals_fold_from_paged_snapshots_at_any_cuts(
    program: list[tuple[Any, ...]], end: str, data: st.DataObject
) -> None:
    log = _log("r1", program, end)
    k = data.draw(st.integers(0, len(log)))
    m = data.draw(st.integers(k, len(log)))
    whole, pages = fold(log), {}
    first = _paged_round_trip(fold(log[:k], run_id="r1"), pages)
    second = _paged_round_trip(fold(log[k:m], start=first), pages)  # pages shared, overlay
    for state in (first, second, fold(log[m:], start=second)):
        assert state.committed == RunState("r1", steps=tuple(state.steps)).committed
    assert fold(log[m:], start=second) == whole
    assert whole == fold(log[m:], start=second)  # a tuple equals a StepList both ways


@given(st.lists(ops, max_size=12))
def test_fold_is_pure(program: list[tuple[Any, ...]]) -> None:
    log = _log("r1", program, "open")
    assert fold(log) == fold(list(log))


def test_five_layers_are_folded() -> None:
    program = [
        ("step", "step", {"x": 1}, 2),
        ("decide", "escalate", "p99 above SLO"),
        ("var", "a", [1]),
        ("step", "llm", "text", 0),
    ]
    s = fold(_log("r1", program, "open"))
    assert s.status == "running" and s.committed == 4 and s.position == 5
    first = s.steps[0]
    assert first.attempts == 3 and len(first.errors) == 2 and first.output == {"x": 1}
    assert first.input_digest == "d"
    assert s.decisions[0].output == "escalate" and s.decisions[0].why == "p99 above SLO"
    assert s.vars == {"a": [1]}
    assert s.usage.input_tokens == 3 and s.usage.calls == 1
    assert s.executions == 1
    assert s.describe_position() == "step 5, 1–4 committed"
    assert s.describe_position(9) == "step 5 of 9, 1–4 committed"


def test_a_fan_out_stopped_midway_leaves_unrecorded_positions_until_they_complete() -> None:
    """Branch 3 finished, 1 and 2 were in flight at a crash: 1 and 2 have no record (not
    a step named '?' that replay would take for a different one), nothing is committed
    past them; their completions, later, commit all three."""
    head = _log("r1", [("step", "step", 0, 0)], "open")
    crashed = fold(
        [
            *head,
            Event(
                "r1",
                len(head) + 1,
                ev.STEP_COMPLETED,
                codec.encode({"pos": 4, "name": "b4", "kind": "step", "output": 2}),
                9.0,
            ),
        ]
    )
    assert [(s.position, s.name, s.kind, s.status) for s in crashed.steps] == [
        (1, "s1", "step", "completed"),
        (2, "", "", "unrecorded"),
        (3, "", "", "unrecorded"),
        (4, "b4", "step", "completed"),
    ]
    assert crashed.committed == 1 and crashed.position == 2
    again = [(2, "b2"), (3, "b3")]
    rest = [
        Event(
            "r1",
            crashed.seq + i,
            ev.STEP_COMPLETED,
            codec.encode({"pos": p, "name": n, "kind": "step", "output": p}),
            10.0 + i,
        )
        for i, (p, n) in enumerate(again, 1)
    ]
    whole = fold(rest, start=crashed)
    assert whole.committed == 4 and [s.name for s in whole.steps] == ["s1", "b2", "b3", "b4"]
    assert fold(rest, start=_snapshot_round_trip(crashed)) == whole


def test_failed_run_keeps_failure_context() -> None:
    s = fold(_log("r1", [("step", "step", 1, 0)], "failed"))
    assert s.status == "failed" and s.failure is not None and s.failure["type"] == "ValueError"


def test_unknown_event_types_are_carried_not_folded() -> None:
    log = _log("r1", [], "open")
    extra = Event("r1", len(log) + 1, "future.thing", "{}", 1.0)
    assert fold([*log, extra]).status == "running"
