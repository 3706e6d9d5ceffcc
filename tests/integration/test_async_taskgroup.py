"""An async agent using ``asyncio.TaskGroup`` (Python 3.11's structured concurrency). A
TaskGroup wraps what its body or its tasks raised in an exception group, tether's own
exceptions included: an approval or a wait that makes the run wait, a cancel. The run
must wait, or be cancelled, as it would outside a TaskGroup, and resume to the same
result; a group of the agent's own errors is its failure."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import tether


def test_an_approval_in_a_taskgroups_body_makes_the_run_wait(app: tether.App) -> None:
    ran: list[int] = []

    async def work(x: int) -> int:
        ran.append(x)
        return x

    @app.agent
    async def grouped(run: tether.AsyncRun) -> list[Any]:
        async with asyncio.TaskGroup() as tg:
            a = tg.create_task(run.step("a", work, 1))
            ok = tg.create_task(run.approve("go", {"x": 1}))
        return [a.result(), ok.result()]

    handle = app.run(grouped)  # raised a BaseExceptionGroup before the fix
    assert handle.status == "waiting" and handle.waiting is not None
    assert app.get(handle.id).status == "waiting"
    app.approve(handle.id, "go", by="ops")
    done = app.resume(handle.id)
    assert done.status == "completed" and done.output[0] == 1
    assert ran.count(1) == 1  # its record survived the wait or it ran once after it


def test_a_wait_inside_a_task_makes_the_run_wait_and_a_signal_resumes_it(app: tether.App) -> None:
    @app.agent
    async def grouped(run: tether.AsyncRun) -> list[Any]:
        async with asyncio.TaskGroup() as tg:
            a = tg.create_task(run.step("a", lambda: "a"))
            b = tg.create_task(run.wait("go"))
        return [a.result(), b.result()]

    handle = app.run(grouped)
    assert handle.status == "waiting"
    app.signal(handle.id, "go", 5)
    assert app.resume(handle.id).output == ["a", 5]


def test_a_group_of_the_agents_own_errors_is_its_failure(app: tether.App) -> None:
    def boom(msg: str) -> None:
        raise ValueError(msg)

    @app.agent
    async def failing(run: tether.AsyncRun) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(run.step("a", boom, "one", retry=tether.Retry(max_attempts=1)))
            tg.create_task(run.step("b", boom, "two", retry=tether.Retry(max_attempts=1)))

    with pytest.raises(tether.RunFailed) as info:
        app.run(failing)
    state = app.get(info.value.run_id)
    assert state.status == "failed"
    assert "ExceptionGroup" in str(state.error)
