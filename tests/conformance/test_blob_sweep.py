"""gc sweeps the snapshot pages that no snapshot references any more, on every backend:
what it deletes, what it keeps (shared pages, pages within the grace period, artifacts,
blobs of unknown kind), the dry run, and schema 7's marking of existing pages."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import replace

import pytest
from _conformance import Backend

import tether
from tether.model import events as ev
from tether.model.clock import FakeClock
from tether.model.state import fold
from tether.store import NewRun, snapshots
from tether.store.snapshots import PAGE_SIZE

pytestmark = pytest.mark.conformance

HOUR = 3600.0
STEPS = PAGE_SIZE + 44  # one full page per snapshot, and a tail kept inline


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def app(backend: Backend, clock: FakeClock) -> Iterator[tether.App]:
    a = tether.open(backend.url, snapshot_every=50, clock=clock)

    @a.agent(name="many")
    def many(run: tether.Run, tag: str, n: int) -> int:
        for i in range(n):
            run.step(f"s{i}", lambda i=i: {"i": i, "tag": tag})
        return n

    yield a
    a.close()


def _run(app: tether.App, tag: str, n: int = STEPS) -> str:
    """A completed run of ``n`` steps whose snapshot (cached by a load) has its pages."""
    run_id = app.run("many", tag, n).id
    app.load(run_id)  # folds every event: caches a snapshot, writes its full pages
    return run_id


def _blobs(backend: Backend) -> dict[str, str | None]:
    return dict(backend.sql("SELECT sha256, kind FROM blobs"))  # type: ignore[arg-type]


def test_gc_sweeps_the_pages_of_deleted_runs_and_keeps_the_others(
    app: tether.App, backend: Backend, clock: FakeClock
) -> None:
    old = _run(app, "old")
    clock.advance(1.0)
    kept = _run(app, "kept")
    art = app.artifacts.put(b"an artifact nothing references")
    pages = {d for d, kind in _blobs(backend).items() if kind == "page"}
    assert len(pages) == 2  # one full page per run: their steps differ
    clock.advance(2 * HOUR)

    result = app.gc(keep_last=1)  # the newest run of the agent stays
    assert result.run_ids == (old,) and result.deleted == 1
    assert result.pages == 1 and result.page_bytes > 1000
    left = _blobs(backend)
    assert sorted(kind or "-" for kind in left.values()) == ["-", "page"]
    assert left[art.sha256] is None and set(left) - {art.sha256} < pages
    fresh = tether.open(backend.url)
    try:
        assert fresh.load(kept) == fold(fresh.store.read_events(kept))  # its page is there
    finally:
        fresh.close()
    assert app.gc(keep_last=1).pages == 0  # nothing left to sweep


def _same_steps(app: tether.App, run_id: str, t: float) -> None:
    """A run of STEPS steps whose events (time included) are the same as any other
    run's made here, so that their snapshots' pages are the same bytes."""
    created = {"agent": "many", "version": None, "input": {}, "code": {}}
    first = [ev.new(ev.RUN_CREATED, created, t), ev.new(ev.RUN_STARTED, {"epoch": 1}, t)]
    lease = app.store.create_run(
        NewRun(run_id, "many", None, "running"), first, lease_owner="w1", now=t, ttl=60.0
    )
    assert lease is not None
    steps = [
        ev.new(ev.STEP_COMPLETED, {"pos": p, "name": f"s{p}", "kind": "step", "output": p}, t)
        for p in range(1, STEPS + 1)
    ]
    app.store.append(run_id, steps, expected_seq=2, epoch=lease.epoch, now=t)
    app.load(run_id)


def test_a_page_shared_with_a_live_snapshot_is_kept(
    app: tether.App, backend: Backend, clock: FakeClock
) -> None:
    t = clock.now()
    _same_steps(app, "r1", t)
    _same_steps(app, "r2", t)
    assert sum(kind == "page" for kind in _blobs(backend).values()) == 1  # stored once
    app.store.delete_runs(["r1"])
    assert app.store.sweep_blobs(before=t + 10 * HOUR) == (0, 0)  # r2's snapshot needs it
    assert app.load("r2") == fold(app.store.read_events("r2"))
    app.store.delete_runs(["r2"])
    assert app.store.sweep_blobs(before=t + 10 * HOUR)[0] == 1


def test_pages_written_or_reused_within_the_grace_period_are_kept(
    app: tether.App, backend: Backend, clock: FakeClock
) -> None:
    run_id = _run(app, "young")
    clock.advance(10 * 60)
    assert app.gc(status=["completed"], blob_grace="1h").pages == 0  # 10 minutes old
    clock.advance(HOUR)
    assert app.gc(status=["completed"], blob_grace="1h").pages == 1
    assert app.gc(status=["completed"]).deleted == 0
    with pytest.raises(tether.NotFound):
        app.get(run_id)

    # the store API: a page dated by a reuse (touch) is as young as a new one
    data = b"page bytes"
    digest = hashlib.sha256(data).hexdigest()
    t0 = clock.now()
    app.store.put_blobs({digest: data}, now=t0)
    app.store.put_blobs({}, now=t0 + 500, touch=[digest])
    assert app.store.sweep_blobs(before=t0 + 400) == (0, 0)
    assert app.store.sweep_blobs(before=t0 + 600) == (1, len(data))
    assert digest not in _blobs(backend)


def test_artifacts_and_blobs_of_unknown_kind_are_never_swept(
    app: tether.App, backend: Backend, clock: FakeClock
) -> None:
    data = b"bytes that are a page and an artifact"
    digest = hashlib.sha256(data).hexdigest()
    app.store.put_blobs({digest: data}, now=clock.now())
    assert _blobs(backend)[digest] == "page"
    app.artifacts.put(data)  # the same bytes as an artifact: kept for good
    app.artifacts.put(b"another artifact")
    backend.sql(
        "INSERT INTO blobs (sha256, size, data, created_at) "
        "VALUES ('written-before-schema-7', 1, 'x', 0)"
    )
    clock.advance(10 * HOUR)
    assert app.store.sweep_blobs(before=clock.now()) == (0, 0)
    assert len(_blobs(backend)) == 3
    assert app.store.put_blobs({digest: data}, now=clock.now()) is None  # still an artifact
    assert _blobs(backend)[digest] is None


def test_a_dry_run_counts_and_deletes_nothing(
    app: tether.App, backend: Backend, clock: FakeClock
) -> None:
    gone, live = _run(app, "gone"), _run(app, "live")
    app.store.delete_runs([gone])  # its page is unreferenced now
    clock.advance(2 * HOUR)
    dry = app.gc(keep_last=1, dry_run=True)
    assert dry.dry_run and dry.run_ids == () and (dry.pages, dry.deleted) == (0 + 1, 0)
    assert dry.page_bytes > 1000 and len(_blobs(backend)) == 2  # nothing deleted
    assert app.gc(keep_last=1).pages == 1 and len(_blobs(backend)) == 1
    assert app.gc(status=["completed"], blob_grace=0).pages == 1  # the live one's, once gone
    assert _blobs(backend) == {} and live


def test_bad_grace_is_refused_before_anything_is_deleted(app: tether.App) -> None:
    run_id = _run(app, "a")
    with pytest.raises(ValueError, match="blob_grace must not be negative"):
        app.gc(status=["completed"], blob_grace=-1)
    with pytest.raises(ValueError, match="blob_grace '1 hour' is not a duration"):
        app.gc(status=["completed"], blob_grace="1 hour")
    assert app.get(run_id).status == "completed"


def test_schema_7_marks_the_pages_that_snapshots_reference(backend: Backend) -> None:
    app = tether.open(backend.url, snapshot_every=50)

    @app.agent(name="many")
    def many(run: tether.Run, n: int) -> int:
        for i in range(n):
            run.step(f"s{i}", lambda i=i: i)
        return n

    run_id = app.run(many, STEPS).id
    app.load(run_id)
    app.artifacts.put(b"an artifact")
    app.close()
    # back to schema 6: no kind column, nor the tables, columns and indexes later schemas
    # created (10 to 12, 15, 16 and 18: their migrations run again on reopening; 8, 9, 13,
    # 14 and 17 may run twice)
    backend.sql("ALTER TABLE blobs DROP COLUMN kind")
    backend.sql("ALTER TABLE workers DROP COLUMN serves")
    for table in ("tokens", "artifact_claims", "board_changes", "board_values", "schedules"):
        backend.sql(f"DROP TABLE {table}")
    schema_11 = ("created", "status_created", "agent_created", "owner_created")
    for index in (*schema_11, "owner_status_created", "inbox", "owner_inbox"):
        backend.sql(f"DROP INDEX runs_{index}")
    backend.sql("UPDATE tether_meta SET value = '6' WHERE key = 'schema_version'")
    reopened = tether.open(backend.url)
    try:
        kinds = sorted(kind or "-" for kind in _blobs(backend).values())
        assert kinds == ["-", "page"]  # the artifact stays unknown, so never swept
        assert reopened.load(run_id) == fold(reopened.store.read_events(run_id))
    finally:
        reopened.close()


def test_a_snapshot_whose_reused_page_was_swept_is_not_saved(
    app: tether.App, backend: Backend, clock: FakeClock
) -> None:
    run_id = _run(app, "a")
    state = app.load(run_id)  # its steps' first page is the stored one, by digest
    saved = backend.sql("SELECT COUNT(*) FROM snapshots")
    backend.sql("DELETE FROM blobs")  # as if a gc swept it meanwhile
    with pytest.raises(tether.StoreError, match=r"1 snapshot page\(s\) this snapshot reuses"):
        snapshots.save(app.store, replace(state, seq=state.seq + 1), clock.now())
    assert backend.sql("SELECT COUNT(*) FROM snapshots") == saved  # no root without its page
    with pytest.raises(tether.StoreError, match="reuses are gone"):
        app.store.put_blobs({}, now=clock.now(), touch=["no-such-digest"])
