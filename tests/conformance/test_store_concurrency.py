"""Concurrent writers: racing appends (threads and processes), zombies against a new claim,
racing claims, heartbeats during appends."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from _conformance import T0, Backend, ev, new_run, seqs

from tether.errors import Conflict, LeaseLost
from tether.store import Store, Transition

pytestmark = pytest.mark.conformance


def _race(n: int, attempt: Callable[[int], Any]) -> list[Any]:
    """Run ``attempt(i)`` in ``n`` threads released together; their results or errors."""
    start = threading.Barrier(n)
    out: list[Any] = [None] * n

    def one(i: int) -> None:
        start.wait()
        try:
            out[i] = attempt(i)
        except Exception as e:  # the caller inspects it
            out[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.parametrize("batch", [1, 3])
def test_threads_racing_for_one_seq_one_wins_the_rest_conflict(store: Store, batch: int) -> None:
    new_run(store, events=2)
    head = 2
    for _ in range(5):

        def attempt(i: int, head: int = head) -> int:
            events = [ev(100 * i + k) for k in range(batch)]
            return store.append("run-1", events, expected_seq=head, epoch=1, now=T0)

        results = _race(8, attempt)
        wins = [r for r in results if r == head + batch]
        assert len(wins) == 1, results
        assert all(type(r) is Conflict for r in results if r != head + batch), results
        head += batch
    assert seqs(store) == list(range(1, head + 1))


def _append_in_process(url: str, backend: str, start: Any, rounds: int, out: Any) -> None:
    """A separate process: at each round, race the others for the next seq."""
    if backend == "sqlite":
        from tether.store.sqlite import SQLiteStore

        store: Any = SQLiteStore(url)
    else:
        from tether.store.postgres import PostgresStore

        store = PostgresStore(url)
    outcomes = []
    for r in range(rounds):
        start.wait(timeout=60)
        try:
            store.append("run-1", [ev(r)], expected_seq=2 + r, epoch=1, now=T0)
            outcomes.append("won")
        except LeaseLost:
            outcomes.append("lease lost")
        except Conflict:
            outcomes.append("conflict")
    store.close()
    out.put(outcomes)


def test_processes_racing_for_one_seq_one_wins_the_rest_conflict(backend: Backend) -> None:
    new_run(backend.open(), events=2)
    ctx = multiprocessing.get_context("spawn")
    n, rounds = 3, 10
    start, out = ctx.Barrier(n), ctx.Queue()
    procs = [
        ctx.Process(target=_append_in_process, args=(backend.url, backend.name, start, rounds, out))
        for _ in range(n)
    ]
    for p in procs:
        p.start()
    outcomes = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    for r in range(rounds):
        assert sorted(o[r] for o in outcomes) == ["conflict"] * (n - 1) + ["won"], (r, outcomes)
    assert seqs(backend.open()) == list(range(1, 3 + rounds))


def test_a_zombie_cannot_append_after_a_newer_claim(store: Store) -> None:
    # The old holder keeps appending (with a transition every other round) while a new
    # worker claims the run. Once the claim returned, the new holder reads the head and
    # appends right after it: no write of the zombie may land in between, and the zombie
    # learns it lost the lease.
    for r in range(15):
        run_id = f"z-{r}"
        new_run(store, run_id, owner="zombie", ttl=10)
        zombie: list[Any] = []

        def keep_appending(run_id: str = run_id, zombie: list[Any] = zombie, r: int = r) -> None:
            seq = 2
            try:
                while True:
                    seq = store.append(
                        run_id,
                        [ev(seq + 1)],
                        expected_seq=seq,
                        epoch=1,
                        now=T0,
                        transition=Transition("running") if r % 2 else None,
                    )
            except Exception as err:  # the assertion below says which
                zombie.append(err)

        thread = threading.Thread(target=keep_appending)
        thread.start()
        time.sleep(0.002 * (r % 5))
        lease = store.claim(run_id, owner="new", ttl=10, now=T0 + 11)
        head = store.read_events(run_id)[-1].seq
        store.append(run_id, [ev(0)], expected_seq=head, epoch=lease.epoch, now=T0 + 11)
        thread.join()
        assert [type(x) for x in zombie] == [LeaseLost], zombie
        assert seqs(store, run_id) == list(range(1, head + 2))


def test_racing_claims_of_a_free_run_one_wins(store: Store) -> None:
    for r in range(5):
        new_run(store, f"c-{r}", owner=None)

        def claim(i: int, r: int = r) -> Any:
            return store.claim(f"c-{r}", owner=f"w{i}", ttl=30, now=T0 + 1)

        results = _race(8, claim)
        leases = [x for x in results if not isinstance(x, Exception)]
        assert len(leases) == 1 and leases[0].epoch == 1, results
        assert all(type(x) is Conflict for x in results if isinstance(x, Exception)), results
        rec = store.get_run(f"c-{r}")
        assert (rec.epoch, rec.lease_owner) == (1, leases[0].owner)


def test_heartbeats_during_appends_with_transitions(store: Store) -> None:
    new_run(store, events=2, owner="w1")
    stop = threading.Event()
    errors: list[BaseException] = []

    def heartbeat() -> None:
        while not stop.is_set():
            try:
                store.renew("w1", ttl=30, now=T0 + 1)
            except BaseException as e:  # reported below
                errors.append(e)
                return

    thread = threading.Thread(target=heartbeat)
    thread.start()
    try:
        seq = 2
        for i in range(150):
            status = "running" if i % 2 else "waiting"
            seq = store.append(
                "run-1",
                [ev(seq + 1), ev(seq + 2)],
                expected_seq=seq,
                epoch=1,
                now=T0 + 1,
                transition=Transition(status),
            )
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert seqs(store) == list(range(1, 303)) and store.get_run("run-1").status == "running"
