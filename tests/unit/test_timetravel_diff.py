"""The diff of two states: empty for equal states, antisymmetric, and exact (applying
diff(a, b) to a's view gives b's view); bookkeeping is ignored unless asked for."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.model.state import RunState
from tether.model.steps import StepState, Usage
from tether.services.timetravel import Change, Diff, diff, render_path, view

pytestmark = pytest.mark.unit

values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2) | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
names = st.sampled_from(["fetch", "plan", "write"])
steps = st.lists(
    st.tuples(
        names,
        st.sampled_from(["step", "llm"]),
        st.sampled_from(["completed", "failed"]),
        values,
        st.floats(0, 9),
    ),
    max_size=4,
)
errors = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["E", "F"]), "at": st.floats(0, 9), "traceback": st.text()}
    ),
    max_size=2,
)


@st.composite
def states(draw: st.DrawFn) -> RunState:
    rows = draw(steps)
    return RunState(
        run_id=draw(st.sampled_from(["r1", "r2"])),
        seq=draw(st.integers(0, 50)),
        status=draw(st.sampled_from(["running", "completed", "failed"])),
        input={"args": draw(st.lists(values, max_size=2)), "kwargs": {}},
        output=draw(values),
        vars=draw(st.dictionaries(st.sampled_from(["a", "b", "c"]), values, max_size=3)),
        usage=Usage(calls=draw(st.integers(0, 2))),
        updated_at=draw(st.floats(0, 9)),
        steps=tuple(
            StepState(
                i, name, kind, status, output=out, finished_at=at, seq=i, errors=tuple(draw(errors))
            )
            for i, (name, kind, status, out, at) in enumerate(rows, 1)
        ),
    )


@given(states())
def test_a_state_does_not_differ_from_itself(a: RunState) -> None:
    d = diff(a, a)
    assert not d and d.changes == () and d.to_data()["same"]


@given(states(), states())
def test_diff_is_antisymmetric(a: RunState, b: RunState) -> None:
    assert diff(b, a) == diff(a, b).inverse()
    assert diff(a, b).inverse().inverse() == diff(a, b)


@given(states(), states())
def test_applying_the_diff_to_a_gives_b(a: RunState, b: RunState) -> None:
    patched = _apply(view(a), diff(a, b).changes)
    assert json.dumps(patched, sort_keys=True) == json.dumps(view(b), sort_keys=True)


def _apply(data: Any, changes: tuple[Change, ...]) -> Any:
    data = copy.deepcopy(data)
    for c in changes:
        *parents, last = c.path
        holder = data
        for key in parents:
            holder = holder[key]
        if c.kind == "removed" and isinstance(holder, list):
            del holder[last:]  # list removals are always the tail
        elif c.kind == "removed":
            del holder[last]
        elif isinstance(holder, list) and last == len(holder):
            holder.append(c.new)
        else:
            holder[last] = c.new
    return data


@given(states(), st.text(max_size=3), st.integers(0, 99), st.floats(0, 9))
def test_bookkeeping_is_ignored_unless_asked_for(
    a: RunState, run_id: str, seq: int, at: float
) -> None:
    b = replace(
        a,
        run_id=run_id,
        seq=seq,
        updated_at=at,
        created_at=at,
        executions=3,
        parent_id="p",
        fork_seq=2,
        fork_position=1,
        fork_vars={"a": 1},
        steps=tuple(
            replace(
                s,
                seq=s.seq + 1,
                finished_at=at,
                duration=at,
                errors=tuple({**e, "at": at, "traceback": "tb"} for e in s.errors),
            )
            for s in a.steps
        ),
    )
    assert not diff(a, b)
    everything = diff(a, b, bookkeeping=True)
    assert ("run_id" in {c.where for c in everything.changes}) == (run_id != a.run_id)


def test_user_data_is_compared_verbatim_even_with_timestamp_names() -> None:
    a = RunState(
        "r",
        output={"created_at": 1},
        vars={"at": 1, "traceback": "x"},
        failure={"type": "E", "message": "m", "at": 5.0, "traceback": "tb"},
    )
    b = replace(
        a,
        output={"created_at": 2},
        vars={"at": 2, "traceback": "y"},
        failure={"type": "E", "message": "m", "at": 6.0, "traceback": "other"},
    )
    assert [c.where for c in diff(a, b).changes] == [
        "output.created_at",
        "vars.at",
        "vars.traceback",
    ]


def test_paths_values_and_kinds() -> None:
    a = RunState(
        "r1",
        seq=4,
        output=[1, 2, 3],
        vars={"x": 1, "y": (1, 2)},
        steps=(StepState(1, "s", "step", "completed", output={"k": "v"}),),
    )
    b = RunState(
        "r2",
        seq=9,
        output=[1, 5],
        vars={"y": (1, 3), "z": {"n": None}},
        steps=(
            StepState(1, "s", "step", "completed", output={"k": "w"}),
            StepState(2, "t", "llm", "running"),
        ),
    )
    d = diff(a, b)
    assert (d.a, d.b) == ("r1@4", "r2@9")
    assert [(c.kind, c.where, c.old, c.new) for c in d.changes] == [
        ("changed", "output[1]", 2, 5),
        ("removed", "output[2]", 3, None),
        ("changed", "steps[1].output.k", "v", "w"),
        ("added", "steps[2]", None, view(b)["steps"][2]),
        ("removed", "vars.x", 1, None),
        ("changed", "vars.y", {"$t": "tuple", "v": [1, 2]}, {"$t": "tuple", "v": [1, 3]}),
        ("added", "vars.z", None, {"n": None}),
    ]
    data = d.to_data()
    assert [c["path"] for c in data["changed"]] == ["output[1]", "steps[1].output.k", "vars.y"]
    assert data["added"][1] == {
        "path": "vars.z",
        "keys": ["vars", "z"],
        "old": None,
        "new": {"n": None},
    }
    json.dumps(data)  # plain JSON


def test_types_matter_true_is_not_one() -> None:
    a, b = RunState("r", output=[1, 1.0, True]), RunState("r", output=[True, 1, 1.0])
    assert len(diff(a, b).changes) == 3


def test_render_path() -> None:
    assert render_path(("steps", 7, "output")) == "steps[7].output"
    assert render_path(("vars", "my key", 0)) == "vars['my key'][0]"
    assert render_path(()) == "$"
    assert Diff("a", "b", ()).inverse() == Diff("b", "a", ())
