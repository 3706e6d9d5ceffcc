"""Gates inside the agent: approvals, durable sleeps and waits for signals.

A run that waits appends what it waits for and becomes ``waiting``, holding no
lease and no process: the agent is unwound (``Suspended``) and ``app.run``
returns a handle with status ``waiting``. What ends the wait (a decision, a
signal, a due time: see :mod:`tether.services.control`) makes the run ``queued``
again, and resuming it replays up to the waiting position, which now returns the
decision, the signal's payload, or simply goes on after the timer.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from tether.engine import children
from tether.engine.calls import Core, Sleep, Slot
from tether.engine.journal import Journal
from tether.errors import ApprovalDenied, WaitTimeout
from tether.model import codec
from tether.model import events as ev
from tether.model.clock import Clock
from tether.model.durations import parse_duration
from tether.model.state import RunState
from tether.model.status import FINISHED, RunStatus, StepStatus
from tether.store import SignalTake, Store


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
    if j.trace is not None:
        return j.trace.gate(slot, lambda: _approve(j, slot, payload, approvers, timeout, groups))
    return _approve(j, slot, payload, approvers, timeout, groups)


def _approve(
    j: Journal,
    slot: Slot,
    payload: Any,
    approvers: Iterable[str] | None,
    timeout: Any,
    groups: Collection[str],
) -> Any:
    name = slot.name
    rec = slot.recorded
    if rec is not None and rec.status == StepStatus.COMPLETED:
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
    slot = j.slot("sleep", name)
    core = _sleep(j, slot, duration, inline_max)
    return core if j.trace is None else j.trace.call(slot, core, (duration,), {})


def _sleep(j: Journal, slot: Slot, duration: Any, inline_max: float) -> Core:
    name = slot.name
    rec = slot.recorded
    if rec is not None and rec.status == StepStatus.COMPLETED:
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
    if j.trace is not None:
        return j.trace.gate(slot, lambda: _wait(j, slot, timeout))
    return _wait(j, slot, timeout)


def _wait(j: Journal, slot: Slot, timeout: Any) -> Any:
    name = slot.name
    rec = slot.recorded
    if rec is not None and rec.status == StepStatus.COMPLETED:
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


def may_approve(
    groups: Mapping[str, Collection[str]],
    by: str,
    approvers: Iterable[str],
    *,
    recorded: Iterable[str] = (),
) -> bool:
    """Whether identity ``by`` is one of ``approvers`` or a member of one of their groups.

    A name in ``groups`` (the app's approver groups) or in ``recorded`` (the ones the
    request recorded as groups) is a group: never an identity, so ``by`` equal to it does
    not count."""
    named = set(recorded) | groups.keys()
    if by in named:
        return False
    return any(by in groups.get(a, ()) if a in named else by == a for a in approvers)


def resumable(store: Store, clock: Clock, state: RunState) -> str | None:
    """Why a waiting run cannot be resumed yet (None: it can)."""
    w = state.waiting
    if state.status != RunStatus.WAITING or not w:
        return None
    due = w.get("until")
    if due is not None and clock.now() >= due:
        return None
    kind, name = w.get("kind"), w.get("name")
    if kind == "timer":
        return None  # resuming sleeps what is left
    if kind == "signal" and store.pending_signal(state.run_id, str(name)) is not None:
        return None
    if kind == "children" and w.get("inline"):
        return None  # a resume executes the inline child when it is free (engine.inline)
    if kind == "children":
        kids = w.get("children") or ()
        if all(store.get_run(str(c)).status in FINISHED for c in kids):
            return None
        return f"run {state.run_id} cannot resume yet: " + children.waiting_hint(state, w)
    hints = {
        "approval": f"it waits for approval {name!r}: `tether approve {state.run_id} {name} "
        f"--by NAME` (or deny)",
        "signal": f"it waits for signal {name!r}: `tether signal {state.run_id} {name} PAYLOAD`",
        "doubt": f"tool {name!r} may or may not have run before a "
        f"{'timeout' if w.get('reason') == 'timeout' else 'crash'}: `tether resolve "
        f"{state.run_id} --happened|--not-happened --by NAME`",
        "budget": f"it reached its {name} limit: `tether budget {state.run_id} --add "
        f"{name}=N --by NAME` raises it",
    }
    return f"run {state.run_id} cannot resume yet: " + hints.get(str(kind), f"it waits ({kind})")
