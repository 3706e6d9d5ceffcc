"""Tenants as an attacker sees them, on both backends: another tenant's run id, guessed or
leaked, is NotFound on every read and every control (the message of an unknown id, and
nothing written in that run), and no list ever holds it; past the tenant, the role decides
(Forbidden, audited), and a decision is recorded under the token's identity."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from _conformance import Backend

import tether
from tether.scoped import ScopedApp
from tether.services.identity import Identity, Role

pytestmark = pytest.mark.conformance


@dataclass
class World:
    app: tether.App
    backend: Backend
    waiting: str  # acme's, waiting for approval "ship"
    doubt: str  # acme's, waiting for a tool call in doubt
    done: str  # acme's, completed
    theirs: str  # globex's, waiting for approval "ship"

    def as_(self, name: str, role: Role, tenant: str | None) -> ScopedApp:
        return self.app.scoped(Identity(name, role, tenant))

    def rows(self, run_id: str) -> tuple[int, int]:
        """(events, audit records) of a run, read straight from the tables."""
        events = len(self.app.events(run_id))
        audit = self.backend.sql(f"SELECT COUNT(*) FROM audit WHERE run_id = '{run_id}'")[0][0]
        return events, int(audit)


@pytest.fixture
def world(backend: Backend) -> Iterator[World]:
    app = tether.open(backend.url)
    paused: set[str] = set()

    @app.agent
    def gated(run: tether.Run, amount: int = 30) -> Any:
        return run.approve("ship", payload={"amount": amount}, approvers=["ann", "al"])

    @app.agent
    def echo(run: tether.Run) -> int:
        return int(run.step("s", lambda: 1))

    @app.tool(risk="write", on_doubt="ask")
    def transfer(to: str, *, idempotency_key: str) -> int:
        if not paused:
            paused.add(idempotency_key)
            raise KeyboardInterrupt  # dies mid-call: whether it happened is in doubt
        return 1

    @app.agent
    def pay(run: tether.Run) -> Any:
        return run.tool(transfer, "bob")

    acme = app.for_tenant("acme")
    waiting = acme.run(gated).id
    done = acme.run(echo).id
    with pytest.raises(KeyboardInterrupt):
        acme.run(pay)
    (doubt,) = [r.id for r in acme.runs(agent="pay")]
    assert acme.resume(doubt).status == "waiting"
    theirs = app.for_tenant("globex").run(gated, amount=99).id
    yield World(app, backend, waiting, doubt, done, theirs)
    app.close()


def _unknown_message(world: World, run_id: str) -> str:
    with pytest.raises(tether.NotFound) as unknown:
        world.app.record("0" * len(run_id))
    return str(unknown.value).replace("0" * len(run_id), run_id)


def _every_operation(s: ScopedApp, run_id: str) -> dict[str, Callable[[], Any]]:
    return {
        "record": lambda: s.record(run_id),
        "get": lambda: s.get(run_id),
        "events": lambda: s.events(run_id),
        "history": lambda: s.history(run_id),
        "state": lambda: s.state(run_id, at=1),
        "diff a": lambda: s.diff(run_id, run_id),
        "audit": lambda: s.audit(run_id),
        "export": lambda: s.export_run(run_id, io.StringIO()),
        "approve": lambda: s.approve(run_id, "ship", reason="ok"),
        "deny": lambda: s.deny(run_id, "ship"),
        "resolve": lambda: s.resolve(run_id, happened=False),
        "signal": lambda: s.signal(run_id, "go"),
        "cancel": lambda: s.cancel(run_id),
        "retry": lambda: s.retry_run(run_id),
        "resume": lambda: s.resume(run_id),
        "fork": lambda: s.fork(run_id, at=1),
    }


@pytest.mark.parametrize("role", [Role.VIEWER, Role.APPROVER, Role.OPERATOR])
def test_another_tenants_run_is_not_found_on_every_read_and_control(
    world: World, role: Role
) -> None:
    mallory = world.as_("mallory", role, "globex")
    for victim in (world.waiting, world.doubt, world.done):
        before = world.rows(victim)
        expected = _unknown_message(world, victim)
        for name, operation in _every_operation(mallory, victim).items():
            with pytest.raises(tether.NotFound) as found:
                operation()
            assert str(found.value) == expected, name  # the message of an unknown id
        assert world.rows(victim) == before  # nothing appended, nothing audited in it
    diff_b = world.as_("mallory", role, "globex")
    with pytest.raises(tether.NotFound):
        diff_b.diff(world.theirs, world.waiting)  # one side of theirs does not open the other
    assert world.app.get(world.waiting).status == "waiting"


def test_no_list_ever_holds_another_tenants_run(world: World) -> None:
    mallory = world.as_("mallory", Role.OPERATOR, "globex")
    acme_runs = {world.waiting, world.doubt, world.done}
    assert {r.id for r in mallory.runs()} == {world.theirs}
    assert {r.id for r in mallory.list_runs().runs} == {world.theirs}
    assert mallory.list_runs(tenant="acme").runs == []  # asking for theirs: nothing
    assert {r.id for r in mallory.list_runs(text=world.waiting[:6]).runs} <= {world.theirs}
    assert [i.run_id for i in mallory.inbox().items] == [world.theirs]
    assert mallory.effect(world.app.get(world.doubt).waiting["key"]) is None  # type: ignore[index]
    everyone = world.as_("root", Role.VIEWER, None)
    assert {r.id for r in everyone.list_runs().runs} == acme_runs | {world.theirs}
    acme = {r.id for r in everyone.list_runs(tenant="acme").runs}
    assert acme == acme_runs


def test_a_role_that_may_not_act_is_forbidden_and_audited(world: World) -> None:
    viewer = world.as_("vic", Role.VIEWER, "acme")
    assert viewer.get(world.waiting).status == "waiting"  # a viewer reads…
    with pytest.raises(tether.Forbidden, match=r"vic \(viewer\) may not approve"):
        viewer.approve(world.waiting, "ship")  # …and may not decide
    approver = world.as_("ann", Role.APPROVER, "acme")
    with pytest.raises(tether.Forbidden, match=r"ann \(approver\) may not cancel"):
        approver.cancel(world.waiting)
    with pytest.raises(tether.Forbidden, match="may not fork"):
        approver.fork(world.waiting, at=1)
    refused = [(a.actor, a.action) for a in world.app.audit(world.waiting)]
    assert refused == [
        ("vic", "access.refused"),
        ("ann", "access.refused"),
        ("ann", "access.refused"),
    ]
    assert world.app.get(world.waiting).status == "waiting"  # nothing was done


def test_a_decision_is_recorded_under_the_identity_and_a_spoofed_by_is_refused(
    world: World,
) -> None:
    ann = world.as_("ann", Role.APPROVER, "acme")
    with pytest.raises(tether.InvalidInput, match="by='al' differs from the token's identity"):
        ann.approve(world.waiting, "ship", by="al")
    ann.approve(world.waiting, "ship", reason="looks right")
    decided = world.app.get(world.waiting).steps[-1].output
    assert decided == {"approved": True, "by": "ann", "reason": "looks right"}
    operator = world.as_("ops-bot", Role.OPERATOR, "acme")
    assert operator.resume(world.waiting).output == {
        "approved": True,
        "by": "ann",
        "reason": "looks right",
    }


def test_a_tenant_identity_not_among_the_approvers_is_refused_by_the_gate(world: World) -> None:
    bob = world.as_("bob", Role.APPROVER, "acme")
    with pytest.raises(tether.DecisionRefused, match="'bob' is not among the approvers"):
        bob.approve(world.waiting, "ship")


def test_forks_sessions_and_starts_keep_the_tenant(world: World) -> None:
    acme = world.as_("op", Role.OPERATOR, "acme")
    fork = acme.fork(world.waiting, at=2)
    assert world.app.record(fork).owner == "acme"
    queued = acme.start("echo")
    assert world.app.record(queued).owner == "acme"
    s = acme.session("chat-1")
    assert s.owner == "acme"
    globex = world.as_("g", Role.OPERATOR, "globex")
    with pytest.raises(tether.NotFound):
        globex.session("chat-1")
    with pytest.raises(tether.Conflict, match="cannot see"):
        globex.start("echo", run_id=queued)
    with pytest.raises(tether.Forbidden):
        world.as_("v", Role.VIEWER, "acme").start("echo")
    audited = "SELECT actor, action FROM audit WHERE run_id IS NULL"
    assert world.backend.sql(audited) == [("v", "access.refused")]  # no run: kept all the same


def test_the_inbox_shows_what_is_to_be_decided(world: World) -> None:
    items = {i.run_id: i for i in world.as_("v", Role.VIEWER, "acme").inbox().items}
    assert set(items) == {world.waiting, world.doubt}
    approval, doubt = items[world.waiting], items[world.doubt]
    assert (approval.kind, approval.name, approval.tenant) == ("approval", "ship", "acme")
    assert approval.payload == {"amount": 30} and sorted(approval.approvers or []) == ["al", "ann"]
    assert (doubt.kind, doubt.name, doubt.key) == ("doubt", "transfer", doubt.key)
    assert doubt.payload["tool"] == "transfer" and "bob" in repr(doubt.payload["input"])
    world.as_("ann", Role.APPROVER, "acme").approve(world.waiting, "ship")
    assert [i.run_id for i in world.app.inbox(tenant="acme").items] == [world.doubt]


def test_the_local_operator_scoped_to_a_tenant_names_who_decides(world: World) -> None:
    acme = world.app.for_tenant("acme")
    with pytest.raises(tether.InvalidInput, match="by is required"):
        acme.approve(world.waiting, "ship")
    acme.approve(world.waiting, "ship", by="al")
    assert world.app.get(world.waiting).steps[-1].output["by"] == "al"
    with pytest.raises(tether.NotFound):
        acme.approve(world.theirs, "ship", by="al")


def test_a_tenants_memory_is_its_own(world: World) -> None:
    acme, globex = world.app.for_tenant("acme").memory, world.app.for_tenant("globex").memory
    acme.put(("user", "u1"), "prefs", {"theme": "dark"})
    globex.put(("user", "u1"), "prefs", {"theme": "light"})
    assert acme.get(("user", "u1"), "prefs").value == {"theme": "dark"}  # type: ignore[union-attr]
    assert [i.value for i in globex.search(("user",), "theme")] == [{"theme": "light"}]
    assert [i.namespace for i in globex.search()] == [("user", "u1")]
    assert globex.list_namespaces() == [("user", "u1")]
    assert globex.delete_namespace(()) == 1  # all of globex's, and nothing of acme's
    assert acme.get(("user", "u1"), "prefs") is not None
    assert world.app.memory.list_namespaces(("@tenant",)) == [("@tenant", "acme", "user", "u1")]
