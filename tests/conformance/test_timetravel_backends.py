"""Time travel on every backend: forks, points, export/import and gc need nothing from a
Store beyond its protocol (forks are ``create_run`` with a copied prefix)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import replace

import pytest
from _conformance import Backend

import tether
from tether.model.state import fold

pytestmark = pytest.mark.conformance


@pytest.fixture
def app(backend: Backend) -> Iterator[tether.App]:
    a = tether.open(backend.url, snapshot_every=2)
    yield a
    a.close()


def _agent(app: tether.App) -> object:
    @app.agent
    def styled(run: tether.Run, n: int) -> list[str]:
        run.vars["style"] = "draft"
        return [run.step(f"s{i}", lambda i: f"{run.vars['style']}{i}", i) for i in range(n)]

    return styled


def test_fork_copies_the_prefix_and_resumes_from_it(app: tether.App) -> None:
    parent = app.run(_agent(app), 5).id
    events = app.events(parent)
    for k in range(len(events) + 1):
        assert app.state(parent, at=k) == fold(events[:k], run_id=parent)
    child = app.fork(parent, step=3, vars={"style": "final"})
    copied = app.events(child)
    seq = app.state(parent, step=3).seq
    assert [(e.seq, e.type, e.data, e.at) for e in copied[:seq]] == [
        (e.seq, e.type, e.data, e.at) for e in events[:seq]
    ]
    assert app.load(child) == fold(copied, run_id=child)
    handle = app.resume(child)
    assert handle.output == ["draft0", "draft1", "final2", "final3", "final4"]
    assert [p for p, _ in handle.reused] == [1, 2, 3]
    assert {c.where for c in app.diff(parent, child).changes} >= {"vars.style", "output[4]"}


def test_export_import_and_gc(app: tether.App, backend: Backend) -> None:
    run_id = app.run(_agent(app), 3).id
    text = io.StringIO()
    app.export_run(run_id, text)
    copy = app.import_run(io.StringIO(text.getvalue()), new_id=True)
    assert replace(app.load(copy), run_id=run_id) == app.load(run_id)
    with pytest.raises(tether.Conflict, match="already exists"):
        app.import_run(io.StringIO(text.getvalue()))
    child = app.fork(run_id, step=2)
    result = app.gc(status=["completed"])
    assert set(result.run_ids) == {run_id, copy} and result.deleted == 2
    assert backend.sql("SELECT COUNT(*) FROM events") == [(len(app.events(child)),)]
    assert backend.sql(f"SELECT COUNT(*) FROM snapshots WHERE run_id <> '{child}'") == [(0,)]
    assert app.store.read_events(run_id) == [] and app.store.read_events(copy) == []
    assert app.resume(child).output == ["draft0", "draft1", "draft2"]
