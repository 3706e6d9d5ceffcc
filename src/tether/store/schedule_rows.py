"""The rows of schedules: what starts an agent's run at each tick of a cron line or a
period (tether.services.schedules).

:class:`ScheduleData` is the storage role; :class:`ScheduleRows` implements it once for
both backends on the store's ``transaction()`` and the named queries of
``sql/<dialect>/schedules.sql`` (schema 16). The store keeps the rows and moves a
schedule's next tick with a compare-and-set; when ticks fall and which runs they start
is the service's.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A schedule: the ``agent`` it starts with ``inputs`` (JSON text) in ``queue``, when
    (``spec``: ``cron:<line>`` or ``every:<seconds>``), whether missed ticks are all
    fired (``catch_up``), whether it is ``paused``, its next tick (``next_at``) and the
    last one fired (``last_tick``)."""

    name: str
    agent: str
    spec: str
    inputs: str
    queue: str
    catch_up: bool
    paused: bool
    next_at: float
    last_tick: float | None
    created_at: float
    updated_at: float


def _record(r: Sequence[Any]) -> ScheduleRecord:
    last = None if r[8] is None else float(r[8])
    return ScheduleRecord(
        r[0], r[1], r[2], r[3], r[4], bool(r[5]), bool(r[6]), float(r[7]), last, *map(float, r[9:])
    )


class ScheduleData(Protocol):
    """Schedules (tether.services.schedules): their rows and their next ticks."""

    def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        """Add ``schedule``, or change the one of its name (its agent, inputs, queue,
        timing and catch-up; paused stays as it was, and its next tick unless its
        ``spec`` changed); return the stored row."""
        ...

    def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule, by name."""
        ...

    def get_schedule(self, name: str) -> ScheduleRecord | None:
        """The schedule ``name``, or None."""
        ...

    def advance_schedule(
        self, name: str, *, from_at: float, to_at: float, tick: float, now: float
    ) -> bool:
        """Move an unpaused schedule's next tick from ``from_at`` to ``to_at`` (``tick``:
        the last one fired); False, nothing changed, when it is not at ``from_at`` any more
        (another worker moved it first) or is paused."""
        ...

    def pause_schedule(self, name: str, *, now: float) -> bool:
        """Pause the schedule; False when it was paused already or does not exist."""
        ...

    def resume_schedule(self, name: str, *, next_at: float, now: float) -> bool:
        """Resume a paused schedule from ``next_at`` (the ticks while it was paused are
        not fired); False when it was not paused or does not exist."""
        ...

    def delete_schedule(self, name: str) -> bool:
        """Forget the schedule (the runs it started stay); whether it existed."""
        ...


class ScheduleRows:
    """:class:`ScheduleData` on a store's ``transaction()`` (a mixin of both backends)."""

    if TYPE_CHECKING:

        def transaction(self) -> AbstractContextManager[Any]: ...

        def _rows_sql(self, file: str) -> dict[str, str]: ...

    def _one(self, name: str, params: dict[str, Any]) -> int:
        with self.transaction() as conn:
            return int(conn.execute(self._rows_sql("schedules")[name], params).rowcount)

    def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        q = self._rows_sql("schedules")
        params = {
            "name": schedule.name,
            "agent": schedule.agent,
            "spec": schedule.spec,
            "inputs": schedule.inputs,
            "queue": schedule.queue,
            "catch_up": int(schedule.catch_up),
            "next_at": schedule.next_at,
            "now": schedule.updated_at,
        }
        with self.transaction() as conn:
            conn.execute(q["put_schedule"], params)
            return _record(conn.execute(q["get_schedule"], params).fetchone())

    def list_schedules(self) -> list[ScheduleRecord]:
        with self.transaction() as conn:
            rows = conn.execute(self._rows_sql("schedules")["list_schedules"]).fetchall()
        return [_record(r) for r in rows]

    def get_schedule(self, name: str) -> ScheduleRecord | None:
        with self.transaction() as conn:
            row = conn.execute(self._rows_sql("schedules")["get_schedule"], {"name": name})
            found = row.fetchone()
        return None if found is None else _record(found)

    def advance_schedule(
        self, name: str, *, from_at: float, to_at: float, tick: float, now: float
    ) -> bool:
        params = {"name": name, "from_at": from_at, "to_at": to_at, "tick": tick, "now": now}
        return self._one("advance_schedule", params) == 1

    def pause_schedule(self, name: str, *, now: float) -> bool:
        return self._one("pause_schedule", {"name": name, "now": now}) == 1

    def resume_schedule(self, name: str, *, next_at: float, now: float) -> bool:
        return self._one("resume_schedule", {"name": name, "next_at": next_at, "now": now}) == 1

    def delete_schedule(self, name: str) -> bool:
        return self._one("delete_schedule", {"name": name}) == 1
