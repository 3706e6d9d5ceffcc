"""One LangGraph thread read from its tether run's log: the pure part of the checkpointer.

A thread is a run (id = the thread id, agent ``langgraph``). After ``run.created`` every
event is a ``step.completed`` whose ``kind`` says what it holds:

- ``checkpoint``: one checkpoint (``lg``: namespace, id, parent, the checkpoint without
  its channel values, the metadata's digest, and for each channel version written by
  this checkpoint a reference to its value);
- ``writes``: the pending writes of one task against one checkpoint;
- ``drop``: checkpoints (with their writes) removed by ``prune`` or ``delete_for_runs``.

Values are stored by content: an event carries, under ``blobs``, only the serialized
values (digest -> type and base64 bytes) that no earlier event of the thread carried, and
a list (a message history) is stored element by element, so that a channel that grows by
one message costs one message. :class:`Thread` folds the events into indexes; nothing
here reads a database or decides what code runs: values are decoded by the serializer
LangGraph gives the saver.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tether.model.events import RUN_COMPLETED, STEP_COMPLETED, Event

KIND_CHECKPOINT = "checkpoint"
KIND_WRITES = "writes"
KIND_DROP = "drop"

# A reference to a stored value: ["v", digest] for one serialized value, ["l", [digest…]]
# for a list stored element by element, ["p", version, [digest…], depth] for a list that
# extends the channel's earlier version (Thread.expand), ["d", {key: ref}] for a dict
# stored item by item, ["e"] for a channel written empty.
Ref = list[Any]
CHAIN = 64  # a list value refers to at most this many earlier versions in a row
Typed = tuple[str, bytes]
Blobs = dict[str, list[str]]  # digest -> [type, base85 bytes(, z)]: values as events carry them


def digest_of(typed: Typed) -> str:
    """The content address of a serialized value (its type is part of the content): the
    first 128 bits of its SHA-256, in hex, unique within a thread."""
    h = hashlib.sha256(typed[0].encode())
    h.update(b"\0")
    h.update(typed[1])
    return h.hexdigest()[:32]


def blob_json(typed: Typed) -> list[str]:
    """A serialized value as an event's JSON keeps it: ``[type, base85]``, or
    ``[type, base85 of the zlib-compressed bytes, "z"]`` when that is shorter (base85's
    alphabet has no quote or backslash: JSON keeps it as it is)."""
    data, packed = typed[1], zlib.compress(typed[1], 6)
    if len(packed) < len(data):
        return [typed[0], base64.b85encode(packed).decode("ascii"), "z"]
    return [typed[0], base64.b85encode(data).decode("ascii")]


def blob_typed(value: list[str]) -> Typed:
    """The inverse of :func:`blob_json`."""
    data = base64.b85decode(value[1])
    return value[0], zlib.decompress(data) if value[2:] == ["z"] else data


NESTED = ("channel_versions", "versions_seen")  # a checkpoint's dicts kept entry by entry


def ck_delta(base: dict[str, Any], ck: dict[str, Any]) -> dict[str, Any]:
    """What ``ck`` (a checkpoint without values, as plain JSON) changes of ``base`` (its
    parent's): the top-level items that differ (``"top"``), the keys gone (``"-"``), and
    for the version dicts the entries that differ (``"+"``) and the keys gone (``"-"``);
    empty parts are left out. :func:`ck_apply` inverts it."""
    delta: dict[str, Any] = {}
    top = {k: v for k, v in ck.items() if k not in NESTED and (k not in base or base[k] != v)}
    gone = [k for k in base if k not in ck]
    if top:
        delta["top"] = top
    if gone:
        delta["-"] = gone
    for key in NESTED:
        new, old = ck.get(key), base.get(key)
        if not (isinstance(new, dict) and isinstance(old, dict)):
            if key in ck and (key not in base or new != old):
                delta.setdefault("top", {})[key] = new
            continue
        part: dict[str, Any] = {}
        added = {k: v for k, v in new.items() if k not in old or old[k] != v}
        removed = [k for k in old if k not in new]
        if added:
            part["+"] = added
        if removed:
            part["-"] = removed
        if part:
            delta[key] = part
    return delta


def ck_apply(base: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint that ``delta`` (from :func:`ck_delta`) makes of ``base``."""
    gone = set(delta.get("-", ()))
    ck = {k: v for k, v in base.items() if k not in gone}
    for key in NESTED:
        part = delta.get(key)
        if part is not None:
            removed = set(part.get("-", ()))
            merged = {k: v for k, v in ck[key].items() if k not in removed}
            merged.update(part.get("+", {}))
            ck[key] = merged
    ck.update(delta.get("top", {}))
    return ck


@dataclass
class Checkpoint:
    """A stored checkpoint: where it is in the log, and how to rebuild it."""

    ns: str
    id: str
    parent: str | None
    seq: int
    record: dict[str, Any]  # the event's ``lg`` part


@dataclass
class Write:
    """One pending write of a task against a checkpoint."""

    task_id: str
    idx: int
    channel: str
    ref: Ref
    task_path: str
    seq: int


@dataclass
class Thread:
    """The indexes of one thread, folded from its run's events (see the module docstring).

    ``seq`` is the last seq read: a writer appends after it, so that a writer that has
    not seen another's append gets Conflict instead of forking the thread silently.
    """

    run_id: str
    seq: int = 0
    last: str = ""  # the data of event ``seq``: a cached log that was replaced differs here
    steps: int = 0  # step events so far: the next one's position is steps + 1
    # whether the run reads as completed (idle between invocations); a fork of it is
    # queued until its first write here, which completes it again
    settled: bool = False
    stale: bool = False  # an append was refused: another writer went first; read again
    blobs: dict[str, list[str]] = field(default_factory=dict)
    checkpoints: dict[tuple[str, str], Checkpoint] = field(default_factory=dict)
    values: dict[tuple[str, str, str], Ref] = field(default_factory=dict)  # ns, channel, ver
    writes: dict[tuple[str, str], dict[tuple[str, int], Write]] = field(default_factory=dict)
    dropped: set[tuple[str, str]] = field(default_factory=set)
    cks: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # plain_ck's
    # each channel's newest list value: (version, chain depth, element digests)
    lists: dict[tuple[str, str], tuple[Any, int, list[str]]] = field(default_factory=dict)

    def fold(self, events: Iterable[Event]) -> None:
        """Apply events read after :attr:`seq` (other event types are skipped)."""
        for e in events:
            self.seq, self.last = e.seq, e.data
            if e.type != STEP_COMPLETED:
                self.settled = e.type == RUN_COMPLETED
                continue
            self.steps += 1
            d = e.payload()
            lg = d.get("lg")
            if not isinstance(lg, dict):
                continue
            self.blobs.update(d.get("blobs") or {})
            kind = d.get("kind")
            if kind == KIND_CHECKPOINT:
                self._checkpoint(e.seq, lg)
            elif kind == KIND_WRITES:
                self._writes(e.seq, lg)
            elif kind == KIND_DROP:
                for ns, cid in lg["drop"]:
                    self.dropped.add((ns, cid))
                    self.writes.pop((ns, cid), None)

    def _checkpoint(self, seq: int, lg: dict[str, Any]) -> None:
        ns, cid = lg["ns"], lg["id"]
        for channel, version, ref in lg["values"]:
            self.values[(ns, channel, version)] = ref
            if ref[0] in ("l", "p"):
                depth = ref[3] if ref[0] == "p" else 0
                self.lists[(ns, channel)] = (version, depth, self.expand(ns, channel, ref))
        self.checkpoints[(ns, cid)] = Checkpoint(ns, cid, lg.get("parent"), seq, lg)
        self.cks.pop((ns, cid), None)  # put again: rebuilt from this record
        self.dropped.discard((ns, cid))

    def _writes(self, seq: int, lg: dict[str, Any]) -> None:
        key = (lg["ns"], lg["checkpoint"])
        held = self.writes.setdefault(key, {})
        task_id, task_path, replace = lg["task"], lg["path"], lg.get("replace", False)
        for idx, channel, ref in lg["rows"]:
            if replace or (task_id, idx) not in held:
                held[(task_id, idx)] = Write(task_id, idx, channel, ref, task_path, seq)

    def live(self, ns: str | None = None) -> list[Checkpoint]:
        """The checkpoints not dropped (of namespace ``ns``, or all), newest id first."""
        found = [
            c
            for k, c in self.checkpoints.items()
            if k not in self.dropped and (ns is None or c.ns == ns)
        ]
        found.sort(key=lambda c: c.id, reverse=True)
        return found

    def get(self, ns: str, checkpoint_id: str | None) -> Checkpoint | None:
        """The checkpoint ``checkpoint_id`` of ``ns``, or its newest when None."""
        if checkpoint_id is None:
            newest = self.live(ns)
            return newest[0] if newest else None
        if (ns, checkpoint_id) in self.dropped:
            return None
        return self.checkpoints.get((ns, checkpoint_id))

    def pending(self, ns: str, checkpoint_id: str) -> list[Write]:
        """The pending writes of a checkpoint, in the order LangGraph applies them."""
        held = self.writes.get((ns, checkpoint_id), {})
        return sorted(held.values(), key=lambda w: (w.task_path, w.task_id, w.idx))

    def expand(self, ns: str, channel: str, ref: Ref) -> list[str]:
        """The element digests of a list value: ``["l", digests]`` holds them all,
        ``["p", version, tail, depth]`` is the channel's ``version`` (a list) followed by
        ``tail``, so a history that grows by a message costs one digest, not all of them."""
        if ref[0] == "l":
            return [str(d) for d in ref[1]]
        version, tail = ref[1], [str(d) for d in ref[2]]
        last = self.lists.get((ns, channel))
        if last is not None and last[0] == version:
            return last[2] + tail
        return self.expand(ns, channel, self.values[(ns, channel, version)]) + tail

    def list_ref(self, ns: str, channel: str, digests: list[str]) -> Ref:
        """The reference of a list value with these element digests: a tail after the
        channel's last list when that is a prefix of it (at most :data:`CHAIN` links in a
        row, so that a read walks a bounded chain), else the whole list."""
        last = self.lists.get((ns, channel))
        if last is not None and last[1] < CHAIN:
            version, depth, before = last
            if len(before) <= len(digests) and digests[: len(before)] == before:
                return ["p", version, digests[len(before) :], depth + 1]
        return ["l", digests]

    def plain_ck(self, c: Checkpoint) -> dict[str, Any] | None:
        """The checkpoint (without values) of ``c`` when stored as JSON, whole or as a
        delta of its parent's (``{"x": delta, "n": chain length}``, ``"v"``: the versions
        it wrote are its values'); None
        when it is stored serialized (``{"d": digest}``)."""
        key = (c.ns, c.id)
        found = self.cks.get(key)
        if found is not None:
            return found
        packed = c.record["ck"]
        if "j" in packed:
            found = packed["j"]
        elif "x" in packed:
            parent = str(packed.get("p") or c.parent)
            base = self.plain_ck(self.checkpoints[(c.ns, parent)])
            found = None if base is None else ck_apply(base, packed["x"])
            if found is not None:
                found["id"] = c.id
                if packed.get("v"):  # the versions it wrote are its values' versions
                    versions = dict(found.get("channel_versions", {}))
                    versions.update({ch: ver for ch, ver, _ in c.record["values"]})
                    found["channel_versions"] = versions
        if found is not None:
            self.cks[key] = found
        return found

    def typed(self, digest: str) -> Typed:
        """A stored serialized value by its digest."""
        return blob_typed(self.blobs[digest])
