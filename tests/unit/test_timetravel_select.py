"""Pure pieces of time travel: which runs gc collects, ages, and naming a step."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.errors import NotFound
from tether.model.state import RunState
from tether.model.steps import StepState
from tether.services.retention import parse_age, runs_to_collect
from tether.services.timetravel import find_step
from tether.store import RunRecord

pytestmark = pytest.mark.unit

NOW = 1_000_000.0
DAY = 86400.0


def _run(
    i: int,
    agent: str = "a",
    status: str = "completed",
    age_days: float = 0.0,
    lease: float | None = None,
) -> RunRecord:
    at = NOW - age_days * DAY
    return RunRecord(
        f"r{i}",
        agent,
        None,
        status,
        {},
        created_at=at - i * 1e-3,
        updated_at=at,
        lease_owner="w" if lease is not None else None,
        lease_expires=lease,
    )


def _ids(runs: list[RunRecord]) -> list[str]:
    return [r.id for r in runs]


def test_by_default_only_finished_runs_are_candidates() -> None:
    statuses = ["queued", "running", "waiting", "completed", "failed", "cancelled"]
    runs = [_run(i, status=s, age_days=1) for i, s in enumerate(statuses)]
    assert _ids(runs_to_collect(runs, now=NOW, older_than=0)) == ["r5", "r4", "r3"]
    assert _ids(runs_to_collect(runs, now=NOW, statuses=["queued", "waiting"])) == ["r2", "r0"]


def test_age_counts_from_the_last_change() -> None:
    runs = [_run(1, age_days=31), _run(2, age_days=29), _run(3, age_days=30.5)]
    assert _ids(runs_to_collect(runs, now=NOW, older_than=30 * DAY)) == ["r1", "r3"]


def test_keep_last_is_per_agent_and_applies_before_age() -> None:
    runs = [_run(i, agent="a", age_days=i) for i in range(1, 5)] + [
        _run(10 + i, agent="b", age_days=i) for i in range(1, 3)
    ]
    assert _ids(runs_to_collect(runs, now=NOW, keep_last=2)) == ["r4", "r3"]
    assert _ids(runs_to_collect(runs, now=NOW, keep_last=1, older_than=3.5 * DAY)) == ["r4"]
    assert _ids(runs_to_collect(runs, now=NOW, keep_last=0, statuses=["completed"])) == [
        "r4",
        "r3",
        "r12",
        "r2",
        "r11",
        "r1",
    ]


def test_a_run_with_a_live_lease_is_never_collected() -> None:
    runs = [_run(1, status="running", lease=NOW + 5), _run(2, status="running", lease=NOW - 5)]
    assert _ids(runs_to_collect(runs, now=NOW, statuses=["running"])) == ["r2"]


@given(
    st.lists(
        st.tuples(
            st.sampled_from("ab"),
            st.sampled_from(["completed", "failed", "queued"]),
            st.floats(0, 60),
        ),
        max_size=12,
    ),
    st.integers(0, 4),
    st.floats(0, 60),
)
def test_selection_invariants(rows: list[tuple[str, str, float]], keep: int, days: float) -> None:
    runs = [_run(i, agent, status, age) for i, (agent, status, age) in enumerate(rows)]
    chosen = runs_to_collect(runs, now=NOW, keep_last=keep, older_than=days * DAY)
    kept = [r for r in runs if r not in chosen]
    assert all(r.status != "queued" and r.updated_at < NOW - days * DAY for r in chosen)
    for agent in "ab":
        finished = [r for r in runs if r.agent == agent and r.status != "queued"]
        newest = sorted(finished, key=lambda r: r.created_at, reverse=True)[:keep]
        assert all(r in kept for r in newest)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "gc needs a criterion"),
        ({"statuses": ["done"]}, "unknown status done"),
        ({"keep_last": -1}, "0 or more"),
        ({"older_than": -1.0}, "0 or more"),
    ],
)
def test_bad_criteria_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        runs_to_collect([], now=NOW, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("15m", 900),
        ("12h", 43200),
        ("30d", 30 * DAY),
        ("1.5h", 5400),
        (" 2d ", 2 * DAY),
    ],
)
def test_parse_age(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["d", "-1d", "1 day", "", "30 days"])
def test_parse_age_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_age(text)


STATE = RunState(
    "r",
    steps=tuple(
        StepState(i, n, "step", "completed")
        for i, n in enumerate(["fetch", "plan", "plan", "a#1"], 1)
    ),
)


@pytest.mark.parametrize(
    ("step", "position"),
    [(1, 1), (4, 4), ("fetch", 1), ("plan", 2), ("plan#1", 2), ("plan#2", 3), ("a#1", 4)],
)
def test_find_step(step: int | str, position: int) -> None:
    assert find_step(STATE, step) == position


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (5, "no step at position 5"),
        ("nope", "no step named 'nope'"),
        ("plan#3", "only 2 step\\(s\\) named 'plan'"),
        ("a#2", "no step named 'a'"),
    ],
)
def test_find_step_refuses_listing_the_steps(step: int | str, message: str) -> None:
    with pytest.raises(NotFound, match=message + ".*its steps are 1:fetch, 2:plan, 3:plan, 4:a#1"):
        find_step(STATE, step)
    with pytest.raises(TypeError):
        find_step(STATE, True)


def test_a_long_run_lists_its_step_names_once() -> None:
    state = RunState(
        "r", steps=tuple(StepState(i, f"n{i % 3}", "step", "completed") for i in range(1, 101))
    )
    with pytest.raises(NotFound, match=r"it has positions 1\.\.100, named n1, n2, n0$"):
        find_step(state, "nope")
