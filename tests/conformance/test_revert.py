"""Precise revert (tether.engine.revert): one completed effect undone by its compensation,
journaled, the rest of the run left as it is; every refusal writes nothing; a revert a
crash interrupted finishes once; a compensation of the run later leaves it alone (on
every backend)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import tether
from tether.model.state import fold
from tether.store import Lease, snapshots

pytestmark = pytest.mark.conformance


@pytest.fixture
def app(backend: Any) -> Iterator[tether.App]:
    a = tether.open(backend.url)
    yield a
    a.close()


@dataclass
class World:
    """What the tools did: every booking and every undo (with its key), in order."""

    done: list[str] = field(default_factory=list)
    undone: list[tuple[str, str]] = field(default_factory=list)
    interrupt: set[str] = field(default_factory=set)  # undos that stop their process once
    agents: dict[str, Any] = field(default_factory=dict)
    tools: dict[str, Any] = field(default_factory=dict)


def _world(app: tether.App) -> World:
    w = World()

    def cancel_booking(result: dict[str, str], name: str, *, idempotency_key: str) -> str:
        if (name, idempotency_key) not in w.undone:  # dedups by key, like a real API
            w.undone.append((name, idempotency_key))
        if name in w.interrupt:
            w.interrupt.discard(name)
            raise KeyboardInterrupt  # the process stops here: intent written, no end
        return f"cancelled {name}"

    def forget(result: str, name: str) -> None:  # an undo that cannot dedup
        w.undone.append((name, "-"))
        if name in w.interrupt:
            w.interrupt.discard(name)
            raise KeyboardInterrupt

    @app.tool(risk="write", compensate=cancel_booking)
    def book(name: str, *, idempotency_key: str) -> dict[str, str]:
        w.done.append(name)
        return {"booked": name}

    @app.tool(risk="write", compensate=forget)
    def note(name: str) -> str:
        w.done.append(name)
        return name

    @app.tool(risk="write")
    def mail(name: str) -> str:
        w.done.append(name)
        return name

    @app.tool(risk="read", compensate=forget)
    def look(name: str) -> str:
        return name

    @app.agent
    def trip(run: tether.Run) -> list[str]:
        return [run.tool(book, n)["booked"] for n in ("flight", "hotel", "car")]

    @app.agent
    def gated(run: tether.Run) -> str:
        run.tool(book, "flight")
        run.tool(book, "hotel")
        run.approve("go")
        run.tool(book, "car")
        run.step("pay", lambda: 1 / 0)
        return "never"

    @app.agent
    def mixed(run: tether.Run) -> str:
        run.tool(look, "a")
        run.tool(mail, "b")
        run.tool(note, "c")
        run.step("pure", lambda: 1)
        return "ok"

    w.agents = {"trip": trip, "gated": gated, "mixed": mixed}
    w.tools = {"book": book}
    return w


def test_one_effect_is_undone_and_the_rest_of_the_run_stays(app: tether.App) -> None:
    w = _world(app)
    h = app.run(w.agents["trip"])
    before = app.get(h.id)
    done = app.revert(h.id, step=2, by="alice", reason="hotel cancelled by phone")
    assert w.undone == [("hotel", done.key)]
    assert (done.position, done.tool, done.by, done.output) == (
        2,
        "book",
        "alice",
        "cancelled hotel",
    )
    after = app.get(h.id)
    assert after.status == "completed" and after.output == before.output
    assert after.steps == before.steps  # no position taken, no step changed
    (r,) = after.reverts
    assert (r.position, r.kind, r.name, r.status, r.key) == (
        2,
        "revert",
        "undo:book",
        "completed",
        done.key,
    )
    assert r.detail is not None and (r.detail["by"], r.detail["reason"]) == (
        "alice",
        "hotel cancelled by phone",
    )
    assert done.key.startswith(f"{h.id}:2:undo:book:")
    assert app.record(h.id).status == "completed" and app.record(h.id).lease_owner is None
    # the effects table: the reverted call's row says so, the others still hold
    keys = [s.key for s in after.steps]
    assert [app.effect(k).status for k in keys] == ["completed", "compensated", "completed"]  # type: ignore[union-attr]
    assert app.effect(done.key).status == "completed"  # type: ignore[union-attr]
    intent = [
        e for e in app.events(h.id) if e.type == "tool.intent" and e.payload()["kind"] == "revert"
    ]
    assert len(intent) == 1 and intent[0].actor == "alice"
    # a snapshot between the revert's intent and its end, folded on, is the whole log's
    events = app.events(h.id)
    mid = fold(events[:-1])
    assert mid.revert_of(2) is not None and mid.revert_of(2).status == "running"  # type: ignore[union-attr]
    start = snapshots.decode(snapshots.encode(mid).root, lambda digest: b"")
    assert start == mid and fold(events[-1:], start) == fold(events) == after
    # visible in a diff between the step's point and the head
    d = app.diff(app.state(h.id, step=3), h.id)
    assert [c.where for c in d.changes if c.kind == "added"] == ["reverts[2]"]


def _refused(app: tether.App, run_id: str, step: int, match: str, **kw: Any) -> None:
    seq = app.get(run_id).seq
    with pytest.raises(tether.RevertRefused, match=match):
        app.revert(run_id, step=step, by="alice", **kw)
    assert app.get(run_id).seq == seq  # nothing written


def test_each_refusal_says_why_and_writes_nothing(app: tether.App) -> None:
    w = _world(app)
    h = app.run(w.agents["mixed"])
    _refused(app, h.id, 1, "risk read, not a call of a write tool")
    _refused(app, h.id, 2, "tool 'mail', which has no compensation")
    _refused(app, h.id, 4, "is a step step, not a call of a write tool")
    _refused(app, h.id, 9, "has no step at position 9")
    _refused(app, h.id, 0, "step is a position")
    _refused(app, h.id, 3, "no undo in doubt to settle", happened=True)
    with pytest.raises(tether.NotFound):
        app.revert("r-nope", step=1, by="alice")
    trip = app.run(w.agents["trip"])
    app.revert(trip.id, step=1, by="alice")
    _refused(app, trip.id, 1, "already reverted by alice")


def test_a_fork_s_copied_call_is_its_parent_s_to_revert(app: tether.App) -> None:
    w = _world(app)
    h = app.run(w.agents["trip"])
    fork = app.fork(h.id, step=2)
    app.resume(fork)
    _refused(app, fork, 1, f"copied from run {h.id}.*tether revert {h.id} --step 1")
    app.revert(fork, step=3, by="bob")  # its own call: the fork's to revert
    assert [n for n, _ in w.undone] == ["car"]
    assert app.effect(app.get(h.id).steps[2].key).status == "completed"  # type: ignore[union-attr]


def test_a_reverted_call_is_never_reused_by_a_fork(app: tether.App) -> None:
    w = _world(app)
    h = app.run(w.agents["trip"])
    app.revert(h.id, step=2, by="alice")
    with pytest.raises(tether.InvalidState, match=r"step 2 .*undone"):
        app.fork(h.id, step=3)
    app.fork(h.id, step=2, when="before")  # before it: the call runs again, its own key


def test_a_waiting_run_reverted_then_compensated_undoes_the_rest_once(app: tether.App) -> None:
    w = _world(app)
    h = app.run(w.agents["gated"])
    assert h.status == "waiting"
    app.revert(h.id, step=1, by="alice")
    assert app.get(h.id).status == "waiting"
    app.approve(h.id, "go", by="bob")
    with pytest.raises(tether.RunFailed):
        app.resume(h.id)  # replays to the same positions, then fails and compensates
    assert [n for n, _ in w.undone] == ["flight", "car", "hotel"]  # the flight once
    state = app.get(h.id)
    assert [s.detail["of"] for s in state.steps if s.kind == "compensate"] == [4, 2]  # type: ignore[index]


def test_cancel_compensate_leaves_a_reverted_call_alone(app: tether.App) -> None:
    w = _world(app)
    h = app.run(w.agents["gated"])
    app.revert(h.id, step=2, by="alice")
    app.cancel(h.id, compensate=True, by="bob")
    assert [n for n, _ in w.undone] == ["hotel", "flight"]
    _refused(app, h.id, 1, "being compensated or was")


def _interrupted(app: tether.App, w: World, agent: str, name: str, step: int) -> str:
    """A run of ``agent`` whose revert of ``step`` stopped inside its undo (of ``name``)."""
    h = app.run(w.agents[agent])
    w.interrupt.add(name)
    with pytest.raises(KeyboardInterrupt):
        app.revert(h.id, step=step, by="alice")
    return h.id


def test_an_interrupted_revert_finishes_once_with_its_key(app: tether.App) -> None:
    w = _world(app)
    rid = _interrupted(app, w, "trip", "hotel", 2)
    pending = app.get(rid).revert_of(2)
    assert pending is not None and pending.status == "running"
    assert app.effect(app.get(rid).steps[1].key).status == "compensating"  # type: ignore[union-attr]
    done = app.revert(rid, step=2, by="alice")  # finishes it: called again, same key
    assert done.resumed and w.undone == [("hotel", done.key)]
    r = app.get(rid).revert_of(2)
    assert r is not None and (r.status, r.attempts) == ("completed", 2)


def test_an_interrupted_undo_that_cannot_dedup_is_asked(app: tether.App) -> None:
    w = _world(app)
    rid = _interrupted(app, w, "mixed", "c", 3)
    _refused(app, rid, 3, "may have run.*--happened")
    assert w.undone == [("c", "-")]
    app.revert(rid, step=3, by="carol", happened=True)  # it did: recorded, not called again
    assert w.undone == [("c", "-")]
    r = app.get(rid).revert_of(3)
    assert r is not None and r.status == "completed"
    assert app.effect(app.get(rid).steps[2].key).status == "compensated"  # type: ignore[union-attr]


def test_an_undo_said_not_to_have_happened_is_called_again(app: tether.App) -> None:
    w = _world(app)
    rid = _interrupted(app, w, "mixed", "c", 3)
    app.revert(rid, step=3, by="carol", happened=False)
    assert w.undone == [("c", "-"), ("c", "-")]
    r = app.get(rid).revert_of(3)
    assert r is not None and (r.status, r.attempts) == ("completed", 2)


def _one_call(app: tether.App, undo: Any) -> str:
    """A completed run of one call of a write tool whose compensation is ``undo``."""

    @app.tool(risk="write", compensate=undo)
    def book(name: str, *, idempotency_key: str) -> str:
        return name

    @app.agent
    def one(run: tether.Run) -> str:
        return str(run.tool(book, "bob"))

    return app.run(one).id


def test_an_async_undo_is_awaited(app: tether.App) -> None:
    undone: list[str] = []

    async def unsend(result: str, to: str, *, idempotency_key: str) -> str:
        undone.append(to)
        return f"recalled {to}"

    rid = _one_call(app, unsend)
    assert app.revert(rid, step=1, by="alice").output == "recalled bob"
    assert undone == ["bob"]


def test_an_undo_that_fails_is_recorded_and_tried_again(app: tether.App) -> None:
    fails = [RuntimeError("the hotel's line is busy")]

    def unbook(result: str, name: str, *, idempotency_key: str) -> None:
        if fails:
            raise fails.pop()

    h = app.get(_one_call(app, unbook))
    with pytest.raises(tether.InvalidState, match="failed: RuntimeError: the hotel's line is busy"):
        app.revert(h.run_id, step=1, by="alice")
    r = app.get(h.run_id).revert_of(1)
    assert (
        r is not None
        and r.status == "failed"
        and r.errors[0]["message"] == "the hotel's line is busy"
    )
    assert app.effect(app.get(h.run_id).steps[0].key).status == "compensating"  # type: ignore[union-attr]
    assert app.revert(h.run_id, step=1, by="alice").resumed  # finishes the failed one
    r = app.get(h.run_id).revert_of(1)
    assert r is not None and (r.status, r.attempts) == ("completed", 2)


def test_a_claim_during_the_revert_fences_it_out(app: tether.App) -> None:
    claimed: list[Lease] = []

    def unbook(result: str, name: str, *, idempotency_key: str) -> None:
        if not claimed:  # a worker takes the run meanwhile (a queued run is claimable)
            now = app.clock.now()
            claimed.append(
                app.store.claim(rid, owner="worker:w1", ttl=30, now=now, takeover=app.owner)
            )

    rid = _one_call(app, unbook)
    with pytest.raises(tether.InvalidState, match="fenced out"):
        app.revert(rid, step=1, by="alice")
    r = app.get(rid).revert_of(1)
    assert r is not None and r.status == "running"  # its intent only: pending
    with pytest.raises(tether.RevertRefused, match="is executing in worker:w1"):
        app.revert(rid, step=1, by="alice")
    app.store.release(rid, epoch=claimed[0].epoch)
    assert app.revert(rid, step=1, by="alice").resumed
    assert app.get(rid).revert_of(1).status == "completed"  # type: ignore[union-attr]


def test_an_imported_revert_of_no_step_is_refused(app: tether.App) -> None:
    w = _world(app)
    h = app.run(w.agents["trip"])
    app.revert(h.id, step=2, by="alice")
    lines = app_export(app, h.id)
    assert '"kind":"revert"' in "".join(lines)
    moved = [
        line.replace('"pos":2,"name":"undo:book"', '"pos":7,"name":"undo:book"') for line in lines
    ]
    with pytest.raises(
        ValueError,
        match=r"do not fold into a run state .*a revert of position 7, which holds no step",
    ):
        app.import_run(moved, new_id=True)
    copy = app.import_run(lines, new_id=True)  # as written: imported whole
    assert app.get(copy).reverts == app.get(h.id).reverts


def app_export(app: tether.App, run_id: str) -> list[str]:
    import io

    out = io.StringIO()
    app.export_run(run_id, out)
    return out.getvalue().splitlines()


def test_a_run_executing_in_this_process_is_refused(app: tether.App) -> None:
    w = _world(app)
    book = w.tools["book"]
    seen: list[str] = []

    @app.agent
    def selfish(run: tether.Run) -> str:
        run.tool(book, "flight")
        try:
            app.revert(run.id, step=1, by="alice")
        except tether.RevertRefused as e:
            seen.append(str(e))
        return "done"

    h = app.run(selfish)
    assert h.status == "completed" and w.undone == []
    assert len(seen) == 1 and "is executing in this process" in seen[0]


def test_a_call_in_doubt_is_settled_before_it_is_reverted(app: tether.App) -> None:
    calls: list[int] = []

    @app.tool(risk="write", compensate=lambda result, n: None)
    def charge(n: int) -> int:  # no idempotency_key: in doubt, tether asks
        calls.append(n)
        if len(calls) == 1:
            raise KeyboardInterrupt  # the process stops in the call: its intent, no end
        return n

    @app.agent
    def once(run: tether.Run) -> int:
        return int(run.tool(charge, 5))

    rid = app.start(once)
    with pytest.raises(KeyboardInterrupt):
        app.resume(rid)
    assert app.resume(rid).status == "waiting"  # in doubt: a person says what happened
    _refused(app, rid, 1, "that is in_doubt, not completed.*tether resolve")
    assert calls == [5]
