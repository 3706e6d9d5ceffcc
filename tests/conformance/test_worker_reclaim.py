"""A run that waits can be woken and claimed again by another of the worker's threads
before the execution that waited has ended. The worker must count both executions:
when the first one ends it must not forget the second (an `until_idle` worker stopped
while the second still ran, and what it started then waited for nobody: the tree test
of test_children_cli failed about 1 time in 8 on PostgreSQL). On both backends."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import tether
from tether.engine.executor import Executor
from tether.engine.leases import Active

pytestmark = pytest.mark.conformance


def test_a_run_claimed_again_before_its_first_execution_ended_is_still_counted(
    app: tether.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    second_began = threading.Event()
    first_ended = threading.Event()
    executions: list[str] = []

    @app.agent
    def leaf(run: tether.Run, n: int) -> int:
        return int(run.step("n", lambda: n))

    @app.agent
    def parent(run: tether.Run) -> int:
        first = run.join(run.child(leaf, 1))
        second_began.set()
        # the first execution's end (held back below) comes while this one still runs
        run.step("slow", lambda: first_ended.wait(10))
        # started only now: an idle-looking worker would have stopped before it
        return int(first + run.join(run.child(leaf, 2)))

    execute = Executor.execute_claimed

    def held(self: Executor, record: Any, lease: Any) -> Any:
        try:
            return execute(self, record, lease)
        finally:
            if record.agent == "parent" and not executions:
                executions.append(record.id)
                # the run waits for its child and is woken, claimed and executed again
                # by the worker's other thread while this execution has not ended
                assert second_began.wait(10)
                threading.Timer(0.2, first_ended.set).start()

    monkeypatch.setattr(Executor, "execute_claimed", held)
    rid = app.start(parent)
    stats = app.worker(queues=["default"], concurrency=2).run(
        until_idle=True, install_signals=False
    )
    assert stats.errors == []
    assert executions == [rid]
    assert app.get(rid).status == "completed", stats
    assert app.get(rid).output == 3


def test_an_ended_execution_does_not_forget_a_later_one_of_the_same_run() -> None:
    class _Journal:
        def __init__(self, run_id: str) -> None:
            self.run_id = run_id

    active = Active()
    first, second = _Journal("r"), _Journal("r")
    active.add(first)  # type: ignore[arg-type]
    active.add(second)  # type: ignore[arg-type]
    active.remove(first)  # type: ignore[arg-type]
    assert active.journals == {"r": second}
    active.remove(second)  # type: ignore[arg-type]
    assert active.journals == {}
