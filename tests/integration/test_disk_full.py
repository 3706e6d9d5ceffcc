"""A full disk under SQLite: every write says so (tether.StoreFull), nothing is half
written, nothing waits forever, and the store goes on once there is room again.

On main, SQLite rolled the transaction back itself and the store's own ROLLBACK then
failed with "cannot rollback - no transaction is active", which is all a user saw
(raised raw from the writer, after which the process's writes failed). The disk is a
real tmpfs when the tests may mount one; ``_disk`` says how it falls back otherwise.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from _disk import small_disk

from tether.errors import StoreFull, StoreUnavailable
from tether.model.events import NewEvent
from tether.store import NewRun
from tether.store.sqlite import SQLiteStore

pytestmark = pytest.mark.integration
T0 = 1_700_000_000.0


def _event(n: int, size: int = 0) -> NewEvent:
    return NewEvent("note", json.dumps({"n": n, "blob": "x" * size}), T0 + n, "tester")


def _run(store: SQLiteStore, run_id: str) -> None:
    run = NewRun(run_id, "agent", None, "running")
    store.create_run(run, [_event(1)], lease_owner="w1", now=T0, ttl=60)


def _seqs(store: SQLiteStore, run_id: str) -> list[int]:
    return [e.seq for e in store.read_events(run_id)]


def test_a_full_disk_is_store_full_and_the_store_goes_on_once_there_is_room(
    tmp_path: Path,
) -> None:
    # 16 MB: filled whole, then freed, it must hold two 1 MB events twice over (the WAL
    # before its checkpoint, then the database): on 4 MB a late checkpoint left no room
    with small_disk(tmp_path / "disk", size="16m") as disk:
        store = SQLiteStore(str(disk.path / "agent.db"))
        try:
            for name in ("main", "r0", "r1", "r2", "r3"):
                _run(store, name)
            disk.fill(store)
            big = [_event(2, 1_000_000)]  # more than any room a WAL or a free page holds
            errors: list[Any] = [None] * 4

            def append(i: int) -> None:
                try:
                    store.append(f"r{i}", big, expected_seq=1, epoch=1, now=T0)
                except Exception as e:  # looked at below
                    errors[i] = e

            threads = [threading.Thread(target=append, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            with pytest.raises(StoreFull) as full:
                store.append("main", big, expected_seq=1, epoch=1, now=T0)
            for t in threads:
                t.join(30)
            assert not any(t.is_alive() for t in threads)  # nobody waits forever
            assert all(isinstance(e, StoreFull) for e in errors), errors
            message = str(full.value)
            assert "disk is full" in message and str(disk.path) in message
            assert "cannot rollback" not in message
            assert isinstance(full.value, StoreUnavailable)  # a pause: workers retry

            # a posted append (a run's final event) waits for room, it is not lost
            store.append("r0", big, expected_seq=1, epoch=1, now=T0, wait=False)
            with pytest.raises(StoreFull):
                store.flush()
            assert [_seqs(store, n) for n in ("main", "r0", "r1")] == [[1], [1], [1]]

            disk.free(store)
            store.flush()
            assert _seqs(store, "r0") == [1, 2]
            assert store.append("main", big, expected_seq=1, epoch=1, now=T0) == 2
            for i in (1, 2, 3):
                assert store.append(f"r{i}", [_event(2)], expected_seq=1, epoch=1, now=T0) == 2
            assert [_seqs(store, n) for n in ("main", "r1", "r3")] == [[1, 2]] * 3
        finally:
            store.close()
