"""Retention: gc collects by age, status and keep-last, leaves no orphan rows, gives the
space back, and never breaks a fork of a deleted parent."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import tether

pytestmark = pytest.mark.integration

DAY = 86400.0
# The audit trail outlives runs; a session's messages keep the id of the run that added
# them (provenance: the conversation belongs to the session); runs is checked by id.
KEPT_TABLES = {"audit", "messages", "runs"}


@pytest.fixture
def clock() -> tether.FakeClock:
    return tether.FakeClock()


@pytest.fixture
def gapp(db_path: str, clock: tether.FakeClock) -> Iterator[tether.App]:
    app = tether.open(db_path, clock=clock, snapshot_every=3)
    yield app
    app.close()


def _agents(app: tether.App) -> tuple[Any, Any]:
    @app.agent
    def small(run: tether.Run, n: int, size: int = 10) -> int:
        for i in range(n):
            run.step(f"s{i}", lambda i: "x" * size, i)
        return n

    def broken() -> None:
        raise RuntimeError("down")

    @app.agent
    def failing(run: tether.Run) -> None:
        run.step("ok", lambda: 1)
        run.step("broken", broken)

    return small, failing


def _fail(app: tether.App, agent: Any) -> str:
    with pytest.raises(tether.RunFailed) as info:
        app.run(agent)
    return info.value.run_id


def _run_ids(app: tether.App) -> set[str]:
    return {r.id for r in app.runs(limit=10_000)}


def _orphans(db_path: str, live: set[str]) -> dict[str, int]:
    """Rows left for runs that are gone, in every table with a run_id column and in the
    events (keyed by the run's rk): what gc must leave at 0."""
    with sqlite3.connect(db_path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        out = {}
        for t in tables:
            cols = {r[1] for r in conn.execute(f"PRAGMA table_info({t})")}
            if "run_id" in cols and t not in KEPT_TABLES:
                rows = conn.execute(f"SELECT run_id FROM {t}").fetchall()
                out[t] = sum(1 for (r,) in rows if r not in live)
        rks = {rk for rk, run_id in conn.execute("SELECT rk, id FROM runs") if run_id in live}
        keys = conn.execute("SELECT key FROM events").fetchall()
        out["events"] = sum(1 for (key,) in keys if key >> 32 not in rks)
    return out


def test_gc_by_status_deletes_only_those_and_leaves_no_orphans(
    gapp: tether.App, db_path: str
) -> None:
    small, failing = _agents(gapp)
    done = [gapp.run(small, 4).id for _ in range(3)]
    failed = _fail(gapp, failing)
    _add_effect_and_signal(gapp, db_path, done[0])
    result = gapp.gc(status=["completed"])
    assert sorted(result.run_ids) == sorted(done) and result.deleted == 3
    assert _run_ids(gapp) == {failed}
    orphans = _orphans(db_path, {failed})
    assert set(orphans) >= {"events", "snapshots", "effects", "signals"}
    assert set(orphans.values()) == {0}, orphans
    assert gapp.load(failed).status == "failed"  # what was kept is intact


def _add_effect_and_signal(app: tether.App, db_path: str, run_id: str) -> None:
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "INSERT INTO effects (key, run_id, position, tool, status, result, created_at, "
            "updated_at) VALUES (?, ?, 1, 'send', 'completed', 'null', 0, 0)",
            (f"{run_id}:1:send:h", run_id),
        )
    app.store.send_signal(run_id, "go", "{}", sender=None, now=0.0)
    assert _orphans(db_path, set())["effects"] == 1


def test_gc_by_age_uses_the_last_change(gapp: tether.App, clock: tether.FakeClock) -> None:
    small, _ = _agents(gapp)
    old = gapp.run(small, 1).id
    clock.advance(31 * DAY)
    recent = gapp.run(small, 1).id
    assert gapp.gc(older_than="30d").run_ids == (old,)
    assert _run_ids(gapp) == {recent}
    clock.advance(29 * DAY)
    assert gapp.gc(older_than=30 * DAY).run_ids == ()


def test_gc_keep_last_keeps_the_newest_per_agent(gapp: tether.App, clock: tether.FakeClock) -> None:
    small, failing = _agents(gapp)
    smalls = []
    for _ in range(4):
        smalls.append(gapp.run(small, 1).id)
        clock.advance(1)
    fails = []
    for _ in range(3):
        fails.append(_fail(gapp, failing))
        clock.advance(1)
    result = gapp.gc(keep_last=2)
    assert set(result.run_ids) == {*smalls[:2], fails[0]}
    assert _run_ids(gapp) == {*smalls[2:], *fails[1:]}


def test_gc_combines_criteria_and_never_takes_a_live_run(
    gapp: tether.App, clock: tether.FakeClock
) -> None:
    small, failing = _agents(gapp)
    old_done = gapp.run(small, 1).id
    old_failed = _fail(gapp, failing)
    queued = gapp.fork(old_done, step=1)
    held = gapp.fork(old_done, step=1)
    gapp.store.claim(held, owner="someone-else", ttl=1000 * DAY, now=clock.now())
    clock.advance(10 * DAY)
    gapp.run(small, 1)
    chosen = gapp.gc(older_than="1d", status=["completed"], dry_run=True)
    assert chosen.run_ids == (old_done,) and chosen.deleted == 0 and len(_run_ids(gapp)) == 5
    every = gapp.gc(older_than="1d", status=["queued", "completed", "failed"])
    assert set(every.run_ids) == {old_done, old_failed, queued}  # never the leased one
    assert held in _run_ids(gapp)


def test_gc_without_a_criterion_or_with_a_bad_one_is_refused(gapp: tether.App) -> None:
    with pytest.raises(ValueError, match="gc needs a criterion"):
        gapp.gc()
    with pytest.raises(ValueError, match="unknown status done"):
        gapp.gc(status=["done"])
    with pytest.raises(ValueError, match="older_than '3 weeks' is not a duration"):
        gapp.gc(older_than="3 weeks")


def test_a_fork_of_a_deleted_parent_stays_readable_and_resumable(gapp: tether.App) -> None:
    small, _ = _agents(gapp)
    parent = gapp.run(small, 5).id
    child = gapp.fork(parent, step=3)
    expected = gapp.load(child)
    assert gapp.gc(status=["completed"]).run_ids == (parent,)
    assert gapp.load(child) == expected
    assert gapp.history(child).run.parent_id == parent
    assert gapp.state(child, step=2).steps[-1].output == "x" * 10
    handle = gapp.resume(child)
    assert handle.output == 5 and [p for p, _ in handle.reused] == [1, 2, 3]


def test_the_file_shrinks_after_vacuum(
    gapp: tether.App, db_path: str, clock: tether.FakeClock
) -> None:
    small, _ = _agents(gapp)
    big = [gapp.run(small, 20, 20_000).id for _ in range(5)]
    clock.advance(1)
    keep = gapp.run(small, 1).id
    size = os.path.getsize(db_path) + os.path.getsize(db_path + "-wal")
    result = gapp.gc(status=["completed"], keep_last=1)
    assert set(result.run_ids) == set(big)
    assert result.bytes_before is not None and result.bytes_before >= size
    assert result.freed is not None and result.freed > 2_000_000
    assert os.path.getsize(db_path) < size / 4 and os.path.getsize(db_path + "-wal") == 0
    assert _run_ids(gapp) == {keep}


def test_delete_runs_skips_unknown_ids(gapp: tether.App) -> None:
    small, _ = _agents(gapp)
    run_id = gapp.run(small, 1).id
    assert gapp.store.delete_runs(["nope"]) == 0
    assert gapp.store.delete_runs([run_id, run_id, "nope"]) == 1
    assert gapp.store.delete_runs([run_id]) == 0
    assert gapp.store.delete_runs([]) == 0


def _cli(db_path: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", "--db", db_path, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_gc_on_the_command_line(gapp: tether.App, db_path: str) -> None:
    small, _ = _agents(gapp)
    ids = [gapp.run(small, 1).id for _ in range(3)]
    out = _cli(db_path, "gc", "--status", "completed", "--dry-run").stdout
    assert out.startswith("would delete 3 run(s)") and all(i in out for i in ids)
    assert len(_run_ids(gapp)) == 3
    data = json.loads(_cli(db_path, "gc", "--keep-last", "1", "--json").stdout)
    assert data["deleted"] == 2 and data["bytes_after"] <= data["bytes_before"]
    refused = _cli(db_path, "gc")
    assert refused.returncode == 1 and "gc needs a criterion" in refused.stderr
    bad = _cli(db_path, "gc", "--older-than", "3x")
    assert bad.returncode == 2 and "'3x' is not a duration" in bad.stderr
    bad_grace = _cli(db_path, "gc", "--status", "completed", "--blob-grace", "soon")
    assert bad_grace.returncode == 2 and "'soon' is not a duration" in bad_grace.stderr


def test_gc_on_the_command_line_sweeps_unreferenced_snapshot_pages(tmp_path: Any) -> None:
    db = str(tmp_path / "pages.db")
    app = tether.open(db, snapshot_every=50)

    @app.agent(name="long")
    def long(run: tether.Run, n: int) -> int:
        for i in range(n):
            run.step(f"s{i}", lambda i=i: {"i": i})
        return n

    run_id = app.run(long, 300).id
    app.load(run_id)  # caches a snapshot with one full page
    app.close()
    kept = _cli(db, "gc", "--status", "completed", "--json")  # the page is minutes old
    assert json.loads(kept.stdout)["pages_swept"] == 0
    out = _cli(db, "gc", "--status", "completed", "--blob-grace", "0s").stdout
    assert "deleted 0 run(s)" in out and "swept 1 unreferenced snapshot page(s)" in out
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM blobs").fetchone() == (0,)
