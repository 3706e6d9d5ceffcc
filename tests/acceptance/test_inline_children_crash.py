"""Inline children across crashes (issue 31), on both databases. A process SIGKILLed
inside an inline child (its first step recorded), or right after the child ended and
before the parent recorded it, is resumed in another process, or by workers: the child
is created once, no completed step of it executes again, the parent completes once."""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _workers import kill_one, stop_all

import tether
from tether.engine.children import child_id

pytestmark = pytest.mark.acceptance
FAMILY = str(Path(__file__).with_name("_inline_family.py"))
WORKER = [sys.executable, "-m", "tether.cli", "--app", f"{FAMILY}:app", "worker"]
OUTPUT = 0 + 1 + 4


def _env(url: str, tmp_path: Path, kill: str) -> dict[str, str]:
    here = str(Path(FAMILY).parent)
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    return {
        **os.environ,
        "TETHER_TEST_DB": url,
        "TETHER_TEST_DIR": str(tmp_path),
        "TETHER_TEST_KILL": kill,
        "PYTHONPATH": path,
    }


def _family(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys, _inline_family; _inline_family.main(sys.argv[1:])"
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=60
    )


def _ledger(tmp_path: Path) -> collections.Counter[tuple[str, str]]:
    lines = (tmp_path / "ledger.txt").read_text().split("\n")
    return collections.Counter((ln.split()[0], ln.split()[1]) for ln in lines if ln)


def _check_tree(app: tether.App, rid: str, tmp_path: Path) -> None:
    """Every child created once, completed once, each of its steps finished once; the
    parent completed once, with the children's outcomes recorded at their positions."""
    state = app.get(rid)
    assert (state.status, state.output) == ("completed", OUTPUT)
    kids = [child_id(rid, p) for p in (1, 2, 3)]
    assert [s.output for s in state.steps if s.kind == "child"] == kids
    assert [s.detail["outcome"]["output"] for s in state.steps[:3]] == [0, 1, 4]
    assert sorted(r.id for r in app.runs() if r.agent == "kid") == kids
    for k in kids:
        types = [e.type for e in app.events(k)]
        assert types.count("run.created") == 1 and types.count("run.completed") == 1, types
        assert app.get(k).caller == {"run": rid, "pos": int(k.rsplit("~", 1)[1])}
    assert [e.type for e in app.events(rid)].count("run.completed") == 1
    counts = _ledger(tmp_path)
    for k in kids:
        assert [counts[(k, n)] for n in ("work", "more", "last")] == [1, 1, 1], (k, counts)
    assert counts[(rid, "total")] == 1


@pytest.mark.parametrize(
    ("kill", "step"), [("first", "0.05"), ("first", "0"), ("mid", "0.05"), ("after", "0")]
)
def test_a_process_killed_in_or_after_an_inline_child_resumes_it_once(
    url: str, tmp_path: Path, kill: str, step: str
) -> None:
    """``step``: the seconds a step takes; "0": the child's steps are fast, so its creation,
    its steps and its end are one transaction (engine.births), which the kill precedes
    (``first``) or follows (``after``)."""
    env = {**_env(url, tmp_path, kill), "TETHER_TEST_STEP": step}
    first = _family(env, "run", "3")
    assert first.returncode == -signal.SIGKILL, first.stderr
    app = tether.open(url, lease_ttl=2.0)
    try:
        (rid,) = [r.id for r in app.runs() if r.agent == "parent"]
        kid = child_id(rid, 1)
        assert app.get(rid).steps == ()  # the parent's record of the child is not committed
        if kill == "first":  # nothing of the child was written: its creation rides later
            with pytest.raises(tether.NotFound):
                app.store.get_run(kid)
        elif kill == "mid":  # the child's first step is in its log, its second is not
            assert app.store.get_run(kid).status == "running"
            assert [s.name for s in app.get(kid).steps] == ["work"]
        else:
            assert app.store.get_run(kid).status == "completed"
        second = _family(env, "resume", rid)  # another process: the dead one's lease is taken
        assert second.returncode == 0, second.stderr
        assert second.stdout.split() == ["DONE", rid, str(OUTPUT)]
        _check_tree(app, rid, tmp_path)
        started = [e.type for e in app.events(kid)].count("run.started")
        assert started == (2 if kill == "mid" else 1)  # an ended child is not executed again
        if kill != "after":  # entered twice: the body the kill cut, then once more
            cut = "more" if kill == "mid" else "work"
            assert _ledger(tmp_path)[(kid, f"started:{cut}")] == 2
    finally:
        app.close()


def test_a_one_step_child_killed_before_its_parent_wrote_is_not_executed_again(
    url: str, tmp_path: Path
) -> None:
    """A child of one fast step is one transaction: its creation, step and end
    (engine.births). Killed right after it, before the parent's record of it was
    written: the child is committed (its step is durable before the parent's next call
    runs), so the resumed parent records it and executes nothing of it again."""
    env = {**_env(url, tmp_path, "single"), "TETHER_TEST_STEP": "0"}
    first = _family(env, "run", "3")
    assert first.returncode == -signal.SIGKILL, first.stderr
    app = tether.open(url, lease_ttl=2.0)
    try:
        (rid,) = [r.id for r in app.runs() if r.agent == "single"]
        assert app.get(rid).steps == ()  # the parent's record of the child is not committed
        assert app.store.get_run(child_id(rid, 1)).status == "completed"
        second = _family(env, "resume", rid)
        assert second.returncode == 0, second.stderr
        assert second.stdout.split() == ["DONE", rid, str(OUTPUT)]
        state = app.get(rid)
        kids = [child_id(rid, p) for p in (1, 2, 3)]
        assert [s.output for s in state.steps if s.kind == "child"] == kids
        for k in kids:
            types = [e.type for e in app.events(k)]
            assert types == ["run.created", "run.started", "step.completed", "run.completed"]
        counts = _ledger(tmp_path)
        assert [counts[(k, "work")] for k in kids] == [1, 1, 1], counts
        assert counts[(rid, "total")] == 1
        assert [e.type for e in app.events(rid)].count("run.completed") == 1
    finally:
        app.close()


