"""The context window as a cache: what the next model call sees, within a budget.

:func:`build` assembles a model call's input from what tether stores:

* the ``system`` text and ``pinned`` memory, always sent;
* the tool schemas likely needed, in full: the tools called, or named in a user
  or assistant message, in the last ``hot_turns`` model turns, and those in
  ``need`` (all of them during the first ``hot_turns`` turns); the others become
  one-line **stubs**. Calling a stubbed tool is a *fault*: the call is in the
  history, so the tool is hot, and whole again, from the next build on;
* the conversation (a session's compacted prompt view) or a run's log (model
  calls as assistant turns, tool and step results as tool results);
* tool results from the last ``keep_turns`` turns in full; older results above
  ``page_over_tokens`` are **paged out**: replaced by a short handle
  (``[paged out: search_logs(q='5xx'), 4.2 KB, recall with id m:12]``) that
  :func:`recall` turns back into the stored result (a *page fault*, counted
  when its result enters the history as a tool result named ``recall``);
* identical content sent once: older copies become a marker naming the newest.

When that still exceeds ``budget_tokens``, more is paged out (remaining tool
results, then the oldest turns) and then every tool is stubbed; what cannot fit
(the system text, pinned memory and the last entry) raises ValueError.

Faults are read from the history itself, so the report is the same wherever and
whenever the context is built: a *recall fault* is a tool result named
``recall``; a *stub fault* is a call to a tool that the policy stubbed at that
turn. The fault rate is faults per model turn. Token counts come from
:mod:`tether.context.tokens` (tiktoken when installed, else ~4 characters per token).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tether.context import tokens
from tether.context.conversation import Compaction, Message, Session
from tether.errors import NotFound
from tether.model import codec
from tether.model.state import RunState, fold, from_data
from tether.model.status import StepStatus

RECALL = "recall"
RECALL_SCHEMA: dict[str, Any] = {
    "name": RECALL,
    "description": "Bring back a result that was paged out of the context, by its id.",
    "parameters": {
        "type": "object",
        "properties": {"id": {"type": "string", "description": "the id the handle names"}},
        "required": ["id"],
    },
}


@dataclass(frozen=True, slots=True)
class Policy:
    """How the window is kept. ``Policy.off()`` sends everything as it is."""

    keep_turns: int = 3  # tool results of the last N model turns stay whole
    page_over_tokens: int = 200  # older tool results above this are paged out
    hot_turns: int = 6  # tools called or named in the last N turns keep their full schema
    dedup: bool = True  # identical content is sent once
    dedup_over_tokens: int = 16  # smaller content is not worth a marker
    stubs: bool = True

    @classmethod
    def off(cls) -> Policy:
        """No paging, no stubs, no dedup: the whole history and every schema."""
        return cls(keep_turns=2**31, page_over_tokens=2**62, dedup=False, stubs=False)


@dataclass(frozen=True, slots=True)
class Entry:
    """One piece of history: a message of a session, or a step of a run's log."""

    ref: str  # what recall takes: "m:<seq>" (message), "s:<upto>" (summary), "p:<position>"
    role: str
    content: Any
    sha256: str
    turn: int = 0  # how many model turns (assistant entries) came before it
    tool: str | None = None  # tool results: the tool
    args: Any = None  # tool results: its arguments, when known
    extra: Mapping[str, Any] = field(default_factory=dict)  # name, tool_call_id, tool_calls

    def as_prompt(self, content: Any = None) -> dict[str, Any]:
        """The entry as a chat message, with ``content`` in place of its own if given."""
        return {
            "role": self.role,
            "content": self.content if content is None else content,
            **self.extra,
        }


@dataclass(frozen=True, slots=True)
class Handle:
    """A result paged out of the context: ``recall(source, handle.id)`` brings it back."""

    id: str
    tool: str | None
    args: Any
    tokens: int
    size: int  # bytes of its text
    text: str  # what the model sees instead


