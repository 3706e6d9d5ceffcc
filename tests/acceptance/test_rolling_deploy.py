"""A rolling deploy with runs in flight (issue 32), on both databases.

Runs of ``order`` version 1 wait at a signal under two workers of the v1 code; the
workers are replaced one by one with code that registers versions 1 and 2 side by side
(new runs start as version 2, which inserts a step before the wait), then, once no run
of version 1 is left, with the version 2 code alone. Signals are sent at each stage, so
that runs of both versions wake while workers of different code share the queue. Every
run must finish under the code of its version: a worker claims only the runs whose
version it serves (version 2's code would block a run of version 1; a worker without
the code of a run's version could not run it at all). None fails, blocks or compensates,
and the ledger shows each step executed once, by its own version's code."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _deploy import make
from _workers import stop_all

import tether

pytestmark = pytest.mark.acceptance
DEPLOY = Path(__file__).with_name("_deploy.py")
LIMIT = 90.0  # seconds for a stage's runs to get where they are going (a loaded machine)


def _until(what: str, test: Callable[[], bool]) -> None:
    deadline = time.monotonic() + LIMIT
    while not test():
        assert time.monotonic() < deadline, f"after {LIMIT:g} s: {what}"
        time.sleep(0.1)


def _statuses(app: tether.App) -> dict[str, str]:
    return {r.id: r.status for r in app.runs(limit=1000)}


def test_a_rolling_deploy_finishes_every_run_under_its_versions_code(
    url: str, tmp_path: Path
) -> None:
    env = {**os.environ, "TETHER_TEST_DB": url, "TETHER_TEST_DIR": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join([str(DEPLOY.parent), env.get("PYTHONPATH", "")])

    def worker(deploy: str) -> subprocess.Popen[Any]:
        cmd = [sys.executable, "-m", "tether.cli", "--app", f"{DEPLOY}:app", "worker"]
        return subprocess.Popen(
            [*cmd, "--quiet", "--poll", "0.1"],
            env={**env, "DEPLOY": deploy},
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / f"worker-{deploy}.log", "a"),
        )

    def waiting(ids: list[str]) -> Callable[[], bool]:
        return lambda: all(_statuses(v12).get(i) == "waiting" for i in ids)

    def done(ids: list[str]) -> Callable[[], bool]:
        return lambda: all(_statuses(v12).get(i) in ("completed", "failed", "blocked") for i in ids)

    v1, v12, v2 = make("v1", url), make("v12", url), make("v2", url)
    workers = [worker("v1"), worker("v1")]
    try:
        old = [v1.start("order", n) for n in range(8)]
        _until("the runs of version 1 wait for their signal", waiting(old))

        # the first worker gets the code of both versions: new runs are version 2
        stop_all(workers[:1])
        workers[0] = worker("v12")
        new = [v12.start("order", n) for n in range(8, 16)]
        _until("the runs of version 2 wait for their signal", waiting(new))
        serves = sorted(str(w.serves) for w in v12.store.list_workers())  # `tether workers`
        assert serves == ["order@1 + other agents", "order@1 order@2 + other agents"], serves
        for run_id in old[:4] + new[:4]:  # woken while a worker of v1 alone is up
            v12.signal(run_id, "go")
        _until("the signalled runs finish", done(old[:4] + new[:4]))

        # the second worker too; then the rest of version 1 finishes
        stop_all(workers[1:])
        workers[1] = worker("v12")
        for run_id in old[4:]:
            v12.signal(run_id, "go")
        _until("the runs of version 1 finish", done(old))
        left = [c for c in v12.count_runs(agent="order", version="1") if c.status != "completed"]
        assert left == [], left  # what the operator checks before dropping version 1

        # version 2 alone: the rest of version 2, and new runs
        stop_all(workers)
        workers = [worker("v2"), worker("v2")]
        newer = [v2.start("order", n) for n in range(16, 20)]
        for run_id in new[4:]:
            v12.signal(run_id, "go")
        _until("the runs of version 2 wait", waiting(newer))
        for run_id in newer:
            v12.signal(run_id, "go")
        _until("every run finishes", done(old + new + newer))
    finally:
        stop_all(workers)

    for log in tmp_path.glob("worker-*.log"):  # no worker claimed a run it cannot execute
        assert "could not execute" not in log.read_text(), log.read_text()[:2000]
    statuses = _statuses(v12)
    assert collections.Counter(statuses.values()) == {"completed": 20}, statuses
    for run_id in old + new + newer:
        record = v12.store.get_run(run_id)
        version = "1" if run_id in old else "2"
        assert record.version == version
        assert v12.get(run_id).output == f"shipped by {version}"
        types = [e.type for e in v12.events(run_id)]
        assert "run.blocked" not in types and not any(t.startswith("compensat") for t in types)
    ledger = collections.Counter((tmp_path / "ledger.txt").read_text().split("\n")[:-1])
    steps = {"1": ("prepare", "ship"), "2": ("prepare", "audit", "ship")}
    expected = collections.Counter(
        f"{'1' if n < 8 else '2'} {n} {step}"
        for n in range(20)
        for step in steps["1" if n < 8 else "2"]
    )
    assert ledger == expected  # each step once, by the code of its run's version
    counts = {(c.version, c.status): c.runs for c in v12.count_runs(agent="order")}
    assert counts == {("1", "completed"): 8, ("2", "completed"): 12}
    for app in (v1, v12, v2):
        app.close()
