"""The conformance suite: every Store test runs on SQLite and on PostgreSQL.

The ``backend`` fixture is parametrised over both; each test gets a fresh,
empty store: a SQLite file in ``tmp_path``, or a PostgreSQL schema ``t_<random>``
(dropped after the test) in the database of ``TETHER_PG_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``).

When PostgreSQL cannot be reached its tests FAIL, naming the URL and what to do:
a green run means both backends were tested. Set ``TETHER_SKIP_PG=1`` to skip
them on purpose.

With ``TETHER_PGBOUNCER_URL`` set (``.ci/run`` starts a PgBouncer in transaction mode in
front of the same PostgreSQL and sets it), the store's own tests (``test_store_*.py``)
run a third time, as ``pgbouncer``: the store opened through the pooler (tests' raw SQL
still goes straight to PostgreSQL). An unreachable PgBouncer FAILS them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from _conformance import PG_URL, PGBOUNCER_URL, Backend, pooled, with_schema

import tether
from tether.store import Store

SKIP_PG = os.environ.get("TETHER_SKIP_PG") == "1"
BACKENDS = ["sqlite", "postgres"] + (["pgbouncer"] if PGBOUNCER_URL else [])
# the files whose tests also run through PgBouncer (the store's: the rest go through it)
PGBOUNCER_FILES = ("test_store_",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Through PgBouncer, only the store's own tests (CI time: the rest add nothing)."""
    keep, drop = [], []
    for item in items:
        params = getattr(item, "callspec", None)
        through = params is not None and params.params.get("backend") == "pgbouncer"
        own = item.path.name.startswith(PGBOUNCER_FILES)
        (drop if through and not own and item.path.parent.name == "conformance" else keep).append(
            item
        )
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


_pg_error: list[str] = []  # why PostgreSQL is unreachable (checked once per session)


def _pg_reachable() -> str | None:
    if not _pg_error:
        try:
            import psycopg

            with psycopg.connect(PG_URL, connect_timeout=5):
                _pg_error.append("")
        except Exception as e:  # any failure means: not testable
            _pg_error.append(f"{type(e).__name__}: {str(e).strip().splitlines()[0]}")
    return _pg_error[0] or None


def _pgbouncer_reachable() -> str | None:
    try:
        import psycopg

        assert PGBOUNCER_URL is not None
        with psycopg.connect(PGBOUNCER_URL, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except Exception as e:
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
    return None


def _drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())


@contextlib.contextmanager
def _location(name: str, tmp_path: Path) -> Iterator[Backend]:
    if name == "sqlite":
        b = Backend("sqlite", str(tmp_path / "tether.db"))
        try:
            yield b
        finally:
            b.close_all()
        return
    if SKIP_PG:
        pytest.skip("TETHER_SKIP_PG=1: the PostgreSQL conformance tests are skipped on request")
    why = _pg_reachable()
    if why is not None:
        pytest.fail(
            f"PostgreSQL at {PG_URL} cannot be reached ({why}). The conformance suite runs "
            f"every Store test on PostgreSQL too: start PostgreSQL, or point TETHER_PG_URL "
            f"at one, or set TETHER_SKIP_PG=1 to skip these tests on purpose.",
            pytrace=False,
        )
    schema = f"t_{secrets.token_hex(6)}"
    url = PG_URL
    if name == "pgbouncer":
        assert PGBOUNCER_URL is not None
        url = PGBOUNCER_URL
        why = _pgbouncer_reachable()
        if why is not None:
            pytest.fail(
                f"PgBouncer at {PGBOUNCER_URL} (TETHER_PGBOUNCER_URL) cannot be reached "
                f"({why}); .ci/run starts one (see .ci/pgbouncer), or unset the variable.",
                pytrace=False,
            )
    b = Backend("postgres", (pooled if name == "pgbouncer" else with_schema)(url, schema), schema)
    try:
        yield b
    finally:
        b.close_all()
        _drop_schema(schema)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh store location (not created yet) on each backend."""
    with _location(request.param, tmp_path) as b:
        yield b


@pytest.fixture
def sqlite_backend(tmp_path: Path) -> Iterator[Backend]:
    """A fresh SQLite location, for the cases only SQLite has."""
    with _location("sqlite", tmp_path) as b:
        yield b


@pytest.fixture
def pg_backend(tmp_path: Path) -> Iterator[Backend]:
    """A fresh PostgreSQL schema, for the cases only PostgreSQL has."""
    with _location("postgres", tmp_path) as b:
        yield b


@pytest.fixture
def app(backend: Backend) -> Iterator[tether.App]:
    """An App on a fresh store of each backend (a test file may define its own)."""
    a = tether.open(backend.url)
    yield a
    a.close()


@pytest.fixture(scope="module", params=[b for b in BACKENDS if b != "pgbouncer"])
def module_app(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tether.App]:
    """An App on a store that the tests of one module share (one per backend and xdist
    worker), for tests that each make their own runs and look only at those, where a
    fresh store per test would cost more than the test (the API's authorization matrix)."""
    with _location(request.param, tmp_path_factory.mktemp("shared")) as b:
        a = tether.open(b.url)
        yield a
        a.close()


@pytest.fixture
def store(backend: Backend) -> Store:
    """A fresh, empty store on each backend."""
    return backend.open()
