"""A run directory tether made (per run, or a fork's) that someone replaced with a link is
refused, before anything is read or written through it: a restore through the link
deleted the files of the directory it pointed to (everything the manifest did not name)
and wrote the run's files there. A fixed workspace path may be a link: the operator's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import tether


def _agent(app: tether.App) -> object:
    def make(root: str) -> int:
        Path(root, "sub").mkdir()
        Path(root, "sub", "a.txt").write_text("A")
        return 1

    @app.agent
    def job(run: tether.Run) -> str:
        run.step("make", make, run.workspace)
        run.wait("go")
        return "done"

    return job


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    return outside


def _linked_then_resumed(app: tether.App, run_id: str, root: Path, outside: Path) -> None:
    """Replace the run's directory by a link to ``outside``; its resume is refused and
    leaves ``outside`` as it was."""
    shutil.rmtree(root)
    os.symlink(outside, root)
    app.signal(run_id, "go", 1)
    with pytest.raises(tether.WorkspaceError, match="is now a link"):
        app.resume(run_id)
    _untouched(outside)


def _untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["precious.txt"]
    assert (outside / "precious.txt").read_text() == "keep me"


def test_a_per_run_directory_replaced_by_a_link_is_refused(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    app = tether.open(str(tmp_path / "t.db"), workspace=str(tmp_path / "work" / "{run_id}"))
    run_id = app.run(_agent(app)).id
    root = tmp_path / "work" / run_id
    _linked_then_resumed(app, run_id, root, outside)
    assert app.get(run_id).status == "waiting"  # resumable: nothing recorded
    os.unlink(root)  # as the error says: the files come back in a new directory
    assert app.resume(run_id).output == "done"
    assert (root / "sub" / "a.txt").read_text() == "A" and not root.is_symlink()
    _untouched(outside)
    app.close()


def test_a_link_above_the_run_directory_that_tether_made_is_refused(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    path = str(tmp_path / "work" / "{run_id}" / "files")
    app = tether.open(str(tmp_path / "t.db"), workspace=path)
    run_id = app.run(_agent(app)).id
    made = tmp_path / "work" / run_id
    shutil.rmtree(made)
    (outside / "files").mkdir()
    os.symlink(outside, made)
    app.signal(run_id, "go", 1)
    with pytest.raises(tether.WorkspaceError, match=f"{made} is now a link"):
        app.resume(run_id)
    assert sorted(p.name for p in outside.iterdir()) == ["files", "precious.txt"]
    assert list((outside / "files").iterdir()) == []
    app.close()


def test_a_fork_directory_replaced_by_a_link_is_refused(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    app = tether.open(str(tmp_path / "t.db"), workspace=str(tmp_path / "work" / "{run_id}"))
    run_id = app.run(_agent(app)).id
    fork_dir = tmp_path / "fork"
    fork_id = app.fork(run_id, step="make#1", workspace=str(fork_dir))
    _linked_then_resumed(app, fork_id, fork_dir, outside)
    app.close()


def test_a_fixed_workspace_that_is_a_link_is_used_through_it(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "ws")  # the operator's own link
    app = tether.open(str(tmp_path / "t.db"), workspace=str(tmp_path / "ws"))
    run_id = app.run(_agent(app)).id
    app.signal(run_id, "go", 1)
    assert app.resume(run_id).output == "done"
    assert (real / "sub" / "a.txt").read_text() == "A"
    app.close()
