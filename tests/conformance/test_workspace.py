"""Workspace checkpoints on every backend: a fork materialises the files at its point,
a diff names the files that changed, gc sweeps the file contents no manifest references
(and keeps those a live run's do), a tampered manifest is refused before anything is
written, and a workspace over a limit fails its run naming the limit.

The trees expected are computed here, from the agent's arguments and the files read
from disk (``_tree``), never with tether's own manifests."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from _conformance import Backend

import tether
from tether.model.clock import FakeClock

pytestmark = pytest.mark.conformance

DAY = 86400.0


def _content(i: int, k: int) -> bytes:
    return f"file {i} written at step {k}\n".encode() * (1 + i % 7)


def expected(k: int, tag: str = "") -> dict[str, tuple[str, int]]:
    """The files after step ``k`` of ``editor``: step j writes d{j%3}/f{j}.txt, rewrites
    shared.txt, deletes the file of step j-4 (when j % 4 == 0) and makes f{j} executable
    when j % 5 == 0."""
    tree: dict[str, tuple[str, int]] = {}
    for j in range(1, k + 1):
        mode = 0o755 if j % 5 == 0 else 0o644
        tree[f"d{j % 3}/f{j}.txt"] = (hashlib.sha256(_content(j, j)).hexdigest(), mode)
        tree["shared.txt"] = (hashlib.sha256(f"{tag}{j}".encode()).hexdigest(), 0o644)
        if j % 4 == 0:
            tree.pop(f"d{(j - 4) % 3}/f{j - 4}.txt", None)
    return tree


def _tree(root: str | Path) -> dict[str, tuple[str, int]]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root).replace(os.sep, "/")
            data = Path(p).read_bytes()
            out[rel] = (hashlib.sha256(data).hexdigest(), stat.S_IMODE(os.lstat(p).st_mode))
    return out


def _edit(root: str, j: int, tag: str) -> int:
    path = Path(root, f"d{j % 3}", f"f{j}.txt")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_content(j, j))
    os.chmod(path, 0o755 if j % 5 == 0 else 0o644)
    Path(root, "shared.txt").write_text(f"{tag}{j}")
    if j % 4 == 0:
        Path(root, f"d{(j - 4) % 3}", f"f{j - 4}.txt").unlink(missing_ok=True)
    return j


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def app(backend: Backend, clock: FakeClock, tmp_path: Path) -> Iterator[tether.App]:
    a = tether.open(backend.url, clock=clock, workspace=str(tmp_path / "ws" / "{run_id}"))

    @a.agent(name="editor")
    def editor(run: tether.Run, n: int, tag: str) -> int:
        root = run.workspace
        assert root is not None
        for j in range(1, n + 1):
            run.step("edit", _edit, root, j, tag)
            run.llm("think", lambda j=j: {"text": f"thought {j}"})
        return n

    yield a
    a.close()


def test_each_step_is_checkpointed_and_a_fork_at_step_20_gets_the_step_20_tree(
    app: tether.App, tmp_path: Path
) -> None:
    run_id = app.run("editor", 30, "a").id
    root = tmp_path / "ws" / run_id
    assert _tree(root) == expected(30, "a")
    # each checkpoint names the step whose files it holds (the audit's "which step")
    edits = [s.position for s in app.get(run_id).steps if s.name == "edit"]
    marks = [e.payload().get("pos") for e in app.events(run_id) if e.type == "workspace"]
    assert marks[1:] == edits  # the first: the files the run started with
    fork_dir = tmp_path / "fork20"
    fork_id = app.fork(run_id, step="edit#20", workspace=str(fork_dir))
    assert _tree(fork_dir) == expected(20, "a")
    assert _tree(root) == expected(30, "a")  # the parent's directory is left alone
    # the fork works in its own directory, from the step-20 tree on
    handle = app.resume(fork_id)
    assert handle.status == "completed"
    assert _tree(fork_dir) == expected(30, "a")


def test_a_fork_refuses_a_directory_that_is_not_empty(app: tether.App, tmp_path: Path) -> None:
    run_id = app.run("editor", 3, "a").id
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("not yours")
    with pytest.raises(tether.InvalidInput, match="not an empty directory"):
        app.fork(run_id, workspace=str(busy))
    assert (busy / "mine.txt").read_text() == "not yours"


def test_workspace_diff_names_added_removed_and_modified_files_with_sizes(
    app: tether.App,
) -> None:
    run_id = app.run("editor", 10, "a").id
    a = app.state(run_id, step="edit#5")
    b = app.state(run_id, step="edit#9")
    changes = {c.path: c for c in app.workspace_diff(a, b)}
    want_added = set(expected(9, "a")) - set(expected(5, "a"))
    want_removed = set(expected(5, "a")) - set(expected(9, "a"))
    assert want_removed == {"d1/f4.txt"}
    assert {p for p, c in changes.items() if c.change == "added"} == want_added
    assert {p for p, c in changes.items() if c.change == "removed"} == want_removed
    assert changes["shared.txt"].change == "modified"
    assert changes["d1/f4.txt"].size_before == len(_content(4, 4))  # removed at step 8
    assert changes["d0/f9.txt"].size_after == len(_content(9, 9))
    assert app.workspace_diff(b, b) == []


def _workspace_blobs(backend: Backend) -> set[str]:
    return {r[0] for r in backend.sql("SELECT sha256 FROM blobs WHERE kind = 'workspace'")}


def test_gc_sweeps_the_files_of_deleted_runs_and_keeps_those_a_live_run_uses(
    app: tether.App, backend: Backend, clock: FakeClock, tmp_path: Path
) -> None:
    old = app.run("editor", 6, "old-").id
    clock.advance(2 * DAY)
    live = app.run("editor", 6, "live-").id
    before = _workspace_blobs(backend)
    old_only = {hashlib.sha256(f"old-{j}".encode()).hexdigest() for j in range(1, 7)}
    assert old_only <= before
    result = app.gc(older_than="1d", blob_grace=0)
    assert result.run_ids == (old,)
    after = _workspace_blobs(backend)
    assert after == before - old_only  # the f{j}.txt contents both runs wrote stay
    assert result.files == len(old_only)
    # the live run's files are all still there: a fork at its head gets every one
    fork_dir = tmp_path / "live-fork"
    app.fork(live, workspace=str(fork_dir))
    assert _tree(fork_dir) == expected(6, "live-")


def test_gc_keeps_file_contents_within_the_grace_period(
    app: tether.App, backend: Backend, clock: FakeClock
) -> None:
    app.run("editor", 3, "x")
    clock.advance(60)
    app.run("editor", 2, "y")  # rewrites f1, f2: their contents are touched, and live
    before = _workspace_blobs(backend)
    assert app.gc(status="completed", keep_last=1).files == 0  # x's: not old enough
    assert _workspace_blobs(backend) == before
    clock.advance(2 * 3600)
    result = app.gc(status="completed", keep_last=1)
    x_only = {hashlib.sha256(f"x{j}".encode()).hexdigest() for j in (1, 2, 3)}
    x_only.add(hashlib.sha256(_content(3, 3)).hexdigest())
    assert result.files == len(x_only)
    assert _workspace_blobs(backend) == before - x_only


@pytest.mark.parametrize("bad", ["../../etc/x", "/tmp/tether-abs-x", "a/../../x", "./a"])
def test_a_tampered_manifest_is_refused_before_anything_is_written(
    app: tether.App, backend: Backend, tmp_path: Path, bad: str
) -> None:
    run_id = app.run("editor", 2, "a").id
    rows = backend.sql("SELECT data FROM events WHERE type = 'workspace'")
    data = json.loads(rows[-1][0])
    data["files"].append([bad, "0" * 64, 0o100644, 1])
    backend.sql_params(
        "UPDATE events SET data = "
        + (":d WHERE data = :old" if backend.name == "sqlite" else "%(d)s WHERE data = %(old)s"),
        {"d": json.dumps(data), "old": rows[-1][0]},
    )
    target = tmp_path / "forked" / "sub"
    with pytest.raises(tether.WorkspaceError, match="does not name a file inside"):
        app.fork(run_id, workspace=str(target))
    assert not target.exists()  # refused before the directory was even made
    assert not os.path.exists("/tmp/tether-abs-x")
    assert not (tmp_path / "x").exists() and not (tmp_path / "forked" / "x").exists()


def test_a_workspace_over_a_limit_fails_the_run_naming_the_limit(
    backend: Backend, tmp_path: Path
) -> None:
    app = tether.open(backend.url)
    try:
        ws = tether.Workspace(str(tmp_path / "small"), max_file_size=1000)

        @app.agent(name="big", workspace=ws)
        def big(run: tether.Run) -> None:
            root = run.workspace
            assert root is not None
            run.step("ok", lambda: Path(root, "a.txt").write_bytes(b"x" * 10))
            run.step("huge", lambda: Path(root, "b.bin").write_bytes(b"x" * 5000))

        with pytest.raises(tether.RunFailed) as caught:
            app.run("big")
        assert "max_file_size=1000" in str(caught.value)
        assert "'b.bin' is 5000 bytes" in str(caught.value)
        state = app.load(caught.value.run_id)
        assert state.step(2) is None or state.step(2).status != "completed"  # not done
    finally:
        app.close()
