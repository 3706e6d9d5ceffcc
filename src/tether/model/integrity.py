"""A run's log is checked when it is read: no gaps, and a row that agrees with it.

A log has no gaps (``seq`` is 1, 2, 3…), so a load that reads the events after a
snapshot at ``s`` must find ``s+1, s+2, …`` in order. One missing event (a row
deleted by hand, a restore that lost a page) would otherwise fold into a state that
looks whole: a step without its completion reads as never done, or a phantom step
appears. :func:`check_events` raises :class:`tether.RunDamaged` naming the missing
seqs. It costs one comparison per event, on the load that folds them anyway.

The row's status is written with the event that sets it, in one transaction, for
the finished statuses (completed, failed, cancelled). The others may legitimately
differ from the log for a while: a claim makes a queued run ``running`` before its
``run.started``, a worker that gives a run back makes it ``queued`` without an
event, a signal wakes a waiting run by its row. So :func:`check_row` refuses only a
row and a log that disagree about the run being finished.

What this cannot see: the last events of an unfinished run deleted together (the
row does not record its last seq), nor events altered in place.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.errors import RunDamaged
from tether.model.events import Event
from tether.model.status import FINISHED


def check_events(run_id: str, events: Sequence[Event], after: int) -> None:
    """Raise RunDamaged unless ``events`` are seqs ``after+1, after+2, …`` in order."""
    expected = after + 1
    for e in events:
        if e.seq != expected:
            _gaps(run_id, events, after)
        expected += 1


def _gaps(run_id: str, events: Sequence[Event], after: int) -> None:
    missing: list[tuple[int, int]] = []
    expected = after + 1
    for e in events:
        if e.seq > expected:
            missing.append((expected, e.seq - 1))
        expected = max(expected, e.seq + 1)
    if not missing:  # out of order or repeated: no range to name
        raise RunDamaged(run_id, f"its events after seq {after} are out of order")
    shown = ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in missing[:10])
    more = f" and {len(missing) - 10} more gaps" if len(missing) > 10 else ""
    raise RunDamaged(
        run_id,
        f"its log has no event at seq {shown}{more} (a log has no gaps; "
        f"it has {len(events)} events after seq {after}, up to seq {events[-1].seq})",
        tuple(missing),
    )


def agrees(row_status: str, log_status: str) -> bool:
    """Whether a row's status can stand beside the status its log folds to."""
    if row_status in FINISHED or log_status in FINISHED:
        return row_status == log_status
    return True


def check_row(run_id: str, row_status: str, log_status: str, seq: int) -> None:
    """Raise RunDamaged when the row and the log disagree about the run being finished."""
    if not agrees(row_status, log_status):
        raise RunDamaged(
            run_id,
            f"its row says {row_status} but its log (seq 1–{seq}) says {log_status}; "
            f"events are missing from the log, or the row was changed by hand",
        )
