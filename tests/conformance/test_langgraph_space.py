"""A LangGraph thread's space is given back, on SQLite and PostgreSQL: ``prune`` rewrites
the thread's log without the checkpoints it drops, ``delete_thread`` deletes its rows,
gc sweeps the snapshot pages its reads cached, and after the documented maintenance
(``tether gc``'s vacuum: ``Store.vacuum``) SQLite's file has given the space back."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

import pytest
from _conformance import Backend
from langgraph.graph import END, START, StateGraph

import tether
from tether.integrations.langgraph import TetherSaver

TURNS = 70  # 4 steps each: a snapshot of the thread holds a page (256 steps)


class Big(TypedDict):
    value: str
    n: int


@pytest.fixture
def app(backend: Backend) -> Iterator[tether.App]:
    a = tether.open(backend.url, snapshot_every=10)  # reads of a thread cache snapshots
    yield a
    a.close()


def _graph(saver: TetherSaver) -> Any:
    def replace(state: Big) -> dict[str, Any]:  # a new ~1.2 KB value each invocation
        return {"value": secrets.token_hex(600), "n": state["n"] + 1}

    g = StateGraph(Big)
    g.add_node("replace", replace)
    g.add_edge(START, "replace")
    g.add_edge("replace", END)
    return g.compile(checkpointer=saver)


def _fill(saver: TetherSaver, thread: str) -> Any:
    graph, config = _graph(saver), {"configurable": {"thread_id": thread}}
    for _ in range(TURNS):
        graph.invoke({"value": "", "n": 0}, config, durability="sync")
    return graph, config


def _size(backend: Backend) -> Callable[[], int]:
    """The database's size in bytes: SQLite's pages (WAL included, free pages too); on
    PostgreSQL the total size of tether's tables (free space inside them included)."""
    if backend.name == "sqlite":
        return lambda: (
            backend.sql("PRAGMA page_count")[0][0] * backend.sql("PRAGMA page_size")[0][0]
        )
    query = (
        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
        f"ON n.oid = c.relnamespace WHERE n.nspname = '{backend.schema}' AND c.relkind = 'r'"
    )
    return lambda: int(backend.sql(query)[0][0])


def _rows(backend: Backend, table: str) -> int:
    return int(backend.sql(f"SELECT count(*) FROM {table}")[0][0])


def _log_bytes(app: tether.App, thread: str) -> int:
    return sum(len(e.data) for e in app.events(thread))


def _takes_back(backend: Backend, app: tether.App, size: Callable[[], int], sizes: Any) -> None:
    """gc sweeps the snapshot pages; after the maintenance (``sizes``: the empty
    database's size, and with the first thread) SQLite's file with a second thread like
    the first is not a quarter of the first one's size bigger than it was with the
    first: VACUUM gave the space back to the file system. On PostgreSQL the deleted rows
    are dead tuples that VACUUM makes reusable once no older transaction can see them,
    which another test's transaction on the same server can delay: there the rows'
    deletion is what is checked."""
    empty, full = sizes
    app.gc(status="failed", blob_grace=0)  # no run is failed: gc sweeps the pages only
    assert _rows(backend, "blobs") == 0
    app.store.vacuum()
    if backend.name == "postgres":
        rows = backend.sql("SELECT count(*), coalesce(sum(length(data)), 0) FROM events")[0]
        held = sum(len(e.data) for r in app.runs() for e in app.events(r.id))
        assert (rows[0], rows[1]) == (sum(len(app.events(r.id)) for r in app.runs()), held)
        return
    _fill(TetherSaver(app), "B")
    assert size() - full < (full - empty) / 4, (empty, full, size())


def _thread_read(backend: Backend, app: tether.App) -> Any:
    """The database's size function and empty size, a saver, and its thread "A" (graph,
    config) filled and read once by tether (which caches a snapshot of its long log)."""
    size = _size(backend)
    empty = size()
    saver = TetherSaver(app)
    filled = _fill(saver, "A")
    app.state("A")
    assert _rows(backend, "snapshots") >= 1
    return size, empty, saver, filled


def test_prune_rewrites_the_thread_and_its_space_is_taken_back(
    backend: Backend, app: tether.App
) -> None:
    size, empty, saver, (graph, config) = _thread_read(backend, app)
    last = graph.get_state(config).values
    assert last["n"] == 1 and len(last["value"]) == 1200
    full, logged = size(), _log_bytes(app, "A")
    saver.prune(["A"])
    assert _log_bytes(app, "A") < logged / 20  # one checkpoint and its value are left
    assert graph.get_state(config).values == last  # what LangGraph reads is unchanged
    assert len(list(saver.list(config))) == 1
    assert _rows(backend, "snapshots") == 0  # they described the old log
    assert graph.invoke(None, config)["value"] == last["value"]  # nothing left to run
    assert graph.invoke({"value": "", "n": 4}, config)["n"] == 5  # it goes on
    _takes_back(backend, app, size, (empty, full))


def test_delete_thread_gives_its_rows_and_snapshot_pages_back(
    backend: Backend, app: tether.App
) -> None:
    size, empty, saver, _ = _thread_read(backend, app)
    assert _rows(backend, "blobs") >= 1  # the snapshot's pages
    full = size()
    saver.delete_thread("A")
    assert _rows(backend, "events") == 0
    assert _rows(backend, "snapshots") == 0
    _takes_back(backend, app, size, (empty, full))


def test_a_log_is_replaced_only_at_the_seq_its_writer_read(
    backend: Backend, app: tether.App
) -> None:
    """Store.replace_log (prune's rewrite): fenced by the last seq, whole or not at all."""
    from tether.model import events as ev

    _graph(TetherSaver(app)).invoke({"value": "", "n": 0}, {"configurable": {"thread_id": "A"}})
    events = app.events("A")
    new = [ev.new(ev.RUN_CREATED, {"agent": "langgraph", "version": None, "input": {}}, 1.0)]
    with pytest.raises(tether.Conflict, match="ends at seq"):
        app.store.replace_log("A", new, expected_seq=len(events) - 1, now=2.0)
    assert app.events("A") == events
    with pytest.raises(tether.NotFound):
        app.store.replace_log("nope", new, expected_seq=0, now=2.0)
    assert app.store.replace_log("A", new, expected_seq=len(events), now=2.0) == 1
    assert [e.type for e in app.events("A")] == ["run.created"]
    assert app.store.read_events("A", after=0)[0].seq == 1
