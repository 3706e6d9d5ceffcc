"""Inline children: ``run.child(agent, ..., inline=True)`` executes the child at once, in
the parent's process and thread, and returns its output (issue 31).

The child is a run of its own, as a queued child is: its id is ``{parent}~{pos}``, its
``run.created`` names its ``caller``, it has its own log and lease, and its row names a
queue (the one given), from which a worker takes it over when the parent's process dies
under it (its lease expires). Only the execution differs: no queue, no claim, no
wake-up; the parent calls it as ``app.run`` would, then records, at the same position,
a ``child`` step whose output is the child's id and whose ``detail`` holds the child's
outcome (its output, or its failure), so a replay returns, or raises, the same.

Crashes (each write is idempotent on the child's id, and the parent records the outcome
only once the child's end is committed):

- before the child's creation committed: nothing exists; the resumed parent creates it;
- during the child: its completed steps are in its own log; the resumed parent finds the
  child unfinished and executes it inline again when its lease is free (a dead local
  holder's is taken over at once, another machine's expires), so it resumes from its
  log; when another process holds it (a worker took it over), the parent waits for it as
  ``run.join`` does (no process, woken by the child's end);
- after the child ended, before the parent recorded it: the resumed parent finds the
  child finished and records its outcome; nothing executes again.

A child that waits (an approval, a signal, a long sleep, its own children) or is blocked
makes the parent wait for it too (``waiting_for`` ``child:ID``); a worker, or a resume of
the parent, goes on when it can. :mod:`tether.engine.children` has the queued kind.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from tether.engine import children
from tether.engine.calls import Slot
from tether.engine.journal import Journal
from tether.engine.states import States
from tether.errors import ChildFailed, InvalidInput, LeaseLost
from tether.model import events as ev
from tether.model.status import FINISHED

ChildCall = tuple[Any, tuple[Any, ...], dict[str, Any], str, Callable[[], str | None]]


def child(j: Journal, call: ChildCall, inline: Any = True) -> Any:
    """``run.child(..., inline=True)`` of a ``Run``; ``call``: the agent, its args and
    kwargs, the queue, and the tenant's getter. The child's output (see the module).
    Traced, the call is a span, and the child's run a span under it."""
    taken = take(j, call, inline)
    slot = taken[1]

    def executed(later: bool = j.lease.epoch == 1) -> Any:
        began, slot, rid, job = prepare(j, call, taken, later)
        if job is None:
            return end(j, slot, rid, began, None)
        assert j.spawner is not None and j.spawner.execute is not None
        try:
            ended = j.spawner.execute(job)
        except LeaseLost:
            if job[1].birth is None:
                raise
            return executed(False)  # created meanwhile by another execution: see births
        return end(j, slot, rid, began, ended)

    return j.trace.gate(slot, executed) if j.trace is not None else executed()


def achild(j: Journal, call: ChildCall, inline: Any = True) -> Coroutine[Any, Any, Any]:
    """:func:`child` of an ``AsyncRun``: its position taken (and the child created) now,
    the child executed when the coroutine is awaited (traced: one span around both)."""
    taken = take(j, call, inline)

    def now() -> tuple[float, Slot, str, Any]:
        return prepare(j, call, taken, j.lease.epoch == 1)

    async def later(prepared: tuple[float, Slot, str, Any]) -> Any:
        began, slot, rid, job = prepared
        if job is None:
            return end(j, slot, rid, began, None)
        assert j.spawner is not None and j.spawner.aexecute is not None
        try:
            ended = await j.spawner.aexecute(job)
        except LeaseLost:
            if job[1].birth is None:
                raise
            return await later(prepare(j, call, taken, False))  # see child
        return end(j, slot, rid, began, ended)

    if j.trace is not None:
        return j.trace.agate(taken[1], now, later)
    return later(now())


def take(j: Journal, call: ChildCall, inline: Any) -> tuple[float, Slot, Any]:
    """Take the position of an inline child: the time, the position, the agent."""
    if inline is not True:
        raise InvalidInput(f"run {j.run_id}: run.child's inline is True or False, not {inline!r}")
    began = j.clock.now()
    _, d, slot = children.take(j, call[0], call[3])
    return began, slot, d


def prepare(
    j: Journal, call: ChildCall, taken: tuple[float, Slot, Any], later: bool
) -> tuple[float, Slot, str, Any]:
    """The child's id and what to execute: the child prepared under this process's
    lease, or None (the position is recorded, or the child is finished, waits, or
    executes elsewhere: :func:`end` says which). ``later``: the parent's first
    execution, which created no child at this position yet (its first lease: epoch 1),
    creates it with its first append (engine.births) instead of at once."""
    began, slot, d = taken
    _, args, kwargs, queue, tenant = call
    rid = children.child_id(j.run_id, slot.pos)
    if slot.done:
        return began, slot, rid, None
    caller = {"run": j.run_id, "pos": slot.pos}
    assert j.spawner is not None and j.spawner.inline is not None
    job = j.spawner.inline(d, args, kwargs, queue, rid, caller, tenant(), later)
    if job is not None:
        j.inline_child = job[1]  # a cancel of the parent reaches the child (Journal.interrupt)
    return began, slot, rid, job


def end(j: Journal, slot: Slot, rid: str, began: float, ended: dict[str, Any] | None) -> Any:
    """After the child's execution here (``ended``: its outcome when it ended so), or
    none: the recorded outcome on replay; the child's outcome, recorded now, when it is
    finished; else the parent waits for it. Returns the child's output, or raises
    ChildFailed (a failed or cancelled child)."""
    j.inline_child = None
    rec = slot.recorded
    if slot.done:
        assert rec is not None
        if rec.detail is None:  # a dry replay's what-if gave this position a value
            return rec.output
        return _outcome(j, rec.detail["outcome"])
    if ended is not None or j.store.get_run(rid).status in FINISHED:
        o = ended or children.outcome(States(j.store, j.clock).load(rid))
        detail = {"inline": True, "outcome": o}
        j.record_success(slot, 1, None, rid, j.clock.now() - began, extra={"detail": detail})
        if j.interrupted is not None:  # the parent was cancelled (or stopped) meanwhile
            raise j.interrupted
        return _outcome(j, o)
    waiting_for = children.WAITING_PREFIX + rid
    events = []
    if rec is None:
        data = {"pos": slot.pos, "name": slot.name, "children": [rid]}
        events.append(j.event(ev.JOIN_STARTED, {**data, "kind": "child", "inline": True}))
    suspended = j.suspend(events, waiting_for, j.clock.now() + children.JOIN_RECHECK)
    if j.store.get_run(rid).status in FINISHED:  # ended before the wait's commit: see _join
        j.store.wake(j.run_id, waiting_for, now=j.clock.now())
    raise suspended


def _outcome(j: Journal, o: dict[str, Any]) -> Any:
    if o.get("status") != "completed":
        raise ChildFailed(j.run_id, o["run"], {"status": o.get("status"), **o.get("error", {})})
    return o.get("output")
