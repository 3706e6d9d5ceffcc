"""tether's pytest plugin: fixtures for the tests of agents built on tether. Installing
tether registers it (the ``pytest11`` entry point), so a test asks for them by name::

    def test_refund(tether_app, tether_replay):
        @tether_app.agent
        def refund(run, order):
            ...

        run_id = tether_app.run(refund, 42).id
        tether_replay(run_id, expect="finished")               # this code, this run
        tether_replay("tests/runs/incident-7.jsonl", agent=refund, replace={3: "no"})

- ``tether_url``: the database of the test's App: a SQLite file in the test's
  ``tmp_path``; with ``--tether-url URL`` (or ``$TETHER_TEST_URL``) a PostgreSQL
  database, each test in a schema of its own, dropped after it (psycopg needed).
- ``tether_app``: a :class:`tether.App` on ``tether_url``, closed after the test.
- ``tether_replay``: :func:`tether.testing.replay` of a run of ``tether_app`` or of a
  ``tether export`` file, against ``tether_app``'s agents or ``agent=``; ``expect=``
  an outcome (``finished``, ``continues``, ``diverges``, ``fails``) fails the test,
  with the report, when the replay ends otherwise.

The fixtures import what they use when a test asks for them; loading the plugin imports
the ``tether`` package itself (about 0.2 s on a 2-core machine, once per session).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tether.app import App
    from tether.engine.dry import ReplayReport

URL_ENV = "TETHER_TEST_URL"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("tether").addoption(
        "--tether-url",
        default=None,
        metavar="URL",
        help=f"PostgreSQL URL for the tether_app fixture (default ${URL_ENV}, else a "
        f"SQLite file per test)",
    )


@pytest.fixture
def tether_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The database URL of this test's App (see the module docstring)."""
    base = request.config.getoption("--tether-url") or os.environ.get(URL_ENV)
    if not base:
        yield str(tmp_path / "tether.db")
        return
    from tether.store.urls import is_postgres

    if not is_postgres(base):
        raise pytest.UsageError(
            f"--tether-url / ${URL_ENV} is a PostgreSQL URL (postgresql://…), not {base!r}; "
            f"leave it out for a SQLite file per test"
        )
    if "schema=" in base:
        raise pytest.UsageError(
            f"--tether-url / ${URL_ENV}: leave ?schema= out: each test gets a schema of its "
            f"own, dropped after it"
        )
    import psycopg

    schema = f"tether_test_{secrets.token_hex(6)}"
    yield f"{base}{'&' if '?' in base else '?'}schema={schema}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


@pytest.fixture
def tether_app(tether_url: str) -> Iterator[App]:
    """A throwaway :class:`tether.App` on ``tether_url``, closed after the test."""
    import tether

    app = tether.open(tether_url)
    try:
        yield app
    finally:
        app.close()


Replay = Callable[..., "ReplayReport"]


@pytest.fixture
def tether_replay(tether_app: App) -> Replay:
    """``tether_replay(run, *, agent=None, replace=None, expect=None)``: the replay of
    ``run`` (a run id of ``tether_app``, or an export file's path) with the code of
    ``agent`` (default: ``tether_app``'s agents); see the module docstring."""
    from tether.engine.dry import OUTCOMES
    from tether.testing.replay import replay

    def run_replay(
        run: str | os.PathLike[str],
        *,
        agent: Callable[..., Any] | None = None,
        replace: Mapping[int, Any] | None = None,
        expect: str | None = None,
    ) -> ReplayReport:
        if expect is not None and expect not in OUTCOMES:
            raise pytest.UsageError(
                f"tether_replay(expect=...) is one of {', '.join(OUTCOMES)}, not {expect!r}"
            )
        report = replay(agent or tether_app, run, replace=replace, app=tether_app)
        if expect is not None and report.outcome != expect:
            details = "".join(f"\n  {k}: recorded {r!r}, found {f!r}" for k, (r, f) in
                              report.differs.items())  # fmt: skip
            error = f"\n  error: {report.error}" if report.error else ""
            pytest.fail(f"expected the replay to be {expect}: {report}{details}{error}")
        return report

    return run_replay
