"""TetherSaver: a LangGraph checkpointer that keeps each thread as a tether run.

See :mod:`tether.integrations.langgraph.thread` for how a thread is laid out in its log.
Every ``put`` and ``put_writes`` is one append (or, for a thread's first write, one
``create_run``): a checkpoint with its new values, or a task's writes with theirs, is
committed whole or not at all. Each append names the seq this saver read last, so a
second writer on the thread gets :class:`tether.Conflict` instead of a silent fork.

The async methods run the sync ones in a thread (one implementation, not two).
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import random
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from tether.app import App
from tether.errors import Conflict, InvalidInput
from tether.model import codec
from tether.model import events as ev
from tether.model.events import Event, NewEvent
from tether.model.status import RunStatus
from tether.store import NewRun, Transition

from .compact import Compactor
from .preview import preview
from .records import NewBlobs
from .thread import KIND_CHECKPOINT, KIND_WRITES, Thread
from .thread import Checkpoint as Stored

AGENT = "langgraph"  # the agent name of every thread's run: `tether runs --agent langgraph`
_ALL = 1_000_000_000  # list_runs' limit when every thread is wanted


class TetherSaver(Compactor, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on a tether App (SQLite or PostgreSQL).

    ``graph.compile(checkpointer=TetherSaver(app))``; each ``thread_id`` is a tether run of
    the same id (agent ``langgraph``), so ``tether show/history/state/diff/fork/gc`` work
    on threads. Raises :class:`tether.Conflict` when another writer appended to a thread
    after this saver last read it (read the thread again, then retry).
    """

    def __init__(self, app: App, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self.app = app
        self.store = app.store
        self._threads: dict[str, Thread] = {}
        self._locks: dict[str, threading.RLock] = {}
        self._guard = threading.Lock()

    # -- reading ---------------------------------------------------------------------------

    def _lock(self, thread_id: str) -> threading.RLock:
        with self._guard:
            lock = self._locks.get(thread_id)
            if lock is None:
                lock = self._locks[thread_id] = threading.RLock()
            return lock

    def _read(self, thread_id: str) -> Thread | None:
        """The thread with every event appended so far (None: no such thread)."""
        with self._lock(thread_id):
            th = self._threads.get(thread_id)
            if th is not None:  # the last event read again: is the log still the one cached?
                events = self.store.read_events(thread_id, after=th.seq - 1)
                if events and events[0].data == th.last:
                    events = events[1:]
                else:  # deleted (gc, delete_thread elsewhere), or deleted and made again
                    self._threads.pop(thread_id, None)
                    th = None
            if th is None:
                events = self.store.read_events(thread_id)
                if not events:
                    return None
                _check_agent(thread_id, events[0])
                th = Thread(thread_id)
            th.fold(events)
            th.stale = False
            self._threads[thread_id] = th
            return th

    def _tuple(self, th: Thread, c: Stored) -> CheckpointTuple:
        rec = c.record
        plain = th.plain_ck(c)
        # a copy: LangGraph may change the checkpoint it gets, never the cached one
        ck: dict[str, Any] = (
            copy.deepcopy(plain) if plain is not None else self._unpack(th, rec["ck"])
        )
        values = {}
        for channel, version in ck["channel_versions"].items():
            ref = th.values.get((c.ns, channel, version))
            if ref is not None:
                values[channel] = self._load(th, ref, c.ns, channel)
        ck["channel_values"] = values
        writes = [(w.task_id, w.channel, self._load(th, w.ref)) for w in th.pending(c.ns, c.id)]
        parent = _config(th.run_id, c.ns, c.parent) if c.parent else None
        return CheckpointTuple(
            config=_config(th.run_id, c.ns, c.id),
            checkpoint=ck,  # type: ignore[arg-type]  # a Checkpoint rebuilt from its parts
            metadata=self._unpack(th, rec["md"]),
            parent_config=parent,
            pending_writes=writes,
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint of ``config`` (its thread's newest in the namespace when the config
        names no ``checkpoint_id``) with its pending writes, or None."""
        conf = config["configurable"]
        th = self._read(conf["thread_id"])
        if th is None:
            return None
        with self._lock(th.run_id):
            c = th.get(conf.get("checkpoint_ns", ""), get_checkpoint_id(config))
            return None if c is None else self._tuple(th, c)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of ``config``'s thread (and namespace, and checkpoint,
        when given) or of every thread, whose metadata holds every item of ``filter``, older
        than ``before``'s checkpoint, at most ``limit``."""
        conf = (config or {}).get("configurable") or {}
        if "thread_id" in conf:
            ids = [conf["thread_id"]]
        else:
            ids = [r.id for r in self.store.list_runs(agent=AGENT, limit=_ALL)]
        ns = conf.get("checkpoint_ns")
        only = conf.get("checkpoint_id")
        under = get_checkpoint_id(before) if before else None
        found: builtins.list[CheckpointTuple] = []
        for thread_id in ids:
            th = self._read(thread_id)
            if th is None:
                continue
            with self._lock(thread_id):
                for c in th.live(ns):
                    if (only and c.id != only) or (under and c.id >= under):
                        continue
                    tup = self._tuple(th, c)
                    if filter and any(tup.metadata.get(k) != v for k, v in filter.items()):
                        continue
                    found.append(tup)
                    if limit is not None and len(found) >= limit:
                        return iter(found)
        return iter(found)

    # -- writing ---------------------------------------------------------------------------

    def _append(
        self,
        thread_id: str,
        th: Thread,
        kind: str,
        name: str,
        lg: dict[str, Any],
        output: Any,
        new: NewBlobs | None = None,
        again: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        """Append one step event to the thread (create its run first when new). When
        tether's redaction rules would rewrite part of ``lg`` (a checkpoint's string that
        looks like a credential), ``again()`` gives the record to store instead."""
        now = self.app.clock.now()
        data = {"pos": th.steps + 1, "name": name, "kind": kind, "lg": lg, "output": output}
        if new is not None and new.entries:
            data["b"] = new.entries
        event = ev.new(ev.STEP_COMPLETED, data, now)
        folded = _as_stored(event.data, data)
        if folded is None:
            if again is None:
                raise InvalidInput(
                    f"thread {thread_id}: {name!r}'s record holds text that tether's "
                    f"redaction rules rewrite (docs/secrets.md); it cannot be stored"
                )
            return self._append(thread_id, th, kind, name, again(), output, new)
        if th.seq == 0:
            first = [
                ev.new(ev.RUN_CREATED, {"agent": AGENT, "version": None, "input": {}}, now),
                ev.new(ev.RUN_COMPLETED, {"output": None}, now),
                event,
            ]
            run = NewRun(thread_id, AGENT, None, RunStatus.COMPLETED)
            try:
                self.store.create_run(run, first, lease_owner=None, now=now, ttl=0.0)
            except Conflict as e:  # another writer created the thread first
                raise _conflict(thread_id, 0) from e
            th.fold(_stored(thread_id, first, 1), folded)
            self._threads[thread_id] = th
        else:
            if th.stale:
                raise _conflict(thread_id, th.seq)
            events, settle = [event], None
            if not th.settled:  # a fork (queued by `tether fork`): completed, not for workers
                events = [ev.new(ev.RUN_COMPLETED, {"output": None}, now), event]
                settle = Transition(RunStatus.COMPLETED)
            try:
                seq = self.store.append(
                    thread_id, events, expected_seq=th.seq, epoch=0, transition=settle, now=now
                )
            except Conflict as e:
                th.stale = True  # until a read: no later write of this run may go through
                raise _conflict(thread_id, th.seq) from e
            th.fold(_stored(thread_id, events, seq - len(events) + 1), folded)
        if new is not None:
            th.learn(new)

    def _writable(self, thread_id: str) -> Thread:
        th = self._threads.get(thread_id) or self._read(thread_id)
        return th if th is not None else Thread(thread_id)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append a checkpoint with the values of ``new_versions`` (those not stored yet)."""
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        with self._lock(thread_id):
            th = self._writable(thread_id)
            new = NewBlobs(len(th.data))
            values = checkpoint["channel_values"]
            refs = [
                [ch, ver, self._ref(th, values[ch], new, ns, ch) if ch in values else None]
                for ch, ver in new_versions.items()
            ]
            ck = {k: v for k, v in checkpoint.items() if k != "channel_values"}
            md = get_serializable_checkpoint_metadata(config, metadata)
            ids = (checkpoint["id"], conf.get("checkpoint_id"))
            lg = self._checkpoint_record(th, ns, ids, ck, md, refs, new)

            def serialized() -> dict[str, Any]:
                return self._checkpoint_record(th, ns, ids, ck, md, refs, new, plain=False)

            summary = {"checkpoint": ids[0], "step": md.get("step"), "source": md.get("source")}
            name = f"step:{md.get('step')}" if not ns else f"{ns}/step:{md.get('step')}"
            self._append(thread_id, th, KIND_CHECKPOINT, name, lg, summary, new, serialized)
        return _config(thread_id, ns, checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Append a task's writes against ``config``'s checkpoint. A write already stored
        for (task, index) is kept, except the special channels' (error, interrupt…),
        which replace it."""
        conf = config["configurable"]
        thread_id, ns, cid = conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"]
        replace = all(ch in WRITES_IDX_MAP for ch, _ in writes)
        with self._lock(thread_id):
            th = self._writable(thread_id)
            held = th.writes.get((ns, cid), {})
            indexed = [(WRITES_IDX_MAP.get(ch, i), ch, v) for i, (ch, v) in enumerate(writes)]
            kept = [(i, ch, v) for i, ch, v in indexed if replace or (task_id, i) not in held]
            if not kept:
                return
            new = NewBlobs(len(th.data))
            lg = self._writes_record(th, ns, (cid, task_id, task_path), kept, replace, new)
            summary = {ch: preview(v) for ch, v in writes if not ch.startswith("branch:")}
            name = _name(task_path, writes[0][0])
            self._append(thread_id, th, KIND_WRITES, name, lg, summary, new)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions that sort as strings: a counter, then a random part, so that two
        branches of a thread (a fork, an edit of an old checkpoint) never give different
        values the same version."""
        n = 0 if current is None else int(str(current).split(".")[0])
        return f"{n + 1:012}.{random.getrandbits(40):010x}"

    # -- deleting and copying --------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's run with its whole log (no-op for an unknown thread)."""
        with self._lock(thread_id):
            if self._read(thread_id) is not None:
                self.store.delete_runs([thread_id])
            self._threads.pop(thread_id, None)

    def _rewrite(self, thread_id: str, keep: Callable[[Thread], builtins.list[Stored]]) -> None:
        """Replace the thread's log with one holding only the checkpoints ``keep`` picks
        (with their pending writes), in one transaction, when that drops any: the space
        of the others is given back (compact.py). Conflict when another writer appended
        after this read."""
        with self._lock(thread_id):
            th = self._read(thread_id)
            if th is None:
                return
            kept = keep(th)
            if len(kept) == len(th.checkpoints) and not th.dropped:
                return  # nothing to give back
            now = self.app.clock.now()
            first = [
                ev.new(ev.RUN_CREATED, {"agent": AGENT, "version": None, "input": {}}, now),
                ev.new(ev.RUN_COMPLETED, {"output": None}, now),
            ]
            events = first + self._compacted(th, kept, len(first) + 1, now)
            self._threads.pop(thread_id, None)  # read again after
            try:
                self.store.replace_log(thread_id, events, expected_seq=th.seq, now=now)
            except Conflict as e:
                raise _conflict(thread_id, th.seq) from e

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove the checkpoints (and their writes) that LangGraph runs ``run_ids`` made,
        in every thread: each thread that had some is rewritten without them (one
        transaction per thread), and their space is given back."""
        wanted = set(run_ids)
        if not wanted:
            return
        for r in self.store.list_runs(agent=AGENT, limit=_ALL):
            self._rewrite(
                r.id, lambda th: [c for c in th.live() if c.record.get("run") not in wanted]
            )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep only the newest checkpoint of each namespace (with its
        pending writes), rewriting the thread's log without the others (one transaction
        per thread: their space is given back); ``"delete"``: delete the threads."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInput(f"prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
            else:
                self._rewrite(thread_id, lambda th: _newest(th.live()))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy the source thread's whole log into a new thread (one ``create_run``). Raises
        Conflict when the target exists; an unknown source copies nothing."""
        events = self.store.read_events(source_thread_id)
        if not events:
            return
        _check_agent(source_thread_id, events[0])
        copied = [NewEvent(e.type, e.data, e.at, e.actor) for e in events]
        run = NewRun(target_thread_id, AGENT, None, RunStatus.COMPLETED)
        with self._lock(target_thread_id):
            now = self.app.clock.now()
            self.store.create_run(run, copied, lease_owner=None, now=now, ttl=0.0)
            self._threads.pop(target_thread_id, None)

    # -- async: the sync methods in a worker thread ------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`get_tuple` off the event loop."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list` off the event loop."""
        found = await asyncio.to_thread(
            lambda: builtins.list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for tup in found:
            yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`put` off the event loop."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes` off the event loop."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread` off the event loop."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`delete_for_runs` off the event loop."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread` off the event loop."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune` off the event loop."""
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _name(task_path: str, channel: str) -> str:
    """A writes step's name: its task's node (the path's last part), else the channel."""
    return task_path.rsplit(",", 1)[-1].strip() or channel


def _newest(live: list[Stored]) -> list[Stored]:
    """``live`` is newest first: the first of each namespace."""
    seen: set[str] = set()
    kept = []
    for c in live:
        if c.ns not in seen:
            kept.append(c)
        seen.add(c.ns)
    return kept


def _as_stored(text: str, data: dict[str, Any]) -> dict[str, Any] | None:
    """The step event ``data`` as its stored ``text`` decodes (a copy: folded into the
    thread's indexes), or None when tether's redaction rules rewrote part of its
    record (``lg``, ``b``; a preview in ``output`` may be redacted)."""
    try:
        if text == orjson.dumps(data).decode():  # nothing was redacted: the fast path
            return dict(orjson.loads(text))
    except orjson.JSONEncodeError:
        pass
    stored: dict[str, Any] = codec.decode(text)
    same = stored.get("lg") == data["lg"] and stored.get("b") == data.get("b")
    return stored if same else None


def _stored(run_id: str, events: list[NewEvent], first_seq: int) -> list[Event]:
    return [
        Event(run_id, first_seq + i, e.type, e.data, e.at, e.actor) for i, e in enumerate(events)
    ]


def _conflict(thread_id: str, seq: int) -> Conflict:
    return Conflict(
        f"thread {thread_id}: another writer appended to it after this saver read it "
        f"(at seq {seq}); nothing was written. Read the thread again (get_state), then retry."
    )


def _check_agent(thread_id: str, first: Event) -> None:
    """A thread is a run of agent ``langgraph``; another run of that id is not a thread."""
    agent = codec.decode(first.data).get("agent") if first.type == ev.RUN_CREATED else None
    if agent != AGENT:
        raise InvalidInput(
            f"thread {thread_id!r}: tether run {thread_id!r} belongs to agent {agent!r}, not "
            f"{AGENT!r}; use another thread_id"
        )
