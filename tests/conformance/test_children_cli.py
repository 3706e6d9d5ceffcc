"""`tether show` lists a run's child runs with their status; `tether runs --tree` shows
runs with their children indented under them and the usage and cost of each tree
(issue 31). On both backends."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

import tether
from tether.cli.main import main
from tether.engine.children import child_id

pytestmark = pytest.mark.conformance


def _think(cost: float) -> dict[str, Any]:
    return {"text": "x", "usage": {"input_tokens": 10, "output_tokens": 5, "cost": cost}}


def _tree(app: tether.App) -> str:
    @app.agent
    def leaf(run: tether.Run, cost: float) -> Any:
        return run.llm("think", _think, cost)

    @app.agent
    def middle(run: tether.Run, cost: float) -> Any:
        run.llm("plan", _think, cost)
        return run.join([run.child(leaf, cost), run.child(leaf, cost * 2)])

    @app.agent
    def root(run: tether.Run) -> Any:
        return run.join([run.child(middle, 0.01), run.child(middle, 0.1)])

    rid = app.start(root)
    assert app.worker(queues=["default"]).run(until_idle=True, install_signals=False).errors == []
    assert app.get(rid).status == "completed"
    return rid


def test_show_lists_the_children_and_runs_tree_adds_up_the_tree(
    app: tether.App, backend: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    rid = _tree(app)
    m1, m2 = child_id(rid, 1), child_id(rid, 2)

    assert main(["--db", backend.url, "show", rid]) == 0
    out = capsys.readouterr().out
    kids = out.split("children:\n", 1)[1].splitlines()
    assert kids[0].split() == ["ID", "AGENT", "STATUS", "IN", "OUT", "COST"]
    assert [line.split()[:3] for line in kids[1:]] == [
        [m1, "middle", "completed"],
        [m2, "middle", "completed"],
    ]
    assert main(["--db", backend.url, "show", m1, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(c["id"], c["status"]) for c in shown["children"]] == [
        (child_id(m1, 2), "completed"),
        (child_id(m1, 3), "completed"),
    ]

    assert main(["--db", backend.url, "runs", "--tree"]) == 0
    lines = capsys.readouterr().out.splitlines()
    ids = [
        line.split()[0] if not line.startswith(("└", " ")) else line.split("└ ")[1].split()[0]
        for line in lines[1:]
    ]
    assert ids == [rid, m1, child_id(m1, 2), child_id(m1, 3), m2, child_id(m2, 2), child_id(m2, 3)]
    assert lines[2].startswith("└ ") and lines[3].startswith("  └ ")
    assert lines[1].split()[-3:] == [
        "7",
        str(6 * 15),
        "$0.4400",
    ]  # 6 model calls: .01+.01+.02 + .1+.1+.2

    assert main(["--db", backend.url, "runs", "--tree", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["depth"] for r in rows] == [0, 1, 2, 2, 1, 2, 2]
    assert rows[0]["tree"]["calls"] == 6 and rows[0]["tree"]["cost"] == pytest.approx(0.44)
    assert rows[0]["cost"] == 0 and rows[1]["cost"] == pytest.approx(0.01)


def test_inline_children_are_in_the_tree_recorded_or_waited_for(
    app: tether.App, backend: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    @app.agent
    def leaf(run: tether.Run, cost: float) -> Any:
        return run.llm("think", _think, cost)

    @app.agent
    def asker(run: tether.Run) -> Any:
        return run.wait("answer")

    @app.agent
    def root(run: tether.Run) -> Any:
        return [run.child(leaf, 0.01, inline=True), run.child(asker, inline=True)]

    rid = app.run(root).id  # the first child recorded, the parent waits for the second
    done, waiting = child_id(rid, 1), child_id(rid, 2)
    assert main(["--db", backend.url, "show", rid, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(c["id"], c["status"]) for c in shown["children"]] == [
        (done, "completed"),
        (waiting, "waiting"),
    ]
    assert main(["--db", backend.url, "runs", "--tree"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[1] for ln in lines if ln.startswith("└")] == [done, waiting]


def test_an_inline_child_executing_now_is_in_the_tree_and_in_show(
    app: tether.App, backend: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The parent's log records an inline child once it ended: while it executes, the
    views find it by its id (``{parent}~{position}``), once it is created: with its first
    write, or after births.VISIBLE_WITHIN seconds of execution (the lease keeper's thread)."""
    inside, release = threading.Event(), threading.Event()

    @app.agent
    def slow(run: tether.Run) -> int:
        inside.set()
        return int(run.step("wait", lambda: 1 if release.wait(10) else 0))

    @app.agent
    def caller(run: tether.Run) -> int:
        return int(run.child(slow, inline=True))

    rid = app.start(caller)
    worker = threading.Thread(target=lambda: app.resume(rid))
    worker.start()
    try:
        assert inside.wait(10)
        kid = child_id(rid, 1)
        deadline = time.monotonic() + 10
        while not app.runs(agent="slow") and time.monotonic() < deadline:
            time.sleep(0.05)  # created within VISIBLE_WITHIN (1 s) and a heartbeat's tick
        assert main(["--db", backend.url, "runs", "--tree", "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        # (the parent's status is its log's: its start is recorded with its first commit)
        assert [(r["id"], r["status"], r["depth"]) for r in rows] == [
            (rid, str(app.get(rid).status), 0),
            (kid, "running", 1),
        ]
        assert rows[0]["children"] == 1
        assert main(["--db", backend.url, "show", rid, "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert [(c["id"], c["status"]) for c in shown["children"]] == [(kid, "running")]
    finally:
        release.set()
        worker.join(10)
    assert app.get(rid).status == "completed"
    assert main(["--db", backend.url, "runs", "--tree", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["id"], r["status"]) for r in rows] == [(rid, "completed"), (kid, "completed")]
