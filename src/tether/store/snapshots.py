"""Snapshots of a run's state: a small root plus content-addressed pages of steps.

Format 2 (what :func:`save` writes) keeps a snapshot's cost flat as a run grows::

    root (the snapshots table)   every field of RunState but its steps, ``n`` (how
                                 many steps), ``committed``, ``page_size``, the
                                 digests of the full pages in order, and ``tail``
                                 (the steps after the last full page, inline)
    page (the blobs table)       the steps of ``page_size`` positions, encoded as a
                                 list, stored under the SHA-256 of its bytes

So :func:`load` decodes only the root (status, position, usage, vars, failure and the
last steps need no page), and a page loads the first time one of its positions is
read. A snapshot writes the root and only the pages whose positions changed since the
snapshot its state was folded from: the full pages before them are shared, by
digest, between the snapshots of a run and of its forks.

Format 1 (the whole state with every step inline, what tether wrote before) is still
read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.errors import NotFound, StoreError
from tether.model import codec
from tether.model.state import RunState, from_data, from_head_data, head_data
from tether.model.steps import Pages, StepList, StepState, step_data, step_from
from tether.store import Snapshot, Store

FORMAT = 2
PAGE_SIZE = 256  # positions per page


@dataclass(frozen=True, slots=True)
class Encoded:
    """A state encoded as format 2: the root's text, the pages it needs that may not be
    stored yet (digest -> bytes), and the digests of the stored pages it reuses."""

    root: str
    pages: dict[str, bytes]
    reused: tuple[str, ...] = ()


def encode(state: RunState, page_size: int = PAGE_SIZE) -> Encoded:
    """``state`` as a format 2 root and pages. A page of a StepList whose positions did
    not change keeps its digest and is not encoded again."""
    steps = state.steps
    full = len(steps) // page_size
    if isinstance(steps, StepList) and steps.pages.size == page_size:
        known = steps.stored_digests()
    else:
        known = []
    digests: list[str] = []
    new: dict[str, bytes] = {}
    for k in range(full):
        digest = known[k] if k < len(known) else None
        if digest is None:
            data = _page_bytes(steps[k * page_size : (k + 1) * page_size])
            digest = hashlib.sha256(data).hexdigest()
            new[digest] = data
        digests.append(digest)
    root = {
        "format": FORMAT,
        "state": head_data(state),
        "n": len(steps),
        "committed": state.committed,
        "page_size": page_size,
        "pages": digests,
        "tail": [step_data(s) for s in steps[full * page_size :]],
    }
    reused = tuple(d for d in digests if d not in new)
    return Encoded(codec.encode(root), new, reused)


def decode(data: str, load_page: Callable[[str], bytes]) -> RunState:
    """The state of a snapshot's data (format 1 or 2). Loads no page: ``load_page``
    (digest -> bytes) is called when a position of that page is first read."""
    root = codec.decode(data)
    if root.get("format") != FORMAT:
        return from_data(root)
    size = root["page_size"]
    pages = Pages(tuple(root["pages"]), size, lambda digest: _page_steps(load_page, digest))
    tail = tuple(step_from(s) for s in root["tail"])
    steps = StepList(pages, tail, n=root["n"], committed=root["committed"])
    return from_head_data(root["state"], steps)


def save(store: Store, state: RunState, now: float, page_size: int = PAGE_SIZE) -> None:
    """Store ``state`` as a format 2 snapshot: its new pages, then its root (a crash in
    between leaves unreferenced pages, never a root without its pages). The stored pages
    it reuses are dated ``now`` with the new ones, so that gc, which sweeps the pages no
    snapshot references, leaves them alone until the root is committed. (``page_size``:
    tests use small pages to reach page sharing with short logs.)"""
    encoded = encode(state, page_size)
    if encoded.pages or encoded.reused:
        store.put_blobs(encoded.pages, now=now, touch=encoded.reused)
    store.save_snapshot(Snapshot(state.run_id, state.seq, encoded.root, now))


def load(store: Store, snapshot: Snapshot) -> RunState:
    """The state of ``snapshot``, its pages read from ``store`` when first needed."""
    return decode(snapshot.data, lambda digest: _read_page(store, snapshot, digest))


def _page_bytes(steps: Sequence[StepState]) -> bytes:
    return codec.encode([step_data(s) for s in steps]).encode()


def _page_steps(load_page: Callable[[str], bytes], digest: str) -> tuple[StepState, ...]:
    data = load_page(digest)
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise StoreError(
            f"snapshot page {digest} is corrupt (its bytes hash to {actual}); delete the "
            f"run's snapshots (they are a cache) and load it again"
        )
    items: list[Mapping[str, Any]] = codec.decode(data)
    return tuple(step_from(s) for s in items)


def _read_page(store: Store, snapshot: Snapshot, digest: str) -> bytes:
    found = store.get_blobs([digest])
    if digest not in found:
        raise NotFound(
            f"run {snapshot.run_id}: page {digest} of its snapshot at seq {snapshot.seq} "
            f"is missing from the blobs table; delete the run's snapshots (they are a "
            f"cache) and load it again"
        )
    return found[digest]
