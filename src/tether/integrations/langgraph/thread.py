"""One LangGraph thread read from its tether run's log: the pure part of the checkpointer.

A thread is a run (id = the thread id, agent ``langgraph``). After ``run.created`` every
event is a ``step.completed`` whose ``kind`` says what it holds:

- ``checkpoint``: one checkpoint (its id in the event's ``output``; ``lg``: its
  namespace ``ns`` unless ``""``, its ``parent`` unless it is the namespace's previous
  checkpoint in the log, the checkpoint without its channel values (``ck``, see
  :mod:`.records`), its metadata (``md``, left out when it is ``{"source", "step",
  "parents": {}}``: the ``output`` has the first two), and for each channel version it
  writes a reference to the value (``values``: ``[channel, ref]`` at the version
  ``V``, or ``[channel, version, ref]``);
- ``writes``: the pending writes of one task against one checkpoint (``checkpoint`` left
  out when it is the namespace's last one in the log);
- ``drop``: checkpoints (with their writes) removed by an earlier version's ``prune``
  (today's ``prune`` and ``delete_for_runs`` rewrite the log instead).

Values are stored by content, each once per thread (:mod:`.records`), and a reference
(``Ref``) is: a blob's ordinal (an int) for one value; ``["l", [element…]]`` for a list
stored element by element, an element being an ordinal or ``[ordinal, id]`` (a message
whose content is stored without an id, as a node wrote it, given the id the channel
gave it); ``["p", version, [element…], depth]`` for a list that extends the channel's
earlier version (:meth:`Thread.expand`); ``["d", {key: ref}]`` for a dict stored item
by item; None for a channel written empty. :class:`Thread` folds the events into
indexes (older events, with digests for references, are read into the same indexes);
nothing here reads a database or decides what code runs: values are decoded by the
serializer LangGraph gives the saver.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tether.model.events import RUN_COMPLETED, STEP_COMPLETED, Event

from .records import (
    Entry,
    NewBlobs,
    Typed,
    ck_apply,
    digest_of,
    entry_typed,
    from_old_entry,
    from_stored,
)

KIND_CHECKPOINT = "checkpoint"
KIND_WRITES = "writes"
KIND_DROP = "drop"

Ref = Any  # see the module docstring
CHAIN = 64  # a list value refers to at most this many earlier versions in a row
PULL = "~__pregel_pull, "  # a node's task path is this and its name: the path left out


@dataclass
class Checkpoint:
    """A stored checkpoint: where it is in the log, and how to rebuild it."""

    ns: str
    id: str
    parent: str | None
    seq: int
    record: dict[str, Any]  # the event's ``lg`` part, completed (ns, parent, md, values)


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
    data: list[Entry] = field(default_factory=list)  # the blobs, by ordinal
    known: dict[str, int] = field(default_factory=dict)  # digest -> ordinal
    unhashed: list[int] = field(default_factory=list)  # ordinals whose digest is not known
    derived: dict[str, list[Any]] = field(default_factory=dict)  # digest -> [ordinal, id]
    recent: dict[int, tuple[Any, int]] = field(default_factory=dict)  # id() -> value, ordinal
    head: dict[str, str] = field(default_factory=dict)  # ns -> its last checkpoint in the log
    checkpoints: dict[tuple[str, str], Checkpoint] = field(default_factory=dict)
    values: dict[tuple[str, str, str], Ref] = field(default_factory=dict)  # ns, channel, ver
    writes: dict[tuple[str, str], dict[tuple[str, int], Write]] = field(default_factory=dict)
    dropped: set[tuple[str, str]] = field(default_factory=set)
    stored: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # stored forms
    # each channel's newest list value: (version, chain depth, elements)
    lists: dict[tuple[str, str], tuple[Any, int, list[Any]]] = field(default_factory=dict)

    def fold(self, events: Iterable[Event], last: dict[str, Any] | None = None) -> None:
        """Apply events read after :attr:`seq` (other event types are skipped); ``last``:
        the last event's data decoded already (the writer's own append)."""
        events = list(events)
        for i, e in enumerate(events):
            self.seq, self.last = e.seq, e.data
            if e.type != STEP_COMPLETED:
                self.settled = e.type == RUN_COMPLETED
                continue
            self.steps += 1
            d = last if last is not None and i == len(events) - 1 else e.payload()
            lg = d.get("lg")
            if not isinstance(lg, dict):
                continue
            for digest, old in (d.get("blobs") or {}).items():  # the earlier format
                self.known.setdefault(digest, len(self.data))
                self.data.append(from_old_entry(old))
            new = d.get("b") or ()
            self.unhashed.extend(range(len(self.data), len(self.data) + len(new)))
            self.data.extend(new)
            kind = d.get("kind")
            if kind == KIND_CHECKPOINT:
                self._checkpoint(e.seq, lg, d.get("output"))
            elif kind == KIND_WRITES:
                self._writes(e.seq, lg, d.get("name"))
            elif kind == KIND_DROP:
                for ns, cid in lg["drop"]:
                    self.dropped.add((ns, cid))
                    self.writes.pop((ns, cid), None)

    def learn(self, new: NewBlobs) -> None:
        """What this process appended (folded already): its blobs' digests (not hashed
        again) and the messages it found stored with another id."""
        self.known.update(new.ordinals)
        self.derived.update(new.derived)
        if len(self.recent) > 32:  # the last few appends' values (held: bounded)
            self.recent.clear()
        self.recent.update(new.recent)
        if new.ordinals:
            self.unhashed = [o for o in self.unhashed if o < new.start]

    def find(self, digest: str) -> int | None:
        """The ordinal of the thread's blob of this digest, or None."""
        found = self.known.get(digest)
        if found is None and self.unhashed:
            for o in self.unhashed:
                self.known.setdefault(digest_of(self.typed(o)), o)
            self.unhashed.clear()
            found = self.known.get(digest)
        return found

    def _ref(self, ref: Ref) -> Ref:
        """A reference with ordinals (an earlier format's, with digests, converted)."""
        if ref is None or type(ref) is int:
            return ref
        kind = ref[0]
        if kind == "v":
            return self.known[ref[1]]
        if kind == "e":
            return None
        if kind in ("l", "+"):
            return [kind, [self._element(x) for x in ref[1]]]
        if kind == "p":
            return ["p", ref[1], [self._element(x) for x in ref[2]], ref[3]]
        return ["d", {k: self._ref(r) for k, r in ref[1].items()}]

    def _element(self, x: Any) -> Any:
        return self.known[x] if type(x) is str else x

    def _checkpoint(self, seq: int, lg: dict[str, Any], output: Any) -> None:
        out = output if isinstance(output, dict) else {}
        ns = lg.setdefault("ns", "")
        cid = str(lg.setdefault("id", out.get("checkpoint")))
        if "parent" not in lg:
            lg["parent"] = self.head.get(ns)
        if "md" not in lg:
            md = {"source": out.get("source"), "step": out.get("step")}
            lg["md"] = {"j": {**md, "parents": {}}}
        version = lg.get("V")
        values = lg["values"] = [
            [v[0], version, self._ref(v[1])] if len(v) == 2 else [v[0], v[1], self._ref(v[2])]
            for v in lg["values"]
        ]
        for value in values:
            channel, ver, ref = value
            if type(ref) is list and ref[0] == "+":  # extends the channel's last list
                last = self.lists[(ns, channel)]
                ref = value[2] = ["p", last[0], ref[1], last[1] + 1]
            self.values[(ns, channel, ver)] = ref
            if ref is not None and type(ref) is not int and ref[0] in ("l", "p"):
                depth = ref[3] if ref[0] == "p" else 0
                self.lists[(ns, channel)] = (ver, depth, self.expand(ns, channel, ref))
        self.checkpoints[(ns, cid)] = Checkpoint(ns, cid, lg["parent"], seq, lg)
        self.stored.pop((ns, cid), None)  # put again: rebuilt from this record
        self.dropped.discard((ns, cid))
        self.head[ns] = cid

    def _writes(self, seq: int, lg: dict[str, Any], name: Any) -> None:
        ns = lg.setdefault("ns", "")
        cid = str(lg.setdefault("checkpoint", self.head.get(ns)))
        lg.setdefault("path", f"{PULL}{name}")
        held = self.writes.setdefault((ns, cid), {})
        task_id, task_path, replace = lg["task"], lg["path"], lg.get("replace", False)
        for i, row in enumerate(lg["rows"]):
            idx, channel, ref = (i, *row) if len(row) == 2 else row
            if replace or (task_id, idx) not in held:
                held[(task_id, idx)] = Write(task_id, idx, channel, self._ref(ref), task_path, seq)

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

    def expand(self, ns: str, channel: str, ref: Ref) -> list[Any]:
        """The elements of a list value: ``["l", elements]`` holds them all,
        ``["p", version, tail, depth]`` is the channel's ``version`` (a list) followed by
        ``tail``, so a history that grows by a message costs one element, not all."""
        if ref[0] == "l":
            return list(ref[1])
        version, tail = ref[1], list(ref[2])
        last = self.lists.get((ns, channel))
        if last is not None and last[0] == version:
            return last[2] + tail
        return self.expand(ns, channel, self.values[(ns, channel, version)]) + tail

    def list_ref(self, ns: str, channel: str, elements: list[Any]) -> Ref:
        """The reference of a list value with these elements: a tail after the channel's
        last list when that is a prefix of it (at most :data:`CHAIN` links in a row, so
        that a read walks a bounded chain), else the whole list."""
        last = self.lists.get((ns, channel))
        if last is not None and last[1] < CHAIN:
            before = last[2]
            if len(before) <= len(elements) and elements[: len(before)] == before:
                return ["+", elements[len(before) :]]  # read as ["p", version, tail, depth]
        return ["l", elements]

    def stored_ck(self, c: Checkpoint) -> dict[str, Any] | None:
        """The stored form (:mod:`.records`) of checkpoint ``c`` (without values) when
        stored as JSON, whole (``{"j": ck}``) or as a delta of its parent's
        (``{"x": delta, "n": chain length}``, ``"v"``: the versions it wrote are its
        values'); None when it is stored serialized (``{"d": ref}``)."""
        key = (c.ns, c.id)
        found = self.stored.get(key)
        if found is not None:
            return found
        packed = c.record["ck"]
        if "j" in packed:
            found = packed["j"]
        elif "x" in packed:
            parent = str(packed.get("p") or c.parent)
            base = self.stored_ck(self.checkpoints[(c.ns, parent)])
            found = None if base is None else ck_apply(base, packed["x"])
            if found is not None:
                found["id"] = c.id
                if "t" in packed and base is not None:
                    found["ts"] = base["ts"] + packed["t"]
                if packed.get("v"):  # the versions it wrote are its values' versions
                    versions = dict(found.get("channel_versions", {}))
                    versions.update({ch: ver for ch, ver, _ in c.record["values"]})
                    found["channel_versions"] = versions
        if found is not None:
            self.stored[key] = found
        return found

    def plain_ck(self, c: Checkpoint) -> dict[str, Any] | None:
        """The checkpoint (without values) of ``c`` as LangGraph gave it (a new dict),
        or None when it is stored serialized."""
        found = self.stored_ck(c)
        return None if found is None else from_stored(found, c.record["values"])

    def typed(self, ref: int | str) -> Typed:
        """A stored serialized value by its ordinal (or an earlier format's digest)."""
        return entry_typed(self.data[ref if type(ref) is int else self.known[str(ref)]])
