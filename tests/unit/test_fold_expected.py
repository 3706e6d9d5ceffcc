"""Every event type folded into the exact state it must give: each field of the run and of
its steps compared with a value written out here, never with another fold.

Times and seqs differ (event ``n`` has seq ``n`` and time ``1000 + 10 n``), so a field
that takes the wrong one of them is caught. Optional fields are folded present and
absent: an absent one must give the documented default.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tether.model import codec
from tether.model import events as ev
from tether.model.events import Event
from tether.model.state import RunState, fold, head_data
from tether.model.steps import StepState, Usage

pytestmark = pytest.mark.unit

CREATED = (ev.RUN_CREATED, {"agent": "a"})
STARTED = (ev.RUN_STARTED, {"by": "w1", "epoch": 1})


def at(seq: int) -> float:
    return 1000.0 + 10 * seq


def log(*raw: tuple[str, dict[str, Any]], run_id: str = "r1") -> list[Event]:
    return [Event(run_id, i, t, codec.encode(d), at(i), "w") for i, (t, d) in enumerate(raw, 1)]


def run(*raw: tuple[str, dict[str, Any]]) -> RunState:
    return fold(log(*raw))


def test_a_created_run_keeps_what_it_was_created_with() -> None:
    full = {
        "agent": "billing",
        "version": "3",
        "input": {"args": [1], "kwargs": {}},
        "code": {"billing": "abc"},
        "limits": {"tokens": 100},
        "caller": {"run": "p1", "pos": 4},
    }
    assert run((ev.RUN_CREATED, full)) == RunState(
        run_id="r1",
        seq=1,
        agent="billing",
        version="3",
        status="queued",
        input={"args": [1], "kwargs": {}},
        code={"billing": "abc"},
        created_at=at(1),
        updated_at=at(1),
        budget={"limits": {"tokens": 100}, "added": {}},
        caller={"run": "p1", "pos": 4},
    )
    bare = run(CREATED)
    assert bare == RunState(run_id="r1", seq=1, agent="a", created_at=at(1), updated_at=at(1))
    assert (bare.version, bare.input, bare.code, bare.budget, bare.caller) == (
        None, {}, {}, None, None,
    )  # fmt: skip


def test_each_start_counts_an_execution_and_clears_waiting_and_blocked() -> None:
    blocked = (
        ev.RUN_BLOCKED,
        {"message": "m", "position": 2, "recorded": "a", "found": "b"},
    )
    s = run(CREATED, STARTED, blocked, STARTED)
    assert (s.status, s.executions, s.blocked, s.waiting) == ("running", 2, None, None)
    assert (s.seq, s.updated_at) == (4, at(4))


def test_a_blocked_run_says_what_no_longer_matches() -> None:
    data = {"message": "step 2 changed", "position": 2, "recorded": "a", "found": "b"}
    s = run(CREATED, STARTED, (ev.RUN_BLOCKED, data))
    assert s.status == "blocked"
    assert s.blocked == {
        "message": "step 2 changed", "position": 2, "recorded": "a", "found": "b", "at": at(3),
    }  # fmt: skip


def test_a_suspended_run_is_running_unless_the_event_says_otherwise() -> None:
    blocked = (ev.RUN_BLOCKED, {"message": "m", "position": 1, "recorded": "a", "found": "b"})
    plain = run(CREATED, STARTED, blocked, (ev.RUN_SUSPENDED, {"reason": "shutdown"}))
    assert (plain.status, plain.blocked) == ("running", None)
    queued = run(CREATED, STARTED, blocked, (ev.RUN_SUSPENDED, {"status": "queued"}))
    assert (queued.status, queued.blocked) == ("queued", None)


def test_completed_and_failed_runs() -> None:
    failed = run(CREATED, STARTED, (ev.RUN_FAILED, {"error": {"type": "E", "message": "m"}}))
    assert (failed.status, failed.failure, failed.error) == (
        "failed", {"type": "E", "message": "m"}, {"type": "E", "message": "m"},
    )  # fmt: skip
    done = fold(log((ev.RUN_COMPLETED, {"output": [1, 2]})), start=failed)
    assert (done.status, done.output, done.failure) == ("completed", [1, 2], None)


def test_a_fork_points_at_its_parent_and_forgets_how_the_parent_ended() -> None:
    parent_end = (ev.RUN_COMPLETED, {"output": "parent's"})
    var = (ev.VAR_SET, {"pos": 1, "name": "vars.a", "key": "a", "value": 1})
    fork = {
        "parent": "p1", "seq": 4, "position": 1, "vars": {"a": 2, "b": 3},
        "input": {"args": [9], "kwargs": {}},
    }  # fmt: skip
    s = run(CREATED, STARTED, var, parent_end, (ev.RUN_FORKED, fork))
    assert (s.parent_id, s.fork_seq, s.fork_position) == ("p1", 4, 1)
    assert (s.status, s.output, s.failure) == ("queued", None, None)
    assert s.fork_vars == {"a": 2, "b": 3} and s.vars == {"a": 2, "b": 3}
    assert s.fork_edits == ((1, {"a": 2, "b": 3}),)
    assert s.input == {"args": [9], "kwargs": {}}
    failed = (ev.RUN_FAILED, {"error": {"type": "E"}})
    again = fold(log(failed, (ev.RUN_FORKED, {"parent": "p2", "seq": 2, "position": 1})), start=s)
    assert (again.parent_id, again.fork_seq, again.failure, again.status) == (
        "p2", 2, None, "queued",
    )  # fmt: skip
    assert again.fork_vars is None and again.fork_edits == ((1, {"a": 2, "b": 3}),)
    assert again.vars == {"a": 2, "b": 3} and again.input == {"args": [9], "kwargs": {}}


INTENT = {
    "pos": 1, "name": "charge", "kind": "tool", "key": "k1", "attempt": 1, "digest": "d1",
    "risk": "write", "input": {"amount": 40},
}  # fmt: skip


def _intent_step(**changes: Any) -> StepState:
    detail = {"risk": "write", "of": None, "input": {"amount": 40}, "code": None}
    base = dict(
        position=1, name="charge", kind="tool", status="running", attempts=1,
        input_digest="d1", started_at=at(3), seq=3, key="k1", detail=detail,
    )  # fmt: skip
    return StepState(**{**base, **changes})


def test_a_tool_intent_is_a_running_step_with_its_key() -> None:
    s = run(CREATED, STARTED, (ev.TOOL_INTENT, INTENT))
    assert s.steps == (_intent_step(),)


def test_a_tool_in_doubt_waits_for_a_human_with_the_reason() -> None:
    error = {"type": "tether.errors.StepTimeout", "message": "slow"}
    timeout = {"pos": 1, "name": "charge", "key": "k1", "error": error, "reason": "timeout"}
    s = run(CREATED, STARTED, (ev.TOOL_INTENT, INTENT), (ev.TOOL_IN_DOUBT, timeout))
    assert s.steps == (_intent_step(status="in_doubt", errors=(error,), seq=4),)
    assert (s.status, s.waiting) == (
        "waiting",
        {"kind": "doubt", "name": "charge", "position": 1, "since": at(4), "key": "k1",
         "reason": "timeout"},
    )  # fmt: skip
    crash = {"pos": 1, "name": "charge", "key": "k1"}  # a crash: no error, the default reason
    s = run(CREATED, STARTED, (ev.TOOL_INTENT, INTENT), (ev.TOOL_IN_DOUBT, crash))
    assert s.steps == (_intent_step(status="in_doubt", seq=4),)
    assert s.waiting is not None and s.waiting["reason"] == "crash"


def test_a_resolved_doubt_completes_the_step_or_calls_it_again() -> None:
    doubt = (ev.TOOL_IN_DOUBT, {"pos": 1, "name": "charge", "key": "k1"})
    yes = {"pos": 1, "name": "charge", "key": "k1", "happened": True, "by": "al", "result": 7}
    s = run(CREATED, STARTED, (ev.TOOL_INTENT, INTENT), doubt, (ev.TOOL_RESOLVED, yes))
    assert s.steps == (_intent_step(status="completed", output=7, finished_at=at(5), seq=5),)
    assert (s.status, s.waiting) == ("queued", None)
    no = {**yes, "happened": False}
    s = run(CREATED, STARTED, (ev.TOOL_INTENT, INTENT), doubt, (ev.TOOL_RESOLVED, no))
    assert s.steps == (_intent_step(status="retrying", seq=5),)
    assert (s.status, s.waiting) == ("queued", None)


def test_an_approval_waits_then_records_the_decision_and_how_long_it_took() -> None:
    ask = {
        "pos": 1, "name": "go", "payload": {"amount": 40}, "approvers": ["al", "ops"],
        "groups": ["ops"], "timeout_at": 9000.0,
    }  # fmt: skip
    s = run(CREATED, STARTED, (ev.APPROVAL_REQUESTED, ask))
    detail = {"payload": {"amount": 40}, "approvers": ["al", "ops"], "groups": ["ops"]}
    asked = StepState(
        1, "go", "approve", "waiting", attempts=1, started_at=at(3), due_at=9000.0,
        detail=detail, seq=3,
    )  # fmt: skip
    assert s.steps == (asked,)
    assert s.waiting == {
        "kind": "approval", "name": "go", "position": 1, "since": at(3), "until": 9000.0,
        **detail,
    }  # fmt: skip
    decided = {"pos": 1, "name": "go", "approved": True, "by": "al", "reason": "fine"}
    s = fold(log(CREATED, STARTED, (ev.APPROVAL_REQUESTED, ask), (ev.APPROVAL_DECIDED, decided)))
    assert s.steps == (
        StepState(
            1, "go", "approve", "completed", attempts=1,
            output={"approved": True, "by": "al", "reason": "fine"}, started_at=at(3),
            finished_at=at(4), duration=at(4) - at(3), due_at=9000.0, detail=detail, seq=4,
        ),
    )  # fmt: skip
    assert (s.status, s.waiting) == ("queued", None)
    plain = {"pos": 1, "name": "go"}
    s = run(CREATED, STARTED, (ev.APPROVAL_REQUESTED, plain))
    assert s.steps[0].detail == {"payload": None, "approvers": None}
    assert s.steps[0].due_at is None and s.waiting is not None and s.waiting["until"] is None


def test_a_timer_is_a_waiting_step_and_suspends_the_run_only_when_asked() -> None:
    timer = {"pos": 1, "name": "cool", "until": 5000.0}
    step = StepState(1, "cool", "sleep", "waiting", attempts=1, started_at=at(3), due_at=5000.0,
                     seq=3)  # fmt: skip
    s = run(CREATED, STARTED, (ev.TIMER_STARTED, timer))
    assert s.steps == (step,) and (s.status, s.waiting) == ("running", None)
    s = run(CREATED, STARTED, (ev.TIMER_STARTED, {**timer, "suspend": True}))
    assert s.steps == (step,)
    assert (s.status, s.waiting) == (
        "waiting",
        {"kind": "timer", "name": "cool", "position": 1, "since": at(3), "until": 5000.0},
    )


def test_a_wait_for_a_signal_with_and_without_a_timeout() -> None:
    wait = {"pos": 1, "name": "paid", "timeout_at": 7000.0}
    s = run(CREATED, STARTED, (ev.WAIT_STARTED, wait))
    assert s.steps == (
        StepState(1, "paid", "wait", "waiting", attempts=1, started_at=at(3), due_at=7000.0,
                  seq=3),
    )  # fmt: skip
    assert (s.status, s.waiting) == (
        "waiting",
        {"kind": "signal", "name": "paid", "position": 1, "since": at(3), "until": 7000.0},
    )
    s = run(CREATED, STARTED, (ev.WAIT_STARTED, {"pos": 1, "name": "paid"}))
    assert s.steps[0].due_at is None and s.waiting is not None and s.waiting["until"] is None


def test_a_join_waits_for_its_children() -> None:
    s = run(CREATED, STARTED, (ev.JOIN_STARTED, {"pos": 1, "name": "kids", "children": ["c1"]}))
    assert s.steps == (
        StepState(1, "kids", "join", "waiting", attempts=1, started_at=at(3), seq=3),
    )
    assert s.waiting == {
        "kind": "children", "name": "kids", "position": 1, "since": at(3), "children": ["c1"],
    }  # fmt: skip


def test_compensation_records_why_and_from_where() -> None:
    data = {"reason": "failed", "error": {"type": "E"}, "from_position": 3}
    s = run(CREATED, STARTED, (ev.RUN_COMPENSATING, data))
    assert s.compensating == {
        "reason": "failed", "error": {"type": "E"}, "at": at(3), "from_position": 3,
    }  # fmt: skip
    s = run(CREATED, STARTED, (ev.RUN_COMPENSATING, {"reason": "cancelled", "from_position": 1}))
    assert s.compensating == {"reason": "cancelled", "error": None, "at": at(3),
                              "from_position": 1}  # fmt: skip


def test_a_cancelled_run_stops_waiting_and_says_who_and_why() -> None:
    wait = (ev.WAIT_STARTED, {"pos": 1, "name": "paid"})
    s = run(CREATED, STARTED, wait, (ev.RUN_CANCELLED, {"by": "al", "reason": "left"}))
    assert (s.status, s.waiting) == ("cancelled", None)
    assert s.failure == {"type": "cancelled", "message": "left", "by": "al", "at": at(4)}
    s = run(CREATED, STARTED, wait, (ev.RUN_CANCELLED, {}))
    assert s.failure == {"type": "cancelled", "message": "cancelled", "by": None, "at": at(4)}


def test_a_completed_step_keeps_its_input_output_timing_and_usage() -> None:
    usage = {"input_tokens": 3, "output_tokens": 4, "cost": 0.5, "calls": 1}
    failed = {
        "pos": 1, "name": "ask", "kind": "llm", "attempt": 1, "error": {"type": "E"},
        "retry_at": 1500.0, "digest": "d0", "key": "k0",
    }  # fmt: skip
    done = {
        "pos": 1, "name": "ask", "kind": "llm", "attempt": 2, "digest": "d1", "output": "hi",
        "started": 1025.0, "duration": 2.5, "usage": usage, "why": "because",
        "detail": {"prompt": "p-1"},
    }  # fmt: skip
    s = run(CREATED, STARTED, (ev.STEP_FAILED, failed), (ev.STEP_COMPLETED, done))
    assert s.steps == (
        StepState(
            1, "ask", "llm", "completed", attempts=2, input_digest="d1", output="hi",
            errors=({"type": "E"},), started_at=1025.0, finished_at=at(4), duration=2.5,
            usage=Usage(3, 4, 0.5, 1), why="because", seq=4, key="k0",
            detail={"prompt": "p-1"},
        ),
    )  # fmt: skip
    assert s.usage == Usage(3, 4, 0.5, 1)


def test_a_completed_step_without_optional_fields() -> None:
    s = run(CREATED, STARTED, (ev.STEP_COMPLETED, {"pos": 1, "name": "x", "kind": "step"}))
    assert s.steps == (
        StepState(1, "x", "step", "completed", attempts=1, started_at=at(3), finished_at=at(3),
                  seq=3),
    )  # fmt: skip
    timed = {"pos": 1, "name": "x", "kind": "step", "duration": 4.0}
    s = run(CREATED, STARTED, (ev.STEP_COMPLETED, timed))
    assert (s.steps[0].started_at, s.steps[0].duration) == (at(3) - 4.0, 4.0)
    assert s.usage == Usage()


def test_a_completed_tool_step_keeps_the_intent_s_key_and_detail() -> None:
    done = {"pos": 1, "name": "charge", "kind": "tool", "attempt": 1, "output": "ch-1"}
    s = run(CREATED, STARTED, (ev.TOOL_INTENT, INTENT), (ev.STEP_COMPLETED, done))
    assert (s.steps[0].key, s.steps[0].detail) == (
        "k1", {"risk": "write", "of": None, "input": {"amount": 40}, "code": None},
    )  # fmt: skip


def test_a_failed_step_retries_or_fails_keeping_every_error() -> None:
    e1, e2 = {"type": "E", "message": "1"}, {"type": "E", "message": "2"}
    first = {
        "pos": 1, "name": "charge", "kind": "tool", "attempt": 1, "error": e1,
        "retry_at": 1500.0,
    }  # fmt: skip
    last = {"pos": 1, "name": "charge", "kind": "tool", "attempt": 2, "error": e2}
    s = run(CREATED, STARTED, (ev.TOOL_INTENT, INTENT), (ev.STEP_FAILED, first))
    assert s.steps == (
        _intent_step(status="retrying", errors=(e1,), finished_at=at(4), next_retry_at=1500.0,
                     seq=4),
    )  # fmt: skip
    s = fold(log((ev.STEP_FAILED, last)), start=s)
    assert s.steps == (
        _intent_step(status="failed", attempts=2, errors=(e1, e2), finished_at=at(1), seq=1),
    )  # fmt: skip
    fresh = {"pos": 1, "name": "x", "kind": "step", "attempt": 1, "error": e1, "digest": "d9"}
    s = run(CREATED, STARTED, (ev.STEP_FAILED, fresh))
    assert s.steps == (
        StepState(1, "x", "step", "failed", attempts=1, input_digest="d9", errors=(e1,),
                  started_at=at(3), finished_at=at(3), seq=3),
    )  # fmt: skip


def test_a_decision_is_a_completed_step_with_its_choice_and_rationale() -> None:
    data = {"pos": 1, "name": "route", "choice": "escalate", "why": "p99"}
    s = run(CREATED, STARTED, (ev.DECISION, data))
    assert s.steps == (
        StepState(1, "route", "decide", "completed", attempts=1, output="escalate", why="p99",
                  started_at=at(3), finished_at=at(3), duration=0.0, seq=3),
    )  # fmt: skip
    assert s.decisions == s.steps


def test_task_variables_are_set_and_deleted_as_steps() -> None:
    set_a = (ev.VAR_SET, {"pos": 1, "name": "vars.a", "key": "a", "value": [1]})
    del_a = (ev.VAR_DELETED, {"pos": 2, "name": "vars.a", "key": "a"})
    s = run(CREATED, STARTED, set_a, del_a)
    assert s.vars == {}
    assert s.steps == (
        StepState(1, "vars.a", "var", "completed", attempts=1, output=[1], started_at=at(3),
                  finished_at=at(3), duration=0.0, seq=3),
        StepState(2, "vars.a", "var", "completed", attempts=1, started_at=at(4),
                  finished_at=at(4), duration=0.0, seq=4),
    )  # fmt: skip


def test_deleting_a_variable_the_state_does_not_hold_is_folded_without_error() -> None:
    """The fold takes the log as it is: an imported log is checked for the shape of its
    events (tether.model.shapes), not for a deletion of a variable that was never set."""
    s = run(CREATED, STARTED, (ev.VAR_DELETED, {"pos": 1, "name": "vars.z", "key": "z"}))
    assert s.vars == {} and s.steps[0].status == "completed"


def test_a_step_by_position_is_one_based_and_bounded() -> None:
    steps = [
        (ev.VAR_SET, {"pos": p, "name": f"vars.{k}", "key": k, "value": p})
        for p, k in ((1, "a"), (2, "b"))
    ]
    s = run(CREATED, STARTED, *steps)
    assert [s.step(p) and s.step(p).name for p in (0, 1, 2, 3)] == [  # type: ignore[union-attr]
        None, "vars.a", "vars.b", None,
    ]  # fmt: skip


def test_where_a_run_is_in_words() -> None:
    assert run(CREATED).describe_position() == "step 1, none committed"
    assert run(CREATED).describe_position(expected=4) == "step 1 of 4, none committed"
    one = (ev.VAR_SET, {"pos": 1, "name": "vars.a", "key": "a", "value": 1})
    two = (ev.VAR_SET, {"pos": 2, "name": "vars.b", "key": "b", "value": 2})
    done = run(CREATED, STARTED, one, two, (ev.RUN_COMPLETED, {}))
    assert done.describe_position() == "completed, 2 of 2 committed"
    assert run(CREATED, STARTED, one, two).describe_position(1) == "step 3 of 3, 1–2 committed"


def test_a_budget_reached_is_recorded_and_waits_when_asked() -> None:
    limits = (ev.RUN_CREATED, {"agent": "a", "limits": {"tokens": 100}})
    over = {
        "pos": 2, "name": "ask", "limit": "tokens", "max": 100, "used": {"tokens": 120},
        "on_exceeded": "wait", "kind": "llm",
    }  # fmt: skip
    s = run(limits, STARTED, (ev.BUDGET_EXCEEDED, over))
    exceeded = {
        "limit": "tokens", "max": 100, "used": {"tokens": 120}, "on_exceeded": "wait",
        "kind": "llm", "position": 2, "at": at(3),
    }  # fmt: skip
    assert s.budget == {"limits": {"tokens": 100}, "added": {}, "exceeded": exceeded}
    assert (s.status, s.waiting) == (
        "waiting",
        {"kind": "budget", "name": "tokens", "position": 2, "since": at(3), "max": 100},
    )
    failing = run(CREATED, STARTED, (ev.BUDGET_EXCEEDED, {**over, "on_exceeded": "fail"}))
    assert failing.budget == {"added": {}, "exceeded": {**exceeded, "on_exceeded": "fail"}}
    assert (failing.status, failing.waiting) == ("running", None)


def test_a_raised_budget_adds_up_clears_the_limit_reached_and_stops_the_wait() -> None:
    over = {"pos": 2, "name": "ask", "limit": "tokens", "max": 100, "on_exceeded": "wait"}
    raise_by = (ev.BUDGET_RAISED, {"add": {"tokens": 50, "cost": 1.5}, "by": "al"})
    s = run(CREATED, STARTED, (ev.BUDGET_EXCEEDED, over), raise_by, raise_by)
    assert s.budget == {"added": {"tokens": 100, "cost": 3.0}, "exceeded": None}
    assert (s.status, s.waiting) == ("queued", None)
    wait = (ev.WAIT_STARTED, {"pos": 1, "name": "paid"})
    s = run(CREATED, STARTED, wait, raise_by)  # a raise does not end another kind of wait
    assert s.budget == {"added": {"tokens": 50, "cost": 1.5}, "exceeded": None}
    assert s.status == "waiting" and s.waiting is not None and s.waiting["kind"] == "signal"


def test_a_retried_tool_call_keeps_when_it_first_started() -> None:
    failed = {
        "pos": 1, "name": "charge", "kind": "tool", "attempt": 1, "error": {"type": "E"},
        "retry_at": 1500.0,
    }  # fmt: skip
    again = (ev.TOOL_INTENT, {**INTENT, "attempt": 2})
    s = run(CREATED, STARTED, (ev.TOOL_INTENT, INTENT), (ev.STEP_FAILED, failed), again)
    assert s.steps == (_intent_step(attempts=2, errors=({"type": "E"},), seq=5),)


def test_a_completed_step_takes_the_key_its_event_carries() -> None:
    """The effects table's dedup records a completion with its key, where the log may hold
    no intent (a restored log): the key is the event's."""
    done = {"pos": 1, "name": "charge", "kind": "tool", "output": 1, "key": "r1:1:charge:ab"}
    s = run(CREATED, STARTED, (ev.STEP_COMPLETED, done))
    assert s.steps[0].key == "r1:1:charge:ab"


