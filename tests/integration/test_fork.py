"""Forks and time travel on real SQLite files: properties over random runs, and edge cases."""

from __future__ import annotations

import re
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _timetravel_agents import execute, finish, programs, register
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tether
from tether.model import events as ev
from tether.model.state import fold
from tether.services.timetravel import cache_snapshot

pytestmark = pytest.mark.integration

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _open(folder: str, snapshot_every: int = 2) -> tether.App:
    return tether.open(
        str(Path(folder) / "agent.db"), snapshot_every=snapshot_every, clock=tether.FakeClock()
    )


def _key(e: tether.Event) -> tuple[Any, ...]:
    return (e.seq, e.type, e.data, e.at, e.actor)


@SETTINGS
@given(program=programs, cut=st.floats(0, 1))
def test_fork_at_n_starts_with_the_parents_first_n_events(program: list[Any], cut: float) -> None:
    with tempfile.TemporaryDirectory() as folder, _open(folder) as app:
        parent = execute(app, register(app), program)
        events = app.events(parent)
        n = 1 + int(cut * (len(events) - 1))
        child = app.fork(parent, at=n)
        copied = app.events(child)
        assert [_key(e) for e in copied[:n]] == [_key(e) for e in events[:n]]
        assert copied[n].type == ev.RUN_FORKED and len(copied) == n + 1
        at_n = fold(events[:n], run_id=parent)
        assert copied[n].payload() == {
            "parent": parent,
            "seq": n,
            "position": at_n.committed,
            "input": None,
            "vars": None,
        }
        cached = app.store.load(child).snapshot
        assert cached is not None and cached.seq == n + 1  # forks of long runs load fast…
        assert app.load(child) == fold(copied, run_id=child)  # …and the snapshot is exact
        assert app.events(parent) == events  # the parent is untouched
        assert app.load(parent) == fold(events, run_id=parent)


@SETTINGS
@given(program=programs, cut=st.floats(0, 1))
def test_a_resumed_fork_reuses_what_was_completed_at_the_fork_point(
    program: list[Any], cut: float
) -> None:
    with tempfile.TemporaryDirectory() as folder, _open(folder) as app:
        parent = execute(app, register(app), program)
        n = 1 + int(cut * (len(app.events(parent)) - 1))
        child = app.fork(parent, at=n)
        committed = app.state(parent, at=n).committed
        handle = finish(app, child)
        assert handle.status == "completed" and handle.output == {"n": len(program)}
        after = [e.payload().get("pos") for e in app.events(child)[n + 1 :]]
        touched = {p for p in after if p is not None}
        assert touched == set(range(committed + 1, len(app.load(child).steps) + 1))
        head, other = app.load(child), app.load(parent)
        assert [(s.name, s.output) for s in head.steps] == [(s.name, s.output) for s in other.steps]


@SETTINGS
@given(program=programs, every=st.integers(1, 4), cuts=st.sets(st.floats(0, 1), max_size=3))
def test_state_at_k_is_the_fold_of_the_first_k_events(
    program: list[Any], every: int, cuts: set[float]
) -> None:
    with tempfile.TemporaryDirectory() as folder, _open(folder, every) as app:
        run_id = execute(app, register(app), program)
        events = app.events(run_id)
        for cut in cuts:  # snapshots where the runtime may not have taken one
            n = min(len(events), max(every, int(cut * len(events))))
            cache_snapshot(app, fold(events[:n], run_id=run_id))
        if cuts and len(events) >= every:
            assert app.store.load(run_id).snapshot is not None  # the reads below use them
        for k in range(len(events) + 1):
            assert app.state(run_id, at=k) == fold(events[:k], run_id=run_id), k
            if k:
                assert app.state(run_id, at=k, when="before") == fold(
                    events[: k - 1], run_id=run_id
                )


# -- points: steps by position or name, before and after ---------------------------------


@pytest.fixture
def three(app: tether.App) -> Iterator[str]:
    @app.agent
    def three(run: tether.Run) -> int:
        run.step("fetch", lambda: 1)
        run.step("plan", lambda: 2)
        run.step("plan", lambda: 3)
        return 0

    yield app.run(three).id


