"""Inline children (issue 31): ``run.child(agent, ..., inline=True)`` executes a child run
at once in the parent's thread and returns its output; the child is a run of its own
(id, log, lease, caller), the parent records its outcome at the call's position, a
replay executes nothing, a failure reaches the parent as ChildFailed, a child that waits
makes the parent wait, and cancelling the parent cancels the child. On both backends;
the crashes, in real processes: tests/acceptance/test_inline_children_crash.py."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from _conformance import Backend

import tether
from tether.engine.calls import Cancelling
from tether.engine.children import child_id
from tether.errors import InvalidInput

pytestmark = pytest.mark.conformance


def drain(app: tether.App) -> tether.WorkerStats:
    return app.worker(queues=["default"], concurrency=1).run(until_idle=True, install_signals=False)


class Calls:
    def __init__(self) -> None:
        self.n: dict[str, int] = {}

    def __call__(self, key: str, value: Any) -> Any:
        self.n[key] = self.n.get(key, 0) + 1
        return value


def test_an_inline_child_is_a_run_of_its_own_and_its_output_is_recorded(app: tether.App) -> None:
    calls = Calls()

    @app.agent
    def kid(run: tether.Run, word: str) -> str:
        return str(run.step("shout", calls, f"kid:{word}", word.upper()))

    @app.agent
    def parent(run: tether.Run, words: list[str]) -> list[str]:
        outs = [run.child(kid, w, inline=True) for w in words]
        run.step("after", calls, "parent:after", None)
        return outs

    handle = app.run(parent, ["a", "b"])
    rid = handle.id
    assert (handle.status, handle.output) == ("completed", ["A", "B"])
    kids = [child_id(rid, 1), child_id(rid, 2)]
    for pos, (k, out) in enumerate(zip(kids, ["A", "B"], strict=True), 1):
        state = app.get(k)
        assert (state.status, state.output, state.caller) == (
            "completed",
            out,
            {"run": rid, "pos": pos},
        )
        assert [e.type for e in app.events(k)].count("run.created") == 1
        step = app.get(rid).steps[pos - 1]
        assert (step.kind, step.name, step.output) == ("child", "kid", k)
        assert step.detail == {
            "inline": True,
            "outcome": {"run": k, "status": "completed", "output": out},
        }
    assert app.store.get_run(kids[0]).queue == "default"  # where a worker would take it over
    # a replay (a fork of the whole log) executes nothing and starts no child
    again = app.resume(rid)
    assert again.output == ["A", "B"]
    assert calls.n == {"kid:a": 1, "kid:b": 1, "parent:after": 1}


def test_a_replayed_parent_takes_the_outcome_from_its_log(app: tether.App) -> None:
    calls = Calls()

    @app.agent
    def kid(run: tether.Run) -> int:
        return int(run.step("one", calls, "kid", 1))

    @app.agent
    def parent(run: tether.Run) -> int:
        got = run.child(kid, inline=True)
        run.step("after", calls, "parent:after", None)
        run.wait("go")
        return int(got)

    rid = app.run(parent).id
    assert app.get(rid).status == "waiting"
    app.signal(rid, "go", None)
    assert app.resume(rid).output == 1  # replayed: the child's outcome from the parent's log
    assert calls.n == {"kid": 1, "parent:after": 1}
    assert [e.type for e in app.events(child_id(rid, 1))].count("run.started") == 1


def test_an_inline_childs_failure_reaches_its_parent_as_child_failed(app: tether.App) -> None:
    @app.agent
    def kid(run: tether.Run) -> None:
        run.step("boom", lambda: 1 / 0)

    @app.agent
    def parent(run: tether.Run) -> Any:
        try:
            run.child(kid, inline=True)
        except tether.ChildFailed as e:
            run.wait("go")
            return {"child": e.child_id, **{k: e.error.get(k) for k in ("status", "type", "step")}}
        return None

    rid = app.run(parent).id
    kid_id = child_id(rid, 1)
    assert app.get(kid_id).status == "failed"
    expected = {"child": kid_id, "status": "failed", "type": "ZeroDivisionError", "step": "boom"}
    app.signal(rid, "go", None)
    assert app.resume(rid).output == expected  # replayed: raised again from the record
    recorded = app.get(rid).steps[0].detail
    assert recorded is not None and recorded["outcome"]["error"]["position"] == 1


def test_async_parents_await_inline_children(app: tether.App) -> None:
    @app.agent
    async def square(run: tether.AsyncRun, n: int) -> int:
        return int(await run.step("sq", lambda: n * n))

    @app.agent
    def cube(run: tether.Run, n: int) -> int:
        return int(run.step("cu", lambda: n**3))

    @app.agent
    async def fan(run: tether.AsyncRun, n: int) -> list[Any]:
        first = run.child(square, n, inline=True)  # position 1, taken now
        second = run.child(cube, n, inline=True)  # position 2
        return list(await asyncio.gather(second, first))

    rid = app.start(fan, 3)
    assert drain(app).completed == 1  # the children were not queued
    assert app.get(rid).output == [27, 9]
    assert [app.get(child_id(rid, p)).agent for p in (1, 2)] == ["square", "cube"]


def test_a_waiting_inline_child_makes_its_parent_wait_then_wakes_it(app: tether.App) -> None:
    calls = Calls()

    @app.agent
    def asker(run: tether.Run) -> str:
        run.step("before", calls, "kid:before", None)
        return str(run.wait("answer"))

    @app.agent
    def parent(run: tether.Run) -> str:
        got = run.child(asker, inline=True)
        return str(run.step("after", calls, "parent:after", got))

    rid = app.start(parent)
    drain(app)
    kid = child_id(rid, 1)
    assert app.store.get_run(rid).waiting_for == f"child:{kid}"
    assert app.get(rid).steps[0].kind == "child" and app.get(rid).steps[0].status == "waiting"
    assert app.get(kid).status == "waiting"
    app.signal(kid, "answer", "yes")
    drain(app)  # a worker finishes the child, whose end wakes the parent
    assert app.get(rid).output == "yes"
    assert calls.n == {"kid:before": 1, "parent:after": 1}


def test_cancelling_a_parent_cancels_its_waiting_inline_child(app: tether.App) -> None:
    @app.agent
    def sleeper(run: tether.Run) -> None:
        run.wait("never")

    @app.agent
    def parent(run: tether.Run) -> None:
        run.child(sleeper, inline=True)

    rid = app.run(parent).id
    kid = child_id(rid, 1)
    assert app.get(rid).status == "waiting" and app.get(kid).status == "waiting"
    assert app.cancel(rid).status == "cancelled"
    assert app.get(kid).status == "cancelled"


def test_inline_takes_true_or_false(app: tether.App) -> None:
    @app.agent
    def kid(run: tether.Run) -> None:
        return None

    @app.agent
    def parent(run: tether.Run) -> None:
        run.child(kid, inline="yes")

    with pytest.raises(tether.RunFailed, match="inline is True or False, not 'yes'") as e:
        app.run(parent)
    assert e.value.error["type"] == f"{InvalidInput.__module__}.InvalidInput"


def test_cancelling_a_parent_stops_the_inline_child_it_executes(app: tether.App) -> None:
    calls = Calls()
    parent_id: list[str] = []

    def cancel_parent() -> None:
        # what the heartbeat thread does when `tether cancel` (another process) asks the
        # parent to stop: interrupt the parent's execution here
        app._leases.active.interrupt(parent_id[0], Cancelling(compensate=False))

    @app.agent
    def kid(run: tether.Run) -> None:
        run.step("cancel", cancel_parent)
        run.step("next", calls, "kid:next", None)

    @app.agent
    def parent(run: tether.Run) -> None:
        parent_id.append(run.id)
        run.child(kid, inline=True)
        run.step("after", calls, "parent:after", None)

    handle = app.run(parent)
    kid_id = child_id(handle.id, 1)
    assert (handle.status, app.get(kid_id).status) == ("cancelled", "cancelled")
    assert calls.n == {}  # neither went on past the cancel


def test_resuming_a_parent_executes_its_woken_inline_child_inline(app: tether.App) -> None:
    calls = Calls()

    @app.agent
    def asker(run: tether.Run) -> str:
        run.step("before", calls, "kid:before", None)
        return str(run.wait("answer"))

    @app.agent
    def parent(run: tether.Run) -> str:
        return str(run.child(asker, inline=True))

    rid = app.run(parent).id  # no workers anywhere
    kid = child_id(rid, 1)
    app.signal(kid, "answer", "yes")
    assert app.store.get_run(kid).status == "queued"
    handle = app.resume(rid)  # not refused: it executes the child here, from its log
    assert (handle.status, handle.output) == ("completed", "yes")
    assert app.get(kid).status == "completed" and calls.n == {"kid:before": 1}


def test_a_dry_replay_reads_children_from_the_log(app: tether.App) -> None:
    from tether.testing import replay

    @app.agent
    def kid(run: tether.Run, n: int) -> int:
        return int(run.step("sq", lambda: n * n))

    @app.agent
    def parent(run: tether.Run) -> list[Any]:
        inline = run.child(kid, 3, inline=True)
        queued = run.join(run.child("kid", 4))  # by name, as an agent may
        run.wait("go")
        return [inline, queued]

    rid = app.start(parent)
    drain(app)
    report = replay(app, rid)  # what `tether check` does: executing and writing nothing
    assert (report.outcome, report.position) == ("continues", 4), report
    what_if = replay(app, rid, replace={1: 100, 4: None})
    assert (what_if.outcome, what_if.output) == ("finished", [100, 16])


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_an_inline_child_is_a_span_around_the_childs_run(backend: Any, kind: str) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    app = tether.open(backend.url, tracing=tether.Tracing(provider))
    try:
        if kind == "sync":

            @app.agent
            def kid(run: tether.Run) -> int:
                return int(run.step("one", lambda: 1))

            @app.agent
            def parent(run: tether.Run) -> int:
                return int(run.child(kid, inline=True))

            assert app.run(parent).output == 1
        else:

            @app.agent(name="kid")
            async def akid(run: tether.AsyncRun) -> int:
                return int(await run.step("one", lambda: 1))

            @app.agent(name="parent")
            async def aparent(run: tether.AsyncRun) -> int:
                return int(await run.child(akid, inline=True))

            assert asyncio.run(app.arun(aparent)).output == 1
        by_name = {s.name: s for s in spans.get_finished_spans()}
        call, kid_run = by_name["child kid"], by_name["invoke_agent kid"]
        parent_run = by_name["invoke_agent parent"].context.span_id
        assert call.parent is not None and call.parent.span_id == parent_run
        # the child's run is under the call that ran it, and its steps under its run
        assert kid_run.parent is not None and kid_run.parent.span_id == call.context.span_id
        step = by_name["step one"]
        assert step.parent is not None and step.parent.span_id == kid_run.context.span_id
        assert kid_run.context.trace_id == call.context.trace_id
        assert call.start_time <= kid_run.start_time <= kid_run.end_time <= call.end_time
    finally:
        app.close()


def test_an_inline_child_belongs_to_its_parents_tenant(app: tether.App) -> None:
    @app.agent
    def kid(run: tether.Run) -> str | None:
        return run.tenant

    @app.agent
    def parent(run: tether.Run) -> Any:
        return run.child(kid, inline=True)

    rid = app.for_tenant("acme").start(parent, queue="parents")
    app.worker(queues=["parents"]).run(until_idle=True, install_signals=False)
    assert app.get(rid).output == "acme"
    assert app.store.get_run(child_id(rid, 1)).owner == "acme"


def test_a_fresh_parents_inline_child_is_created_with_its_first_append(app: tether.App) -> None:
    """In the parent's first execution, nothing of the child is written while its pure
    steps run: its creation rides with its first append (engine.births), here its end, or
    the intent of a write tool, which is written before the tool runs."""
    seen: list[str] = []

    def look(rid: str) -> str:
        try:
            seen.append(app.store.get_run(rid).status)
        except tether.NotFound:
            seen.append("absent")
        return rid

    @app.tool(risk="write")
    def send(rid: str, *, idempotency_key: str) -> str:
        effect = app.store.get_effect(idempotency_key)
        return look(rid) + ("" if effect is None else f":{effect.status}")

    @app.agent
    def pure(run: tether.Run) -> str:
        return str(run.step("look", look, run.id))

    @app.agent
    def writes(run: tether.Run) -> str:
        run.step("look", look, run.id)
        return str(run.tool(send, run.id))

    @app.agent
    def parent(run: tether.Run) -> list[str]:
        return [run.child(pure, inline=True), run.child(writes, inline=True)]

    handle = app.run(parent)
    one, two = child_id(handle.id, 1), child_id(handle.id, 2)
    assert (handle.status, handle.output) == ("completed", [one, f"{two}:intent"])
    assert seen == ["absent", "absent", "running"]  # the tool's: created with its intent
    for k in (one, two):
        assert app.get(k).status == "completed"
        types = [e.type for e in app.events(k)]
        assert types[:2] == ["run.created", "run.started"] and types.count("run.created") == 1


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_an_inline_child_created_meanwhile_is_taken_as_it_is(app: tether.App, kind: str) -> None:
    """A child that exists when the parent's first execution reaches it (another
    execution created it): the creation riding with its first append is refused, nothing
    of that execution is written, and the parent executes the existing child from its log."""
    calls = Calls()

    @app.agent
    def kid(run: tether.Run, word: str) -> str:
        return str(run.step("shout", calls, f"kid:{word}", word.upper()))

    @app.agent
    def parent(run: tether.Run) -> str:
        return str(run.child(kid, "mine", inline=True))

    @app.agent(name="parent_async")
    async def aparent(run: tether.AsyncRun) -> str:
        return str(await run.child(kid, "mine", inline=True))

    rid = app.start(parent if kind == "sync" else aparent, run_id="p-31")
    app.start(kid, "theirs", run_id=child_id(rid, 1))  # queued, not executed yet
    drain(app)  # the parent's first claim (epoch 1) executes the child inline
    assert (app.get(rid).status, app.get(rid).output) == ("completed", "THEIRS")
    assert calls.n == {"kid:mine": 1, "kid:theirs": 1}  # the refused execution's step ran
    types = [e.type for e in app.events(child_id(rid, 1))]
    assert types.count("run.created") == 1 and types.count("step.completed") == 1


def test_an_inline_child_that_fails_at_once_is_created_failed(app: tether.App) -> None:
    @app.agent
    def kid(run: tether.Run) -> None:
        raise ValueError("no")

    @app.agent
    def parent(run: tether.Run) -> str:
        try:
            run.child(kid, inline=True)
        except tether.ChildFailed as e:
            return str(e.error.get("type"))
        return "no error"

    handle = app.run(parent)
    assert handle.output == "ValueError"
    assert app.get(child_id(handle.id, 1)).status == "failed"


def test_an_inline_childs_steps_are_durable_before_the_next_call_runs(
    backend: Backend,
) -> None:
    """What the parent's steps promise holds across its children: a step is durable before
    the next call runs (anywhere in the tree), so a crash in that call runs no completed
    step again. Each step here looks, through a connection of its own, at what is
    committed: the previous child, created, stepped and ended (one fast step each, the
    case where its whole life is one write), is there; the parent's record of it may
    still ride with the parent's next append."""
    app = tether.open(backend.url)
    outside = backend.open()
    seen: list[str | None] = []

    def look(rid: str) -> str | None:
        try:
            return outside.get_run(rid).status
        except tether.NotFound:
            return None

    @app.agent
    def kid(run: tether.Run, before: str) -> str:
        return str(run.step("look", lambda: look(before) or "none"))

    @app.agent
    def parent(run: tether.Run) -> list[str]:
        first = run.child(kid, "nothing", inline=True)
        second = run.child(kid, child_id(run.id, 1), inline=True)
        seen.append(run.step("after", look, child_id(run.id, 2)))
        return [first, second]

    try:
        handle = app.run(parent)
        assert handle.output == ["none", "completed"]  # child 1 committed before child 2's step
        assert seen == ["completed"]  # child 2 committed before the parent's next step
    finally:
        app.close()


