"""Cancel with compensation across a tree of depth 3 (issue 31), on both databases: the
process cancelling it is SIGKILLed inside an undo in the middle of the tree; `tether
cancel --compensate` again finishes the job. The tree is undone newest child first, its
parent's own tools last; every undo completes once (the one in flight at the kill is
entered again: an undo is called at least once, with the same idempotency key)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import tether
from tether.engine.children import child_id

pytestmark = pytest.mark.acceptance
SAGA = str(Path(__file__).with_name("_tree_saga.py"))
CLI = [sys.executable, "-m", "tether.cli", "--app", f"{SAGA}:app"]


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=120)


def test_a_tree_cancelled_with_compensation_across_a_sigkill(url: str, tmp_path: Path) -> None:
    env = {**os.environ, "TETHER_TEST_DB": url, "TETHER_TEST_DIR": str(tmp_path)}
    os.environ.update({"TETHER_TEST_DB": url, "TETHER_TEST_DIR": str(tmp_path)})
    sys.path.insert(0, str(Path(SAGA).parent))
    try:
        import _tree_saga
    finally:
        sys.path.pop(0)
    app = tether.open(url, lease_ttl=2.0)
    try:
        rid = app.start(_tree_saga.root)
        worker = _cli(env, "worker", "--until-idle", "--quiet")
        assert worker.returncode == 0, worker.stderr
        m1, m2 = child_id(rid, 2), child_id(rid, 3)
        tree = [rid, m1, m2, child_id(m1, 2), child_id(m2, 2)]
        assert [app.store.get_run(r).status for r in tree] == ["waiting"] * 5

        killed = _cli({**env, "TETHER_KILL_IN_UNDO": "m1"}, "cancel", rid, "--compensate")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert app.store.get_run(rid).status != "cancelled"
        again = _cli(env, "cancel", rid, "--compensate", "--by", "ops")
        assert again.returncode == 0, again.stderr
        assert [app.store.get_run(r).status for r in tree] == ["cancelled"] * 5

        lines = (tmp_path / "undo.txt").read_text().split()
        done = [w for verb, w in zip(lines[::2], lines[1::2], strict=True) if verb == "done"]
        assert done == ["m2.leaf", "m2", "m1.leaf", "m1", "root"]
        entered = [w for verb, w in zip(lines[::2], lines[1::2], strict=True) if verb == "enter"]
        assert entered == ["m2.leaf", "m2", "m1.leaf", "m1", "m1", "root"]
    finally:
        app.close()