def test_steps_are_named_by_position_name_or_name_and_occurrence(
    app: tether.App, three: str
) -> None:
    assert app.state(three, step=1).seq == 3
    assert app.state(three, step="plan").seq == 4  # the first match
    assert app.state(three, step="plan#2").seq == 5
    assert app.state(three, step="plan#2", when="before").seq == 4
    assert app.state(three, step=1, when="before").seq == 2
    assert app.state(three, step="plan#2").steps[-1].output == 3


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ("nope", "no step named 'nope'; its steps are 1:fetch, 2:plan, 3:plan"),
        ("plan#3", "only 2 step(s) named 'plan', so no plan#3"),
        (7, "no step at position 7"),
        (0, "no step at position 0"),
    ],
)
def test_an_unknown_step_is_refused_listing_the_steps(
    app: tether.App, three: str, step: int | str, message: str
) -> None:
    with pytest.raises(tether.NotFound, match=re.escape(message)):
        app.state(three, step=step)
    with pytest.raises(tether.NotFound, match=re.escape(message)):
        app.fork(three, step=step)


def test_a_seq_outside_the_log_is_refused(app: tether.App, three: str) -> None:
    with pytest.raises(tether.NotFound, match=re.escape("events 1..6, not seq 9")):
        app.state(three, at=9)
    with pytest.raises(tether.NotFound, match="first event"):
        app.fork(three, at=0)
    with pytest.raises(ValueError, match="not both"):
        app.state(three, at=2, step=1)
    with pytest.raises(ValueError, match="before"):
        app.state(three, at=2, when="later")  # type: ignore[arg-type]


def test_there_is_no_point_after_a_step_that_never_completed(app: tether.App) -> None:
    def broken() -> None:
        raise RuntimeError("down")

    @app.agent
    def failing(run: tether.Run) -> None:
        run.step("ok", lambda: 1)
        run.step("broken", broken)

    with pytest.raises(tether.RunFailed):
        app.run(failing)
    run_id = app.runs()[0].id
    with pytest.raises(tether.InvalidState, match="step 2 \\(broken\\) is failed"):
        app.state(run_id, step="broken")
    assert app.state(run_id, step="broken", when="before").committed == 1


# -- forks: vars, input, forks of forks, in-flight steps, running parents ------------------


def test_fork_vars_apply_after_the_fork_point_and_carry_into_forks_of_forks(
    app: tether.App,
) -> None:
    @app.agent
    def tone(run: tether.Run) -> list[str]:
        run.vars["tone"] = "dry"
        out = [run.step(f"say{i}", lambda t, i: f"{t}{i}", run.vars["tone"], i) for i in range(4)]
        return out

    parent = app.run(tone).id
    child = app.fork(parent, step="say0", vars={"tone": "warm"})
    assert app.resume(child).output == ["dry0", "warm1", "warm2", "warm3"]
    grandchild = app.fork(child, step="say2", vars={"extra": 1})
    handle = app.resume(grandchild)
    assert handle.output == ["dry0", "warm1", "warm2", "warm3"]
    assert [p for p, _ in handle.executed] == [5]
    assert app.load(grandchild).vars == {"tone": "warm", "extra": 1}
    assert app.load(grandchild).parent_id == child and app.load(child).parent_id == parent


def test_a_fork_of_a_fork_replays_a_branch_on_an_earlier_forks_variable(
    app: tether.App,
) -> None:
    @app.agent
    def branching(run: tether.Run) -> str:
        run.vars["tone"] = "dry"
        run.step("s1", lambda: 1)
        tone = run.vars["tone"]
        branch = str(run.step("warm" if tone == "warm" else "cold", lambda t: t, tone))
        run.step("s3", lambda: 3)
        return branch

    child = app.fork(app.run(branching).id, step="s1", vars={"tone": "warm"})
    assert app.resume(child).output == "warm"
    grandchild = app.fork(child, step="s3")
    assert app.resume(grandchild).output == "warm"


