"""Writers: appends posted without waiting, concurrent writers, values that cannot be stored."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tether.errors import Conflict, EncodeError, LeaseLost
from tether.model.events import NewEvent
from tether.store import (
    NewRun,
    Snapshot,
    Transition,
)
from tether.testing.base import T0, StoreTest, ev, new_run, race, seqs, until

DONE = Transition("completed", release=True)
BAD = '{"text": "\ud800"}'  # JSON text holding a lone surrogate, as no codec writes it


class PostedSuite(StoreTest):
    """Appends posted without waiting (``wait=False``: a worker run's final event),
    ``flush`` and ``close``."""

    def test_a_posted_append_returns_its_last_seq_and_flush_commits_it(self) -> None:
        store = self.store
        new_run(store, events=2)
        got = store.append("run-1", [ev(3), ev(4)], expected_seq=2, epoch=1, now=T0, wait=False)
        assert got == 4
        store.flush()
        assert seqs(store) == [1, 2, 3, 4]

    def test_flush_without_waiting_leaves_no_posted_append_behind(self) -> None:
        """What a worker calls before it sleeps: the posted append is committed without any
        later write (soon, not necessarily when the call returns)."""
        store = self.store
        new_run(store, events=2)
        store.append("run-1", [ev(3)], expected_seq=2, epoch=1, now=T0, wait=False)
        store.flush(wait=False)
        until(lambda: seqs(store) == [1, 2, 3])
        assert seqs(store) == [1, 2, 3]

    def test_a_posted_transition_commits_with_its_events(self) -> None:
        store = self.store
        new_run(store, events=2)
        store.append(
            "run-1", [ev(3)], expected_seq=2, epoch=1, now=T0 + 5, transition=DONE, wait=False
        )
        store.flush()
        rec = store.get_run("run-1")
        assert (rec.status, rec.lease_owner, rec.updated_at) == ("completed", None, T0 + 5)
        assert seqs(store) == [1, 2, 3]

    def test_a_posted_append_that_lost_its_lease_is_logged_and_the_others_commit(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        store = self.store
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

    def test_close_commits_what_was_posted(self) -> None:
        store = self.open_store()
        new_run(store, events=2)
        store.append("run-1", [ev(3)], expected_seq=2, epoch=1, now=T0, transition=DONE, wait=False)
        store.close()
        assert seqs(self.open_store()) == [1, 2, 3]


class ConcurrencySuite(StoreTest):
    """Concurrent writers in threads: racing appends, a zombie against a newer claim,
    racing claims, heartbeats during appends."""

    @pytest.mark.parametrize("batch", [1, 3])
    def test_threads_racing_for_one_seq_one_wins_the_rest_conflict(self, batch: int) -> None:
        store = self.store
        new_run(store, events=2)
        head = 2
        for _ in range(5):

            def attempt(i: int, head: int = head) -> int:
                events = [ev(100 * i + k) for k in range(batch)]
                return store.append("run-1", events, expected_seq=head, epoch=1, now=T0)

            results = race(8, attempt)
            wins = [r for r in results if r == head + batch]
            assert len(wins) == 1, results
            assert all(type(r) is Conflict for r in results if r != head + batch), results
            head += batch
        assert seqs(store) == list(range(1, head + 1))

    def test_a_zombie_cannot_append_after_a_newer_claim(self) -> None:
        store = self.store
        for r in range(15):
            run_id = f"z-{r}"
            new_run(store, run_id, owner="zombie", ttl=10)
            zombie: list[Any] = []

            def keep_appending(
                run_id: str = run_id, zombie: list[Any] = zombie, r: int = r
            ) -> None:
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

    def test_racing_claims_of_a_free_run_one_wins(self) -> None:
        store = self.store
        for r in range(5):
            new_run(store, f"c-{r}", owner=None)

            def claim(i: int, r: int = r) -> Any:
                return store.claim(f"c-{r}", owner=f"w{i}", ttl=30, now=T0 + 1)

            results = race(8, claim)
            leases = [x for x in results if not isinstance(x, Exception)]
            assert len(leases) == 1 and leases[0].epoch == 1, results
            assert all(type(x) is Conflict for x in results if isinstance(x, Exception)), results
            rec = store.get_run(f"c-{r}")
            assert (rec.epoch, rec.lease_owner) == (1, leases[0].owner)

    def test_heartbeats_during_appends_with_transitions(self) -> None:
        store = self.store
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


class EncodeSuite(StoreTest):
    """A value that cannot be stored is refused with ``EncodeError``; the store goes on."""

    def test_text_that_is_not_unicode_in_any_write_is_an_encode_error(self) -> None:
        store = self.store
        new_run(store, "run-1", events=1)
        writes: list[Callable[[], Any]] = [
            lambda: store.send_signal("run-1", "go", BAD, sender=None, now=T0),
            lambda: store.record_audit("run-1", "x", BAD, actor=None, now=T0),
            lambda: store.create_run(
                NewRun("r\ud800", "agent", None, "queued"), [ev(1)], lease_owner=None, now=T0, ttl=1
            ),
            lambda: store.enqueue(
                NewRun("q1", "agent", None, "queued", queue="q"),
                [NewEvent("note", BAD, T0)],
                now=T0,
                max_depth=None,
            ),
            lambda: store.save_snapshot(Snapshot("run-1", 1, BAD, T0)),
        ]
        for write in writes:
            with pytest.raises(EncodeError):
                write()
        assert store.append("run-1", [ev(2)], expected_seq=1, epoch=1, now=T0) == 2
        assert [r.id for r in store.list_runs()] == ["run-1"]
        assert store.pending_signal("run-1", "go") is None and store.read_audit("run-1") == []
