"""Conversations: sessions, their ordered messages, and compaction.

A **session** ``(id, owner)`` owns an ordered list of **messages** (seq 1, 2,
3… with no gaps) and the runs started in it (``app.run_in(session, agent)``).
Message bodies are stored once by the SHA-256 of their content, so the same
content repeated costs one row of metadata, not a second copy.

``session.prompt_view()`` is what a model should see: the newest **compaction**
summary (if any), then every message after the seq it replaces. Compaction adds
a summary; it never deletes or edits a message, so ``session.messages()`` keeps
returning everything that was said.

Model calls made with ``run.llm(..., messages=view)`` in a session record
their prompt as references to stored messages (:meth:`Session.prompt_refs`):
ranges of seqs, the summary's seq, and content hashes for anything else, so a
model call costs storage for what is new, whatever the length of the
conversation. :meth:`Session.resolve_prompt` rebuilds the exact prompt.

A ``Session`` object caches the messages of its prompt view (messages are
immutable, so the cache only ever grows); use one object per thread.

The values live beside it and are importable from here too: :class:`Message` in
:mod:`tether.context.messages`, :class:`Compaction` and the automatic policy in
:mod:`tether.context.compaction`. The rows are read and written by the store's
:class:`~tether.store.context_rows.SessionData` methods, one transaction each.
"""

from __future__ import annotations

import bisect
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from tether.context import tokens
from tether.context.compaction import (
    KEEP_LAST,
    SUMMARY_ROLE,
    Compaction,
    CompactPolicy,
    Summarizer,
    compaction_of,
    cut_point,
    make_policy,
)
from tether.context.messages import ROLES, VIEW_KEYS, Message, entry_key, message_of, view_key
from tether.errors import Conflict, NotFound, StoreError
from tether.model import codec
from tether.model.clock import Clock
from tether.store import RunRecord, Store
from tether.store.context_records import CompactionRecord, NewMessage, SessionRecord
from tether.store.context_rows import SessionData, pack, unpack

__all__ = [
    "DIGEST_CHARS",
    "ROLES",
    "SUMMARY_ROLE",
    "VIEW_KEYS",
    "CompactPolicy",
    "Compaction",
    "Message",
    "RunLike",
    "Session",
    "Summarizer",
    "lineage",
    "load_session",
    "make_policy",
    "open_session",
    "pack",
    "session_of_run",
    "unpack",
]

DIGEST_CHARS = 16  # of a recorded prompt's SHA-256: enough to check a rebuild
_REPLY = "$message"  # in a journaled reply: the seq of the message that holds its content


class RunLike(Protocol):
    """What a bound session needs of the agent's run object: where it is. (Its ``llm``,
    when it has a synchronous one, is what :meth:`Session.reply` journals calls with.)"""

    @property
    def position(self) -> int: ...


