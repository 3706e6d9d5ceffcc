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
"""

from __future__ import annotations

import bisect
import inspect
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tether.context import tokens
from tether.errors import Conflict, NotFound, StoreError
from tether.model import codec
from tether.model.clock import Clock
from tether.store import RunRecord, Store
from tether.store.queries import load_queries

ROLES = ("system", "user", "assistant", "tool")
VIEW_KEYS = ("name", "tool_call_id", "tool_calls")  # meta a model sees beside role and content
SUMMARY_ROLE = "system"
DIGEST_CHARS = 16  # of a recorded prompt's SHA-256: enough to check a rebuild
_REPLY = "$message"  # in a journaled reply: the seq of the message that holds its content
_NO_LIMIT = 2**62

Summarizer = Callable[[list[dict[str, Any]]], Any]
"""``summarize(messages) -> summary``: the messages are the prompt-view entries the summary
replaces (the previous summary first, if any); the summary is a str or structured content."""

_QUERIES: dict[str, dict[str, str]] = {}


def _q(store: Store) -> dict[str, str]:
    """The conversation queries of the store's dialect (loaded once)."""
    found = _QUERIES.get(store.dialect)
    if found is None:
        found = _QUERIES[store.dialect] = load_queries(store.dialect, "conversation")
    return found


@dataclass(frozen=True, slots=True)
class Message:
    """One stored message of a session. ``id`` is ``"<session>#<seq>"``."""

    session_id: str
    seq: int
    role: str
    content: Any
    sha256: str  # of the content (its canonical JSON): equal content, equal hash
    meta: Mapping[str, Any] = field(default_factory=dict)
    at: float = 0.0
    run_id: str | None = None  # the run that added it, if any

    @property
    def id(self) -> str:
        """``"<session>#<seq>"``."""
        return f"{self.session_id}#{self.seq}"

    def as_prompt(self) -> dict[str, Any]:
        """The message as a chat model takes it: role, content and the model-facing meta
        (``name``, ``tool_call_id``, ``tool_calls``)."""
        out = {"role": self.role, "content": self.content}
        out.update((k, self.meta[k]) for k in VIEW_KEYS if k in self.meta)
        return out


@dataclass(frozen=True, slots=True)
class Compaction:
    """A summary that replaces messages ``1..upto`` in the prompt view."""

    session_id: str
    upto: int
    summary: Any
    sha256: str
    tokens_before: int  # the prompt view's tokens before this compaction…
    tokens_after: int  # …and right after it
    at: float

    def as_prompt(self) -> dict[str, Any]:
        """The summary as the first message of the prompt view (role ``system``)."""
        return {"role": SUMMARY_ROLE, "content": self.summary}


@dataclass(frozen=True, slots=True)
class CompactPolicy:
    """Automatic compaction: once the prompt view passes ``at_tokens``, summarise all but
    the last ``keep_last`` messages with ``summarize``."""

    at_tokens: int
    summarize: Summarizer
    keep_last: int = 6


class RunLike(Protocol):
    """What a bound session needs of the agent's run object: where it is. (Its ``llm``,
    when it has a synchronous one, is what :meth:`Session.reply` journals calls with.)"""

    @property
    def position(self) -> int: ...


class _Raced(Exception):
    """Internal: a concurrent add with the same idempotency key won; roll back and read it."""


