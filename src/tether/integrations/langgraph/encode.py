"""How TetherSaver turns LangGraph's values, checkpoints and writes into a thread's
records and back (:mod:`.thread` describes the records): a mixin of the saver, with its
``serde`` (LangGraph's serializer: values are decoded by it, as with any saver)."""

from __future__ import annotations

import builtins
import math
from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from .records import IMMUTABLE, NewBlobs, ck_delta, digest_of, to_stored
from .thread import CHAIN, PULL, Ref, Thread


class ThreadCodec:
    """Values to references and records, and back; ``serde`` is the saver's."""

    serde: SerializerProtocol

    def _load(self, th: Thread, ref: Ref, ns: str = "", channel: str = "") -> Any:
        if type(ref) is int:
            return self.serde.loads_typed(th.typed(ref))
        if ref[0] in ("l", "p"):
            return [self._element(th, x) for x in th.expand(ns, channel, ref)]
        return {k: self._load(th, r) for k, r in ref[1].items()}  # "d"

    def _element(self, th: Thread, x: Any) -> Any:
        """A list element: a blob, or ``[blob, id]``: a message stored without its id."""
        if type(x) is int:
            return self.serde.loads_typed(th.typed(x))
        return self.serde.loads_typed(th.typed(x[0])).model_copy(update={"id": x[1]})

    def _blob(self, th: Thread, value: Any, new: NewBlobs) -> int:
        """The ordinal of ``value``'s blob: the thread's, or a new one in ``new``. An
        immutable value (a string, a number) that was just stored is known by identity:
        a node's write is the object the next checkpoint holds, not serialized twice."""
        immutable = type(value) in IMMUTABLE
        if immutable:
            seen = new.recent.get(id(value)) or th.recent.get(id(value))
            if seen is not None and seen[0] is value:
                return int(seen[1])
        typed = self.serde.dumps_typed(value)
        digest = digest_of(typed)
        found = new.get(digest)
        if found is None:
            found = th.find(digest)
        if found is None:
            found = new.add(digest, typed)
        if immutable:
            new.recent[id(value)] = (value, found)
        return found

    def _element_ref(self, th: Thread, value: Any, new: NewBlobs) -> Any:
        """A list element's reference: its blob or, for a message the thread holds with
        another id, ``[that blob, id]`` (id None: without one). A message a node wrote
        without an id and its channel's copy, given one by ``add_messages``, are one
        blob, whichever of the two is stored first."""
        typed = self.serde.dumps_typed(value)
        digest = digest_of(typed)
        found = new.get(digest)
        if found is None:
            found = th.find(digest)
        if found is not None:
            return found
        other = new.derived.get(digest) or th.derived.get(digest)
        if other is not None:
            return other
        mid, copy_ = getattr(value, "id", None), getattr(value, "model_copy", None)
        if not (isinstance(mid, str) and callable(copy_)):
            return new.add(digest, typed)
        bare = self.serde.dumps_typed(copy_(update={"id": None}))
        bare_digest = digest_of(bare)
        base = new.get(bare_digest)
        if base is None:
            base = th.find(bare_digest)
        if base is not None:
            if self._same(bare, mid, digest):
                new.derived[digest] = [base, mid]  # the thread's once appended
                return [base, mid]
            return new.add(digest, typed)
        ordinal = new.add(digest, typed)
        if self._same(typed, None, bare_digest):  # a write of it without the id, later
            new.derived[bare_digest] = [ordinal, None]
        return ordinal

    def _same(self, typed: tuple[str, bytes], mid: str | None, digest: str) -> bool:
        """Whether the message serialized as ``typed``, given the id ``mid``, serializes
        to ``digest``: what a read rebuilds is exactly what was written."""
        again = self.serde.loads_typed(typed).model_copy(update={"id": mid})
        return digest_of(self.serde.dumps_typed(again)) == digest

    def _pack(
        self, th: Thread, value: Mapping[str, Any], new: NewBlobs, plain: bool = True
    ) -> dict[str, Any]:
        """A checkpoint's or metadata's dict: ``{"j": value}`` when it is JSON as it is
        (readable in ``tether show``) and ``plain``, else ``{"d": blob}`` of its
        serialized bytes (the saver packs again with ``plain`` False when tether's
        redaction rules would rewrite the JSON)."""
        if plain and _json(value):
            return {"j": value}
        return {"d": self._blob(th, value, new)}

    def _pack_ck(
        self,
        th: Thread,
        ns: str,
        parent: str | None,
        ck: dict[str, Any],
        values: builtins.list[builtins.list[Any]],
        new: NewBlobs,
        plain: bool = True,
    ) -> dict[str, Any]:
        """A checkpoint without its values, in its stored form: as the delta of its
        parent's when both are plain JSON (at most CHAIN deltas in a row), else as
        :meth:`_pack` keeps it."""
        stored = to_stored(ck, values)
        packed = self._pack(th, stored, new, plain)
        before = th.checkpoints.get((ns, parent)) if parent else None
        base = th.stored_ck(before) if before is not None else None
        if "j" not in packed or before is None or base is None:
            return packed
        depth = before.record["ck"].get("n", 0) + 1
        if depth > CHAIN:
            return packed
        mine = dict(packed["j"])
        mine.pop("id", None)  # the record's id, put back by Thread.stored_ck
        out: dict[str, Any] = {"n": depth}
        if type(mine.get("ts")) is int and type(base.get("ts")) is int:
            out["t"] = mine["ts"] - base["ts"]  # microseconds after the parent's
            mine["ts"] = base["ts"]
        implied = {ch: ver for ch, ver, _ in values}
        versions = stored.get("channel_versions", {})
        if all(versions.get(ch) == v for ch, v in implied.items()):
            # the versions this checkpoint wrote are in its values: not written twice
            mine["channel_versions"] = {k: v for k, v in versions.items() if k not in implied} | {
                k: v for k, v in base.get("channel_versions", {}).items() if k in implied
            }
            out["v"] = 1
        out["x"] = ck_delta({**base, "id": None}, {**mine, "id": None})
        return out

    def _unpack(self, th: Thread, packed: dict[str, Any]) -> Any:
        if "j" in packed:
            return packed["j"]
        return self.serde.loads_typed(th.typed(packed["d"]))

    def _ref(self, th: Thread, value: Any, new: NewBlobs, ns: str = "", channel: str = "") -> Ref:
        """Store ``value`` by content; a list element by element (a message history shares
        its messages across versions), as the tail of the channel's last list when given
        the channel (a checkpoint's values, not a task's writes)."""
        if type(value) is builtins.list and value:
            elements = [self._element_ref(th, v, new) for v in value]
            return th.list_ref(ns, channel, elements) if channel else ["l", elements]
        if type(value) is dict and value and all(type(k) is str for k in value):
            # an input ({"messages": [...]}) shares its messages with the writes of it
            return ["d", {k: self._ref(th, v, new) for k, v in value.items()}]
        return self._blob(th, value, new)

    def _checkpoint_record(
        self,
        th: Thread,
        ns: str,
        ids: tuple[str, str | None],
        ck: dict[str, Any],
        md: Mapping[str, Any],
        refs: builtins.list[builtins.list[Any]],
        new: NewBlobs,
        plain: bool = True,
    ) -> dict[str, Any]:
        """A checkpoint event's ``lg`` (thread.py: what is left out, and why); ``plain``
        False: its checkpoint and metadata serialized (see :meth:`_pack`)."""
        parent = ids[1]
        lg: dict[str, Any] = {}  # the id: in the event's output
        if ns:
            lg["ns"] = ns
        if parent != th.head.get(ns):
            lg["parent"] = parent
        lg["ck"] = self._pack_ck(th, ns, parent, ck, refs, new, plain)
        if not plain or md != {"source": md.get("source"), "step": md.get("step"), "parents": {}}:
            lg["md"] = self._pack(th, md, new, plain)
        if md.get("run_id") is not None:
            lg["run"] = md["run_id"]
        versions = {ver for _, ver, _ in refs}
        if len(versions) == 1:
            lg["V"] = versions.pop()
            lg["values"] = [[ch, ref] for ch, _, ref in refs]
        else:
            lg["values"] = refs
        return lg

    def _writes_record(
        self,
        th: Thread,
        ns: str,
        ids: tuple[str, str, str],
        kept: builtins.list[tuple[int, str, Any]],
        replace: bool,
        new: NewBlobs,
    ) -> dict[str, Any]:
        """A writes event's ``lg``: ``[channel, ref]`` for a write whose index is its
        row's, ``[index, channel, ref]`` otherwise."""
        cid, task_id, task_path = ids
        rows: builtins.list[builtins.list[Any]] = []
        for idx, ch, v in kept:
            ref = self._ref(th, v, new)
            rows.append([ch, ref] if idx == len(rows) else [idx, ch, ref])
        lg: dict[str, Any] = {"task": task_id, "rows": rows}
        if task_path != PULL + _name(task_path, kept[0][1]):
            lg["path"] = task_path
        if ns:
            lg["ns"] = ns
        if cid != th.head.get(ns):
            lg["checkpoint"] = cid
        if replace:
            lg["replace"] = True
        return lg


def _name(task_path: str, channel: str) -> str:
    """A writes step's name: its task's node (the path's last part), else the channel."""
    return task_path.rsplit(",", 1)[-1].strip() or channel


def _json(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is JSON as it is (decoding its JSON gives it back): strings,
    ints, finite floats, booleans, None, and lists and str-keyed dicts of them."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if depth > 64:
        return False
    if kind is list:
        return all(_json(v, depth + 1) for v in value)
    if kind is dict:
        return all(type(k) is str and _json(v, depth + 1) for k, v in value.items())
    return False
