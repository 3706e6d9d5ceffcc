"""tether's pytest plugin (the pytest11 entry point of the installed package): a real
pytest process on a user's test file, with the tether_app and tether_replay fixtures, on
SQLite and on PostgreSQL (a schema per test, dropped after it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

pytestmark = pytest.mark.integration
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"

USER_TESTS = """
import tether

def _agent(app, extra_step=False):
    @app.agent(name="refund")
    def refund(run, order):
        if extra_step:
            run.step("audit", lambda: "ok")
        amount = run.step("look_up", lambda: order * 10)
        return f"refunded {amount}"
    return refund

def test_a_run_replays_as_it_finished(tether_app, tether_replay):
    refund = _agent(tether_app)
    run_id = tether_app.run(refund, 4).id
    report = tether_replay(run_id, expect="finished")
    assert report.output == "refunded 40"
    print("URL", tether_app.url)

def test_another_code_is_told_where_it_diverges(tether_app, tether_replay):
    run_id = tether_app.run(_agent(tether_app), 4).id
    changed = tether.open(tether_app.url)
    _agent(changed, extra_step=True)
    tether_replay(run_id, agent=changed.agents()["refund"].fn, expect="finished")

def test_a_what_if_replaces_a_result(tether_app, tether_replay):
    run_id = tether_app.run(_agent(tether_app), 4).id
    assert tether_replay(run_id, replace={1: 7}).output == "refunded 7"

def test_each_test_has_its_own_database(tether_app):
    assert tether_app.runs() == []
"""


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_agents.py").write_text(USER_TESTS)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", *args],
        cwd=tmp_path,  # no ini file there: none of tether's own pytest settings
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_fixtures_on_sqlite(tmp_path: Path) -> None:
    out = _pytest(tmp_path)
    assert "1 failed, 3 passed" in out.stdout, out.stdout + out.stderr
    assert "expected the replay to be finished: run " in out.stdout
    assert "would block at position 1: recorded step look_up, found step audit" in out.stdout
    assert "name: recorded 'look_up', found 'audit'" in out.stdout
    assert "URL " + str(tmp_path) not in out.stdout  # pytest's own tmp_path, not the cwd
    assert "tether.db" in out.stdout


def _schemas() -> set[str]:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'tether_test_%'"
        ).fetchall()
    return {r[0] for r in rows}


def test_the_fixtures_on_postgresql_each_test_in_a_schema_dropped_after(tmp_path: Path) -> None:
    before = _schemas()
    out = _pytest(tmp_path, "--tether-url", PG_URL)
    assert "1 failed, 3 passed" in out.stdout, out.stdout + out.stderr
    urls = [ln.split()[1] for ln in out.stdout.splitlines() if ln.startswith("URL ")]
    assert len(urls) == 1 and urls[0].startswith(PG_URL + "?schema=tether_test_")
    assert _schemas() == before  # every test's schema dropped


def test_a_bad_url_is_a_usage_error(tmp_path: Path) -> None:
    for bad in ("/tmp/x.db", PG_URL + "?schema=mine"):
        out = _pytest(tmp_path, "--tether-url", bad)
        assert out.returncode != 0
        assert "--tether-url / $TETHER_TEST_URL" in out.stdout + out.stderr


def test_the_docs_example_passes_as_written(tmp_path: Path) -> None:
    """docs/testing.md's plugin section: its test file, run by a real pytest."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text()
    section = page[page.index("## The pytest plugin") : page.index("## Prove your own backend")]
    (body,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    (tmp_path / "test_support.py").write_text(body)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_support.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "2 passed" in out.stdout, out.stdout + out.stderr
