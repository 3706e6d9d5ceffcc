"""Reads from a replica: a read-only URL for the CLI's read commands and the server's GET
requests, never for writes (issue 34; docs/postgres.md, "Reads from a replica").

The replica is a read-only role (SELECT on tether's tables, nothing else) on the test
database: no lag, but a write through it is refused by the server. To prove the reads
went through the read URL, the primary the CLI is given cannot be reached, and the
server's primary is another schema than the one its reader reads.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _conformance import PG_URL, Backend, with_schema

import tether
from tether.cli.main import main


@pytest.fixture
def read_role() -> Iterator[str]:
    """A login role that may only read (dropped after the test, its grants with it)."""
    role = f"tether_ro_{secrets.token_hex(4)}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN".encode())
    yield role
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {role}".encode())
        conn.execute(f"DROP ROLE {role}".encode())


def _grant_reads(role: str, schema: str) -> None:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}".encode())
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}".encode())


def _as(role: str, schema: str) -> str:
    """The test database's URL as ``role`` (trust auth on 127.0.0.1), on ``schema``."""
    base = PG_URL.split("://", 1)[1].split("@", 1)[-1]
    return with_schema(f"postgresql://{role}@{base}", schema)


def _finished_run(app: tether.App) -> str:
    @app.agent
    def count(run: tether.Run, n: int) -> int:
        return run.step("twice", lambda: n * 2)

    return app.run(count, 21).id


