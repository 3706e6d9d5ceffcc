"""``app.run`` and ``app.resume`` of an ``async def`` agent start an event loop of their
own; called from async code (a thread that runs a loop: a web handler, a notebook) Python
refuses that, after the run was created or claimed. They refuse first, saying to use
``await app.arun`` / ``await app.aresume``; nothing is created, and a run being resumed is
given back (its lease let go), so the async call goes on at once."""

from __future__ import annotations

import asyncio

import pytest

import tether


def test_run_and_resume_in_a_running_loop_refuse_and_leave_the_run_usable(
    app: tether.App,
) -> None:
    ran: list[int] = []

    @app.agent
    async def agent(run: tether.AsyncRun, x: int) -> int:
        first = await run.step("first", lambda: ran.append(x) or x)
        await run.wait("go")
        return first * 2

    async def main() -> None:
        with pytest.raises(tether.InvalidState, match=r"await app\.arun.*No run was created"):
            app.run(agent, 1)
        assert app.runs() == []
        handle = await app.arun(agent, 2)
        assert handle.status == "waiting"
        app.signal(handle.id, "go", None)
        with pytest.raises(tether.InvalidState, match=r"lease is given back.*aresume"):
            app.resume(handle.id)
        assert app.store.get_run(handle.id).lease_owner is None
        assert (await app.aresume(handle.id)).output == 4  # at once: nobody holds it

    asyncio.run(main())
    assert ran == [2]  # the refused calls executed nothing


def test_a_sync_agent_runs_from_async_code(app: tether.App) -> None:
    @app.agent
    def plain(run: tether.Run) -> int:
        return int(run.step("s", lambda: 3))

    async def main() -> int:
        return int(app.run(plain).output)

    assert asyncio.run(main()) == 3
