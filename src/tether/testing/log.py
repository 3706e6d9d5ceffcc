"""The log: append (fencing, atomicity, transitions, snapshots, writes), read_events, load."""

from __future__ import annotations

import pytest

from tether.errors import Conflict, LeaseLost, NotFound
from tether.store import (
    EffectWrite,
    SignalTake,
    Snapshot,
    Transition,
)
from tether.testing.base import T0, StoreTest, ev, new_run, seqs


class LogSuite(StoreTest):
    """``append``, ``read_events``, ``load`` and ``save_snapshot``: numbering, fencing,
    atomicity, and what commits with an append (transition, snapshot, effect writes, signal
    takes)."""

    def test_append_numbers_events_after_the_log_and_returns_the_last_seq(self) -> None:
        store = self.store
        new_run(store, events=2)
        assert store.append("run-1", [ev(3)], expected_seq=2, epoch=1, now=T0) == 3
        assert store.append("run-1", [ev(4), ev(5), ev(6)], expected_seq=3, epoch=1, now=T0) == 6
        got = store.read_events("run-1")
        assert [e.seq for e in got] == [1, 2, 3, 4, 5, 6]
        assert [e.data for e in got] == [f'{{"n": {n}}}' for n in range(1, 7)]

    def test_append_of_a_taken_seq_is_a_conflict_and_writes_nothing(self) -> None:
        store = self.store
        new_run(store, events=3)
        with pytest.raises(Conflict, match="seq 3") as caught:
            store.append("run-1", [ev(3), ev(4), ev(5)], expected_seq=2, epoch=1, now=T0)
        assert not isinstance(caught.value, LeaseLost)
        with pytest.raises(Conflict):
            store.append("run-1", [ev(9)], expected_seq=0, epoch=1, now=T0)
        assert seqs(store) == [1, 2, 3]
        assert [e.data for e in store.read_events("run-1")][-1] == '{"n": 3}'

    def test_a_failing_append_applies_no_transition_snapshot_or_write(self) -> None:
        store = self.store
        new_run(store, events=3)
        with pytest.raises(Conflict):
            store.append(
                "run-1",
                [ev(3), ev(4)],
                expected_seq=2,
                epoch=1,
                now=T0 + 9,
                transition=Transition("completed", release=True),
                snapshot=Snapshot("run-1", 4, '{"s": 4}', T0),
                writes=[EffectWrite("k", "run-1", 1, "tool", "intent")],
            )
        rec = store.get_run("run-1")
        assert (rec.status, rec.lease_owner, rec.updated_at) == ("running", "w1", T0)
        assert store.load("run-1").snapshot is None
        assert store.get_effect("k") is None

    def test_append_after_a_newer_claim_is_lease_lost_and_writes_nothing(self) -> None:
        store = self.store
        new_run(store, events=2, owner="w1", ttl=10)
        store.claim("run-1", owner="w2", ttl=10, now=T0 + 11)  # w1's lease expired: epoch 2
        with pytest.raises(LeaseLost, match="w2") as caught:
            store.append(
                "run-1",
                [ev(3)],
                expected_seq=2,
                epoch=1,
                now=T0 + 12,
                transition=Transition("failed", release=True),
                snapshot=Snapshot("run-1", 3, "{}", T0),
                writes=[EffectWrite("k", "run-1", 1, "tool", "intent")],
            )
        assert "epoch 2" in str(caught.value)
        with pytest.raises(LeaseLost):  # the single-event path, too
            store.append("run-1", [ev(3)], expected_seq=2, epoch=1, now=T0 + 12)
        with pytest.raises(LeaseLost):  # and several events with nothing else
            store.append("run-1", [ev(3), ev(4)], expected_seq=2, epoch=1, now=T0 + 12)
        rec = store.get_run("run-1")
        assert (rec.status, rec.lease_owner, rec.epoch) == ("running", "w2", 2)
        assert seqs(store) == [1, 2]
        assert store.load("run-1").snapshot is None and store.get_effect("k") is None
        assert store.append("run-1", [ev(3)], expected_seq=2, epoch=2, now=T0 + 12) == 3

    @pytest.mark.parametrize("n", [1, 3])
    def test_an_append_past_the_end_of_the_log_is_a_conflict(self, n: int) -> None:
        store = self.store
        new_run(store, events=2)
        with pytest.raises(Conflict) as caught:  # seq 6 would leave a gap after seq 2
            store.append("run-1", [ev(6 + i) for i in range(n)], expected_seq=5, epoch=1, now=T0)
        assert not isinstance(caught.value, LeaseLost)
        assert seqs(store) == [1, 2]

    def test_a_stale_epoch_wins_over_a_taken_seq(self) -> None:
        store = self.store
        new_run(store, events=2, ttl=10)
        store.claim("run-1", owner="w2", ttl=10, now=T0 + 11)
        with pytest.raises(LeaseLost):
            store.append("run-1", [ev(2)], expected_seq=1, epoch=1, now=T0)

    def test_append_to_an_unknown_run_is_not_found(self) -> None:
        store = self.store
        with pytest.raises(NotFound, match="ghost"):
            store.append("ghost", [ev(1)], expected_seq=0, epoch=1, now=T0)
        with pytest.raises(NotFound):
            store.append(
                "ghost",
                [ev(1), ev(2)],
                expected_seq=0,
                epoch=1,
                now=T0,
                transition=Transition("running"),
            )
        assert store.read_events("ghost") == []

    def test_a_transition_commits_with_its_events(self) -> None:
        store = self.store
        new_run(store, events=2)
        store.append(
            "run-1",
            [ev(3)],
            expected_seq=2,
            epoch=1,
            now=T0 + 5,
            transition=Transition(
                "waiting", release=True, available_at=T0 + 60, waiting_for="signal:go"
            ),
        )
        rec = store.get_run("run-1")
        assert (rec.status, rec.lease_owner, rec.lease_expires) == ("waiting", None, None)
        assert (rec.available_at, rec.waiting_for, rec.updated_at) == (T0 + 60, "signal:go", T0 + 5)
        assert rec.epoch == 1  # a release keeps the fencing token
        store.claim("run-1", owner="w1", ttl=30, now=T0 + 6)
        store.append(
            "run-1", [ev(4)], expected_seq=3, epoch=2, now=T0 + 7, transition=Transition("running")
        )
        rec = store.get_run("run-1")
        assert (rec.status, rec.lease_owner, rec.waiting_for, rec.available_at) == (
            "running",
            "w1",
            None,
            None,
        )

    def test_a_snapshot_commits_with_its_events_and_is_kept_once(self) -> None:
        store = self.store
        new_run(store, events=2)
        store.append(
            "run-1",
            [ev(3), ev(4)],
            expected_seq=2,
            epoch=1,
            now=T0,
            snapshot=Snapshot("run-1", 4, '{"at": 4}', T0 + 4),
        )
        store.append(
            "run-1",
            [ev(5)],
            expected_seq=4,
            epoch=1,
            now=T0,
            snapshot=Snapshot("run-1", 4, '{"other": 1}', T0 + 5),
        )
        loaded = store.load("run-1")
        assert loaded.snapshot == Snapshot("run-1", 4, '{"at": 4}', T0 + 4)
        assert [e.seq for e in loaded.events] == [5]

    def test_an_append_of_no_events_still_applies_its_transition(self) -> None:
        store = self.store
        new_run(store, events=2)
        assert (
            store.append(
                "run-1",
                [],
                expected_seq=2,
                epoch=1,
                now=T0 + 1,
                transition=Transition("queued", release=True),
            )
            == 2
        )
        assert store.get_run("run-1").status == "queued"
        assert seqs(store) == [1, 2]

    def test_an_append_of_no_events_is_fenced_too(self) -> None:
        store = self.store
        new_run(store, events=2, ttl=10)
        store.claim("run-1", owner="w2", ttl=10, now=T0 + 11)
        with pytest.raises(LeaseLost):
            store.append(
                "run-1",
                [],
                expected_seq=2,
                epoch=1,
                now=T0 + 12,
                transition=Transition("cancelled", release=True),
            )
        assert store.get_run("run-1").status == "running"

    def test_effect_writes_commit_with_the_append(self) -> None:
        store = self.store
        new_run(store, events=2)
        store.append(
            "run-1",
            [ev(3)],
            expected_seq=2,
            epoch=1,
            now=T0 + 1,
            writes=[EffectWrite("run-1:3:pay:abc", "run-1", 3, "pay", "intent")],
        )
        first = store.get_effect("run-1:3:pay:abc")
        assert first is not None
        assert (first.run_id, first.position, first.tool, first.status, first.result) == (
            "run-1",
            3,
            "pay",
            "intent",
            None,
        )
        assert (first.created_at, first.updated_at) == (T0 + 1, T0 + 1)
        store.append(
            "run-1",
            [ev(4)],
            expected_seq=3,
            epoch=1,
            now=T0 + 2,
            writes=[EffectWrite("run-1:3:pay:abc", "run-1", 3, "pay", "completed", '{"ok": 1}')],
        )
        done = store.get_effect("run-1:3:pay:abc")
        assert done is not None
        assert (done.status, done.result, done.created_at, done.updated_at) == (
            "completed",
            '{"ok": 1}',
            T0 + 1,
            T0 + 2,
        )

    def test_several_writes_of_one_key_in_one_append_keep_the_last(self) -> None:
        store = self.store
        new_run(store, events=2)
        store.append(
            "run-1",
            [ev(3)],
            expected_seq=2,
            epoch=1,
            now=T0 + 1,
            writes=[
                EffectWrite("k", "run-1", 3, "t", "intent"),
                EffectWrite("k2", "run-1", 3, "t", "intent"),
                EffectWrite("k", "run-1", 3, "t", "completed", "1"),
            ],
        )
        k, k2 = store.get_effect("k"), store.get_effect("k2")
        assert k is not None and (k.status, k.result) == ("completed", "1")
        assert k2 is not None and k2.status == "intent"

    def test_a_signal_is_taken_once(self) -> None:
        store = self.store
        new_run(store, events=2)
        store.send_signal("run-1", "go", '{"p": 1}', sender="ops", now=T0 + 1)
        signal = store.pending_signal("run-1", "go")
        assert signal is not None
        store.append(
            "run-1", [ev(3)], expected_seq=2, epoch=1, now=T0 + 2, writes=[SignalTake(signal.id, 3)]
        )
        assert store.pending_signal("run-1", "go") is None
        with pytest.raises(Conflict, match="signal") as caught:
            store.append(
                "run-1",
                [ev(4)],
                expected_seq=3,
                epoch=1,
                now=T0 + 3,
                transition=Transition("completed"),
                writes=[SignalTake(signal.id, 4)],
            )
        assert not isinstance(caught.value, LeaseLost)
        assert seqs(store) == [1, 2, 3]
        assert store.get_run("run-1").status == "running"

    def test_taking_a_signal_that_does_not_exist_is_a_conflict(self) -> None:
        store = self.store
        new_run(store, events=2)
        with pytest.raises(Conflict):
            store.append(
                "run-1", [ev(3)], expected_seq=2, epoch=1, now=T0, writes=[SignalTake(12345, 3)]
            )
        assert seqs(store) == [1, 2]

    def test_read_events_takes_a_half_open_range(self) -> None:
        store = self.store
        new_run(store, events=5)
        assert [e.seq for e in store.read_events("run-1")] == [1, 2, 3, 4, 5]
        assert [e.seq for e in store.read_events("run-1", after=2)] == [3, 4, 5]
        assert [e.seq for e in store.read_events("run-1", upto=2)] == [1, 2]
        assert [e.seq for e in store.read_events("run-1", after=1, upto=3)] == [2, 3]
        assert store.read_events("run-1", after=3, upto=3) == []
        assert store.read_events("run-1", after=5) == []
        assert store.read_events("run-1", upto=0) == []
        assert store.read_events("nobody") == []

    def test_load_is_the_newest_snapshot_and_the_events_after_it(self) -> None:
        store = self.store
        new_run(store, events=2)
        store.append(
            "run-1",
            [ev(3)],
            expected_seq=2,
            epoch=1,
            now=T0,
            snapshot=Snapshot("run-1", 3, '{"s": 3}', T0 + 3),
        )
        store.append(
            "run-1",
            [ev(4), ev(5)],
            expected_seq=3,
            epoch=1,
            now=T0,
            snapshot=Snapshot("run-1", 5, '{"s": 5}', T0 + 5),
        )
        store.append("run-1", [ev(6)], expected_seq=5, epoch=1, now=T0)
        cases = {
            None: (5, [6]),
            6: (5, [6]),
            5: (5, []),
            4: (3, [4]),
            3: (3, []),
            2: (None, [1, 2]),
        }
        for upto, (snap_seq, events) in cases.items():
            loaded = store.load("run-1", upto=upto)
            assert (loaded.snapshot.seq if loaded.snapshot else None) == snap_seq, upto
            assert [e.seq for e in loaded.events] == events, upto
            assert loaded.run == store.get_run("run-1")
        assert store.load("run-1").snapshot == Snapshot("run-1", 5, '{"s": 5}', T0 + 5)

    def test_load_without_snapshots_is_the_whole_log(self) -> None:
        store = self.store
        new_run(store, events=3)
        loaded = store.load("run-1")
        assert loaded.snapshot is None and [e.seq for e in loaded.events] == [1, 2, 3]
        assert loaded.events == store.read_events("run-1")

    def test_load_of_an_unknown_run_is_not_found(self) -> None:
        store = self.store
        with pytest.raises(NotFound, match="ghost"):
            store.load("ghost")

    def test_save_snapshot_caches_a_state_once(self) -> None:
        store = self.store
        new_run(store, events=4)
        store.save_snapshot(Snapshot("run-1", 3, '{"s": 3}', T0 + 3))
        store.save_snapshot(Snapshot("run-1", 3, '{"other": 0}', T0 + 9))  # kept once
        loaded = store.load("run-1")
        assert loaded.snapshot == Snapshot("run-1", 3, '{"s": 3}', T0 + 3)
        assert [e.seq for e in loaded.events] == [4]
        assert store.load("run-1", upto=2).snapshot is None
