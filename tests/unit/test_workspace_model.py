"""Workspace manifests as plain data: the paths a log may name, the change an event
stores and its fold back, the diff of two manifests, and the Workspace settings."""

from __future__ import annotations

import stat

import pytest

from tether.errors import InvalidInput, WorkspaceError
from tether.model.workspace import (
    Entry,
    Workspace,
    apply,
    change,
    check_path,
    diff,
    fold_manifest,
    workspace_of,
)

pytestmark = pytest.mark.unit
A, B = "a" * 64, "b" * 64
FILE = stat.S_IFREG | 0o644


@pytest.mark.parametrize("path", ["a.txt", "d/e/f.txt", "..a", "a..b/c", ".hidden"])
def test_paths_inside_the_workspace_are_taken(path: str) -> None:
    assert check_path(path, "here") == path


@pytest.mark.parametrize(
    "path",
    ["", "/etc/passwd", "../x", "a/../../x", "a/./b", "./a", "a//b", "a/", "a\\b", "a\x00b", 3],
)
def test_paths_that_leave_or_are_not_normal_are_refused(path: object) -> None:
    with pytest.raises(WorkspaceError, match="here: the path"):
        check_path(path, "here")


def test_a_change_folds_back_to_the_manifest_it_came_from() -> None:
    before = {"a": Entry(A, FILE, 1), "b": Entry(B, FILE, 2)}
    after = {"a": Entry(B, FILE, 2), "c": Entry(A, stat.S_IFLNK | 0o777, 1)}
    data = change(before, after)
    assert data == {
        "files": [["a", B, FILE, 2], ["c", A, stat.S_IFLNK | 0o777, 1]],
        "removed": ["b"],
    }
    manifest = dict(before)
    apply(manifest, data, "here")
    assert manifest == after
    assert fold_manifest([(1, change({}, before)), (2, data)], "r") == after


def test_a_manifest_entry_never_gives_more_than_permission_bits() -> None:
    manifest: dict[str, Entry] = {}
    apply(manifest, {"files": [["x", A, stat.S_IFREG | 0o4755, 1]]}, "here")
    assert manifest["x"].mode == stat.S_IFREG | 0o755  # no setuid from a log


@pytest.mark.parametrize(
    "item",
    [["x", "nothex", FILE, 1], ["x", A, stat.S_IFDIR | 0o755, 1], ["x", A, FILE, -1], ["x", A]],
)
def test_damaged_entries_are_refused(item: list[object]) -> None:
    with pytest.raises(WorkspaceError, match="here"):
        apply({}, {"files": [item]}, "here")


def test_diff_names_added_removed_and_modified_with_sizes() -> None:
    a = {"same": Entry(A, FILE, 1), "gone": Entry(A, FILE, 3), "edit": Entry(A, FILE, 4)}
    b = {"same": Entry(A, FILE, 1), "new": Entry(B, FILE, 5), "edit": Entry(B, FILE, 6)}
    assert [tuple(c) for c in diff(a, b)] == [
        ("edit", "modified", 4, 6),
        ("gone", "removed", 3, None),
        ("new", "added", None, 5),
    ]


def test_workspace_settings() -> None:
    ws = Workspace("/w/{run_id}", ignore=("build/", "*.tmp"))
    assert ws.root_for("r1") == "/w/r1"
    assert ws.ignores_dir("build", "x/build") and not ws.ignores_dir("src", "src")
    assert ws.ignores_file("a.tmp", "d/a.tmp") and not ws.ignores_file("a.txt", "a.txt")
    assert workspace_of("/w", "here") == Workspace("/w")
    assert workspace_of(None, "here") is None
    with pytest.raises(TypeError, match="here is a directory"):
        workspace_of(3, "here")
    with pytest.raises(ValueError, match="max_file_size"):
        Workspace("/w", max_file_size=-1)


@pytest.mark.parametrize("ignore", ["build/", b"x", 5, [""], [1], ["ok", None]])
def test_ignore_is_a_list_of_patterns(ignore: object) -> None:
    """A str would be taken a character at a time (".git/" five patterns): refused."""
    with pytest.raises(InvalidInput, match=r"Workspace\(ignore=...\) is a list of patterns"):
        Workspace("/w", ignore=ignore)  # type: ignore[arg-type]
    assert Workspace("/w", ignore=(p for p in [".git/"])).ignore == (".git/",)
    assert Workspace("/w", ignore=[]).ignore == ()
