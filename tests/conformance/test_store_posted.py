"""Appends posted without waiting (``wait=False``: a worker run's final event), on every
backend; and how SQLite carries them in its next write transaction."""

from __future__ import annotations

import pytest
from _conformance import T0, Backend, ev, new_run, seqs, until

from tether.errors import QueueFull
from tether.store import NewRun, QueueLimits, Store, Transition

pytestmark = pytest.mark.conformance

DONE = Transition("completed", release=True)


def test_a_posted_append_returns_its_last_seq_and_flush_commits_it(store: Store) -> None:
    new_run(store, events=2)
    got = store.append("run-1", [ev(3), ev(4)], expected_seq=2, epoch=1, now=T0, wait=False)
    assert got == 4
    store.flush()
    assert seqs(store) == [1, 2, 3, 4]


def test_flush_without_waiting_leaves_no_posted_append_behind(store: Store) -> None:
    """What a worker calls before it sleeps: the posted append is committed without any
    later write (soon, not necessarily when the call returns)."""
    new_run(store, events=2)
    store.append("run-1", [ev(3)], expected_seq=2, epoch=1, now=T0, wait=False)
    store.flush(wait=False)
    until(lambda: seqs(store) == [1, 2, 3])
    assert seqs(store) == [1, 2, 3]


def test_a_posted_transition_commits_with_its_events(store: Store) -> None:
    new_run(store, events=2)
    store.append("run-1", [ev(3)], expected_seq=2, epoch=1, now=T0 + 5, transition=DONE, wait=False)
    store.flush()
    rec = store.get_run("run-1")
    assert (rec.status, rec.lease_owner, rec.updated_at) == ("completed", None, T0 + 5)
    assert seqs(store) == [1, 2, 3]


def test_a_posted_append_that_lost_its_lease_is_logged_and_the_others_commit(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    new_run(store, "lost", events=2, ttl=10)
    new_run(store, "kept", events=2)
    store.claim("lost", owner="w2", ttl=10, now=T0 + 11)  # w1's lease expired: epoch 2
    store.append("lost", [ev(3)], expected_seq=2, epoch=1, now=T0, transition=DONE, wait=False)
    store.append("kept", [ev(3)], expected_seq=2, epoch=1, now=T0, transition=DONE, wait=False)
    store.flush()
    assert seqs(store, "lost") == [1, 2]
    lost = store.get_run("lost")
    assert (lost.status, lost.lease_owner, lost.epoch) == ("running", "w2", 2)
    assert "run lost" in caplog.text
    assert seqs(store, "kept") == [1, 2, 3]
    assert store.get_run("kept").status == "completed"


def test_close_commits_what_was_posted(backend: Backend) -> None:
    store = backend.open()
    new_run(store, events=2)
    store.append("run-1", [ev(3)], expected_seq=2, epoch=1, now=T0, transition=DONE, wait=False)
    store.close()
    assert seqs(backend.open()) == [1, 2, 3]


# -- SQLite: the next write transaction of the process carries them --------------


def test_sqlite_a_claim_commits_the_posted_appends_in_its_transaction(
    sqlite_backend: Backend,
) -> None:
    store = sqlite_backend.open()
    new_run(store, "done", events=2)
    store.enqueue(
        NewRun("next", "agent", None, "queued", queue="q"), [ev(1)], now=T0, max_depth=None
    )
    store.append("done", [ev(3)], expected_seq=2, epoch=1, now=T0, transition=DONE, wait=False)
    assert seqs(store, "done") == [1, 2]  # posted, not written yet
    [(record, _)] = store.claim_next([QueueLimits("q")], owner="w1", ttl=30, now=T0, capacity=1)
    assert record.id == "next"
    assert seqs(sqlite_backend.open(), "done") == [1, 2, 3]  # another connection sees it
    assert store.get_run("done").status == "completed"


def test_sqlite_a_step_append_does_not_wait_for_the_posted_ones(sqlite_backend: Backend) -> None:
    store = sqlite_backend.open()
    new_run(store, "done", events=2)
    new_run(store, "busy", events=2)
    store.append("done", [ev(3)], expected_seq=2, epoch=1, now=T0, transition=DONE, wait=False)
    assert store.append("busy", [ev(3)], expected_seq=2, epoch=1, now=T0) == 3
    assert seqs(store, "done") == [1, 2]  # left to the next transaction
    store.flush()
    assert seqs(store, "done") == [1, 2, 3]


def test_sqlite_a_transaction_that_rolls_back_posts_them_again(sqlite_backend: Backend) -> None:
    store = sqlite_backend.open()
    new_run(store, "done", events=2)
    store.enqueue(NewRun("q1", "agent", None, "queued", queue="q"), [ev(1)], now=T0, max_depth=None)
    store.append("done", [ev(3)], expected_seq=2, epoch=1, now=T0, transition=DONE, wait=False)
    with pytest.raises(QueueFull):  # its transaction wrote the posted append, then rolled back
        store.enqueue(
            NewRun("q2", "agent", None, "queued", queue="q"), [ev(1)], now=T0, max_depth=1
        )
    assert seqs(store, "done") == [1, 2]
    store.flush()
    assert seqs(store, "done") == [1, 2, 3]
    assert store.get_run("done").status == "completed"
