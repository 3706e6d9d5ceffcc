"""Forks and compensation share the world's effects: a fork never builds on a call that a
compensation undid, and never undoes a call its parent made (on every backend)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from _conformance import Backend

import tether

pytestmark = pytest.mark.conformance


@pytest.fixture
def app(backend: Backend) -> Iterator[tether.App]:
    a = tether.open(backend.url)
    yield a
    a.close()


@dataclass
class Shop:
    """A payment service and a carrier, in memory: every charge, refund and shipment."""

    ledger: list[tuple[str, Any]] = field(default_factory=list)
    carrier_down: bool = False
    agent: Any = None
    gated: Any = None

    def of(self, kind: str) -> list[Any]:
        return [what for k, what in self.ledger if k == kind]


def _shop(app: tether.App) -> Shop:
    shop = Shop()

    def refund(result: dict[str, Any], order: str, amount: int, *, idempotency_key: str) -> None:
        shop.ledger.append(("refund", result["charge"]))

    @app.tool(risk="write", compensate=refund)
    def charge(order: str, amount: int, *, idempotency_key: str) -> dict[str, Any]:
        shop.ledger.append(("charge", idempotency_key))
        return {"charge": idempotency_key}

    @app.tool(risk="write")
    def ship(order: str, *, idempotency_key: str) -> dict[str, Any]:
        if shop.carrier_down:
            raise RuntimeError("the carrier is down")
        shop.ledger.append(("ship", order))
        return {"shipped": order}

    @app.agent
    def order(run: tether.Run, order: str) -> dict[str, Any]:
        paid = run.tool(charge, order, 40)
        run.step("pack", lambda: "packed")
        return {"paid": paid["charge"], "shipped": run.tool(ship, order)["shipped"]}

    @app.agent
    def gated(run: tether.Run, order: str) -> dict[str, Any]:
        paid = run.tool(charge, order, 40)
        run.approve("ship")
        return {"paid": paid["charge"], "shipped": run.tool(ship, order)["shipped"]}

    shop.agent, shop.gated = order, gated
    return shop


def test_a_fork_after_a_refunded_charge_is_refused(app: tether.App) -> None:
    shop = _shop(app)
    shop.carrier_down = True
    with pytest.raises(tether.RunFailed):
        app.run(shop.agent, "o-1")
    parent = app.runs()[0].id
    assert shop.of("refund") == shop.of("charge")  # the failure refunded the charge
    before = len(app.runs())
    for point in ("charge", "pack", None):  # after the charge, a later step, the head
        with pytest.raises(tether.InvalidState, match=r"step 1 \(charge\).*when='before'"):
            app.fork(parent, step=point)
    assert len(app.runs()) == before  # nothing was forked
    assert shop.of("ship") == []


def test_a_fork_before_the_refunded_charge_charges_again_with_its_own_key(
    app: tether.App,
) -> None:
    shop = _shop(app)
    shop.carrier_down = True
    with pytest.raises(tether.RunFailed):
        app.run(shop.agent, "o-1")
    parent = app.runs()[0].id
    shop.carrier_down = False
    child = app.fork(parent, step="charge", when="before")
    handle = app.resume(child)
    assert handle.status == "completed"
    assert handle.output["paid"].startswith(f"{child}:1:charge:")
    first, again = shop.of("charge")
    assert first.startswith(f"{parent}:1:charge:") and again == handle.output["paid"]
    assert shop.of("ship") == ["o-1"]


def test_a_fork_made_before_its_parent_refunded_stops_at_the_undone_call(
    app: tether.App,
) -> None:
    shop = _shop(app)
    parent = app.run(shop.gated, "o-2").id  # charged, waits for approval to ship
    child = app.fork(parent, step="charge")  # the charge still holds: allowed
    app.deny(parent, "ship", by="alice", reason="fraud")
    with pytest.raises(tether.RunFailed):
        app.resume(parent)
    assert len(shop.of("refund")) == 1
    with pytest.raises(tether.InvalidState, match="compensated"):
        app.fork(child, step="charge")  # the child's copy of the charge is undone too
    with pytest.raises(tether.RunFailed, match="undone"):
        app.resume(child)
    message = app.get(child).failure["message"]  # names the run that made the call
    assert f"reuses the call run {parent} made (key {parent}:1:charge:" in message
    assert f"app.fork({parent!r}, step=1, when='before')" in message
    with pytest.raises(tether.InvalidState, match="a compensation has undone"):
        app.resume(child)  # failed for that reason: a resume says so again
    assert shop.of("ship") == []  # the fork never shipped on a refunded charge
    assert len(shop.of("refund")) == 1  # and did not refund its parent's charge again
    assert app.get(child).failure["position"] == 1


def test_a_failing_fork_does_not_undo_its_parents_calls(app: tether.App) -> None:
    shop = _shop(app)
    parent = app.run(shop.gated, "o-3").id
    app.approve(parent, "ship", by="alice")
    assert app.resume(parent).status == "completed"
    child = app.fork(parent, step="charge")  # try another way to ship the same order
    assert app.resume(child).status == "waiting"  # its own approval to ship
    app.approve(child, "ship", by="alice")
    shop.carrier_down = True
    with pytest.raises(tether.RunFailed):
        app.resume(child)
    assert shop.of("refund") == []  # the parent's order is paid and shipped: keep the charge
    effect = app.effect(app.get(parent).steps[0].key or "")
    assert effect is not None and effect.status == "completed"


def test_a_fork_that_catches_the_refusal_of_an_undone_call_still_fails(
    app: tether.App,
) -> None:
    refunds: list[str] = []

    def refund(result: str, order: str, *, idempotency_key: str) -> None:
        refunds.append(result)

    @app.tool(risk="write", compensate=refund)
    def charge(order: str, *, idempotency_key: str) -> str:
        return f"ch-{order}"

    @app.agent
    def stubborn(run: tether.Run, order: str) -> str:
        try:
            paid = run.tool(charge, order)
        except tether.InvalidState:  # the refusal is swallowed: every later call raises it
            paid = "nothing"
        run.approve("ship")
        return run.step("ship", lambda: f"shipped against {paid}")

    parent = app.run(stubborn, "o-3").id  # charged, waits for approval to ship
    child = app.fork(parent, step="charge")
    app.deny(parent, "ship", by="alice", reason="fraud")
    with pytest.raises(tether.RunFailed):
        app.resume(parent)
    assert refunds == ["ch-o-3"]
    with pytest.raises(tether.RunFailed, match="undone"):
        app.resume(child)
    assert [s.name for s in app.get(child).steps] == ["charge"]  # no approval was asked
