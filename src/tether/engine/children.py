"""Child runs: ``run.child`` starts a run linked to its parent, ``run.join`` waits for it.

A child is an ordinary queued run (any worker executes it) whose id derives from its
parent's id and the position of the call (``{parent}~{pos}``), and whose ``run.created``
records its ``caller`` (``{"run": parent, "pos": position}``). The start is journaled by
position: a replay returns the recorded id, and a parent that crashed between the
child's creation and the record finds the child by its id (the queue's insert is
idempotent on it), so a child is never started twice.

``run.join`` reads the children's rows. When all are finished it records their outcomes
(output, or failure) as its step; a replay returns (or raises) the same. While one is
unfinished the parent waits (``waiting_for`` ``child:ID``, the first unfinished child),
holding no lease and no process. A child's end wakes its parent right after the commit
that ends it (:func:`wake_caller`, called by the journal), and the parent re-checks the
row it waits on once its own wait is committed, so a child that ended in between is
not missed. A wake lost to a crash between the two commits is caught by the parent's
due time: a waiting parent is claimable every :data:`JOIN_RECHECK` seconds, and a claim
re-checks its children.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.engine.calls import Slot
from tether.engine.states import States
from tether.errors import ChildFailed, InvalidInput, TetherError
from tether.model import events as ev
from tether.model import inputs
from tether.model.state import RunState
from tether.model.status import FINISHED, RunStatus

if TYPE_CHECKING:
    from tether.engine.journal import Journal
    from tether.engine.registry import AgentDef

JOIN_RECHECK = 30.0  # seconds: a waiting parent re-checks its children at least this often
WAITING_PREFIX = "child:"  # a parent's waiting_for: child:RUN_ID


@dataclass(frozen=True, slots=True)
class Spawner:
    """How a run starts its children: ``resolve`` an agent (a function or a name) to its
    definition, ``start(d, args, kwargs, queue, run_id, caller, tenant, session=None,
    handoff=None)`` enqueues a run of it with that id (the existing run's id when it
    exists) and returns the id; a handoff's target runs in ``session`` and its
    ``run.created`` records ``handoff`` (engine.handoffs)."""

    resolve: Callable[[Any], AgentDef]
    start: Callable[..., str]
    # inline children (engine.inline): ``inline(d, args, kwargs, queue, run_id, caller,
    # tenant, later)`` creates the child (``later``: with its first append, engine.births),
    # or claims it when it exists unfinished and free, and returns it prepared to execute
    # here (else None); ``execute(prepared)`` executes it in this thread, ``aexecute(
    # prepared)`` in the running event loop (both return when it ends, waits or is
    # blocked: its outcome when it ended completed or failed, else None)
    inline: Callable[..., Any] | None = None
    execute: Callable[[Any], dict[str, Any] | None] | None = None
    aexecute: Callable[[Any], Awaitable[dict[str, Any] | None]] | None = None
    # ``start_many(d, calls, queue, tenant)``: children of one agent enqueued in one
    # transaction (``calls``: each one's args, kwargs, id and caller); their ids
    start_many: Callable[..., list[str]] | None = None


def child_id(parent_id: str, pos: int) -> str:
    """The id of the child that ``parent_id`` starts at position ``pos``."""
    return f"{parent_id}~{pos}"


def take(j: Journal, agent: Any, queue: str) -> tuple[Spawner, AgentDef, Slot]:
    """What a ``run.child`` call takes first: the App's spawner, the agent's definition
    (checked), and the call's position."""
    spawner = j.spawner
    if spawner is None:
        raise TetherError(f"run {j.run_id}: run.child needs a run executed by a tether App")
    d = spawner.resolve(agent)
    inputs.name(queue, "queue")
    return spawner, d, j.slot("child", d.name)


def start_core(
    j: Journal, agent: Any, args: tuple[Any, ...], kwargs: dict[str, Any], queue: str, tenant: Any
) -> str:
    """Start a child run of ``agent`` (its position taken now), or return the recorded id."""
    spawner, d, slot = take(j, agent, queue)
    if j.trace is not None:
        return str(
            j.trace.gate(slot, lambda: _start(j, slot, spawner, d, args, kwargs, queue, tenant))
        )
    return _start(j, slot, spawner, d, args, kwargs, queue, tenant)


def _start(
    j: Journal,
    slot: Slot,
    spawner: Spawner,
    d: AgentDef,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    queue: str,
    tenant: Any,
) -> str:
    if slot.done:
        assert slot.recorded is not None
        return str(slot.recorded.output)
    began = j.clock.now()
    caller = {"run": j.run_id, "pos": slot.pos}
    tenant = tenant() if callable(tenant) else tenant
    rid = spawner.start(d, args, kwargs, queue, child_id(j.run_id, slot.pos), caller, tenant)
    j.record_success(slot, 1, None, rid, j.clock.now() - began)
    return rid


