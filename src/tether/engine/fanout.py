"""Fan-out and fan-in: journaled calls that run at once and replay to the same positions.

``run.map(name, fn, items)`` calls ``fn(item)`` for every item as a step named
``name[i]``; ``run.parallel(lambda: run.step(...), lambda: run.tool(...), ...)`` runs
branches that make one journaled call each. Both take their positions first, in the
order of the items or branches, and only then run the calls: a ``def`` agent's on a
pool of threads, an ``async def`` agent's as tasks of its event loop (a ``map`` of a
plain function runs it on threads too). So a resume after a crash reuses the calls
that completed, whichever finished first, and runs again only those that were in
flight.

Fan-in: the results come back in the order of the items or branches. When calls
fail, the others still finish and are recorded (a retry reuses them), and then the
first failure in that order is raised. See ``docs/fanout.md``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from tether.engine.journal import Journal, Reserved, branch
from tether.errors import InvalidState

MAX_THREADS = 32  # threads of one run.map / run.parallel unless max_workers says otherwise


def check_workers(max_workers: int | None) -> None:
    """Refuse a ``max_workers`` that is not None or an int >= 1."""
    if max_workers is not None and (
        isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1
    ):
        raise ValueError(
            f"max_workers is how many calls run at once (an int >= 1) or None, not {max_workers!r}"
        )


def check_branches(run_id: str, branches: Sequence[Any]) -> None:
    """run.parallel takes functions of no argument (each makes one journaled call)."""
    for i, b in enumerate(branches):
        if not callable(b):
            raise TypeError(
                f"run {run_id}: branch {i} of run.parallel is {b!r}, not a function; pass "
                f"functions of no argument that make one journaled call each, e.g. "
                f"lambda: run.step('fetch', fetch, url)"
            )


def in_threads(calls: Sequence[Callable[[], Any]], max_workers: int | None) -> list[Any]:
    """Call each of ``calls`` on a pool of threads; wait for all of them; return their
    results in order, or raise the first failure in order once all have finished."""
    if not calls:
        return []
    from concurrent.futures import ThreadPoolExecutor  # lazily: most agents never fan out

    workers = min(len(calls), max_workers or MAX_THREADS)
    with ThreadPoolExecutor(workers, thread_name_prefix="tether-branch") as pool:
        futures = [pool.submit(call) for call in calls]
        outcomes = [_outcome(f.exception(), f) for f in futures]
    return joined(outcomes)


def _outcome(error: BaseException | None, future: Any) -> Any:
    return error if error is not None else _Result(future.result())


class _Result:
    """A branch's value among outcomes that may be exceptions."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def joined(outcomes: Sequence[Any]) -> list[Any]:
    """The values of ``outcomes`` (``_Result`` or an exception each), or the first
    exception in order."""
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return [outcome.value for outcome in outcomes]


def branches_in_threads(
    journal: Journal, branches: Sequence[Callable[[], Any]], max_workers: int | None
) -> list[Any]:
    """run.parallel of a ``def`` agent: reserve a position per branch, in order, then run
    each branch on a thread, where its one journaled call takes its position."""
    if not branches:
        return []
    first = journal.reserve(len(branches))
    reservations = [Reserved(journal, first + i) for i in range(len(branches))]

    def run(i: int) -> Any:
        with branch(reservations[i]):
            return branches[i]()

    calls = [lambda i=i: _one_call(reservations[i], i, run(i)) for i in range(len(branches))]
    return in_threads(calls, max_workers)


def _one_call(reserved: Reserved, i: int, value: Any) -> Any:
    """A branch that returned: it made its journaled call, or it is refused."""
    if not reserved.used:
        error = InvalidState(
            f"run {reserved.journal.run_id}: branch {i} of run.parallel returned without a "
            f"journaled call, so position {reserved.pos} stays empty; each branch makes one "
            f"call (run.step, run.llm, run.tool, ...): compute plain values outside run.parallel"
        )
        reserved.journal.poisoned = error
        raise error
    return value


async def gathered(awaitables: Sequence[Awaitable[Any]], max_workers: int | None) -> list[Any]:
    """Await ``awaitables`` at once (at most ``max_workers`` at a time); their results in
    order, or the first failure in order once all have finished."""
    import asyncio

    limit = asyncio.Semaphore(max_workers) if max_workers else None

    async def one(aw: Awaitable[Any]) -> Any:
        if limit is None:
            return _Result(await aw)
        async with limit:
            return _Result(await aw)

    outcomes = await asyncio.gather(*(one(aw) for aw in awaitables), return_exceptions=True)
    return joined(outcomes)


def branches_gathered(
    journal: Journal, branches: Sequence[Callable[[], Any]], max_workers: int | None
) -> Coroutine[Any, Any, list[Any]]:
    """run.parallel of an ``async def`` agent: reserve a position per branch now, in order;
    awaited, each branch runs as a task whose one journaled call takes its position."""
    if not branches:
        return gathered([], max_workers)
    first = journal.reserve(len(branches))
    calls = [_branch(Reserved(journal, first + i), i, fn) for i, fn in enumerate(branches)]
    return gathered(calls, max_workers)


async def _branch(reserved: Reserved, i: int, fn: Callable[[], Any]) -> Any:
    with branch(reserved):  # in the branch's task: the tasks it starts inherit it
        value = fn()
        if inspect.isawaitable(value):
            value = await value
    return _one_call(reserved, i, value)


def threaded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as an async function: a plain function runs on a thread (an async map's
    fan-out runs at once), an async one is awaited."""
    if inspect.iscoroutinefunction(fn):
        return fn

    async def on_a_thread(*args: Any, **kwargs: Any) -> Any:
        import asyncio

        value = await asyncio.to_thread(fn, *args, **kwargs)
        return await value if inspect.isawaitable(value) else value

    on_a_thread.__name__ = getattr(fn, "__name__", "fn")
    on_a_thread.__qualname__ = getattr(fn, "__qualname__", "fn")
    return on_a_thread
