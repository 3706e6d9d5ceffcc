"""SQLite writers take turns on ``flock(2)`` of ``<db>-lock`` (threads on a lock), so a
waiting writer is handed the turn at once instead of sleeping in SQLite's busy handler;
without the file, writes fall back to the busy handler and stay correct. Appends that
queue meanwhile are committed together (group commit), each refused or not on its own."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tether.errors import LeaseLost
from tether.model.events import NewEvent
from tether.store import NewRun, Transition
from tether.store.sqlite import SQLiteStore

T0 = 1_700_000_000.0


def _new_run(store: SQLiteStore, run_id: str = "run-1") -> None:
    run = NewRun(run_id, "agent", None, "running")
    events = [NewEvent("run.started", "{}", T0, "test")]
    store.create_run(run, events, lease_owner="w1", now=T0, ttl=3600.0)


def _append(store: SQLiteStore, seq: int, run_id: str = "run-1") -> int:
    event = NewEvent("note", f'{{"n":{seq}}}', T0, "test")
    return store.append(run_id, [event], expected_seq=seq - 1, epoch=1, now=T0)


@contextmanager
def _held_elsewhere(db: str) -> Iterator[None]:
    """Hold the writer lock as another process would: another open file description."""
    holder = os.open(db + "-lock", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(holder, fcntl.LOCK_UN)
        os.close(holder)


def _seqs(store: SQLiteStore, run_id: str = "run-1") -> list[int]:
    return [e.seq for e in store.read_events(run_id)]


def test_a_write_waits_for_the_holder_of_the_lock_file_then_goes_through(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    store = SQLiteStore(db)
    _new_run(store)
    assert os.path.exists(db + "-lock")
    done = threading.Event()
    result: list[Any] = []

    def write() -> None:
        try:
            result.append(_append(store, 2))
        except Exception as e:  # the assertion below shows it
            result.append(e)
        done.set()

    with _held_elsewhere(db):
        writer = threading.Thread(target=write)
        writer.start()
        assert not done.wait(0.3), f"the write did not wait for the lock's holder: {result}"
    assert done.wait(10), "the write did not go through once the lock was released"
    writer.join()
    assert result == [2]
    assert _seqs(store) == [1, 2]
    store.close()


def test_reads_do_not_wait_for_the_writer_lock(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    store = SQLiteStore(db)
    _new_run(store)
    with _held_elsewhere(db):
        assert _seqs(store) == [1]
        assert store.get_run("run-1").status == "running"
    store.close()


def test_without_a_lock_file_writes_fall_back_to_the_busy_handler(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    os.mkdir(db + "-lock")  # cannot be opened as a file: no file lock for this store
    store = SQLiteStore(db)
    _new_run(store)
    for seq in range(2, 6):
        assert _append(store, seq) == seq
    assert _seqs(store) == [1, 2, 3, 4, 5]
    store.close()


def test_nested_writes_keep_the_lock_until_the_outermost_ends(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    store = SQLiteStore(db)
    _new_run(store)
    probe = os.open(db + "-lock", os.O_RDWR)
    try:
        with store.transaction():
            with store._writing:  # reentered, as a write inside a transaction does
                pass
            # still held: another holder cannot take it
            with pytest.raises(BlockingIOError):
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released now
        fcntl.flock(probe, fcntl.LOCK_UN)
    finally:
        os.close(probe)
    store.close()


def _writer_process(db: str, run_id: str, n: int) -> None:
    store = SQLiteStore(db)
    for seq in range(2, n + 2):
        _append(store, seq, run_id)
    store.close()


def test_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    store = SQLiteStore(db)
    for i in range(3):
        _new_run(store, f"run-{i}")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer_process, args=(db, f"run-{i}", 200)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    for i in range(3):
        assert _seqs(store, f"run-{i}") == list(range(1, 202))
    store.close()


def test_the_writes_of_all_threads_go_through_one_connection(tmp_path: Path) -> None:
    # one writer keeps its page cache valid; a connection per writing thread would make
    # each re-read the pages the others wrote
    store = SQLiteStore(str(tmp_path / "t.db"))
    for i in range(4):
        _new_run(store, f"run-{i}")
    threads = [
        threading.Thread(target=lambda i=i: [_append(store, s, f"run-{i}") for s in range(2, 12)])
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [_seqs(store, f"run-{i}") for i in range(4)] == [list(range(1, 12))] * 4
    assert len(store._all) == 2  # the writer, and the reading main thread's own
    store.close()


def test_the_lock_file_gets_the_database_files_permissions(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    SQLiteStore(db).close()
    os.remove(db + "-lock")
    os.chmod(db, 0o660)  # a database that a group writes to
    store = SQLiteStore(db)
    _new_run(store)
    assert os.stat(db + "-lock").st_mode & 0o777 == 0o660
    store.close()


def _hold_forever(db: str, held: Any) -> None:
    store = SQLiteStore(db)
    with store._writing:  # the writer lock, as in the middle of a write
        held.set()
        threading.Event().wait(60)


def test_a_writer_killed_while_it_holds_the_lock_does_not_block_the_others(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "t.db")
    store = SQLiteStore(db)
    _new_run(store)
    ctx = multiprocessing.get_context("spawn")
    held = ctx.Event()
    holder = ctx.Process(target=_hold_forever, args=(db, held))
    holder.start()
    try:
        assert held.wait(30)
        with pytest.raises(BlockingIOError):  # it holds the lock now
            probe = os.open(db + "-lock", os.O_RDWR)
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(probe)
    finally:
        holder.kill()  # SIGKILL: the kernel releases its lock
        holder.join(10)
    assert _append(store, 2) == 2
    store.close()


# -- group commit: appends queued behind another writer share one commit -------------


def _store(tmp_path: Path, runs: int) -> SQLiteStore:
    store = SQLiteStore(str(tmp_path / "g.db"))
    for i in range(runs):
        run = NewRun(f"r{i}", "agent", None, "running")
        events = [NewEvent("run.started", "{}", T0, "test")]
        store.create_run(run, events, lease_owner="w1", now=T0, ttl=3600.0)
    return store


def _commits(store: SQLiteStore) -> list[str]:
    seen: list[str] = []
    store._writer().set_trace_callback(
        lambda sql: seen.append(sql) if sql.split()[0] in ("COMMIT", "INSERT") else None
    )
    return seen


def _together(store: SQLiteStore, appends: list[Callable[[], int]]) -> list[object]:
    """Run ``appends`` in threads while another process holds the writer lock, release it
    once all of them queued, and return what each returned or raised."""
    out: list[object] = [None] * len(appends)

    def call(i: int) -> None:
        try:
            out[i] = appends[i]()
        except Exception as e:
            out[i] = e

    with _held_elsewhere(store.path):
        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(appends))]
        for t in threads:
            t.start()
        # the appends queued (the leader's may have left the queue: it waits for the lock
        # alone); wherever the leader is when the lock is released, the appends queued
        # behind it share one transaction: no sleep needed to let it reach the lock
        deadline = time.monotonic() + 30
        while len(store._queued) < len(appends) - 1:
            assert time.monotonic() < deadline, "the appends did not queue"
            time.sleep(0.005)
    for t in threads:
        t.join(10)
    return out


def _appender(store: SQLiteStore, run: str, epoch: int = 1, **kw: object) -> Callable[[], int]:
    event = NewEvent("note", '{"n": 2}', T0, "test")
    return lambda: store.append(run, [event], expected_seq=1, epoch=epoch, now=T0, **kw)  # type: ignore[arg-type]


def test_appends_queued_behind_another_writer_share_one_commit(tmp_path: Path) -> None:
    store = _store(tmp_path, 4)
    seen = _commits(store)
    got = _together(store, [_appender(store, f"r{i}") for i in range(4)])
    assert got == [2, 2, 2, 2]
    assert [s.split()[0] for s in seen].count("COMMIT") == 1
    for i in range(4):
        assert [e.seq for e in store.read_events(f"r{i}")] == [1, 2]


def test_a_refused_append_in_a_batch_fails_alone(tmp_path: Path) -> None:
    store = _store(tmp_path, 3)
    store.claim("r1", owner="w2", ttl=60, now=T0 + 1, takeover="w1")  # r1: epoch 2 now
    done = Transition("completed", release=True)
    got = _together(
        store,
        [
            _appender(store, "r0"),
            _appender(store, "r1", transition=done),  # stale: LeaseLost, its transition too
            _appender(store, "r2", transition=done),
        ],
    )
    assert got[0] == 2 and got[2] == 2
    assert isinstance(got[1], LeaseLost)
    assert [e.seq for e in store.read_events("r1")] == [1]
    r1 = store.get_run("r1")
    assert (r1.status, r1.lease_owner) == ("running", "w2")
    assert store.get_run("r2").status == "completed"


def test_an_append_alone_is_one_statement(tmp_path: Path) -> None:
    store = _store(tmp_path, 1)
    seen = _commits(store)
    assert _appender(store, "r0")() == 2
    assert [s.split()[0] for s in seen] == ["INSERT"]  # autocommit: no BEGIN, no COMMIT
