"""Runs and leases: create_run, get_run, list_runs; claim, release, renew."""

from __future__ import annotations

import pytest

from tether.errors import Conflict, LeaseLost, NotFound
from tether.model.events import NewEvent
from tether.store import (
    EffectWrite,
    Lease,
    NewRun,
    SignalTake,
    Transition,
)
from tether.testing.base import T0, StoreTest, ev, new_run, seqs


class RunsSuite(StoreTest):
    """``create_run``, ``get_run`` and ``list_runs``: numbering, round trips, order."""

    def test_create_run_numbers_its_events_from_one(self) -> None:
        store = self.store
        events = [ev(1), ev(2, actor=None), ev(3, type_="other")]
        assert (
            store.create_run(
                NewRun("r", "a", None, "queued"), events, lease_owner=None, now=T0, ttl=30
            )
            is None
        )
        got = store.read_events("r")
        assert [(e.run_id, e.seq) for e in got] == [("r", 1), ("r", 2), ("r", 3)]
        assert [(e.type, e.data, e.at, e.actor) for e in got] == [
            (e.type, e.data, e.at, e.actor) for e in events
        ]

    def test_create_run_with_a_lease_holds_epoch_one(self) -> None:
        store = self.store
        lease = store.create_run(
            NewRun("r", "a", "v2", "running"), [ev(1)], lease_owner="w1", now=T0, ttl=30
        )
        assert lease == Lease("r", "w1", 1, T0 + 30)
        rec = store.get_run("r")
        assert (rec.epoch, rec.lease_owner, rec.lease_expires) == (1, "w1", T0 + 30)

    def test_create_run_with_its_end_is_one_transaction(self) -> None:
        """An inline child's creation with its execution's writes: its events, its end
        (the lease given back) and its effects, together."""
        store = self.store
        intent = EffectWrite("r:1:t:x", "r", 1, "t", "intent")
        lease = store.create_run(
            NewRun("r", "a", None, "running"),
            [ev(1), ev(2), ev(3, type_="run.completed")],
            lease_owner="w1",
            now=T0,
            ttl=30,
            transition=Transition("completed", release=True),
            writes=[intent],
        )
        assert lease == Lease("r", "w1", 1, T0 + 30)
        rec = store.get_run("r")
        assert (rec.status, rec.epoch, rec.lease_owner, rec.lease_expires) == (
            "completed",
            1,
            None,
            None,
        )
        assert [e.seq for e in store.read_events("r")] == [1, 2, 3]
        effect = store.get_effect("r:1:t:x")
        assert effect is not None and effect.status == "intent"

    def test_create_run_with_its_end_writes_nothing_when_refused(self) -> None:
        store = self.store
        new_run(store, "r", events=1)
        done = Transition("completed", release=True)
        with pytest.raises(Conflict):  # the id is taken: the existing run is left as it is
            store.create_run(
                NewRun("r", "a", None, "running"),
                [ev(1), ev(2)],
                lease_owner="w2",
                now=T0 + 1,
                ttl=30,
                transition=done,
            )
        rec = store.get_run("r")
        assert (rec.status, rec.lease_owner, len(store.read_events("r"))) == ("running", "w1", 1)
        with pytest.raises(Conflict):  # a signal it takes does not exist: no run either
            store.create_run(
                NewRun("s", "a", None, "running"),
                [ev(1)],
                lease_owner="w1",
                now=T0,
                ttl=30,
                transition=done,
                writes=[SignalTake(12345, 1)],
            )
        with pytest.raises(NotFound):
            store.get_run("s")
        assert store.read_events("s") == []

    def test_create_run_without_a_lease_is_free(self) -> None:
        store = self.store
        new_run(store, "r", owner=None, status="queued")
        rec = store.get_run("r")
        assert (rec.epoch, rec.lease_owner, rec.lease_expires, rec.status) == (
            0,
            None,
            None,
            "queued",
        )

    def test_every_run_field_round_trips(self) -> None:
        store = self.store
        code = {
            "module": "m",
            "qualname": "Agent.run",
            "file": "/tmp/é.py",
            "nested": {"a": [1, 2]},
        }
        run = NewRun(
            "r-1",
            "triage",
            "3",
            "queued",
            code=code,
            parent_id="p-0",
            fork_seq=7,
            session_id="s-1",
            owner="tenant-9",
            queue="default",
            priority=5,
            available_at=T0 + 0.125,
        )
        store.create_run(run, [], lease_owner=None, now=T0 + 0.5, ttl=30)
        rec = store.get_run("r-1")
        assert (rec.id, rec.agent, rec.version, rec.status, rec.code) == (
            "r-1",
            "triage",
            "3",
            "queued",
            code,
        )
        assert (rec.created_at, rec.updated_at) == (T0 + 0.5, T0 + 0.5)
        assert (rec.parent_id, rec.fork_seq, rec.session_id, rec.owner, rec.queue) == (
            "p-0",
            7,
            "s-1",
            "tenant-9",
            "default",
        )
        assert (rec.priority, rec.available_at, rec.waiting_for, rec.cancel_requested) == (
            5,
            T0 + 0.125,
            None,
            0,
        )

    def test_a_duplicate_run_id_is_a_conflict_and_changes_nothing(self) -> None:
        store = self.store
        new_run(store, "r", events=2)
        with pytest.raises(Conflict, match="'r' already exists"):
            store.create_run(
                NewRun("r", "other", None, "queued"), [ev(9)], lease_owner="w2", now=T0 + 1, ttl=30
            )
        rec = store.get_run("r")
        assert (rec.agent, rec.lease_owner, rec.created_at) == ("agent", "w1", T0)
        assert [e.data for e in store.read_events("r")] == ['{"n": 1}', '{"n": 2}']

    def test_get_run_of_an_unknown_id_is_not_found(self) -> None:
        store = self.store
        with pytest.raises(NotFound, match="nope"):
            store.get_run("nope")

    def test_list_runs_newest_first_with_filters_and_limit(self) -> None:
        store = self.store
        new_run(store, "a", now=T0 + 1, agent="x", status="completed")
        new_run(store, "b", now=T0 + 3, agent="y", status="running")
        new_run(store, "c", now=T0 + 2, agent="x", status="running")
        assert [r.id for r in store.list_runs()] == ["b", "c", "a"]
        assert [r.id for r in store.list_runs(status="running")] == ["b", "c"]
        assert [r.id for r in store.list_runs(agent="x")] == ["c", "a"]
        assert [r.id for r in store.list_runs(agent="x", status="running")] == ["c"]
        assert [r.id for r in store.list_runs(limit=2)] == ["b", "c"]
        assert store.list_runs(limit=0) == []
        assert store.list_runs(status="waiting") == []

    def test_list_runs_breaks_ties_by_id_in_byte_order(self) -> None:
        store = self.store
        ids = ["a-1", "B-2", "a_1", "b", "Z", "é", "a", "A"]
        for run_id in ids:
            new_run(store, run_id, now=T0, events=0)
        assert [r.id for r in store.list_runs()] == sorted(ids, reverse=True)

    def test_create_run_stores_text_byte_exact(self) -> None:
        store = self.store
        data = '{"s": "é ü 漢字 🙂 \\u0000 \\n \\"q\\"", "big": "' + "x" * 100_000 + '"}'
        at = 1_700_000_000.123456789
        store.create_run(
            NewRun("r", "a", None, "queued"),
            [NewEvent("t", data, at, "ü")],
            lease_owner=None,
            now=at,
            ttl=30,
        )
        [got] = store.read_events("r")
        assert (got.data, got.at, got.actor) == (data, at, "ü")
        assert seqs(store, "r") == [1]


