"""What an undo leaves behind, on both backends: its call (the recorded result and
arguments, its own idempotency key), its record in the log (the ``tool.intent`` of a
``compensate`` step), the effects-table rows of the undone call and of the undo, and the
retry policy it runs under (the tool's, else the App's)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _conformance import Backend

import tether
from tether import FakeClock
from tether.model import codec
from tether.store import Effect

pytestmark = pytest.mark.conformance

T0 = 5_000.0
FAST = {"backoff": 0.0, "jitter": 0.0}  # a retry at once: the fake clock needs no advance


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def app(backend: Backend, clock: FakeClock) -> Iterator[tether.App]:
    a = tether.open(backend.url, clock=clock)
    yield a
    a.close()


def _fails() -> None:
    raise RuntimeError("the carrier is down")


def _order(app: tether.App, refund: Any, retry: tether.Retry | None = None) -> Any:
    @app.tool(risk="write", compensate=refund, retry=retry)
    def charge(order: str, *, amount: int, idempotency_key: str) -> dict[str, Any]:
        return {"charge": f"ch-{order}-{amount}"}

    @app.agent
    def order(run: tether.Run, order: str) -> None:
        run.tool(charge, order, amount=40)
        run.step("ship", _fails)

    return order


def _failed_run(app: tether.App, agent: Any) -> str:
    with pytest.raises(tether.RunFailed):
        app.run(agent, "o-1")
    (record,) = app.runs()
    return record.id


def _undo_key(run_id: str, pos: int, charge_key: str) -> tuple[str, str]:
    digest = codec.digest({"of": 1, "key": charge_key})
    return f"{run_id}:{pos}:undo:charge:{digest[:16]}", digest


def test_an_undo_gets_the_result_the_arguments_and_its_own_key(app: tether.App) -> None:
    calls: list[tuple[Any, ...]] = []

    def refund(result: Any, order: str, *, amount: int, idempotency_key: str) -> None:
        calls.append((result, order, amount, idempotency_key))

    run_id = _failed_run(app, _order(app, refund))
    state = app.get(run_id)
    charge_key = state.steps[0].key
    assert charge_key is not None
    undo_key, digest = _undo_key(run_id, 3, charge_key)
    assert calls == [({"charge": "ch-o-1-40"}, "o-1", 40, undo_key)]
    (charged, undo) = [e for e in app.events(run_id) if e.type == "tool.intent"]
    code = charged.payload()["code"]
    assert undo.payload() == {
        "pos": 3, "name": "undo:charge", "kind": "compensate", "key": undo_key, "attempt": 1,
        "digest": digest, "risk": "write", "of": 1, "input": None, "code": code,
    }  # fmt: skip
    (completed,) = [e.payload() for e in app.events(run_id) if e.type == "step.completed"
                    and e.payload()["pos"] == 3]  # fmt: skip
    assert completed["key"] == undo_key and completed["kind"] == "compensate"
    step = state.steps[2]
    assert (step.position, step.name, step.kind, step.status, step.attempts) == (
        3, "undo:charge", "compensate", "completed", 1,
    )  # fmt: skip
    assert (step.key, step.input_digest) == (undo_key, digest)
    assert step.detail == {"risk": "write", "of": 1, "input": None, "code": code}


def _effects(app: tether.App, backend: Backend, run_id: str) -> tuple[Effect, Effect]:
    """The effects-table rows of the charge at position 1 and of its undo at 3."""
    charge_key = app.get(run_id).steps[0].key
    assert charge_key is not None
    undo_key, _ = _undo_key(run_id, 3, charge_key)
    store = backend.open()
    try:
        undone, own = store.get_effect(charge_key), store.get_effect(undo_key)
    finally:
        store.close()
    assert undone is not None and own is not None
    return undone, own


def test_an_undo_marks_the_undone_call_and_records_its_own_effect(
    app: tether.App, backend: Backend
) -> None:
    run_id = _failed_run(app, _order(app, lambda result, order, **kw: None))
    undone, own = _effects(app, backend, run_id)
    assert (undone.run_id, undone.position, undone.tool, undone.status) == (
        run_id, 1, "charge", "compensated",
    )  # fmt: skip
    assert undone.result is not None and codec.decode(undone.result) == {"charge": "ch-o-1-40"}
    assert (own.run_id, own.position, own.tool, own.status) == (
        run_id, 3, "undo:charge", "completed",
    )  # fmt: skip


def test_a_failed_undo_leaves_the_call_marked_compensating(
    app: tether.App, backend: Backend
) -> None:
    def refund(result: Any, order: str, **kw: Any) -> None:
        raise RuntimeError("the bank refused")

    run_id = _failed_run(app, _order(app, refund))
    state = app.get(run_id)
    undone, own = _effects(app, backend, run_id)
    assert (undone.status, undone.position, undone.tool) == ("compensating", 1, "charge")
    assert undone.result is not None and codec.decode(undone.result) == {"charge": "ch-o-1-40"}
    assert (own.status, own.position, own.tool) == ("intent", 3, "undo:charge")
    assert state.steps[2].status == "failed"
    assert state.failure is not None
    assert state.failure["compensation_failures"] == [
        {"position": 1, "tool": "charge", "type": "RuntimeError", "message": "the bank refused"}
    ]


def _flaky_refund(tries: list[int]) -> Any:
    def refund(result: Any, order: str, **kw: Any) -> None:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("the bank hung up")

    return refund


def test_an_undo_retries_under_its_tool_s_policy(app: tether.App) -> None:
    tries: list[int] = []
    retry = tether.Retry(max_attempts=2, **FAST)
    run_id = _failed_run(app, _order(app, _flaky_refund(tries), retry=retry))
    state = app.get(run_id)
    assert len(tries) == 2
    assert (state.steps[2].status, state.steps[2].attempts) == ("completed", 2)
    assert state.failure is not None and "compensation_failures" not in state.failure


def test_an_undo_of_a_tool_without_a_policy_retries_under_the_app_s(
    backend: Backend, clock: FakeClock
) -> None:
    tries: list[int] = []
    app = tether.open(backend.url, clock=clock, retry=tether.Retry(max_attempts=2, **FAST))
    try:
        run_id = _failed_run(app, _order(app, _flaky_refund(tries)))
        state = app.get(run_id)
    finally:
        app.close()
    assert len(tries) == 2
    assert (state.steps[2].status, state.steps[2].attempts) == ("completed", 2)


UNDONE: list[str] = []


def _release(result: str, item: str) -> None:
    UNDONE.append(result)


@tether.tool(risk="write", compensate=_release)
def reserve(item: str) -> str:
    """A tool no App registers: a run finds it where its step recorded its code."""
    return f"rs-{item}"


def test_an_unregistered_tool_is_undone_through_its_recorded_code(app: tether.App) -> None:
    UNDONE.clear()

    @app.agent
    def order(run: tether.Run, order: str) -> None:
        run.tool(reserve, "book")
        run.step("ship", _fails)

    assert "reserve" not in app.tools()
    run_id = _failed_run(app, order)
    assert UNDONE == ["rs-book"]
    failure = app.get(run_id).failure
    assert failure is not None and "compensation_failures" not in failure
    assert app.get(run_id).steps[2].name == "undo:reserve"


class Crash(BaseException):
    """Stands for the process dying (not an Exception: nothing records it)."""


REFUNDED: list[str] = []
CRASH_ON: set[str] = set()


def _refund(result: str, who: str) -> None:
    if who in CRASH_ON:
        CRASH_ON.discard(who)
        raise Crash
    REFUNDED.append(who)


@tether.tool(risk="write", compensate=_refund, name="charge")
def charge_old(who: str) -> str:
    return f"ch-{who}"


@tether.tool(risk="write", compensate=_refund, name="charge")
def charge_new(who: str) -> str:
    return f"ch-{who}"


def test_a_deploy_that_changes_which_call_an_undo_undoes_blocks_the_run(
    app: tether.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two calls of tool "charge" recorded from two code locations; a compensation undid
    the second and died undoing the first. Deployed code drops the second's undo: the
    recorded undo at that position no longer undoes the same call, and the run is
    blocked (holding no lease) rather than taking it for the first call's undo, which
    never ran; with the code back, the compensation goes on."""
    REFUNDED.clear()
    CRASH_ON.clear()
    CRASH_ON.add("a")

    @app.agent
    def pay(run: tether.Run, order: str) -> None:
        run.tool(charge_old, "a")
        run.tool(charge_new, "b")
        run.step("ship", _fails)

    with pytest.raises(Crash):
        app.run(pay, "o-1")
    (record,) = app.runs()
    assert REFUNDED == ["b"]
    no_undo = tether.tool(risk="write", name="charge")(lambda who: f"ch-{who}")
    monkeypatch.setattr(__import__(__name__), "charge_new", no_undo)
    with pytest.raises(tether.NondeterminismError, match="undo:charge"):
        app.resume(record.id)
    assert app.get(record.id).status == "blocked"
    assert REFUNDED == ["b"]
    monkeypatch.undo()  # the code matches the log again: the compensation goes on
    with pytest.raises(tether.RunFailed, match="carrier is down"):
        app.resume(record.id)
    assert REFUNDED == ["b", "a"]
    failure = app.get(record.id).failure  # the recorded undo of "b" replayed cleanly
    assert failure is not None and "compensation_failures" not in failure


def test_a_call_that_failed_is_not_undone(app: tether.App) -> None:
    undone: list[str] = []

    @app.tool(risk="write", compensate=lambda result, item: undone.append(item))
    def hold(item: str) -> str:
        raise RuntimeError("sold out")

    @app.agent
    def order(run: tether.Run, order: str) -> None:
        run.tool(hold, "seat")

    run_id = _failed_run(app, order)
    assert undone == []
    assert [(s.name, s.status) for s in app.get(run_id).steps] == [("hold", "failed")]
