"""A thread of the SQLite store copies the WAL into the database file (PASSIVE
checkpoints) while the process writes, so no commit does it while it holds the writer
lock; the commits' own checkpoint stays as the bound on the WAL."""

from __future__ import annotations

import gc
import multiprocessing
import os
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from _wait import until

from tether.model.events import NewEvent
from tether.store import NewRun
from tether.store.sqlite import WAL_AUTOCHECKPOINT, SQLiteStore

T0 = 1_700_000_000.0


def _new_run(store: SQLiteStore, run_id: str) -> None:
    run = NewRun(run_id, "agent", None, "running")
    events = [NewEvent("run.started", "{}", T0, "test")]
    store.create_run(run, events, lease_owner="w1", now=T0, ttl=3600.0)


def _append(store: SQLiteStore, run_id: str, seq: int, n: int = 1, size: int = 10) -> None:
    body = '{"x":"' + "a" * size + '"}'
    events = [NewEvent("note", body, T0, "test") for _ in range(n)]
    store.append(run_id, events, expected_seq=seq - 1, epoch=1, now=T0)


def _in_database_file(db: str, tmp: Path, run_id: str) -> bool:
    """Whether the database file alone (not its WAL) holds ``run_id``: a copy of the
    file without the -wal beside it shows only what a checkpoint copied."""
    copy = tmp / f"copy-{time.monotonic_ns()}.db"
    shutil.copyfile(db, copy)
    try:
        with sqlite3.connect(copy) as conn:
            return conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None
    except sqlite3.DatabaseError:  # copied while a checkpoint wrote it: not yet
        return False
    finally:
        for suffix in ("", "-wal", "-shm"):
            copy.with_name(copy.name + suffix).unlink(missing_ok=True)


def _with_run(tmp_path: Path, **options: Any) -> tuple[str, SQLiteStore]:
    """A store on a new file of ``tmp_path`` (``options``: SQLiteStore's) holding run-1."""
    db = str(tmp_path / "t.db")
    store = SQLiteStore(db, **options)
    _new_run(store, "run-1")
    return db, store


def test_a_few_writes_reach_the_database_file_without_a_commit_checkpointing(
    tmp_path: Path,
) -> None:
    # a run and 20 events are a few dozen WAL frames, far below the commits' own
    # checkpoint (WAL_AUTOCHECKPOINT frames): only the thread copies them
    db, store = _with_run(tmp_path)
    for seq in range(2, 22):
        _append(store, "run-1", seq)
    assert until(lambda: _in_database_file(db, tmp_path, "run-1"))
    # the thread counts its pass after the copy that the file shows: wait for the count too
    assert until(lambda: store._checkpointer.checkpoints >= 1)
    store.close()


def test_with_synchronous_full_commits_checkpoint_as_sqlite_does_and_no_thread_runs(
    tmp_path: Path,
) -> None:
    # every commit syncs the WAL there; the thread's syncs would compete with them
    _, store = _with_run(tmp_path, synchronous="full")
    _append(store, "run-1", 2)
    assert store._checkpointer._thread is None
    conn = store._writer()
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
    assert store._writer().execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    store.close()


def test_the_thread_sleeps_while_nothing_is_written(tmp_path: Path) -> None:
    # The thread runs a checkpoint only when a write wakes it (its _wrote event): once it
    # took the last write's wake-up, reads leave it asleep, and the next write wakes it.
    # Checked on the event, not by watching the clock for a while.
    _, store = _with_run(tmp_path)
    checkpointer = store._checkpointer
    assert until(lambda: checkpointer.checkpoints >= 1 and not checkpointer._wrote.is_set())
    for _ in range(20):
        store.get_run("run-1")
        store.read_events("run-1")
        store.load("run-1")
    assert not checkpointer._wrote.is_set()  # nothing woke it
    before = checkpointer.checkpoints
    _append(store, "run-1", 2)
    assert until(lambda: checkpointer.checkpoints > before)
    store.close()


def test_close_stops_the_thread(tmp_path: Path) -> None:
    _, store = _with_run(tmp_path)
    thread = store._checkpointer._thread
    assert thread is not None and thread.is_alive()
    store.close()
    assert not thread.is_alive()