def test_cli_read_commands_go_through_the_read_url(
    pg_backend: Backend, read_role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with tether.open(pg_backend.url) as app:
        run_id = _finished_run(app)
        other = _finished_run(app)
    _grant_reads(read_role, pg_backend.schema)
    read_url = _as(read_role, pg_backend.schema)
    # the primary cannot be reached (port 1): a read command that touched it would fail
    nowhere = with_schema("postgresql://postgres@127.0.0.1:1/test", pg_backend.schema)
    base = ["--db", nowhere, "--read-url", read_url]
    for command in (
        ["runs"],
        ["show", run_id],
        ["log", run_id],
        ["history", run_id],
        ["state", run_id, "--json"],
        ["diff", run_id, other],
        ["export", run_id],
    ):
        capsys.readouterr()
        assert main([*command, *base]) == 0, (command, capsys.readouterr().err)
        assert capsys.readouterr().out.strip()
    assert main(["show", run_id, "--json", *base]) == 0
    assert '"output": 42' in capsys.readouterr().out
    # without the read URL the same command needs the primary, and says it cannot reach it
    assert main(["show", run_id, "--db", nowhere]) == 1
    err = capsys.readouterr().err
    assert "cannot connect" in err and "127.0.0.1:1/test" in err


def test_a_write_through_the_read_url_is_refused_cleanly(
    pg_backend: Backend, read_role: str
) -> None:
    with tether.open(pg_backend.url) as app:
        run_id = _finished_run(app)
        queued = app.start("count", 1)
        before = app.events(run_id), app.events(queued)
    _grant_reads(read_role, pg_backend.schema)
    with tether.open(_as(read_role, pg_backend.schema), read_only=True) as ro:
        assert ro.get(run_id).output == 42

        @ro.agent
        def echo(run: tether.Run, n: int) -> int:
            return n

        attempts: list[Any] = [
            lambda: ro.signal(queued, "go", 1),
            lambda: ro.cancel(queued),
            lambda: ro.run(echo, 1),
            lambda: ro.tokens.create("eve", "admin", None),
            lambda: ro.start(echo, 2),
        ]
        for attempt in attempts:
            with pytest.raises(tether.TetherError) as caught:
                attempt()
            message = str(caught.value)
            assert "read-only URL" in message, message
            assert "Traceback" not in message
    # a role that may write, opened read_only, is refused by the server all the same
    ro = tether.open(pg_backend.url, read_only=True)
    try:
        with pytest.raises(tether.StoreError, match="read-only URL"):
            ro.tokens.create("eve", "admin", None)
    finally:
        ro.close()
    with tether.open(pg_backend.url) as app:
        assert (app.events(run_id), app.events(queued)) == before
        assert len(app.runs()) == 2
        assert app.tokens.list() == []


def test_a_read_url_that_prepares_nothing_reads_through_the_functions(
    pg_backend: Backend, read_role: str
) -> None:
    """Behind a pooler (here ``prepare="off"``) a load is a call of the server-side
    function load_run (schema 13), which a role that may only read may call; an append's
    function writes, and is refused like any write."""
    with tether.open(pg_backend.url) as app:
        run_id = _finished_run(app)
        events = app.events(run_id)
    _grant_reads(read_role, pg_backend.schema)
    with tether.open(_as(read_role, pg_backend.schema), read_only=True, prepare="off") as ro:
        assert ro.store.load(run_id).events == events
        with pytest.raises(tether.StoreError, match="read-only URL"):
            ro.store.append(run_id, [], expected_seq=len(events), epoch=1, now=1.0)
    with tether.open(pg_backend.url) as app:
        assert app.events(run_id) == events


def test_a_read_url_needs_a_current_schema(pg_backend: Backend, read_role: str) -> None:
    empty = f"t_{secrets.token_hex(6)}"  # never migrated: the read URL will not migrate it
    with pytest.raises(tether.StoreError, match="version 0") as caught:
        tether.open(_as(read_role, empty), read_only=True)
    assert "open the primary's URL once" in str(caught.value)


def test_the_servers_get_requests_use_its_reader(pg_backend: Backend, read_role: str) -> None:
    pytest.importorskip("fastapi", reason="the server extra: pip install 'tether[server]'")
    from _server import bearer, client

    with tether.open(pg_backend.url) as app:  # the replica's schema holds the run
        run_id = _finished_run(app)
    _grant_reads(read_role, pg_backend.schema)
    other = f"t_{secrets.token_hex(6)}"  # the primary: another schema, no such run
    primary = tether.open(with_schema(PG_URL, other))
    reader = tether.open(_as(read_role, pg_backend.schema), read_only=True)
    try:
        _, token = primary.tokens.create("ops", "admin", None)
        api = client(primary, reader=reader)
        got = api.get(f"/api/runs/{run_id}", headers=bearer(token))
        assert got.status_code == 200, got.text
        assert run_id in got.text
        assert api.get(f"/api/runs/{run_id}/events", headers=bearer(token)).status_code == 200
        listed = api.get("/api/runs", headers=bearer(token))
        assert listed.status_code == 200 and run_id in listed.text
        # a write goes to the primary, where the run is not
        cancel = api.post(f"/api/runs/{run_id}/cancel", headers=bearer(token), json={})
        assert cancel.status_code == 404, cancel.text
    finally:
        reader.close()
        primary.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {other} CASCADE".encode())


def test_sqlite_has_no_read_url(
    sqlite_backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(tether.InvalidInput, match="read_only is not an option of the SQLite"):
        tether.open(sqlite_backend.url, read_only=True)
    with tether.open(sqlite_backend.url) as app:
        run_id = _finished_run(app)
    code = main(["show", run_id, "--db", sqlite_backend.url, "--read-url", sqlite_backend.url])
    assert code == 2
    assert "a SQLite database is one file" in capsys.readouterr().err


def test_the_docs_example_reads_through_a_read_only_role(
    pg_backend: Backend, read_role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/postgres.md's "Reads from a replica" block, as written, on a read-only role."""
    page = Path(__file__).resolve().parents[2] / "docs" / "postgres.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    [block] = [b for b in blocks if "read_only=True" in b]
    tether.open(pg_backend.url).close()  # the primary migrates; then the role may read
    _grant_reads(read_role, pg_backend.schema)
    monkeypatch.setenv("APP_DB", pg_backend.url)
    monkeypatch.setenv("APP_DB_REPLICA", _as(read_role, pg_backend.schema))
    exec(compile(block, str(page), "exec"), {"__name__": "docs_postgres_replica"})
