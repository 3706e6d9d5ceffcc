"""PostgreSQL behind a transaction pooler (PgBouncer in transaction mode): nothing the
store needs lives on a session. Through PgBouncer, the whole store suite runs too (the
``pgbouncer`` backend of conftest.py, with TETHER_PGBOUNCER_URL); these tests pin what
the pooler changes: detection, prepared statements, the schema, and wake-ups."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _conformance import (
    PG_URL,
    PGBOUNCER_URL,
    Backend,
    claimed,
    enqueue,
    ev,
    new_run,
    until,
    with_schema,
)

from tether.store import QueueLimits, Transition
from tether.store.postgres import PostgresStore
from tether.store.postgres.pool import _Q, _rows_sql
from tether.store.postgres.pooling import (
    _TABLES,  # the tables it names
    qualify,
    qualify_sql,
)

CI_PGBOUNCER = Path(__file__).resolve().parents[2] / ".ci" / "pgbouncer"
needs_pgbouncer = pytest.mark.skipif(
    PGBOUNCER_URL is None,
    reason="TETHER_PGBOUNCER_URL is not set (.ci/run starts PgBouncer and sets it)",
)


def _through(url: str, b: Backend) -> str:
    return with_schema(url, b.schema or "")  # tether's own choice (prepare="auto")


def _exercise(store: PostgresStore) -> None:
    """The hot path and a cold one: create, append (one and several events), load, claim,
    a raw transaction, memory-like reads."""
    new_run(store, "r1", events=2)
    store.append("r1", [ev(3)], expected_seq=2, epoch=1, now=1.0)
    store.append(
        "r1",
        [ev(4), ev(5)],
        expected_seq=3,
        epoch=1,
        transition=Transition(status="running"),
        now=2.0,
    )
    assert [e.seq for e in store.load("r1").events] == [1, 2, 3, 4, 5]
    enqueue(store, "q1")
    assert claimed(store, QueueLimits("q"), owner="w9") == ["q1"]
    with store.transaction() as conn:  # raw SQL names no schema: the transaction's
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 6


def test_every_statement_names_the_schema() -> None:
    """No statement of the store finds a table through the search_path."""
    bare = re.compile(r'(?<![\w."])(?<!%\()\b(' + "|".join(_TABLES) + r')\b(?![\w."])')
    files = [qualify(_Q, "s")] + [
        _rows_sql(f, "s") for f in ("memory", "conversation", "artifacts")
    ]
    for queries in files:
        for name, text in queries.items():
            assert not bare.search(re.sub(r'"s"\.\w+', "", text)), (name, text)
    assert {"runs", "events", "tether_meta", "memory_items", "messages"} <= set(_TABLES)
    assert qualify_sql("SELECT runs.id FROM runs JOIN events e USING (id)", "s") == (
        'SELECT runs.id FROM "s".runs JOIN "s".events e USING (id)'
    )


def test_a_direct_connection_prepares_and_listens(pg_backend: Backend) -> None:
    store = pg_backend.open()
    assert (store.pooled, store.prepare) == (False, True)
    _exercise(store)
    with store._borrow() as conn:  # a pooled connection kept its prepared statements
        names = [r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements")]
    assert names, "a direct connection should prepare statements"


@pytest.mark.parametrize("how", ["option", "url"])
def test_prepare_off_sends_every_statement_whole(pg_backend: Backend, how: str) -> None:
    if how == "option":
        store = pg_backend.open(prepare="off")
    else:
        store = PostgresStore(pg_backend.url + "&prepare=off")
        pg_backend.opened.append(store)
    assert (store.pooled, store.prepare) == (False, False)
    _exercise(store)
    wire = store._wire_connection(0)
    assert wire.prepares is False and not wire._prepared
    with store._borrow() as conn:
        assert not conn.execute("SELECT name FROM pg_prepared_statements").fetchall()


def test_a_bad_prepare_or_pooler_is_refused_before_connecting(pg_backend: Backend) -> None:
    with pytest.raises(ValueError, match="prepare must be one of auto, on, off"):
        PostgresStore(pg_backend.url, prepare="sometimes")
    with pytest.raises(ValueError, match="pooler must be true, false or auto"):
        PostgresStore(pg_backend.url + "&pooler=maybe")


def test_a_declared_pooler_polls_without_listen_url(pg_backend: Backend) -> None:
    """``pooler=true`` (say, RDS Proxy, which nothing detects): no prepared statements, no
    LISTEN on the pooled URL; waiting workers wait out their poll."""
    store = pg_backend.open(pooler=True)
    assert (store.pooled, store.prepare) == (True, False)
    _exercise(store)
    wake = threading.Event()
    store.wait_for_work(["q"], 0.05, wake)  # returns on its timeout: a poll
    assert store._listen_thread is None and not wake.is_set()


def _woken_by_notify(store: PostgresStore) -> bool:
    """Whether a waiter on queue q is woken by enqueues (repeated: the listener may not
    be listening yet when the first one commits) long before its hour-long timeout."""
    wake = threading.Event()
    t = threading.Thread(target=store.wait_for_work, args=(["q"], 3600, wake), daemon=True)
    t.start()
    n = iter(range(10**6))

    def enqueued_and_woken() -> bool:
        enqueue(store, f"n{next(n)}")
        return wake.is_set()

    woke = until(enqueued_and_woken, 20)
    wake.set()
    t.join(30)
    return woke


def test_listen_url_takes_the_wake_ups_off_the_pooler(pg_backend: Backend) -> None:
    store = pg_backend.open(pooler=True, listen_url=PG_URL)
    assert _woken_by_notify(store)
    assert store._listener is not None


# -- through a real PgBouncer (transaction mode) -------------------------------------


@pytest.fixture
def bouncer(pg_backend: Backend) -> Backend:
    """pg_backend's schema, opened through PgBouncer."""
    assert PGBOUNCER_URL is not None
    return Backend("postgres", _through(PGBOUNCER_URL, pg_backend), pg_backend.schema)


