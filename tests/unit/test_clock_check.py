"""Leases.check_clock's judgement of a measured offset, on every side of its bounds.

The measure itself (the database's clock against this process's) is the store's, tested
against a real PostgreSQL server in tests/conformance/test_clock_skew.py; SQLite shares
the machine's clock and always measures 0. Here the store reports a given offset, so the
bounds (a third of the lease refused, more than a second logged), the wording of both and
the measure being taken once are checked on any backend.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, cast

import pytest

import tether
from tether.engine.deps import Deps
from tether.engine.leases import Active, Leases


class Measured:
    """A store that measures ``offset`` (seconds the database is ahead), counting reads."""

    def __init__(self, offset: float, where: str | None = "db.example:5432/app") -> None:
        self.offset, self.reads = offset, 0
        if where is not None:
            self.where = where

    def clock_offset(self, now: Any) -> float:
        assert callable(now)  # the clock's reading function, not a reading
        self.reads += 1
        return self.offset


def _leases(store: Any, clock: tether.Clock | None = None, ttl: float = 30.0) -> Leases:
    deps = Deps(cast(Any, store), clock or tether.SystemClock(), "me", lease_ttl=ttl)
    return Leases(deps, Active())


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_an_injected_clock_is_not_measured() -> None:
    store = Measured(3600.0)
    assert _leases(store, tether.FakeClock()).check_clock() == 0.0
    assert store.reads == 0


def test_a_small_offset_is_returned_silently_and_measured_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = Measured(0.5)
    leases = _leases(store)
    with caplog.at_level(logging.WARNING, logger="tether"):
        assert leases.check_clock() == 0.5
        assert leases.check_clock() == 0.5
    assert store.reads == 1  # the second call returns the first measure
    assert _warnings(caplog) == []


@pytest.mark.parametrize("offset", [1.0, -1.0])
def test_a_second_off_is_not_logged(offset: float, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tether"):
        assert _leases(Measured(offset)).check_clock() == offset
    assert _warnings(caplog) == []


@pytest.mark.parametrize(
    ("offset", "side"), [(1.5, "behind"), (-1.5, "ahead of"), (10.0, "behind"), (-9.0, "ahead of")]
)
def test_more_than_a_second_off_is_logged_once_and_tolerated_up_to_a_third_of_a_lease(
    offset: float, side: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = Measured(offset)
    leases = _leases(store)
    with caplog.at_level(logging.WARNING, logger="tether"):
        assert leases.check_clock() == offset
        assert leases.check_clock() == offset
    assert _warnings(caplog) == [
        f"this machine's clock is {abs(offset):.1f} s {side} the database's; leases of 30 s "
        "tolerate up to 10.0 s: synchronise it (NTP, chrony)"
    ]
    assert store.reads == 1


@pytest.mark.parametrize(("offset", "side"), [(10.5, "behind"), (-10.5, "ahead of")])
def test_more_than_a_third_of_a_lease_off_is_refused_and_measured_again_next_time(
    offset: float, side: str
) -> None:
    store = Measured(offset)
    leases = _leases(store)
    for reads in (1, 2):  # a refused measure is not kept: the next lease measures again
        with pytest.raises(tether.ClockSkew) as e:
            leases.check_clock()
        assert str(e.value) == (
            f"this machine's clock is 10.5 s {side} the database's at db.example:5432/app: "
            "leases last 30 s and are checked against other machines' clocks, so with more "
            "than a third of that (10.0 s) off a live run could be taken by a second process. "
            "Synchronise this machine's clock (NTP, chrony), or raise lease_ttl in "
            "tether.open(...)."
        )
        assert store.reads == reads


def test_the_bound_follows_the_lease_and_a_store_without_a_place_is_the_store() -> None:
    assert _leases(Measured(10.5), ttl=33.0).check_clock() == 10.5  # within 11 s
    with pytest.raises(tether.ClockSkew) as e:
        _leases(Measured(-2.5, where=None), ttl=6.0).check_clock()
    assert "clock is 2.5 s ahead of the database's at the store: leases last 6 s" in str(e.value)
    assert "a third of that (2.0 s) off" in str(e.value)
    with pytest.raises(tether.ClockSkew, match=r"clock is 0\.9 s behind the database's"):
        _leases(Measured(0.9), ttl=1.5).check_clock()  # short leases: under a second is too much


def test_a_claim_measures_before_it_leases() -> None:
    store = Measured(-60.0)
    store_claims: list[str] = []
    cast(Any, store).claim = lambda run_id, **kw: store_claims.append(run_id)
    record = SimpleNamespace(id="r1", lease_owner=None)
    with pytest.raises(tether.ClockSkew):
        _leases(store).claim(cast(Any, record))
    assert store_claims == [] and store.reads == 1
