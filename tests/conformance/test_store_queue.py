"""The queue: enqueue (dedup, depth), claim_next (order, limits, races), workers, wake-ups."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from _conformance import PG_URL, T0, Backend, ev, new_run, seqs, until

from tether.errors import Conflict, LeaseLost, QueueFull
from tether.store import NewRun, QueueLimits, Store, Transition, WorkerRecord

pytestmark = pytest.mark.conformance


def _enqueue(
    store: Store,
    run_id: str,
    *,
    queue: str = "q",
    now: float = T0,
    max_depth: int | None = None,
    **fields: Any,
) -> tuple[str, bool]:
    run = NewRun(run_id, "agent", None, "queued", queue=queue, **fields)
    return store.enqueue(run, [ev(1)], now=now, max_depth=max_depth)


def _claimed(
    store: Store,
    *limits: QueueLimits,
    owner: str = "w1",
    now: float = T0 + 10,
    capacity: int = 10,
    ttl: float = 30,
) -> list[str]:
    claims = store.claim_next(list(limits), owner=owner, ttl=ttl, now=now, capacity=capacity)
    return [record.id for record, _ in claims]


def test_enqueue_creates_a_queued_run_with_its_events(store: Store) -> None:
    assert _enqueue(store, "a", priority=3, concurrency_key="t1", dedup_key="d") == ("a", True)
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


def test_enqueue_of_a_taken_id_or_an_active_dedup_key_returns_the_existing_run(
    store: Store,
) -> None:
    assert _enqueue(store, "a", dedup_key="order-7") == ("a", True)
    assert _enqueue(store, "a") == ("a", False)
    assert _enqueue(store, "b", dedup_key="order-7") == ("a", False)
    assert _enqueue(store, "c", dedup_key="order-7", queue="other") == ("c", True)
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
    assert _enqueue(store, "d", dedup_key="order-7") == ("d", True)


def test_a_full_queue_refuses_new_runs(store: Store) -> None:
    for run_id in "ab":
        assert _enqueue(store, run_id, max_depth=2)[1]
    with pytest.raises(QueueFull, match=r"'q' already holds 2 queued runs"):
        _enqueue(store, "c", max_depth=2)
    assert _enqueue(store, "a", max_depth=2) == ("a", False)  # an existing id is not refused
    assert _enqueue(store, "c", max_depth=3) == ("c", True)
    assert _enqueue(store, "x", queue="other", max_depth=1) == ("x", True)


def test_claim_next_takes_the_best_claimable_runs_first(store: Store) -> None:
    _enqueue(store, "low", priority=0, now=T0 + 1)
    _enqueue(store, "high", priority=5, now=T0 + 2)
    _enqueue(store, "old", priority=0, now=T0)
    _enqueue(store, "later", priority=9, available_at=T0 + 100)  # not due yet
    _enqueue(store, "elsewhere", queue="other")
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
    assert (rec.status, rec.lease_owner, rec.claimed_at, rec.epoch) == ("running", "w1", T0 + 10, 1)
    assert _claimed(store, QueueLimits("q")) == ["low"]
    assert _claimed(store, QueueLimits("q"), now=T0 + 100, capacity=1) == ["later"]
    assert _claimed(store, QueueLimits("q")) == []


def test_claim_next_takes_due_waits_and_expired_leases(store: Store) -> None:
    new_run(store, "timer", owner="w0", queue="q")
    store.append(
        "timer",
        [ev(3)],
        expected_seq=2,
        epoch=1,
        now=T0,
        transition=Transition("waiting", release=True, available_at=T0 + 50, waiting_for="timer"),
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
    assert _claimed(store, QueueLimits("q"), now=T0 + 20) == []
    claims = store.claim_next([QueueLimits("q")], owner="w1", ttl=30, now=T0 + 60, capacity=9)
    assert sorted((r.id, r.status, r.epoch, r.lease_owner) for r, _ in claims) == [
        ("dead", "running", 2, "w1"),
        ("timer", "running", 2, "w1"),
    ]
    assert all(lease.epoch == 2 for _, lease in claims)
    assert store.get_run("timer").waiting_for is None
    with pytest.raises(LeaseLost):  # the dead worker's lease is gone
        store.append("dead", [ev(3)], expected_seq=2, epoch=1, now=T0 + 61)


def test_claim_next_goes_through_the_queues_in_order(store: Store) -> None:
    for run_id, queue in [("a1", "a"), ("a2", "a"), ("b1", "b")]:
        _enqueue(store, run_id, queue=queue)
    assert _claimed(store, QueueLimits("b"), QueueLimits("a"), capacity=2) == ["b1", "a1"]


def test_claim_next_keeps_to_the_concurrency_limit(store: Store) -> None:
    for i in range(5):
        _enqueue(store, f"r{i}", now=T0 + i)
    limits = QueueLimits("q", concurrency=2)
    assert _claimed(store, limits) == ["r0", "r1"]
    assert _claimed(store, limits) == []
    store.append(
        "r0",
        [ev(2)],
        expected_seq=1,
        epoch=1,
        now=T0,
        transition=Transition("completed", release=True),
    )
    assert _claimed(store, limits) == ["r2"]
    # the leases of r1 and r2 expired: they are taken again first, within the limit
    assert _claimed(store, limits, now=T0 + 41) == ["r1", "r2"]


def test_claim_next_keeps_to_the_per_key_limit(store: Store) -> None:
    for i, key in enumerate(["t1", "t1", "t1", "t2", None]):
        _enqueue(store, f"r{i}", now=T0 + i, concurrency_key=key)
    assert _claimed(store, QueueLimits("q", per_key=1)) == ["r0", "r3", "r4"]
    assert _claimed(store, QueueLimits("q", per_key=2)) == ["r1"]


def test_claim_next_keeps_to_the_rate_limit(store: Store) -> None:
    for i in range(5):
        _enqueue(store, f"r{i}", now=T0 + i)
    limits = QueueLimits("q", rate=(2, 60.0))
    assert _claimed(store, limits, now=T0 + 10, ttl=1000) == ["r0", "r1"]
    assert _claimed(store, limits, now=T0 + 69, ttl=1000) == []
    assert _claimed(store, limits, now=T0 + 71, ttl=1000) == ["r2", "r3"]


def test_racing_workers_never_claim_a_run_twice(store: Store) -> None:
    for i in range(40):
        _enqueue(store, f"r{i:02}", now=T0 + i)
    got: list[list[str]] = [[] for _ in range(6)]
    start = threading.Barrier(6)

    def worker(i: int) -> None:
        start.wait()
        for _ in range(10):
            got[i] += _claimed(store, QueueLimits("q"), owner=f"w{i}", capacity=3)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [run_id for claims in got for run_id in claims]
    assert sorted(everything) == [f"r{i:02}" for i in range(40)]
    assert {store.get_run(r).epoch for r in everything} == {1}


def test_racing_workers_keep_to_the_concurrency_limit(store: Store) -> None:
    for i in range(30):
        _enqueue(store, f"r{i:02}", now=T0 + i, concurrency_key=f"k{i % 2}")
    start = threading.Barrier(6)
    limits = QueueLimits("q", concurrency=7, per_key=3, rate=(100, 60.0))

    def worker(i: int) -> None:
        start.wait()
        for _ in range(5):
            _claimed(store, limits, owner=f"w{i}", capacity=2)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    running = [r for r in store.list_runs(status="running")]
    assert len(running) == 6  # per_key 3 for each of the two keys caps it below 7
    assert sorted(r.concurrency_key or "" for r in running) == ["k0"] * 3 + ["k1"] * 3


def test_racing_enqueues_of_one_dedup_key_create_one_run(store: Store) -> None:
    start = threading.Barrier(6)
    results: list[tuple[str, bool]] = []

    def enqueue(i: int) -> None:
        start.wait()
        results.append(_enqueue(store, f"r{i}", dedup_key="same", max_depth=50))

    threads = [threading.Thread(target=enqueue, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    created = [rid for rid, fresh in results if fresh]
    assert len(created) == 1 and {rid for rid, _ in results} == set(created)
    assert [r.id for r in store.list_runs()] == created


def test_racing_enqueues_keep_to_the_max_depth(store: Store) -> None:
    start = threading.Barrier(8)
    outcomes: list[object] = []

    def enqueue(i: int) -> None:
        start.wait()
        try:
            outcomes.append(_enqueue(store, f"r{i}", max_depth=3)[1])
        except QueueFull as e:
            outcomes.append(e)

    threads = [threading.Thread(target=enqueue, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count(True) == 3 and len(store.list_runs()) == 3
    assert sum(isinstance(o, QueueFull) for o in outcomes) == 5


def test_a_transition_back_to_active_with_a_taken_dedup_key_is_a_conflict(
    backend: Backend, store: Store, request: pytest.FixtureRequest
) -> None:
    _enqueue(store, "a", dedup_key="k")
    store.claim_next([QueueLimits("q")], owner="w1", ttl=30, now=T0, capacity=1)
    store.append(
        "a", [ev(2)], expected_seq=1, epoch=1, now=T0, transition=Transition("failed", release=True)
    )
    _enqueue(store, "b", dedup_key="k")
    store.claim("a", owner="w1", ttl=30, now=T0)
    with pytest.raises(Conflict):
        store.append("a", [ev(3)], expected_seq=2, epoch=2, now=T0, transition=Transition("queued"))
    assert store.get_run("a").status == "failed" and seqs(store, "a") == [1, 2]


def test_workers_register_beat_and_go(store: Store) -> None:
    store.register_worker(WorkerRecord("w1", "host-a", 11, ["q", "r"], 4, T0, T0), now=T0)
    store.register_worker(WorkerRecord("w2", "host-b", 12, ["q"], 2, T0, T0), now=T0 + 1)
    assert [(w.id, w.queues, w.heartbeat_at) for w in store.list_workers()] == [
        ("w2", ["q"], T0 + 1),
        ("w1", ["q", "r"], T0),
    ]
    w1 = store.list_workers()[1]
    assert (w1.host, w1.pid, w1.concurrency, w1.started_at, w1.stopping) == ("host-a", 11, 4, T0, 0)
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


def _waiting(store: Store, queues: list[str], timeout: float, wake: threading.Event) -> Any:
    """``store.wait_for_work`` in a thread (joined by the caller)."""
    t = threading.Thread(target=store.wait_for_work, args=(queues, timeout, wake), daemon=True)
    t.start()
    return t


def test_wait_for_work_returns_on_wake_or_timeout(store: Store) -> None:
    # No wall-clock bound: a wait ends by its timeout (nobody wakes it), or by its wake
    # event long before its hour-long timeout; 30 s joins only bound a broken wait.
    wake = threading.Event()
    timed_out = _waiting(store, ["q"], 0.1, wake)
    timed_out.join(30)
    assert not timed_out.is_alive() and not wake.is_set()
    woken = _waiting(store, ["q"], 3600, wake)
    wake.set()
    woken.join(30)
    assert not woken.is_alive(), "a set wake event did not end the wait"
    store.notify_work("q")  # never fails, even with nobody listening


def test_a_notify_wakes_a_waiting_worker_of_that_queue(pg_backend: Backend) -> None:
    """Two waiters, on queues q and other: a notify for other wakes its waiter and not
    q's (checked once other's waiter is awake: the listener handles notifications in
    order), then a notify for q wakes q's. Ordered by events, never by sleeps."""
    listener, sender = pg_backend.open(), pg_backend.open()
    on_q, on_other = threading.Event(), threading.Event()
    waiters = [_waiting(listener, ["q"], 3600, on_q), _waiting(listener, ["other"], 3600, on_other)]
    assert until(lambda: len(listener._waiters) == 2, 30)  # type: ignore[attr-defined]
    for _ in range(300):  # the LISTEN connection is being opened: notify until it hears
        sender.notify_work("other")
        if on_other.wait(0.1):
            break
    assert on_other.is_set(), "no notify reached the listener"
    assert not on_q.is_set(), "a notify for another queue woke q's waiter"
    sender.notify_work("q")
    assert on_q.wait(30)
    for t in waiters:
        t.join(30)
        assert not t.is_alive()


