"""Prefetched: a claimed run's log serves one load, only while fresh."""

from __future__ import annotations

import pytest

from tether.store import Lease, Loaded, RunRecord, prefetch
from tether.store.prefetch import Prefetched, as_claimed


def _loaded(run_id: str = "a") -> Loaded:
    return Loaded(RunRecord(run_id, "agent", None, "queued", {}, 1.0, 1.0), None, [])


def test_a_fresh_entry_is_taken_once() -> None:
    p = Prefetched()
    loaded = _loaded()
    p.put(loaded)
    assert p.take("a") is loaded
    assert p.take("a") is None


def test_as_claimed_is_the_row_as_the_claim_left_it() -> None:
    got = as_claimed(_loaded().run, Lease("a", "w1", 3, 50.0), now=20.0)
    assert (got.status, got.epoch, got.lease_owner, got.lease_expires, got.claimed_at) == (
        "running",
        3,
        "w1",
        50.0,
        20.0,
    )


def test_a_stale_entry_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    p = Prefetched()
    p.put(_loaded())
    real = prefetch.time.monotonic
    monkeypatch.setattr(prefetch.time, "monotonic", lambda: real() + prefetch.FRESH + 1)
    assert p.take("a") is None


def test_entries_no_load_took_do_not_pile_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefetch, "LIMIT", 3)
    p = Prefetched()
    for i in range(10):
        p.put(_loaded(f"r{i}"))
    assert len(p._entries) <= 3
    assert p.take("r9") is not None