def test_a_worker_killed_inside_an_inline_child_is_taken_over(url: str, tmp_path: Path) -> None:
    env = _env(url, tmp_path, "mid")
    sys.path.insert(0, str(Path(FAMILY).parent))
    os.environ.update({"TETHER_TEST_DB": url, "TETHER_TEST_DIR": str(tmp_path)})
    try:
        import _inline_family
    finally:
        sys.path.pop(0)
    app = tether.open(url, lease_ttl=2.0)
    rid = app.start(_inline_family.parent, 3)
    cmd = [*WORKER, "--quiet", "--concurrency", "2", "--poll", "0.05"]
    first = subprocess.run(cmd, env=env, capture_output=True, timeout=60)
    assert first.returncode == -signal.SIGKILL  # the worker killed itself inside the child
    workers = [subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE) for _ in range(2)]
    try:
        deadline = time.monotonic() + 90  # a lost wake-up costs 30 s (JOIN_RECHECK)
        while app.store.get_run(rid).status != "completed" and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop_all(workers)
    try:
        _check_tree(app, rid, tmp_path)
    finally:
        app.close()


def test_inline_children_on_workers_killed_at_random(url: str, tmp_path: Path) -> None:
    env = {**_env(url, tmp_path, ""), "TETHER_TEST_STEP": "0.2"}  # kills land in steps
    sys.path.insert(0, str(Path(FAMILY).parent))
    os.environ.update({"TETHER_TEST_DB": url, "TETHER_TEST_DIR": str(tmp_path)})
    try:
        import _inline_family
    finally:
        sys.path.pop(0)
    app = tether.open(url, lease_ttl=2.0)
    rids = [app.start(_inline_family.parent, 4) for _ in range(3)]
    cmd = [*WORKER, "--quiet", "--concurrency", "2", "--poll", "0.05"]

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def done() -> bool:
        return all(app.store.get_run(r).status in ("completed", "failed") for r in rids)

    rng, workers, kills = random.Random(31), [start() for _ in range(3)], 0
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and not done():
            time.sleep(rng.uniform(0.2, 0.6))
            kill_one(workers, rng, start)
            kills += 1
        calm = time.monotonic() + 120  # a lost wake-up costs 30 s (JOIN_RECHECK)
        while not done() and time.monotonic() < calm:
            time.sleep(0.2)
    finally:
        stop_all(workers)
    try:
        assert kills >= 3, "the killer hardly ran: the test proved little"
        for rid in rids:
            state = app.get(rid)
            assert (state.status, state.output) == ("completed", 0 + 1 + 4 + 9), kills
            kids = [child_id(rid, p) for p in (1, 2, 3, 4)]
            assert [s.output for s in state.steps if s.kind == "child"] == kids
            for k in kids:  # created once, ended once, each step recorded once
                types = [e.type for e in app.events(k)]
                assert types.count("run.created") == 1 and types.count("run.completed") == 1
                names = [s.name for s in app.get(k).steps]
                assert names == ["work", "more", "last"], names
            assert [e.type for e in app.events(rid)].count("run.completed") == 1
        print(f"\ninline children on {url.split('?')[0]}: 3 parents x 4, {kills} workers killed")
    finally:
        app.close()


def test_a_parent_killed_after_a_batch_of_children_starts_none_twice(
    url: str, tmp_path: Path
) -> None:
    env = _env(url, tmp_path, "batch")
    first = _family(env, "run", "3")
    assert first.returncode == -signal.SIGKILL, first.stderr
    app = tether.open(url, lease_ttl=2.0)
    try:
        (rid,) = [r.id for r in app.runs() if r.agent == "batch"]
        kids = [child_id(rid, p) for p in (1, 2, 3)]
        assert app.get(rid).steps == ()  # the batch's records were not committed
        assert [app.store.get_run(k).status for k in kids] == ["queued"] * 3
        second = _family(env, "resume", rid)
        assert second.stdout.split() == ["WAITING", rid], second.stderr
        worker = subprocess.run(
            [*WORKER, "--until-idle", "--quiet"], env=env, capture_output=True, timeout=120
        )
        assert worker.returncode == 0, worker.stderr
        third = _family(env, "resume", rid)
        assert third.stdout.split() == ["DONE", rid, str(OUTPUT)], third.stderr
        assert sorted(r.id for r in app.runs() if r.agent == "kid") == kids
        for k in kids:
            assert [e.type for e in app.events(k)].count("run.created") == 1
        assert [s.output for s in app.get(rid).steps if s.kind == "child"] == kids
    finally:
        app.close()
