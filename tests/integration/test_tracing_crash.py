"""A run killed (SIGKILL) in one process and resumed in another is one trace: the second
execution's root span is a child of the first's (whose context the run stored), and the
steps the log answers are spans marked ``tether.replayed``, not timed again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

AGENT = Path(__file__).with_name("_traced_agent.py")


def _spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_run_resumed_in_another_process_continues_its_trace(tmp_path: Path) -> None:
    db, gate = str(tmp_path / "t.db"), tmp_path / "gate"
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    child = subprocess.Popen([sys.executable, str(AGENT), db, str(first), str(gate), "start"])
    try:
        deadline = time.monotonic() + 60
        while not gate.exists() or not gate.read_text():
            assert child.poll() is None, "the first process ended before its third step"
            assert time.monotonic() < deadline, "the first process never reached step c"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    run_id = gate.read_text()
    resumed = subprocess.run(
        [sys.executable, str(AGENT), db, str(second), str(gate), "resume", run_id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "abc"

    before, after = _spans(first), _spans(second)
    # the first process exported its finished steps; its root span died with it
    assert [s["name"] for s in before] == ["step a", "step b"]
    assert all(s["attributes"]["tether.replayed"] is False for s in before)
    assert [s["name"] for s in after] == ["step a", "step b", "step c", "invoke_agent pipeline"]
    trace_ids = {s["context"]["trace_id"] for s in before + after}
    assert len(trace_ids) == 1  # one trace across both processes
    root = after[-1]
    assert root["attributes"]["tether.run.id"] == run_id
    lost_root = before[0]["parent_id"]  # the first execution's root (never exported)
    assert root["parent_id"] == lost_root
    a, b, c = after[:3]
    assert a["attributes"]["tether.replayed"] is True
    assert b["attributes"]["tether.replayed"] is True
    assert a["start_time"] == a["end_time"] and b["start_time"] == b["end_time"]
    assert c["attributes"]["tether.replayed"] is False
    assert c["attributes"]["tether.attempt"] == 1  # its attempt in the dead process: unrecorded
    for s in after[:3]:
        assert s["parent_id"] == root["context"]["span_id"]
