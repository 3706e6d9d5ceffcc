"""Workspace checkpoints and the file system: a tampered log is refused on resume before
anything is written; links are kept when they stay inside and never followed out; the
ignore patterns leave their files out of checkpoints and restores; the fast change check
(mtime, size, inode) still sees a file rewritten with the same size; and the restore
puts back what a failed step left half-done."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.integration

FAIL: dict[str, bool] = {"on": True}


def _opened(tmp_path: Path) -> tether.App:
    """An App whose agents each work in ``ws/<run id>``."""
    return tether.open(str(tmp_path / "t.db"), workspace=str(tmp_path / "ws" / "{run_id}"))


def _app(tmp_path: Path) -> tether.App:
    app = _opened(tmp_path)

    @app.agent(name="writer")
    def writer(run: tether.Run, n: int) -> int:
        root = Path(run.workspace or "")
        for j in range(1, n + 1):
            run.step("write", lambda j=j: (root / f"f{j}.txt").write_text(f"step {j}"))
            if j == 2 and FAIL["on"]:
                run.step("break", lambda: _half_then_fail(root))
        return n

    return app


def _half_then_fail(root: Path) -> None:
    (root / "half.txt").write_text("half-done")
    (root / "f1.txt").write_text("clobbered")
    raise RuntimeError("the step fails after changing files")


def test_a_retry_restores_what_a_failed_step_left_half_done(tmp_path: Path) -> None:
    app = _app(tmp_path)
    FAIL["on"] = True
    with pytest.raises(tether.RunFailed) as caught:
        app.run("writer", 3)
    run_id = caught.value.run_id
    root = tmp_path / "ws" / run_id
    assert (root / "half.txt").exists()
    FAIL["on"] = False
    with pytest.raises(tether.NondeterminismError):  # the code changed: but restored first
        app.retry_run(run_id)
    assert sorted(p.name for p in root.iterdir()) == ["f1.txt", "f2.txt"]
    assert (root / "f1.txt").read_text() == "step 1"
    app.close()


def test_a_tampered_log_is_refused_on_resume_before_anything_is_written(
    tmp_path: Path,
) -> None:
    app = _app(tmp_path)
    FAIL["on"] = True
    with pytest.raises(tether.RunFailed) as caught:
        app.run("writer", 3)
    run_id = caught.value.run_id
    app.close()
    root = tmp_path / "ws" / run_id
    (root / "f2.txt").unlink()  # a restore would write it back, if it ran
    with sqlite3.connect(tmp_path / "t.db") as conn:
        key, text = conn.execute(
            "SELECT key, data FROM events WHERE type = 'workspace' ORDER BY key DESC"
        ).fetchone()
        data = json.loads(text)
        data["files"].append(["../../escaped.txt", data["files"][0][1], 0o100644, 6])
        conn.execute("UPDATE events SET data = ? WHERE key = ?", (json.dumps(data), key))
    app = _app(tmp_path)
    with pytest.raises(tether.WorkspaceError, match=r"'\.\./\.\./escaped\.txt'.*refused"):
        app.retry_run(run_id)
    assert not (tmp_path / "escaped.txt").exists()
    assert not (root / "f2.txt").exists()  # nothing was written at all
    assert app.get(run_id).status == "failed"  # and the run is left as it was
    app.close()


def test_links_inside_are_kept_links_out_are_neither_kept_nor_followed(tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("not the agent's")
    app = _opened(tmp_path)

    @app.agent(name="linker")
    def linker(run: tether.Run) -> None:
        root = Path(run.workspace or "")

        def make() -> None:
            (root / "a.txt").write_text("a")
            os.symlink("a.txt", root / "inside")
            os.symlink(str(outside), root / "out")
            os.symlink("../../secret.txt", root / "climb")

        run.step("make", make)

    run_id = app.run("linker").id
    files = app.workspace_files(run_id)
    assert sorted(files) == ["a.txt", "inside"]
    assert files["inside"].is_link
    fork = tmp_path / "fork"
    app.fork(run_id, workspace=str(fork))
    assert os.readlink(fork / "inside") == "a.txt"
    assert not (fork / "out").exists() and not (fork / "climb").exists()
    assert outside.read_text() == "not the agent's"
    app.close()


def test_ignored_paths_are_not_checkpointed(tmp_path: Path) -> None:
    ws = tether.Workspace(str(tmp_path / "ws" / "{run_id}"), ignore=(".git/", "*.log"))
    app = tether.open(str(tmp_path / "t.db"))

    @app.agent(name="builder", workspace=ws)
    def builder(run: tether.Run) -> None:
        root = Path(run.workspace or "")

        def build() -> None:
            (root / ".git").mkdir()
            (root / ".git" / "HEAD").write_text("ref")
            (root / "run.log").write_text("noise")
            (root / "src").mkdir()
            (root / "src" / "main.py").write_text("print(1)")

        run.step("build", build)

    run_id = app.run("builder").id
    assert sorted(app.workspace_files(run_id)) == ["src/main.py"]
    app.close()


def test_a_rewrite_of_the_same_size_is_seen(tmp_path: Path) -> None:
    app = _opened(tmp_path)

    @app.agent(name="same")
    def same(run: tether.Run) -> None:
        root = Path(run.workspace or "")
        for text in ("aaaa", "bbbb", "cccc"):
            run.step("w", lambda text=text: (root / "x.txt").write_text(text))

    run_id = app.run("same").id
    events = [e for e in app.events(run_id) if e.type == "workspace"]
    assert len(events) == 4  # the first (empty), then one per rewrite
    for n, text in enumerate(("aaaa", "bbbb", "cccc"), 1):
        fork = tmp_path / f"fork{n}"
        app.fork(run_id, step=f"w#{n}", workspace=str(fork))
        assert (fork / "x.txt").read_text() == text
    app.close()


def test_a_fork_that_would_share_its_parents_directory_is_refused(tmp_path: Path) -> None:
    app = tether.open(str(tmp_path / "t.db"), workspace=str(tmp_path / "one-dir"))

    @app.agent(name="w")
    def w(run: tether.Run) -> None:
        run.step("w", lambda: Path(run.workspace or "", "a.txt").write_text("a"))

    run_id = app.run("w").id
    with pytest.raises(tether.InvalidInput, match="workspace=DIR"):
        app.fork(run_id)
    fork_id = app.fork(run_id, workspace=str(tmp_path / "own"))
    assert (tmp_path / "own" / "a.txt").read_text() == "a"
    assert app.resume(fork_id).status == "completed"
    app.close()


def test_a_scan_reads_only_the_files_whose_stat_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.engine import workspace as engine_ws

    root = tmp_path / "w"
    root.mkdir()
    for i in range(20):
        (root / f"f{i}.txt").write_text(f"file {i}")
        os.utime(root / f"f{i}.txt", (1_000_000_000, 1_000_000_000))  # long ago: not racy
    stored: list[str] = []
    ws = tether.Workspace(str(root))
    manifest, stats = engine_ws.scan(str(root), ws, {}, {}, lambda sha, data: stored.append(sha))
    assert len(manifest) == 20 and len(stored) == 20
    read: list[str] = []
    real_read = engine_ws._read
    monkeypatch.setattr(engine_ws, "_read", lambda p: read.append(p) or real_read(p))
    (root / "f3.txt").write_text("changed")
    again, _ = engine_ws.scan(str(root), ws, manifest, stats, lambda sha, data: stored.append(sha))
    assert read == [str(root / "f3.txt")]  # the 19 others kept their digests unread
    assert again["f3.txt"] != manifest["f3.txt"] and len(stored) == 21
    assert {p: e for p, e in again.items() if p != "f3.txt"} == {
        p: e for p, e in manifest.items() if p != "f3.txt"
    }


def test_file_contents_go_to_an_artifact_directory_when_the_app_uses_one(
    tmp_path: Path,
) -> None:
    from tether.context.artifacts import DirectoryArtifacts

    app = _opened(tmp_path)
    app.artifacts = DirectoryArtifacts(tmp_path / "arts")

    @app.agent(name="w")
    def w(run: tether.Run) -> None:
        run.step("w", lambda: Path(run.workspace or "", "a.txt").write_text("in a directory"))

    run_id = app.run("w").id
    assert any((tmp_path / "arts").rglob("*"))
    with sqlite3.connect(tmp_path / "t.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM blobs WHERE kind = 'workspace'").fetchone() == (
            0,
        )
    app.fork(run_id, workspace=str(tmp_path / "fork"))
    assert (tmp_path / "fork" / "a.txt").read_text() == "in a directory"
    app.close()


def test_a_fan_outs_steps_are_all_checkpointed(tmp_path: Path) -> None:
    app = _opened(tmp_path)

    @app.agent(name="fan")
    def fan(run: tether.Run) -> None:
        root = Path(run.workspace or "")
        run.map("w", lambda i: (root / f"f{i}.txt").write_text(f"branch {i}"), range(12))
        run.llm("m", lambda: {"text": "done"})

    run_id = app.run("fan").id
    assert sorted(app.workspace_files(run_id)) == sorted(f"f{i}.txt" for i in range(12))
    fork = tmp_path / "fork"
    app.fork(run_id, workspace=str(fork))
    assert sorted(p.name for p in fork.iterdir()) == sorted(f"f{i}.txt" for i in range(12))
    app.close()


def test_a_dry_replay_names_the_same_directory_and_touches_nothing(tmp_path: Path) -> None:
    app = _opened(tmp_path)

    @app.tool(risk="write")
    def save(root: str, text: str, *, idempotency_key: str) -> str:
        Path(root, "out.txt").write_text(text)
        return text

    @app.agent(name="saver")
    def saver(run: tether.Run) -> str:
        return run.tool(save, run.workspace, "saved")  # the directory is in the args' digest

    run_id = app.run("saver").id
    root = tmp_path / "ws" / run_id
    (root / "stray.txt").write_text("a restore would remove me")
    report = app._replayer().stored(app.store, run_id)
    assert report.outcome == "finished" and report.differs == {}, report
    assert (root / "stray.txt").exists()  # nothing restored, scanned or written
    app.close()