def test_a_slow_inline_childs_record_rides_with_the_parents_next_append(
    backend: Backend,
) -> None:
    """The parent's record of an inline child is deferred however long the child took (a
    slow step's record is appended at once, a child's never: the child is found again by
    its id, so the record costs no commit of its own)."""
    app = tether.open(backend.url)
    outside = backend.open()
    seen: list[list[str]] = []

    @app.agent
    def kid(run: tether.Run) -> int:
        return int(run.step("slow", lambda: time.sleep(0.08) or 1))

    @app.agent
    def parent(run: tether.Run) -> int:
        out = int(run.child(kid, inline=True))
        seen.append([e.type for e in outside.read_events(run.id)])
        return out

    try:
        handle = app.run(parent)
        assert handle.output == 1
        assert "step.completed" not in seen[0]  # not yet: it rides with the run's end
        assert [s.kind for s in app.get(handle.id).steps] == ["child"]
    finally:
        app.close()


def test_a_deep_failure_is_repeated_by_each_parent_in_a_bounded_message(app: tether.App) -> None:
    """Each parent's ChildFailed repeats the first words of its child's failure, not the
    whole of it: a failure at depth n made every level's record hold all the levels below
    (a 200-deep chain of inline children stored 14 MB of events for one RecursionError)."""

    @app.agent
    def node(run: tether.Run, depth: int) -> int:
        if depth == 0:
            raise ValueError("x" * 5000)
        return int(run.child(node, depth - 1, inline=True))

    with pytest.raises(tether.RunFailed) as failed:
        app.run(node, 12)
    assert len(str(failed.value)) < 1500
    sizes = [len(e.data) for r in app.runs(limit=100) for e in app.events(r.id)]
    assert max(sizes) < 20_000, max(sizes)  # the deepest: its own 5,000 characters, twice


def test_a_boards_change_by_an_unborn_child_finds_the_child_created(backend: Backend) -> None:
    """An inline child's creation waits for its first write, unless a call's record names
    it elsewhere first: a board's change names its run, so the child is created before the
    change is (a crash after the change would otherwise leave a history naming a run that
    never existed). Looked at through another connection right after the write returns."""
    app = tether.open(backend.url)
    outside = backend.open()
    seen: list[bool] = []

    def exists(rid: str) -> bool:
        try:
            outside.get_run(rid)
        except tether.NotFound:
            return False
        return True

    @app.agent
    def kid(run: tether.Run) -> int:
        seen.append(exists(run.id))  # nothing written yet: not created
        run.board("shared").set("k", 1)
        seen.append(exists(run.id))
        return 1

    @app.agent
    def parent(run: tether.Run) -> int:
        return int(run.child(kid, inline=True))

    try:
        handle = app.run(parent)
        assert handle.output == 1 and seen == [False, True]
        assert app.board("shared").history("k")[0].run_id == f"{handle.id}~1"
    finally:
        app.close()