@pytest.mark.parametrize("limited", [False, True])
def test_one_claim_merges_the_kinds_in_priority_order(store: Store, limited: bool) -> None:
    """Queued, due-waiting and expired runs are read by three scans; one claim must still
    take the best of all of them, in order, and no more than its capacity."""
    _enqueue(store, "queued-p1", priority=1, now=T0)
    _enqueue(store, "queued-p0", priority=0, now=T0)
    new_run(store, "timer-p5", owner="w0", queue="q", priority=5)
    store.set_status("timer-p5", Transition("waiting", release=True, available_at=T0 + 5), now=T0)
    new_run(store, "dead-p3", owner="w0", ttl=1, queue="q", priority=3)
    limits = QueueLimits("q", concurrency=50) if limited else QueueLimits("q")
    assert _claimed(store, limits, now=T0 + 10, capacity=3) == ["timer-p5", "dead-p3", "queued-p1"]
    assert _claimed(store, limits, now=T0 + 10, capacity=3) == ["queued-p0"]


def test_a_claim_reads_the_queue_through_its_order_index(backend: Backend) -> None:
    """A claim must not sort the whole queue (it did: O(queue depth) per claim)."""
    store = backend.open()
    for i in range(300):
        _enqueue(store, f"r{i:03}", priority=i % 3, now=T0 + i)
    if backend.name == "sqlite":
        from tether.store.sqlite.connections import _Q as SQ

        plan = " ".join(
            str(r)
            for r in backend.sql_params(
                "EXPLAIN QUERY PLAN " + SQ["claim_candidates"],
                {"queue": "q", "now": T0 + 1000, "scan": 1},
            )
        )
    else:
        from tether.store.postgres.pool import _Q as PQ

        backend.sql("ANALYZE runs")
        plan = " ".join(
            str(r)
            for r in backend.sql_params(
                "EXPLAIN " + PQ["claim_fast"],
                {"queue": "q", "now": T0 + 1000, "scan": 1, "owner": "w", "expires": T0},
            )
        )
    assert "runs_queued_order" in plan, plan
    assert _claimed(store, QueueLimits("q"), now=T0 + 1000, capacity=2) == ["r002", "r005"]


