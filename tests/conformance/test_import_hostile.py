"""`tether import` refuses hostile files (issue 25, point 9), on both backends.

A corpus of crafted export files, each a case: every one is refused cleanly (a
ValueError naming the line and the field, nothing written) or accepted as the import's
docstring documents (the row derived from the log; owner, session and leases never
taken from the file). Before, 3 of 30 crashed (InvalidOperation, MemoryError for
``pos: 10**9``, IndexError) and 16 were accepted as written.
"""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _conformance import Backend

import tether

pytestmark = pytest.mark.conformance

File = tuple[dict[str, Any], list[dict[str, Any]]]  # the header, the events


@pytest.fixture(scope="module")
def genuine(tmp_path_factory: pytest.TempPathFactory) -> File:
    """A genuine export: a run with a step, a write tool, a variable and a decision."""
    with tether.open(str(tmp_path_factory.mktemp("src") / "src.db")) as app:

        @app.tool(risk="write")
        def charge(n: int, *, idempotency_key: str) -> int:
            return n

        @app.agent
        def order(run: tether.Run, n: int) -> int:
            run.step("price", lambda: n * 2)
            run.tool(charge, n)
            run.vars["paid"] = True
            run.decide("ship", choice="now", why="paid")
            return n

        buf = io.StringIO()
        app.export_run(app.run(order, 3).id, buf)
    header, *events = [json.loads(line) for line in buf.getvalue().splitlines()]
    header["run"]["id"] = "imported-run"
    return header, events


def at(events: list[dict[str, Any]], type_: str) -> dict[str, Any]:
    return next(e for e in events if e["type"] == type_)


def retitle(f: File) -> File:
    """Keep the header's event count true after removing or adding events."""
    f[0]["events"] = len(f[1])
    for i, e in enumerate(f[1], 1):
        e["seq"] = i
    return f


def truncated_running(f: File) -> File:
    f[1].pop()  # run.completed: the log now ends running, the header says completed
    return retitle(f)


def swap_first(f: File) -> File:
    f[1][0], f[1][1] = f[1][1], f[1][0]
    return retitle(f)


DEEP = "<a value nested 100000 deep>"


def setp(path: str, value: Any) -> Callable[[File], File]:
    """Set ``header.a.b`` or ``TYPE.a.b`` (the first event of that type) to ``value``."""

    def apply(f: File) -> File:
        where, *keys = path.split(".")
        target: Any = f[0] if where == "header" else at(f[1], where.replace("~", "."))
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value
        return f

    return apply


