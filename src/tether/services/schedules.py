"""Schedules: an agent started at each tick of a cron line or a period, by the workers.

::

    app.schedule(report, cron="*/5 * * * *", name="report", queue="default")
    app.schedule(poll_inbox, every="30s")
    app.worker(queues=["default"]).run()        # workers fire the due ticks

A schedule is a row (schema 16): the agent and its inputs, its timing (a five-field cron
line in UTC, :mod:`tether.model.cron`, or a period: ticks at the multiples of it since
the epoch), its queue, and its next tick. Each worker, between claims (every ``poll`` at
most), fires the due ticks of the schedules of its queues: it enqueues the tick's run,
whose id is derived from the schedule and the tick (``NAME@<tick in ms>``), then moves
the schedule's next tick on with a compare-and-set. Two workers that race on one tick
both try to create the same run and one wins, so a tick has exactly one run whatever
the number of workers; a worker killed between the two writes leaves the tick to the
next worker, which finds its run already there.

Missed ticks (no worker was running): with ``catch_up=False`` (the default) only the
newest due tick is fired and the older ones are skipped; with ``catch_up=True`` every
missed tick is fired, oldest first (at most :data:`CATCH_UP_MAX` per pass). A paused
schedule fires nothing; resumed, it starts from its next tick after now.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from tether.engine.deps import Deps
from tether.engine.registry import Registry
from tether.errors import InvalidInput, NotFound, StoreUnavailable, TetherError
from tether.model import codec, inputs
from tether.model.cron import parse
from tether.model.durations import Duration, parse_duration
from tether.services.queues import Queues, Start
from tether.store.schedule_rows import ScheduleRecord

log = logging.getLogger("tether.services.schedules")
CATCH_UP_MAX = 100  # missed ticks of one schedule fired per pass (catch_up=True)
NAME_MAX = 100  # a schedule's name, within a run id with its tick
_SCAN_MAX = 10_000  # ticks stepped over to find the newest due one (catch_up=False)


def spec_of(cron: str | None, every: Duration | None) -> str:
    """The stored timing: ``cron:<line>`` or ``every:<seconds>``; InvalidInput unless
    exactly one is given and it is valid."""
    if (cron is None) == (every is None):
        raise InvalidInput("a schedule needs cron='*/5 * * * *' or every='30s' (one of them)")
    if cron is not None:
        try:
            return "cron:" + " ".join(parse(cron).text.split())
        except ValueError as e:
            raise InvalidInput(str(e)) from None
    seconds = parse_duration(every, what="every")
    if seconds is None or not 0.001 <= seconds < math.inf:
        raise InvalidInput(f"every is a period of at least 1 ms, not {every!r}")
    return f"every:{seconds!r}"


def next_tick(spec: str) -> Callable[[float], float]:
    """``f(t)``: the schedule's first tick strictly after ``t``."""
    kind, _, value = spec.partition(":")
    if kind == "cron":
        return parse(value).next_after
    period = float(value)
    return lambda t: (math.floor(t / period + 1e-9) + 1) * period


def tick_run_id(name: str, tick: float) -> str:
    """The id of the run of ``name``'s tick at ``tick``: the same in every worker."""
    return f"{name}@{round(tick * 1000)}"


