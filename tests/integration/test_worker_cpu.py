"""Pinning a worker process to one CPU (``--cpu N|auto``): auto-pinned workers of this
user on this host spread over the allowed CPUs; bad values are refused up front."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import tether
from tether.services import cpus

pytestmark = pytest.mark.integration

ALLOWED = sorted(os.sched_getaffinity(0))


@pytest.fixture
def restore_affinity() -> Iterator[None]:
    """pin() changes this very process: put every thread back afterwards."""
    yield
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(tid), set(ALLOWED))


@pytest.mark.parametrize("bad", [-1, "x", "1.5", True, 2.0])
def test_bad_cpu_values_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="cpu must be a CPU number"):
        cpus.check(bad)  # type: ignore[arg-type]
    assert cpus.check("auto") == "auto" and cpus.check("3") == 3 and cpus.check(None) is None


def test_a_cpu_this_process_may_not_use_is_refused(tmp_path: Path) -> None:
    app = tether.open(str(tmp_path / "a.db"))
    worker = app.worker(cpu=max(ALLOWED) + 1000)
    with pytest.raises(ValueError, match=r"not one this process may run on \(allowed: "):
        worker.pin()
    assert os.sched_getaffinity(0) == set(ALLOWED)  # nothing changed


def test_pin_pins_every_thread(restore_affinity: None, tmp_path: Path) -> None:
    app = tether.open(str(tmp_path / "a.db"))
    worker = app.worker(cpu=ALLOWED[-1])
    assert worker.pin() == ALLOWED[-1]
    for tid in os.listdir("/proc/self/task"):
        try:
            mask = os.sched_getaffinity(int(tid))
        except ProcessLookupError:
            continue  # a thread that ended since the listing (another test's, winding down)
        assert mask == {ALLOWED[-1]}


def test_auto_takes_the_cpu_the_fewest_live_workers_use(
    restore_affinity: None, tmp_path: Path
) -> None:
    registry = tmp_path / "cpus.json"
    dead = 2**22 + 12345  # above the default pid_max: never a live process
    # Another live worker (our parent) on the first CPU, a dead one on the last.
    registry.write_text(json.dumps({str(os.getppid()): ALLOWED[0], str(dead): ALLOWED[-1]}))
    got = cpus.pin("auto", registry=registry)
    expected = ALLOWED[1] if len(ALLOWED) > 1 else ALLOWED[0]
    assert got == expected
    entries = json.loads(registry.read_text())
    assert entries == {str(os.getppid()): ALLOWED[0], str(os.getpid()): expected}  # dead gone
    cpus.unpin(registry=registry)
    assert json.loads(registry.read_text()) == {str(os.getppid()): ALLOWED[0]}


def test_a_torn_registry_is_started_over(restore_affinity: None, tmp_path: Path) -> None:
    registry = tmp_path / "cpus.json"
    registry.write_text('{"12": ')
    assert cpus.pin("auto", registry=registry) == ALLOWED[0]
    assert json.loads(registry.read_text()) == {str(os.getpid()): ALLOWED[0]}


AGENTS = """
import os
import tether

app = tether.open(os.environ["CPU_TEST_DB"])

@app.agent
def job(run, n):
    return run.step("s", lambda: sorted(os.sched_getaffinity(0)))
"""


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``tether worker`` on the agents above; TMPDIR keeps its CPU registry in tmp_path."""
    (tmp_path / "cpuagents.py").write_text(AGENTS)
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "TMPDIR": str(tmp_path),
        "CPU_TEST_DB": str(tmp_path / "w.db"),
    }
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", "--app", "cpuagents:app", "worker", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )


@pytest.mark.parametrize("bad", ["abc", "-2", str(max(ALLOWED) + 1000)])
def test_tether_worker_refuses_a_bad_cpu(tmp_path: Path, bad: str) -> None:
    out = _cli(tmp_path, "--cpu", bad, "--until-idle")
    assert out.returncode == 2
    assert "--cpu:" in out.stderr and "Traceback" not in out.stderr


def test_tether_worker_cpu_auto_runs_its_runs_on_one_cpu(tmp_path: Path) -> None:
    app = tether.open(str(tmp_path / "w.db"))

    @app.agent(name="job")
    def job(run: tether.Run, n: int) -> list[int]:  # enqueued here, executed by the worker
        raise AssertionError("the worker process executes its own module's job")

    ids = [app.start("job", n) for n in range(3)]
    out = _cli(tmp_path, "--cpu", "auto", "--until-idle")
    assert out.returncode == 0, out.stderr
    assert f"pinned to CPU {ALLOWED[0]}" in out.stdout  # no other auto-pinned worker here
    assert all(app.get(i).output == [ALLOWED[0]] for i in ids)
