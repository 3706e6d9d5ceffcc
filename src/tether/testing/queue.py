"""The queue: enqueue (dedup, depth), claim_next (order, limits, races), workers, wake-ups."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tether.errors import Conflict, LeaseLost, NotFound, QueueFull, StoreError
from tether.model.events import NewEvent
from tether.store import (
    NewRun,
    QueueLimits,
    Serving,
    Store,
    Transition,
    WorkerRecord,
)
from tether.testing.base import T0, StoreTest, claimed, enqueue, ev, new_run, seqs


def _waiting(store: Store, queues: list[str], timeout: float, wake: threading.Event) -> Any:
    """``store.wait_for_work`` in a thread (joined by the caller)."""
    t = threading.Thread(target=store.wait_for_work, args=(queues, timeout, wake), daemon=True)
    t.start()
    return t


class QueueSuite(StoreTest):
    """``enqueue``, ``enqueue_many``, ``claim_next`` (order, limits, racing workers), the
    worker registry and ``wait_for_work``."""

    def test_enqueue_creates_a_queued_run_with_its_events(self) -> None:
        store = self.store
        assert enqueue(store, "a", priority=3, concurrency_key="t1", dedup_key="d") == ("a", True)
        rec = store.get_run("a")
        assert (rec.status, rec.queue, rec.priority, rec.epoch, rec.lease_owner) == (
            "queued",
            "q",
            3,
            0,
            None,
        )
        assert (rec.dedup_key, rec.concurrency_key, rec.claimed_at, rec.created_at) == (
            "d",
            "t1",
            None,
            T0,
        )
        assert seqs(store, "a") == [1]

    def test_enqueue_of_a_taken_id_or_an_active_dedup_key_returns_the_existing_run(self) -> None:
        store = self.store
        assert enqueue(store, "a", dedup_key="order-7") == ("a", True)
        assert enqueue(store, "a") == ("a", False)
        assert enqueue(store, "b", dedup_key="order-7") == ("a", False)
        assert enqueue(store, "c", dedup_key="order-7", queue="other") == ("c", True)
        assert [r.id for r in store.list_runs()] == ["c", "a"]
        # a finished run frees its key
        store.claim_next([QueueLimits("q")], owner="w1", ttl=30, now=T0, capacity=1)
        store.append(
            "a",
            [ev(2)],
            expected_seq=1,
            epoch=1,
            now=T0,
            transition=Transition("completed", release=True),
        )
        assert enqueue(store, "d", dedup_key="order-7") == ("d", True)

    def test_a_full_queue_refuses_new_runs(self) -> None:
        store = self.store
        for run_id in "ab":
            assert enqueue(store, run_id, max_depth=2)[1]
        with pytest.raises(QueueFull, match=r"'q' already holds 2 queued runs"):
            enqueue(store, "c", max_depth=2)
        assert enqueue(store, "a", max_depth=2) == ("a", False)  # an existing id is not refused
        assert enqueue(store, "c", max_depth=3) == ("c", True)
        assert enqueue(store, "x", queue="other", max_depth=1) == ("x", True)

    def test_enqueue_many_creates_the_free_ids_in_one_transaction(self) -> None:
        """A batch (child runs): the runs whose ids are free are created, queued and
        claimable; one whose id exists is left as it was; a batch that fails keeps
        nothing (one transaction)."""
        store = self.store

        def run(run_id: str) -> NewRun:
            return NewRun(run_id, "agent", None, "queued", queue="q")

        enqueue(store, "kid-2", now=T0)
        batch = [(run(f"kid-{i}"), [ev(1)]) for i in (1, 2, 3)]
        assert store.enqueue_many(batch, now=T0 + 1) == [True, False, True]
        assert [store.get_run(f"kid-{i}").status for i in (1, 2, 3)] == ["queued"] * 3
        assert seqs(store, "kid-3") == [1]
        assert claimed(store, QueueLimits("q")) == ["kid-2", "kid-1", "kid-3"]
        assert store.enqueue_many(batch, now=T0 + 2) == [False, False, False]
        # a second run the database refuses (an event without data) fails the batch
        nothing = NewEvent("note", None, T0, None)  # type: ignore[arg-type]
        with pytest.raises(StoreError):
            store.enqueue_many([(run("kid-4"), [ev(1)]), (run("kid-5"), [nothing])], now=T0)
        for run_id in ("kid-4", "kid-5"):
            with pytest.raises(NotFound):
                store.get_run(run_id)

    def test_claim_next_takes_the_best_claimable_runs_first(self) -> None:
        store = self.store
        enqueue(store, "low", priority=0, now=T0 + 1)
        enqueue(store, "high", priority=5, now=T0 + 2)
        enqueue(store, "old", priority=0, now=T0)
        enqueue(store, "later", priority=9, available_at=T0 + 100)  # not due yet
        enqueue(store, "elsewhere", queue="other")
        claims = store.claim_next([QueueLimits("q")], owner="w1", ttl=30, now=T0 + 10, capacity=2)
        assert [(r.id, r.status, r.epoch) for r, _ in claims] == [
            ("high", "running", 1),
            ("old", "running", 1),
        ]
        assert [(lease.owner, lease.epoch, lease.expires) for _, lease in claims] == [
            ("w1", 1, T0 + 40),
            ("w1", 1, T0 + 40),
        ]
        rec = store.get_run("high")
        assert (rec.status, rec.lease_owner, rec.claimed_at, rec.epoch) == (
            "running",
            "w1",
            T0 + 10,
            1,
        )
        assert claimed(store, QueueLimits("q")) == ["low"]
        assert claimed(store, QueueLimits("q"), now=T0 + 100, capacity=1) == ["later"]
        assert claimed(store, QueueLimits("q")) == []

    def test_claim_next_takes_due_waits_and_expired_leases(self) -> None:
        store = self.store
        new_run(store, "timer", owner="w0", queue="q")
        store.append(
            "timer",
            [ev(3)],
            expected_seq=2,
            epoch=1,
            now=T0,
            transition=Transition(
                "waiting", release=True, available_at=T0 + 50, waiting_for="timer"
            ),
        )
        new_run(store, "signal", owner="w0", queue="q")
        store.append(
            "signal",
            [ev(3)],
            expected_seq=2,
            epoch=1,
            now=T0,
            transition=Transition("waiting", release=True, waiting_for="signal:x"),
        )
        new_run(store, "dead", owner="w0", ttl=30, queue="q")
        assert claimed(store, QueueLimits("q"), now=T0 + 20) == []
        claims = store.claim_next([QueueLimits("q")], owner="w1", ttl=30, now=T0 + 60, capacity=9)
        assert sorted((r.id, r.status, r.epoch, r.lease_owner) for r, _ in claims) == [
            ("dead", "running", 2, "w1"),
            ("timer", "running", 2, "w1"),
        ]
        assert all(lease.epoch == 2 for _, lease in claims)
        assert store.get_run("timer").waiting_for is None
        with pytest.raises(LeaseLost):  # the dead worker's lease is gone
            store.append("dead", [ev(3)], expected_seq=2, epoch=1, now=T0 + 61)

    @pytest.mark.parametrize("limited", [False, True])
    def test_claim_next_passes_over_the_versions_its_worker_does_not_serve(
        self, limited: bool
    ) -> None:
        """A worker that registers ``triage`` at versions 2 and none (``Serving``) claims
        those and every run of another agent, never ``triage`` 1, whether queued, due
        or under an expired lease; a worker without a filter claims them all."""
        store = self.store
        for run_id, version in [("v1", "1"), ("v2", "2"), ("none", None)]:
            enqueue(store, run_id, agent="triage", version=version, now=T0 + len(run_id))
        enqueue(store, "other", agent="mail", version="1", now=T0 + 9)
        new_run(store, "dead1", owner="w0", queue="q", agent="triage", version="1")
        new_run(store, "dead2", owner="w0", queue="q", agent="triage", version="2")
        limits = QueueLimits("q", concurrency=50) if limited else QueueLimits("q")
        serving = Serving(("triage",), (("triage", "2"), ("triage", None)))
        got = claimed(store, limits, now=T0 + 60, serving=serving)
        assert sorted(got) == ["dead2", "none", "other", "v2"]
        assert sorted(claimed(store, limits, now=T0 + 60, owner="w2")) == ["dead1", "v1"]

    def test_claim_next_goes_through_the_queues_in_order(self) -> None:
        store = self.store
        for run_id, queue in [("a1", "a"), ("a2", "a"), ("b1", "b")]:
            enqueue(store, run_id, queue=queue)
        assert claimed(store, QueueLimits("b"), QueueLimits("a"), capacity=2) == ["b1", "a1"]

    def test_claim_next_keeps_to_the_concurrency_limit(self) -> None:
        store = self.store
        for i in range(5):
            enqueue(store, f"r{i}", now=T0 + i)
        limits = QueueLimits("q", concurrency=2)
        assert claimed(store, limits) == ["r0", "r1"]
        assert claimed(store, limits) == []
        store.append(
            "r0",
            [ev(2)],
            expected_seq=1,
            epoch=1,
            now=T0,
            transition=Transition("completed", release=True),
        )
        assert claimed(store, limits) == ["r2"]
        # the leases of r1 and r2 expired: they are taken again first, within the limit
        assert claimed(store, limits, now=T0 + 41) == ["r1", "r2"]

    def test_claim_next_keeps_to_the_per_key_limit(self) -> None:
        store = self.store
        for i, key in enumerate(["t1", "t1", "t1", "t2", None]):
            enqueue(store, f"r{i}", now=T0 + i, concurrency_key=key)
        assert claimed(store, QueueLimits("q", per_key=1)) == ["r0", "r3", "r4"]
        assert claimed(store, QueueLimits("q", per_key=2)) == ["r1"]

    def test_claim_next_keeps_to_the_rate_limit(self) -> None:
        store = self.store
        for i in range(5):
            enqueue(store, f"r{i}", now=T0 + i)
        limits = QueueLimits("q", rate=(2, 60.0))
        assert claimed(store, limits, now=T0 + 10, ttl=1000) == ["r0", "r1"]
        assert claimed(store, limits, now=T0 + 69, ttl=1000) == []
        assert claimed(store, limits, now=T0 + 71, ttl=1000) == ["r2", "r3"]

    def test_racing_workers_never_claim_a_run_twice(self) -> None:
        store = self.store
        for i in range(40):
            enqueue(store, f"r{i:02}", now=T0 + i)
        got: list[list[str]] = [[] for _ in range(6)]
        start = threading.Barrier(6)

        def worker(i: int) -> None:
            start.wait()
            for _ in range(10):
                got[i] += claimed(store, QueueLimits("q"), owner=f"w{i}", capacity=3)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        everything = [run_id for claims in got for run_id in claims]
        assert sorted(everything) == [f"r{i:02}" for i in range(40)]
        assert {store.get_run(r).epoch for r in everything} == {1}

    def test_racing_workers_keep_to_the_concurrency_limit(self) -> None:
        store = self.store
        for i in range(30):
            enqueue(store, f"r{i:02}", now=T0 + i, concurrency_key=f"k{i % 2}")
        start = threading.Barrier(6)
        limits = QueueLimits("q", concurrency=7, per_key=3, rate=(100, 60.0))

        def worker(i: int) -> None:
            start.wait()
            for _ in range(5):
                claimed(store, limits, owner=f"w{i}", capacity=2)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        running = [r for r in store.list_runs(status="running")]
        assert len(running) == 6  # per_key 3 for each of the two keys caps it below 7
        assert sorted(r.concurrency_key or "" for r in running) == ["k0"] * 3 + ["k1"] * 3

    def test_racing_enqueues_of_one_dedup_key_create_one_run(self) -> None:
        store = self.store
        start = threading.Barrier(6)
        results: list[tuple[str, bool]] = []

        def enqueue_one(i: int) -> None:
            start.wait()
            results.append(enqueue(store, f"r{i}", dedup_key="same", max_depth=50))

        threads = [threading.Thread(target=enqueue_one, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        created = [rid for rid, fresh in results if fresh]
        assert len(created) == 1 and {rid for rid, _ in results} == set(created)
        assert [r.id for r in store.list_runs()] == created

    def test_racing_enqueues_keep_to_the_max_depth(self) -> None:
        store = self.store
        start = threading.Barrier(8)
        outcomes: list[object] = []

        def enqueue_one(i: int) -> None:
            start.wait()
            try:
                outcomes.append(enqueue(store, f"r{i}", max_depth=3)[1])
            except QueueFull as e:
                outcomes.append(e)

        threads = [threading.Thread(target=enqueue_one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert outcomes.count(True) == 3 and len(store.list_runs()) == 3
        assert sum(isinstance(o, QueueFull) for o in outcomes) == 5

    def test_a_transition_back_to_active_with_a_taken_dedup_key_is_a_conflict(self) -> None:
        store = self.store
        enqueue(store, "a", dedup_key="k")
        store.claim_next([QueueLimits("q")], owner="w1", ttl=30, now=T0, capacity=1)
        store.append(
            "a",
            [ev(2)],
            expected_seq=1,
            epoch=1,
            now=T0,
            transition=Transition("failed", release=True),
        )
        enqueue(store, "b", dedup_key="k")
        store.claim("a", owner="w1", ttl=30, now=T0)
        with pytest.raises(Conflict):
            store.append(
                "a", [ev(3)], expected_seq=2, epoch=2, now=T0, transition=Transition("queued")
            )
        assert store.get_run("a").status == "failed" and seqs(store, "a") == [1, 2]

    def test_a_worker_records_the_versions_it_serves(self) -> None:
        """What ``tether workers`` shows (schema 18): the claim filter, or None (every
        run); registering again replaces it."""
        store = self.store
        serving = Serving(("triage",), (("triage", "2"), ("triage", None)))
        store.register_worker(
            WorkerRecord("w1", "h", 1, ["q"], 4, T0, T0, serves=serving), now=T0 + 1
        )
        store.register_worker(WorkerRecord("w2", "h", 2, ["q"], 4, T0, T0), now=T0)
        assert [(w.id, w.serves) for w in store.list_workers()] == [("w1", serving), ("w2", None)]
        assert str(serving) == "triage@2 triage + other agents"
        assert (serving.serves("triage", "1"), serving.serves("mail", "1")) == (False, True)
        store.register_worker(WorkerRecord("w1", "h", 1, ["q"], 4, T0, T0), now=T0 + 2)
        assert store.list_workers()[0].serves is None

    def test_workers_register_beat_and_go(self) -> None:
        store = self.store
        store.register_worker(WorkerRecord("w1", "host-a", 11, ["q", "r"], 4, T0, T0), now=T0)
        store.register_worker(WorkerRecord("w2", "host-b", 12, ["q"], 2, T0, T0), now=T0 + 1)
        assert [(w.id, w.queues, w.heartbeat_at) for w in store.list_workers()] == [
            ("w2", ["q"], T0 + 1),
            ("w1", ["q", "r"], T0),
        ]
        w1 = store.list_workers()[1]
        assert (w1.host, w1.pid, w1.concurrency, w1.started_at, w1.stopping) == (
            "host-a",
            11,
            4,
            T0,
            0,
        )
        new_run(store, "a", owner="w1", ttl=10)
        new_run(store, "b", owner="w1", ttl=10)
        new_run(store, "c", owner="w2", ttl=10)
        store.request_cancel("b", compensate=True, now=T0)
        assert store.worker_heartbeat("w1", ttl=30, now=T0 + 5) == (False, {"b": 2})
        assert [store.get_run(r).lease_expires for r in "abc"] == [T0 + 35, T0 + 35, T0 + 10]
        assert store.list_workers()[0].id == "w1"  # its heartbeat is the newest
        assert store.worker_heartbeat("nobody", ttl=30, now=T0) == (False, {})
        store.remove_worker("w2", expire_leases=True)
        assert [w.id for w in store.list_workers()] == ["w1"]
        assert store.get_run("c").lease_expires == 0
        store.remove_worker("w1", expire_leases=False)
        assert store.list_workers() == [] and store.get_run("a").lease_expires == T0 + 35
        store.register_worker(WorkerRecord("w1", "host-a", 11, ["q"], 4, T0, T0), now=T0 + 9)
        assert store.list_workers()[0].heartbeat_at == T0 + 9

    def test_wait_for_work_returns_on_wake_or_timeout(self) -> None:
        store = self.store
        wake = threading.Event()
        timed_out = _waiting(store, ["q"], 0.1, wake)
        timed_out.join(30)
        assert not timed_out.is_alive() and not wake.is_set()
        woken = _waiting(store, ["q"], 3600, wake)
        wake.set()
        woken.join(30)
        assert not woken.is_alive(), "a set wake event did not end the wait"
        store.notify_work("q")  # never fails, even with nobody listening

    def test_the_load_after_a_claim_sees_the_claimed_run(self) -> None:
        """A claim reads the claimed runs' logs for the load that follows: that load must
        show the run as the claim left it, and a second load reads the store again."""
        store = self.store
        enqueue(store, "a")
        [(record, lease)] = store.claim_next(
            [QueueLimits("q")], owner="w1", ttl=30, now=T0 + 10, capacity=1
        )
        assert (record.status, record.epoch) == ("running", lease.epoch)  # as the claim left it
        first = store.load("a")
        assert (first.run.status, first.run.epoch, first.run.lease_owner) == ("running", 1, "w1")
        assert [e.seq for e in first.events] == [1]
        store.append("a", [ev(2)], expected_seq=1, epoch=lease.epoch, now=T0 + 11)
        assert [e.seq for e in store.load("a").events] == [1, 2]  # not the claim's copy again

    @pytest.mark.parametrize("limited", [False, True])
    def test_a_claim_takes_at_most_a_queues_room(self, limited: bool) -> None:
        """``room``: what one worker may still take from a queue (its worker_concurrency),
        with or without global limits (PostgreSQL claims those under the queue's lock)."""
        store = self.store
        for i in range(4):
            enqueue(store, f"a{i}", queue="a", now=T0 + i)
            enqueue(store, f"b{i}", queue="b", now=T0 + i)
        a = QueueLimits("a", concurrency=9 if limited else None, room=2)
        got = claimed(store, a, QueueLimits("b"), capacity=5)
        assert got == ["a0", "a1", "b0", "b1", "b2"]
        assert QueueLimits("a", room=2).most(5) == 2 and QueueLimits("a").most(5) == 5