class Session:
    """A conversation: ordered messages, compactions, and the runs started in it.

    Get one with ``app.session(id, owner=…)``; inside an agent, ``run.session``.
    """

    def __init__(
        self,
        store: Store,
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
        params = {
            "id": self.id,
            "role": role,
            "sha": codec.digest(content),
            "size": len(body.encode()),
            "body": pack(body),
            "meta": meta_json,
            "run_id": self.run_id,
            "run_add": run_add,
            "owner": owner,
            "now": self.clock.now(),
        }
        message = self._insert(params)
        if self.policy is not None:
            self.auto_compact()
        return message

    def _insert(self, params: dict[str, Any]) -> Message:
        q = _q(self.store)
        try:
            with self.store.transaction() as conn:
                if params["run_add"] is not None:
                    found = conn.execute(q["message_by_run_add"], _by_owner(params)).fetchone()
                    if found is not None:
                        return _message(self.id, found)
                row = conn.execute(q["next_seq"], {"id": self.id}).fetchone()
                if row is None:
                    raise NotFound(f"session {self.id!r} does not exist any more")
                params["seq"] = int(row[0])
                conn.execute(q["put_body"], params)
                if conn.execute(q["insert_message"], params).rowcount != 1:
                    raise _Raced()
        except _Raced:
            with self.store.transaction() as conn:
                found = conn.execute(q["message_by_run_add"], params).fetchone()
            if found is None:
                raise Conflict(
                    f"session {self.id!r}: add #{params['run_add']} of run {self.run_id} was "
                    f"added and removed concurrently; resume the run"
                ) from None
            return _message(self.id, found)
        return _message(
            self.id,
            (
                params["seq"],
                params["role"],
                params["body"],
                params["sha"],
                params["meta"],
                params["now"],
                params["run_id"],
            ),
        )

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
        params = {"id": self.id, "after": after, "upto": _NO_LIMIT if upto is None else upto}
        with self.store.transaction() as conn:
            rows = conn.execute(_q(self.store)["read_messages"], params).fetchall()
        return [_message(self.id, r) for r in rows]

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
        with self.store.transaction() as conn:
            rows = conn.execute(_q(self.store)["list_compactions"], {"id": self.id}).fetchall()
        return [_compaction(self.id, r) for r in rows]

    def runs(self) -> list[str]:
        """The ids of the runs started in this session, oldest first."""
        with self.store.transaction() as conn:
            rows = conn.execute(_q(self.store)["session_runs"], {"id": self.id}).fetchall()
        return [str(r[0]) for r in rows]

    # -- the prompt view ----------------------------------------------------

    def _refresh(self) -> tuple[Compaction | None, list[Message]]:
        """The newest compaction and the messages after it (reading only what is new)."""
        q = _q(self.store)
        with self.store.transaction() as conn:
            row = conn.execute(q["latest_compaction"], {"id": self.id}).fetchone()
            base = _compaction(self.id, row) if row is not None else None
            if _upto(base) != _upto(self._base):
                self._window = []
            after = self._window[-1].seq if self._window else _upto(base)
            params = {"id": self.id, "after": after, "upto": _NO_LIMIT}
            rows = conn.execute(q["read_messages"], params).fetchall()
        self._base = base
        self._window.extend(_message(self.id, r) for r in rows)
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

    def compact(self, summarize: Summarizer, *, keep_last: int = 6) -> Compaction | None:
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
        cut = len(window) - keep_last
        while 0 < cut < len(window) and window[cut].role == "tool":
            cut -= 1
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
        params = {
            "id": self.id,
            "upto": upto,
            "sha": new.sha256,
            "size": len(body.encode()),
            "body": pack(body),
            "before": before,
            "after": after,
            "now": new.at,
        }
        q = _q(self.store)
        with self.store.transaction() as conn:
            row = conn.execute(q["latest_compaction"], {"id": self.id}).fetchone()
            if row is not None and int(row[0]) >= upto:
                return None
            conn.execute(q["put_body"], params)
            conn.execute(q["insert_compaction"], params)
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
        keep = keep_last if keep_last is not None else (policy.keep_last if policy else 6)
        return self.compact(fn, keep_last=keep)

    # -- prompts as references ------------------------------------------------

    def _index(self) -> dict[str, int]:
        """Update the index of the messages by view key; return the summaries' view keys."""
        q = _q(self.store)
        with self.store.transaction() as conn:
            rows = conn.execute(q["message_keys"], {"id": self.id, "after": self._keyed})
            for seq, role, sha, meta in rows.fetchall():
                key = _view_key(role, sha, codec.decode(meta))
                self._keys.setdefault(key, []).append(int(seq))
                self._keyed = max(self._keyed, int(seq))
            summaries = conn.execute(q["list_compactions"], {"id": self.id}).fetchall()
        return {_view_key(SUMMARY_ROLE, r[2], {}): int(r[0]) for r in summaries}

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
            key = _entry_key(entry)
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
        self._put_bodies(fresh)
        return {"refs": refs, "digest": codec.digest(entries)[:DIGEST_CHARS]}

    def _put_bodies(self, bodies: Mapping[str, str]) -> None:
        if not bodies:
            return
        with self.store.transaction() as conn:
            for sha, body in bodies.items():
                params = {"sha": sha, "size": len(body.encode()), "body": pack(body)}
                conn.execute(_q(self.store)["put_body"], params)

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
        with self.store.transaction() as conn:
            row = conn.execute(_q(self.store)["get_body"], {"sha": sha}).fetchone()
        if row is None:
            raise NotFound(f"session {self.id!r}: no stored body with SHA-256 {sha[:12]}…")
        return unpack(row[0])


# -- opening ------------------------------------------------------------------


def open_session(
    store: Store,
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
    q = _q(store)
    with store.transaction() as conn:
        conn.execute(q["create_session"], {"id": session_id, "owner": owner, "now": clock.now()})
        row = conn.execute(q["get_session"], {"id": session_id}).fetchone()
    if owner is not None and row[1] != owner:
        raise Conflict(
            f"session {session_id!r} belongs to owner {row[1]!r}, not {owner!r}; open it "
            f"with owner={row[1]!r}, or give this conversation another session id"
        )
    return Session(store, clock, tuple(row), policy=policy)


def load_session(store: Store, clock: Clock, session_id: str) -> Session:
    """An existing session. Raises NotFound."""
    with store.transaction() as conn:
        row = conn.execute(_q(store)["get_session"], {"id": session_id}).fetchone()
    if row is None:
        raise NotFound(f"no session {session_id!r}; app.session({session_id!r}) creates it")
    return Session(store, clock, tuple(row))


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


def make_policy(
    at_tokens: int | None, summarize: Summarizer | None, keep_last: int
) -> CompactPolicy | None:
    """The automatic compaction policy of ``app.session(…)`` (None: compact by hand)."""
    if at_tokens is None and summarize is None:
        return None
    if at_tokens is None or summarize is None or at_tokens <= 0:
        raise ValueError(
            f"automatic compaction needs both compact_at_tokens (> 0) and summarize; got "
            f"compact_at_tokens={at_tokens!r}, summarize={summarize!r}"
        )
    return CompactPolicy(at_tokens, summarize, keep_last)


# -- rows -----------------------------------------------------------------------


# Bodies are stored compressed when that is smaller: one marker byte, then the UTF-8
# JSON (b"j") or its zlib stream (b"z"). Conversation text compresses 2-4x, which keeps
# a session's storage near (or below) its raw size; reads check nothing extra, the
# content address (SHA-256 of the canonical JSON) is unchanged.
_RAW, _ZLIB = b"j", b"z"
_MIN_COMPRESS = 200  # bytes: below this, zlib's header costs more than it saves


def pack(body: str) -> bytes:
    """A message body as stored: raw or zlib-compressed, whichever is smaller."""
    raw = body.encode()
    if len(raw) >= _MIN_COMPRESS:
        packed = zlib.compress(raw, 6)
        if len(packed) < len(raw):
            return _ZLIB + packed
    return _RAW + raw


def unpack(stored: bytes | memoryview | str) -> str:
    """Inverse of :func:`pack` (a str is a body stored before compression existed)."""
    if isinstance(stored, str):
        return stored
    data = bytes(stored)
    if data[:1] == _ZLIB:
        return zlib.decompress(data[1:]).decode()
    if data[:1] == _RAW:
        return data[1:].decode()
    raise StoreError("a stored message body has an unknown format; written by a newer tether?")


def _message(session_id: str, row: Sequence[Any]) -> Message:
    seq, role, body, sha, meta, at, run_id = row
    return Message(
        session_id,
        int(seq),
        role,
        codec.decode(unpack(body)),
        sha,
        codec.decode(meta),
        float(at),
        run_id,
    )


def _compaction(session_id: str, row: Sequence[Any]) -> Compaction:
    upto, body, sha, before, after, at = row
    return Compaction(
        session_id, int(upto), codec.decode(unpack(body)), sha, int(before), int(after), float(at)
    )


def _view_key(role: str, sha: str, meta: Mapping[str, Any]) -> str:
    """What identifies a message as a model sees it: role, content hash, model-facing meta."""
    return codec.digest([role, sha, {k: meta[k] for k in VIEW_KEYS if k in meta}])


def _entry_key(entry: Mapping[str, Any]) -> str | None:
    """The view key of a prompt entry; None when it cannot be a stored message (other keys)."""
    if not isinstance(entry.get("role"), str) or "content" not in entry:
        return None
    if any(k not in ("role", "content", *VIEW_KEYS) for k in entry):
        return None
    return _view_key(entry["role"], codec.digest(entry["content"]), entry)


def _by_owner(params: Mapping[str, Any]) -> dict[str, Any]:
    """Look a run's k-th add up under the run it belongs to (an ancestor's, in a fork)."""
    return {"id": params["id"], "run_id": params["owner"], "run_add": params["run_add"]}


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
