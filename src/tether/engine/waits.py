"""Waiting without a process: approvals, signals and durable timers.

A run that waits appends what it waits for and becomes ``waiting``, holding no
lease and no process: the agent is unwound (``Suspended``) and ``app.run``
returns a handle with status ``waiting``. What ends the wait (a decision, a
signal, a due time) makes the run ``queued`` again, and resuming it replays up
to the waiting position, which now returns the decision, the signal's payload,
or simply goes on after the timer.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tether.engine.calls import Core, Sleep, Slot
from tether.engine.journal import Journal
from tether.errors import ApprovalDenied, Conflict, DecisionRefused, InvalidState, WaitTimeout
from tether.model import codec
from tether.model import events as ev
from tether.model.durations import parse_duration as parse_duration
from tether.model.state import FINISHED, RunState, StepState
from tether.store import EffectWrite, SignalTake, Transition

if TYPE_CHECKING:
    from tether.app import App


# -- inside the agent ---------------------------------------------------------


def approve_core(
    j: Journal,
    name: str,
    payload: Any,
    approvers: Iterable[str] | None,
    timeout: Any,
    groups: Collection[str] = (),
) -> Any:
    """Request an approval, or return the decision (raising ApprovalDenied on a denial).

    ``groups`` are the app's approver group names: the request records which of its
    approvers are groups, so that no process deciding it later (a CLI without the app)
    takes a group's name for a person's."""
    slot = j.slot("approve", name)
    rec = slot.recorded
    if rec is not None and rec.status == "completed":
        return _decision(j.run_id, name, rec.output)
    now = j.clock.now()
    if rec is None:
        seconds = parse_duration(timeout, what=f"approval {name!r} timeout")
        timeout_at = now + seconds if seconds is not None else None
        names = _approver_names(j.run_id, name, approvers)
        data = {
            "pos": slot.pos,
            "name": name,
            "payload": payload,
            "approvers": names,
            "timeout_at": timeout_at,
        }
        if names and any(a in groups for a in names):
            data["groups"] = [a for a in names if a in groups]
        raise j.suspend([j.event(ev.APPROVAL_REQUESTED, data)], f"approval:{name}", timeout_at)
    if rec.due_at is not None and now >= rec.due_at:
        reason = "no decision before the timeout"
        decision = {"pos": slot.pos, "name": name, "approved": False, "by": "timeout"}
        j.append([j.event(ev.APPROVAL_DECIDED, {**decision, "reason": reason})])
        raise ApprovalDenied(j.run_id, name, "timeout", reason, timed_out=True)
    raise j.suspend([], f"approval:{name}", rec.due_at)


def _approver_names(run_id: str, name: str, approvers: Iterable[str] | None) -> list[str] | None:
    if approvers is None:
        return None
    if isinstance(approvers, str) or not all(isinstance(a, str) and a for a in approvers):
        raise TypeError(
            f"run {run_id}: approval {name!r}: approvers is a list of identities or group "
            f"names, e.g. approvers=['alice', 'ops'], not {approvers!r}"
        )
    return sorted(set(approvers)) or None


def approver_groups(groups: Mapping[str, Iterable[str]] | None) -> dict[str, set[str]]:
    """Validate ``App(approver_groups=...)``: group name -> member identities. Groups do
    not nest, and a group's name is never an identity (nobody decides "as" a group)."""
    out: dict[str, set[str]] = {}
    for group, members in (groups or {}).items():
        if not isinstance(group, str) or not group or isinstance(members, str):
            raise TypeError(
                f"approver_groups maps a group name to its members' identities, e.g. "
                f"{{'ops': ['alice', 'bob']}}; got {group!r}: {members!r}"
            )
        out[group] = set(members)
    for group, members in out.items():
        nested = sorted(members & out.keys())
        if nested:
            raise ValueError(
                f"approver_groups: group {group!r} lists {', '.join(nested)}, which is a group "
                f"too; groups do not nest: list the member identities"
            )
    return out


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
    the run wait (no lease) until a worker or ``tether resume`` wakes it. The position
    is taken now, in the order of the calls; the core returned sleeps.
    """
    return _sleep(j, j.slot("sleep", name), duration, inline_max)


def _sleep(j: Journal, slot: Slot, duration: Any, inline_max: float) -> Core:
    name = slot.name
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
        with j.lock:  # no other branch's append between the seq and the completion
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
    return _not_approver(app, step, name, by)


def _not_approver(app: App, step: StepState, name: str, by: str) -> str | None:
    """Why ``by`` may not decide approval ``name``: a group's name is nobody's identity;
    a request's approvers are identities, and groups that resolve to their members."""
    detail = step.detail or {}
    approvers: list[str] = detail.get("approvers") or []
    recorded = set(detail.get("groups") or ())
    if by in app.approver_groups or by in recorded:
        members = ", ".join(sorted(app.approver_groups.get(by, ()))) or "unknown to this app"
        return (
            f"{by!r} is a group, not a person: decide as one of its members ({members}), "
            f"with --by NAME"
        )
    if not approvers or app.may_approve(by, approvers, groups=recorded):
        return None
    unknown = sorted(recorded - app.approver_groups.keys())
    hint = ""
    if unknown:
        hint = (
            f"; group {', '.join(unknown)} is not defined in this app (approver_groups): "
            f"decide through the app that defines it (--app)"
        )
    return f"{by!r} is not among the approvers of {name!r} ({', '.join(approvers)}){hint}"


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


