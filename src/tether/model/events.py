"""Events: the immutable records of a run's log, and their types.

An event is ``(run_id, seq, type, data, at, actor)``. ``seq`` is 1, 2, 3… per
run with no gaps; ``data`` is JSON text written by :mod:`tether.model.codec`. The
types below are the whole vocabulary; :func:`tether.model.state.fold` gives each its
meaning. Event data carries a ``pos`` (the step's position) for every event of
a step, so a reader can group a step's attempts without any other index.

Upcasting: an event written by an older tether is read through
:data:`UPCASTERS` (type -> function on the decoded data) before folding, so
old logs keep folding after the event shapes evolve.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tether.errors import CorruptRecord
from tether.model import codec

# Run lifecycle
RUN_CREATED = "run.created"  # agent, version, input, code
RUN_STARTED = "run.started"  # by (owner), epoch: a process began (or resumed) executing
RUN_SUSPENDED = "run.suspended"  # reason: the process stopped on purpose, the run is resumable
RUN_COMPLETED = "run.completed"  # output
RUN_FAILED = "run.failed"  # error (failure context)
# message, position, recorded, found: replay met another step than the log recorded (the
# code changed under the run); it stops, resumable once the code matches again, undoing nothing
RUN_BLOCKED = "run.blocked"
RUN_FORKED = "run.forked"  # parent, seq, position, input?, vars?: this run branched off
# Steps (every one carries pos, name, kind)
STEP_COMPLETED = "step.completed"  # attempt, digest, output, started, duration, usage
STEP_FAILED = "step.failed"  # attempt, error, retry_at (None: no more attempts)
DECISION = "decision"  # choice, why, details
VAR_SET = "var.set"  # key, value
VAR_DELETED = "var.deleted"  # key
# Side effects (tether.engine.effects): the intent is durable before a write tool runs
TOOL_INTENT = "tool.intent"  # key, attempt, digest, risk, code: about to call a write tool
TOOL_IN_DOUBT = "tool.in_doubt"  # key: a crash hid whether the effect happened; ask a human
TOOL_RESOLVED = "tool.resolved"  # key, happened, result, by: a human settled the doubt
# Contracts (tether.engine.contracts): only for a tool with a contract or rules, the call
# the agent proposed and the verdict on it, before its intent; a verdict on its result after
TOOL_PROPOSED = "tool.proposed"  # digest, input: the arguments as proposed
TOOL_VERDICT = "tool.verdict"  # on (args|approval|result), verdict, rules, problems, message
# Waiting (tether.engine.gates): the run holds no process while it waits
APPROVAL_REQUESTED = "approval.requested"  # payload, approvers, timeout_at
APPROVAL_DECIDED = "approval.decided"  # approved, by, reason (by "timeout" on expiry)
TIMER_STARTED = "timer.started"  # until: a durable sleep
WAIT_STARTED = "wait.started"  # timeout_at: waiting for a signal
JOIN_STARTED = "join.started"  # children: waiting for child runs to finish (run.join)
# Compensation (tether.engine.compensation) and cancellation
RUN_COMPENSATING = "run.compensating"  # reason, error: undoing completed write tools
RUN_CANCELLED = "run.cancelled"  # by, reason
# Budgets (tether.engine.limits): a limit reached before the call at pos; a human raised it
BUDGET_EXCEEDED = "budget.exceeded"  # pos, name, kind, limit, max, used, on_exceeded
BUDGET_RAISED = "budget.raised"  # add (limit field -> amount), by, reason
# Workspaces (tether.engine.workspace): pos, files (changed [path, sha256, mode, size]),
# removed (paths): the workspace after the step at pos (none: before the first step), as
# a change to the one before
WORKSPACE = "workspace"

ALL_TYPES = frozenset(
    {
        RUN_CREATED,
        RUN_STARTED,
        RUN_SUSPENDED,
        RUN_COMPLETED,
        RUN_FAILED,
        RUN_BLOCKED,
        RUN_FORKED,
        STEP_COMPLETED,
        STEP_FAILED,
        DECISION,
        VAR_SET,
        VAR_DELETED,
        TOOL_INTENT,
        TOOL_IN_DOUBT,
        TOOL_RESOLVED,
        TOOL_PROPOSED,
        TOOL_VERDICT,
        APPROVAL_REQUESTED,
        APPROVAL_DECIDED,
        TIMER_STARTED,
        WAIT_STARTED,
        JOIN_STARTED,
        RUN_COMPENSATING,
        RUN_CANCELLED,
        BUDGET_EXCEEDED,
        BUDGET_RAISED,
        WORKSPACE,
    }
)

UPCASTERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be appended: the store assigns ``run_id`` and ``seq``."""

    type: str
    data: str  # JSON text from codec.encode
    at: float
    actor: str | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """One stored event of a run's log."""

    run_id: str
    seq: int
    type: str
    data: str
    at: float
    actor: str | None = None

    def payload(self) -> dict[str, Any]:
        """The decoded data, upcast to the current shape."""
        try:
            value: dict[str, Any] = codec.decode(self.data)
        except CorruptRecord:  # again, to name the event (not built for every event)
            where = f"run {self.run_id}: the data of event {self.seq} ({self.type})"
            value = codec.decode(self.data, where=where)
        upcast = UPCASTERS.get(self.type)
        return upcast(value) if upcast else value


def new(type_: str, data: dict[str, Any], at: float, actor: str | None = None) -> NewEvent:
    """Build a NewEvent, encoding ``data`` (raises EncodeError for unstorable values)."""
    return NewEvent(type_, codec.encode(data, what=f"{type_} event"), at, actor)
