"""LangGraph on tether with real processes and SIGKILL, on SQLite and PostgreSQL.

- A process killed between a node's writes and the superstep's checkpoint loses nothing:
  resumed from another process, the completed node does not run again, the killed one
  does, and the graph ends with every node's output once.
- Two processes resuming one thread: one wins, the other gets tether.Conflict, and the
  thread holds the winner's writes only.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.integrations.langgraph import TetherSaver

sys.path.insert(0, str(Path(__file__).parent))
import _langgraph

pytestmark = pytest.mark.acceptance
SCRIPT = str(Path(__file__).parent / "_langgraph.py")


def _child(url: str, thread: str, mode: str, ledger: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, SCRIPT, url, thread, mode, str(ledger)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _lines(ledger: Path) -> list[str]:
    return ledger.read_text().split()


def test_a_kill_between_writes_and_checkpoint_loses_nothing(url: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    crashed = _child(url, "t-crash", "crash", ledger)
    crashed.communicate(timeout=60)
    assert crashed.returncode == -signal.SIGKILL
    assert sorted(_lines(ledger)) == ["a", "b"]
    with tether.open(url) as app:  # the thread holds a's writes, no checkpoint after them
        tup = TetherSaver(app).get_tuple({"configurable": {"thread_id": "t-crash"}})
        assert tup is not None
        assert [w[2] for w in tup.pending_writes or [] if w[1] == "log"] == [["a"]]
    resumed = _child(url, "t-crash", "resume", ledger)
    _out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    assert sorted(_lines(ledger)) == ["a", "b", "b", "join"]  # a never ran again
    with tether.open(url) as app:
        saver = TetherSaver(app)
        graph = _langgraph.fanout(saver, str(ledger), "t-crash", crash=False)
        state: Any = graph.get_state({"configurable": {"thread_id": "t-crash"}})
        assert sorted(state.values["log"]) == ["a", "b", "join"]
        assert app.record("t-crash").agent == "langgraph"


def test_two_processes_on_one_thread_one_gets_conflict(url: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    with tether.open(url) as app:  # the thread, paused before `work`
        _langgraph.race(TetherSaver(app), str(ledger)).invoke(
            {"log": []}, {"configurable": {"thread_id": "t-race"}}
        )
        before = len(app.events("t-race"))
    procs = [_child(url, "t-race", "race", ledger) for _ in range(2)]
    outs = [p.communicate(timeout=90) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 3], outs
    loser = next(o for p, o in zip(procs, outs, strict=True) if p.returncode == 3)
    assert "Conflict: thread t-race" in loser[0]
    assert len(_lines(ledger)) == 4  # both ran `work` (two words a line)
    with tether.open(url) as app:
        saver = TetherSaver(app)
        graph = _langgraph.race(saver, str(ledger))
        state: Any = graph.get_state({"configurable": {"thread_id": "t-race"}})
        winner = next(p.pid for p in procs if p.returncode == 0)
        assert state.values["log"] == [f"work {winner}"]
        assert len(app.events("t-race")) > before