# (name, change, expected): "refused: REGEX" or "accepted"
CASES: list[tuple[str, Callable[[File], File], str]] = [
    ("status pwned", setp("header.run.status", "pwned"), r"refused: 'run.status' is 'pwned'"),
    ("completed row over a running log", truncated_running, r"refused: 'run.status'"),
    ("id with NUL", setp("header.run.id", "a\x00b"), r"refused: line 1: field 'run.id'"),
    ("id with a newline", setp("header.run.id", "a\nb"), r"refused: 'run.id'"),
    ("id ../", setp("header.run.id", "../../etc/passwd"), r"refused: 'run.id'"),
    ("id of 1 MB", setp("header.run.id", "x" * 2**20), r"refused: 'run.id'"),
    ("empty id", setp("header.run.id", ""), r"refused: 'run.id'"),
    ("at 1e308", setp("step~completed.at", 1e308), r"refused: line 4 \(seq 3\): field 'at'"),
    ("at negative", setp("run~created.at", -1), r"refused: line 2 \(seq 1\): field 'at'"),
    ("at a string", setp("run~created.at", "now"), r"refused: field 'at'"),
    ("pos 10**9", setp("step~completed.data.pos", 10**9), r"refused: field 'data.pos'"),
    ("pos 0", setp("step~completed.data.pos", 0), r"refused: field 'data.pos'"),
    ("pos a string", setp("step~completed.data.pos", "1"), r"refused: field 'data.pos'"),
    ("seq gap", setp("var~set.seq", 99), r"refused: seq 99 where seq \d+ was expected"),
    ("announces more", setp("header.events", 50), r"refused: announces 50 events"),
    ("announces 10**12", setp("header.events", 10**12), r"refused: field \"events\""),
    ("unknown type", setp("decision.type", "run.pwned"), r"refused: field 'type'"),
    (
        "Decimal that is not one",
        setp("step~completed.data.output", {"$t": "decimal", "v": "x"}),
        r"refused: field 'data': a tagged value does not decode",
    ),
    (
        "bytes that are not base64",
        setp("step~completed.data.output", {"$t": "bytes", "v": "abc"}),
        r"refused: does not decode",
    ),
    (
        "dict tag with a list key",
        setp("step~completed.data.output", {"$t": "dict", "v": [[{"a": 1}, 2]]}),
        r"refused: does not decode",
    ),
    (
        "an unknown tag",
        setp("run~completed.data.output", {"$t": "pickle", "v": "gASV"}),
        r"refused: does not decode",
    ),
    (
        "unpaired surrogate",
        setp("step~completed.data.output", "\ud800"),
        r"refused: unpaired surrogate",
    ),
    ("nested 100000 deep", setp("run~completed.data.output", DEEP), r"refused: nested too deep"),
    ("first event not run.created", swap_first, r"refused: starts with its one run.created"),
    (
        "a second run.created",
        setp("decision.type", "run.created"),
        r"refused: field 'data.agent'",
    ),
    ("agent differs", setp("header.run.agent", "refund_all"), r"refused: 'run.agent'"),
    (
        "code differs",
        setp("header.run.code", {"module": "os", "qualname": "system"}),
        r"refused: 'run.code'",
    ),
    ("spoofed parent", setp("header.run.parent_id", "victim"), r"refused: 'run.parent_id'"),
    ("spoofed owner", setp("header.run.owner", "tenant-b"), "accepted"),
    ("spoofed session", setp("header.run.session_id", "s-victim"), "accepted"),
    ("a lease", setp("header.run.lease_owner", "worker:elsewhere"), "accepted"),
    ("unknown row field", setp("header.run.admin", True), r"refused: unknown fields"),
    ("unknown event field", setp("decision.sudo", 1), r"refused: unknown fields"),
    ("actor with NUL", setp("decision.actor", "a\x00"), r"refused: field 'actor'"),
    ("format version 10**100", setp("header.version", 10**100), r"refused: version"),
    ("version true", setp("header.version", True), r"refused: version"),
    ("priority 2**64", setp("header.run.priority", 2**64), r"refused: 'run.priority'"),
    ("queue with NUL", setp("run~created.data.queue", "q\x00"), r"refused: 'data.queue'"),
    ("var key with a newline", setp("var~set.data.key", "a\nb"), r"refused: 'data.key'"),
    (
        "usage of -1 tokens",
        setp("step~completed.data.usage", {"input_tokens": -1}),
        r"refused: 'data.usage'",
    ),
    ("risk nuclear", setp("tool~intent.data.risk", "nuclear"), r"refused: 'data.risk'"),
    ("attempt -1", setp("tool~intent.data.attempt", -1), r"refused: 'data.attempt'"),
    ("duration -5", setp("step~completed.data.duration", -5), r"refused: 'data.duration'"),
    ("data a list", setp("decision.data", [1]), r"refused: field 'data'"),
    ("input not args", setp("run~created.data.input", {"args": 1}), r"refused: 'data.input'"),
    (
        "a module to import (data only)",
        lambda f: setp("header.run.code", {"module": "evil", "qualname": "x"})(
            setp("run~created.data.code", {"module": "evil", "qualname": "x"})(f)
        ),
        "accepted",
    ),
]


@pytest.fixture
def app(backend: Backend) -> Iterator[tether.App]:
    a = tether.open(backend.url)
    yield a
    a.close()


def lines_of(f: File) -> list[str]:
    deep = "[" * 100_000 + "]" * 100_000  # json.dumps cannot write it: spliced in as text
    return [json.dumps(v).replace(json.dumps(DEEP), deep) for v in (f[0], *f[1])]


@pytest.mark.parametrize(("name", "change", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_hostile_file_is_refused_or_accepted_as_documented(
    app: tether.App, genuine: File, name: str, change: Callable[[File], File], expected: str
) -> None:
    lines = lines_of(change(copy.deepcopy(genuine)))
    if expected == "accepted":
        run_id = app.import_run(lines, source="hostile.jsonl")
        row = app.store.get_run(run_id)
        assert (row.owner, row.session_id, row.lease_owner, row.parent_id) == (None,) * 4
        assert row.status == "completed" and app.get(run_id).status == "completed"
        return
    pattern = expected.removeprefix("refused: ")
    with pytest.raises(ValueError, match=pattern) as info:
        app.import_run(lines, source="hostile.jsonl")
    assert not isinstance(info.value, RecursionError | MemoryError)
    assert str(info.value).startswith("hostile.jsonl"), str(info.value)
    assert len(str(info.value)) < 1000  # a 1 MB value is not echoed whole
    assert app.runs() == []  # nothing written, not even in part


def test_the_corpus_is_large_and_the_genuine_file_imports(app: tether.App, genuine: File) -> None:
    assert len(CASES) >= 30
    counts = {"refused": 0, "accepted": 0}
    for _, _, expected in CASES:
        counts[expected.split(":")[0]] += 1
    print(f"hostile import corpus: {len(CASES)} files, {counts}")
    run_id = app.import_run(lines_of(copy.deepcopy(genuine)))
    assert app.get(run_id).output == 3


def test_show_never_crashes_on_an_imported_run(
    app: tether.App, genuine: File, capsys: pytest.CaptureFixture[str], backend: Backend
) -> None:
    from tether.cli.main import main

    run_id = app.import_run(lines_of(copy.deepcopy(genuine)))
    for command in ("show", "log", "history"):
        assert main(["--db", backend.url, command, run_id]) == 0
    assert "completed" in capsys.readouterr().out
