"""Values the driver cannot send, and rows that cannot be read: each fails alone, with a
tether error that says what and where, and the store goes on.

A lone surrogate (``json.loads('"\\ud800"')``, a model's truncated emoji escape) has no
UTF-8 bytes: it used to reach sqlite3 inside the group writer's ``BEGIN IMMEDIATE``,
outside its rollback, and leave the writer connection in a transaction: every later write
of the process failed ("cannot start a transaction within a transaction"), and the other
threads' queued appends were dropped. Rows changed by another program (text that is not
UTF-8, JSON that does not parse, a schema version that is not a number) raised the
driver's or the parser's own exceptions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from _conformance import T0, Backend, ev, new_run, seqs, until

import tether
from tether.errors import CorruptRecord, EncodeError, StoreError, TetherError
from tether.model.events import NewEvent
from tether.store import EffectWrite, Snapshot, Store
from tether.store.faults import STORE_METHODS

pytestmark = pytest.mark.conformance

BAD = '{"text": "\ud800"}'  # JSON text holding a lone surrogate, as no codec writes it


def _with_others(store: Store, backend: Backend, append: Callable[[], Any]) -> list[Any]:
    """``append()`` in a thread beside 4 others, each appending one event to run ``r{i}``;
    the results (or errors) of the 4, then of ``append``. On SQLite they queue in the group
    writer (this thread holds it meanwhile), so that one transaction takes them all."""
    for i in range(4):
        new_run(store, f"r{i}", events=1)
    calls = [
        *(
            lambda i=i: store.append(f"r{i}", [ev(2)], expected_seq=1, epoch=1, now=T0)
            for i in range(4)
        ),
        append,
    ]
    results: list[Any] = [None] * len(calls)

    def one(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as e:  # the test looks at it
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    with _holding_the_writer(store, backend, len(calls)):
        for t in threads:
            t.start()
    for t in threads:
        t.join(30)
    return results


@contextmanager
def _holding_the_writer(store: Store, backend: Backend, queued: int) -> Iterator[None]:
    if backend.name != "sqlite":
        yield  # PostgreSQL's group commit batches whatever arrives while a batch flushes
        return
    with store.transaction():
        yield
        # every append queued (or refused before queueing: then it is done already)
        assert until(lambda: len(store._queued) >= queued - 1, 10)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda: {"events": [NewEvent("note", BAD, T0)]}, id="event-data"),
        pytest.param(lambda: {"events": [NewEvent("note", "{}", T0, "\udc80")]}, id="actor"),
        pytest.param(
            lambda: {
                "events": [ev(2)],
                "writes": [EffectWrite("k", "bad", 1, "tool", "completed", BAD)],
            },
            id="effect-result",
        ),
        pytest.param(
            lambda: {"events": [ev(2)], "snapshot": Snapshot("bad", 2, BAD, T0)}, id="snapshot"
        ),
    ],
)
def test_text_that_is_not_unicode_fails_that_append_alone(
    store: Store, backend: Backend, bad: Callable[[], dict[str, Any]]
) -> None:
    new_run(store, "bad", events=1)
    *results, refused = _with_others(
        store, backend, lambda: store.append("bad", expected_seq=1, epoch=1, now=T0, **bad())
    )
    assert isinstance(refused, EncodeError) and "run bad" in str(refused), refused
    assert "not Unicode" in str(refused)
    assert results == [2, 2, 2, 2]  # the other threads' appends, queued meanwhile
    assert seqs(store, "bad") == [1]  # nothing of it was written
    assert store.append("bad", [ev(2)], expected_seq=1, epoch=1, now=T0) == 2  # goes on
    assert [seqs(store, f"r{i}") for i in range(4)] == [[1, 2]] * 4


def test_a_value_that_fails_inside_the_group_transaction_fails_alone(
    store: Store, backend: Backend
) -> None:
    """An epoch past 64 bits passes every check before the transaction and fails when the
    driver binds it (SQLite) or the server reads it (PostgreSQL), in the batch of the other
    threads' appends: it fails, they commit, and the next write works."""
    new_run(store, "bad", events=1)
    *results, refused = _with_others(
        store, backend, lambda: store.append("bad", [ev(2)], expected_seq=1, epoch=2**64, now=T0)
    )
    assert isinstance(refused, TetherError) and "bad" in str(refused), refused
    assert results == [2, 2, 2, 2]
    assert seqs(store, "bad") == [1]
    new_run(store, "after", events=3)
    assert store.append("bad", [ev(2)], expected_seq=1, epoch=1, now=T0) == 2
    assert seqs(store, "after") == [1, 2, 3]


