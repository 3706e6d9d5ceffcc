"""Precise revert: undo one completed effect of a run, and leave the rest of it as it is.

``app.revert(run_id, step=N, by=...)`` (``tether revert RUN --step N``, ``POST
/api/runs/{id}/revert``) calls the compensation of the write-tool call at position N,
the way a saga's compensation would (:func:`tether.engine.compensation.undo_core`): a
durable intent first, its own idempotency key, the undone call's effects-table row marked
``compensating`` then ``compensated`` so that no fork reuses it, retried by the tool's
policy. The run's status, output and other steps do not change: a completed run stays
completed.

A revert takes no position. Its record is kept beside the steps, in
:attr:`RunState.reverts` at the reverted call's position (events of kind ``revert``), so a
run reverted while it waits, queued or blocked replays to the same positions when it goes
on (its replay still returns the reverted call's recorded result: what the agent built on
it is the operator's to judge). A compensation of the run later (a failure, ``cancel
--compensate``) leaves a reverted call alone.

A revert is refused (:class:`~tether.errors.RevertRefused`, nothing written) for a
position that is not a completed write-tool call, a tool without compensation, a call
already reverted or compensated, a fork's copied call (its effect is the parent's, see
:func:`tether.engine.effects.owns`), a run under compensation, and a run executing now:
in this process, or under another process's live lease (it takes the run's lease for the
undo, so a worker that claims the run meanwhile fences it out).

A revert interrupted between its intent and its end (a crash) is *pending*; the same
``revert`` finishes it, with the same key. By the in-doubt rules of tools
(:func:`tether.engine.effects.derived_doubt`), an undo that takes ``idempotency_key`` of a
``write`` tool is called again with it; any other undo may have run, so tether asks: the
revert is refused until a person says it happened (``happened=True``: recorded as
reverted, not called again) or did not (``happened=False``: called again).
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass
from typing import Any

from tether.engine import compensation
from tether.engine.calls import Core, Slot, step_key
from tether.engine.compensation import FindTool
from tether.engine.deps import Deps
from tether.engine.effects import ToolDef, derived_doubt, owns, undone
from tether.engine.journal import Journal
from tether.engine.leases import Leases
from tether.engine.retry import Retry
from tether.engine.runtime import adrive, drive
from tether.engine.states import States
from tether.errors import (
    Conflict,
    InvalidState,
    LeaseLost,
    NotFound,
    RevertRefused,
    TetherError,
)
from tether.model import inputs
from tether.model.state import RunState
from tether.model.status import EffectStatus, StepStatus
from tether.model.steps import REVERT, StepState
from tether.store import EffectWrite, Lease


@dataclass(frozen=True, slots=True)
class Reverted:
    """A revert done: the run, the reverted call (position, tool), the undo's key, who
    reverted it, the undo's result (None when settled by a person), and ``resumed``: it
    finished a revert an earlier call left pending."""

    run_id: str
    position: int
    tool: str
    key: str
    by: str
    output: Any = None
    resumed: bool = False


@dataclass(frozen=True, slots=True)
class Reverter:
    """Reverts single effects of the runs of one App (its store, leases and tools)."""

    deps: Deps
    states: States
    leases: Leases
    find_tool: FindTool  # the Registry's lookup_tool: NotFound when its module is not allowed
    retry: Retry  # the App's default retry policy (a tool's own wins)

    def revert(
        self,
        run_id: str,
        position: int,
        *,
        by: str,
        reason: str | None = None,
        happened: bool | None = None,
    ) -> Reverted:
        """Revert the call at ``position`` of run ``run_id`` as ``by`` (see the module's
        docstring). ``happened`` settles a pending undo in doubt: True records it as done,
        False calls it again. Raises RevertRefused, or NotFound for an unknown run."""
        inputs.lookup_id(run_id)
        if isinstance(position, bool) or not isinstance(position, int) or position < 1:
            raise RevertRefused(f"run {run_id}: step is a position (1, 2, …), not {position!r}")
        inputs.name(by, "by")
        inputs.text(reason, "reason")
        record = self.deps.store.get_run(run_id)
        if run_id in self.leases.active.journals:  # our own lease: a claim would not tell
            raise RevertRefused(
                f"run {run_id} is executing in this process; revert step {position} once "
                f"it has stopped (it waits, or has ended)"
            )
        self._check(self.states.load(run_id), position, happened)  # before taking the lease
        try:
            lease = self.leases.claim(record)
        except Conflict:
            holder = self.deps.store.get_run(run_id).lease_owner or "another process"
            raise RevertRefused(
                f"run {run_id} is executing in {holder}: a revert would race its steps. "
                f"Revert step {position} once it has stopped (it waits, or has ended), or "
                f"cancel it first (`tether cancel {run_id}`)"
            ) from None
        try:
            return self._under(lease, run_id, position, by, reason, happened)
        finally:
            self.leases.let_go(run_id, lease.epoch)

    def _under(
        self,
        lease: Lease,
        run_id: str,
        position: int,
        by: str,
        reason: str | None,
        happened: bool | None,
    ) -> Reverted:
        """The revert under the run's lease: checked again (the log may have moved since),
        then the undo's core driven here (in an event loop of its own for an async undo)."""
        state = self.states.load(run_id)
        target, tool = self._check(state, position, happened)
        self.leases.keep()  # a slow undo keeps its lease
        journal = Journal(self.deps.store, self.deps.clock, state, lease, actor=by)
        pending = state.revert_of(position)
        core = self._core(journal, target, tool, pending, by, reason, happened)
        try:
            if inspect.iscoroutinefunction(tool.compensate):
                output = asyncio.run(adrive(core, self.deps.clock))
            else:
                output = drive(core, self.deps.clock)
        except LeaseLost:
            raise InvalidState(_fenced(run_id, target)) from None
        except TetherError:
            raise
        except Exception as exc:  # the undo's own error, recorded: its word it did not undo
            raise InvalidState(_failed(run_id, target, exc)) from exc
        key = step_key(run_id, position, _name(tool), compensation.undo_digest(target))
        return Reverted(run_id, position, tool.name, key, by, output, pending is not None)

    def _core(
        self,
        j: Journal,
        target: StepState,
        tool: ToolDef,
        pending: StepState | None,
        by: str,
        reason: str | None,
        happened: bool | None,
    ) -> Core:
        digest = compensation.undo_digest(target)
        slot = Slot(target.position, REVERT, _name(tool), pending)
        if happened:  # a person says the pending undo ran: its end, without calling it
            assert pending is not None
            key = step_key(j.run_id, slot.pos, slot.name, digest)
            effect = EffectWrite(key, j.run_id, slot.pos, slot.name, EffectStatus.INTENT)
            done = [compensation.mark(j.run_id, target, tool, EffectStatus.COMPENSATED)]
            j.record_success(
                slot, pending.attempts, digest, None, 0.0, key=key, effect=effect, writes=done
            )
            return None
        more = {"by": by, "reason": reason}
        return (yield from compensation.undo_core(j, slot, digest, target, tool, self.retry, more))

    # -- refusals ------------------------------------------------------------------

    def _check(
        self, state: RunState, position: int, happened: bool | None
    ) -> tuple[StepState, ToolDef]:
        """The call at ``position`` and its tool, or RevertRefused saying why not."""
        target = self._target(state, position)
        tool = self._tool(state, target)
        pending = state.revert_of(position)
        if pending is not None and pending.status == StepStatus.COMPLETED:
            d = pending.detail or {}
            raise RevertRefused(
                f"run {state.run_id}: step {position} ({target.name}) was already reverted "
                f"by {d.get('by')} (undo key {pending.key}); nothing to do"
            )
        self._not_compensated(state, target)
        in_doubt = pending is not None and pending.status in (
            StepStatus.RUNNING,
            StepStatus.IN_DOUBT,
        )
        if happened is not None and not in_doubt:
            raise RevertRefused(
                f"run {state.run_id}: step {position} has no undo in doubt to settle "
                f"(happened= is only for one that a crash interrupted); revert it without it"
            )
        if in_doubt and happened is None and derived_doubt(tool.risk, tool.undo_takes_key) == "ask":
            raise RevertRefused(_ask(state.run_id, target, tool))
        return target, tool

    def _target(self, state: RunState, position: int) -> StepState:
        run_id = state.run_id
        target = state.step(position)
        if target is None:
            raise RevertRefused(
                f"run {run_id} has no step at position {position} (it has {len(state.steps)} "
                f"steps: `tether show {run_id}` lists them)"
            )
        what = f"run {run_id}: step {position} ({target.name}) is a {target.kind} step"
        risk = (target.detail or {}).get("risk") or "read"  # a read tool records no intent
        if target.kind != "tool" or risk == "read" or not target.key:
            of = f" of risk {risk}" if target.kind == "tool" else ""
            raise RevertRefused(
                f"{what}{of}, not a call of a write tool: it has no effect to revert"
            )
        if target.status != StepStatus.COMPLETED:
            raise RevertRefused(
                f"{what} that is {target.status}, not completed: only a completed call has "
                f"an effect to revert (one in doubt: `tether resolve {run_id}` first)"
            )
        if not owns(run_id, target.key):
            owner = target.key.split(":", 1)[0]
            raise RevertRefused(
                f"{what} copied from run {owner} when this run was forked: its effect is "
                f"{owner}'s. Revert it there: `tether revert {owner} --step {position}`"
            )
        return target

    def _tool(self, state: RunState, target: StepState) -> ToolDef:
        code = (target.detail or {}).get("code") or {}
        try:  # a tool recorded with no compensation ("undo": False) is not looked up
            tool = None if code.get("undo") is False else self.find_tool(target.name, code)
        except NotFound as e:
            raise RevertRefused(f"run {state.run_id}: step {target.position}: {e}") from None
        if tool is None or tool.compensate is None:
            known = tool is not None or code.get("undo") is False
            where = "has no compensation" if known else "is not known here (pass --app)"
            raise RevertRefused(
                f"run {state.run_id}: step {target.position} is a call of tool "
                f"{target.name!r}, which {where}: nothing can undo it. Register it with "
                f"@app.tool(..., compensate=undo)"
            )
        return tool

    def _not_compensated(self, state: RunState, target: StepState) -> None:
        """Refuse a call a compensation of the run undid or is undoing."""
        tried = [
            s
            for s in state.steps
            if s.kind == "compensate" and (s.detail or {}).get("of") == target.position
        ]
        status = tried[-1].status if tried else None
        if status is None and state.revert_of(target.position) is None:
            status = undone(self.deps.store, target.key or "")  # marked, and no record says so
        if state.compensating is not None or status is not None:
            why = f"its undo is {status}" if status else "the run's compensation is under way"
            raise RevertRefused(
                f"run {state.run_id}: step {target.position} ({target.name}) is being "
                f"compensated or was ({why}): the run's compensation undoes it, not a revert"
            )