@dataclass(frozen=True, slots=True)
class Report:
    """Tokens by category and faults. ``kept`` is what is sent; the rest is what the cache
    kept out (``paged_out``, ``stubbed``, ``deduplicated``: tokens saved, net of the
    handles, stubs and markers that replace them)."""

    kept: int
    paged_out: int
    stubbed: int
    deduplicated: int
    budget: int
    calls: int  # model turns in the history
    recall_faults: int
    stub_faults: int
    counter: str  # how tokens were counted

    @property
    def faults(self) -> int:
        """Page faults (recalls) and stub faults together."""
        return self.recall_faults + self.stub_faults

    @property
    def fault_rate(self) -> float:
        """Faults per model turn (0.0 before the first turn)."""
        return self.faults / self.calls if self.calls else 0.0

    @property
    def without_cache(self) -> int:
        """What sending everything as it is would have cost."""
        return self.kept + self.paged_out + self.stubbed + self.deduplicated

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (for logs and benchmarks)."""
        return {
            "kept": self.kept,
            "paged_out": self.paged_out,
            "stubbed": self.stubbed,
            "deduplicated": self.deduplicated,
            "without_cache": self.without_cache,
            "budget": self.budget,
            "calls": self.calls,
            "faults": self.faults,
            "fault_rate": self.fault_rate,
            "counter": self.counter,
        }


@dataclass(frozen=True, slots=True)
class Context:
    """What to send: ``messages`` and ``tools``, what was paged out, and the report."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    paged: tuple[Handle, ...]
    stubbed: tuple[str, ...]
    report: Report

    @property
    def tokens(self) -> int:
        """Tokens sent (``report.kept``)."""
        return self.report.kept

    def text(self) -> str:
        """Everything sent, as one text (what the model can read without a recall)."""
        parts = [tokens.text_of(m.get("content")) for m in self.messages]
        return "\n".join(parts + [tokens.text_of(t) for t in self.tools])


Source = Session | RunState | Any  # a Session, a RunState, or a run object (run.session / its log)


# -- entries ------------------------------------------------------------------------


def entries(source: Source, upto: int | None = None) -> list[Entry]:
    """The history of ``source`` in order: a session's prompt view, or a run's log (its
    session's prompt view when it runs in one). ``upto`` stops at that message seq or
    step position."""
    if isinstance(source, Session):
        return _turns(_session_entries(source, upto))
    if isinstance(source, RunState):
        return _turns(_run_entries(source, upto))
    session = getattr(source, "session", None)
    if isinstance(session, Session):
        return _turns(_session_entries(session, upto))
    return _turns(_run_entries(_state_of(source), upto))


def _state_of(run: Any) -> RunState:
    """The folded log of a run object (the ``run`` an agent receives), read from its store."""
    journal = getattr(run, "_j", None)  # the runtime's Run keeps its journal there
    if journal is None:
        raise TypeError(
            f"tether.context.window takes a Session, a RunState or the run object of an agent, "
            f"not {run!r}; for a stored run pass app.get(run_id)"
        )
    journal.flush()  # the step just before this call: its record is in the log read below
    loaded = journal.store.load(journal.run_id)
    start = from_data(codec.decode(loaded.snapshot.data)) if loaded.snapshot else None
    return fold(loaded.events, start, run_id=journal.run_id)


def _session_entries(session: Session, upto: int | None) -> list[Entry]:
    base, window = session.window(upto)
    out = [_summary_entry(base)] if base is not None else []
    return out + [_message_entry(m) for m in window]


def _summary_entry(c: Compaction) -> Entry:
    return Entry(f"s:{c.upto}", "system", c.summary, c.sha256)


def _message_entry(m: Message) -> Entry:
    extra = {k: v for k, v in m.as_prompt().items() if k not in ("role", "content")}
    tool = m.meta.get("name") or m.meta.get("tool") if m.role == "tool" else None
    return Entry(f"m:{m.seq}", m.role, m.content, m.sha256, 0, tool, m.meta.get("args"), extra)


