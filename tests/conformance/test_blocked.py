"""A code change under a running run (a deploy) never fails it nor undoes its work: the
run becomes ``blocked`` (no lease, nothing compensated, its dedup key kept) and goes on
once the code matches its log again; cancelling it with compensation stays a human's
choice. On both backends. (Real worker processes: tests/acceptance/test_deploy.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from _conformance import T0, ev

import tether
from tether.errors import Conflict
from tether.store import NewRun, QueueLimits, Store, Transition

pytestmark = pytest.mark.conformance


class Shop:
    """An order agent in two versions; v2 inserts a fraud check before the recorded charge.
    Charges and refunds are counted by idempotency key."""

    def __init__(self, app: tether.App, queue: str | None = None) -> None:
        self.app = app
        self.version = 1
        self.charged: list[str] = []
        self.refunded: list[str] = []
        self.amount = {"v1": 5, "v2": 5}  # the amount each version charges

        def refund(result: Any, amount: int, *, idempotency_key: str) -> None:
            self.refunded.append(idempotency_key)

        @app.tool(risk="write", compensate=refund)
        def charge(amount: int, *, idempotency_key: str) -> str:
            self.charged.append(idempotency_key)
            return f"charged {amount}"

        @app.agent
        def order(run: tether.Run) -> str:
            if self.version == 2:
                run.step("check_fraud", lambda: "ok")
            receipt = run.tool(charge, self.amount[f"v{self.version}"])
            run.wait("shipped")
            return f"{receipt}, shipped"

        self.order = order

    def waiting_run(self) -> str:
        """A run of v1 that charged and waits for its signal."""
        handle = self.app.run(self.order)
        assert handle.status == "waiting" and len(self.charged) == 1
        return handle.id

    def blocked_run(self) -> str:
        """A run of v1 that charged, resumed after v2 was deployed: blocked."""
        rid = self.waiting_run()
        self.version = 2
        self.app.signal(rid, "shipped")
        with pytest.raises(tether.NondeterminismError):
            self.app.resume(rid)
        return rid


def test_a_step_inserted_before_recorded_work_blocks_the_run_and_undoes_nothing(
    app: tether.App,
) -> None:
    shop = Shop(app)
    rid = shop.waiting_run()
    shop.version = 2  # the deploy
    app.signal(rid, "shipped")
    with pytest.raises(tether.NondeterminismError) as info:
        app.resume(rid)
    assert (info.value.position, info.value.expected, info.value.found) == (
        1,
        "tool charge",
        "step check_fraud",
    )
    assert "blocked" in str(info.value) and f"tether resume {rid}" in str(info.value)
    state, record = app.get(rid), app.store.get_run(rid)
    assert state.status == record.status == "blocked" and record.lease_owner is None
    assert state.blocked is not None and state.failure is None and state.compensating is None
    assert {k: state.blocked[k] for k in ("position", "recorded", "found")} == {
        "position": 1,
        "recorded": "tool charge",
        "found": "step check_fraud",
    }
    assert shop.refunded == [] and len(shop.charged) == 1  # no customer was refunded
    (blocked,) = [e.payload() for e in app.events(rid) if e.type == "run.blocked"]
    assert blocked["message"] == str(info.value) and blocked["position"] == 1

    with pytest.raises(tether.NondeterminismError):  # still the new code: blocked again
        app.resume(rid)
    assert app.get(rid).status == "blocked" and shop.refunded == []

    shop.version = 1  # the code is restored
    h = app.resume(rid)
    assert h.status == "completed" and h.output == "charged 5, shipped"
    assert len(shop.charged) == 1 and shop.refunded == []
    assert app.get(rid).blocked is None


def test_a_tool_called_with_other_arguments_blocks_the_run(app: tether.App) -> None:
    """Same tool, same position, other arguments: its idempotency key would differ, so
    the recorded call is not this one. Blocked, not executed, not compensated."""
    shop = Shop(app)
    rid = shop.waiting_run()
    shop.amount["v1"] = 7  # the new code charges another amount at the same position
    app.signal(rid, "shipped")
    with pytest.raises(tether.NondeterminismError) as info:
        app.resume(rid)
    assert info.value.position == 1
    assert info.value.expected.startswith("tool charge(args ")
    assert info.value.found.startswith("tool charge(args ")
    assert info.value.expected != info.value.found
    assert app.get(rid).status == "blocked"
    assert len(shop.charged) == 1 and shop.refunded == []
    shop.amount["v1"] = 5
    assert app.resume(rid).output == "charged 5, shipped" and len(shop.charged) == 1


@pytest.mark.parametrize("handling", ["returns", "raises its own"])
def test_an_agent_that_catches_the_error_is_blocked_all_the_same(
    app: tether.App, handling: str
) -> None:
    """An agent that catches the code-change error and returns, or raises an error of its
    own: the run is blocked by what the journal found, not ended as if whole, nor failed
    with the agent's error."""
    version = {"v": 1}

    @app.agent
    def agent(run: tether.Run) -> str:
        try:
            run.step("b" if version["v"] == 2 else "a", lambda: 1)
        except Exception as e:
            if handling == "returns":
                return "carried on"  # the journal refuses: the run must not end as if whole
            raise RuntimeError("wrapped") from e
        run.wait("go")
        return "done"

    rid = app.run(agent).id
    version["v"] = 2
    app.signal(rid, "go")
    with pytest.raises(tether.NondeterminismError):
        app.resume(rid)
    state = app.get(rid)
    assert state.status == "blocked" and state.output is None
    assert "wrapped" not in str(state.failure), state.failure


