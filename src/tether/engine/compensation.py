"""Compensation (sagas): undo what a failed or cancelled run already did.

When a run fails, or is cancelled with ``compensate=True``, the ``compensate``
functions of its completed write tools run in reverse order of their positions,
each as a journaled step (kind ``compensate``, name ``undo:<tool>``) with its
own idempotency key and a durable intent, after a ``run.compensating`` event
that fixes where their positions start. A compensating run killed midway
resumes the compensation (not the agent): compensations already completed are
not run again.

An undo function is called as ``undo(result, *args, **kwargs)``: the tool's
recorded result, then the arguments of the original call (and
``idempotency_key=`` when it declares that parameter).

A run undoes only the calls it made itself. A fork's copied calls belong to the
run that made them (their idempotency key names it): undoing them would undo its
parent's work. Each undo marks the effects-table row of the call it undoes,
``compensating`` with its intent and ``compensated`` with its completion, so that
no fork reuses an effect that no longer holds (:func:`tether.engine.effects.undone`).
A call reverted on its own (:mod:`tether.engine.revert`, which calls the same
:func:`undo_core`) is left to that revert.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tether.engine.calls import Call, Core, Slot, step_key
from tether.engine.effects import ToolDef, owns
from tether.engine.journal import Journal
from tether.engine.retry import Retry
from tether.engine.steps import attempts
from tether.model import codec
from tether.model import events as ev
from tether.model.secrets import reveal_all
from tether.model.state import RunState
from tether.model.status import EffectStatus, StepStatus
from tether.model.steps import StepState
from tether.store import EffectWrite

FindTool = Callable[[str, Mapping[str, Any]], ToolDef | None]


def compensable(state: RunState, find_tool: FindTool) -> list[StepState]:
    """The completed write-tool steps the run made itself that have a compensation, newest
    first (a fork's copied calls are its parent's to undo)."""
    out = []
    for s in reversed(state.steps):
        if s.kind != "tool" or s.status != StepStatus.COMPLETED or not s.key or not s.detail:
            continue
        if not owns(state.run_id, s.key) or reverted(state, s.position):
            continue
        code = s.detail.get("code") or {}
        if s.detail.get("risk") in (None, "read") or code.get("undo") is False:
            continue  # (a call recorded before "undo" was: its tool is looked up)
        tool = find_tool(s.name, code)
        if tool is not None and tool.compensate is not None:
            out.append(s)
    return out


def reverted(state: RunState, position: int) -> bool:
    """Whether a revert of the call at ``position`` (tether.engine.revert) undid it or is
    undoing it: a compensation leaves it to that revert (``tether revert`` finishes a
    pending one). A revert whose undo failed (its word that nothing was undone) does not."""
    r = state.revert_of(position)
    return r is not None and r.status != StepStatus.FAILED


def start(j: Journal, state: RunState, reason: str, error: Mapping[str, Any] | None) -> None:
    """Append ``run.compensating``: undo steps take positions after every recorded one."""
    data = {"reason": reason, "error": error, "from_position": len(state.steps) + 1}
    j.append([j.event(ev.RUN_COMPENSATING, data)])


def compensation_core(
    j: Journal, state: RunState, find_tool: FindTool, default_retry: Retry
) -> Core:
    """Run every pending compensation in reverse order; return the ones that failed."""
    assert state.compensating is not None
    j.pos = int(state.compensating["from_position"]) - 1
    j.recorded = state.steps
    failures: list[dict[str, Any]] = []
    for target in compensable(state, find_tool):
        tool = find_tool(target.name, (target.detail or {}).get("code") or {})
        assert tool is not None and tool.compensate is not None
        try:
            yield from _undo(j, target, tool, default_retry)
        except Exception as exc:  # recorded as the step's failure; the others still run
            failures.append(
                {
                    "position": target.position,
                    "tool": target.name,
                    "type": type(exc).__name__,
                    "message": str(exc),
                }
            )
    return failures


def _undo(j: Journal, target: StepState, tool: ToolDef, default_retry: Retry) -> Core:
    name = f"undo:{tool.name}"
    digest = undo_digest(target)
    slot = j.slot("compensate", name, digest)
    if slot.done:
        if j.trace is not None:  # a zero-length span marked replayed
            j.trace.gate(slot, lambda: None)
        return None
    yield from undo_core(j, slot, digest, target, tool, default_retry)
    return None


def undo_digest(target: StepState) -> str:
    """The args digest of the undo of ``target`` (its position and key): with the undo's
    position, it makes the undo's own idempotency key."""
    return codec.digest({"of": target.position, "key": target.key})


def undo_core(
    j: Journal,
    slot: Slot,
    digest: str,
    target: StepState,
    tool: ToolDef,
    default_retry: Retry,
    more: Mapping[str, Any] | None = None,
) -> Core:
    """Call ``tool``'s undo of the call ``target`` at ``slot`` (a compensation's position,
    or a revert's record): a durable intent first (``more``: extra fields of its event),
    its own key, the undone call's effects-table row marked with it; retried by the
    tool's policy. Returns the undo's result."""
    key = step_key(j.run_id, slot.pos, slot.name, digest)
    inputs = (target.detail or {}).get("input") or {"args": [], "kwargs": {}}
    kwargs = dict(inputs.get("kwargs") or {})
    if tool.undo_takes_key:
        kwargs["idempotency_key"] = key
    assert tool.compensate is not None
    # the recorded arguments: a Secret.env is revealed here; a literal Secret was stored as
    # its marker only, and its reveal fails this undo with an error saying so
    args = reveal_all([target.output, *inputs.get("args", [])])
    call = Call(tool.compensate, args, reveal_all(kwargs), None)
    effect = EffectWrite(key, j.run_id, slot.pos, slot.name, EffectStatus.INTENT)

    def intent(attempt: int) -> None:
        data = {
            "pos": slot.pos,
            "name": slot.name,
            "kind": slot.kind,
            "key": key,
            "attempt": attempt,
            "digest": digest,
            "risk": tool.risk,
            "of": target.position,
            "input": None,
            "code": tool.code,
            **(more or {}),
        }
        undone = mark(j.run_id, target, tool, EffectStatus.COMPENSATING)
        j.append([j.event(ev.TOOL_INTENT, data)], writes=[effect, undone])

    policy = tool.retry or default_retry
    done = [mark(j.run_id, target, tool, EffectStatus.COMPENSATED)]
    core = attempts(j, slot, call, policy, digest, key, intent, effect, also=done)
    if j.trace is not None:  # its content (opted in) as recorded: never a revealed Secret
        core = j.trace.call(slot, core, [target.output, *inputs.get("args", [])], kwargs)
    return (yield from core)


def mark(run_id: str, target: StepState, tool: ToolDef, status: str) -> EffectWrite:
    """The effects-table row of run ``run_id``'s call ``target``, saying ``status``
    (``compensating`` with an undo's intent, ``compensated`` with its end), so that no fork
    reuses an effect that no longer holds."""
    assert target.key is not None  # only keyed calls are undone
    result = codec.encode(target.output, what="tool result")
    return EffectWrite(target.key, run_id, target.position, tool.name, status, result)
