"""The vocabulary of a run's execution: the commands a step core yields (:class:`Call`,
:class:`Sleep`), the exceptions that unwind an agent (:class:`Suspended`,
:class:`Stopping`, :class:`Cancelling`), the position a call takes (:class:`Slot`), and
what a step knows about itself (:func:`current_step`, :func:`step_key`).

Below :mod:`tether.engine.journal` (which records the calls) and
:mod:`tether.engine.steps` (the step core that yields them).
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tether.errors import LeaseLost, StoreUnavailable
from tether.model.status import StepStatus
from tether.model.steps import StepState


def unwrapped(exc: BaseException) -> BaseException:
    """What an agent's exception means for its run: ``exc``, or, for an exception group
    (``asyncio.TaskGroup`` wraps what its body or its tasks raised) holding tether's own
    exceptions, the one that decides: a lost lease or database, else a wait, a cancel, a
    stop. A group of the agent's own errors is its failure, as it is."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    leaves = list(_leaves(exc))
    for kind in ((LeaseLost, StoreUnavailable), Suspended, Cancelling, Stopping):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    return exc


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for e in group.exceptions:
        if isinstance(e, BaseExceptionGroup):
            yield from _leaves(e)
        else:
            yield e


@dataclass(frozen=True, slots=True)
class Call:
    """Command: call ``fn(*args, **kwargs)`` (bounded by ``timeout`` seconds)."""

    fn: Callable[..., Any]
    args: Sequence[Any]
    kwargs: dict[str, Any]
    timeout: float | None


@dataclass(frozen=True, slots=True)
class Sleep:
    """Command: wait ``seconds`` before going on."""

    seconds: float


Core = Generator[Call | Sleep, Any, Any]


class Suspended(BaseException):
    """Internal: unwinds the agent when its run starts waiting (approval, signal, timer).

    A BaseException so that an agent's ``except Exception`` does not swallow it.
    """

    def __init__(self, waiting_for: str) -> None:
        super().__init__(waiting_for)
        self.waiting_for = waiting_for


class Stopping(BaseException):
    """Internal: the process is stopping; the run goes back to the queue at its next step."""


class Cancelling(BaseException):
    """Internal: someone cancelled the run; it stops at its next step (and compensates)."""

    def __init__(
        self, compensate: bool = False, *, by: str | None = None, reason: str | None = None
    ) -> None:
        super().__init__("cancel requested" + (" with compensation" if compensate else ""))
        self.compensate = compensate
        self.by = by  # None when the request came through the store (another process):
        self.reason = reason  # then the run's audit record "cancel.requested" says


@dataclass(frozen=True, slots=True)
class StepInfo:
    """What :func:`tether.current_step` returns inside a step or tool call."""

    run_id: str
    position: int
    name: str
    kind: str
    attempt: int
    idempotency_key: str


_CURRENT: contextvars.ContextVar[StepInfo | None] = contextvars.ContextVar(
    "tether_current_step", default=None
)


# The run whose agent body this context executes (set around the agent function by App):
# a tool called there outside any step or tool call bypasses the journal (see effects).
_AGENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tether_agent_run", default=None
)


@contextlib.contextmanager
def agent_body(run_id: str) -> Iterator[None]:
    """Mark this context as executing run ``run_id``'s agent function, outside any step
    (an agent run inline inside another's step has a body of its own)."""
    token, step = _AGENT.set(run_id), _CURRENT.set(None)
    try:
        yield
    finally:
        _CURRENT.reset(step)
        _AGENT.reset(token)


def in_agent_body() -> str | None:
    """The run whose agent body is executing here, outside any step or tool call, or None."""
    run_id = _AGENT.get()
    return run_id if run_id is not None and _CURRENT.get() is None else None


def current_step() -> StepInfo:
    """The step being executed: run id, position, attempt and its idempotency key.

    Pass ``idempotency_key`` on to external APIs (an ``Idempotency-Key`` header).
    Raises LookupError outside a tether step.
    """
    info = _CURRENT.get()
    if info is None:
        raise LookupError("tether.current_step() is only available inside a step or tool call")
    return info


def step_key(run_id: str, pos: int, name: str, digest: str) -> str:
    """The idempotency key ``{run_id}:{position}:{name}:{args_hash}``."""
    return f"{run_id}:{pos}:{name}:{digest[:16]}"


@dataclass(slots=True)
class Slot:
    """One position taken by a tether call during this execution."""

    pos: int
    kind: str
    name: str
    recorded: StepState | None

    @property
    def done(self) -> bool:
        return self.recorded is not None and self.recorded.status == StepStatus.COMPLETED


def current_task() -> object | None:
    """The asyncio task running here, or None (no loop, or asyncio never imported)."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return None
    try:
        task: object | None = asyncio.current_task()
    except RuntimeError:  # no running event loop in this thread
        return None
    return task
