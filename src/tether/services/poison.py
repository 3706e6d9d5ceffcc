"""Poison runs: executions that end in an error outside the run's steps, counted.

An execution that ends in an error escaping the executor (a damaged log, a bug: not the
run's own failure, which the run records) is counted in the run's audit log, with the
seq its log ended at, not in memory: the next attempt may be another worker's. The
``poison_after``-th in a row with the log at the same seq fails the run (its log says
why) instead of giving it back to its queue again. A run whose log grows between
attempts is not poison: it moves.
"""

from __future__ import annotations

import logging

from tether.engine.deps import Deps
from tether.errors import TetherError
from tether.model import codec
from tether.model import events as ev
from tether.model.status import RunStatus
from tether.store import Lease, RunRecord, Store, Transition

log = logging.getLogger("tether.services.worker")
ATTEMPT_FAILED = "run.attempt_failed"  # the audit action that counts them


def count(
    deps: Deps, record: RunRecord, lease: Lease, error: Exception, actor: str, poison_after: int
) -> bool:
    """Count this fruitless execution of ``record``'s run (by worker ``actor``); fail the
    run when it is the ``poison_after``-th in a row at the same seq. Returns whether it
    failed the run (else the caller gives it back to its queue)."""
    store, now = deps.store, deps.clock.now()
    head = _head_seq(store, record.id)
    tries = 1 + sum(
        1
        for a in store.read_audit(record.id)
        if a.action == ATTEMPT_FAILED and _attempt_seq(a.detail) == head
    )
    detail = {"seq": head, "attempt": tries, "error": described(error)}
    store.record_audit(record.id, ATTEMPT_FAILED, codec.encode(detail), actor=actor, now=now)
    if tries >= poison_after and head is not None:
        _fail(deps, record, lease, head, tries, error, actor, poison_after)
        return True
    return False


def _fail(
    deps: Deps,
    record: RunRecord,
    lease: Lease,
    head: int,
    tries: int,
    error: Exception,
    actor: str,
    poison_after: int,
) -> None:
    """Fail a poison run: its log says why (run.failed), and no compensation runs (its
    work did not fail: what runs it did). `tether retry` takes it up again."""
    message = (
        f"run {record.id}: {tries} executions in a row ended in this error outside the "
        f"run's steps, with its log at seq {head} each time, so it is failed instead of "
        f"being taken again (poison_after={poison_after}): {described(error)}. Fix "
        f"the cause, then `tether retry {record.id}`."
    )
    now = deps.clock.now()
    failure = {"type": _type_name(error), "message": message, "at": now, "step": None}
    failure.update(position=None, kind=None, poison={"attempts": tries, "seq": head})
    event = ev.new(ev.RUN_FAILED, {"error": failure}, now, actor)
    failed = Transition(RunStatus.FAILED, release=True)
    deps.store.append(
        record.id, [event], expected_seq=head, epoch=lease.epoch, transition=failed, now=now
    )
    log.error("worker %s failed poison run %s: %s", actor, record.id, message)


def _head_seq(store: Store, run_id: str) -> int | None:
    """The seq the run's log ends at (read past any claim's prefetched copy), or None when
    the log cannot be read (a damaged row: the attempts are then counted whatever it is)."""
    try:
        loaded = store.load(run_id, upto=2**31)
    except TetherError:
        return None
    if loaded.events:
        return int(loaded.events[-1].seq)
    return loaded.snapshot.seq if loaded.snapshot is not None else 0


def _attempt_seq(detail: str) -> int | None:
    try:
        seq = codec.decode(detail).get("seq")
    except (TetherError, AttributeError):
        return -1  # not one of ours: never the same seq
    return seq if isinstance(seq, int) else None


def described(error: BaseException) -> str:
    """``Type: message`` of an error, as text that can be stored (whatever its str does)."""
    try:
        text = str(error)
    except Exception:
        text = "(its message cannot be shown: str() raised)"
    text = text.encode("utf-8", "backslashreplace").decode()  # a lone surrogate: escaped
    return f"{_type_name(error)}: {text[:2000]}"


def _type_name(error: BaseException) -> str:
    t = type(error)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
