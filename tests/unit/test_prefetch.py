"""Prefetched: a claimed run's log serves one load, only while fresh."""

from __future__ import annotations

import pytest

from tether.store import Lease, Loaded, RunRecord, prefetch
from tether.store.prefetch import Prefetched


def _loaded(run_id: str = "a") -> Loaded:
    return Loaded(RunRecord(run_id, "agent", None, "queued", {}, 1.0, 1.0), None, [])


def test_a_fresh_entry_is_taken_once_as_the_claim_left_the_run() -> None:
    p = Prefetched()
    p.put(_loaded(), Lease("a", "w1", 3, 50.0), now=20.0)
    got = p.take("a")
    assert got is not None
    assert (got.run.status, got.run.epoch, got.run.lease_owner, got.run.claimed_at) == (
        "running",
        3,
        "w1",
        20.0,
    )
    assert p.take("a") is None


def test_a_stale_entry_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    p = Prefetched()
    p.put(_loaded(), Lease("a", "w1", 1, 50.0), now=20.0)
    real = prefetch.time.monotonic
    monkeypatch.setattr(prefetch.time, "monotonic", lambda: real() + prefetch.FRESH + 1)
    assert p.take("a") is None


def test_entries_no_load_took_do_not_pile_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefetch, "LIMIT", 3)
    p = Prefetched()
    for i in range(10):
        p.put(_loaded(f"r{i}"), Lease(f"r{i}", "w", 1, 9.0), now=1.0)
    assert len(p._entries) <= 3
    assert p.take("r9") is not None
