"""Boards (``app.board``, ``run.board``) on SQLite and PostgreSQL: compare-and-set with
versions that never skip, every change kept with its run, position and who, reads at a
point in time, tenants that never see each other's boards, and writes from a run that a
replay never applies twice."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _conformance import Backend

import tether
from tether.model.clock import FakeClock
from tether.store.board_rows import BoardWrite

pytestmark = pytest.mark.conformance


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def app(backend: Backend, clock: FakeClock) -> Iterator[tether.App]:
    a = tether.open(backend.url, clock=clock)
    yield a
    a.close()


def test_compare_and_set_takes_the_next_version_or_raises(app: tether.App) -> None:
    board = app.board("incident-42")
    value, version = board.get("owner")
    assert (value, version) == (None, 0) and not board.get("owner").exists
    assert board.set("owner", "alice", expected_version=0) == 1
    with pytest.raises(tether.VersionConflict, match=r"at version 1, not 0") as e:
        board.set("owner", "bob", expected_version=0)
    assert isinstance(e.value, tether.Conflict) and e.value.version == 1
    assert board.get("owner").value == "alice"  # nothing written by the refused set
    assert board.set("owner", "bob", expected_version=1) == 2
    assert board.set("owner", {"name": "carol"}) == 3  # no expected version: any
    assert board.get("owner").value == {"name": "carol"} and board.get("owner").version == 3


def test_a_delete_is_a_change_and_versions_go_on(app: tether.App) -> None:
    board = app.board("b")
    board.set("k", 1)
    with pytest.raises(tether.VersionConflict):
        board.delete("k", expected_version=7)
    assert board.delete("k", expected_version=1) == 2
    assert board.delete("k") is None  # held no value: nothing written
    entry = board.get("k")
    assert entry.deleted and not entry.exists and (entry.value, entry.version) == (None, 2)
    assert board.items() == {}
    assert board.set("k", "again", expected_version=2) == 3
    assert [(e.version, e.value, e.deleted) for e in board.history("k")] == [
        (1, 1, False),
        (2, None, True),
        (3, "again", False),
    ]


def test_history_names_who_and_when_and_reads_at_a_time(app: tether.App, clock: FakeClock) -> None:
    board = app.board("b", by="ops")
    t0 = clock.now()
    board.set("a", 1)
    clock.advance(10)
    board.set("b", 2, by="alice")
    clock.advance(10)
    board.set("a", 3)
    board.delete("b")
    history = board.history("a")
    assert [(e.version, e.value, e.by, e.at) for e in history] == [
        (1, 1, "ops", t0),
        (2, 3, "ops", t0 + 20),
    ]
    assert [(e.key, e.version) for e in board.history()] == [("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    assert board.history("a", after=1) == history[1:] and board.history(limit=1)[0].key == "a"
    assert board.get("a", at=t0 - 1).version == 0
    assert board.get("a", at=t0 + 15).value == 1
    assert {k: e.value for k, e in board.items(at=t0 + 15).items()} == {"a": 1, "b": 2}
    assert {k: e.value for k, e in board.items().items()} == {"a": 3}
    assert [(s.tenant, s.board, s.keys) for s in app.store.list_boards(None)] == [("", "b", 1)]


def test_boards_and_keys_are_separate(app: tether.App) -> None:
    app.board("x").set("k", "x's")
    app.board("y").set("k", "y's")
    app.board("x").set("j", "x's j")
    assert app.board("x").get("k").value == "x's" and app.board("y").get("k").version == 1
    assert sorted(app.board("x").items()) == ["j", "k"]


def test_a_tenant_sees_only_its_boards(app: tether.App) -> None:
    app.board("shared").set("k", "unscoped")
    acme, globex = app.for_tenant("acme").board("shared"), app.for_tenant("globex").board("shared")
    assert acme.get("k").version == 0  # the unscoped board is not acme's
    acme.set("k", "acme's")
    assert globex.get("k").version == 0 and globex.items() == {} and globex.history() == []
    assert app.board("shared").get("k").value == "unscoped"
    assert app.for_tenant("acme").board("shared").get("k").value == "acme's"
    assert [(s.tenant, s.board) for s in app.store.list_boards("acme")] == [("acme", "shared")]
    assert len(app.store.list_boards(None)) == 2


def test_a_viewer_reads_an_operator_writes_under_its_name(app: tether.App) -> None:
    viewer = app.scoped(tether.Identity("vic", tether.Role.VIEWER, "acme")).board("b")
    operator = app.scoped(tether.Identity("olga", tether.Role.OPERATOR, "acme")).board("b")
    operator.set("k", 1)
    assert viewer.get("k").value == 1 and viewer.history("k")[0].by == "olga"
    with pytest.raises(tether.Forbidden, match="may not write a board"):
        viewer.set("k", 2)
    assert operator.get("k").version == 1


def test_bad_arguments_are_refused_before_any_write(app: tether.App) -> None:
    board = app.board("b")
    with pytest.raises(tether.InvalidInput, match="board key"):
        board.set("", 1)
    with pytest.raises(tether.InvalidInput, match="expected_version"):
        board.set("k", 1, expected_version=-1)
    with pytest.raises(tether.EncodeError, match="board 'b' key 'k'"):
        board.set("k", object())
    with pytest.raises(tether.InvalidInput, match="board name"):
        app.board("")
    assert board.history() == []


def test_a_run_position_writes_once(app: tether.App, clock: FakeClock) -> None:
    """The store's side of a replay after a crash: the same run position writing again
    finds its change, whatever the expected version says now."""
    store = app.store
    first = BoardWrite("", "b", "k", "1", 0, clock.now(), run_id="r1", pos=3, actor="a")
    assert store.write_board(first).version == 1
    app.board("b").set("k", 2)  # someone else writes after it
    again = store.write_board(first)
    assert again.replayed and again.written and again.version == 1
    assert [e.version for e in app.board("b").history("k")] == [1, 2]


@pytest.fixture
def agents(app: tether.App) -> dict[str, Any]:
    @app.agent
    def bump_with_rival(run: tether.Run) -> list[Any]:
        board = run.board("counter")
        seen = []
        value, version = board.get("n")
        run.step("rival", lambda: app.board("counter").set("n", 100))  # writes first
        while True:
            try:
                board.set("n", (value or 0) + 1, expected_version=version)
                break
            except tether.VersionConflict as e:
                seen.append(e.version)
                value, version = board.get("n")
        run.wait("go")
        return [*seen, board.get("n").value]

    @app.agent
    async def async_bump(run: tether.AsyncRun) -> int:
        board = run.board("counter")
        entry = await board.get("n")
        version = await board.set("n", (entry.value or 0) + 1, expected_version=entry.version)
        await board.delete("gone")
        await run.wait("go")
        return int(version)

    return {"sync": bump_with_rival, "async": async_bump}


def test_a_run_catches_a_conflict_rereads_and_a_replay_writes_nothing(
    app: tether.App, agents: dict[str, Any]
) -> None:
    handle = app.run(agents["sync"])
    assert handle.status == "waiting"
    history = app.board("counter").history("n")
    assert [(e.version, e.value) for e in history] == [(1, 100), (2, 101)]
    ours = history[1]
    assert ours.run_id == handle.id and ours.by == "bump_with_rival"
    steps = {s.position: s for s in app.get(handle.id).steps}
    assert steps[ours.position or 0].name == "board counter set n"
    assert steps[3].output == {"key": "n", "conflict": 1, "expected": 0}  # recorded, not failed
    app.signal(handle.id, "go", None)
    done = app.resume(handle.id)  # replays every board step from the log
    assert done.output == [1, 101]
    assert [e.version for e in app.board("counter").history("n")] == [1, 2]


def test_an_async_run_awaits_its_board_steps(app: tether.App, agents: dict[str, Any]) -> None:
    app.board("counter").set("n", 41)
    handle = asyncio.run(app.arun(agents["async"]))
    assert handle.status == "waiting" and app.board("counter").get("n").value == 42
    app.signal(handle.id, "go", None)
    assert asyncio.run(app.aresume(handle.id)).output == 2
    assert len(app.board("counter").history("n")) == 2


def test_update_reads_modifies_and_writes_again_when_another_came_first(
    backend: Backend,
) -> None:
    """``board.update(key, fn)``: compare-and-set of ``fn(value)``, again from a fresh
    read after a conflict. Eight threads, each with its own App on the database, add 1
    fifty times: 400, versions 1..400 without a gap, every write one change."""
    apps = [tether.open(backend.url) for _ in range(8)]
    try:
        results: list[int] = []

        def add(app: tether.App) -> None:
            board = app.board("shared")
            for _ in range(50):
                results.append(board.update("n", lambda v: (v or 0) + 1).value)

        threads = [threading.Thread(target=add, args=(a,)) for a in apps]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        board = apps[0].board("shared")
        assert tuple(board.get("n")) == (400, 400)
        assert sorted(results) == list(range(1, 401))  # each value returned once
        assert [e.version for e in board.history("n")] == list(range(1, 401))
    finally:
        for a in apps:
            a.close()


def test_update_writes_nothing_when_fn_raises_and_refuses_a_non_function(
    app: tether.App,
) -> None:
    board = app.board("b")
    board.set("k", 1)

    def boom(v: Any) -> Any:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        board.update("k", boom)
    with pytest.raises(tether.InvalidInput, match="a function of the value"):
        board.update("k", 5)  # type: ignore[arg-type]
    assert tuple(board.get("k")) == (1, 1)
    assert tuple(board.update("fresh", lambda v: [v])) == ([None], 1)


def test_a_runs_update_is_steps_that_a_replay_does_not_apply_again(app: tether.App) -> None:
    """In a run, update is a get step and a set step, again after a conflict (each a step
    of its own); fn runs on the value the log recorded, so a replay computes the same
    writes and applies none of them again."""
    rival = app.board("tally")
    moved: list[int] = []

    def add_one(v: Any) -> Any:
        if not moved:  # another writer comes between the read and the write, once
            moved.append(rival.set("n", 100))
        return (v or 0) + 1

    @app.agent
    def bump(run: tether.Run) -> Any:
        entry = run.board("tally").update("n", add_one)
        run.wait("go")
        return tuple(entry)

    handle = app.run(bump)
    assert handle.status == "waiting"
    assert [(e.version, e.value) for e in rival.history("n")] == [(1, 100), (2, 101)]
    names = [s.name for s in app.get(handle.id).steps]
    assert names[:4] == ["board tally get n", "board tally set n"] * 2  # the conflict, again
    app.signal(handle.id, "go", None)
    assert app.resume(handle.id).output == (101, 2)
    assert len(rival.history("n")) == 2  # the replay wrote nothing

    @app.agent
    async def abump(run: tether.AsyncRun) -> Any:
        return tuple(await run.board("tally").update("n", lambda v: v * 2))

    assert asyncio.run(app.arun(abump)).output == (202, 3)
