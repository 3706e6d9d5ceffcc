"""Live views in real processes, on both backends: `tether log -f` follows a run that a
worker process executes, step by step (gate files order them); `tether runs --watch`
prints the change of a run's status; Ctrl-C ends both quietly."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.acceptance

# step i waits for the file <db>.gate<i> (60 s bound): the test opens each gate only once
# the follower has printed what came before it
WORKLOAD = """
import os, time, tether
app = tether.open(os.environ["TETHER_TEST_DB"])
gates = os.environ["TETHER_TEST_GATES"]

def gated(i):
    deadline = time.monotonic() + 60
    while not os.path.exists(f"{gates}.gate{i}") and time.monotonic() < deadline:
        time.sleep(0.01)
    return i

@app.agent
def staged(run):
    return sum(run.step(f"s{i}", gated, i) for i in range(3))
"""


class Lines:
    """A process's stdout lines, read in a thread: :meth:`until` waits (60 s bound) for a
    line that passes a test and returns every line read up to it."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.q: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.q.put(line.rstrip("\n"))
        self.q.put(None)

    def until(self, test: Callable[[str], bool]) -> list[str]:
        deadline = time.monotonic() + 60
        while True:
            line = self.q.get(timeout=max(0.0, deadline - time.monotonic()))
            assert line is not None, f"the process ended first; it printed {self.seen}"
            self.seen.append(line)
            if test(line):
                return self.seen

    def rest(self) -> list[str]:
        while (line := self.q.get(timeout=60)) is not None:
            self.seen.append(line)
        return self.seen


def _setup(url: str, tmp_path: Path) -> tuple[dict[str, str], str, str]:
    (tmp_path / "work.py").write_text(WORKLOAD)
    gates = str(tmp_path / "g")
    env = {**os.environ, "TETHER_TEST_DB": url, "TETHER_TEST_GATES": gates, "PYTHONUNBUFFERED": "1"}
    env.pop("TETHER_LOG_FORMAT", None)
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); import work; "
            "print(work.app.start(work.staged))",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return env, gates, made.stdout.strip()


def _tether(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tether.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _completed(name: str) -> Callable[[str], bool]:
    def test(line: str) -> bool:
        e = json.loads(line)
        return e["type"] == "step.completed" and e["data"]["name"] == name

    return test


def test_log_follow_sees_every_event_of_a_run_another_process_executes(
    url: str, tmp_path: Path
) -> None:
    env, gates, run_id = _setup(url, tmp_path)
    follower = _tether(env, "--db", url, "log", "-f", run_id, "--json", "--interval", "0.05")
    lines = Lines(follower)
    lines.until(lambda line: json.loads(line)["type"] == "run.created")  # before any step
    worker = _tether(env, "--app", f"{tmp_path / 'work.py'}:app", "worker", "--until-idle")
    try:
        for i in range(3):
            Path(f"{gates}.gate{i}").touch()
            if i < 2:  # the last step's record shares the run's final commit
                lines.until(_completed(f"s{i}"))
        out = lines.rest()
        assert follower.wait(timeout=60) == 0, follower.stderr.read() if follower.stderr else ""
    finally:
        assert worker.wait(timeout=60) == 0
    followed = [json.loads(line) for line in out]
    app = tether.open(url)
    try:
        written = app.events(run_id)
        assert app.get(run_id).status == "completed"
    finally:
        app.close()
    assert [e["seq"] for e in followed] == [e.seq for e in written]  # every one, in order
    assert [e["type"] for e in followed] == [e.type for e in written]
    assert followed[-1]["type"] == "run.completed"


def test_log_follow_ends_quietly_on_ctrl_c(url: str, tmp_path: Path) -> None:
    env, _, run_id = _setup(url, tmp_path)  # queued: no worker ever takes it
    follower = _tether(env, "--db", url, "log", "--follow", run_id, "--interval", "0.05")
    lines = Lines(follower)
    lines.until(lambda line: "run.created" in line)
    follower.send_signal(signal.SIGINT)
    assert follower.wait(timeout=30) == 130
    assert follower.stderr is not None and follower.stderr.read() == ""


def test_runs_watch_prints_a_status_change(url: str, tmp_path: Path) -> None:
    env, gates, run_id = _setup(url, tmp_path)
    watcher = _tether(env, "--db", url, "runs", "--watch", "--interval", "0.05")
    lines = Lines(watcher)
    lines.until(lambda line: line.startswith(run_id) and " queued " in line)
    for i in range(3):
        Path(f"{gates}.gate{i}").touch()
    worker = _tether(env, "--app", f"{tmp_path / 'work.py'}:app", "worker", "--until-idle")
    assert worker.wait(timeout=60) == 0
    seen = lines.until(lambda line: line.startswith(run_id) and " completed " in line)
    watcher.send_signal(signal.SIGINT)
    assert watcher.wait(timeout=30) == 0
    blocks = [line for line in seen if line.startswith("-- ")]
    assert len(blocks) >= 2  # not a TTY: a new block per change, never the same one twice
    rows = [line for line in seen if line.startswith(run_id)]
    assert len(rows) == len(set(rows)) == len(blocks)