def _claim_plan(backend: Backend, now: float) -> str:
    """The plan of a claim of this queue: SQLite's query plan; on PostgreSQL the generic plan
    (made once for all parameters), which is what the group commit's connections run."""
    if backend.name == "sqlite":
        from tether.store.sqlite.connections import _Q as SQ

        rows = backend.sql_params(
            "EXPLAIN QUERY PLAN " + SQ["claim_candidates"], {"queue": "q", "now": now, "scan": 2}
        )
        return " ".join(str(r) for r in rows)
    from tether.store.pgwire import Prepared
    from tether.store.postgres.pool import _Q as PQ

    claim = Prepared("claim", PQ["claim_fast"])
    values = {"queue": "'q'", "now": repr(now), "scan": "2", "owner": "'w'", "expires": repr(now)}
    args = ", ".join(values[name] for name in claim.params)
    prepare = b"PREPARE claim AS " + claim.sql
    return _pg_plan(backend, f"EXECUTE claim({args})".encode(), prepare)


def _pg_plan(backend: Backend, statement: bytes, *before: bytes) -> str:
    """PostgreSQL's plan of ``statement`` (after ``before``), as made once for all
    parameters (as the group commit's connections do), and as for a big table: a few
    dozen rows fit a page or two, which PostgreSQL rightly reads whole, while the question
    is which index it would use."""
    import psycopg

    options = (
        f"-c search_path={backend.schema} -c plan_cache_mode=force_generic_plan "
        "-c enable_seqscan=off"
    )
    with psycopg.connect(PG_URL, autocommit=True, options=options) as conn:
        conn.execute("ANALYZE runs")
        for sql in before:
            conn.execute(sql)
        return " ".join(r[0] for r in conn.execute(b"EXPLAIN " + statement))


