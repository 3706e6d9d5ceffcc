"""The queue where it depends on the backend: LISTEN/NOTIFY wake-ups, the claim's query plans,
and claims of runs made waiting with ``set_status``. The rest of the queue's tests (enqueue,
claim_next's order, limits and races, workers) are in the shipped suite,
tether.testing.queue.QueueSuite, run by test_store_suite.py."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from _conformance import PG_URL, T0, Backend, claimed, enqueue, new_run, until

from tether.errors import Conflict
from tether.store import QueueLimits, Serving, Store, Transition
from tether.store.records import CLAIM_ALL

pytestmark = pytest.mark.conformance


def _waiting(store: Store, queues: list[str], timeout: float, wake: threading.Event) -> Any:
    """``store.wait_for_work`` in a thread (joined by the caller)."""
    t = threading.Thread(target=store.wait_for_work, args=(queues, timeout, wake), daemon=True)
    t.start()
    return t


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
    enqueue(store, "queued-p1", priority=1, now=T0)
    enqueue(store, "queued-p0", priority=0, now=T0)
    new_run(store, "timer-p5", owner="w0", queue="q", priority=5)
    store.set_status("timer-p5", Transition("waiting", release=True, available_at=T0 + 5), now=T0)
    new_run(store, "dead-p3", owner="w0", ttl=1, queue="q", priority=3)
    limits = QueueLimits("q", concurrency=50) if limited else QueueLimits("q")
    assert claimed(store, limits, now=T0 + 10, capacity=3) == ["timer-p5", "dead-p3", "queued-p1"]
    assert claimed(store, limits, now=T0 + 10, capacity=3) == ["queued-p0"]


@pytest.mark.parametrize("serving", [None, Serving(("triage",), (("triage", "2"),))])
def test_a_claim_reads_the_queue_through_its_order_index(
    backend: Backend, serving: Serving | None
) -> None:
    """A claim must not sort the whole queue (it did: O(queue depth) per claim), whether
    or not its worker serves only some versions."""
    serves = CLAIM_ALL if serving is None else serving.params()
    store = backend.open()
    for i in range(300):
        enqueue(store, f"r{i:03}", priority=i % 3, now=T0 + i)
    if backend.name == "sqlite":
        from tether.store.sqlite.connections import _Q as SQ

        plan = " ".join(
            str(r)
            for r in backend.sql_params(
                "EXPLAIN QUERY PLAN " + SQ["claim_candidates"],
                {"queue": "q", "now": T0 + 1000, "scan": 1, **serves},
            )
        )
    else:
        from tether.store.postgres.pool import _Q as PQ

        backend.sql("ANALYZE runs")
        plan = " ".join(
            str(r)
            for r in backend.sql_params(
                "EXPLAIN " + PQ["claim_fast"],
                {"queue": "q", "now": T0 + 1000, "scan": 1, "owner": "w", "expires": T0, **serves},
            )
        )
    assert "runs_queued_order" in plan, plan
    assert claimed(store, QueueLimits("q"), now=T0 + 1000, capacity=2) == ["r002", "r005"]


def _claim_plan(backend: Backend, now: float) -> str:
    """The plan of a claim of this queue: SQLite's query plan; on PostgreSQL the generic plan
    (made once for all parameters), which is what the group commit's connections run."""
    if backend.name == "sqlite":
        from tether.store.sqlite.connections import _Q as SQ

        rows = backend.sql_params(
            "EXPLAIN QUERY PLAN " + SQ["claim_candidates"],
            {"queue": "q", "now": now, "scan": 2, **CLAIM_ALL},
        )
        return " ".join(str(r) for r in rows)
    from tether.store.pgwire import Prepared
    from tether.store.postgres.pool import _Q as PQ

    claim = Prepared("claim", PQ["claim_fast"])
    values = {"queue": "'q'", "now": repr(now), "scan": "2", "owner": "'w'", "expires": repr(now)}
    values |= {"pinned": "NULL", "served": "NULL"}  # a worker that serves every version
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
    assert sorted(claimed(store, QueueLimits("q"), now=T0 + 10, capacity=9)) == [
        "due",
        "expired",
        "released",
    ]
    assert claimed(store, QueueLimits("q"), now=T0 + 10, capacity=9) == []


def test_a_rate_limit_counts_the_recent_claims_by_claim_time(backend: Backend) -> None:
    """A rate-limited queue counts its claims of the last period at every claim; it read
    every run the queue ever had to do so (16 ms a claim at 200,000 runs). By claim time
    now (schema 8), and the limit still holds."""
    store = backend.open()
    for i in range(40):
        enqueue(store, f"r{i:02}", now=T0)
    limits = QueueLimits("q", rate=(3, 60.0))
    assert claimed(store, limits, now=T0 + 1, ttl=3_600) == ["r00", "r01", "r02"]
    assert claimed(store, limits, now=T0 + 30, ttl=3_600) == []
    # the window is the last period, its start left out: claims exactly a period ago are
    # out of it (3 a minute: the fourth may go at the minute)
    assert claimed(store, limits, now=T0 + 61, ttl=3_600) == ["r03", "r04", "r05"]
    assert claimed(store, limits, now=T0 + 62, ttl=3_600) == []
    count = "SELECT count(*) FROM runs WHERE queue = 'q' AND claimed_at > 0"  # claims_since
    if backend.name == "sqlite":
        plan = " ".join(str(r) for r in backend.sql("EXPLAIN QUERY PLAN " + count))
    else:
        plan = _pg_plan(backend, count.encode())
    assert "runs_claimed" in plan, plan


def test_a_dedup_key_is_held_by_the_active_run_of_its_queue_and_key(store: Store) -> None:
    assert enqueue(store, "a", dedup_key="k1") == ("a", True)
    assert enqueue(store, "b", dedup_key="k2") == ("b", True)  # another key: a run of its own
    assert enqueue(store, "c", queue="other", dedup_key="k1") == ("c", True)  # another queue
    assert enqueue(store, "d", dedup_key="k1") == ("a", False)  # the holder's id
    assert enqueue(store, "b", dedup_key="k9") == ("b", False)  # the id taken


def test_after_a_concurrent_enqueue_postgres_looks_the_holder_up_again(
    pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL's enqueue is one statement; when a concurrent enqueue of the same id or
    key commits after its snapshot, ON CONFLICT skips the insert and the statement found no
    holder: enqueue looks it up again (find_dedup). That statement's result is forced here;
    the lookup runs on the server."""
    store = pg_backend.open()
    enqueue(store, "a", dedup_key="k1")
    enqueue(store, "b", dedup_key="k2")
    enqueue(store, "c", queue="other", dedup_key="k1")
    monkeypatch.setattr(store, "_enqueue", lambda conn, queue, params: (None, 0, False))
    assert enqueue(store, "d", dedup_key="k1") == ("a", False)
    assert enqueue(store, "b", dedup_key="k9") == ("b", False)
    with pytest.raises(Conflict, match="enqueued concurrently and gone again"):
        enqueue(store, "e", dedup_key="k9")  # no holder any more: nothing to return
