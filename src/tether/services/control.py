"""Control from outside a run: approve, deny, resolve, signal, cancel and retry.

A waiting run holds no lease and no process: a decision, a settled doubt or a signal is
appended from here (:meth:`Control.append_outside`: claim, append, queued again, the
queue's workers woken), and the run goes on when it is resumed. A cancel stops a run
here (compensating first when asked), or asks the process that executes it to stop at
its next step. Refused decisions are recorded in the run's audit log.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from tether.engine import children, compensation, gates
from tether.engine.calls import Cancelling
from tether.engine.deps import Deps
from tether.engine.executor import CANCEL_REQUESTED, Executor, RunHandle
from tether.engine.journal import Journal
from tether.engine.leases import Leases
from tether.engine.registry import Registry
from tether.engine.states import States
from tether.errors import Conflict, DecisionRefused, InvalidInput, InvalidState, NotFound
from tether.model import codec, inputs
from tether.model import events as ev
from tether.model.state import RunState
from tether.model.status import FINISHED, EffectStatus, RunStatus, StepStatus
from tether.model.steps import StepState
from tether.store import EffectWrite, Transition


class _NoResult:
    """``result`` left out of a resolve (``None`` is a result: the JSON null)."""

    def __repr__(self) -> str:
        return "NO_RESULT"


NO_RESULT: Any = _NoResult()


class Control:
    """The operations on a run from outside it, given what they need (never the App)."""

    def __init__(
        self,
        deps: Deps,
        states: States,
        leases: Leases,
        registry: Registry,
        executor: Executor,
        groups: Mapping[str, set[str]],
    ) -> None:
        self.deps = deps
        self.states = states
        self.leases = leases
        self.registry = registry
        self.executor = executor
        self.groups = groups  # approver groups: name -> member identities

    def approve(
        self, run_id: str, name: str, *, approved: bool, by: str, reason: str | None
    ) -> None:
        """Approve (or deny: ``approved=False``) a waiting run's request ``name``, after
        checking the arguments (see :meth:`decide`)."""
        inputs.lookup_id(run_id)
        inputs.name(name, "the approval's name")
        inputs.name(by, "by")
        inputs.text(reason, "reason")
        self.decide(run_id, name, approved=approved, by=by, reason=reason)

    def settle(self, run_id: str, *, happened: bool, by: str, result: Any = NO_RESULT) -> None:
        """:meth:`resolve`, after checking the arguments."""
        inputs.lookup_id(run_id)
        if not isinstance(happened, bool):
            raise InvalidInput(f"happened is True or False, not {inputs.show(happened)}")
        inputs.name(by, "by")
        self.resolve(run_id, happened=happened, by=by, result=result)

    def send(self, run_id: str, name: str, payload: Any, *, sender: str | None) -> bool:
        """:meth:`signal`, after checking the arguments."""
        inputs.lookup_id(run_id)
        inputs.name(name, "the signal's name")
        inputs.optional_name(sender, "sender")
        return self.signal(run_id, name, payload, sender=sender)

    def decide(
        self, run_id: str, name: str, *, approved: bool, by: str, reason: str | None
    ) -> None:
        """Record an approval decision and make the run resumable, or refuse (and audit) it."""
        if not by:
            raise ValueError("an approval decision needs who took it: by='alice'")
        state = self.states.load(run_id)
        step = _approval_step(state, name)
        why = self._refusal(state, step, name, by)
        if why is not None:
            self._refuse(run_id, "approval.refused", why, name=name, by=by, approved=approved)
        assert step is not None
        data = {
            "pos": step.position,
            "name": name,
            "approved": approved,
            "by": by,
            "reason": reason,
        }
        try:
            self.append_outside(state, ev.APPROVAL_DECIDED, data)
        except Conflict:
            self._refuse(
                run_id,
                "approval.refused",
                f"approval {name!r} was decided at the same moment by someone else",
                name=name,
                by=by,
                approved=approved,
            )

    def _refusal(self, state: RunState, step: StepState | None, name: str, by: str) -> str | None:
        if step is None:
            return f"run {state.run_id} has no approval {name!r} (it is {state.status})"
        if step.status == StepStatus.COMPLETED:
            d = step.output or {}
            verdict = "approved" if d.get("approved") else "denied"
            return f"approval {name!r} was already {verdict} by {d.get('by')}"
        w = state.waiting or {}
        if (
            state.status != RunStatus.WAITING
            or w.get("kind") != "approval"
            or w.get("name") != name
        ):
            return f"run {state.run_id} is {state.status}, not waiting for approval {name!r}"
        return self._not_approver(step, name, by)

    def _not_approver(self, step: StepState, name: str, by: str) -> str | None:
        """Why ``by`` may not decide approval ``name``: a group's name is nobody's identity;
        a request's approvers are identities, and groups that resolve to their members."""
        detail = step.detail or {}
        approvers: list[str] = detail.get("approvers") or []
        recorded = set(detail.get("groups") or ())
        if by in self.groups or by in recorded:
            members = ", ".join(sorted(self.groups.get(by, ()))) or "unknown to this app"
            return (
                f"{by!r} is a group, not a person: decide as one of its members ({members}), "
                f"with --by NAME"
            )
        if not approvers or gates.may_approve(self.groups, by, approvers, recorded=recorded):
            return None
        unknown = sorted(recorded - self.groups.keys())
        hint = ""
        if unknown:
            hint = (
                f"; group {', '.join(unknown)} is not defined in this app (approver_groups): "
                f"decide through the app that defines it (--app)"
            )
        return f"{by!r} is not among the approvers of {name!r} ({', '.join(approvers)}){hint}"

    def _refuse(self, run_id: str, action: str, why: str, **detail: Any) -> None:
        self.deps.store.record_audit(
            run_id,
            action,
            codec.encode({**detail, "why": why}),
            actor=detail.get("by"),
            now=self.deps.clock.now(),
        )
        raise DecisionRefused(f"{why}. The refusal is recorded in the run's audit log.")

    def append_outside(
        self,
        state: RunState,
        type_: str,
        data: dict[str, Any],
        writes: Sequence[EffectWrite] = (),
    ) -> None:
        """Append to a run no process executes, from outside: claim its lease, append, make it
        queued (and wake its queue's workers). For a waiting run's decision, and a retry put back
        in its queue (``App.retry_run(in_queue=True)``)."""
        now = self.deps.clock.now()
        lease = self.deps.store.claim(
            state.run_id, owner=self.deps.owner, ttl=self.deps.lease_ttl, now=now
        )
        event = ev.new(type_, data, now, data.get("by") or self.deps.owner)
        try:
            self.deps.store.append(
                state.run_id,
                [event],
                expected_seq=state.seq,
                epoch=lease.epoch,
                transition=Transition(RunStatus.QUEUED, release=True, available_at=now),
                writes=writes,
                now=now,
            )
        except BaseException:
            self.leases.let_go(state.run_id, lease.epoch)  # a worker need not wait for its expiry
            raise
        queue = self.deps.store.get_run(state.run_id).queue
        if queue:
            self.deps.store.notify_work(queue)  # the run is queued again: a worker resumes it now

    def resolve(self, run_id: str, *, happened: bool, by: str, result: Any = NO_RESULT) -> None:
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
        state = self.states.load(run_id)
        w = state.waiting or {}
        why = self._unresolvable(state, w, by, happened, result)
        if why is not None:
            self._refuse(run_id, "doubt.refused", why, by=by, happened=happened)
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
            writes = [
                EffectWrite(
                    w["key"], run_id, w["position"], w["name"], EffectStatus.COMPLETED, text
                )
            ]
        try:
            self.append_outside(state, ev.TOOL_RESOLVED, data, writes)
        except Conflict:
            self._refuse(
                run_id,
                "doubt.refused",
                "the doubt was settled at the same moment by someone else",
                by=by,
                happened=happened,
            )

    def _unresolvable(
        self, state: RunState, w: Mapping[str, Any], by: str, happened: bool, result: Any
    ) -> str | None:
        """Why this resolve cannot be taken (None: it can)."""
        if state.status != RunStatus.WAITING or w.get("kind") != "doubt":
            return f"run {state.run_id} is {state.status}, not waiting for a tool call in doubt"
        if by in self.groups:
            return f"{by!r} is a group, not a person: settle it as one of its members"
        if happened and result is NO_RESULT and not self._returns_nothing(str(w["name"])):
            return (
                f"run {state.run_id}: tool {w['name']!r} (position {w['position']}) returns a "
                f"value, or may: saying the call happened needs the result it returned, which "
                f"the run goes on with: `tether resolve {state.run_id} --happened --result JSON "
                f"--by NAME` (app.resolve(..., result=...)); --result null if it returned nothing"
            )
        return None

    def _returns_nothing(self, tool_name: str) -> bool:
        """Whether the tool is registered here and annotated ``-> None``."""
        tool = self.registry.tools.get(tool_name)
        if tool is None:
            return False
        try:
            returns = inspect.signature(tool.fn).return_annotation
        except (TypeError, ValueError):
            return False
        return returns is None or returns is type(None) or returns == "None"

    def signal(self, run_id: str, name: str, payload: Any, *, sender: str | None) -> bool:
        """Send signal ``name`` to a run; kept until a wait takes it. Returns whether it woke it."""
        record = self.deps.store.get_run(run_id)
        if record.status in FINISHED:
            raise InvalidState(
                f"run {run_id} is {record.status}: a signal {name!r} would never be read. "
                f"Signal a run that is queued, running or waiting."
            )
        text = codec.encode(payload, what=f"signal {name!r} payload")
        woke = self.deps.store.send_signal(
            run_id, name, text, sender=sender, now=self.deps.clock.now()
        )
        if woke and record.queue:
            self.deps.store.notify_work(record.queue)  # a worker of its queue resumes it now
        return woke

    def cancel(
        self, run_id: str, *, compensate: bool, by: str | None, reason: str | None
    ) -> RunHandle:
        """Cancel a run that is not executing (queued, waiting, or crashed), undoing its
        completed write tools first with ``compensate``; a run executing elsewhere is asked
        to stop at its next step (status ``running``, ``waiting={"cancel": "requested"}``)."""
        inputs.optional_name(by, "by")
        inputs.text(reason, "reason")
        d = self.deps
        record = d.store.get_run(inputs.lookup_id(run_id))
        if record.status in FINISHED:
            raise InvalidState(f"run {run_id} is already {record.status}; nothing to cancel")
        self._cancel_children(run_id, compensate=compensate, by=by)
        try:
            lease = self.leases.claim(record)
        except Conflict:  # executing elsewhere: it stops at its next step
            now = d.clock.now()
            asked = {"why": reason or "cancel requested", "compensate": compensate}
            # who asked and why, for the executing process's run.cancelled (and the audit)
            d.store.record_audit(run_id, CANCEL_REQUESTED, codec.encode(asked), actor=by, now=now)
            d.store.request_cancel(run_id, compensate=compensate, now=now)
            self.leases.active.interrupt(run_id, Cancelling(compensate, by=by, reason=reason))
            return RunHandle(run_id, RunStatus.RUNNING, waiting={"cancel": "requested"})
        state = self.states.load(run_id)
        if compensate:  # undone here: every undo must be found before anything is written
            try:
                compensation.compensable(state, self.registry.lookup_tool)
            except NotFound:
                self.leases.let_go(run_id, lease.epoch)
                raise
        journal = Journal(d.store, d.clock, state, lease, actor=by or d.owner)
        ctx = {"type": "cancelled", "message": reason or "cancelled", "by": by}
        return self.executor.cancel_with(journal, ctx, compensate)

    def _cancel_children(self, run_id: str, *, compensate: bool, by: str | None) -> None:
        """Cancel the unfinished children of ``run_id`` before it (engine.children): the
        newest first, each one's own children before it, so that compensation undoes
        the tree newest child first and the parent last."""
        for kid in reversed(children.children_of(self.states.load(run_id))):
            try:
                status = self.deps.store.get_run(kid).status
            except NotFound:  # collected by gc: nothing left to cancel
                continue
            if status not in FINISHED:
                why = f"its parent run {run_id} was cancelled"
                self.cancel(kid, compensate=compensate, by=by, reason=why)

    def retry(self, run_id: str, *, in_queue: bool | None = None) -> RunHandle:
        """Execute a failed (or blocked) run again from where it stopped, here, or put it
        back in its queue (``in_queue``; None: back in its queue if it was started in one,
        else here: the behaviour of ``app.retry_run`` and ``tether retry`` alike)."""
        inputs.lookup_id(run_id)
        if in_queue is None:
            in_queue = self.deps.store.get_run(run_id).queue is not None
        if in_queue:
            return self._requeue(run_id)
        ex = self.executor
        return ex.continue_run(ex.prepare_resume(run_id, retry=True))

    def _requeue(self, run_id: str) -> RunHandle:
        record = self.deps.store.get_run(run_id)
        if record.status not in (RunStatus.FAILED, RunStatus.BLOCKED):
            raise InvalidState(
                f"run {run_id} is {record.status}, not failed or blocked; only those can be "
                f"put back in their queue"
            )
        if record.queue is None:
            raise InvalidState(
                f"run {run_id} was not started in a queue (it ran through app.run), so no "
                f"worker would take it; retry it in this process: `tether retry {run_id} --here`"
            )
        state = self.states.load(run_id)
        if record.status == RunStatus.FAILED:
            self.executor.check_retryable(state)
        why = "retry requested" if record.status == RunStatus.FAILED else "resume requested"
        data = {"reason": why, "status": "queued", "queue": record.queue}
        self.append_outside(state, ev.RUN_SUSPENDED, data)
        return RunHandle(run_id, RunStatus.QUEUED, None, dict(state.failure or {}) or None)


def _approval_step(state: RunState, name: str) -> StepState | None:
    steps = [s for s in state.steps if s.kind == "approve" and s.name == name]
    return steps[-1] if steps else None
