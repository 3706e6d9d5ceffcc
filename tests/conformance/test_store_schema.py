"""Opening a store: migrations, a newer schema, someone else's database, connection errors."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from _conformance import PG_URL, Backend, new_run, seqs, with_schema

from tether.errors import NotATetherDatabase, SchemaTooNew, StoreError
from tether.store import Store

pytestmark = pytest.mark.conformance

TABLES = {"tether_meta", "runs", "events", "snapshots", "blobs", "effects", "signals", "audit"}


def _tables(backend: Backend) -> set[str]:
    if backend.name == "sqlite":
        rows = backend.sql("SELECT name FROM sqlite_master WHERE type = 'table'")
    else:
        rows = backend.sql(f"SELECT tablename FROM pg_tables WHERE schemaname = '{backend.schema}'")
    return {r[0] for r in rows} - {"sqlite_sequence"}


def admin_sql(statement: str) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        cur = conn.execute(statement.encode())
        return list(cur.fetchall()) if cur.description else []


def _version(backend: Backend) -> int:
    return int(backend.sql("SELECT value FROM tether_meta WHERE key = 'schema_version'")[0][0])


def test_a_new_store_is_migrated_to_the_latest_schema(backend: Backend) -> None:
    store = backend.open()
    assert _tables(backend) >= TABLES
    latest = _version(backend)
    assert latest >= 2 and store.schema_version() == latest


def test_reopening_keeps_the_data_and_migrates_nothing(backend: Backend) -> None:
    first = backend.open()
    new_run(first, events=3)
    first.close()
    second = backend.open()
    assert seqs(second) == [1, 2, 3] and second.get_run("run-1").lease_owner == "w1"
    assert second.schema_version() == _version(backend)


def test_a_store_written_by_a_newer_tether_is_refused_unchanged(backend: Backend) -> None:
    store = backend.open()
    new_run(store)
    store.close()
    backend.sql("UPDATE tether_meta SET value = '999' WHERE key = 'schema_version'")
    before = _tables(backend)
    with pytest.raises(SchemaTooNew, match=r"newer tether.*999.*Upgrade tether"):
        backend.open()
    assert _version(backend) == 999 and _tables(backend) == before
    assert backend.sql("SELECT id FROM runs") == [("run-1",)]


def test_concurrent_openers_of_a_new_store_migrate_it_once(
    backend: Backend, request: pytest.FixtureRequest
) -> None:
    errors: list[BaseException] = []
    opened: list[Store] = []
    start = threading.Barrier(6)

    def opener() -> None:
        start.wait()
        try:
            opened.append(backend.open())
        except BaseException as e:  # the assertion below reports it
            errors.append(e)

    threads = [threading.Thread(target=opener) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(opened) == 6
    new_run(opened[0])
    assert seqs(opened[5]) == [1, 2]


# -- SQLite: files that are not tether's ---------------------------------------


def _foreign_sqlite_file(b: Backend) -> bytes:
    b.sql("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    b.sql("INSERT INTO customers (name) VALUES ('ada')")
    return Path(b.url).read_bytes()


def test_a_sqlite_file_of_another_program_is_refused(sqlite_backend: Backend) -> None:
    _foreign_sqlite_file(sqlite_backend)
    with pytest.raises(NotATetherDatabase, match=r"another program.*customers"):
        sqlite_backend.open()
    assert sqlite_backend.sql("SELECT name FROM sqlite_master") == [("customers",)]
    assert sqlite_backend.sql("SELECT * FROM customers") == [(1, "ada")]


def test_a_sqlite_file_of_another_program_is_left_byte_for_byte(sqlite_backend: Backend) -> None:
    before = _foreign_sqlite_file(sqlite_backend)
    with pytest.raises(NotATetherDatabase):
        sqlite_backend.open()
    assert Path(sqlite_backend.url).read_bytes() == before


def test_a_file_that_is_not_sqlite_is_refused_unchanged(sqlite_backend: Backend) -> None:
    Path(sqlite_backend.url).write_text("name,email\nada,ada@example.com\n")
    with pytest.raises(NotATetherDatabase, match="not a SQLite file"):
        sqlite_backend.open()
    assert Path(sqlite_backend.url).read_text() == "name,email\nada,ada@example.com\n"


# -- PostgreSQL: schemas, URLs, connection errors -------------------------------


def test_a_schema_of_another_program_is_refused_unchanged(pg_backend: Backend) -> None:
    admin_sql(f"CREATE SCHEMA {pg_backend.schema}")
    pg_backend.sql("CREATE TABLE customers (id INT PRIMARY KEY, name TEXT)")
    with pytest.raises(NotATetherDatabase, match=rf"schema '{pg_backend.schema}'.*customers"):
        pg_backend.open()
    assert _tables(pg_backend) == {"customers"}


def test_an_empty_existing_schema_is_used(pg_backend: Backend) -> None:
    admin_sql(f"CREATE SCHEMA {pg_backend.schema}")
    new_run(pg_backend.open())
    assert _tables(pg_backend) >= TABLES


def test_schemas_keep_stores_apart(pg_backend: Backend) -> None:
    one = pg_backend.open()
    schema_b = f"{pg_backend.schema}_b"
    other = Backend("postgres", with_schema(PG_URL, schema_b), schema_b)
    try:
        two = other.open()
        new_run(one, "only-in-one")
        assert two.list_runs() == [] and two.read_events("only-in-one") == []
        assert [r.id for r in one.list_runs()] == ["only-in-one"]
    finally:
        other.close_all()
        admin_sql(f"DROP SCHEMA IF EXISTS {other.schema} CASCADE")


def test_tether_tables_stay_out_of_the_public_schema(pg_backend: Backend) -> None:
    public = "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
    before = admin_sql(public)
    new_run(pg_backend.open())
    assert admin_sql(public) == before
    assert _tables(pg_backend) >= TABLES


def test_an_unreachable_server_is_a_store_error_naming_it(pg_backend: Backend) -> None:
    from tether.store.postgres import PostgresStore

    with pytest.raises(StoreError) as caught:
        PostgresStore("postgresql://alice:s3cret@127.0.0.1:1/orders", timeout=2)
    message = str(caught.value)
    assert "alice@127.0.0.1:1/orders" in message and "s3cret" not in message
    assert "server is running" in message


def test_a_missing_database_is_a_store_error_naming_it(pg_backend: Backend) -> None:
    from tether.store.postgres import PostgresStore

    base = PG_URL.rsplit("/", 1)[0]
    with pytest.raises(StoreError, match="no_such_db_for_tether"):
        PostgresStore(f"{base}/no_such_db_for_tether")


def test_a_bad_schema_name_is_refused(pg_backend: Backend) -> None:
    from tether.store.postgres import PostgresStore

    with pytest.raises(ValueError, match="schema"):
        PostgresStore(PG_URL, schema="x; DROP TABLE runs")


def test_the_url_keeps_libpq_parameters_beside_the_schema(pg_backend: Backend) -> None:
    from tether.store.postgres import split_url

    assert split_url("postgresql://u@h:5/db?sslmode=disable&schema=s_1&options=-c%20x%3D1") == (
        "postgresql://u@h:5/db?sslmode=disable&options=-c%20x%3D1",
        "s_1",
    )
    assert split_url("postgres://h/db") == ("postgres://h/db", None)
    name = f"tconf_{pg_backend.schema}"
    store = Backend("postgres", f"{pg_backend.url}&application_name={name}").open()
    try:
        new_run(store)
        rows = admin_sql(f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{name}'")
        assert int(str(rows[0][0])) >= 1  # libpq got the parameter
        assert pg_backend.sql("SELECT id FROM runs") == [("run-1",)]  # and tether the schema
    finally:
        store.close()


def test_without_psycopg_open_says_what_to_install(pg_backend: Backend) -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "import tether\n"
        "try:\n"
        f"    tether.open({PG_URL!r})\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "pip install 'tether[postgres]'" in out.stdout, out.stderr


def test_a_dropped_connection_fails_one_call_then_the_store_recovers(pg_backend: Backend) -> None:
    name = f"tconf_{pg_backend.schema}"
    store = Backend("postgres", f"{pg_backend.url}&application_name={name}").open(min_size=3)
    try:
        new_run(store)
        admin_sql(
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE application_name = '{name}'"
        )
        with pytest.raises(StoreError, match="lost the connection"):
            store.get_run("run-1")
        assert store.get_run("run-1").lease_owner == "w1"
        assert seqs(store) == [1, 2]
    finally:
        store.close()
