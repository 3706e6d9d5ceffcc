"""Decisions are taken by people: a group's name is nobody's identity, even for a process
that does not know the group; and a call said to have happened needs its result."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _conformance import Backend

import tether

pytestmark = pytest.mark.conformance

GROUPS = {"ops": ["alice", "bob"]}


@pytest.fixture
def app(backend: Backend) -> Iterator[tether.App]:
    a = tether.open(backend.url, approver_groups=GROUPS)
    yield a
    a.close()


@pytest.fixture
def bare(backend: Backend) -> Iterator[tether.App]:
    """The same database opened without the app's groups (a CLI given only --db)."""
    a = tether.open(backend.url)
    yield a
    a.close()


def _waiting(app: tether.App, approvers: list[str] | None = ["ops"]) -> str:  # noqa: B006
    @app.agent
    def refund(run: tether.Run) -> Any:
        return run.approve("send", payload={"amount": 30}, approvers=approvers)["by"]

    handle = app.run(refund)
    assert handle.status == "waiting"
    return handle.id


def _refusals(app: tether.App, run_id: str) -> list[tuple[str | None, str]]:
    return [(r.actor, r.action) for r in app.audit(run_id)]


def test_deciding_as_a_group_is_refused_and_audited(app: tether.App) -> None:
    run_id = _waiting(app)
    for decide in (app.approve, app.deny):
        with pytest.raises(tether.DecisionRefused, match=r"'ops' is a group, not a person.*alice"):
            decide(run_id, "send", by="ops")
    assert _refusals(app, run_id) == [("ops", "approval.refused")] * 2
    app.approve(run_id, "send", by="bob")
    assert app.resume(run_id).output == "bob"


def test_a_group_name_is_no_identity_even_where_approvers_are_open(app: tether.App) -> None:
    run_id = _waiting(app, approvers=None)  # anyone may decide: any person
    with pytest.raises(tether.DecisionRefused, match="is a group"):
        app.approve(run_id, "send", by="ops")
    app.approve(run_id, "send", by="carol")
    assert app.resume(run_id).output == "carol"


def test_a_process_without_the_groups_still_knows_ops_is_a_group(
    app: tether.App, bare: tether.App
) -> None:
    run_id = _waiting(app)  # the request records that "ops" names a group
    with pytest.raises(tether.DecisionRefused, match="'ops' is a group"):
        bare.approve(run_id, "send", by="ops")
    with pytest.raises(tether.DecisionRefused, match=r"not defined in this app.*--app"):
        bare.approve(run_id, "send", by="alice")  # who is in ops is the app's to say
    assert _refusals(bare, run_id) == [("ops", "approval.refused"), ("alice", "approval.refused")]
    app.approve(run_id, "send", by="alice")
    assert app.resume(run_id).output == "alice"


def test_identities_listed_by_name_still_decide(app: tether.App) -> None:
    run_id = _waiting(app, approvers=["carol", "ops"])
    with pytest.raises(tether.DecisionRefused, match="not among the approvers"):
        app.approve(run_id, "send", by="mallory")
    app.approve(run_id, "send", by="carol")
    assert app.resume(run_id).output == "carol"


def test_bad_approvers_and_groups_are_refused(app: tether.App, backend: Backend) -> None:
    @app.agent
    def lettered(run: tether.Run) -> Any:
        return run.approve("send", approvers="ops")

    with pytest.raises(tether.RunFailed, match=r"approvers is a list.*\['alice', 'ops'\]"):
        app.run(lettered)  # not the approvers o, p and s
    with pytest.raises(ValueError, match="groups do not nest"):
        tether.open(backend.url, approver_groups={"ops": ["alice", "admins"], "admins": ["eve"]})


def _in_doubt(app: tether.App, fn: Any) -> str:
    tool = app.tool(risk="write", on_doubt="ask", retry=tether.Retry(timeout=0.05))(fn)

    @app.agent
    def pay(run: tether.Run) -> Any:
        return {"result": run.tool(tool, 40)}

    handle = app.run(pay)
    assert handle.status == "waiting" and handle.waiting and handle.waiting["kind"] == "doubt"
    return handle.id


_ANSWER = threading.Event()  # set at the end of each test: the hanging calls return


@pytest.fixture(autouse=True)
def _answer() -> Iterator[None]:
    _ANSWER.clear()
    yield
    _ANSWER.set()


def _hangs(amount: int) -> dict[str, int]:  # no answer within its timeout
    _ANSWER.wait(60)
    return {"charge_id": 1}


def _hangs_quietly(amount: int) -> None:
    _ANSWER.wait(60)


