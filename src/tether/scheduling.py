"""Schedules on the App (a mixin of :class:`tether.App`): ``app.schedule(agent,
cron=…|every=…)``, listed, paused, resumed and deleted; the workers fire them (see
:mod:`tether.services.schedules`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tether.model.durations import Duration
from tether.services.schedules import Schedules
from tether.store.schedule_rows import ScheduleRecord


class Scheduling:
    """The App's methods of this module (a mixin of :class:`tether.App`)."""

    _schedules: Schedules

    def schedule(
        self,
        agent: Callable[..., Any] | str,
        *args: Any,
        cron: str | None = None,
        every: Duration | None = None,
        name: str | None = None,
        queue: str = "default",
        catch_up: bool = False,
        **kwargs: Any,
    ) -> ScheduleRecord:
        """Start ``agent(*args, **kwargs)`` in ``queue`` at each tick of ``cron`` (five
        fields, UTC) or ``every`` period (``"30s"``, seconds): exactly one run per tick,
        however many workers fire it. Durable: a row named ``name`` (default: the agent's
        name); calling it again with the same name changes that schedule (its next tick
        kept unless its timing changed), so every process may declare it at start.
        ``catch_up``: fire every tick missed while no worker ran (else only the newest).
        Returns the stored schedule."""
        return self._schedules.define(
            agent, args, kwargs, cron=cron, every=every, name=name, queue=queue, catch_up=catch_up
        )

    def schedules(self) -> list[ScheduleRecord]:
        """Every schedule, by name, with its next tick and whether it is paused."""
        return self._schedules.all()

    def get_schedule(self, name: str) -> ScheduleRecord:
        """The schedule ``name``; NotFound naming the schedules there are."""
        return self._schedules.get(name)

    def pause_schedule(self, name: str) -> bool:
        """Fire no tick of schedule ``name`` until it is resumed; False when it was paused.
        NotFound for an unknown name."""
        return self._schedules.pause(name)

    def resume_schedule(self, name: str) -> bool:
        """Fire schedule ``name`` again from its next tick after now (the ticks while it was
        paused are not fired); False when it was not paused."""
        return self._schedules.resume(name)

    def unschedule(self, name: str) -> bool:
        """Delete schedule ``name`` (the runs it started stay); False when there was none."""
        return self._schedules.delete(name)
