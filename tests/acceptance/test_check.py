"""`tether check` before a deploy: 1,000 unfinished runs replayed against three code
changes by the real CLI, on SQLite and PostgreSQL, and nothing written to the database.

Half the runs charged a customer and wait for a signal (one run executed, 499 copies
imported: their logs hold the charge); half are queued and never ran. The three
changes: a compatible one (after every run's frontier), a fraud check inserted before
the charge (the runs that charged would block, the queued ones would not), and the same
insert guarded by the run's input, or by ``run.patched`` (old runs take the old path:
none would block).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.acceptance
TIMEOUT = 300  # seconds for one command (never reached when green)
RUNS = 1000

AGENT = """
import os, tether

app = tether.open(os.environ["TETHER_TEST_DB"])


@app.tool(risk="write")
def charge(amount, *, idempotency_key):
    return f"charged {amount}"


@app.agent
def order(run, amount, checked=False):
#CHECK#    receipt = run.tool(charge, amount)
    run.wait("shipped")
    return receipt + #END#
"""
COMPATIBLE = AGENT.replace("#CHECK#", "").replace("#END#", '", shipped!"')
INSERTED = AGENT.replace("#CHECK#", '    run.step("check_fraud", lambda: "ok")\n').replace(
    "#END#", '", shipped"'
)
GUARDED = AGENT.replace(
    "#CHECK#", '    if checked:\n        run.step("check_fraud", lambda: "ok")\n'
).replace("#END#", '", shipped"')
PATCHED = AGENT.replace(
    "#CHECK#", '    if run.patched("fraud-check"):\n        run.step("check_fraud", lambda: "ok")\n'
).replace("#END#", '", shipped"')
V1 = AGENT.replace("#CHECK#", "").replace("#END#", '", shipped"')

SETUP = f"""
import io, shop
app = shop.app
first = app.run(shop.order, 5)
assert first.status == "waiting", first
out = io.StringIO()
app.export_run(first.id, out)
lines = out.getvalue().splitlines()
for _ in range({RUNS // 2 - 1}):
    app.import_run(lines, new_id=True)
for _ in range({RUNS // 2}):
    app.start(shop.order, 5, queue="orders")
"""


def _env(url: str, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TETHER_TEST_DB": url,
        "PYTHONDONTWRITEBYTECODE": "1",  # each deploy is read from its source
        "PYTHONPATH": str(tmp_path),
    }


def _check(module: Path, env: dict[str, str]) -> tuple[int, list[dict[str, object]], str]:
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", "--app", f"{module}:app", "check", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr.strip()


def _cli(module: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", "--app", f"{module}:app", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _counts(url: str) -> dict[str, int]:
    if url.startswith("postgresql://"):
        import psycopg

        base, schema = url.split("?schema=")
        with psycopg.connect(base, autocommit=True) as conn:
            names = [
                r[0]
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
                )
            ]
            return {
                n: conn.execute(f'SELECT count(*) FROM {schema}."{n}"'.encode()).fetchone()[0]
                for n in names
            }
    import sqlite3

    with sqlite3.connect(url) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {n: conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}


def test_check_lists_the_runs_each_change_would_block_and_writes_nothing(
    url: str, tmp_path: Path
) -> None:
    module = tmp_path / "shop.py"
    module.write_text(V1)
    env = _env(url, tmp_path)
    subprocess.run(
        [sys.executable, "-c", SETUP], env=env, cwd=tmp_path, check=True, timeout=TIMEOUT
    )
    before = _counts(url)
    kept = None
    if not url.startswith("postgresql://"):
        import sqlite3

        kept = sqlite3.connect(url)  # data_version counts the commits of other connections
        version = kept.execute("PRAGMA data_version").fetchone()[0]

    took = {}
    changes = [("compatible", COMPATIBLE), ("inserted", INSERTED), ("guarded", GUARDED)]
    for name, source in [*changes, ("patched", PATCHED)]:
        module.write_text(source)
        code, reports, took[name] = _check(module, env)
        assert len(reports) == RUNS
        blocked = {r["run_id"] for r in reports if r["outcome"] == "diverges"}
        charged = {r["run_id"] for r in reports if r["replayed"] == 1}  # the charge replayed
        if name == "inserted":
            charged = {r["run_id"] for r in reports if r["position"] == 1 and r["recorded"]}
            assert code == 1 and blocked == charged and len(blocked) == RUNS // 2
            assert {r["found"]["name"] for r in reports if r["run_id"] in blocked} == {
                "check_fraud"
            }
            # the queued runs have no record yet: they would run the new step first
            fresh = [r for r in reports if r["run_id"] not in blocked]
            assert {(r["outcome"], r["found"]["name"]) for r in fresh} == {
                ("continues", "check_fraud")
            }
        elif name == "patched":  # old runs: the old path; the queued: the patch's marker
            assert code == 0 and blocked == set()
            fresh = {(r["outcome"], r["found"]["name"]) for r in reports if r["replayed"] == 0}
            assert fresh == {("continues", "patch:fraud-check")}
            assert len([r for r in reports if r["replayed"] == 1]) == RUNS // 2
            relying = {r["run_id"] for r in reports if r["patches"]}
            assert relying == {r["run_id"] for r in reports if r["replayed"] == 1}
            assert {json.dumps(r["patches"]) for r in reports if r["patches"]} == {
                '{"fraud-check": "old path"}'
            }
            table = _cli(module, env, "check").stdout.splitlines()
            assert table[0].split()[-2:] == ["NEEDS", "PATCH"]
            assert table[1].endswith("fraud-check (old path)")
            assert table[-1].endswith(f"0 would fail, {RUNS // 2} would need a patch")
            listed = _cli(module, env, "runs", "--needs-patch", "fraud-check").stdout
            assert f"{RUNS // 2} runs in flight need patch 'fraud-check'" in listed
            assert listed.count("old path") == RUNS // 2
        else:
            assert code == 0 and blocked == set()
            assert len(charged) == RUNS // 2
            assert {(r["outcome"], r["position"]) for r in reports if r["run_id"] in charged} == {
                ("continues", 2)
            }
    module.write_text(V1)  # the patch retired: no run relies on what the code never calls
    listed = _cli(module, env, "runs", "--needs-patch", "fraud-check").stdout
    assert (
        listed.strip()
        == "no run in flight needs patch 'fraud-check': it can be retired (docs/deploys.md)"
    )
    backend = "postgresql" if url.startswith("postgresql://") else "sqlite"
    print(f"\ntether check, {RUNS} runs ({backend}): {took}")
    assert _counts(url) == before
    if kept is not None:
        assert kept.execute("PRAGMA data_version").fetchone()[0] == version
        kept.close()
