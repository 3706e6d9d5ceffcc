"""Workspaces seen from outside a run: the files at a point, a fork's directory, the files
that changed between two points, and gc's sweep of file contents no manifest references.

A point is a run and a seq: its manifest is the fold of the run's ``workspace`` events
up to that seq (:func:`tether.model.workspace.fold_manifest`), checked path by path, so
:func:`materialise` writes only below the directory it is given.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from tether.engine.workspace import Blobs, restore
from tether.errors import InvalidInput
from tether.model import codec
from tether.model import events as ev
from tether.model.workspace import (
    DEFAULT_IGNORE,
    FileChange,
    Manifest,
    Workspace,
    diff,
    fold_manifest,
)
from tether.store import Store


def manifest_at(store: Store, run_id: str, seq: int | None = None) -> Manifest:
    """The files of ``run_id``'s workspace after event ``seq`` (its head when None)."""
    found = [
        (e.seq, e.payload()) for e in store.read_events(run_id, upto=seq) if e.type == ev.WORKSPACE
    ]
    return fold_manifest(found, run_id)


def check_directory(directory: str | os.PathLike[str]) -> str:
    """``directory`` made absolute, if it is missing or empty (a fork's workspace is
    written whole: nothing of someone else's is overwritten); else InvalidInput."""
    path = os.path.abspath(os.fspath(directory))
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise InvalidInput(
            f"workspace {path} exists and is not an empty directory; name a new directory "
            f"for the fork's files (nothing was forked)"
        )
    return path


def materialise(
    store: Store, blobs: Blobs, run_id: str, seq: int, directory: str, cfg: Workspace | None
) -> Manifest:
    """Write the files of ``run_id`` at ``seq`` into ``directory``; return their manifest."""
    manifest = manifest_at(store, run_id, seq)
    ignore = cfg.ignore if cfg is not None else DEFAULT_IGNORE
    where = f"run {run_id} at seq {seq}"
    restore(directory, Workspace(directory, ignore=ignore), manifest, blobs, where)
    return manifest


def files_diff(
    store: Store, a: tuple[str, int | None], b: tuple[str, int | None]
) -> list[FileChange]:
    """The files added, removed or modified from point ``a`` to point ``b`` (run, seq)."""
    return diff(manifest_at(store, *a), manifest_at(store, *b))


def referenced(data: Iterable[str]) -> set[str]:
    """The digests the manifests (the data of every workspace event) name."""
    out: set[str] = set()
    for text in data:
        value = codec.decode(text)
        for item in value.get("files", []) if isinstance(value, dict) else []:
            if isinstance(item, list) and len(item) == 4 and isinstance(item[1], str):
                out.add(item[1])
    return out


def sweep(store: Store, before: float, *, dry_run: bool = False) -> tuple[int, int]:
    """Delete the workspace blobs no workspace event references and nothing stored or
    touched since ``before``; return how many and their bytes (``dry_run``: would)."""
    old = store.old_workspace_blobs(before)
    if not old:
        return 0, 0
    keep = referenced(store.workspace_event_data())
    gone = [(sha, size) for sha, size in old if sha not in keep]
    if not dry_run:
        gone = [(sha, size) for sha, size in gone if store.delete_workspace_blob(sha, before)]
    return len(gone), sum(size for _, size in gone)
