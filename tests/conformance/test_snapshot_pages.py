"""Snapshot pages on every backend: blobs in and out, and what loading a head reads."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from _conformance import T0, Backend

import tether
from tether.model import codec
from tether.model import events as ev
from tether.model.events import NewEvent
from tether.model.state import fold, to_data
from tether.store import NewRun, Snapshot
from tether.store.snapshots import PAGE_SIZE

pytestmark = pytest.mark.conformance


@pytest.fixture
def app(backend: Backend) -> Iterator[tether.App]:
    a = tether.open(backend.url, snapshot_every=100)
    yield a
    a.close()


def _step(pos: int) -> NewEvent:
    data = {"pos": pos, "name": f"s{pos}", "kind": "step", "attempt": 1, "output": [pos]}
    return ev.new(ev.STEP_COMPLETED, data, T0, "w1")


def _build(app: tether.App, n_steps: int) -> tuple[str, int]:
    """A running run of ``n_steps`` completed steps; (its id, its lease epoch)."""
    created = {"agent": "a", "version": None, "input": {}, "code": {}}
    first = [ev.new(ev.RUN_CREATED, created, T0), ev.new(ev.RUN_STARTED, {"epoch": 1}, T0)]
    lease = app.store.create_run(
        NewRun("r1", "a", None, "running"), first, lease_owner="w1", now=T0, ttl=3600.0
    )
    assert lease is not None
    _append(app, "r1", lease.epoch, range(1, n_steps + 1))
    return "r1", lease.epoch


def _append(app: tether.App, run_id: str, epoch: int, positions: Sequence[int]) -> None:
    seq = len(app.store.read_events(run_id))  # seqs have no gaps
    for lo in range(0, len(positions), 100):
        batch = [_step(p) for p in positions[lo : lo + 100]]
        seq = app.store.append(run_id, batch, expected_seq=seq, epoch=epoch, now=T0)


def _spy(monkeypatch: pytest.MonkeyPatch, app: tether.App, name: str) -> list[Any]:
    calls: list[Any] = []
    real: Callable[..., Any] = getattr(app.store, name)

    def spy(arg: Any, **kw: Any) -> Any:
        calls.append(arg)
        return real(arg, **kw)

    monkeypatch.setattr(app.store, name, spy)
    return calls


def test_blobs_are_stored_once_and_read_by_digest(app: tether.App) -> None:
    data = b"page bytes"
    digest = hashlib.sha256(data).hexdigest()
    app.store.put_blobs({digest: data}, now=T0)
    app.store.put_blobs({digest: b"other bytes"}, now=T0)  # the first bytes stay
    assert app.store.get_blobs([digest, "0" * 64]) == {digest: data}
    app.store.put_blobs({}, now=T0)


def test_loading_a_head_reads_no_page_and_each_page_once(
    app: tether.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, _ = _build(app, 2 * PAGE_SIZE + 10)
    whole = app.load(run_id)  # folds the log and caches a snapshot with 2 pages
    reads = _spy(monkeypatch, app, "get_blobs")
    head = app.load(run_id)
    assert head.committed == 2 * PAGE_SIZE + 10 and head.status == "running"
    assert head.steps[-1].output == [2 * PAGE_SIZE + 10]
    assert reads == []
    assert head.steps[3].output == [4] and head.steps[5].output == [6]
    assert len(reads) == 1
    assert head == whole == fold(app.store.read_events(run_id))
    assert len(reads) == 2


def test_a_snapshot_of_an_unchanged_prefix_writes_no_page(
    app: tether.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, epoch = _build(app, 2 * PAGE_SIZE + 10)
    app.load(run_id)
    writes, reads = _spy(monkeypatch, app, "put_blobs"), _spy(monkeypatch, app, "get_blobs")
    _append(app, run_id, epoch, range(2 * PAGE_SIZE + 11, 2 * PAGE_SIZE + 21))
    app.snapshot_every = 5
    head = app.load(run_id)  # folds 10 events onto the snapshot and caches the result
    assert app.store.load(run_id).snapshot.seq == head.seq  # type: ignore[union-attr]
    assert writes == [{}] and reads == []  # no page: the 2 reused ones are only dated
    _append(app, run_id, epoch, range(2 * PAGE_SIZE + 21, 3 * PAGE_SIZE + 1))
    app.load(run_id)
    assert [len(w) for w in writes] == [0, 1] and reads == []  # only the page just filled
    assert app.load(run_id) == fold(app.store.read_events(run_id))


def test_a_format_1_snapshot_still_loads(app: tether.App) -> None:
    run_id, _ = _build(app, 20)
    events = app.store.read_events(run_id)
    old = fold(events[:10])
    app.store.save_snapshot(Snapshot(run_id, old.seq, codec.encode(to_data(old)), T0))
    assert app.load(run_id) == fold(events)


def test_a_worker_claims_a_run_with_several_snapshots_from_the_newest(backend: Any) -> None:
    """A claim reads the run's newest snapshot and the events after it in the same round
    trip (PostgreSQL's claim_fast prefetch): the oldest snapshot, or another run's, or
    the events after the wrong one would replay steps again or lose some."""
    app = tether.open(backend.url, snapshot_every=2)
    try:
        calls: list[str] = []

        @app.agent
        def long(run: tether.Run) -> list[str]:
            out = []
            for gate in ("one", "two", "three"):
                for i in range(3):
                    name = f"{gate}-{i}"
                    out.append(run.step(name, lambda n=name: calls.append(n) or n.replace("-", "")))
                run.approve(gate)
            return out

        other = app.start(long)  # a second run with snapshots of its own, left waiting
        rid = app.start(long)
        for gate in ("one", "two", "three"):
            app.worker().run(until_idle=True, install_signals=False)
            for run_id in (rid, other):
                app.load(run_id)  # folds the log since the last snapshot and caches one
                app.approve(run_id, gate, by="alice")
        app.worker().run(until_idle=True, install_signals=False)
        expected = [f"{g}{i}" for g in ("one", "two", "three") for i in range(3)]
        assert app.get(rid).output == expected and app.get(other).output == expected
        names = [f"{g}-{i}" for g in ("one", "two", "three") for i in range(3)]
        assert sorted(calls) == sorted(names * 2)  # each step of each run ran once
        assert app.store.load(rid).snapshot is not None
    finally:
        app.close()


def test_a_claim_never_reads_another_runs_snapshot(backend: Any) -> None:
    """Beside the run a worker claims, another run has gone further (its newest snapshot
    is at a higher seq than any of this one's) with other steps: a claim that read that
    snapshot for this run would replay the other run's steps as this one's."""
    app = tether.open(backend.url, snapshot_every=2)
    try:
        calls: list[str] = []

        @app.agent
        def busy(run: tether.Run) -> int:
            return sum(run.step(f"busy-{i}", lambda i=i: i) for i in range(12))

        @app.agent
        def gated(run: tether.Run) -> list[str]:
            out = []
            for gate in ("one", "two"):
                name = f"{gate}-step"
                out.append(run.step(name, lambda n=name: calls.append(n) or n))
                run.approve(gate)
            return out

        other = app.start(busy)
        rid = app.start(gated)
        app.worker().run(until_idle=True, install_signals=False)  # busy ends, gated waits
        assert app.get(other).output == sum(range(12))
        for gate in ("one", "two"):
            app.load(rid)  # folds the log since the last snapshot and caches one
            ahead = app.store.load(other).snapshot
            assert ahead is not None and ahead.seq > app.get(rid).seq
            app.approve(rid, gate, by="alice")
            app.worker().run(until_idle=True, install_signals=False)
        assert app.get(rid).output == ["one-step", "two-step"]
        assert calls == ["one-step", "two-step"]  # each step ran once
    finally:
        app.close()
