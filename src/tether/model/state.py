"""RunState and fold(): a run's state as a pure function of its log.

``fold(events)`` never does I/O and never reads the clock. ``fold(events,
start=snapshot_state)`` continues from a snapshot, and for any cut ``k``::

    fold(events) == fold(events[k:], start=fold(events[:k]))

which is what makes snapshots a cache and never the truth.

The state holds the five layers: *position* (steps with status), every step's
*input digest and verbatim output*, *decisions* with rationale, *retry context*
(attempts, every error, the next retry time) and *failure context* (time,
step, input digest, exception type, message, traceback), plus task variables,
usage and status.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from tether.model import events as ev
from tether.model import verdicts
from tether.model.events import Event
from tether.model.status import UNRECORDED, RunStatus, StepStatus
from tether.model.steps import (
    REVERT,
    StepList,
    StepState,
    Usage,
    committed_of,
    step_data,
    step_from,
    step_usage,
    unrecorded,
    usage_data,
)


@dataclass(frozen=True, slots=True)
class RunState:
    """The folded state of one run. Read-only: mappings must not be mutated."""

    run_id: str
    seq: int = 0
    agent: str | None = None
    version: str | None = None
    status: str = RunStatus.QUEUED
    input: Mapping[str, Any] = field(default_factory=dict)
    output: Any = None
    failure: Mapping[str, Any] | None = None
    # a tuple, or a StepList whose stored pages load on first read (see tether.model.steps)
    steps: Sequence[StepState] = ()
    vars: Mapping[str, Any] = field(default_factory=dict)
    usage: Usage = Usage()  # noqa: RUF009 (a frozen dataclass: one shared default is safe)
    code: Mapping[str, Any] = field(default_factory=dict)
    created_at: float | None = None
    updated_at: float | None = None
    executions: int = 0  # how many times a process started executing this run
    parent_id: str | None = None  # lineage: forked from this run…
    fork_seq: int | None = None  # …at this seq of its log
    fork_position: int | None = None  # positions 1..fork_position are the parent's
    fork_vars: Mapping[str, Any] | None = None  # task variables edited at the fork
    # every fork in the lineage, oldest first: (position, edited vars); a fork of a fork
    # replays each ancestor's edits at its own fork point
    fork_edits: tuple[tuple[int, Mapping[str, Any]], ...] = ()
    waiting: Mapping[str, Any] | None = None  # kind (approval|signal|timer|doubt), name, …
    compensating: Mapping[str, Any] | None = None  # why completed write tools are undone
    # the code no longer matches the log (status blocked): message, position, recorded, found
    blocked: Mapping[str, Any] | None = None
    # limits given at the start ("limits"), raised since ("added": field -> amount), and the
    # last limit reached ("exceeded": limit, max, used, position); see tether.model.budgets
    budget: Mapping[str, Any] | None = None
    # a child run's parent (run.child): {"run": parent id, "pos": the position of the call}
    caller: Mapping[str, Any] | None = None
    # what a run handed off to was handed (run.handoff): from, pos, vars, and session and
    # upto, or messages; its vars are the run's from the start
    handed: Mapping[str, Any] | None = None
    # the reverts of single effects (tether.engine.revert), one per reverted position, in
    # position order: each a StepState of kind ``revert`` whose position is the reverted
    # call's. They take no position of their own, so a run reverted while it waits replays
    # to the same positions.
    reverts: tuple[StepState, ...] = ()

    @property
    def error(self) -> Mapping[str, Any] | None:
        """The failure context of a failed run (alias of ``failure``)."""
        return self.failure

    @property
    def committed(self) -> int:
        """How many leading positions are completed (1..committed are safe to reuse)."""
        return committed_of(self.steps)

    @property
    def position(self) -> int:
        """The current position: the first one not completed (1-based)."""
        return self.committed + 1

    @property
    def decisions(self) -> tuple[StepState, ...]:
        """Every decision with its choice (``output``) and rationale (``why``)."""
        return tuple(s for s in self.steps if s.kind == "decide")

    def step(self, position: int) -> StepState | None:
        """The step at ``position`` (1-based), or None."""
        if 1 <= position <= len(self.steps):
            return self.steps[position - 1]
        return None

    def revert_of(self, position: int) -> StepState | None:
        """The revert of the call at ``position`` (any status), or None."""
        return next((r for r in self.reverts if r.position == position), None)

    def describe_position(self, expected: int | None = None) -> str:
        """``"step 6 of 9, 1–5 committed"``; ``of N`` only when the run completed or the
        caller knows how many positions to expect (e.g. from an earlier completed run)."""
        total = len(self.steps)
        done = self.committed
        if self.status == RunStatus.COMPLETED:
            return f"completed, {total} of {total} committed"
        committed = f"1–{done} committed" if done else "none committed"
        of = f" of {max(expected, self.position)}" if expected else ""
        return f"step {self.position}{of}, {committed}"


class _Fold:
    """Mutable accumulator behind fold(); never escapes this module.

    The start's steps are never copied: changed and appended positions go to an
    overlay, and ``committed`` is kept as positions change, so folding onto a lazy
    StepList loads at most the pages of the positions the events touch.
    """

    def __init__(self, start: RunState) -> None:
        self.s: dict[str, Any] = {f.name: getattr(start, f.name) for f in fields(RunState)}
        self.base = start.steps
        self.over: dict[int, StepState] = {}  # 0-based index -> step
        self.n = len(start.steps)
        self.committed = committed_of(start.steps)
        self.vars = dict(start.vars)

    def apply(self, e: Event) -> None:
        if e.type not in ev.ALL_TYPES:
            return  # an event type this tether does not know: carried, not folded
        d = e.payload()
        self.s["seq"] = e.seq
        self.s["updated_at"] = e.at
        _HANDLERS[e.type](self, e, d)

    def at(self, pos: int) -> StepState:
        """The step at ``pos`` (1 <= pos <= n)."""
        step = self.over.get(pos - 1)
        return step if step is not None else self.base[pos - 1]

    def put_step(self, pos: int, step: StepState) -> None:
        if step.kind == REVERT:  # takes no position: kept beside the steps, by position
            others = [r for r in self.s["reverts"] if r.position != pos]
            self.s["reverts"] = tuple(sorted([*others, step], key=lambda r: r.position))
            return
        while self.n < pos - 1:  # a fan-out's branch finished before an earlier one
            self._set(self.n + 1, unrecorded(self.n + 1))
        self._set(pos, step)

    def _set(self, pos: int, step: StepState) -> None:
        self.over[pos - 1] = step
        self.n = max(self.n, pos)
        if step.status != StepStatus.COMPLETED:
            self.committed = min(self.committed, pos - 1)
        elif pos == self.committed + 1:
            while (
                self.committed < self.n
                and self.at(self.committed + 1).status == StepStatus.COMPLETED
            ):
                self.committed += 1

    def wait(self, kind: str, d: dict[str, Any], e: Event, **more: Any) -> None:
        self.s["status"] = RunStatus.WAITING
        self.s["waiting"] = {
            "kind": kind,
            "name": d["name"],
            "position": d["pos"],
            "since": e.at,
            **more,
        }

    def unwait(self) -> None:
        if self.s["status"] == RunStatus.WAITING:
            self.s["status"] = RunStatus.QUEUED
        self.s["waiting"] = None

    def get_step(self, pos: int, d: dict[str, Any], e: Event) -> StepState:
        if d.get("kind") == REVERT:  # a revert's record, beside the steps (RunState.reverts)
            if pos > self.n:  # a log tether never writes (an import's): refused
                raise ValueError(f"a revert of position {pos}, which holds no step")
            old = next((r for r in self.s["reverts"] if r.position == pos), None)
            return old or StepState(pos, d["name"], REVERT, StepStatus.RUNNING, started_at=e.at)
        if pos <= self.n and self.at(pos).status != UNRECORDED:
            return self.at(pos)
        return StepState(pos, d["name"], d["kind"], StepStatus.RUNNING, started_at=e.at)

    def freeze(self) -> RunState:
        return RunState(**{**self.s, "steps": self.frozen_steps(), "vars": dict(self.vars)})

    def frozen_steps(self) -> Sequence[StepState]:
        if isinstance(self.base, StepList):
            return self.base.derive(self.over, self.n, self.committed)
        return tuple(self.at(pos) for pos in range(1, self.n + 1))


def _created(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    f.s.update(
        agent=d["agent"],
        version=d.get("version"),
        input=d.get("input", {}),
        code=d.get("code", {}),
        created_at=e.at,
        status=RunStatus.QUEUED,
    )
    if d.get("limits"):
        f.s["budget"] = {"limits": d["limits"], "added": {}}
    if d.get("caller"):
        f.s["caller"] = dict(d["caller"])
    if d.get("handoff"):
        f.s["handed"] = dict(d["handoff"])
        f.vars.update(d["handoff"].get("vars") or {})


def _started(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    f.s.update(status=RunStatus.RUNNING, waiting=None, blocked=None)
    f.s["executions"] += 1


def _suspended(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    f.s.update(status=d.get("status", RunStatus.RUNNING), blocked=None)


def _blocked(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    f.s.update(
        status=RunStatus.BLOCKED,
        blocked={
            "message": d["message"],
            "position": d["position"],
            "recorded": d["recorded"],
            "found": d["found"],
            "at": e.at,
        },
    )


def _completed(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    f.s.update(status=RunStatus.COMPLETED, output=d.get("output"), failure=None)


def _failed(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    f.s.update(status=RunStatus.FAILED, failure=d["error"])


def _forked(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    f.s.update(
        parent_id=d["parent"],
        fork_seq=d["seq"],
        fork_position=d["position"],
        fork_vars=d.get("vars"),
        status=RunStatus.QUEUED,
        output=None,
        failure=None,
    )
    if d.get("vars"):
        f.s["fork_edits"] = (*f.s["fork_edits"], (d["position"], dict(d["vars"])))
    if d.get("input") is not None:
        f.s["input"] = d["input"]
    f.vars.update(d.get("vars") or {})


def _tool_intent(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    pos = d["pos"]
    old = f.get_step(pos, d, e)
    f.put_step(
        pos,
        StepState(
            pos,
            d["name"],
            d["kind"],
            StepStatus.RUNNING,
            attempts=max(old.attempts, d["attempt"]),
            input_digest=d.get("digest"),
            errors=old.errors,
            started_at=old.started_at or e.at,
            seq=e.seq,
            key=d["key"],
            detail={**verdicts.kept(old), **_intent_detail(d)},
        ),
    )


def _intent_detail(d: dict[str, Any]) -> dict[str, Any]:
    detail = {k: d.get(k) for k in ("risk", "of", "input", "code")}
    if d["kind"] == REVERT:  # who reverted the call, and why (tether.engine.revert)
        detail.update(by=d.get("by"), reason=d.get("reason"))
    return detail


def _in_doubt(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    old = f.get_step(d["pos"], d, e)
    errors = (*old.errors, d["error"]) if d.get("error") else old.errors  # a timeout's
    f.put_step(d["pos"], replace(old, status=StepStatus.IN_DOUBT, errors=errors, seq=e.seq))
    f.wait("doubt", d, e, key=d["key"], reason=d.get("reason", "crash"))


def _resolved(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    old = f.get_step(d["pos"], d, e)
    if d["happened"]:
        step = replace(
            old, status=StepStatus.COMPLETED, output=d.get("result"), finished_at=e.at, seq=e.seq
        )
    else:
        step = replace(old, status=StepStatus.RETRYING, seq=e.seq)  # it did not happen: call again
    f.put_step(d["pos"], step)
    f.unwait()


def _waiting_step(
    f: _Fold, e: Event, d: dict[str, Any], kind: str, due: float | None, **detail: Any
) -> None:
    """The step of a gate that waits (an approval, a timer, a wait, a join) at ``d["pos"]``."""
    pos = d["pos"]
    step = StepState(pos, d["name"], kind, StepStatus.WAITING, attempts=1, started_at=e.at)
    f.put_step(pos, replace(step, due_at=due, detail=detail or None, seq=e.seq))


def _approval_requested(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    detail = {"payload": d.get("payload"), "approvers": d.get("approvers")}
    if d.get("groups"):  # which approvers are groups, not identities (tether.engine.gates)
        detail["groups"] = d["groups"]
    _waiting_step(f, e, d, "approve", d.get("timeout_at"), **detail)
    f.wait("approval", d, e, until=d.get("timeout_at"), **detail)


def _approval_decided(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    old = f.get_step(d["pos"], d, e)
    decision = {"approved": d["approved"], "by": d["by"], "reason": d.get("reason")}
    f.put_step(
        d["pos"],
        replace(
            old,
            status=StepStatus.COMPLETED,
            output=decision,
            finished_at=e.at,
            duration=e.at - (old.started_at or e.at),
            seq=e.seq,
        ),
    )
    f.unwait()


def _timer_started(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    _waiting_step(f, e, d, "sleep", d["until"])
    if d.get("suspend"):
        f.wait("timer", d, e, until=d["until"])


def _wait_started(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    _waiting_step(f, e, d, "wait", d.get("timeout_at"))
    f.wait("signal", d, e, until=d.get("timeout_at"))


def _join_started(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    # kind "child": an inline child not finished (engine.inline)
    _waiting_step(f, e, d, d.get("kind", "join"), None)
    inline = {"inline": True} if d.get("inline") else {}
    f.wait("children", d, e, children=list(d["children"]), **inline)


def _compensating(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    f.s["compensating"] = {
        "reason": d["reason"],
        "error": d.get("error"),
        "at": e.at,
        "from_position": d["from_position"],
    }


def _cancelled(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    f.s.update(
        status=RunStatus.CANCELLED,
        waiting=None,
        failure={
            "type": "cancelled",
            "message": d.get("reason") or "cancelled",
            "by": d.get("by"),
            "at": e.at,
        },
    )


def _budget_exceeded(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    keys = ("limit", "max", "used", "on_exceeded", "kind")
    exceeded = {**{k: d.get(k) for k in keys}, "position": d["pos"], "at": e.at}
    f.s["budget"] = {**(f.s["budget"] or {"added": {}}), "exceeded": exceeded}
    if d["on_exceeded"] == "wait":
        f.wait("budget", {"name": d["limit"], "pos": d["pos"]}, e, max=d.get("max"))


def _budget_raised(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    budget = dict(f.s["budget"] or {})
    added = dict(budget.get("added") or {})
    for field_, amount in d["add"].items():
        added[field_] = added.get(field_, 0) + amount
    f.s["budget"] = {**budget, "added": added, "exceeded": None}
    if (f.s["waiting"] or {}).get("kind") == "budget":
        f.unwait()


def _step_completed(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    pos = d["pos"]
    old = f.get_step(pos, d, e)
    usage = step_usage(d)
    if usage is not None:
        f.s["usage"] = f.s["usage"] + usage
    f.put_step(
        pos,
        StepState(
            pos,
            d["name"],
            d["kind"],
            StepStatus.COMPLETED,
            attempts=d.get("attempt", 1),
            input_digest=d.get("digest"),
            output=d.get("output"),
            errors=old.errors,
            started_at=d.get("started", e.at - (d.get("duration") or 0.0)),
            finished_at=e.at,
            duration=d.get("duration"),
            usage=usage,
            why=d.get("why"),
            seq=e.seq,
            key=d.get("key", old.key),
            due_at=old.due_at,
            detail=d.get("detail", old.detail),
        ),
    )


def _step_failed(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    pos = d["pos"]
    old = f.get_step(pos, d, e)
    retry_at = d.get("retry_at")
    f.put_step(
        pos,
        StepState(
            pos,
            d["name"],
            d["kind"],
            StepStatus.RETRYING if retry_at is not None else StepStatus.FAILED,
            attempts=d["attempt"],
            input_digest=d.get("digest", old.input_digest),
            errors=(*old.errors, d["error"]),
            started_at=old.started_at or e.at,
            finished_at=e.at,
            next_retry_at=retry_at,
            seq=e.seq,
            key=d.get("key", old.key),
            detail=old.detail,
        ),
    )


def _decision(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    pos = d["pos"]
    f.put_step(
        pos,
        StepState(
            pos,
            d["name"],
            "decide",
            StepStatus.COMPLETED,
            attempts=1,
            output=d.get("choice"),
            why=d.get("why"),
            started_at=e.at,
            finished_at=e.at,
            duration=0.0,
            seq=e.seq,
        ),
    )


def _var_set(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    f.vars[d["key"]] = d.get("value")
    _var_step(f, e, d)


def _var_deleted(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    f.vars.pop(d["key"], None)
    _var_step(f, e, d)


def _var_step(f: _Fold, e: Event, d: dict[str, Any]) -> None:
    pos = d["pos"]
    f.put_step(
        pos,
        StepState(
            pos,
            d["name"],
            "var",
            StepStatus.COMPLETED,
            attempts=1,
            output=d.get("value"),
            started_at=e.at,
            finished_at=e.at,
            duration=0.0,
            seq=e.seq,
        ),
    )


_HANDLERS = {
    ev.RUN_CREATED: _created,
    ev.RUN_STARTED: _started,
    ev.RUN_SUSPENDED: _suspended,
    ev.RUN_COMPLETED: _completed,
    ev.RUN_FAILED: _failed,
    ev.RUN_BLOCKED: _blocked,
    ev.RUN_FORKED: _forked,
    ev.TOOL_INTENT: _tool_intent,
    ev.TOOL_IN_DOUBT: _in_doubt,
    ev.TOOL_RESOLVED: _resolved,
    ev.TOOL_PROPOSED: verdicts.fold_proposed,
    ev.TOOL_VERDICT: verdicts.fold_verdict,
    ev.APPROVAL_REQUESTED: _approval_requested,
    ev.APPROVAL_DECIDED: _approval_decided,
    ev.TIMER_STARTED: _timer_started,
    ev.WAIT_STARTED: _wait_started,
    ev.JOIN_STARTED: _join_started,
    ev.RUN_COMPENSATING: _compensating,
    ev.RUN_CANCELLED: _cancelled,
    ev.BUDGET_EXCEEDED: _budget_exceeded,
    ev.BUDGET_RAISED: _budget_raised,
    ev.WORKSPACE: lambda f, e, d: None,  # files, not state: tether.engine.workspace reads them
    ev.STEP_COMPLETED: _step_completed,
    ev.STEP_FAILED: _step_failed,
    ev.DECISION: _decision,
    ev.VAR_SET: _var_set,
    ev.VAR_DELETED: _var_deleted,
}


def fold(events: Iterable[Event], start: RunState | None = None, *, run_id: str = "") -> RunState:
    """Fold ``events`` (in seq order) onto ``start`` (or an empty state). Pure."""
    acc: _Fold | None = None
    for e in events:
        if acc is None:
            acc = _Fold(start if start is not None else RunState(run_id=e.run_id))
        acc.apply(e)
    if acc is None:
        return start if start is not None else RunState(run_id=run_id)
    return acc.freeze()


# -- snapshots: RunState <-> plain data (encoded with tether.model.codec by the caller) --


def to_data(state: RunState) -> dict[str, Any]:
    """RunState as plain data, for a snapshot (every step: loads every page)."""
    out = head_data(state)
    out["steps"] = [step_data(s) for s in state.steps]
    return out


def from_data(data: Mapping[str, Any]) -> RunState:
    """Inverse of :func:`to_data`."""
    return from_head_data(data, tuple(step_from(s) for s in data["steps"]))


def head_data(state: RunState) -> dict[str, Any]:
    """RunState as plain data without its steps (``steps`` is None)."""
    out = {f.name: getattr(state, f.name) for f in fields(RunState)}
    out["usage"] = usage_data(state.usage)
    out["steps"] = None
    out["reverts"] = [step_data(r) for r in state.reverts]
    return out


def from_head_data(data: Mapping[str, Any], steps: Sequence[StepState]) -> RunState:
    """Inverse of :func:`head_data`, given the steps."""
    d = dict(data)
    d["usage"] = Usage(**d["usage"])
    d["steps"] = steps
    d["reverts"] = tuple(step_from(r) for r in d.get("reverts") or ())  # none before them
    return RunState(**d)