def _run_entries(state: RunState, upto: int | None) -> list[Entry]:
    out = []
    for s in state.steps:
        if (upto is not None and s.position > upto) or s.status != StepStatus.COMPLETED:
            continue
        if s.kind == "llm":
            out.append(Entry(f"p:{s.position}", "assistant", s.output, codec.digest(s.output)))
        elif s.kind in ("step", "tool"):
            out.append(
                Entry(
                    f"p:{s.position}",
                    "tool",
                    s.output,
                    codec.digest(s.output),
                    tool=s.name,
                    extra={"name": s.name},
                )
            )
    return out


def _turns(items: list[Entry]) -> list[Entry]:
    """Number the entries by the model turns before them."""
    out, turn = [], 0
    for e in items:
        out.append(replace(e, turn=turn))
        turn += e.role == "assistant"
    return out


# -- faults ---------------------------------------------------------------------------


def _recalls(history: Sequence[Entry]) -> int:
    return sum(1 for e in history if e.role == "tool" and e.tool == RECALL)


def _touched(e: Entry, names: Sequence[str]) -> set[str]:
    """The tools an entry shows in use: a tool result's tool, the tools a user or assistant
    message names (in its text or its tool calls)."""
    if e.role == "tool":
        return {e.tool} if e.tool else set()
    if e.role not in ("user", "assistant") or not names:
        return set()
    text = tokens.text_of(e.content) + (tokens.text_of(dict(e.extra)) if e.extra else "")
    return {n for n in names if n in text and re.search(rf"\b{re.escape(n)}\b", text)}


def _hot(
    touched: Sequence[set[str]], history: Sequence[Entry], end: int, turn: int, policy: Policy
) -> set[str] | None:
    """The tools likely needed by the model call at ``turn``, whose history is
    ``history[:end]``: those called or named in its last ``hot_turns`` turns. None (all of
    them) while fewer than ``hot_turns`` turns happened, or with stubs off."""
    if not policy.stubs or turn < policy.hot_turns:
        return None
    hot: set[str] = set()
    for i in range(end - 1, -1, -1):
        if history[i].turn <= turn - policy.hot_turns:
            break
        hot |= touched[i]
    return hot


def _faults(
    history: Sequence[Entry],
    touched: Sequence[set[str]],
    names: Sequence[str],
    policy: Policy,
    need: set[str],
) -> tuple[int, int]:
    """(recall faults, stub faults) of the whole history: recall results, and calls of
    tools that the policy had stubbed for that call."""
    recalls = _recalls(history)
    stubs = 0
    offered = set(names)
    for i, e in enumerate(history):
        if e.role != "assistant":
            continue
        hot = _hot(touched, history, i, e.turn, policy)
        if hot is None:
            continue
        called: set[str] = set()
        for later in history[i + 1 :]:
            if later.role == "assistant":
                break
            if later.role == "tool" and later.tool is not None:
                called.add(later.tool)
        stubs += len((called & offered) - hot - need - {RECALL})
    return recalls, stubs


# -- building ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Item:
    """One entry while the window is assembled (mutable, never escapes this module)."""

    entry: Entry
    full: int  # tokens of the whole message
    sent: int  # tokens of what is sent for it
    state: str = "kept"  # kept | paged | dedup
    content: Any = None  # what is sent instead of the content (paged, dedup)


def build(
    source: Source,
    *,
    budget_tokens: int,
    tools: Sequence[Mapping[str, Any]] = (),
    system: str | None = None,
    pinned: Sequence[Any] = (),
    need: Sequence[str] = (),
    policy: Policy = Policy(),
    upto: int | None = None,
) -> Context:
    """Assemble the next model call's context from ``source`` within ``budget_tokens``.

    ``tools`` are schemas (``{"name", "description", "parameters"}``, or OpenAI's
    ``{"type": "function", "function": {…}}``); ``need`` names tools to keep whole;
    ``pinned`` are memory items always sent. See the module docstring for the rules.
    Reads only; raises ValueError when even the system text, pinned memory and the
    last entry do not fit.
    """
    history = entries(source, upto)
    turn = sum(1 for e in history if e.role == "assistant")
    head = _head(system, pinned)
    items = [_Item(e, _tokens(e.as_prompt()), _tokens(e.as_prompt())) for e in history]
    _page_old(items, turn, policy)
    if policy.dedup:
        _dedup(items, policy)
    names = [_tool_name(t) for t in tools]
    touched = [_touched(e, names) for e in history]
    schemas = _tool_schemas(tools, _hot(touched, history, len(history), turn, policy), set(need))
    _fit(items, head, schemas, tools, set(need), budget_tokens)
    faults = _faults(history, touched, names, policy, set(need))
    return _context(head, items, schemas, tools, history, faults, budget_tokens)


