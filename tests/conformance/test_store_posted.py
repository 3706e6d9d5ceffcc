"""How SQLite carries appends posted without waiting (``wait=False``: a worker run's final
event) in its next write transaction. What every backend does with them is in the shipped
suite, tether.testing.writers.PostedSuite, run by test_store_suite.py."""

from __future__ import annotations

import pytest
from _conformance import T0, Backend, ev, new_run, seqs

from tether.errors import QueueFull
from tether.store import NewRun, QueueLimits, Transition

pytestmark = pytest.mark.conformance

DONE = Transition("completed", release=True)


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