class _AnsweredAtTheBackoff(tether.FakeClock):
    """A clock whose pause between two attempts is when a hanging call gets its answer."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = threading.Event()

    def sleep(self, seconds: float) -> None:
        self.answer.set()
        super().sleep(seconds)


@pytest.mark.parametrize("on_doubt", ["retry", "ask"])
def test_a_timed_out_call_is_retried_only_by_a_tool_that_dedups(
    backend: Backend, on_doubt: str
) -> None:
    """A write tool's call past its timeout is in doubt. A tool that dedups is retried
    (its retry waits for the abandoned attempt, answered meanwhile, and takes its
    outcome: the function runs once); a tool that asks is asked about at once, its
    attempts left unused."""
    clock = _AnsweredAtTheBackoff()
    app = tether.open(backend.url, clock=clock)
    keys: list[str] = []
    try:
        # real time: the first attempt is abandoned at its timeout (it waits for the clock's
        # answer); the retry waits as long for it, which needs only to return by then
        policy = tether.Retry(max_attempts=2, timeout=2.0)

        @app.tool(risk="write", on_doubt=on_doubt, retry=policy)
        def charge(amount: int, *, idempotency_key: str) -> dict[str, int]:
            keys.append(idempotency_key)
            clock.answer.wait(30)
            return {"n": len(keys)}

        @app.agent
        def pay(run: tether.Run) -> Any:
            return run.tool(charge, 40)

        handle = app.run(pay)
        if on_doubt == "retry":
            assert (handle.status, handle.output, len(keys)) == ("completed", {"n": 1}, 1)
        else:
            assert handle.status == "waiting" and handle.waiting is not None
            assert (handle.waiting["kind"], handle.waiting["reason"]) == ("doubt", "timeout")
            assert len(keys) == 1 and clock.slept == []
            # the audit trail says which attempt timed out, when, and why
            (doubt,) = [e.payload() for e in app.events(handle.id) if e.type == "tool.in_doubt"]
            assert (doubt["attempt"], doubt["reason"]) == (1, "timeout")
            (error,) = app.get(handle.id).steps[0].errors
            assert (error["type"], error["at"]) == ("tether.errors.StepTimeout", clock.now())
    finally:
        clock.answer.set()
        app.close()


def test_a_deduping_tool_out_of_attempts_asks_rather_than_fails(app: tether.App) -> None:
    """A tool that dedups is retried when its call times out, while its policy has
    attempts left; after its last one, whether the call happened is still unknown: the
    run waits for a person, it does not fail."""
    keys: list[str] = []

    @app.tool(risk="write", on_doubt="retry", retry=tether.Retry(timeout=0.05))
    def charge(amount: int, *, idempotency_key: str) -> dict[str, int]:
        keys.append(idempotency_key)
        return _hangs(amount)

    @app.agent
    def pay(run: tether.Run) -> Any:
        return run.tool(charge, 40)

    handle = app.run(pay)
    assert handle.status == "waiting" and handle.waiting is not None
    assert (handle.waiting["kind"], handle.waiting["reason"]) == ("doubt", "timeout")
    assert len(keys) == 1


def test_happened_without_a_result_is_refused_for_a_tool_that_returns_one(
    app: tether.App, bare: tether.App
) -> None:
    run_id = _in_doubt(app, _hangs)
    for who in (app, bare):  # annotated with a value; unknown to the bare app
        with pytest.raises(tether.DecisionRefused, match="--result JSON"):
            who.resolve(run_id, happened=True, by="alice")
    with pytest.raises(tether.DecisionRefused, match="is a group"):
        app.resolve(run_id, happened=True, by="ops", result={"charge_id": 7})
    app.resolve(run_id, happened=True, by="alice", result={"charge_id": 7})
    assert app.resume(run_id).output == {"result": {"charge_id": 7}}


def test_happened_without_a_result_is_taken_for_a_tool_that_returns_none(
    app: tether.App, bare: tether.App
) -> None:
    run_id = _in_doubt(app, _hangs_quietly)
    with pytest.raises(tether.DecisionRefused, match="returns a value, or may"):
        bare.resolve(run_id, happened=True, by="alice")  # it cannot see the annotation
    app.resolve(run_id, happened=True, by="alice")
    assert app.resume(run_id).output == {"result": None}


def test_an_explicit_null_result_is_taken(bare: tether.App, app: tether.App) -> None:
    run_id = _in_doubt(app, _hangs)
    bare.resolve(run_id, happened=True, by="alice", result=None)
    assert app.resume(run_id).output == {"result": None}
