"""resume and aresume are one path: the same preparation and the same next step, so every
case ends the same through both (before, aresume re-executed the agent of a run whose
compensation a crash had interrupted, instead of finishing the compensation)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

import tether

pytestmark = pytest.mark.conformance

ENTRIES: dict[str, Callable[[tether.App, str], tether.RunHandle]] = {
    "resume": lambda app, rid: app.resume(rid),
    "aresume": lambda app, rid: asyncio.run(app.aresume(rid)),
}


class Crash(BaseException):
    """Stands for the process dying (not an Exception: nothing records it)."""


class Trip:
    """Two bookings with undos, then a failing payment. The undo of the first booking
    (the last one undone) crashes once, interrupting the compensation."""

    def __init__(self, app: tether.App, is_async: bool) -> None:
        self.paid = 0  # how many times the agent's failing step ran
        self.undone: list[str] = []
        self.crash = True

        def undo_now(name: str) -> None:
            if name == "flight" and self.crash:
                self.crash = False
                raise Crash
            self.undone.append(name)

        def book_now(name: str) -> str:
            return f"booked {name}"

        def pay() -> None:
            self.paid += 1
            raise ValueError("card declined")

        if is_async:

            async def aundo(result: Any, name: str) -> None:
                await asyncio.sleep(0)
                undo_now(name)

            @app.tool(risk="write", compensate=aundo, name="book")
            async def abook(name: str) -> str:
                await asyncio.sleep(0)
                return book_now(name)

            @app.agent(name="trip")
            async def atrip(run: tether.AsyncRun) -> None:
                for name in ("flight", "hotel"):
                    await run.tool(abook, name)
                await run.step("pay", pay)

            self.agent: Any = atrip
            return

        def undo(result: Any, name: str) -> None:
            undo_now(name)

        @app.tool(risk="write", compensate=undo)
        def book(name: str) -> str:
            return book_now(name)

        @app.agent
        def trip(run: tether.Run) -> None:
            for name in ("flight", "hotel"):
                run.tool(book, name)
            run.step("pay", pay)

        self.agent = trip


@pytest.mark.parametrize("is_async", [False, True], ids=["def", "async"])
@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_an_interrupted_compensation_is_finished_not_the_agent_run_again(
    app: tether.App, entry: str, is_async: bool
) -> None:
    trip = Trip(app, is_async)
    with pytest.raises(Crash):
        app.run(trip.agent)
    rid = app.runs()[0].id
    state = app.get(rid)
    assert state.compensating is not None and trip.undone == ["hotel"] and trip.paid == 1
    with pytest.raises(tether.RunFailed, match="card declined"):
        ENTRIES[entry](app, rid)
    assert trip.undone == ["hotel", "flight"]  # each undone once
    assert trip.paid == 1  # the agent did not run again
    assert app.get(rid).status == "failed"


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_every_case_ends_the_same_through_both_entry_points(app: tether.App, entry: str) -> None:
    version = {"v": 1}

    @app.agent
    def agent(run: tether.Run) -> str:
        run.step("a" if version["v"] == 1 else "b", lambda: 1)
        return str(run.wait("go"))

    go = ENTRIES[entry]
    waiting = app.run(agent).id
    with pytest.raises(tether.InvalidState, match="signal"):  # nothing came yet
        go(app, waiting)
    app.signal(waiting, "go", "went")
    assert go(app, waiting).output == "went"
    assert go(app, waiting).status == "completed"  # finished: its handle, nothing runs

    blocked = app.run(agent).id
    version["v"] = 2
    app.signal(blocked, "go", "went")
    with pytest.raises(tether.NondeterminismError):
        go(app, blocked)
    assert app.get(blocked).status == "blocked"
    version["v"] = 1
    assert go(app, blocked).output == "went"


def test_a_retried_run_is_running_in_its_row_once_its_first_step_is_committed(
    app: tether.App,
) -> None:
    """A run executed again here (a retry of a failed run) says ``running`` in its row
    from the commit of its first step on: the move to running rides with the deferred
    ``run.started`` (``Journal.defer``'s transition), which that commit carries."""
    seen: list[str] = []
    broken = {"yes": True}

    def first() -> int:
        if broken["yes"]:
            raise ValueError("down")
        return 1

    @app.agent
    def agent(run: tether.Run) -> int:
        run.step("first", first, retry=tether.Retry(max_attempts=1))
        run.step("look", lambda: seen.append(app.store.get_run(run.id).status))
        return 2

    with pytest.raises(tether.RunFailed):
        app.run(agent)
    rid = app.runs()[0].id
    assert app.store.get_run(rid).status == "failed"
    broken["yes"] = False
    assert app.retry_run(rid, in_queue=False).output == 2
    assert seen == ["running"]
