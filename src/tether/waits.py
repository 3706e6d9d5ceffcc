"""Waiting without a process: approvals, signals and durable timers.

A run that waits appends what it waits for and becomes ``waiting``, holding no
lease and no process: the agent is unwound (``Suspended``) and ``app.run``
returns a handle with status ``waiting``. What ends the wait (a decision, a
signal, a due time) makes the run ``queued`` again, and resuming it replays up
to the waiting position, which now returns the decision, the signal's payload,
or simply goes on after the timer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import codec
from . import events as ev
from .durations import parse_duration as parse_duration  # the one grammar (re-exported)
from .errors import (
    ApprovalDenied,
    Conflict,
    DecisionRefused,
    InvalidState,
    WaitTimeout,
)
from .journal import Core, Journal, Sleep
from .state import RunState, StepState
from .store import EffectWrite, SignalTake, Transition

if TYPE_CHECKING:
    from .app import App

FINISHED = ("completed", "failed", "cancelled")


# -- inside the agent ---------------------------------------------------------


def approve_core(
    j: Journal, name: str, payload: Any, approvers: Iterable[str] | None, timeout: Any
) -> Any:
    """Request an approval, or return the decision (raising ApprovalDenied on a denial)."""
    slot = j.slot("approve", name)
    rec = slot.recorded
    if rec is not None and rec.status == "completed":
        return _decision(j.run_id, name, rec.output)
    now = j.clock.now()
    if rec is None:
        seconds = parse_duration(timeout, what=f"approval {name!r} timeout")
        timeout_at = now + seconds if seconds is not None else None
        data = {
            "pos": slot.pos,
            "name": name,
            "payload": payload,
            "approvers": sorted(approvers) if approvers else None,
            "timeout_at": timeout_at,
        }
        raise j.suspend([j.event(ev.APPROVAL_REQUESTED, data)], f"approval:{name}", timeout_at)
    if rec.due_at is not None and now >= rec.due_at:
        reason = "no decision before the timeout"
        decision = {"pos": slot.pos, "name": name, "approved": False, "by": "timeout"}
        j.append([j.event(ev.APPROVAL_DECIDED, {**decision, "reason": reason})])
        raise ApprovalDenied(j.run_id, name, "timeout", reason, timed_out=True)
    raise j.suspend([], f"approval:{name}", rec.due_at)


def _decision(run_id: str, name: str, decision: Mapping[str, Any]) -> Any:
    if not decision.get("approved"):
        raise ApprovalDenied(
            run_id,
            name,
            decision.get("by"),
            decision.get("reason"),
            timed_out=decision.get("by") == "timeout",
        )
    return dict(decision)


def sleep_core(j: Journal, name: str, duration: Any, inline_max: float) -> Core:
    """A durable sleep: the wake time is in the log, so a restart sleeps only what is left.

    Sleeps up to ``inline_max`` seconds happen in the process; longer ones make
    the run wait (no lease) until a worker or ``tether resume`` wakes it.
    """
    slot = j.slot("sleep", name)
    rec = slot.recorded
    if rec is not None and rec.status == "completed":
        return None
    now = j.clock.now()
    if rec is None:
        seconds = parse_duration(duration, what=f"sleep {name!r}") or 0.0
        until = now + seconds
        suspend = seconds > inline_max
        event = j.event(
            ev.TIMER_STARTED, {"pos": slot.pos, "name": name, "until": until, "suspend": suspend}
        )
        if suspend:
            raise j.suspend([event], "timer", until)
        j.append([event])
    else:
        until = rec.due_at if rec.due_at is not None else now
    if until > now:
        yield Sleep(until - now)
    j.record_success(slot, 1, None, None, max(0.0, until - now))
    return None


def wait_core(j: Journal, name: str, timeout: Any) -> Any:
    """Wait for signal ``name``: take a pending one, or make the run wait for it."""
    slot = j.slot("wait", name)
    rec = slot.recorded
    if rec is not None and rec.status == "completed":
        return _waited(j.run_id, name, rec.output)
    signal = j.store.pending_signal(j.run_id, name)
    now = j.clock.now()
    if signal is not None:
        output = {
            "payload": codec.decode(signal.payload),
            "signal": signal.id,
            "sent_at": signal.sent_at,
            "sender": signal.sender,
        }
        taken = SignalTake(signal.id, j.seq_after(1))  # the seq of the completion below
        j.record_success(slot, 1, None, output, 0.0, writes=[taken])
        return output["payload"]
    if rec is None:
        seconds = parse_duration(timeout, what=f"wait {name!r} timeout")
        timeout_at = now + seconds if seconds is not None else None
        event = j.event(ev.WAIT_STARTED, {"pos": slot.pos, "name": name, "timeout_at": timeout_at})
        raise j.suspend([event], f"signal:{name}", timeout_at)
    if rec.due_at is not None and now >= rec.due_at:
        j.record_success(slot, 1, None, {"timed_out": True}, now - (rec.started_at or now))
        raise WaitTimeout(f"run {j.run_id}: no signal {name!r} came before the timeout")
    raise j.suspend([], f"signal:{name}", rec.due_at)


def _waited(run_id: str, name: str, output: Mapping[str, Any]) -> Any:
    if output.get("timed_out"):
        raise WaitTimeout(f"run {run_id}: no signal {name!r} came before the timeout")
    return output.get("payload")


# -- from outside: decisions and signals --------------------------------------


def decide(
    app: App, run_id: str, name: str, *, approved: bool, by: str, reason: str | None
) -> None:
    """Record an approval decision and make the run resumable, or refuse (and audit) it."""
    if not by:
        raise ValueError("an approval decision needs who took it: by='alice'")
    state = app.load(run_id)
    step = _approval_step(state, name)
    why = _refusal(app, state, step, name, by)
    if why is not None:
        _refuse(app, run_id, "approval.refused", why, name=name, by=by, approved=approved)
    assert step is not None
    data = {"pos": step.position, "name": name, "approved": approved, "by": by, "reason": reason}
    try:
        append_outside(app, state, ev.APPROVAL_DECIDED, data)
    except Conflict:
        _refuse(
            app,
            run_id,
            "approval.refused",
            f"approval {name!r} was decided at the same moment by someone else",
            name=name,
            by=by,
            approved=approved,
        )


def _approval_step(state: RunState, name: str) -> StepState | None:
    steps = [s for s in state.steps if s.kind == "approve" and s.name == name]
    return steps[-1] if steps else None


def _refusal(app: App, state: RunState, step: StepState | None, name: str, by: str) -> str | None:
    if step is None:
        return f"run {state.run_id} has no approval {name!r} (it is {state.status})"
    if step.status == "completed":
        d = step.output or {}
        verdict = "approved" if d.get("approved") else "denied"
        return f"approval {name!r} was already {verdict} by {d.get('by')}"
    w = state.waiting or {}
    if state.status != "waiting" or w.get("kind") != "approval" or w.get("name") != name:
        return f"run {state.run_id} is {state.status}, not waiting for approval {name!r}"
    approvers = (step.detail or {}).get("approvers")
    if approvers and not app.may_approve(by, approvers):
        return f"{by!r} is not among the approvers of {name!r} ({', '.join(approvers)})"
    return None


def _refuse(app: App, run_id: str, action: str, why: str, **detail: Any) -> None:
    app.store.record_audit(
        run_id,
        action,
        codec.encode({**detail, "why": why}),
        actor=detail.get("by"),
        now=app.clock.now(),
    )
    raise DecisionRefused(f"{why}. The refusal is recorded in the run's audit log.")


def append_outside(
    app: App,
    state: RunState,
    type_: str,
    data: dict[str, Any],
    writes: Sequence[EffectWrite] = (),
) -> None:
    """Append to a run no process executes, from outside: claim its lease, append, make it
    queued (and wake its queue's workers). For a waiting run's decision, and a retry put back
    in its queue (``App.retry_run(in_queue=True)``)."""
    now = app.clock.now()
    lease = app.store.claim(state.run_id, owner=app.owner, ttl=app.lease_ttl, now=now)
    event = ev.new(type_, data, now, data.get("by") or app.owner)
    try:
        app.store.append(
            state.run_id,
            [event],
            expected_seq=state.seq,
            epoch=lease.epoch,
            transition=Transition("queued", release=True, available_at=now),
            writes=writes,
            now=now,
        )
    except BaseException:
        app.let_go(state.run_id, lease.epoch)  # a worker need not wait for its expiry
        raise
    queue = app.store.get_run(state.run_id).queue
    if queue:
        app.store.notify_work(queue)  # the run is queued again: a worker resumes it now


def resolve(app: App, run_id: str, *, happened: bool, by: str, result: Any = None) -> None:
    """Settle a tool call in doubt: it happened (with ``result``) or it did not (retry)."""
    if not by:
        raise ValueError("resolving an effect in doubt needs who settled it: by='alice'")
    state = app.load(run_id)
    w = state.waiting or {}
    if state.status != "waiting" or w.get("kind") != "doubt":
        _refuse(
            app,
            run_id,
            "doubt.refused",
            f"run {run_id} is {state.status}, not waiting for a tool call in doubt",
            by=by,
            happened=happened,
        )
    data = {
        "pos": w["position"],
        "name": w["name"],
        "key": w["key"],
        "happened": happened,
        "result": result if happened else None,
        "by": by,
    }
    writes = (
        [
            EffectWrite(
                w["key"],
                run_id,
                w["position"],
                w["name"],
                "completed",
                codec.encode(result, what="the effect's result"),
            )
        ]
        if happened
        else []
    )
    try:
        append_outside(app, state, ev.TOOL_RESOLVED, data, writes)
    except Conflict:
        _refuse(
            app,
            run_id,
            "doubt.refused",
            "the doubt was settled at the same moment by someone else",
            by=by,
            happened=happened,
        )


def signal(app: App, run_id: str, name: str, payload: Any, *, sender: str | None) -> bool:
    """Send signal ``name`` to a run; kept until a wait takes it. Returns whether it woke it."""
    record = app.store.get_run(run_id)
    if record.status in FINISHED:
        raise InvalidState(
            f"run {run_id} is {record.status}: a signal {name!r} would never be read. "
            f"Signal a run that is queued, running or waiting."
        )
    text = codec.encode(payload, what=f"signal {name!r} payload")
    woke = app.store.send_signal(run_id, name, text, sender=sender, now=app.clock.now())
    if woke and record.queue:
        app.store.notify_work(record.queue)  # a worker of its queue resumes it now
    return woke


def resumable(app: App, state: RunState) -> str | None:
    """Why a waiting run cannot be resumed yet (None: it can)."""
    w = state.waiting
    if state.status != "waiting" or not w:
        return None
    due = w.get("until")
    if due is not None and app.clock.now() >= due:
        return None
    kind, name = w.get("kind"), w.get("name")
    if kind == "timer":
        return None  # resuming sleeps what is left
    if kind == "signal" and app.store.pending_signal(state.run_id, str(name)) is not None:
        return None
    hints = {
        "approval": f"it waits for approval {name!r}: `tether approve {state.run_id} {name} "
        f"--by NAME` (or deny)",
        "signal": f"it waits for signal {name!r}: `tether signal {state.run_id} {name} PAYLOAD`",
        "doubt": f"tool {name!r} may or may not have run before a crash: `tether resolve "
        f"{state.run_id} --happened|--not-happened --by NAME`",
    }
    return f"run {state.run_id} cannot resume yet: " + hints.get(str(kind), f"it waits ({kind})")
