"""SQLite's reading connections are pooled, not kept one per thread: a program whose
threads come and go (LangGraph's executor makes new threads for each invocation; a
server's thread pool) must not keep a connection, and its file descriptors, for each
thread that ever read, until the store closes."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest

import tether
from tether.errors import CorruptRecord
from tether.store.sqlite import SQLiteStore
from tether.store.sqlite.connections import IDLE_READERS


def _one_run(db: str) -> tuple[tether.App, SQLiteStore, str]:
    """An app on ``db`` with one completed run: the app, its store, the run's id."""
    app = tether.open(db)

    @app.agent
    def echo(run: tether.Run, x: int) -> int:
        return x

    run_id = app.run(echo, 1).id
    assert isinstance(app.store, SQLiteStore)
    return app, app.store, run_id


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux's /proc")
def test_threads_that_come_and_go_do_not_keep_connections(tmp_path: Path) -> None:
    app = tether.open(str(tmp_path / "t.db"))

    @app.agent
    def echo(run: tether.Run, x: int) -> int:
        return run.step("s", lambda v: v, x)

    run_id = app.run(echo, 1).id
    store = app.store
    assert isinstance(store, SQLiteStore)
    before = _descriptors()
    seen: list[object] = []

    def read() -> None:
        seen.append(app.get(run_id).status)

    for _ in range(300):  # each thread reads once and ends
        t = threading.Thread(target=read)
        t.start()
        t.join()
    assert seen == ["completed"] * 300
    # one reading connection served them all (each thread ended before the next began)
    assert len(store._all) <= 2, len(store._all)  # the writer, and one reader
    assert _descriptors() <= before + 4  # per-thread connections: ~600 more
    app.close()


def test_concurrent_readers_each_get_a_connection_and_few_stay_open(tmp_path: Path) -> None:
    app, store, run_id = _one_run(str(tmp_path / "t.db"))
    n = IDLE_READERS * 2
    inside = threading.Barrier(n)
    used: set[int] = set()
    lock = threading.Lock()

    def read() -> None:
        with store._reading() as conn:  # every thread holds a connection at once
            with lock:
                used.add(id(conn))
            inside.wait(timeout=30)
            assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1

    threads = [threading.Thread(target=read) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(used) == n  # no connection was lent to two threads at once
    assert len(store._idle) == IDLE_READERS  # the rest were closed when given back
    assert len(store._all) <= IDLE_READERS + 1  # and the writer
    assert app.get(run_id).status == "completed"
    app.close()


def test_a_read_that_fails_gives_up_its_connection(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    app, store, run_id = _one_run(db)
    with store._reading() as conn:
        pass
    assert store._idle == [conn]
    with pytest.raises(RuntimeError), store._reading() as again:
        assert again is conn  # the last one given back is lent first
        raise RuntimeError("a read failed half-way")
    assert conn not in store._all and store._idle == []
    # a row that cannot be decoded: the error is tether's, the next read sees the database
    raw = sqlite3.connect(db)
    with raw:
        raw.execute("UPDATE events SET actor = CAST(x'ff41' AS TEXT)")
    raw.close()
    with pytest.raises(CorruptRecord):
        app.events(run_id)
    assert store._idle == []
    app.close()