def test_a_claim_reads_neither_runs_waiting_for_later_nor_runs_executing_elsewhere(
    backend: Backend,
) -> None:
    """A claim read every waiting run of its queue to find the due ones, and every running
    run to find expired leases: work in proportion to the approvals pending and the runs in
    flight, at every claim. Both are ranges of an index now (schema 8)."""
    store = backend.open()
    for i in range(60):  # timers due long after the claim: approvals pending for a day
        new_run(store, f"later-{i:02}", owner="w0", queue="q")
        later = Transition("waiting", release=True, available_at=T0 + 86_400 + i)
        store.set_status(f"later-{i:02}", later, now=T0)
    for i in range(30):  # executing on other workers under live leases
        new_run(store, f"busy-{i:02}", owner=f"w{i}", ttl=3_600, queue="q")
    new_run(store, "due", owner="w0", queue="q")
    store.set_status("due", Transition("waiting", release=True, available_at=T0 + 5), now=T0)
    new_run(store, "expired", owner="w0", ttl=1, queue="q")
    new_run(store, "released", owner="w0", ttl=3_600, queue="q")
    store.release("released", epoch=1)  # no owner, still running: claimable at once
    plan = _claim_plan(backend, T0 + 10)
    assert "runs_lease_due" in plan and "runs_claimable" in plan, plan
    assert "runs_waiting_due" not in plan and "runs_status" not in plan, plan
    assert sorted(_claimed(store, QueueLimits("q"), now=T0 + 10, capacity=9)) == [
        "due",
        "expired",
        "released",
    ]
    assert _claimed(store, QueueLimits("q"), now=T0 + 10, capacity=9) == []