def _head(system: str | None, pinned: Sequence[Any]) -> list[dict[str, Any]]:
    out = [{"role": "system", "content": system}] if system else []
    if pinned:
        lines = "\n".join(f"- {tokens.text_of(p)}" for p in pinned)
        out.append({"role": "system", "content": f"Pinned memory:\n{lines}"})
    return out


def _tokens(message: Mapping[str, Any]) -> int:
    return tokens.count_message(message)


def _page_old(items: list[_Item], turn: int, policy: Policy) -> None:
    for it in items:
        e = it.entry
        old = e.role == "tool" and turn - e.turn > policy.keep_turns
        if old and tokens.count(e.content) > policy.page_over_tokens:
            _page(it)


def _page(it: _Item) -> None:
    it.state, it.content = "paged", _handle(it.entry).text
    it.sent = _tokens(it.entry.as_prompt(it.content))


def _handle(e: Entry) -> Handle:
    text = tokens.text_of(e.content)
    size = len(text.encode())
    what = f"{e.tool}({_args(e.args)})" if e.tool else f"{e.role} message {e.ref}"
    shown = f"[paged out: {what}, {_size(size)}, recall with id {e.ref}]"
    return Handle(e.ref, e.tool, e.args, tokens.count(e.content), size, shown)


def _args(args: Any) -> str:
    if isinstance(args, Mapping):
        text = ", ".join(f"{k}={v!r}" for k, v in args.items())
    elif args is None:
        text = ""
    else:
        text = repr(args)
    return text if len(text) <= 60 else text[:59] + "…"


def _size(n: int) -> str:
    return f"{n} B" if n < 1000 else f"{n / 1000:.1f} KB"


def _dedup(items: list[_Item], policy: Policy) -> None:
    """Older copies of identical content become a marker naming the newest copy."""
    newest: dict[str, str] = {}
    for it in reversed(items):
        e = it.entry
        if e.role == "system" or tokens.count(e.content) <= policy.dedup_over_tokens:
            continue
        if e.sha256 in newest:
            it.state, it.content = "dedup", f"[same content as {newest[e.sha256]} below]"
            it.sent = _tokens(e.as_prompt(it.content))
        else:
            newest[e.sha256] = e.ref


def _tool_name(schema: Mapping[str, Any]) -> str:
    inner = schema.get("function")
    name = inner.get("name") if isinstance(inner, Mapping) else schema.get("name")
    if not isinstance(name, str):
        raise ValueError(f"a tool schema needs a name (or function.name): {dict(schema)!r}")
    return name


def _stub(schema: Mapping[str, Any]) -> dict[str, Any]:
    inner = schema.get("function")
    spec = inner if isinstance(inner, Mapping) else schema
    first = str(spec.get("description") or "").split(". ")[0].splitlines()[0:1]
    line = (first[0] if first else "")[:80]
    stub = {
        "name": _tool_name(schema),
        "description": f"{line} (schema loads on first use)".strip(),
        "parameters": {"type": "object"},
    }
    return {"type": "function", "function": stub} if isinstance(inner, Mapping) else stub


def _tool_schemas(
    tools: Sequence[Mapping[str, Any]], hot: set[str] | None, need: set[str]
) -> list[dict[str, Any]]:
    """Whole schemas for the hot and needed tools (and recall), stubs for the others."""
    whole = None if hot is None else hot | need | {RECALL}
    return [dict(t) if whole is None or _tool_name(t) in whole else _stub(t) for t in tools]


