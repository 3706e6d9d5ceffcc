"""Export and import: a run moves to another database with identical events and state;
a damaged or foreign file is refused naming the line."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _timetravel_agents import execute, finish, programs, register
from hypothesis import HealthCheck, given, settings

import tether
from tether.services.export import FORMAT, FORMAT_VERSION

pytestmark = pytest.mark.integration


def _key(e: tether.Event) -> tuple[Any, ...]:
    return (e.seq, e.type, e.data, e.at, e.actor)


def _export(app: tether.App, run_id: str) -> str:
    buf = io.StringIO()
    app.export_run(run_id, buf)
    return buf.getvalue()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs)
def test_round_trip_gives_identical_events_and_state(program: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        source = tether.open(f"{folder}/a.db", snapshot_every=3, clock=tether.FakeClock())
        target = tether.open(f"{folder}/b.db", snapshot_every=3)
        run_id = execute(source, register(source), program)
        text = _export(source, run_id)
        assert target.import_run(io.StringIO(text)) == run_id
        assert [_key(e) for e in target.events(run_id)] == [_key(e) for e in source.events(run_id)]
        assert target.load(run_id) == source.load(run_id)
        for field in ("agent", "version", "status", "code", "updated_at", "parent_id"):
            assert getattr(target.store.get_run(run_id), field) == getattr(
                source.store.get_run(run_id), field
            )
        copy = target.import_run(text.splitlines(), new_id=True)
        assert copy != run_id
        assert replace(target.load(copy), run_id=run_id) == source.load(run_id)
        source.close()
        target.close()


def test_an_exported_paused_run_resumes_in_the_other_database(tmp_path: Path) -> None:
    with tether.open(str(tmp_path / "a.db")) as a, tether.open(str(tmp_path / "b.db")) as b:
        program = [("step", 1), ("pause", 2), ("step", 3)]
        try:
            a.run(register(a), program)
            raise AssertionError("the pause step interrupts the first execution")
        except KeyboardInterrupt:
            pass
        run_id = a.runs()[0].id
        b.import_run(io.StringIO(_export(a, run_id)))
        register(b)
        handle = finish(b, run_id)
        assert handle.output == {"n": 3} and [p for p, _ in handle.reused] == [1]
        assert a.load(run_id).status == "queued"  # the source is untouched


def test_the_header_names_the_format_and_the_run(app: tether.App) -> None:
    @app.agent
    def one(run: tether.Run) -> int:
        return int(run.step("s", lambda: 1))

    run_id = app.run(one).id
    lines = _export(app, run_id).splitlines()
    header = json.loads(lines[0])
    assert (header["format"], header["version"], header["tether"]) == (
        FORMAT,
        FORMAT_VERSION,
        tether.__version__,
    )
    assert header["events"] == len(lines) - 1 == 4
    assert header["run"]["id"] == run_id and "lease_owner" not in header["run"]
    assert json.loads(lines[3]) == {
        "seq": 3,
        "type": "step.completed",
        "data": json.loads(app.events(run_id)[2].data),
        "at": app.events(run_id)[2].at,
        "actor": app.events(run_id)[2].actor,
    }


@pytest.fixture
def exported(app: tether.App) -> list[str]:
    @app.agent
    def two(run: tether.Run) -> int:
        run.step("a", lambda: 1)
        return int(run.step("b", lambda: 2))

    return _export(app, app.run(two).id).splitlines()


def _refused(app: tether.App, lines: list[str], message: str) -> None:
    before = app.runs()
    with pytest.raises(ValueError, match=message):
        app.import_run(lines, source="run.jsonl")
    assert app.runs() == before


def test_a_run_exported_while_active_is_imported_queued(app: tether.App) -> None:
    @app.agent
    def paused(run: tether.Run) -> None:
        run.step("a", lambda: 1)
        raise KeyboardInterrupt  # a crash-like exit: the log ends queued (suspended)

    with pytest.raises(KeyboardInterrupt):
        app.run(paused)
    lines = _export(app, app.runs()[0].id).splitlines()
    for status in ("running", "waiting", "queued"):
        header = lines[0].replace('"status":"queued"', f'"status":"{status}"')
        run_id = app.import_run([header, *lines[1:]], new_id=True)
        assert app.store.get_run(run_id).status == "queued"
        assert app.store.get_run(run_id).lease_owner is None


def test_a_row_that_disagrees_with_its_log_is_refused(app: tether.App, exported: list[str]) -> None:
    header = exported[0].replace('"status":"completed"', '"status":"running"')
    _refused(app, [header, *exported[1:]], "'run.status' is 'running' but the log says")


def test_a_duplicate_id_is_refused_with_a_way_out(app: tether.App, exported: list[str]) -> None:
    with pytest.raises(
        tether.Conflict, match="already exists in this store; import it with --new-id"
    ):
        app.import_run(exported)
    assert app.import_run(exported, new_id=True) != json.loads(exported[0])["run"]["id"]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda ls: [], "run.jsonl is empty"),
        (lambda ls: ls[1:], "run.jsonl line 1: not a tether run export"),
        (lambda ls: ["{not json", *ls[1:]], "run.jsonl line 1: not JSON"),
        (
            lambda ls: [ls[0].replace('"version":1', '"version":2'), *ls[1:]],
            "line 1: export format version 2 is not one this tether reads",
        ),
        (
            lambda ls: [ls[0], ls[1], ls[3], *ls[4:]],
            "line 3: seq 3 where seq 2 was expected; a run's events are contiguous",
        ),
        (lambda ls: [*ls[:-1]], "the header announces 5 events but the file holds 4"),
        (
            lambda ls: [*ls[:2], '{"seq": 2, "type": "x"}', *ls[3:]],
            r"line 3 \(seq 2\): field 'type': 'x' is not an event type",
        ),
        (lambda ls: [*ls[:2], "[1, 2]", *ls[3:]], "line 3: expected a JSON object"),
        (
            lambda ls: [*ls[:2], ls[2].replace('"data":{', '"data":{"x":NaN,'), *ls[3:]],
            "line 3: not JSON .NaN is not a JSON number",
        ),
        (
            lambda ls: [ls[0].replace('"run":', '"row":'), *ls[1:]],
            'line 1: the header has no "run" object',
        ),
    ],
)
def test_a_damaged_export_is_refused_naming_the_line(
    app: tether.App, exported: list[str], damage: Any, message: str
) -> None:
    fresh = [ln.replace(json.loads(exported[0])["run"]["id"], "other-id") for ln in exported]
    _refused(app, damage(fresh), message)


def test_events_without_their_fields_are_refused(app: tether.App, exported: list[str]) -> None:
    event = json.loads(exported[3])
    del event["data"]["pos"]
    lines = [
        exported[0].replace('"id":"', '"id":"x'),
        *exported[1:3],
        json.dumps(event),
        *exported[4:],
    ]
    _refused(app, lines, r"line 4 \(seq 3\): field 'data.pos': a step.completed event needs it")


@pytest.mark.parametrize(
    ("kind", "fields"),
    [
        ("tool.in_doubt", {"key": "k"}),
        ("tool.resolved", {"key": "k", "happened": True, "result": 1, "by": "ann"}),
        ("approval.decided", {"approved": True, "by": "ann", "reason": None}),
    ],
)
def test_an_outcome_without_its_intent_or_request_is_refused(
    app: tether.App, exported: list[str], kind: str, fields: dict[str, Any]
) -> None:
    """A doubt, a resolution or a decision at a position no tool intent or approval
    request opened: a log tether never writes (its fold cannot know the step's kind)."""
    event = json.loads(exported[3])  # the step at position 1
    event.update(type=kind, data={"pos": 1, "name": "a", **fields})
    lines = [exported[0].replace('"id":"', '"id":"y'), *exported[1:3], json.dumps(event)]
    _refused(app, [*lines, *exported[4:]], "the events do not fold into a run state")


def _cli(db: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
    )


def test_export_and_import_on_the_command_line(
    tmp_path: Path, exported: list[str], db_path: str
) -> None:
    run_id = json.loads(exported[0])["run"]["id"]
    out = _cli(Path(db_path), "export", run_id)
    assert out.returncode == 0 and out.stdout.splitlines()[1:] == exported[1:]
    file = tmp_path / "run.jsonl"
    assert _cli(Path(db_path), "export", run_id, "-o", str(file)).returncode == 0
    other = tmp_path / "other.db"  # import creates the database
    assert _cli(other, "import", str(file)).stdout.strip() == run_id
    again = _cli(other, "import", str(file))
    assert again.returncode == 1 and "already exists" in again.stderr
    fresh = _cli(other, "import", "-", "--new-id", "--json", stdin=file.read_text())
    assert json.loads(fresh.stdout)["id"] != run_id
    bad = _cli(other, "import", str(tmp_path / "missing.jsonl"))
    assert bad.returncode == 1 and "cannot read" in bad.stderr
    file.write_text(file.read_text().replace('"seq":2', '"seq":7'))
    damaged = _cli(other, "import", str(file), "--new-id")
    assert damaged.returncode == 1 and f"{file} line 3: seq 7" in damaged.stderr


def test_export_lines_survive_any_line_splitter(app: tether.App, tmp_path: Path) -> None:
    @app.agent
    def odd(run: tether.Run) -> str:
        return str(run.step("s", lambda: "a\u2028b\x85c\rd é"))

    run_id = app.run(odd).id
    text = _export(app, run_id)
    assert text.isascii() and len(text.splitlines()) == 1 + len(app.events(run_id))
    with tether.open(str(tmp_path / "b.db")) as other:
        other.import_run(text.splitlines())
        assert [e.data for e in other.events(run_id)] == [e.data for e in app.events(run_id)]


def test_a_stream_without_newlines_is_refused_without_reading_it_all(
    app: tether.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file's own line iteration reads a line whole: /dev/zero (no newline, no end)
    was read until memory ran out. Lines are read MAX_LINE characters at a time."""
    monkeypatch.setattr("tether.services.export.MAX_LINE", 4096)
    before = len(app.runs())
    with open("/dev/zero") as endless, pytest.raises(ValueError, match="line 1: more than 4096"):
        app.import_run(endless, source="/dev/zero")
    with pytest.raises(ValueError, match="line 1: more than 4096"):
        app.import_run(io.StringIO("x" * 10_000), source="<x>")
    assert len(app.runs()) == before  # nothing written