def start_many_core(
    j: Journal, agent: Any, items: Iterable[Any], queue: str, tenant: Callable[[], Any]
) -> list[str]:
    """``run.children``: a child run of ``agent`` per item (``agent(run, item)``), their
    positions taken now in item order, created in one transaction; on replay the
    recorded ids (the ones not recorded yet are found by their ids, not started again)."""
    items = inputs.items(items, f"run {j.run_id}: run.children")
    if not items:
        return []
    spawner, d, first = take(j, agent, queue)
    slots = [first, *(j.slot("child", d.name) for _ in items[1:])]
    todo = [(slot, item) for slot, item in zip(slots, items, strict=True) if not slot.done]
    if todo:
        assert spawner.start_many is not None, "an App's spawner starts batches"
        began = j.clock.now()
        calls: list[tuple[tuple[Any, ...], dict[str, Any], str, dict[str, Any]]] = [
            ((item,), {}, child_id(j.run_id, slot.pos), {"run": j.run_id, "pos": slot.pos})
            for slot, item in todo
        ]
        spawner.start_many(d, calls, queue, tenant())
        for slot, _ in todo:
            rid = child_id(j.run_id, slot.pos)
            j.record_success(slot, 1, None, rid, j.clock.now() - began)
    return [child_id(j.run_id, slot.pos) for slot in slots]


def join_core(j: Journal, children: str | Iterable[str], name: str) -> Any:
    """The children's outputs once all are finished (one output for one id); raises
    ChildFailed for the first failed (or cancelled) one, in the order given."""
    ids = _ids(j.run_id, children)
    slot = j.slot("join", name)
    if j.trace is not None:
        return j.trace.gate(slot, lambda: _join(j, slot, ids, isinstance(children, str)))
    return _join(j, slot, ids, isinstance(children, str))


def _ids(run_id: str, children: str | Iterable[str]) -> list[str]:
    one = isinstance(children, str) or not hasattr(children, "__iter__")
    ids: list[Any] = [children] if one else list(children)  # not ids (below): refused
    if not ids or not all(isinstance(c, str) and c for c in ids):
        raise InvalidInput(
            f"run {run_id}: run.join takes a child run's id (what run.child returned) or a "
            f"non-empty list of them, not {children!r}"
        )
    return ids


def _join(j: Journal, slot: Slot, ids: list[str], one: bool) -> Any:
    rec = slot.recorded
    if rec is not None and slot.done:
        return _joined(j.run_id, rec.output, one)
    began = j.clock.now()
    unfinished = next((c for c in ids if j.store.get_run(c).status not in FINISHED), None)
    if unfinished is None:
        outcomes = [outcome(States(j.store, j.clock).load(c)) for c in ids]
        since = rec.started_at if rec is not None and rec.started_at is not None else began
        j.record_success(slot, 1, None, outcomes, j.clock.now() - since)
        return _joined(j.run_id, outcomes, one)
    waiting_for = WAITING_PREFIX + unfinished
    events = []
    if rec is None:
        data = {"pos": slot.pos, "name": slot.name, "children": ids}
        events.append(j.event(ev.JOIN_STARTED, data))
    suspended = j.suspend(events, waiting_for, j.clock.now() + JOIN_RECHECK)
    # the child may have ended between the read above and this wait's commit: its wake
    # found no waiting parent then, so the parent wakes itself
    if j.store.get_run(unfinished).status in FINISHED:
        j.store.wake(j.run_id, waiting_for, now=j.clock.now())
    raise suspended


def outcome(state: RunState) -> dict[str, Any]:
    """What a join records of one finished child: its status, output or failure."""
    out: dict[str, Any] = {"run": state.run_id, "status": str(state.status)}
    if state.status == RunStatus.COMPLETED:
        out["output"] = state.output
    else:
        failure = dict(state.failure or {})
        out["error"] = {
            k: failure.get(k) for k in ("type", "message", "step", "position") if k in failure
        }
    return out


def _joined(run_id: str, outcomes: Any, one: bool) -> Any:
    for o in outcomes:
        if o.get("status") != RunStatus.COMPLETED:
            raise ChildFailed(run_id, o["run"], {"status": o.get("status"), **o.get("error", {})})
    outputs = [o.get("output") for o in outcomes]
    return outputs[0] if one else outputs


def wake_caller(j: Journal, status: str) -> None:
    """A child run just ended (``status``, committed): wake its parent if it waits for it.
    Best effort: a failed wake is caught by the parent's due time (:data:`JOIN_RECHECK`)."""
    caller = j.caller
    if caller is None or status not in FINISHED:
        return
    parent, waiting_for = str(caller["run"]), WAITING_PREFIX + j.run_id
    with contextlib.suppress(TetherError):
        # a read first: a parent of many children waits for one of them at a time, and a
        # read costs less than a write transaction. A parent that starts waiting for this
        # child after the read re-reads the child's row after its wait's commit (_join),
        # which follows this end's commit: it finds the child finished and wakes itself.
        if j.store.get_run(parent).waiting_for == waiting_for:
            j.store.wake(parent, waiting_for, now=j.clock.now())


def children_of(state: RunState) -> list[str]:
    """The ids of the children a run started (``child`` steps) or handed off to
    (``handoff`` steps, engine.handoffs), in the order of their positions."""
    out = []
    for s in state.steps:
        if s.kind == "child" and s.output is not None:
            out.append(str(s.output))
        elif s.kind == "child" and s.status == "waiting":  # an inline child not finished
            out.append(child_id(state.run_id, s.position))
        elif s.kind == "handoff" and isinstance(s.output, Mapping):
            out.append(str(s.output["run"]))
    return out


def waiting_hint(state: RunState, waiting: Mapping[str, Any]) -> str:
    """What a run waiting for its children waits for, for `tether resume`'s refusal."""
    kids = ", ".join(waiting.get("children") or ())
    return (
        f"it waits for its child runs ({kids}) to finish: workers execute them "
        f"(`tether worker`), `tether show {state.run_id}` lists them"
    )
