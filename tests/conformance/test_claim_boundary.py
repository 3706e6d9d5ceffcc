"""A lease holds up to and including its ``lease_expires``, on every claim path.

A lease written at ``T0`` with a ttl of 30 s expires at ``T0 + 30``: at that instant it
still holds (expiry is strict, ``lease_expires < now``), a thousandth of a second later
anyone may claim the run. Each claim path of both stores is checked at the boundary and
just before it, so that a claim condition moved by a hair (``<=``) or by seconds
(``< now + 5``: a live lease claimable 5 s early) fails here. The paths: ``claim`` (what
``App.resume``, decisions and retries take; with and without a ``takeover``), the
worker's ``claim_next`` on a queue without limits (PostgreSQL: ``claim_fast``) and with
each kind of limit (``claim_candidates``), and the count of live leases that a
concurrency limit is held to (``running_in_queue``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _conformance import T0, Backend, claimed, new_run

import tether
from tether.errors import Conflict
from tether.store import NewRun, QueueLimits, Store

pytestmark = pytest.mark.conformance

TTL = 30.0
EXPIRES = T0 + TTL  # the lease new_run writes for its owner "w1"
# (time of the claim, whether it may take the run)
BOUNDARY = [
    (T0 + 1, False),
    (EXPIRES - 4.999, False),  # `< now + 5` would take it here
    (EXPIRES - 0.001, False),
    (EXPIRES, False),  # `<=` would take it here
    (EXPIRES + 0.001, True),
]


def _by_claim(takeover: str | None) -> Callable[[Store, float], bool]:
    def attempt(store: Store, now: float) -> bool:
        try:
            store.claim("run-1", owner="w2", ttl=TTL, now=now, takeover=takeover)
        except Conflict:
            return False
        return True

    return attempt


def _by_claim_next(limits: QueueLimits) -> Callable[[Store, float], bool]:
    def attempt(store: Store, now: float) -> bool:
        claims = store.claim_next([limits], owner="w2", ttl=TTL, now=now, capacity=5)
        return [r.id for r, _ in claims] == ["run-1"]

    return attempt


PATHS = {
    "claim": _by_claim(None),
    "claim-takeover-of-another-owner": _by_claim("not-w1"),
    "claim_next": _by_claim_next(QueueLimits("q")),
    "claim_next-room": _by_claim_next(QueueLimits("q", room=2)),
    "claim_next-concurrency": _by_claim_next(QueueLimits("q", concurrency=5)),
    "claim_next-per-key": _by_claim_next(QueueLimits("q", per_key=5)),
    "claim_next-rate": _by_claim_next(QueueLimits("q", rate=(10, 60.0))),
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_lease_holds_until_just_after_lease_expires(store: Store, path: str) -> None:
    new_run(store, "run-1", owner="w1", ttl=TTL, queue="q", concurrency_key="k")
    attempt = PATHS[path]
    for now, claimable in BOUNDARY:
        assert attempt(store, now) is claimable, f"{path} at lease_expires{now - EXPIRES:+.3f}"
        rec = store.get_run("run-1")
        expected = ("w2", 2, now + TTL) if claimable else ("w1", 1, EXPIRES)
        assert (rec.lease_owner, rec.epoch, rec.lease_expires) == expected


def test_a_lease_at_its_expiry_still_counts_against_the_queue_concurrency(store: Store) -> None:
    """The other side of the boundary: a lease that cannot be claimed yet still fills its
    queue's slot, so a queue of concurrency 1 never runs two at once at that instant."""
    new_run(store, "held", owner="w1", ttl=TTL, queue="q")
    store.enqueue(NewRun("next", "agent", None, "queued", queue="q"), [], now=T0, max_depth=None)
    one = [QueueLimits("q", concurrency=1)]
    for now in (EXPIRES - 0.001, EXPIRES):
        assert store.claim_next(one, owner="w2", ttl=TTL, now=now, capacity=5) == []
    (claimed,) = store.claim_next(one, owner="w2", ttl=TTL, now=EXPIRES + 0.001, capacity=5)
    assert claimed[0].id in ("held", "next")  # one slot: the expired run, or the queued one


def test_the_app_and_its_worker_respect_a_live_lease_to_the_boundary(backend: Backend) -> None:
    """App.resume (claim) and a worker (claim_next) on the injected clock: a run leased by a
    worker that stopped beating is left alone until its lease has expired, then taken."""
    clock = tether.FakeClock(T0)
    app = tether.open(backend.url, clock=clock, lease_ttl=TTL)
    try:

        @app.agent
        def job(run: tether.Run) -> str:
            return str(run.step("work", lambda: "done"))

        rid = app.start(job)
        (taken,) = app.store.claim_next(
            [QueueLimits("default")], owner="gone-worker", ttl=TTL, now=T0, capacity=1
        )
        assert taken[1].expires == EXPIRES
        for now in (EXPIRES - 0.001, EXPIRES):
            clock.advance(now - clock.now())
            with pytest.raises(Conflict, match="gone-worker"):
                app.resume(rid)
            stats = app.worker().run(until_idle=True, install_signals=False)
            assert stats.claimed == 0
            assert app.store.get_run(rid).lease_owner == "gone-worker"
        clock.advance(0.001)
        stats = app.worker().run(until_idle=True, install_signals=False)
        assert stats.claimed == 1 and app.get(rid).output == "done"
    finally:
        app.close()


CLAIM_NEXT = {name: PATHS[name] for name in PATHS if name.startswith("claim_next")}
DUE = T0 + 100.0


@pytest.mark.parametrize("path", sorted(CLAIM_NEXT))
def test_a_waiting_run_is_claimable_from_the_instant_it_is_due(store: Store, path: str) -> None:
    """A timer or a retry that ends at ``available_at`` may be taken at that instant
    (``available_at <= now``), not a moment later, nor a moment before."""
    new_run(store, "run-1", owner=None, status="waiting", queue="q", available_at=DUE)
    assert CLAIM_NEXT[path](store, DUE - 0.001) is False
    assert CLAIM_NEXT[path](store, DUE) is True
    assert store.get_run("run-1").status == "running"


@pytest.mark.parametrize("status", ["waiting", "running"])
def test_priority_wins_beyond_the_scan_of_one_claim(store: Store, status: str) -> None:
    """A claim of one run scans one candidate of each kind: the best of its kind by
    priority, not the oldest, or a high-priority run due later would wait behind every
    older one (a due waiting run; a running run whose worker died)."""
    leased = {"owner": "dead", "ttl": 1.0} if status == "running" else {"owner": None}
    new_run(store, "old-low", status=status, queue="q", available_at=T0, **leased)
    new_run(store, "new-high", status=status, queue="q", available_at=T0 + 5, priority=9,
            now=T0 + 5, **leased)  # fmt: skip
    assert claimed(store, QueueLimits("q", room=2), now=T0 + 60, capacity=1) == ["new-high"]
