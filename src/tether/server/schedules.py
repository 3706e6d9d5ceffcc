"""The schedules' routes: list them, read one, pause, resume or delete one (see
:mod:`tether.services.schedules`; the same calls as ``tether schedules`` and ``tether
schedule``). Schedules belong to no tenant: a tenant's token sees none, and the acts need
an admin's (:mod:`tether.server.access`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from tether.server import schemas, views
from tether.server.deps import Caller

router = APIRouter(
    prefix="/api/schedules",
    tags=["schedules"],
    responses={code: {"model": schemas.ErrorBody} for code in (401, 403, 404, 503)},
)

Name = Annotated[str, Path(min_length=1, max_length=200)]


@router.get("", response_model=list[schemas.ScheduleOut])
def schedules(caller: Caller) -> list[schemas.ScheduleOut]:
    """Every schedule, by name: its agent, timing, queue, whether it is paused, its next
    tick and the last one fired (a tenant's token: none)."""
    return [views.schedule(s) for s in caller.schedules()]


@router.get("/{name}", response_model=schemas.ScheduleOut)
def schedule(caller: Caller, name: Name) -> schemas.ScheduleOut:
    """One schedule; 404 naming the schedules there are for an unknown name."""
    return views.schedule(caller.schedule(name))


def _act(caller: Caller, action: str, name: str) -> schemas.ScheduleDone:
    after, changed = caller.change_schedule(action, name)
    return schemas.ScheduleDone(
        name=name, changed=changed, schedule=None if after is None else views.schedule(after)
    )


@router.post("/{name}/pause", response_model=schemas.ScheduleDone)
def pause(caller: Caller, name: Name) -> schemas.ScheduleDone:
    """Fire no tick of it until it is resumed (``changed`` False: it was paused). Admin."""
    return _act(caller, "pause", name)


@router.post("/{name}/resume", response_model=schemas.ScheduleDone)
def resume(caller: Caller, name: Name) -> schemas.ScheduleDone:
    """Fire it again from its next tick after now; the paused ticks are not fired
    (``changed`` False: it was not paused). Admin."""
    return _act(caller, "resume", name)


@router.delete("/{name}", response_model=schemas.ScheduleDone)
def delete(caller: Caller, name: Name) -> schemas.ScheduleDone:
    """Forget it (the runs it started stay). Admin."""
    return _act(caller, "delete", name)