def test_a_woken_timer_keeps_its_due_time() -> None:
    timer = (ev.TIMER_STARTED, {"pos": 1, "name": "cool", "until": 5000.0})
    woke = (ev.STEP_COMPLETED, {"pos": 1, "name": "cool", "kind": "sleep"})
    s = run(CREATED, STARTED, timer, woke)
    assert (s.steps[0].status, s.steps[0].due_at) == ("completed", 5000.0)


def test_a_state_s_head_has_no_steps() -> None:
    head = head_data(run(CREATED, STARTED, (ev.DECISION, {"pos": 1, "name": "d", "choice": 1})))
    assert head["steps"] is None and head["seq"] == 3 and head["usage"] == {
        "input_tokens": 0, "output_tokens": 0, "cost": 0.0, "calls": 0,
    }  # fmt: skip


def test_a_tool_call_recorded_without_its_intent_is_not_compensable() -> None:
    """A completion the effects table's dedup recorded where the log lost the intent has a
    key but no detail: its risk is unknown, so it is not undone (and nothing fails)."""
    from tether.engine.compensation import compensable

    done = {"pos": 1, "name": "charge", "kind": "tool", "output": 1, "key": "r1:1:charge:ab"}
    state = run(CREATED, STARTED, (ev.STEP_COMPLETED, done))
    assert compensable(state, lambda name, code: None) == []