def _total(head: list[dict[str, Any]], items: list[_Item], schemas: list[dict[str, Any]]) -> int:
    """Tokens sent: head, entries, tool schemas, and the recall tool once anything is paged."""
    recall = any(it.state == "paged" for it in items) and all(
        _tool_name(s) != RECALL for s in schemas
    )
    return (
        sum(_tokens(m) for m in head)
        + sum(it.sent for it in items)
        + sum(tokens.count(s) for s in schemas)
        + (tokens.count(RECALL_SCHEMA) if recall else 0)
    )


def _fit(
    items: list[_Item],
    head: list[dict[str, Any]],
    schemas: list[dict[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    need: set[str],
    budget: int,
) -> None:
    """Page out more, oldest first (tool results, then turns), then stub every tool,
    until the window fits the budget."""
    total = _total(head, items, schemas)
    order = [it for it in items[:-1] if it.entry.role == "tool"]
    order += [it for it in items[:-1] if it.entry.role in ("user", "assistant")]
    for it in order:
        if total <= budget:
            return
        if it.state == "kept":
            before = it.sent
            _page(it)
            total -= before - it.sent
    if total > budget and tools:
        schemas[:] = [dict(s) if _tool_name(s) in need | {RECALL} else _stub(s) for s in tools]
        total = _total(head, items, schemas)
    if total > budget:
        raise ValueError(
            f"the context cannot fit budget_tokens={budget}: the system text, pinned memory, "
            f"the last entry, handles and tool stubs alone need {total} tokens. Raise the "
            f"budget, pin less, or compact the session."
        )


def _context(
    head: list[dict[str, Any]],
    items: list[_Item],
    schemas: list[dict[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    history: list[Entry],
    faults: tuple[int, int],
    budget: int,
) -> Context:
    paged = tuple(_handle(it.entry) for it in items if it.state == "paged")
    stubbed = tuple(_tool_name(t) for s, t in zip(schemas, tools, strict=True) if s != dict(t))
    full_tools = sum(tokens.count(t) for t in tools)
    sent_tools = sum(tokens.count(s) for s in schemas)
    recall_cost = 0  # paging needs the recall tool: its schema is part of the handles' cost
    if paged and RECALL not in {_tool_name(t) for t in tools}:
        schemas = [*schemas, RECALL_SCHEMA]
        recall_cost = tokens.count(RECALL_SCHEMA)
    recalls, stub_faults = faults
    report = Report(
        kept=_total(head, items, schemas),
        paged_out=sum(it.full - it.sent for it in items if it.state == "paged") - recall_cost,
        stubbed=full_tools - sent_tools,
        deduplicated=sum(it.full - it.sent for it in items if it.state == "dedup"),
        budget=budget,
        calls=sum(1 for e in history if e.role == "assistant"),
        recall_faults=recalls,
        stub_faults=stub_faults,
        counter=tokens.counter(),
    )
    messages = head + [it.entry.as_prompt(it.content) for it in items]
    return Context(messages, schemas, paged, stubbed, report)


# -- recall -------------------------------------------------------------------------------


def recall(source: Source, handle_id: str) -> Any:
    """The whole content behind a handle (``m:<seq>``, ``s:<upto>``, ``p:<position>``),
    read back from the session or the run's log. Raises NotFound for an unknown id.

    Add what it returns to the history as a tool result named ``recall``: that is how
    the fault is counted, and how the result stays in the window for the next turns.
    """
    kind, _, number = str(handle_id).partition(":")
    if not number.isdigit() or kind not in ("m", "s", "p"):
        raise NotFound(
            f"{handle_id!r} is not a context handle; handles look like m:12 (a message), "
            f"s:40 (a summary) or p:7 (a step of a run)"
        )
    n = int(number)
    session = source if isinstance(source, Session) else getattr(source, "session", None)
    if kind == "m" and isinstance(session, Session):
        return session.message(n).content
    if kind == "s" and isinstance(session, Session):
        found = [c for c in session.compactions() if c.upto == n]
        if found:
            return found[0].summary
    if kind == "p":
        state = source if isinstance(source, RunState) else _state_of(source)
        step = state.step(n)
        if step is not None and step.status == StepStatus.COMPLETED:
            return step.output
    raise NotFound(f"nothing to recall for {handle_id!r}: no such message, summary or step")
