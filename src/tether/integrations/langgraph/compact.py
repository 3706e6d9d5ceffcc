"""A thread's log rewritten with only the checkpoints it keeps: how ``prune`` and
``delete_for_runs`` give space back (the log is otherwise append-only).

The kept checkpoints are written again, oldest first, each with its pending writes, as
``put`` and ``put_writes`` would write them into an empty thread: deltas of the kept
parent, lists as tails of the channel's previous kept version, and the kept values'
blobs copied as stored (not serialized again), numbered anew.
"""

from __future__ import annotations

import builtins
from itertools import groupby
from typing import Any

from tether.model import events as ev
from tether.model.events import Event, NewEvent

from .encode import ThreadCodec, _name
from .preview import preview
from .records import NewBlobs
from .thread import KIND_CHECKPOINT, KIND_WRITES, PULL, Ref, Thread, Write
from .thread import Checkpoint as Stored


class Compactor(ThreadCodec):
    """Builds the step events of a thread that keeps only some of its checkpoints."""

    def _compacted(
        self, th: Thread, keep: builtins.list[Stored], first_seq: int, now: float
    ) -> builtins.list[NewEvent]:
        """The step events (positions from 1, seqs from ``first_seq``) of ``th`` keeping
        only the checkpoints ``keep``, each followed by its pending writes."""
        out = Thread(th.run_id, seq=first_seq - 1)
        moved: dict[int, int] = {}  # th's blob ordinals -> out's
        events: builtins.list[NewEvent] = []

        def append(data: dict[str, Any], new: NewBlobs) -> None:
            if new.entries:
                data["b"] = new.entries
            event = ev.new(ev.STEP_COMPLETED, {"pos": out.steps + 1, **data}, now)
            out.fold([Event(th.run_id, out.seq + 1, event.type, event.data, now, None)])
            events.append(event)

        def move(x: Any, new: NewBlobs) -> Any:
            if type(x) is not int:  # a list element [ordinal, id]
                return [move(x[0], new), x[1]]
            if x not in moved:
                moved[x] = new.start + len(new.entries)
                new.entries.append(th.data[x])
            return moved[x]

        def ref(r: Ref, new: NewBlobs, ns: str = "", channel: str = "") -> Ref:
            if r is None or type(r) is int:
                return None if r is None else move(r, new)
            if r[0] == "d":
                return ["d", {k: ref(v, new) for k, v in r[1].items()}]
            elements = [move(x, new) for x in th.expand(ns, channel, r)]
            return out.list_ref(ns, channel, elements) if channel else ["l", elements]

        for c in sorted(keep, key=lambda c: (c.ns, c.id)):
            new = NewBlobs(len(out.data))
            ck = th.plain_ck(c)
            if ck is None:
                ck = self._unpack(th, c.record["ck"])
            md = self._unpack(th, c.record["md"])
            refs = [
                [ch, ver, ref(th.values[(c.ns, ch, ver)], new, c.ns, ch)]
                for ch, ver in ck["channel_versions"].items()
                if th.values.get((c.ns, ch, ver)) is not None and (c.ns, ch, ver) not in out.values
            ]
            lg = self._checkpoint_record(out, c.ns, (c.id, c.parent), ck, md, refs, new)
            step = md.get("step")
            name = f"step:{step}" if not c.ns else f"{c.ns}/step:{step}"
            summary = {"checkpoint": c.id, "step": step, "source": md.get("source")}
            data = {"name": name, "kind": KIND_CHECKPOINT, "lg": lg, "output": summary}
            append(data, new)
            for (task_id, path), group in groupby(
                th.pending(c.ns, c.id), key=lambda w: (w.task_id, w.task_path)
            ):
                new = NewBlobs(len(out.data))
                append(self._moved_writes(th, out, c, (task_id, path), list(group), ref, new), new)
        return events

    def _moved_writes(
        self,
        th: Thread,
        out: Thread,
        c: Stored,
        task: tuple[str, str],
        writes: builtins.list[Write],
        ref: Any,
        new: NewBlobs,
    ) -> dict[str, Any]:
        """A writes event's data for one task's pending writes, their values moved."""
        task_id, path = task
        rows: builtins.list[builtins.list[Any]] = []
        for w in writes:
            moved = ref(w.ref, new)
            rows.append([w.channel, moved] if w.idx == len(rows) else [w.idx, w.channel, moved])
        name = _name(path, writes[0].channel)
        lg: dict[str, Any] = {"task": task_id, "rows": rows}
        if path != PULL + name:
            lg["path"] = path
        if c.ns:
            lg["ns"] = c.ns
        if c.id != out.head.get(c.ns):
            lg["checkpoint"] = c.id
        summary = {
            w.channel: preview(self._load(th, w.ref))
            for w in writes
            if not w.channel.startswith("branch:")
        }
        return {"name": name, "kind": KIND_WRITES, "lg": lg, "output": summary}