def test_cancel_with_compensation_stays_the_humans_choice(app: tether.App) -> None:
    shop = Shop(app)
    rid = shop.blocked_run()
    assert shop.refunded == []
    h = app.cancel(rid, compensate=True, by="ops", reason="the order is void")
    assert h.status == "cancelled" and len(shop.refunded) == 1 and len(shop.charged) == 1


def test_a_worker_records_the_block_moves_on_and_never_claims_it_again(app: tether.App) -> None:
    shop = Shop(app)
    rid = app.start(shop.order, queue="orders")
    assert app.worker(queues=["orders"]).run(until_idle=True, install_signals=False).waiting == 1
    shop.version = 2
    app.signal(rid, "shipped")
    stats = app.worker(queues=["orders"]).run(until_idle=True, install_signals=False)
    assert (stats.claimed, stats.blocked, stats.failed, stats.errors) == (1, 1, 0, [])
    record = app.store.get_run(rid)
    assert record.status == "blocked" and record.lease_owner is None and shop.refunded == []
    again = app.worker(queues=["orders"]).run(until_idle=True, install_signals=False)
    assert again.claimed == 0  # blocked is not claimable: no loop

    shop.version = 1
    assert app.retry_run(rid, in_queue=True).status == "queued"  # `tether retry`
    done = app.worker(queues=["orders"]).run(until_idle=True, install_signals=False)
    assert done.completed == 1 and app.get(rid).output == "charged 5, shipped"
    assert len(shop.charged) == 1 and shop.refunded == []
    reasons = [e.payload().get("reason") for e in app.events(rid) if e.type == "run.suspended"]
    assert reasons == ["resume requested"]


def test_a_blocked_run_keeps_its_dedup_key(app: tether.App) -> None:
    """A second start with the key returns the blocked run: the work is not started twice
    while the first one waits for its code (schema 9 keeps blocked runs in runs_dedup)."""
    shop = Shop(app)
    rid = app.start(shop.order, queue="orders", dedup_key="order-42")
    app.worker(queues=["orders"]).run(until_idle=True, install_signals=False)
    shop.version = 2
    app.signal(rid, "shipped")
    app.worker(queues=["orders"]).run(until_idle=True, install_signals=False)
    assert app.store.get_run(rid).status == "blocked"
    assert app.start(shop.order, queue="orders", dedup_key="order-42") == rid
    assert len(app.runs()) == 1


def test_gc_never_takes_a_blocked_run_for_a_finished_one(app: tether.App) -> None:
    shop = Shop(app)
    rid = shop.blocked_run()
    assert app.gc(older_than=0, vacuum=False).run_ids == ()
    assert app.gc(status=["blocked"], vacuum=False, dry_run=True).run_ids == (rid,)


def test_retry_of_a_blocked_run_executes_it_here(app: tether.App) -> None:
    shop = Shop(app)
    rid = shop.blocked_run()
    shop.version = 1
    assert app.retry_run(rid).output == "charged 5, shipped"


def test_the_dedup_index_counts_a_blocked_run_as_a_holder(store: Store) -> None:
    """Run b holds key k and is blocked; run a (failed, same key) going back to its
    queue would make two runs doing the same work: the database refuses it."""
    store.enqueue(
        NewRun("a", "agent", None, "queued", queue="q", dedup_key="k"),
        [ev(1)],
        now=T0,
        max_depth=None,
    )
    store.claim_next([QueueLimits("q")], owner="w1", ttl=30, now=T0, capacity=1)
    failed = Transition("failed", release=True)
    store.append("a", [ev(2)], expected_seq=1, epoch=1, now=T0, transition=failed)
    assert store.enqueue(
        NewRun("b", "agent", None, "queued", queue="q", dedup_key="k"),
        [ev(1)],
        now=T0,
        max_depth=None,
    ) == ("b", True)
    store.claim_next([QueueLimits("q")], owner="w1", ttl=30, now=T0, capacity=1)
    blocked = Transition("blocked", release=True)
    store.append("b", [ev(2)], expected_seq=1, epoch=1, now=T0, transition=blocked)
    store.claim("a", owner="w1", ttl=30, now=T0)
    with pytest.raises(Conflict, match="dedup key"):
        store.append("a", [ev(3)], expected_seq=2, epoch=2, now=T0, transition=Transition("queued"))
    assert store.get_run("a").status == "failed" and store.get_run("b").status == "blocked"
