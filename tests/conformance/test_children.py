"""Child runs (issue 31): ``run.child`` starts a linked run once, ``run.join`` waits for
it holding no process and no lease, a child's end wakes its parent, a child's failure
reaches the parent as ChildFailed (replayed the same), and cancelling a parent cancels
its unfinished children, with compensation when asked. On both backends; the crash of
a parent in a real process: tests/acceptance/test_children_crash.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import tether
from tether.engine.children import JOIN_RECHECK, child_id
from tether.store import Transition

pytestmark = pytest.mark.conformance


def drain(app: tether.App) -> tether.WorkerStats:
    return app.worker(queues=["default"], concurrency=1).run(until_idle=True, install_signals=False)


class Family:
    """A parent that starts two children and joins them; calls counted per step."""

    def __init__(self, app: tether.App) -> None:
        self.app = app
        self.calls: dict[str, int] = {}
        self.fail: set[str] = set()

        @app.agent
        def kid(run: tether.Run, word: str) -> str:
            out = run.step("shout", self._count, f"kid:{word}", word.upper())
            if word in self.fail:
                raise RuntimeError(f"no {word}")
            return str(out)

        @app.agent
        def parent(run: tether.Run, words: list[str]) -> Any:
            run.step("before", self._count, "parent:before", None)
            kids = [run.child(kid, w) for w in words]
            try:
                outs = run.join(kids)
            except tether.ChildFailed as e:
                return {"failed": e.child_id, "type": e.error.get("type")}
            run.step("after", self._count, "parent:after", None)
            return outs

        self.kid, self.parent = kid, parent

    def _count(self, key: str, value: Any) -> Any:
        self.calls[key] = self.calls.get(key, 0) + 1
        return value


def test_a_parent_waits_without_a_lease_and_a_worker_completes_the_tree(app: tether.App) -> None:
    fam = Family(app)
    rid = app.start(fam.parent, ["a", "b"], queue="parents")
    first = app.worker(queues=["parents"]).run(until_idle=True, install_signals=False)
    assert first.waiting == 1
    row = app.store.get_run(rid)
    assert row.status == "waiting" and row.lease_owner is None
    kids = [child_id(rid, 2), child_id(rid, 3)]
    assert row.waiting_for == f"child:{kids[0]}"
    assert [app.store.get_run(k).status for k in kids] == ["queued", "queued"]
    assert app.get(kids[0]).caller == {"run": rid, "pos": 2}

    stats = app.worker(queues=["default", "parents"], concurrency=1).run(
        until_idle=True, install_signals=False
    )  # the children, then the parent their ends woke
    assert stats.completed == 3 and stats.errors == []
    assert app.get(rid).status == "completed" and app.get(rid).output == ["A", "B"]
    assert fam.calls == {"parent:before": 1, "kid:a": 1, "kid:b": 1, "parent:after": 1}


def test_a_parent_run_inline_is_woken_then_resumed(app: tether.App) -> None:
    fam = Family(app)
    handle = app.run(fam.parent, ["a"])
    assert handle.status == "waiting"
    with pytest.raises(tether.InvalidState, match="waits for its child runs"):
        app.resume(handle.id)
    assert drain(app).completed == 1
    assert app.store.get_run(handle.id).status == "queued"  # woken: not in a queue, resumed
    assert app.resume(handle.id).output == ["A"]


def test_a_replayed_parent_never_starts_a_child_twice(app: tether.App) -> None:
    fam = Family(app)
    rid = app.start(fam.parent, ["a"], queue="parents")
    app.worker(queues=["parents"]).run(until_idle=True, install_signals=False)
    kid = child_id(rid, 2)
    app.store.wake(rid, f"child:{kid}", now=app.clock.now())  # a spurious wake-up
    assert app.resume(rid).status == "waiting"  # re-checked: the child is still queued
    assert [r.id for r in app.runs() if r.agent == "kid"] == [kid]
    app.worker(queues=["default", "parents"]).run(until_idle=True, install_signals=False)
    assert app.get(rid).output == ["A"] and fam.calls["kid:a"] == 1


def test_a_child_that_failed_reaches_its_parent_as_child_failed(app: tether.App) -> None:
    fam = Family(app)
    fam.fail = {"b"}
    rid = app.start(fam.parent, ["a", "b"])
    drain(app)
    info = app.get(rid)
    assert info.status == "completed"
    assert info.output == {"failed": child_id(rid, 3), "type": "RuntimeError"}
    joined = next(s for s in info.steps if s.kind == "join")
    assert joined.output[1]["status"] == "failed"
    # replayed from its log (a fork at the end re-executes nothing): the same failure
    fork = app.fork(rid, step=joined.position, when="after")
    assert app.resume(fork).output == {"failed": child_id(rid, 3), "type": "RuntimeError"}
    assert fam.calls == {"parent:before": 1, "kid:a": 1, "kid:b": 1}


def test_a_lost_wake_is_caught_by_the_parents_due_time(backend: Any) -> None:
    clock = tether.FakeClock(1_800_000_000.0)
    app = tether.open(backend.url, clock=clock)
    try:
        fam = Family(app)
        rid = app.start(fam.parent, ["c"], queue="parents")

        def parents() -> tether.WorkerStats:
            return app.worker(queues=["parents"]).run(until_idle=True, install_signals=False)

        assert parents().waiting == 1
        due = app.store.get_run(rid).available_at
        assert due == clock.now() + JOIN_RECHECK
        # the child's wake will be lost (as if its process died between its end and it)
        lost = Transition("waiting", waiting_for="child:nobody", available_at=due)
        app.store.set_status(rid, lost, now=clock.now())
        assert drain(app).completed == 1 and app.get(rid).status == "waiting"
        clock.advance(max(0.0, due - clock.now()) + 1)  # (an idle worker's sleeps move it too)
        assert parents().completed == 1
        assert app.get(rid).output == ["C"] and fam.calls["kid:c"] == 1
    finally:
        app.close()


def test_async_parents_join_children_with_gather(app: tether.App) -> None:
    @app.agent
    def square(run: tether.Run, n: int) -> int:
        return int(run.step("sq", lambda: n * n))

    @app.agent
    async def fan(run: tether.AsyncRun, n: int) -> list[Any]:
        kids = [await run.child(square, i) for i in range(n)]
        first, rest = await asyncio.gather(run.join(kids[0]), run.join(kids[1:]))
        return [first, *rest]

    rid = app.start(fan, 3)
    assert drain(app).completed == 4
    assert app.get(rid).output == [0, 1, 4]


def test_cancelling_a_parent_cancels_its_tree_and_compensates_newest_first(
    app: tether.App,
) -> None:
    undone: list[str] = []

    def unbook(result: Any, what: str, *, idempotency_key: str) -> None:
        undone.append(what)

    @app.tool(risk="write", compensate=unbook)
    def book(what: str, *, idempotency_key: str) -> str:
        return what

    @app.agent
    def leaf(run: tether.Run, name: str) -> None:
        run.tool(book, name)
        run.wait("never")

    @app.agent
    def middle(run: tether.Run, name: str) -> None:
        run.tool(book, name)
        run.join([run.child(leaf, f"{name}.leaf")])

    @app.agent
    def root(run: tether.Run) -> None:
        run.tool(book, "root")
        run.join([run.child(middle, "m1"), run.child(middle, "m2")])

    rid = app.run(root).id
    drain(app)
    m1, m2 = child_id(rid, 2), child_id(rid, 3)
    leaves = [child_id(m1, 2), child_id(m2, 2)]
    assert [app.get(r).status for r in (rid, m1, m2, *leaves)] == ["waiting"] * 5
    assert app.cancel(rid, compensate=True).status == "cancelled"
    assert [app.get(r).status for r in (rid, m1, m2, *leaves)] == ["cancelled"] * 5
    # newest child first, each subtree before its parent, the root last
    assert undone == ["m2.leaf", "m2", "m1.leaf", "m1", "root"]
    drain(app)  # nothing woken runs again
    assert undone == ["m2.leaf", "m2", "m1.leaf", "m1", "root"]


def test_a_cancelled_child_reaches_its_parent_as_child_failed(app: tether.App) -> None:
    @app.agent
    def sleeper(run: tether.Run) -> None:
        run.wait("never")

    @app.agent
    def boss(run: tether.Run) -> Any:
        kid = run.child(sleeper)
        try:
            return run.join(kid)
        except tether.ChildFailed as e:
            return {"child": e.child_id, "status": e.error["status"], "message": str(e)}

    rid = app.start(boss, queue="parents")
    app.worker(queues=["parents", "default"]).run(until_idle=True, install_signals=False)
    kid = child_id(rid, 1)
    assert app.get(rid).status == "waiting" and app.get(kid).status == "waiting"
    app.cancel(kid, reason="not needed")  # wakes the parent, which goes on
    assert app.store.get_run(rid).status == "queued"
    app.worker(queues=["parents"]).run(until_idle=True, install_signals=False)
    out = app.get(rid).output
    assert out["child"] == kid and out["status"] == "cancelled"
    assert f"child run {kid} cancelled" in out["message"] and "not needed" in out["message"]


def test_a_child_belongs_to_its_parents_tenant(app: tether.App) -> None:
    fam = Family(app)
    rid = app.for_tenant("acme").start(fam.parent, ["t"], queue="parents")
    app.worker(queues=["parents"]).run(until_idle=True, install_signals=False)
    assert app.store.get_run(child_id(rid, 2)).owner == "acme"


def test_child_and_join_are_spans_when_traced(backend: Any) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    app = tether.open(backend.url, tracing=tether.Tracing(provider))
    try:
        fam = Family(app)
        rid = app.start(fam.parent, ["x"])
        assert drain(app).completed == 2 and app.get(rid).output == ["X"]
        names = [s.name for s in spans.get_finished_spans()]
        assert names.count("child kid") == 2  # started, then replayed when woken
        assert names.count("join join") == 2  # waited, then joined
    finally:
        app.close()


def test_a_replay_of_a_parent_returns_its_children_and_starts_none(app: tether.App) -> None:
    """`tether check` and `tether.testing.replay` on runs that start children: a recorded
    start returns the recorded child, the first unrecorded one is where the replay stops
    (it would start there), and no run is created either way."""
    from tether.testing import replay

    fam = Family(app)
    waiting = app.run(fam.parent, ["a", "b"]).id  # its children queued, it waits
    report = replay(app, waiting)
    assert (report.outcome, report.position, str(report.found)) == ("continues", 4, "join join")
    drain(app)  # the children complete; the parent is woken
    assert (replay(app, waiting).outcome, replay(app, waiting).position) == ("continues", 4)
    assert app.resume(waiting).output == ["A", "B"]
    done = replay(app, waiting)
    assert (done.outcome, done.output) == ("finished", ["A", "B"])
    fresh = app.start(fam.parent, ["c"])  # never executed: it would take its first step
    assert (replay(app, fresh).outcome, replay(app, fresh).position) == ("continues", 1)
    before = len(app.runs(limit=100))
    assert [r.outcome for r in app._replayer().check(app.store)] == ["continues"]
    assert len(app.runs(limit=100)) == before


def test_a_child_s_end_is_committed_before_its_parent_is_woken(app: tether.App) -> None:
    """A worker posts a run's final event without waiting for its commit (nothing waits for
    it, and a crash before the commit replays the run to the same end), except a child's:
    its parent is woken right after it and must find the child ended."""
    fam = Family(app)
    rid = app.start(fam.parent, ["a"], queue="parents")
    app.worker(queues=["parents"]).run(until_idle=True, install_signals=False)
    ends: list[tuple[str, bool]] = []  # a run's final append: its run, and whether it waited
    append = app.store.append

    def watched(run_id: str, events: Any, **kwargs: Any) -> int:
        if kwargs.get("transition") is not None and kwargs["transition"].status == "completed":
            ends.append((run_id, kwargs["wait"]))
        return append(run_id, events, **kwargs)

    app.store.append = watched  # type: ignore[method-assign]
    stats = app.worker(queues=["default", "parents"], concurrency=1).run(
        until_idle=True, install_signals=False
    )
    assert stats.completed == 2 and app.get(rid).output == ["A"]
    assert ends == [(child_id(rid, 2), True), (rid, False)]
