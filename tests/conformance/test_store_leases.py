"""Leases: claim (free, expired, ours, takeover, held), release, renew."""

from __future__ import annotations

import pytest
from _conformance import T0, ev, new_run

from tether.errors import Conflict, LeaseLost, NotFound
from tether.store import Lease, Store

pytestmark = pytest.mark.conformance


def test_claiming_a_free_run_bumps_the_fencing_token(store: Store) -> None:
    new_run(store, owner=None)
    assert store.claim("run-1", owner="w1", ttl=30, now=T0 + 1) == Lease("run-1", "w1", 1, T0 + 31)
    rec = store.get_run("run-1")
    assert (rec.epoch, rec.lease_owner, rec.lease_expires, rec.updated_at) == (
        1,
        "w1",
        T0 + 31,
        T0 + 1,
    )


def test_a_held_run_cannot_be_claimed_and_the_conflict_names_the_holder(store: Store) -> None:
    new_run(store, owner="w1", ttl=30)
    with pytest.raises(Conflict, match="w1") as caught:
        store.claim("run-1", owner="w2", ttl=30, now=T0 + 29)
    assert not isinstance(caught.value, LeaseLost)
    with pytest.raises(Conflict):  # expiry is strict: at lease_expires the lease still holds
        store.claim("run-1", owner="w2", ttl=30, now=T0 + 30)
    rec = store.get_run("run-1")
    assert (rec.epoch, rec.lease_owner, rec.lease_expires) == (1, "w1", T0 + 30)


def test_an_expired_lease_can_be_claimed(store: Store) -> None:
    new_run(store, owner="w1", ttl=30)
    assert store.claim("run-1", owner="w2", ttl=5, now=T0 + 30.5).epoch == 2
    rec = store.get_run("run-1")
    assert (rec.lease_owner, rec.lease_expires) == ("w2", T0 + 35.5)


def test_the_holder_claims_again_with_a_new_epoch(store: Store) -> None:
    new_run(store, owner="w1")
    assert store.claim("run-1", owner="w1", ttl=30, now=T0 + 1).epoch == 2
    with pytest.raises(LeaseLost):  # the old lease is stale now, even for the same owner
        store.append("run-1", [ev(3)], expected_seq=2, epoch=1, now=T0 + 1)


def test_takeover_names_the_holder_to_replace(store: Store) -> None:
    new_run(store, owner="dead")
    with pytest.raises(Conflict, match="dead"):
        store.claim("run-1", owner="w2", ttl=30, now=T0 + 1, takeover="someone-else")
    assert store.claim("run-1", owner="w2", ttl=30, now=T0 + 1, takeover="dead").epoch == 2
    assert store.get_run("run-1").lease_owner == "w2"


def test_claiming_an_unknown_run_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound, match="ghost"):
        store.claim("ghost", owner="w1", ttl=30, now=T0)


def test_release_only_with_the_current_epoch(store: Store) -> None:
    new_run(store, owner="w1")
    store.claim("run-1", owner="w2", ttl=30, now=T0 + 100)  # epoch 2
    store.release("run-1", epoch=1)  # a stale holder: nothing happens
    assert store.get_run("run-1").lease_owner == "w2"
    store.release("run-1", epoch=2)
    rec = store.get_run("run-1")
    assert (rec.lease_owner, rec.lease_expires, rec.epoch) == (None, None, 2)
    assert store.claim("run-1", owner="w3", ttl=30, now=T0 + 101).epoch == 3
    store.release("ghost", epoch=1)  # an unknown run: nothing to do


def test_renew_extends_every_lease_of_the_owner(store: Store) -> None:
    new_run(store, "a", owner="w1", ttl=10)
    new_run(store, "b", owner="w1", ttl=10)
    new_run(store, "c", owner="w2", ttl=10)
    assert store.renew("w1", ttl=60, now=T0 + 5) == 2
    assert [store.get_run(r).lease_expires for r in "abc"] == [T0 + 65, T0 + 65, T0 + 10]
    assert [store.get_run(r).epoch for r in "abc"] == [1, 1, 1]
    assert store.renew("nobody", ttl=60, now=T0) == 0
