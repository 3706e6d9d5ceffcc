"""`tether revert` from processes of its own, on SQLite and PostgreSQL: one effect of a
completed run undone, the revert SIGKILLed between its undo's intent and its end and
finished by the same command (the undo took effect once, the other effects untouched,
history, diff and show tell), a revert refused while another process holds the run, and
every refusal with exit code 2, its reason, and nothing written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.acceptance

HERE = Path(__file__).parent
HELPER = HERE / "_revert.py"


def _env(url: str, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TETHER_URL": url,
        "REVERT_LOG": str(tmp_path / "effects.log"),
        "REVERT_HOLD": str(tmp_path / "hold"),
        "TETHER_DB": "",
    }


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tether.cli", "--app", f"{HELPER}:app", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


def _start(env: dict[str, str], *which: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(HELPER), *which], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def _log(tmp_path: Path) -> list[list[str]]:
    return [line.split() for line in (tmp_path / "effects.log").read_text().splitlines()]


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the undo never reached its hold"
        time.sleep(0.02)


def test_a_revert_killed_midway_finishes_once_and_leaves_the_rest(url: str, tmp_path: Path) -> None:
    env = _env(url, tmp_path)
    rid = _start(env)
    with tether.open(url) as app:
        before = app.get(rid)
    assert before.status == "completed"
    keys = [s.key for s in before.steps[:3]]
    hold = tmp_path / "hold"
    hold.touch()
    cmd = [sys.executable, "-m", "tether.cli", "--app", f"{HELPER}:app"]
    first = subprocess.Popen(
        [*cmd, "revert", rid, "--step", "2", "--by", "alice", "--reason", "hotel full"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(tmp_path / "hold.reached", first)
    # while it holds the run (its lease), another process's revert is refused
    busy = _cli(env, "revert", rid, "--step", "3", "--by", "bob")
    assert busy.returncode == 2, busy.stderr
    assert "is executing in" in busy.stderr and "a revert would race" in busy.stderr
    first.send_signal(signal.SIGKILL)
    first.communicate()
    assert first.returncode == -signal.SIGKILL
    with tether.open(url) as app:
        pending = app.get(rid).revert_of(2)
        assert pending is not None and pending.status == "running"  # intent, no end
        assert app.effect(keys[1]).status == "compensating"  # type: ignore[union-attr]
    pending_show = _cli(env, "show", rid)
    assert (
        f"running: hotel full (`tether revert {rid} --step 2` finishes it)" in pending_show.stdout
    )
    assert "completed, reverting" in pending_show.stdout
    hold.unlink()
    again = _cli(env, "revert", rid, "--step", "2", "--by", "alice")
    assert again.returncode == 0, again.stderr
    assert "finished the revert a crash interrupted" in again.stdout
    log = _log(tmp_path)
    undos = [line for line in log if line[0] == "undo"]
    calls = [line for line in log if line[0] == "call"]
    assert len(undos) == 1 and undos[0][1] == "hotel"  # took effect exactly once
    assert len(calls) == 2 and calls[0] == calls[1]  # called again with the same key
    assert undos[0][2] == calls[0][2] and undos[0][2].startswith(f"{rid}:2:undo:book:")
    with tether.open(url) as app:
        after = app.get(rid)
        assert after.status == "completed" and after.output == before.output
        assert after.steps == before.steps  # effects 1 and 3 untouched, nothing else moved
        statuses = [app.effect(k).status for k in keys]  # type: ignore[union-attr]
        assert statuses == ["completed", "compensated", "completed"]
        (r,) = after.reverts
        assert (r.status, r.attempts, r.key) == ("completed", 2, undos[0][2])
        assert r.detail is not None and r.detail["by"] == "alice"
    history = _cli(env, "history", rid)
    assert history.returncode == 0, history.stderr
    assert f"revert of 2 undo:book by alice, key {rid}:2:undo:book:" in history.stdout
    assert "completed, reverted" in history.stdout
    diff = _cli(env, "diff", f"{rid}:3", rid)
    assert diff.returncode == 0, diff.stderr
    assert "+ reverts[2]:" in diff.stdout
    show = _cli(env, "show", rid)
    assert "completed, reverted" in show.stdout and "2 by alice" in show.stdout
    assert show.stdout.count("reverted") == 2  # the step's status, the header line


def _refused(env: dict[str, str], url: str, rid: str, *args: str, says: str) -> None:
    with tether.open(url) as app:
        seq = app.get(rid).seq if rid != "r-unknown" else None
    proc = _cli(env, "revert", rid, *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    if seq is not None:
        with tether.open(url) as app:
            assert app.get(rid).seq == seq  # nothing written


def test_every_refusal_exits_2_with_its_reason(url: str, tmp_path: Path) -> None:
    env = _env(url, tmp_path)
    rid = _start(env)
    by = ("--by", "alice")
    _refused(env, url, rid, "--step", "5", *by, says="is a step step, not a call of a write tool")
    _refused(env, url, rid, "--step", "4", *by, says="tool 'mail', which has no compensation")
    _refused(env, url, rid, "--step", "9", *by, says=f"run {rid} has no step at position 9")
    _refused(env, url, rid, "--step", "0", *by, says="a whole number of 1 or more")
    _refused(env, url, rid, "--step", "1", says="by is required")
    _refused(env, url, rid, "--step", "1", "--happened", *by, says="no undo in doubt")
    _refused(env, url, "r-unknown", "--step", "1", *by, says="no run 'r-unknown'")
    fork = _cli(env, "fork", rid, "--step", "3", "--when", "before", "--json")
    assert fork.returncode == 0, fork.stderr
    fid = fork.stdout.split('"id": "')[1].split('"')[0]
    _refused(env, url, fid, "--step", "1", *by, says=f"copied from run {rid}")
    assert _cli(env, "revert", rid, "--step", "1", *by).returncode == 0
    _refused(env, url, rid, "--step", "1", *by, says="was already reverted by alice")
    gated = _start(env, "gated")
    assert _cli(env, "cancel", gated, "--compensate", "--by", "bob").returncode == 0
    _refused(env, url, gated, "--step", "1", *by, says="is being compensated or was")
    undone = [line[1] for line in _log(tmp_path) if line[0] == "undo"]
    assert undone == ["flight", "flight"]  # the trip's by the revert, the gated run's by its cancel
