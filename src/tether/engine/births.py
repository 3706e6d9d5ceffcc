"""Creating runs: the input checked, and a creation that rides with the run's first append.

``app.run`` creates its run in a transaction of its own before the agent starts. An inline
child of a parent in its first execution (engine.inline) is created later: its row, its
``run.created`` and ``run.started`` and its lease are written by its first append, in the
same transaction (:class:`Birth`, ``Store.create_run`` with the append's events, transition
and writes), so a child of one step costs one transaction, its creation and its end
together, as a step costs one.

Until then nothing of the child exists outside this process, and nothing needs to: its
parent executes here under its lease, and what the child did meanwhile is pure steps (any
other call, whose record or side effect may name the run, writes the creation first:
``Journal.slot``; a board's write too, which names the run in the board's history),
whose results a crash loses as it loses a step's not yet recorded.
The journal writes it before its log is read (``Journal.flush``: a failure, a cancel),
and the lease keeper's thread writes it once the child has executed for
:data:`VISIBLE_WITHIN` seconds, so that ``tether show`` and ``runs --tree`` list a child
that executes longer than that (one that ends sooner appears at its end).

A creation refused because the id exists (another execution of the parent created the
child: this one is a zombie, or an earlier one crashed after the creation's commit) is a
lost lease for the child: nothing of this execution is written, and the parent goes on as
for a child that exists (engine.inline).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tether.errors import Conflict, EncodeError, InvalidInput, InvalidState, LeaseLost
from tether.model import codec, secrets
from tether.model import events as ev
from tether.model.clock import Clock
from tether.model.events import NewEvent
from tether.model.state import RunState
from tether.model.status import RunStatus
from tether.store import EffectWrite, NewRun, SignalTake, Store, Transition

if TYPE_CHECKING:
    from tether.engine.registry import AgentDef

# seconds after which a child whose execution has written nothing yet is created anyway
# (by the lease keeper's thread, engine.leases), so that the views list it while it executes
VISIBLE_WITHIN = 1.0
_SECRET_MARK = f'"{codec.TAG}":"{secrets.TAG}"'  # in the text of an event holding a Secret


class Birth:
    """The creation of a run not written yet: ``journal.birth(events, transition, writes)``
    creates it with its first events and those of the append, in one transaction, and
    returns the seq of its last event."""

    __slots__ = ("clock", "first", "owner", "run", "since", "store", "ttl")

    def __init__(
        self, store: Store, clock: Clock, run: NewRun, first: list[NewEvent], owner: str, ttl: float
    ) -> None:
        self.store, self.clock, self.run, self.first = store, clock, run, first
        self.owner, self.ttl = owner, ttl
        self.since = time.monotonic()  # see overdue

    def overdue(self) -> bool:
        """Whether the run has waited :data:`VISIBLE_WITHIN` seconds for its creation."""
        return time.monotonic() - self.since >= VISIBLE_WITHIN

    def __call__(
        self,
        events: Sequence[NewEvent],
        transition: Transition | None,
        writes: Sequence[EffectWrite | SignalTake],
    ) -> int:
        logged = [*self.first, *events]
        try:
            self.store.create_run(
                self.run,
                logged,
                lease_owner=self.owner,
                now=self.clock.now(),
                ttl=self.ttl,
                transition=transition,
                writes=writes,
            )
        except LeaseLost:
            raise
        except Conflict:
            raise LeaseLost(
                f"run {self.run.id} was created by another execution of its parent meanwhile; "
                f"this one writes nothing of it"
            ) from None
        return len(logged)


def checked_input(d: AgentDef, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The input of a run of ``d`` as stored (``{"args", "kwargs"}``); EncodeError or
    InvalidInput, saying where, when it cannot be stored, or holds a literal Secret."""
    payload = {"args": list(args), "kwargs": kwargs}
    try:
        codec.encode(payload)
    except EncodeError as e:
        where = e.path.replace("$.args", "args", 1).replace("$.kwargs", "kwargs", 1)
        why = f"{e.type_name} at {where}"
        if e.type_name in (codec.CYCLE, codec.TOO_DEEP):  # the codec's words say which
            why = str(e).split(": ", 1)[-1].split(". ")[0].replace("$.", "")
        raise EncodeError(
            f"agent {d.name!r}: its input cannot be stored: {why}; "
            f"pass plain data to agents. No run was created.",
            path=e.path,
            type_name=e.type_name,
        ) from None
    # after the codec's check: a value too deep or with a cycle is refused there
    literal = secrets.literal_at(payload)
    if literal is not None:  # a resume elsewhere re-reads the input: the value is not there
        where = literal.replace("$.args", "args", 1).replace("$.kwargs", "kwargs", 1)
        raise InvalidInput(
            f"agent {d.name!r}: its input holds a tether.Secret at {where}, whose value "
            f"is never stored, so a resume (in another process, or after a crash) could "
            f"not read it back. Pass Secret.env('VAR') (a reference to an environment "
            f"variable, read where the run executes) instead. No run was created."
        )
    return payload


def created(
    d: AgentDef, args: tuple[Any, ...], kwargs: dict[str, Any], data: Any, at: float
) -> NewEvent:
    """The ``run.created`` of a new run of ``d`` whose ``data`` holds its input (``args``
    and ``kwargs``), encoded once: an input that cannot be stored is refused in the
    words of :func:`checked_input`, which walks it only then (or when the text holds a
    Secret's marker)."""
    try:
        event = ev.new(ev.RUN_CREATED, data, at)
    except EncodeError:
        checked_input(d, args, kwargs)  # raises, naming the place in the input
        raise
    if _SECRET_MARK in event.data:
        checked_input(d, args, kwargs)
    return event


def first_state(run_id: str, data: dict[str, Any], at: float) -> RunState:
    """What ``fold`` makes of a run created here (its ``run.created`` of ``data`` and its
    ``run.started``, both at ``at``), without decoding what was just encoded (the input
    is the caller's, not a decoded copy: nothing of the execution reads it)."""
    limits, caller = data.get("limits"), data.get("caller")
    return RunState(
        run_id,
        seq=2,
        agent=data["agent"],
        version=data.get("version"),
        status=RunStatus.RUNNING,
        input=data.get("input", {}),
        code=data.get("code", {}),
        created_at=at,
        updated_at=at,
        executions=1,
        budget={"limits": limits, "added": {}} if limits else None,
        caller=dict(caller) if caller else None,
    )


def outside_loop(d: AgentDef, run_id: str | None = None) -> None:
    """Refuse to execute ``async def`` agent ``d`` from sync code (``app.run``,
    ``app.resume``) in a thread that runs an event loop: they start a loop of their own,
    which Python refuses inside another, after the run was created or claimed.
    ``run_id``: the run claimed (its lease is given back by the caller), else none was
    created yet."""
    if not d.is_async or not loop_running():
        return
    done = (
        "No run was created."
        if run_id is None
        else f"Run {run_id} was not executed (its lease is given back): "
        f"`await app.aresume({run_id!r})` executes it."
    )
    raise InvalidState(
        f"agent {d.name!r} is async and this thread runs an event loop: from async code, "
        f"call `await app.arun(...)` and `await app.aresume(...)`; app.run and app.resume "
        f"start an event loop of their own, which Python refuses inside another. {done}"
    )


def loop_running() -> bool:
    """Whether this thread runs an event loop (where ``asyncio.run`` is refused)."""
    import asyncio  # only when asked: keeps `import tether` fast

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
