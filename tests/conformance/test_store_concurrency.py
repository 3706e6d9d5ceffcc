"""Concurrent writers in separate processes: racing appends. (Threads racing, zombies
against a new claim, racing claims and heartbeats during appends are in the shipped suite,
tether.testing.writers.ConcurrencySuite, run by test_store_suite.py.)"""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
from _conformance import T0, Backend, ev, new_run, seqs

from tether.errors import Conflict, LeaseLost

pytestmark = pytest.mark.conformance


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