@needs_pgbouncer
def test_pgbouncer_is_detected_and_the_tables_go_in_the_schema(
    bouncer: Backend, pg_backend: Backend
) -> None:
    store = bouncer.open()
    pg_backend.opened.append(store)
    assert (store.pooled, store.prepare) == (True, False)
    _exercise(store)
    tables = pg_backend.sql(
        f"SELECT count(*) FROM pg_tables WHERE schemaname = '{pg_backend.schema}' "
        f"AND tablename = 'tether_meta'"
    )
    assert tables == [(1,)]
    again = bouncer.open()  # the next process finds its schema, not a clash
    pg_backend.opened.append(again)
    assert again.get_run("r1") is not None


@needs_pgbouncer
def test_through_pgbouncer_wake_ups_come_by_listen_url_or_polling(
    bouncer: Backend, pg_backend: Backend
) -> None:
    polled = bouncer.open()
    pg_backend.opened.append(polled)
    wake = threading.Event()
    polled.wait_for_work(["q"], 0.05, wake)
    assert polled._listen_thread is None and not wake.is_set()
    listening = bouncer.open(listen_url=PG_URL)
    pg_backend.opened.append(listening)
    assert _woken_by_notify(listening)


@pytest.fixture(scope="module")
def bouncer_ignoring_options() -> Iterator[str]:
    """A second PgBouncer, set (as is common) to drop the ``options`` startup parameter
    instead of refusing it: the case where tether once made its tables in ``public``."""
    if PGBOUNCER_URL is None:
        pytest.skip("TETHER_PGBOUNCER_URL is not set (.ci/run starts PgBouncer and sets it)")
    # in /tmp itself: PgBouncer runs as postgres, which cannot enter pytest's folders
    folder = Path(tempfile.mkdtemp(prefix="tether-pgbouncer-"))
    env = {**os.environ, "TETHER_PGBOUNCER_IGNORE": "options,extra_float_digits"}
    done = subprocess.run(
        [str(CI_PGBOUNCER), str(folder)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    try:
        yield done.stdout.strip()
    finally:
        pid = int((folder / "pgbouncer.pid").read_text())
        os.kill(pid, signal.SIGTERM)
        shutil.rmtree(folder, ignore_errors=True)


@needs_pgbouncer
def test_a_pooler_that_drops_options_is_detected(
    bouncer_ignoring_options: str, pg_backend: Backend
) -> None:
    store = PostgresStore(_through(bouncer_ignoring_options, pg_backend))
    pg_backend.opened.append(store)
    assert (store.pooled, store.prepare) == (True, False)
    _exercise(store)
    rows: list[Any] = pg_backend.sql(
        f"SELECT count(*) FROM pg_tables WHERE schemaname = '{pg_backend.schema}'"
    )
    assert rows[0][0] > 5
    again = PostgresStore(_through(bouncer_ignoring_options, pg_backend))
    pg_backend.opened.append(again)
    assert again.get_run("r1") is not None


def test_the_docs_example_runs_through_the_pooler(
    pg_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/postgres.md's Python block, as written, through PgBouncer when CI runs one
    (else on the direct URL declared as a pooler's)."""
    page = Path(__file__).resolve().parents[2] / "docs" / "postgres.md"
    block = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)[0]
    url = _through(PGBOUNCER_URL, pg_backend) if PGBOUNCER_URL else pg_backend.url + "&pooler=1"
    monkeypatch.setenv("APP_DB", url)
    monkeypatch.setenv("APP_DB_DIRECT", PG_URL)
    namespace: dict[str, Any] = {"__name__": "docs_postgres"}
    exec(compile(block, str(page), "exec"), namespace)
    store = namespace["app"].store
    assert (store.pooled, store.prepare, store.listen_conninfo is not None) == (True, False, True)
