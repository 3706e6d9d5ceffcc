"""Fan-out on both backends: positions follow the order of the calls, not the order they
finish in; a stop mid fan-out resumes reusing the completed branches; threads never race
on the log; calls whose position would depend on timing are refused when made.
(Process-level SIGKILLs: tests/acceptance/test_fanout_crash.py.)"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from typing import Any

import pytest

import tether

pytestmark = pytest.mark.conformance

BOUND = 30.0  # seconds a barrier or event waits before the test fails (never reached when green)
RECORDED_AT_ONCE = 0.06  # a step longer than DEFER_BELOW (0.05 s) is recorded when it ends


class Crash(BaseException):
    """Stands for the process dying mid-run (not an Exception: the run pauses)."""


def _steps(app: tether.App, run_id: str) -> list[tuple[int, str, str]]:
    return [(s.position, s.name, s.status) for s in app.get(run_id).steps]


def _seqs_contiguous(app: tether.App, run_id: str) -> bool:
    seqs = [e.seq for e in app.events(run_id)]
    return seqs == list(range(1, len(seqs) + 1))


# -- async: asyncio.gather ------------------------------------------------------------


def test_gather_numbers_calls_in_argument_order_whatever_finishes_first(app: tether.App) -> None:
    """c finishes first, then b, then a: the positions stay a=1, b=2, c=3."""

    @app.agent
    async def fan(run: tether.AsyncRun) -> list[str]:
        done = {name: asyncio.Event() for name in "abc"}

        async def work(name: str, after: str | None) -> str:
            if after is not None:
                await asyncio.wait_for(done[after].wait(), BOUND)
            done[name].set()
            return name

        return list(
            await asyncio.gather(
                run.step("a", work, "a", "b"),
                run.step("b", work, "b", "c"),
                run.step("c", work, "c", None),
            )
        )

    h = app.run(fan)
    assert h.output == ["a", "b", "c"]
    assert _steps(app, h.id) == [
        (1, "a", "completed"),
        (2, "b", "completed"),
        (3, "c", "completed"),
    ]
    order = [e.payload()["name"] for e in app.events(h.id) if e.type == "step.completed"]
    assert order == ["c", "b", "a"]  # the log has them in the order they finished


def test_a_call_takes_its_position_when_made_not_when_awaited(app: tether.App) -> None:
    """Awaited in the other order (or started as tasks later), calls keep the positions
    of the order they were made in: the program's order, not the event loop's."""

    @app.agent
    async def agent(run: tether.AsyncRun) -> list[int]:
        first = run.step("first", asyncio.sleep, 0, 1)
        second = run.step("second", asyncio.sleep, 0, 2)
        later = asyncio.ensure_future(run.step("third", asyncio.sleep, 0, 3))
        return [await second, await first, await later]

    h = app.run(agent)
    assert h.output == [2, 1, 3]
    assert [(p, n) for p, n, _ in _steps(app, h.id)] == [(1, "first"), (2, "second"), (3, "third")]
    assert app.resume(h.id).output == [2, 1, 3]


def test_a_stop_mid_gather_resumes_reusing_the_branch_that_finished(app: tether.App) -> None:
    """Branch c finished and was recorded while a and b were in flight when the process
    stopped: positions 1 and 2 have no record, 3 has. The resume reuses c and runs only a
    and b (before, it met a placeholder 'step ?' at position 1: NondeterminismError, the
    run failed)."""
    ran: list[str] = []
    crash = [True]

    @app.agent
    async def fan(run: tether.AsyncRun) -> list[str]:
        c_recorded = asyncio.Event()

        async def slow(name: str) -> str:
            ran.append(name)
            if crash[0]:
                await asyncio.wait_for(c_recorded.wait(), BOUND)
                crash[0] = False
                raise Crash
            return name

        async def fast(name: str) -> str:
            ran.append(name)
            await asyncio.sleep(RECORDED_AT_ONCE)
            return name

        async def then_release(call: Any) -> Any:
            value = await call
            c_recorded.set()  # c's record is committed: now the others "crash"
            return value

        a, b = run.step("a", slow, "a"), run.step("b", slow, "b")
        return list(await asyncio.gather(a, b, then_release(run.step("c", fast, "c"))))

    with pytest.raises(Crash):
        app.run(fan)
    rid = app.runs()[0].id
    assert _steps(app, rid) == [(1, "", "unrecorded"), (2, "", "unrecorded"), (3, "c", "completed")]
    assert app.get(rid).committed == 0
    h = app.resume(rid)
    assert h.output == ["a", "b", "c"] and h.reused == ((3, "c"),)
    assert sorted(h.executed) == [(1, "a"), (2, "b")]
    assert sorted(ran) == ["a", "a", "b", "b", "c"]  # c ran once
    assert app.get(rid).committed == 3 and _seqs_contiguous(app, rid)


def test_gather_of_branches_that_make_one_call_each_is_allowed(app: tether.App) -> None:
    """A branch (a task) may make one journaled call while others are in flight: the tasks
    take their first positions in the order they start."""

    @app.agent
    async def fan(run: tether.AsyncRun, docs: list[str]) -> list[str]:
        async def summarize(doc: str) -> str:
            text = doc.strip()  # plain work before the call is fine
            return str(await run.llm("summarize", asyncio.sleep, 0.01, text.upper()))

        return list(await asyncio.gather(*(summarize(d) for d in docs)))

    h = app.run(fan, [" x", "y ", " z "])
    assert h.output == ["X", "Y", "Z"]
    assert [s.output for s in app.get(h.id).steps] == ["X", "Y", "Z"]


def test_a_second_call_of_a_concurrent_task_is_refused_when_made(app: tether.App) -> None:
    """Two tasks that each make two calls: which second call comes first depends on which
    first call finished first. Refused at the first execution, not found at a resume."""

    @app.agent
    async def fan(run: tether.AsyncRun) -> list[str]:
        async def branch(i: int) -> str:
            fetched = await run.step(f"fetch{i}", asyncio.sleep, 0.01 * i, i)
            return str(await run.step(f"parse{i}", asyncio.sleep, 0.01, fetched))

        return list(await asyncio.gather(branch(1), branch(2)))

    with pytest.raises(tether.RunFailed) as info:
        app.run(fan)
    assert info.value.error["type"] == "tether.errors.InvalidState"
    assert "second journaled call of a concurrent asyncio task" in info.value.error["message"]
    assert re.search(r"step 'parse[12]' is the second", info.value.error["message"])
    assert "run.parallel" in info.value.error["message"]


# -- threads: run.map, run.parallel -------------------------------------------------------


def test_run_map_runs_on_threads_in_item_order_without_conflicts(app: tether.App) -> None:
    """Eight items on four threads (a barrier of four: they run at once), each appending
    its record while the others do: no Conflict, positions and results in item order."""
    together = threading.Barrier(4, timeout=BOUND)

    def work(x: int) -> int:
        together.wait()
        time.sleep(RECORDED_AT_ONCE)
        return x * 10

    @app.agent
    def fan(run: tether.Run) -> list[int]:
        out = run.map("work", work, range(8), max_workers=4)
        run.vars["n"] = len(out)
        return list(out)

    h = app.run(fan)
    assert h.output == [x * 10 for x in range(8)]
    steps = _steps(app, h.id)
    assert steps[:8] == [(i + 1, f"work[{i}]", "completed") for i in range(8)]
    assert steps[8] == (9, "vars.n", "completed") and _seqs_contiguous(app, h.id)


def test_many_fast_threads_keep_their_deferred_records(app: tether.App) -> None:
    """Fast steps defer their records to the next append; 32 threads finishing at once
    still leave every record in the log, once, in contiguous seqs."""

    @app.agent
    def fan(run: tether.Run) -> int:
        return sum(run.map("sq", lambda x: x * x, range(32)))

    h = app.run(fan)
    assert h.output == sum(x * x for x in range(32))
    done = [e.payload()["pos"] for e in app.events(h.id) if e.type == "step.completed"]
    assert sorted(done) == list(range(1, 33)) and _seqs_contiguous(app, h.id)


def test_a_stop_mid_map_resumes_reusing_the_completed_items(app: tether.App) -> None:
    """Item 2 is in flight when the process stops, after items 0, 1 and 3 finished: they
    keep their positions (3 has no record: a gap), and the resume runs item 2 alone."""
    ran: list[int] = []
    crash = [True]
    others_done = threading.Barrier(4, timeout=BOUND)

    def work(x: int) -> int:
        ran.append(x)
        if crash[0]:
            others_done.wait()  # items 0, 1 and 3 are about to return
        if x == 2 and crash[0]:
            crash[0] = False
            raise Crash
        return x

    @app.agent
    def fan(run: tether.Run) -> list[int]:
        return list(run.map("w", work, range(4)))

    with pytest.raises(Crash):
        app.run(fan)
    rid = app.runs()[0].id
    assert [s.status for s in app.get(rid).steps] == [
        "completed",
        "completed",
        "unrecorded",
        "completed",
    ]
    h = app.resume(rid)
    assert h.output == [0, 1, 2, 3] and h.executed == ((3, "w[2]"),)
    assert sorted(ran) == [0, 1, 2, 2, 3]


def test_async_map_runs_a_plain_function_on_threads(app: tether.App) -> None:
    together = threading.Barrier(3, timeout=BOUND)  # passes only if the three run at once

    def blocking(x: int) -> int:
        together.wait()
        return x + 1

    @app.agent
    async def fan(run: tether.AsyncRun) -> list[int]:
        return list(await run.map("inc", blocking, [1, 2, 3]))

    h = app.run(fan)
    assert h.output == [2, 3, 4]
    assert [s.name for s in app.get(h.id).steps] == ["inc[0]", "inc[1]", "inc[2]"]


@pytest.mark.parametrize("is_async", [False, True], ids=["def", "async"])
def test_parallel_runs_different_calls_at_once_in_order(app: tether.App, is_async: bool) -> None:
    together = threading.Barrier(3, timeout=BOUND)
    sent: list[str] = []

    def fetch(what: str) -> str:
        together.wait()
        return f"fetched {what}"

    def score(prompt: str) -> dict[str, Any]:
        together.wait()
        return {"text": prompt, "usage": {"input_tokens": 2, "output_tokens": 1}}

    @app.tool(risk="write")
    def notify(who: str, *, idempotency_key: str) -> str:
        together.wait()
        sent.append(who)
        return f"told {who}"

    if is_async:

        async def afetch(what: str) -> str:
            return await asyncio.to_thread(fetch, what)

        @app.agent(name="fan")
        async def afan(run: tether.AsyncRun) -> list[Any]:
            return list(
                await run.parallel(
                    lambda: run.step("fetch", afetch, "orders"),
                    lambda: run.llm("score", asyncio.to_thread, score, "p"),
                    lambda: run.tool(notify, "ada"),
                )
            )

        agent: Any = afan
    else:

        @app.agent(name="fan")
        def fan(run: tether.Run) -> list[Any]:
            return run.parallel(
                lambda: run.step("fetch", fetch, "orders"),
                lambda: run.llm("score", score, prompt="p"),
                lambda: run.tool(notify, "ada"),
            )

        agent = fan
    h = app.run(agent)
    assert h.output[0] == "fetched orders" and h.output[2] == "told ada"
    assert [(p, n) for p, n, _ in _steps(app, h.id)] == [(1, "fetch"), (2, "score"), (3, "notify")]
    assert app.get(h.id).usage.input_tokens == 2 and sent == ["ada"]
    again = app.resume(h.id)  # completed: nothing runs again
    assert again.output == h.output and sent == ["ada"]


def test_a_failing_item_lets_the_others_finish_then_the_first_failure_raises(
    app: tether.App,
) -> None:
    """Items 1 and 3 fail; 0, 2 and 4 complete and are recorded; the error of item 1 (the
    first in item order) fails the run; a retry runs only the failed items."""
    broken = {1, 3}
    ran: list[int] = []

    def work(x: int) -> int:
        ran.append(x)
        if x in broken:
            raise ValueError(f"item {x} is broken")
        return x

    @app.agent
    def fan(run: tether.Run) -> list[int]:
        return list(run.map("w", work, range(5)))

    with pytest.raises(tether.RunFailed, match="item 1 is broken"):
        app.run(fan)
    rid = app.runs()[0].id
    statuses = [s.status for s in app.get(rid).steps]
    assert statuses == ["completed", "failed", "completed", "failed", "completed"]
    broken.clear()
    h = app.retry_run(rid)
    assert h.output == [0, 1, 2, 3, 4] and sorted(h.executed) == [(2, "w[1]"), (4, "w[3]")]
    assert sorted(ran) == [0, 1, 1, 2, 3, 3, 4]


def test_a_call_from_a_thread_of_the_agent_is_refused_and_fails_the_run(app: tether.App) -> None:
    """Its position would depend on which thread got there first. Refused when made, and
    the run fails even though the thread's exception never reached the agent."""
    seen: list[BaseException] = []

    @app.agent
    def racy(run: tether.Run) -> str:
        def side() -> None:
            try:
                run.step("side", lambda: 1)
            except BaseException as e:  # what a thread's caller never sees
                seen.append(e)

        t = threading.Thread(target=side)
        t.start()
        t.join(BOUND)
        return "done"

    with pytest.raises(tether.RunFailed, match="step 'side' was called from a thread other"):
        app.run(racy)  # the message names the call: its kind and name
    assert isinstance(seen[0], tether.InvalidState) and "run.map" in str(seen[0])
    state = app.get(app.runs()[0].id)
    assert state.status == "failed" and state.steps == ()


@pytest.mark.parametrize("is_async", [False, True], ids=["def", "async"])
@pytest.mark.parametrize("calls", [0, 2])
def test_a_parallel_branch_makes_exactly_one_call(
    app: tether.App, is_async: bool, calls: int
) -> None:
    def branch(run: Any) -> Any:
        if calls == 0:
            return 5
        run.step("one", lambda: 1) if not is_async else None
        return run.step("two", lambda: 2)

    if is_async:

        @app.agent(name="p")
        async def ap(run: tether.AsyncRun) -> Any:
            async def two_calls() -> Any:
                await run.step("one", lambda: 1)
                return await run.step("two", lambda: 2)

            return await run.parallel(
                two_calls if calls else (lambda: 5), lambda: run.step("x", int)
            )

        agent: Any = ap
    else:

        @app.agent(name="p")
        def sp(run: tether.Run) -> Any:
            return run.parallel(lambda: branch(run), lambda: run.step("x", int))

        agent = sp
    words = "without a journaled call" if calls == 0 else "step 'two' is a second journaled call in"
    with pytest.raises(tether.RunFailed, match=words):
        app.run(agent)