def test_a_store_dropped_without_close_ends_its_thread(tmp_path: Path) -> None:
    _, store = _with_run(tmp_path)
    thread = store._checkpointer._thread
    assert thread is not None and thread.is_alive()
    del store
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()


def _child_writes(db: str, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    store = _STORE[0]  # the parent's store object, as a fork inherits it
    _new_run(store, "run-child")
    ok = until(lambda: store._checkpointer.checkpoints >= 1) and until(
        lambda: _in_database_file(db, Path(db).parent, "run-child")
    )
    out.put(ok)  # no close: the connections a fork inherited are the parent's


_STORE: list[SQLiteStore] = []


def test_a_forked_child_checkpoints_with_a_thread_of_its_own(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    store = SQLiteStore(db)
    _new_run(store, "run-parent")  # the parent's thread runs
    _STORE[:] = [store]
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child_writes, args=(db, out))
    child.start()
    try:
        assert out.get(timeout=30) is True
    finally:
        child.join(timeout=30)
        _STORE.clear()
    assert child.exitcode == 0
    assert store.get_run("run-child").status == "running"
    store.close()


def _wal_restarts(db: str) -> int:
    """The WAL header's checkpoint sequence number: SQLite adds one each time a writer
    starts the WAL over (the WAL file format, offset 12, big-endian)."""
    with open(db + "-wal", "rb") as f:
        return int.from_bytes(f.read(16)[12:16], "big")


def test_a_writer_copies_the_tail_when_asked_and_the_next_starts_the_wal_over(
    tmp_path: Path,
) -> None:
    db, store = _with_run(tmp_path)
    _append(store, "run-1", 2)
    checkpointer = store._checkpointer
    with checkpointer._busy:  # the thread's passes wait: only a writer copies
        _new_run(store, "run-2")
        assert not _in_database_file(db, tmp_path, "run-2")
        restarts = _wal_restarts(db)
        checkpointer.tail_wanted = True  # as the thread asks after a pass on a long WAL
        _new_run(store, "run-3")  # copies what the WAL holds before it lets go
        assert checkpointer.tail_wanted is False
        assert _in_database_file(db, tmp_path, "run-2")
        assert _in_database_file(db, tmp_path, "run-3")
        _new_run(store, "run-4")  # finds the WAL all copied: starts it over
        assert _wal_restarts(db) == restarts + 1
    assert [store.get_run(f"run-{n}").status for n in range(1, 5)] == ["running"] * 4
    store.close()


@pytest.mark.parametrize(
    ("commits", "events", "bound"),
    [
        # 6,000 commits of a 1 KB event one after another: about 25 MB of WAL frames at
        # tens of thousands of frames a second
        (6000, 1, WAL_AUTOCHECKPOINT),
        # 80 commits of 500 events of 1 KB (40 MB): a pass of the thread takes longer,
        # and what is committed meanwhile adds to the WAL before a writer copies the tail
        (80, 500, 2 * WAL_AUTOCHECKPOINT),
    ],
)
def test_the_wal_stays_bounded_while_commits_follow_each_other(
    tmp_path: Path, commits: int, events: int, bound: int
) -> None:
    # without checkpoints the WAL would hold all of it
    db, store = _with_run(tmp_path)
    seq = 2
    largest = 0
    for _ in range(commits):
        _append(store, "run-1", seq, n=events, size=1000)
        seq += events
        largest = max(largest, os.path.getsize(db + "-wal"))
    assert largest < bound * (4096 + 24), f"the WAL reached {largest} bytes"
    assert len(store.read_events("run-1")) == seq - 1
    store.close()


def test_opening_a_store_to_read_starts_no_thread(tmp_path: Path) -> None:
    # a CLI command that only reads (tether runs, show, log) opens the store: its
    # migration check is a write transaction that changes nothing
    db = str(tmp_path / "t.db")
    writer = SQLiteStore(db)
    _new_run(writer, "run-1")
    writer.close()
    reader = SQLiteStore(db)
    assert reader.get_run("run-1").status == "running"
    assert reader._checkpointer._thread is None
    _append(reader, "run-1", 2)  # its first change starts it
    assert reader._checkpointer._thread is not None
    reader.close()