def test_a_proposed_call_s_verdicts_stay_on_its_step_when_its_intent_is_written() -> None:
    proposed = {"pos": 1, "name": "charge", "kind": "tool", "digest": "d1", "input": {}}
    verdict = {"pos": 1, "name": "charge", "on": "args", "verdict": "pass", "rules": []}
    s = run(CREATED, STARTED, (ev.TOOL_PROPOSED, proposed), (ev.TOOL_VERDICT, verdict),
            (ev.TOOL_INTENT, INTENT))  # fmt: skip
    contract = {"proposed": 3, "args": {"on": "args", "verdict": "pass", "rules": []}}
    assert s.steps == (
        _intent_step(
            started_at=at(3), seq=5, detail={**_intent_step().detail, "contract": contract}
        ),
    )


REVERT_WITHOUT_INTENT = [
    (ev.TOOL_IN_DOUBT, {"key": "k2"}, {"status": "in_doubt"}),
    (ev.TOOL_RESOLVED, {"key": "k2", "happened": True, "by": "al", "result": 3},
     {"status": "completed", "output": 3, "finished_at": at(4)}),
    (ev.APPROVAL_DECIDED, {"approved": True, "by": "al"},
     {"status": "completed", "output": {"approved": True, "by": "al", "reason": None},
      "finished_at": at(4), "duration": 0.0}),
]  # fmt: skip


