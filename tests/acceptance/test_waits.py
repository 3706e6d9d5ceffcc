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

SLEEPER = """
import sys, tether
app = tether.open(sys.argv[1])
@app.agent
def nap(run):
    run.step("before", lambda: "x")
    run.sleep("1.5s", name="nap")
    return "rested"
if __name__ == "__main__":
    h = app.run(nap) if sys.argv[2] == "start" else app.resume(sys.argv[3])
    print(h.output)
"""


def test_durable_sleep_survives_a_restart_and_sleeps_only_the_rest(tmp_path: Path) -> None:
    script, db = tmp_path / "sleeper.py", str(tmp_path / "s.db")
    script.write_text(SLEEPER)
    child = subprocess.Popen([sys.executable, str(script), db, "start"])
    until = None
    deadline = time.monotonic() + 20
    while until is None and time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            with tether.open(db) as app:
                runs = app.runs()
                steps = app.get(runs[0].id).steps if runs else ()
                until = next((s.due_at for s in steps if s.kind == "sleep"), None)
        except tether.TetherError:
            continue
    assert until is not None, "the timer never started"
    time.sleep(0.5)
    child.send_signal(signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    with tether.open(db) as app:
        rid = app.runs()[0].id
    t0 = time.time()
    out = subprocess.run(
        [sys.executable, str(script), db, "resume", rid], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0 and out.stdout.strip() == "rested", out.stderr
    with tether.open(db) as app:
        state = app.get(rid)
        nap = next(s for s in state.steps if s.kind == "sleep")
        assert nap.status == "completed" and nap.finished_at is not None
        assert nap.finished_at >= until  # it did not wake early
        assert nap.duration is not None and nap.duration < 1.2  # only what was left
        assert nap.finished_at - t0 < 1.4
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