class LeasesSuite(StoreTest):
    """``claim``, ``release`` and ``renew``: the fencing token (epoch) and who holds a run."""

    def test_claiming_a_free_run_bumps_the_fencing_token(self) -> None:
        store = self.store
        new_run(store, owner=None)
        assert store.claim("run-1", owner="w1", ttl=30, now=T0 + 1) == Lease(
            "run-1", "w1", 1, T0 + 31
        )
        rec = store.get_run("run-1")
        assert (rec.epoch, rec.lease_owner, rec.lease_expires, rec.updated_at) == (
            1,
            "w1",
            T0 + 31,
            T0 + 1,
        )

    def test_a_held_run_cannot_be_claimed_and_the_conflict_names_the_holder(self) -> None:
        store = self.store
        new_run(store, owner="w1", ttl=30)
        with pytest.raises(Conflict, match="w1") as caught:
            store.claim("run-1", owner="w2", ttl=30, now=T0 + 29)
        assert not isinstance(caught.value, LeaseLost)
        with pytest.raises(Conflict):  # expiry is strict: at lease_expires the lease still holds
            store.claim("run-1", owner="w2", ttl=30, now=T0 + 30)
        rec = store.get_run("run-1")
        assert (rec.epoch, rec.lease_owner, rec.lease_expires) == (1, "w1", T0 + 30)

    def test_an_expired_lease_can_be_claimed(self) -> None:
        store = self.store
        new_run(store, owner="w1", ttl=30)
        assert store.claim("run-1", owner="w2", ttl=5, now=T0 + 30.5).epoch == 2
        rec = store.get_run("run-1")
        assert (rec.lease_owner, rec.lease_expires) == ("w2", T0 + 35.5)

    def test_the_holder_claims_again_with_a_new_epoch(self) -> None:
        store = self.store
        new_run(store, owner="w1")
        assert store.claim("run-1", owner="w1", ttl=30, now=T0 + 1).epoch == 2
        with pytest.raises(LeaseLost):  # the old lease is stale now, even for the same owner
            store.append("run-1", [ev(3)], expected_seq=2, epoch=1, now=T0 + 1)

    def test_takeover_names_the_holder_to_replace(self) -> None:
        store = self.store
        new_run(store, owner="dead")
        with pytest.raises(Conflict, match="dead"):
            store.claim("run-1", owner="w2", ttl=30, now=T0 + 1, takeover="someone-else")
        assert store.claim("run-1", owner="w2", ttl=30, now=T0 + 1, takeover="dead").epoch == 2
        assert store.get_run("run-1").lease_owner == "w2"

    def test_claiming_an_unknown_run_is_not_found(self) -> None:
        store = self.store
        with pytest.raises(NotFound, match="ghost"):
            store.claim("ghost", owner="w1", ttl=30, now=T0)

    def test_release_only_with_the_current_epoch(self) -> None:
        store = self.store
        new_run(store, owner="w1")
        store.claim("run-1", owner="w2", ttl=30, now=T0 + 100)  # epoch 2
        store.release("run-1", epoch=1)  # a stale holder: nothing happens
        assert store.get_run("run-1").lease_owner == "w2"
        store.release("run-1", epoch=2)
        rec = store.get_run("run-1")
        assert (rec.lease_owner, rec.lease_expires, rec.epoch) == (None, None, 2)
        assert store.claim("run-1", owner="w3", ttl=30, now=T0 + 101).epoch == 3
        store.release("ghost", epoch=1)  # an unknown run: nothing to do

    def test_renew_extends_every_lease_of_the_owner(self) -> None:
        store = self.store
        new_run(store, "a", owner="w1", ttl=10)
        new_run(store, "b", owner="w1", ttl=10)
        new_run(store, "c", owner="w2", ttl=10)
        assert store.renew("w1", ttl=60, now=T0 + 5) == 2
        assert [store.get_run(r).lease_expires for r in "abc"] == [T0 + 65, T0 + 65, T0 + 10]
        assert [store.get_run(r).epoch for r in "abc"] == [1, 1, 1]
        assert store.renew("nobody", ttl=60, now=T0) == 0