def test_fork_with_new_input_reuses_the_steps_before_the_point(app: tether.App) -> None:
    @app.agent
    def echo(run: tether.Run, word: str) -> list[str]:
        return [run.step(f"e{i}", lambda w: w, word) for i in range(3)]

    parent = app.run(echo, "old").id
    child = app.fork(parent, step=1, input={"kwargs": {"word": "new"}})
    assert app.load(child).input == {"args": [], "kwargs": {"word": "new"}}
    assert app.resume(child).output == ["old", "new", "new"]
    with pytest.raises(TypeError, match="fork input= is"):
        app.fork(parent, input={"word": "x"})
    with pytest.raises(tether.EncodeError, match="Nothing was forked"):
        app.fork(parent, vars={"conn": object()})


def test_a_step_retrying_at_the_fork_point_runs_again_in_the_fork(app: tether.App) -> None:
    calls: list[str] = []

    def flaky(run_id: str) -> str:
        calls.append(run_id)
        if len(calls) == 1:
            raise RuntimeError("the very first attempt fails")
        return "ok"

    @app.agent
    def retrying(run: tether.Run) -> str:
        run.step("a", lambda: 1)
        return str(run.step("b", flaky, run.id, retry=tether.Retry(max_attempts=2, backoff=0)))

    parent = app.run(retrying).id
    failed_seq = next(e.seq for e in app.events(parent) if e.type == ev.STEP_FAILED)
    child = app.fork(parent, at=failed_seq)
    assert app.load(child).step(2) is not None and app.load(child).step(2).status == "retrying"
    handle = app.resume(child)
    assert handle.output == "ok" and [p for p, _ in handle.executed] == [2]
    assert calls == [parent, parent, child]  # attempt 2 of b, in the fork


def test_forking_a_running_run_copies_a_consistent_prefix(app: tether.App) -> None:
    entered, release = threading.Event(), threading.Event()

    def block(run_id: str, parent: list[str]) -> str:
        if run_id == parent[0]:
            entered.set()
            release.wait(10)
        return "done"

    holder: list[str] = []

    @app.agent
    def slow(run: tether.Run) -> str:
        if not holder:
            holder.append(run.id)
        run.step("first", lambda: 1)
        return str(run.step("block", block, run.id, holder))

    worker = threading.Thread(target=app.run, args=(slow,))
    worker.start()
    assert entered.wait(10)
    parent = holder[0]
    assert app.store.get_run(parent).lease_owner is not None  # a live lease
    before = app.events(parent)
    child = app.fork(parent)
    assert [_key(e) for e in app.events(child)[:-1]] == [_key(e) for e in before]
    assert app.resume(child).output == "done"
    release.set()
    worker.join(10)
    assert app.load(parent).status == "completed"
    assert app.events(parent)[: len(before)] == before


def test_state_and_history_of_an_unknown_run_are_not_found(app: tether.App) -> None:
    for call in (lambda: app.history("nope"), lambda: app.state("nope"), lambda: app.fork("nope")):
        with pytest.raises(tether.NotFound, match="no run 'nope'"):
            call()


def test_history_lists_events_and_steps_with_their_seq(app: tether.App, three: str) -> None:
    h = app.history(three)
    assert [e.seq for e in h.entries] == list(range(1, 7))
    assert [(e.position, e.name) for e in h.entries[2:5]] == [
        (1, "fetch"),
        (2, "plan"),
        (3, "plan"),
    ]
    assert [(s.position, s.seq) for s in h.steps] == [(1, 3), (2, 4), (3, 5)]
    assert h.run.id == three


def test_a_fork_records_its_lineage_and_waits_queued(app: tether.App, three: str) -> None:
    child = app.fork(three, step=2)
    record = app.store.get_run(child)
    assert (record.parent_id, record.fork_seq, record.status) == (three, 4, "queued")
    assert record.lease_owner is None
    state = app.load(child)
    assert (state.parent_id, state.fork_seq, state.fork_position) == (three, 4, 2)
    assert replace(
        state,
        run_id=three,
        seq=4,
        parent_id=None,
        fork_seq=None,
        fork_position=None,
        status="running",
        updated_at=app.load(three, upto=4).updated_at,
    ) == app.state(three, step=2)