@pytest.mark.parametrize(("type_", "data", "fields"), REVERT_WITHOUT_INTENT)
def test_a_revert_s_event_without_its_intent_lands_at_the_reverted_position(
    type_: str, data: dict[str, Any], fields: dict[str, Any]
) -> None:
    """A log tether does not write (an import's) may hold a revert's event with no intent
    before it: its record is made fresh, at the reverted call's position, with its name and
    the event's time."""
    done = {"pos": 1, "name": "charge", "kind": "tool", "output": 1, "key": "k1"}
    event = {"pos": 1, "name": "undo charge", "kind": "revert", **data}
    s = run(CREATED, STARTED, (ev.STEP_COMPLETED, done), (type_, event))
    fresh = StepState(1, "undo charge", "revert", "running", started_at=at(4), seq=4)
    assert s.reverts == (replace(fresh, **fields),)
    assert s.revert_of(1) is s.reverts[0] and s.steps[0].status == "completed"


@pytest.mark.parametrize(("type_", "data", "fields"), REVERT_WITHOUT_INTENT)
def test_a_call_s_event_without_its_intent_makes_its_record_at_its_position(
    type_: str, data: dict[str, Any], fields: dict[str, Any]
) -> None:
    """The same for a call's own doubt, resolution or decision with nothing recorded at its
    position (an imported log's): a fresh record there, with its name, kind and time."""
    event = {"pos": 2, "name": "charge", "kind": "tool", **data}
    s = run(CREATED, STARTED, (ev.DECISION, {"pos": 1, "name": "d", "choice": 1}), (type_, event))
    fresh = StepState(2, "charge", "tool", "running", started_at=at(4), seq=4)
    assert s.steps[1] == replace(fresh, **fields) and s.reverts == ()


def test_reverts_are_kept_by_the_position_they_revert_whatever_order_they_came_in() -> None:
    done = [(ev.STEP_COMPLETED, {"pos": p, "name": f"t{p}", "kind": "tool", "output": p,
                                 "key": f"k{p}"}) for p in (1, 2, 3)]  # fmt: skip
    doubt = [(ev.TOOL_IN_DOUBT, {"pos": p, "name": f"undo t{p}", "kind": "revert", "key": f"u{p}"})
             for p in (3, 1, 2)]  # fmt: skip
    s = run(CREATED, STARTED, *done, *doubt)
    assert [(r.position, r.name, r.seq) for r in s.reverts] == [
        (1, "undo t1", 7), (2, "undo t2", 8), (3, "undo t3", 6),
    ]  # fmt: skip
    assert s.revert_of(1) is s.reverts[0] and s.revert_of(3) is s.reverts[2]


def test_no_events_fold_to_the_start_or_to_an_empty_state_of_the_given_id() -> None:
    assert fold([]) == RunState(run_id="")
    assert fold([], run_id="r9") == RunState(run_id="r9")
    start = run(CREATED, STARTED)
    assert fold([], start, run_id="other") is start
