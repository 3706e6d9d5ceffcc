"""A run's log is checked when it is read (issue 25, point 10), on both backends.

One event deleted from the events table used to fold into a state that looked whole
(``show``: "completed, 6 of 6 committed" beside a phantom step). Loading a run now
checks that its seqs are contiguous from the snapshot on and that its row agrees with
its log; a damaged run is reported (RunDamaged, naming the run and the missing seqs),
never resumed as if whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from _conformance import Backend

import tether
from tether.cli.main import main

pytestmark = pytest.mark.conformance


@pytest.fixture
def app(backend: Backend) -> Iterator[tether.App]:
    a = tether.open(backend.url, snapshot_every=4)
    yield a
    a.close()


def delete_event(backend: Backend, run_id: str, seq: int) -> None:
    if backend.name == "sqlite":
        key = f"((SELECT rk FROM runs WHERE id = '{run_id}') << 32) | {seq}"
        backend.sql(f"DELETE FROM events WHERE key = {key}")
    else:
        backend.sql(f"DELETE FROM events WHERE run_id = '{run_id}' AND seq = {seq}")


def six_steps(app: tether.App, calls: list[int]) -> tether.AgentDef:
    @app.agent
    def six(run: tether.Run) -> str:
        for i in range(6):
            run.step(f"s{i}", calls.append, i)
        return "done"

    return six.__tether_agent__  # type: ignore[attr-defined, no-any-return]


def test_a_missing_event_is_reported_not_folded(backend: Backend, app: tether.App) -> None:
    calls: list[int] = []
    run_id = app.run(six_steps(app, calls).fn).id
    delete_event(backend, run_id, 5)  # step s2's completion
    with pytest.raises(tether.RunDamaged) as info:
        app.get(run_id)
    assert info.value.run_id == run_id and info.value.missing == ((5, 5),)
    message = str(info.value)
    assert run_id in message and "seq 5" in message
    assert "backup" in message and f"tether export {run_id}" in message
    assert isinstance(info.value, tether.StoreError)
    with pytest.raises(tether.RunDamaged, match="seq 5"):
        app.history(run_id)
    with pytest.raises(tether.RunDamaged):
        app.resume(run_id)
    assert calls == [0, 1, 2, 3, 4, 5]  # nothing ran again


def test_a_row_that_disagrees_with_its_log(backend: Backend, app: tether.App) -> None:
    calls: list[int] = []
    run_id = app.run(six_steps(app, calls).fn).id
    delete_event(backend, run_id, 9)  # run.completed: the log now ends running
    with pytest.raises(tether.RunDamaged, match="row says completed but its log"):
        app.get(run_id)
    with pytest.raises(tether.RunDamaged):
        app.history(run_id)


def test_a_gap_after_a_snapshot(backend: Backend, app: tether.App) -> None:
    calls: list[int] = []
    run_id = app.run(six_steps(app, calls).fn).id
    app.load(run_id, upto=5)  # folded 5 events (>= snapshot_every): a snapshot at seq 5
    snap = app.store.load(run_id).snapshot
    assert snap is not None and snap.seq == 5
    delete_event(backend, run_id, 6)  # the event right after it
    with pytest.raises(tether.RunDamaged) as info:
        app.load(run_id)
    assert info.value.missing == ((6, 6),)


def test_an_unfinished_run_with_a_gap_is_never_resumed(backend: Backend, app: tether.App) -> None:
    calls: list[int] = []
    d = six_steps(app, calls)

    @app.agent
    def stops(run: tether.Run) -> None:
        run.step("a", calls.append, "a")
        run.step("b", calls.append, "b")
        raise KeyboardInterrupt  # a pause: the run goes back to queued

    del d
    with pytest.raises(KeyboardInterrupt):
        app.run(stops)
    run_id = app.runs(agent="stops")[0].id
    delete_event(backend, run_id, 3)  # step a's completion
    with pytest.raises(tether.RunDamaged, match="seq 3"):
        app.resume(run_id)
    assert calls == ["a", "b"]  # step a did not run again as if never done


def test_show_and_runs_report_a_damaged_run(
    backend: Backend, app: tether.App, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[int] = []
    agent = six_steps(app, calls).fn
    damaged, healthy = app.run(agent).id, app.run(agent).id
    delete_event(backend, damaged, 5)
    assert main(["--db", backend.url, "show", damaged]) == 1
    shown = capsys.readouterr().out
    assert "damaged (its row says completed)" in shown and "seq 5" in shown
    assert main(["--db", backend.url, "runs", "--json"]) == 0
    listed = {r["id"]: r["status"] for r in json.loads(capsys.readouterr().out)}
    assert listed == {damaged: "damaged", healthy: "completed"}
    assert main(["--db", backend.url, "history", damaged]) == 1
    assert "is damaged" in capsys.readouterr().err
