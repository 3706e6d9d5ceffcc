"""Runs: create_run, get_run, list_runs."""

from __future__ import annotations

import pytest
from _conformance import T0, ev, new_run, seqs

from tether.errors import Conflict, NotFound
from tether.model.events import NewEvent
from tether.store import Lease, NewRun, Store

pytestmark = pytest.mark.conformance


def test_create_run_numbers_its_events_from_one(store: Store) -> None:
    events = [ev(1), ev(2, actor=None), ev(3, type_="other")]
    assert (
        store.create_run(NewRun("r", "a", None, "queued"), events, lease_owner=None, now=T0, ttl=30)
        is None
    )
    got = store.read_events("r")
    assert [(e.run_id, e.seq) for e in got] == [("r", 1), ("r", 2), ("r", 3)]
    assert [(e.type, e.data, e.at, e.actor) for e in got] == [
        (e.type, e.data, e.at, e.actor) for e in events
    ]


def test_create_run_with_a_lease_holds_epoch_one(store: Store) -> None:
    lease = store.create_run(
        NewRun("r", "a", "v2", "running"), [ev(1)], lease_owner="w1", now=T0, ttl=30
    )
    assert lease == Lease("r", "w1", 1, T0 + 30)
    rec = store.get_run("r")
    assert (rec.epoch, rec.lease_owner, rec.lease_expires) == (1, "w1", T0 + 30)


def test_create_run_without_a_lease_is_free(store: Store) -> None:
    new_run(store, "r", owner=None, status="queued")
    rec = store.get_run("r")
    assert (rec.epoch, rec.lease_owner, rec.lease_expires, rec.status) == (0, None, None, "queued")


def test_every_run_field_round_trips(store: Store) -> None:
    code = {"module": "m", "qualname": "Agent.run", "file": "/tmp/é.py", "nested": {"a": [1, 2]}}
    run = NewRun(
        "r-1",
        "triage",
        "3",
        "queued",
        code=code,
        parent_id="p-0",
        fork_seq=7,
        session_id="s-1",
        owner="tenant-9",
        queue="default",
        priority=5,
        available_at=T0 + 0.125,
    )
    store.create_run(run, [], lease_owner=None, now=T0 + 0.5, ttl=30)
    rec = store.get_run("r-1")
    assert (rec.id, rec.agent, rec.version, rec.status, rec.code) == (
        "r-1",
        "triage",
        "3",
        "queued",
        code,
    )
    assert (rec.created_at, rec.updated_at) == (T0 + 0.5, T0 + 0.5)
    assert (rec.parent_id, rec.fork_seq, rec.session_id, rec.owner, rec.queue) == (
        "p-0",
        7,
        "s-1",
        "tenant-9",
        "default",
    )
    assert (rec.priority, rec.available_at, rec.waiting_for, rec.cancel_requested) == (
        5,
        T0 + 0.125,
        None,
        0,
    )


def test_a_duplicate_run_id_is_a_conflict_and_changes_nothing(store: Store) -> None:
    new_run(store, "r", events=2)
    with pytest.raises(Conflict, match="'r' already exists"):
        store.create_run(
            NewRun("r", "other", None, "queued"), [ev(9)], lease_owner="w2", now=T0 + 1, ttl=30
        )
    rec = store.get_run("r")
    assert (rec.agent, rec.lease_owner, rec.created_at) == ("agent", "w1", T0)
    assert [e.data for e in store.read_events("r")] == ['{"n": 1}', '{"n": 2}']


def test_get_run_of_an_unknown_id_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound, match="nope"):
        store.get_run("nope")


def test_list_runs_newest_first_with_filters_and_limit(store: Store) -> None:
    new_run(store, "a", now=T0 + 1, agent="x", status="completed")
    new_run(store, "b", now=T0 + 3, agent="y", status="running")
    new_run(store, "c", now=T0 + 2, agent="x", status="running")
    assert [r.id for r in store.list_runs()] == ["b", "c", "a"]
    assert [r.id for r in store.list_runs(status="running")] == ["b", "c"]
    assert [r.id for r in store.list_runs(agent="x")] == ["c", "a"]
    assert [r.id for r in store.list_runs(agent="x", status="running")] == ["c"]
    assert [r.id for r in store.list_runs(limit=2)] == ["b", "c"]
    assert store.list_runs(limit=0) == []
    assert store.list_runs(status="waiting") == []


def test_list_runs_breaks_ties_by_id_in_byte_order(store: Store) -> None:
    # the same created_at: ordered by id descending, compared as bytes (not a locale)
    ids = ["a-1", "B-2", "a_1", "b", "Z", "é", "a", "A"]
    for run_id in ids:
        new_run(store, run_id, now=T0, events=0)
    assert [r.id for r in store.list_runs()] == sorted(ids, reverse=True)


def test_create_run_stores_text_byte_exact(store: Store) -> None:
    data = '{"s": "é ü 漢字 🙂 \\u0000 \\n \\"q\\"", "big": "' + "x" * 100_000 + '"}'
    at = 1_700_000_000.123456789
    store.create_run(
        NewRun("r", "a", None, "queued"),
        [NewEvent("t", data, at, "ü")],
        lease_owner=None,
        now=at,
        ttl=30,
    )
    [got] = store.read_events("r")
    assert (got.data, got.at, got.actor) == (data, at, "ü")
    assert seqs(store, "r") == [1]
