"""Giving a lease back when the database refuses, on both stores: a lost connection is
tried once more at once; a database that stays down leaves the lease to the heartbeat
thread's retries (said once in the log, then quietly); a run another process holds now
counts as given back. The store is real; only its first answers are made to fail."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from _conformance import T0, new_run

from tether.engine.deps import Deps
from tether.engine.leases import Active, Leases
from tether.errors import StoreUnavailable
from tether.model.clock import FakeClock
from tether.model.status import RunStatus
from tether.store import Store, Transition

pytestmark = pytest.mark.conformance


class Refusing:
    """``store``, whose next ``failures`` releases and appends raise StoreUnavailable."""

    def __init__(self, store: Store, failures: int) -> None:
        self._store = store
        self.failures = failures
        self.tries = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _refuse(self) -> None:
        self.tries += 1
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("connection to the database lost (test)")

    def release(self, run_id: str, *, epoch: int) -> None:
        self._refuse()
        self._store.release(run_id, epoch=epoch)

    def append(self, run_id: str, events: Any, **kw: Any) -> int:
        self._refuse()
        return int(self._store.append(run_id, events, **kw))


def _leases(store: Any) -> Leases:
    return Leases(Deps(store, FakeClock(T0 + 1), "w1", 30.0), Active())


def _pending(leases: Leases) -> dict[str, Any]:
    return dict(leases._letting_go)


def test_a_connection_lost_once_is_tried_again_at_once(store: Store) -> None:
    new_run(store, "run-1", owner="w1")
    refusing = Refusing(store, failures=1)
    leases = _leases(refusing)
    assert leases.let_go("run-1", 1) is True
    assert refusing.tries == 2 and _pending(leases) == {}
    assert store.get_run("run-1").lease_owner is None


def test_a_database_that_stays_down_leaves_the_lease_to_the_retries(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    new_run(store, "run-1", owner="w1")
    refusing = Refusing(store, failures=4)
    leases = _leases(refusing)
    with caplog.at_level(logging.WARNING, logger="tether"):
        assert leases.let_go("run-1", 1) is False
    assert refusing.tries == 2 and _pending(leases) == {"run-1": (1, None)}
    (said,) = [r.getMessage() for r in caplog.records if "give run" in r.getMessage()]
    assert said == (
        "could not give run run-1 back yet (retried every second): "
        "connection to the database lost (test)"
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tether"):
        assert leases.let_go("run-1", 1, again=True) is False  # the thread's retry: quiet
    assert not [r for r in caplog.records if "give run" in r.getMessage()]
    assert leases.let_go("run-1", 1, again=True) is True  # the database is back
    assert _pending(leases) == {} and store.get_run("run-1").lease_owner is None


def test_a_transition_is_made_with_the_lease_given_back(store: Store) -> None:
    new_run(store, "run-1", owner="w1")  # two events: the transition appends none
    leases = _leases(Refusing(store, failures=1))
    later = Transition(RunStatus.QUEUED, release=True, available_at=T0 + 60)
    assert leases.let_go("run-1", 1, later) is True
    record = store.get_run("run-1")
    assert (record.status, record.lease_owner, record.available_at) == ("queued", None, T0 + 60)
    assert [e.seq for e in store.read_events("run-1")] == [1, 2]


def test_a_run_another_process_holds_now_counts_as_given_back(store: Store) -> None:
    new_run(store, "run-1", owner="w1")
    store.claim("run-1", owner="w2", ttl=30, now=T0 + 100)  # w1's lease expired: w2 took it
    leases = _leases(store)
    back = Transition(RunStatus.QUEUED, release=True)
    assert leases.let_go("run-1", 1, back) is True  # epoch 1 is fenced out
    assert _pending(leases) == {}
    record = store.get_run("run-1")
    assert (record.lease_owner, record.epoch, record.status) == ("w2", 2, "running")