class _NoResult:
    """``result`` left out of a resolve (``None`` is a result: the JSON null)."""

    def __repr__(self) -> str:
        return "NO_RESULT"


NO_RESULT: Any = _NoResult()


def resolve(app: App, run_id: str, *, happened: bool, by: str, result: Any = NO_RESULT) -> None:
    """Settle a tool call in doubt: it happened (with ``result``) or it did not (retry).

    ``happened=True`` without ``result`` is refused unless the tool is known to return
    nothing (registered on this app, annotated ``-> None``): the run would go on with
    None where the agent expects the call's result. Pass ``result=None`` to say so."""
    if not by:
        raise ValueError("resolving an effect in doubt needs who settled it: by='alice'")
    if not happened and result is not NO_RESULT:
        raise ValueError(
            f"run {run_id}: a call that did not happen has no result; leave result out "
            f"(it is called again with the same key)"
        )
    state = app.load(run_id)
    w = state.waiting or {}
    why = _unresolvable(app, state, w, by, happened, result)
    if why is not None:
        _refuse(app, run_id, "doubt.refused", why, by=by, happened=happened)
    value = None if result is NO_RESULT else result
    data = {
        "pos": w["position"],
        "name": w["name"],
        "key": w["key"],
        "happened": happened,
        "result": value if happened else None,
        "by": by,
    }
    writes = []
    if happened:
        text = codec.encode(value, what="the effect's result")
        writes = [EffectWrite(w["key"], run_id, w["position"], w["name"], "completed", text)]
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


def _unresolvable(
    app: App, state: RunState, w: Mapping[str, Any], by: str, happened: bool, result: Any
) -> str | None:
    """Why this resolve cannot be taken (None: it can)."""
    if state.status != "waiting" or w.get("kind") != "doubt":
        return f"run {state.run_id} is {state.status}, not waiting for a tool call in doubt"
    if by in app.approver_groups:
        return f"{by!r} is a group, not a person: settle it as one of its members"
    if happened and result is NO_RESULT and not _returns_nothing(app, str(w["name"])):
        return (
            f"run {state.run_id}: tool {w['name']!r} (position {w['position']}) returns a "
            f"value, or may: saying the call happened needs the result it returned, which "
            f"the run goes on with: `tether resolve {state.run_id} --happened --result JSON "
            f"--by NAME` (app.resolve(..., result=...)); --result null if it returned nothing"
        )
    return None


def _returns_nothing(app: App, tool_name: str) -> bool:
    """Whether the tool is registered here and annotated ``-> None``."""
    tool = app.tools().get(tool_name)
    if tool is None:
        return False
    try:
        returns = inspect.signature(tool.fn).return_annotation
    except (TypeError, ValueError):
        return False
    return returns is None or returns is type(None) or returns == "None"


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
        "doubt": f"tool {name!r} may or may not have run before a "
        f"{'timeout' if w.get('reason') == 'timeout' else 'crash'}: `tether resolve "
        f"{state.run_id} --happened|--not-happened --by NAME`",
    }
    return f"run {state.run_id} cannot resume yet: " + hints.get(str(kind), f"it waits ({kind})")