def _name(tool: ToolDef) -> str:
    return f"undo:{tool.name}"


def _ask(run_id: str, target: StepState, tool: ToolDef) -> str:
    return (
        f"run {run_id}: the revert of step {target.position} ({target.name}) was interrupted "
        f"after its intent, and its undo may have run; tool {tool.name!r}'s undo "
        f"{'takes no idempotency_key' if not tool.undo_takes_key else 'is of an irreversible tool'}"
        f", so tether does not call it again on a guess. Check whether it happened, then "
        f"`tether revert {run_id} --step {target.position} --happened` (recorded as reverted) "
        f"or `--not-happened` (called again), with --by"
    )


def _fenced(run_id: str, target: StepState) -> str:
    return (
        f"run {run_id}: another process claimed the run during the revert of step "
        f"{target.position} ({target.name}), so its writes were refused (fenced out): the "
        f"revert is pending if its intent was written. `tether revert {run_id} --step "
        f"{target.position}` finishes it once the run has stopped again"
    )


def _failed(run_id: str, target: StepState, exc: Exception) -> str:
    return (
        f"run {run_id}: the undo of step {target.position} ({target.name}) failed: "
        f"{type(exc).__name__}: {exc}. Recorded in its log (`tether history {run_id}`); "
        f"the call's effect holds as far as tether knows, and no fork reuses it. "
        f"`tether revert {run_id} --step {target.position}` tries again"
    )
