"""Workspace checkpoints across SIGKILLs: an agent editing 200 files over 50 steps is
killed at random points (mid-edit, while its checkpoint is taken, during the model call
that follows), and every resume finds its directory byte-identical (contents and modes)
to the last committed step's; the run then finishes with the right tree.

The trees expected are computed here from the agent's edit plan (``_workspace_editor.plan``)
and the count of committed steps; the tree found is read from disk here. Neither uses
tether's manifests. On SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.acceptance
SCRIPT = Path(__file__).with_name("_workspace_editor.py")
_spec = importlib.util.spec_from_file_location("_workspace_editor", SCRIPT)
assert _spec is not None and _spec.loader is not None
editor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(editor)

Tree = dict[str, tuple[str, int]]


def expected(k: int) -> Tree:
    """The tree after ``k`` steps of the plan: path -> (sha256, permission bits)."""
    files: dict[str, tuple[bytes, int]] = {}
    for j in range(1, k + 1):
        for op, path, data, mode in editor.plan(j):
            if op == "write":
                files[path] = (data, mode)
            elif op == "delete":
                files.pop(path, None)
            elif path in files:
                files[path] = (files[path][0], mode)
    return {p: (hashlib.sha256(d).hexdigest(), m) for p, (d, m) in files.items()}


def tree(root: Path) -> Tree:
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root).replace(os.sep, "/")
            digest = hashlib.sha256(Path(p).read_bytes()).hexdigest()
            out[rel] = (digest, stat.S_IMODE(os.lstat(p).st_mode))
    return out


def _child(url: str, parent: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(SCRIPT), url, str(parent), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _committed(url: str, run_id: str) -> int:
    app = tether.open(url)
    try:
        steps = app.load(run_id).steps
        return sum(1 for s in steps if s.name == "edit" and s.status == "completed")
    finally:
        app.close()


def _kills(seed: int) -> list[tuple[int, str]]:
    """Four kill points at increasing random steps, each in a random phase."""
    rng = random.Random(seed)
    steps = sorted(rng.sample(range(2, tether_steps()), 4))
    return [(j, rng.choice(["mid-edit", "after-step", "in-llm"])) for j in steps]


def tether_steps() -> int:
    return int(editor.STEPS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sigkilled_editor_resumes_with_the_last_committed_tree(
    url: str, tmp_path: Path, seed: int
) -> None:
    parent = tmp_path / "ws"
    kills = _kills(seed)
    first = _child(url, parent, "start", "-", "--kill", str(kills[0][0]), kills[0][1])
    assert first.returncode == -9, first.stderr
    run_id = first.stdout.split()[0]
    root = parent / run_id
    for n, (j, phase) in enumerate(kills):
        if n:  # resume, and die at the next kill point
            killed = _child(url, parent, "resume", run_id, "--kill", str(j), phase)
            assert killed.returncode == -9, killed.stderr
        k = _committed(url, run_id)
        assert k < j if phase == "mid-edit" else k <= j
        (root / "stray.txt").write_text("made after the last checkpoint")
        inspected = _child(url, parent, "resume", run_id, "--inspect")
        assert inspected.returncode == 0, inspected.stderr
        assert tree(root) == expected(k), f"after the kill at step {j} ({phase}), {k} committed"
    done = _child(url, parent, "resume", run_id)
    assert done.returncode == 0, done.stderr
    assert f"DONE {run_id} completed" in done.stdout
    assert tree(root) == expected(tether_steps())
    assert _committed(url, run_id) == tether_steps()


def test_a_fork_at_step_20_materialises_the_step_20_tree(url: str, tmp_path: Path) -> None:
    parent = tmp_path / "ws"
    done = _child(url, parent, "start", "-")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split()[0]
    fork_dir = tmp_path / "fork20"
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.cli",
            "--db",
            url,
            "fork",
            run_id,
            "--step",
            "edit#20",
            "--workspace",
            str(fork_dir),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert tree(fork_dir) == expected(20)
    diff = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.cli",
            "--db",
            url,
            "diff",
            f"{run_id}:edit#20",
            f"{run_id}:edit#21",
            "--files",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert diff.returncode == 0, diff.stderr
    want = {
        p
        for p in set(expected(20)) | set(expected(21))
        if expected(20).get(p) != expected(21).get(p)
    }
    shown = {line.split()[1] for line in diff.stdout.splitlines() if line[:1] in "+-~"}
    assert shown == want, diff.stdout
