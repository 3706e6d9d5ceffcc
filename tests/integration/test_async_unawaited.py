"""An async agent's calls are coroutines made when the call is made. In
``asyncio.gather(run.step(...), run.wait(...))`` the second call makes the run wait (or
raises) while it is made, before gather awaits the first: the executor closes the
calls left unawaited, so the user sees no "coroutine was never awaited" warning for
what tether did. A coroutine the agent itself forgot to await still warns."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

import tether


@contextmanager
def unawaited() -> Iterator[Callable[[], list[str]]]:
    """What Python reported as never awaited inside the block (collected at its end)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield lambda: [str(w.message) for w in caught if "never awaited" in str(w.message)]
        gc.collect()


def test_a_call_that_makes_the_run_wait_leaves_no_unawaited_call(app: tether.App) -> None:
    ran: list[str] = []

    @app.agent
    async def gathering(run: tether.AsyncRun) -> list[object]:
        return list(await asyncio.gather(run.step("a", ran.append, "a"), run.wait("go")))

    with unawaited() as reported:
        handle = app.run(gathering)
        gc.collect()
        assert handle.status == "waiting" and ran == []
        app.signal(handle.id, "go", 7)
        assert app.resume(handle.id).output == [None, 7] and ran == ["a"]
        gc.collect()
        assert reported() == []


def test_a_call_that_raises_when_made_leaves_no_unawaited_call(app: tether.App) -> None:
    @app.agent
    async def failing(run: tether.AsyncRun) -> object:
        return await asyncio.gather(run.step("a", lambda: 1), run.join("no-such-run"))

    with unawaited() as reported:
        with pytest.raises(tether.RunFailed):
            app.run(failing)
        gc.collect()
        assert reported() == []


def test_a_coroutine_the_agent_forgot_to_await_still_warns(app: tether.App) -> None:
    @app.agent
    async def forgetful(run: tether.AsyncRun) -> int:
        run.step("a", lambda: 1)  # not awaited: the agent's own bug
        return 2

    with unawaited() as reported:
        assert app.run(forgetful).output == 2
        gc.collect()
        assert len(reported()) == 1