def test_every_store_method_is_behind_the_translation_boundary(store: Store) -> None:
    for name in STORE_METHODS:
        method = getattr(type(store), name)
        assert name == "transaction" or hasattr(method, "__wrapped__"), name


# -- rows that cannot be read ------------------------------------------------------


def test_an_event_whose_json_does_not_parse_is_a_corrupt_record_naming_run_and_seq(
    app: tether.App, backend: Backend
) -> None:
    @app.agent
    def one(run: tether.Run) -> int:
        return int(run.step("s", lambda: 1))

    rid = app.run(one).id
    backend.sql("UPDATE events SET data = '{bad' WHERE type = 'step.completed'")
    with pytest.raises(CorruptRecord) as caught:
        app.get(rid)
    message = str(caught.value)
    assert f"run {rid}" in message and "event 3 (step.completed)" in message
    assert "backup" in message
    assert isinstance(caught.value, StoreError)


def test_a_run_row_whose_code_does_not_parse_is_a_corrupt_record(
    store: Store, backend: Backend
) -> None:
    new_run(store, "run-1")
    backend.sql("UPDATE runs SET code = 'nope' WHERE id = 'run-1'")
    with pytest.raises(CorruptRecord, match="run-1"):
        store.get_run("run-1")


def test_a_schema_version_that_is_not_a_number_is_a_corrupt_record(
    store: Store, backend: Backend
) -> None:
    backend.sql("UPDATE tether_meta SET value = 'x' WHERE key = 'schema_version'")
    with pytest.raises(CorruptRecord, match="schema_version is 'x'"):
        store.schema_version()
    with pytest.raises(CorruptRecord, match="schema_version is 'x'"):
        backend.open()


def test_text_that_is_not_utf8_is_a_corrupt_record_naming_the_run(
    sqlite_backend: Backend,
) -> None:
    """Only SQLite can hold it (another program wrote bytes into a TEXT column)."""
    store = sqlite_backend.open()
    new_run(store, "run-1")
    sqlite_backend.sql("UPDATE events SET actor = CAST(x'ff41' AS TEXT)")
    for read in (store.read_events, store.load):
        with pytest.raises(CorruptRecord, match=r"run 'run-1'.*not UTF-8"):
            read("run-1")
    new_run(store, "run-2")  # the store goes on
    assert seqs(store, "run-2") == [1, 2]


def test_memory_and_conversation_writes_refuse_text_that_is_not_unicode(app: tether.App) -> None:
    """Their own tables, written through Store.transaction(): the same refusal, and the
    connection stays usable."""
    writes: list[Callable[[], Any]] = [
        lambda: app.memory.put(("user", "u\ud800"), "k", 1),
        lambda: app.memory.put(("user", "u"), "k\ud800", 1),
        lambda: app.memory.put(("user", "u"), "k", "v\ud800"),
        lambda: app.session("s\ud800").add("user", "hi"),
        lambda: app.session("s").add("user", "h\ud800"),
    ]
    for write in writes:  # a name is refused by the input checks, a value by the codec
        with pytest.raises((EncodeError, tether.InvalidInput), match=r"not (valid )?Unicode"):
            write()
    app.memory.put(("user", "u"), "k", 1)
    app.session("s").add("user", "hi")
    item = app.memory.get(("user", "u"), "k")
    assert item is not None and item.value == 1