def test_a_rate_limit_counts_the_recent_claims_by_claim_time(backend: Backend) -> None:
    """A rate-limited queue counts its claims of the last period at every claim; it read
    every run the queue ever had to do so (16 ms a claim at 200,000 runs). By claim time
    now (schema 8), and the limit still holds."""
    store = backend.open()
    for i in range(40):
        _enqueue(store, f"r{i:02}", now=T0)
    limits = QueueLimits("q", rate=(3, 60.0))
    assert _claimed(store, limits, now=T0 + 1, ttl=3_600) == ["r00", "r01", "r02"]
    assert _claimed(store, limits, now=T0 + 30, ttl=3_600) == []
    assert _claimed(store, limits, now=T0 + 62, ttl=3_600) == ["r03", "r04", "r05"]
    count = "SELECT count(*) FROM runs WHERE queue = 'q' AND claimed_at > 0"  # claims_since
    if backend.name == "sqlite":
        plan = " ".join(str(r) for r in backend.sql("EXPLAIN QUERY PLAN " + count))
    else:
        plan = _pg_plan(backend, count.encode())
    assert "runs_claimed" in plan, plan


def test_the_load_after_a_claim_sees_the_claimed_run(store: Store) -> None:
    """A claim reads the claimed runs' logs for the load that follows: that load must
    show the run as the claim left it, and a second load reads the store again."""
    _enqueue(store, "a")
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
def test_a_claim_takes_at_most_a_queues_room(store: Store, limited: bool) -> None:
    """``room``: what one worker may still take from a queue (its worker_concurrency),
    with or without global limits (PostgreSQL claims those under the queue's lock)."""
    for i in range(4):
        _enqueue(store, f"a{i}", queue="a", now=T0 + i)
        _enqueue(store, f"b{i}", queue="b", now=T0 + i)
    a = QueueLimits("a", concurrency=9 if limited else None, room=2)
    got = _claimed(store, a, QueueLimits("b"), capacity=5)
    assert got == ["a0", "a1", "b0", "b1", "b2"]
    assert QueueLimits("a", room=2).most(5) == 2 and QueueLimits("a").most(5) == 5
