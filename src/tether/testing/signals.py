"""Effects lookups, signals and wake-ups, the audit log, cancel requests, retention."""

from __future__ import annotations

import pytest

from tether.errors import NotFound
from tether.store import (
    EffectWrite,
    Signal,
    Snapshot,
    Store,
    Transition,
)
from tether.testing.base import T0, StoreTest, ev, new_run, seqs


def _wait_for(store: Store, what: str, run_id: str = "run-1") -> None:
    store.append(
        run_id,
        [ev(3)],
        expected_seq=2,
        epoch=1,
        now=T0,
        transition=Transition("waiting", release=True, waiting_for=what),
    )


class SignalsAuditSuite(StoreTest):
    """``get_effect``, ``send_signal``/``pending_signal``/``wake``, ``record_audit``/
    ``read_audit``, ``request_cancel``/``cancel_requests``, ``delete_runs`` and ``vacuum``."""

    def test_an_unknown_effect_is_none(self) -> None:
        store = self.store
        assert store.get_effect("nope") is None

    def test_a_signal_is_kept_for_a_run_that_does_not_wait_for_it(self) -> None:
        store = self.store
        new_run(store)
        assert store.send_signal("run-1", "go", '{"a": 1}', sender="ops", now=T0 + 1) is False
        assert store.send_signal("run-1", "go", '{"a": 2}', sender=None, now=T0 + 2) is False
        first = store.pending_signal("run-1", "go")
        assert first is not None and first.id > 0
        assert first == Signal(first.id, "run-1", "go", '{"a": 1}', T0 + 1, "ops")
        assert store.pending_signal("run-1", "other") is None
        assert store.pending_signal("nobody", "go") is None
        assert store.get_run("run-1").status == "running"

    def test_a_signal_wakes_a_run_waiting_for_it(self) -> None:
        store = self.store
        new_run(store)
        _wait_for(store, "signal:go")
        assert store.send_signal("run-1", "other", "{}", sender=None, now=T0 + 1) is False
        assert store.get_run("run-1").status == "waiting"
        assert store.send_signal("run-1", "go", "{}", sender=None, now=T0 + 2) is True
        rec = store.get_run("run-1")
        assert (rec.status, rec.waiting_for, rec.available_at, rec.updated_at) == (
            "queued",
            None,
            T0 + 2,
            T0 + 2,
        )

    def test_a_signal_to_an_unknown_run_is_not_found_and_not_kept(self) -> None:
        store = self.store
        with pytest.raises(NotFound, match="ghost"):
            store.send_signal("ghost", "go", "{}", sender=None, now=T0)
        assert store.pending_signal("ghost", "go") is None

    def test_wake_only_what_the_run_waits_for(self) -> None:
        store = self.store
        new_run(store)
        assert store.wake("run-1", "timer", now=T0) is False  # not waiting at all
        _wait_for(store, "approval:send")
        assert store.wake("run-1", "approval:other", now=T0 + 1) is False
        assert store.wake("ghost", "approval:send", now=T0 + 1) is False
        assert store.wake("run-1", "approval:send", now=T0 + 2) is True
        rec = store.get_run("run-1")
        assert (rec.status, rec.waiting_for, rec.available_at) == ("queued", None, T0 + 2)
        assert store.wake("run-1", "approval:send", now=T0 + 3) is False

    def test_the_audit_log_keeps_records_in_order(self) -> None:
        store = self.store
        new_run(store)
        store.record_audit("run-1", "approval.refused", '{"by": "eve"}', actor="eve", now=T0 + 2)
        store.record_audit(None, "gc", "{}", actor=None, now=T0 + 3)
        store.record_audit("run-1", "doubt.refused", "{}", actor="bob", now=T0 + 1)
        store.record_audit("ghost", "x", "{}", actor=None, now=T0)  # no run needed
        got = store.read_audit("run-1")
        assert [(a.action, a.actor, a.at, a.detail) for a in got] == [
            ("approval.refused", "eve", T0 + 2, '{"by": "eve"}'),
            ("doubt.refused", "bob", T0 + 1, "{}"),
        ]
        assert got[0].id < got[1].id and all(a.run_id == "run-1" for a in got)
        assert store.read_audit("nobody") == []

    def test_request_cancel_flags_the_run(self) -> None:
        store = self.store
        new_run(store)
        store.request_cancel("run-1", compensate=False, now=T0 + 4)
        rec = store.get_run("run-1")
        assert (rec.cancel_requested, rec.updated_at) == (1, T0 + 4)
        store.request_cancel("run-1", compensate=True, now=T0 + 5)
        assert store.get_run("run-1").cancel_requested == 2
        with pytest.raises(NotFound):
            store.request_cancel("ghost", compensate=False, now=T0)

    def test_cancel_requests_are_the_owners_leased_runs_asked_to_cancel(self) -> None:
        store = self.store
        for run_id, owner in (("a", "w1"), ("b", "w1"), ("c", "w2"), ("d", "w1")):
            new_run(store, run_id, owner=owner)
        assert store.cancel_requests("w1") == {}
        store.request_cancel("a", compensate=False, now=T0 + 1)
        store.request_cancel("b", compensate=True, now=T0 + 1)
        store.request_cancel("c", compensate=False, now=T0 + 1)
        assert store.cancel_requests("w1") == {"a": 1, "b": 2}
        assert store.cancel_requests("w2") == {"c": 1}
        assert store.cancel_requests("nobody") == {}

    def test_delete_runs_takes_everything_of_the_runs_but_the_audit(self) -> None:
        store = self.store
        for run_id in ("a", "b"):
            new_run(store, run_id)
            store.append(
                run_id,
                [ev(3)],
                expected_seq=2,
                epoch=1,
                now=T0,
                snapshot=Snapshot(run_id, 3, "{}", T0),
                writes=[EffectWrite(f"{run_id}:k", run_id, 3, "t", "intent")],
            )
            store.send_signal(run_id, "go", "{}", sender=None, now=T0)
            store.record_audit(run_id, "note", "{}", actor=None, now=T0)
        assert store.delete_runs(["a", "ghost"]) == 1
        with pytest.raises(NotFound):
            store.get_run("a")
        assert store.read_events("a") == [] and store.get_effect("a:k") is None
        assert store.pending_signal("a", "go") is None
        assert len(store.read_audit("a")) == 1
        assert store.delete_runs(["a"]) == 0 and store.delete_runs([]) == 0
        assert seqs(store, "b") == [1, 2, 3] and store.get_effect("b:k") is not None
        assert store.load("b").snapshot is not None and store.pending_signal("b", "go") is not None

    def test_vacuum_keeps_the_data(self) -> None:
        store = self.store
        new_run(store, "a", events=50)
        new_run(store, "b", events=3)
        store.delete_runs(["a"])
        store.vacuum()
        assert seqs(store, "b") == [1, 2, 3]
        assert store.list_runs()[0].id == "b"