class Schedules:
    """The schedules of a store: define, list, pause, resume, delete, and fire."""

    def __init__(self, deps: Deps, registry: Registry, queues: Queues) -> None:
        self.deps = deps
        self.registry = registry
        self.queues = queues

    def define(
        self,
        agent: Callable[..., Any] | str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        cron: str | None,
        every: Duration | None,
        name: str | None,
        queue: str,
        catch_up: bool,
    ) -> ScheduleRecord:
        """Add the schedule, or change the one of that name (see :meth:`App.schedule`)."""
        d = self.registry.resolve(agent)
        spec = spec_of(cron, every)
        name = _name(d.name if name is None else name)
        inputs.name(queue, "queue")
        if not isinstance(catch_up, bool):
            raise InvalidInput(f"catch_up is True or False, not {inputs.show(catch_up)}")
        self.queues.executor.check_input(d, args, kwargs)
        now = self.deps.clock.now()
        data = codec.encode({"args": list(args), "kwargs": kwargs})
        row = ScheduleRecord(
            name, d.name, spec, data, queue, catch_up, False, next_tick(spec)(now), None, now, now
        )
        return self.deps.store.put_schedule(row)

    def all(self) -> list[ScheduleRecord]:
        """Every schedule, by name."""
        return self.deps.store.list_schedules()

    def get(self, name: str) -> ScheduleRecord:
        """The schedule ``name``; NotFound naming the ones there are."""
        found = self.deps.store.get_schedule(inputs.name(name, "schedule name"))
        if found is None:
            names = ", ".join(s.name for s in self.all()) or "none"
            raise NotFound(f"no schedule {name!r} (the schedules: {names})")
        return found

    def pause(self, name: str) -> bool:
        """Pause ``name``; False when it was paused already."""
        self.get(name)
        return self.deps.store.pause_schedule(name, now=self.deps.clock.now())

    def resume(self, name: str) -> bool:
        """Resume ``name`` from its next tick after now; False when it was not paused."""
        now = self.deps.clock.now()
        after = next_tick(self.get(name).spec)(now)
        return self.deps.store.resume_schedule(name, next_at=after, now=now)

    def delete(self, name: str) -> bool:
        """Forget ``name`` (its runs stay); False when there was none."""
        return self.deps.store.delete_schedule(inputs.name(name, "schedule name"))

    # -- firing (workers) ---------------------------------------------------------------

    def fire_due(self, queues: Sequence[str]) -> list[str]:
        """Fire the due ticks of the unpaused schedules of ``queues``; the ids of the runs
        they have (created here or by a worker that raced this one). A schedule that
        cannot fire (its agent unknown in this process, its queue full) is logged and left
        due, for another worker or the next pass."""
        now = self.deps.clock.now()
        fired: list[str] = []
        for s in self.deps.store.list_schedules():
            if s.paused or s.next_at > now or s.queue not in queues:
                continue
            try:
                fired += self._fire(s, now)
            except StoreUnavailable:
                raise  # the worker waits for the database, then fires it
            except TetherError as e:  # its agent unknown here, its queue full: left due
                log.warning("schedule %s cannot fire here: %s", s.name, e)
        return fired

    def _fire(self, s: ScheduleRecord, now: float) -> list[str]:
        after = next_tick(s.spec)
        ticks = _due(s.next_at, now, after, s.catch_up)
        data = codec.decode(s.inputs, where=f"schedule {s.name!r}")
        fired = []
        for tick in ticks:
            start = Start(queue=s.queue, run_id=tick_run_id(s.name, tick))
            args = tuple(data["args"])
            fired.append(self.queues.enqueue(None, s.agent, args, data["kwargs"], start))
        store, last = self.deps.store, ticks[-1]
        store.advance_schedule(s.name, from_at=s.next_at, to_at=after(last), tick=last, now=now)
        return fired


def _due(first: float, now: float, after: Callable[[float], float], catch_up: bool) -> list[float]:
    """The ticks to fire from ``first`` (due) up to ``now``: every one (at most
    CATCH_UP_MAX), or only the newest."""
    ticks = [first]
    while len(ticks) < (CATCH_UP_MAX if catch_up else _SCAN_MAX):
        t = after(ticks[-1])
        if t > now:
            break
        ticks.append(t)
    return ticks if catch_up else ticks[-1:]


def _name(name: Any) -> str:
    inputs.run_id(name, "schedule name")
    if len(name) > NAME_MAX:
        raise InvalidInput(f"schedule name is {len(name)} characters long; at most {NAME_MAX}")
    return str(name)
