"""Durable sleep across a restart, signals, and compensation interrupted by SIGKILL."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.acceptance
HERE = Path(__file__).parent

SLEEPER = r"""
import pathlib, sys, threading, tether

class FileClock:
    # The test's clock, shared with the test through a file: now() is the time the file
    # holds; sleep() records what it was asked, then moves the time on (the resume), or
    # blocks for good (the first process, killed mid-sleep).
    def __init__(self, path, block):
        self.path, self.block = pathlib.Path(path), block

    def now(self):
        return float(self.path.read_text())

    def sleep(self, seconds):
        with open(str(self.path) + ".slept", "a") as f:
            f.write(repr(seconds) + "\n")
        if self.block:
            threading.Event().wait()
        self.path.write_text(repr(self.now() + seconds))

app = tether.open(sys.argv[1], clock=FileClock(sys.argv[2], block=sys.argv[3] == "start"))
@app.agent
def nap(run):
    run.step("before", lambda: "x")
    run.sleep("40s", name="nap")
    return "rested"
if __name__ == "__main__":
    h = app.run(nap) if sys.argv[3] == "start" else app.resume(sys.argv[4])
    print(h.output)
"""


def _appears(path: Path, child: subprocess.Popen[bytes]) -> bool:
    """Whether ``path`` holds a whole line while ``child`` lives (bounded: 60 s, a loaded
    machine). Not its mere existence: the child creates the file, then writes the line,
    and a loaded machine can run the test's read in between (it read an empty file)."""
    deadline = time.monotonic() + 60
    while not (path.exists() and path.read_text().endswith("\n")):
        if child.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_durable_sleep_survives_a_restart_and_sleeps_only_the_rest(tmp_path: Path) -> None:
    """A 40 s sleep (in the process: under inline_sleep_max) is killed 10 s in; the resumed
    run sleeps the 30 s left, no more, and wakes at the time the log recorded. The time
    is the test's, shared with the children through a file: nothing waits for real."""
    script, db, now = tmp_path / "sleeper.py", str(tmp_path / "s.db"), tmp_path / "now"
    slept = Path(f"{now}.slept")
    script.write_text(SLEEPER)
    t0 = 1_700_000_000.0
    now.write_text(repr(t0))
    child = subprocess.Popen([sys.executable, str(script), db, str(now), "start"])
    try:
        assert _appears(slept, child), "the child never began its sleep"
    finally:
        child.send_signal(signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    assert slept.read_text().split() == ["40.0"]
    with tether.open(db) as app:
        (record,) = app.runs()
        nap = app.get(record.id).steps[1]
        assert (nap.kind, nap.status, nap.due_at) == ("sleep", "waiting", t0 + 40)
    now.write_text(repr(t0 + 10))  # 10 s pass while nothing runs the agent
    out = subprocess.run(
        [sys.executable, str(script), db, str(now), "resume", record.id],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.strip() == "rested", out.stderr
    assert slept.read_text().split() == ["40.0", "30.0"]  # only what was left
    with tether.open(db) as app:
        state = app.get(record.id)
        nap = state.steps[1]
        assert (nap.status, nap.finished_at, nap.duration) == ("completed", t0 + 40, 30.0)
        assert [s.name for s in state.steps] == ["before", "nap"]


def test_long_sleep_waits_without_a_process(db_path: str) -> None:
    clock = tether.FakeClock()
    app = tether.open(db_path, clock=clock)

    @app.agent
    def agent(run: tether.Run) -> str:
        run.sleep("10m")
        return "awake"

    h = app.run(agent)
    assert h.status == "waiting" and h.waiting is not None and h.waiting["kind"] == "timer"
    record = app.store.get_run(h.id)
    assert record.waiting_for == "timer" and record.lease_owner is None
    assert record.available_at == clock.now() + 600
    clock.advance(420)
    assert app.resume(h.id).output == "awake"
    assert clock.slept == [180.0]  # the remaining time only
    app.close()


def test_signal_sent_before_the_wait_is_kept(db_path: str) -> None:
    app = tether.open(db_path)

    @app.agent
    def agent(run: tether.Run) -> object:
        run.approve("go")
        return run.wait("docs_uploaded", timeout="1h")

    h = app.run(agent)
    assert app.signal(h.id, "docs_uploaded", {"files": 3}, sender="uploader") is False
    app.approve(h.id, "go", by="ops")
    done = app.resume(h.id)
    assert done.status == "completed" and done.output == {"files": 3}
    step = app.get(h.id).steps[-1]
    assert step.kind == "wait" and step.output["sender"] == "uploader"
    app.close()


def test_signal_wakes_a_waiting_run(db_path: str) -> None:
    app = tether.open(db_path)

    @app.agent
    def agent(run: tether.Run) -> object:
        first = run.wait("a")
        second = run.wait("a")
        return [first, second]

    h = app.run(agent)
    assert h.status == "waiting" and app.store.get_run(h.id).waiting_for == "signal:a"
    with pytest.raises(tether.InvalidState, match="waits for signal 'a'"):
        app.resume(h.id)
    assert app.signal(h.id, "a", 1) is True
    assert app.store.get_run(h.id).status == "queued"
    assert app.resume(h.id).status == "waiting"  # the second wait needs a second signal
    app.signal(h.id, "a", 2)
    assert app.resume(h.id).output == [1, 2]
    app.close()


def test_wait_timeout_and_signals_to_finished_or_unknown_runs(db_path: str) -> None:
    clock = tether.FakeClock()
    app = tether.open(db_path, clock=clock)

    @app.agent
    def agent(run: tether.Run) -> str:
        try:
            run.wait("never", timeout="5m")
        except tether.WaitTimeout:
            return "gave up"
        return "got it"

    h = app.run(agent)
    clock.advance(301)
    assert app.resume(h.id).output == "gave up"
    with pytest.raises(tether.InvalidState, match="is completed: a signal 'never' would never"):
        app.signal(h.id, "never", 1)
    with pytest.raises(tether.NotFound):
        app.signal("no-such-run", "x")
    app.close()


def test_bad_durations_are_refused(db_path: str) -> None:
    app = tether.open(db_path)

    @app.agent
    def agent(run: tether.Run) -> None:
        run.sleep("ten minutes")

    with pytest.raises(tether.RunFailed, match="not a duration"):
        app.run(agent)
    app.close()


def test_compensation_runs_in_reverse_and_survives_sigkill(tmp_path: Path) -> None:
    db, saga = str(tmp_path / "saga.db"), str(HERE / "_saga.py")
    first = subprocess.run(
        [sys.executable, saga, db, "start"], capture_output=True, text=True, timeout=60
    )
    assert first.returncode == -signal.SIGKILL, first.stderr
    with tether.open(db) as app:
        rid = app.runs()[0].id
        state = app.get(rid)
        assert state.compensating is not None and state.compensating["reason"] == "failed"
        assert state.status == "running"
    second = subprocess.run(
        [sys.executable, saga, db, "resume", rid], capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 0, second.stderr
    result = json.loads(second.stdout)
    assert result["error"]["type"] == "ZeroDivisionError"
    effects = [line.split()[0] for line in Path(db + ".effects").read_text().splitlines()]
    assert effects == ["do:flight", "do:hotel", "do:car", "undo:car", "undo:hotel", "undo:flight"]
    with tether.open(db) as app:
        state = app.get(rid)
        assert state.status == "failed"
        undos = [
            (s.name, s.status, s.detail and s.detail.get("of"))
            for s in state.steps
            if s.kind == "compensate"
        ]
        assert undos == [
            ("undo:book", "completed", 3),
            ("undo:book", "completed", 2),
            ("undo:book", "completed", 1),
        ]
        car = next(s for s in state.steps if s.kind == "compensate")
        assert car.attempts == 2  # interrupted once, retried with the same key
        with pytest.raises(tether.InvalidState, match="compensated"):
            app.retry_run(rid)