class Session:
    """A conversation: ordered messages, compactions, and the runs started in it.

    Get one with ``app.session(id, owner=…)``; inside an agent, ``run.session``.
    """

    def __init__(
        self,
        store: SessionData,
        clock: Clock,
        row: Sequence[Any],
        *,
        policy: CompactPolicy | None = None,
        run_id: str | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.id: str = row[0]
        self.owner: str | None = row[1]
        self.created_at: float = row[2]
        self.policy = policy
        self.run_id = run_id  # set: adds are keyed by this run (added once, even on replay)
        self._adds = 0
        self._run: RunLike | None = None
        self._lineage: tuple[tuple[int, str], ...] = ()  # a fork's (fork position, parent)…
        self._base: Compaction | None = None
        self._window: list[Message] = []
        self._keys: dict[str, list[int]] = {}  # view sha -> seqs (prompt references)
        self._keyed = 0

    def __repr__(self) -> str:
        return f"Session({self.id!r}, owner={self.owner!r})"

    def bound(
        self, run_id: str, run: RunLike | None = None, lineage: Sequence[tuple[int, str]] = ()
    ) -> Session:
        """This session as seen by one execution of run ``run_id`` (``run.session``): its
        k-th ``add`` is recorded once, so a replay after a crash does not add it twice;
        ``run`` (the agent's run object) makes :meth:`reply` available. For a fork,
        ``lineage`` lists ``(fork position, parent id)`` from the fork up: an add made
        while replaying a parent's positions is that parent's add, not a new message."""
        bound = Session(
            self.store,
            self.clock,
            (self.id, self.owner, self.created_at),
            policy=self.policy,
            run_id=run_id,
        )
        bound._run = run
        bound._lineage = tuple(lineage)
        return bound

    # -- messages ---------------------------------------------------------

    def add(self, role: str, content: Any, **meta: Any) -> Message:
        """Append a message; return it with its seq and content hash.

        ``role`` is system, user, assistant or tool; ``content`` a str or structured
        data; ``meta`` is kept with it (``name``, ``tool_call_id`` and ``tool_calls``
        also reach the prompt view). One transaction. Inside a run, the k-th add of an
        execution is recorded once: a replay returns the stored message. With an
        automatic policy, the session is compacted afterwards when it is due.
        """
        if role not in ROLES:
            raise ValueError(
                f"session {self.id!r}: role {role!r} is not one of {', '.join(ROLES)}; "
                f"pass one of them to session.add"
            )
        what = f"the content of a {role} message of session {self.id!r}"
        body = codec.encode(content, what=what)
        meta_json = codec.encode(meta, what=f"the meta of a {role} message of session {self.id!r}")
        run_add, owner = None, None
        if self.run_id is not None:
            self._adds += 1
            run_add, owner = self._adds, self._owner()
        new = NewMessage(
            session_id=self.id,
            role=role,
            body=body,
            sha256=codec.digest(content),
            meta=meta_json,
            at=self.clock.now(),
            run_id=self.run_id,
            run_add=run_add,
            owner=owner,
        )
        message = self._insert(new)
        if self.policy is not None:
            self.auto_compact()
        return message

    def _insert(self, new: NewMessage) -> Message:
        added = self.store.add_message(new)
        if added is None:  # a concurrent add with this run's key won: that one is the add
            added = self.store.message_by_run_add(self.id, new.run_id, new.run_add)
            if added is None:
                raise Conflict(
                    f"session {self.id!r}: add #{new.run_add} of run {self.run_id} was "
                    f"added and removed concurrently; resume the run"
                )
        return message_of(self.id, added)

    def reply(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A model call whose reply joins the conversation, stored once.

        For agents (``run.session.reply("answer", model.complete, messages=view)``):
        ``run.llm(name, fn, …)`` (its prompt recorded as references), whose reply, the
        result's ``content`` (or the result itself when it has none), is added as an
        assistant message. The journal keeps the result with that content replaced by a
        reference to the message, so the reply is stored once, not twice. Returns the
        model's result, content included, also on replay. If the process dies after the
        message was added and before the call was journaled, the call runs again and the
        first reply stays the conversation's.
        """
        llm = getattr(self._run, "llm", None)
        if llm is None or getattr(self._run, "awaited", False):
            raise TypeError(
                f"session {self.id!r}: reply() journals a model call, so it needs a run; "
                f"call it inside a def agent as run.session.reply(...) (async def agents: "
                f"await run.session.areply(...))"
            )

        def call(*a: Any, **kw: Any) -> Any:
            return self._recorded_reply(fn(*a, **kw))

        return self._unref(llm(name, call, *args, **kwargs))

    async def areply(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """:meth:`reply` for ``async def`` agents: ``await run.session.areply("answer",
        model.acomplete, messages=view)``. ``fn`` may be a coroutine function or a plain
        one; the reply is stored once, as with reply."""
        llm = getattr(self._run, "llm", None)
        if llm is None or not getattr(self._run, "awaited", False):
            raise TypeError(
                f"session {self.id!r}: areply() journals a model call, so it needs the run "
                f"of an async def agent: await run.session.areply(...) there (def agents: "
                f"run.session.reply(...))"
            )

        async def call(*a: Any, **kw: Any) -> Any:
            out = fn(*a, **kw)
            return self._recorded_reply(await out if inspect.isawaitable(out) else out)

        return self._unref(await llm(name, call, *args, **kwargs))

    def _recorded_reply(self, out: Any) -> Any:
        """Add a model's reply to the conversation; what the journal keeps of it (the
        result with its content replaced by a reference to the new message)."""
        has_content = isinstance(out, Mapping) and "content" in out
        message = self.add("assistant", out["content"] if has_content else out)
        ref = {_REPLY: message.seq}
        return {**out, "content": ref} if has_content else ref

    def _unref(self, recorded: Any) -> Any:
        """A journaled reply with its message reference replaced by the message's content."""
        if isinstance(recorded, Mapping) and set(recorded) == {_REPLY}:
            return self.message(recorded[_REPLY]).content
        ref = recorded.get("content") if isinstance(recorded, Mapping) else None
        if isinstance(ref, Mapping) and set(ref) == {_REPLY}:
            return {**recorded, "content": self.message(ref[_REPLY]).content}
        return recorded

    def _owner(self) -> str | None:
        """Which run an add at the current position belongs to: an ancestor's while a fork
        replays that ancestor's positions, else this run's."""
        owner = self.run_id
        if self._run is None:
            return owner
        position = self._run.position
        for fork_position, parent in self._lineage:
            if position > fork_position:
                break
            owner = parent
        return owner

    def messages(self, *, after: int = 0, upto: int | None = None) -> list[Message]:
        """The messages with ``after < seq <= upto`` (all by default), in order; compacted
        ones included."""
        return [message_of(self.id, r) for r in self.store.read_messages(self.id, after, upto)]

    def message(self, seq: int) -> Message:
        """The message at ``seq``. Raises NotFound."""
        found = self.messages(after=seq - 1, upto=seq)
        if not found:
            raise NotFound(
                f"session {self.id!r} has no message #{seq}; session.messages() lists its messages"
            )
        return found[0]

    def compactions(self) -> list[Compaction]:
        """Every compaction of the session, oldest first."""
        return [compaction_of(self.id, r) for r in self.store.list_compactions(self.id)]

    def runs(self) -> list[str]:
        """The ids of the runs started in this session, oldest first."""
        return self.store.session_runs(self.id)

    # -- the prompt view ----------------------------------------------------

    def _refresh(self) -> tuple[Compaction | None, list[Message]]:
        """The newest compaction and the messages after it (reading only what is new)."""
        last = self._window[-1].seq if self._window else None
        row, rows = self.store.read_prompt_view(self.id, base_upto=_upto(self._base), last_seq=last)
        base = compaction_of(self.id, row) if row is not None else None
        if _upto(base) != _upto(self._base):
            self._window = []
        self._base = base
        self._window.extend(message_of(self.id, r) for r in rows)
        return base, list(self._window)

    def window(self, upto: int | None = None) -> tuple[Compaction | None, list[Message]]:
        """The prompt view as stored objects: the newest compaction and the messages after
        it; with ``upto``, as it stood when message ``upto`` was the newest."""
        if upto is None:
            return self._refresh()
        older = [c for c in self.compactions() if c.upto < upto]
        base = older[-1] if older else None
        return base, self.messages(after=_upto(base), upto=upto)

    def prompt_view(self) -> list[dict[str, Any]]:
        """What a model should see: the newest summary (role ``system``), then every
        message after the seq it replaces, as ``{"role", "content", …}`` dicts."""
        base, window = self._refresh()
        head = [base.as_prompt()] if base is not None else []
        return head + [m.as_prompt() for m in window]

    def tokens(self) -> int:
        """Tokens of the prompt view (see :mod:`tether.context.tokens`)."""
        return sum(tokens.count_message(m) for m in self.prompt_view())

    # -- compaction ---------------------------------------------------------

    def compact(self, summarize: Summarizer, *, keep_last: int = KEEP_LAST) -> Compaction | None:
        """Summarise all but the last ``keep_last`` messages of the prompt view.

        ``summarize`` gets the entries it replaces (the previous summary first) and
        returns the summary. Nothing is written until it returns; then the summary and
        the seq it replaces up to are written in one transaction, so a summariser that
        fails or is killed leaves the session as it was. Returns None, writing nothing,
        when there is nothing new to compact (or another compaction got there first).
        The kept part never starts with a tool result (it stays with its call).
        """
        if keep_last < 0:
            raise ValueError(f"session {self.id!r}: keep_last must be >= 0, not {keep_last}")
        base, window = self._refresh()
        cut = cut_point(window, keep_last)
        if cut <= 0:
            return None
        replaced = ([base.as_prompt()] if base else []) + [m.as_prompt() for m in window[:cut]]
        before = sum(tokens.count_message(m) for m in replaced) + _tokens(window[cut:])
        summary = summarize(replaced)
        return self._store_compaction(window[cut - 1].seq, summary, before, window[cut:])

    def _store_compaction(
        self, upto: int, summary: Any, before: int, kept: list[Message]
    ) -> Compaction | None:
        body = codec.encode(summary, what=f"the summary of session {self.id!r}")
        new = Compaction(self.id, upto, summary, codec.digest(summary), before, 0, self.clock.now())
        after = tokens.count_message(new.as_prompt()) + _tokens(kept)
        record = CompactionRecord(upto, body, new.sha256, before, after, new.at)
        if not self.store.add_compaction(self.id, record):
            return None  # another compaction got there first
        return Compaction(self.id, upto, summary, new.sha256, before, after, new.at)

    def auto_compact(
        self,
        summarize: Summarizer | None = None,
        *,
        at_tokens: int | None = None,
        keep_last: int | None = None,
    ) -> Compaction | None:
        """Compact when the prompt view passes ``at_tokens`` (defaults: the session's
        policy, ``app.session(…, compact_at_tokens=…, summarize=…)``); else None."""
        policy = self.policy
        fn = summarize or (policy.summarize if policy else None)
        limit = at_tokens if at_tokens is not None else (policy.at_tokens if policy else None)
        if fn is None or limit is None:
            raise ValueError(
                f"session {self.id!r}: auto_compact needs summarize= and at_tokens=, or a "
                f"policy from app.session(…, compact_at_tokens=…, summarize=…)"
            )
        if self.tokens() <= limit:
            return None
        keep = keep_last if keep_last is not None else (policy.keep_last if policy else KEEP_LAST)
        return self.compact(fn, keep_last=keep)

    # -- prompts as references ------------------------------------------------

    def _index(self) -> dict[str, int]:
        """Update the index of the messages by view key; return the summaries' view keys."""
        keys, summaries = self.store.message_keys(self.id, self._keyed)
        for k in keys:
            self._keys.setdefault(view_key(k.role, k.sha256, codec.decode(k.meta)), []).append(
                k.seq
            )
            self._keyed = max(self._keyed, k.seq)
        return {view_key(SUMMARY_ROLE, sha, {}): upto for upto, sha in summaries}

    def prompt_refs(self, messages: Sequence[Mapping[str, Any] | Message]) -> dict[str, Any]:
        """A compact record of a prompt: references to this session's stored messages.

        Returns ``{"refs", "digest"}``: ``refs`` holds ``["m", a, b]`` for messages
        ``a..b`` as the prompt view shows them, ``["s", upto]`` for a summary and
        ``["h", sha]`` for any other entry, whose body is stored once by content hash;
        ``digest`` (16 hex digits of the SHA-256 of the whole prompt) checks a rebuild.
        Its size depends on how the prompt is made up, not on how long it is.
        """
        entries = [m.as_prompt() if isinstance(m, Message) else dict(m) for m in messages]
        summaries = self._index()
        refs: list[list[Any]] = []
        fresh: dict[str, str] = {}
        prev = 0
        for entry in entries:
            key = entry_key(entry)
            if key in summaries:
                refs.append(["s", summaries[key]])
                continue
            seq = _pick(self._keys.get(key), prev) if key is not None else None
            if seq is None:
                sha = codec.digest(entry)
                fresh[sha] = codec.encode(entry, what=f"a prompt entry of session {self.id!r}")
                refs.append(["h", sha])
            elif refs and refs[-1][0] == "m" and refs[-1][2] == seq - 1:
                refs[-1][2] = prev = seq
            else:
                refs.append(["m", seq, seq])
                prev = seq
        self.store.put_message_bodies(fresh)
        return {"refs": refs, "digest": codec.digest(entries)[:DIGEST_CHARS]}

    def resolve_prompt(self, prompt: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The exact messages a recorded prompt (``prompt_refs``) stands for.

        Raises StoreError when what is stored does not hash to the recorded digest.
        """
        out: list[dict[str, Any]] = []
        compactions = {c.upto: c for c in self.compactions()} if _has(prompt, "s") else {}
        for ref in prompt["refs"]:
            if ref[0] == "m":
                out += [m.as_prompt() for m in self.messages(after=ref[1] - 1, upto=ref[2])]
            elif ref[0] == "s":
                out.append(compactions[ref[1]].as_prompt())
            else:
                out.append(codec.decode(self._body(ref[1])))
        if codec.digest(out)[:DIGEST_CHARS] != prompt["digest"]:
            raise StoreError(
                f"session {self.id!r}: the stored messages do not rebuild the recorded prompt "
                f"(digest {prompt['digest']}); the database was changed outside tether"
            )
        return out

    def _body(self, sha: str) -> str:
        body = self.store.get_message_body(sha)
        if body is None:
            raise NotFound(f"session {self.id!r}: no stored body with SHA-256 {sha[:12]}…")
        return body


# -- opening ------------------------------------------------------------------


def open_session(
    store: SessionData,
    clock: Clock,
    session_id: str,
    *,
    owner: str | None = None,
    policy: CompactPolicy | None = None,
) -> Session:
    """Get or create session ``session_id`` (one transaction).

    Raises Conflict when the session exists with another owner than ``owner`` (an
    ``owner`` of None accepts any).
    """
    if not isinstance(session_id, str) or not session_id:
        raise ValueError(f"a session id is a non-empty str, not {session_id!r}")
    row = store.get_or_create_session(session_id, owner, clock.now())
    if owner is not None and row.owner != owner:
        raise Conflict(
            f"session {session_id!r} belongs to owner {row.owner!r}, not {owner!r}; open it "
            f"with owner={row.owner!r}, or give this conversation another session id"
        )
    return Session(store, clock, _fields(row), policy=policy)


def load_session(store: SessionData, clock: Clock, session_id: str) -> Session:
    """An existing session. Raises NotFound."""
    row = store.get_session(session_id)
    if row is None:
        raise NotFound(f"no session {session_id!r}; app.session({session_id!r}) creates it")
    return Session(store, clock, _fields(row))


def session_of_run(
    store: Store, clock: Clock, run_id: str, run: RunLike | None = None
) -> Session | None:
    """The session run ``run_id`` was started in, bound to that run; None outside one."""
    record = store.get_run(run_id)
    if record.session_id is None:
        return None
    session = load_session(store, clock, record.session_id)
    return session.bound(run_id, run, lineage(store, record))


def lineage(store: Store, record: RunRecord) -> list[tuple[int, str]]:
    """``(fork position, parent id)`` of a fork, its parent's, and so on up (empty for a run
    that is not a fork), read from each ``run.forked`` event."""
    out: list[tuple[int, str]] = []
    while record.parent_id is not None and record.fork_seq is not None:
        seq = record.fork_seq + 1
        forked = store.read_events(record.id, after=seq - 1, upto=seq)
        if not forked or forked[0].type != "run.forked":
            break
        out.append((int(forked[0].payload()["position"]), record.parent_id))
        record = store.get_run(record.parent_id)
    return out


# -- rows -----------------------------------------------------------------------


def _fields(row: SessionRecord) -> tuple[str, str | None, float]:
    return row.id, row.owner, row.created_at


def _upto(c: Compaction | None) -> int:
    return c.upto if c is not None else 0


def _tokens(messages: Sequence[Message]) -> int:
    return sum(tokens.count_message(m.as_prompt()) for m in messages)


def _pick(seqs: list[int] | None, prev: int) -> int | None:
    """Which stored message an entry is: the first match after ``prev`` (the one right
    after it, when that matches), else the first match."""
    if not seqs:
        return None
    i = bisect.bisect_right(seqs, prev)  # seqs are ascending
    return seqs[i] if i < len(seqs) else seqs[0]


def _has(prompt: Mapping[str, Any], kind: str) -> bool:
    return any(ref[0] == kind for ref in prompt["refs"])
