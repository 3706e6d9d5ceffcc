"""The words for where a run, a step and an effect are: one definition, used by code, SQL
and docs.

A run's status (``RunState.status``, the ``runs.status`` column, ``tether runs --status``)::

    queued -> running -> completed | failed | cancelled
                 |  ^
                 v  |
               waiting (approval, signal, timer, doubt,   blocked (the code no longer
               budget, children)                            matches its log; `tether retry`)

``completed``, ``failed`` and ``cancelled`` are final (:data:`FINISHED`). Both enums are
``str`` subclasses: ``state.status == "completed"`` holds, and they encode as plain strings.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run is (``RunState.status``)."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    BLOCKED = "blocked"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class StepStatus(StrEnum):
    """Where one position of a run is (``StepState.status``)."""

    RUNNING = "running"
    RETRYING = "retrying"
    COMPLETED = "completed"
    FAILED = "failed"
    WAITING = "waiting"
    IN_DOUBT = "in_doubt"
    UNRECORDED = "unrecorded"  # a later position has an event, this one none yet
    PROPOSED = "proposed"  # a tool call judged by its contract, waiting for its approval


class EffectStatus(StrEnum):
    """Where a write tool's call is in the effects table (``Effect.status``), by its key."""

    INTENT = "intent"  # recorded before the call: it may have happened
    COMPLETED = "completed"  # its result is recorded: a repeated key returns it
    COMPENSATING = "compensating"  # its undo is under way
    COMPENSATED = "compensated"  # undone: a fork must not reuse it


# Every status a run can have, and the ones it never leaves.
STATUSES: tuple[str, ...] = tuple(RunStatus)
FINISHED: tuple[str, ...] = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
UNRECORDED = StepStatus.UNRECORDED
