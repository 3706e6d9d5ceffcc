"""TetherSaver beyond LangGraph's suite, on SQLite and PostgreSQL: a thread is a tether run
(its log, history, fork and gc), values are stored by content, each put or put_writes is
one append, and a second writer gets Conflict instead of forking the thread."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
from _conformance import Backend
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

import tether
from tether.integrations.langgraph import TetherSaver
from tether.model.events import Event


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class Tally(TypedDict):
    log: Annotated[list[str], operator.add]


@pytest.fixture
def app(backend: Backend) -> Iterator[tether.App]:
    a = tether.open(backend.url)
    yield a
    a.close()


def _chat(saver: TetherSaver) -> Any:
    def reply(state: Chat) -> dict[str, list[AnyMessage]]:
        last = state["messages"][-1].content
        return {"messages": [AIMessage(f"echo {last} " + "x" * 200)]}

    g = StateGraph(Chat)
    g.add_node("reply", reply)
    g.add_edge(START, "reply")
    g.add_edge("reply", END)
    return g.compile(checkpointer=saver)


def _tally(saver: TetherSaver) -> Any:
    def one(state: Tally) -> dict[str, list[str]]:
        return {"log": ["one"]}

    def two(state: Tally) -> dict[str, list[str]]:
        return {"log": ["two"]}

    g = StateGraph(Tally)
    g.add_node("one", one)
    g.add_node("two", two)
    g.add_edge(START, "one")
    g.add_edge("one", "two")
    g.add_edge("two", END)
    return g.compile(checkpointer=saver)


def _bytes(app: tether.App, thread: str) -> int:
    return sum(len(e.data) for e in app.events(thread))


def test_storage_grows_with_new_content_only(app: tether.App) -> None:
    graph = _chat(TetherSaver(app))
    config: Any = {"configurable": {"thread_id": "chat"}}
    sizes = []
    for turn in range(60):
        graph.invoke({"messages": [HumanMessage(f"message {turn}")]}, config)
        sizes.append(_bytes(app, "chat"))
    assert len(graph.get_state(config).values["messages"]) == 120
    # each turn adds two messages: the log grows by about the same each turn (a saver that
    # stored the whole history every superstep would grow by more every turn)
    early, late = sizes[10] - sizes[9], sizes[59] - sizes[58]
    assert late < early * 1.5, (early, late)
    from langchain_core.messages import BaseMessage

    from tether.integrations.langgraph.records import digest_of, entry_typed

    typed = [entry_typed(b) for e in app.events("chat") for b in e.payload().get("b", [])]
    assert len({digest_of(t) for t in typed}) == len(typed)  # no value stored twice
    stored = [v for v in map(TetherSaver(app).serde.loads_typed, typed)]
    messages = [m for m in stored if isinstance(m, BaseMessage)]
    # each message once: as its node wrote it (without an id) or as the history holds it
    # (with one), whichever was saved first (LangGraph's async durability: either)
    assert len(messages) == 120 and len({m.content for m in messages}) == 120


def test_a_put_and_a_put_writes_are_one_append_each(app: tether.App) -> None:
    saver = TetherSaver(app)
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    ck = empty_checkpoint()
    ck["channel_values"] = {"a": "one", "b": [1, 2]}
    ck["channel_versions"] = {"a": "1", "b": "1"}
    stored = saver.put(config, ck, {"source": "input", "step": -1}, {"a": "1", "b": "1"})
    assert [e.type for e in app.events("t")] == ["run.created", "run.completed", "step.completed"]
    saver.put_writes(stored, [("a", "x"), ("b", [3]), ("c", None)], "task-1")
    assert len(app.events("t")) == 4
    saver.put_writes(stored, [("a", "x")], "task-1")  # stored already: nothing appended
    assert len(app.events("t")) == 4
    tup = saver.get_tuple(config)
    assert tup is not None and tup.checkpoint["channel_values"] == {"a": "one", "b": [1, 2]}
    assert tup.pending_writes == [("task-1", "a", "x"), ("task-1", "b", [3]), ("task-1", "c", None)]


def test_a_writer_mid_invocation_makes_one_of_them_fail(app: tether.App) -> None:
    """Another writer appends while a graph runs: one of the two gets Conflict (which one
    depends on when LangGraph's background writes land), and the thread holds the
    winner's steps only: no silent fork."""
    config: Any = {"configurable": {"thread_id": "shared"}}
    inner = _tally(TetherSaver(app))
    inner.invoke({"log": []}, config)

    def meddle(state: Tally) -> dict[str, list[str]]:  # another writer, mid-invocation
        inner.invoke({"log": ["inner"]}, config)
        return {"log": ["outer"]}

    g = StateGraph(Tally)
    g.add_node("meddle", meddle)
    g.add_edge(START, "meddle")
    g.add_edge("meddle", END)
    outer = g.compile(checkpointer=TetherSaver(app))
    with pytest.raises(tether.Conflict, match="thread shared: another writer"):
        outer.invoke({"log": []}, config)
    log = _tally(TetherSaver(app)).get_state(config).values["log"]
    assert "outer" not in log
    assert log in (["one", "two"], ["one", "two", "inner", "one", "two"])


def test_a_stale_saver_gets_conflict_and_writes_nothing(app: tether.App) -> None:
    late, early = TetherSaver(app), TetherSaver(app)
    config: Any = {"configurable": {"thread_id": "shared"}}
    _tally(late).invoke({"log": []}, config)
    head = late.get_tuple(config)
    assert head is not None and early.get_tuple(config) is not None  # both read the head
    early.put_writes(head.config, [("log", ["first"])], "task-1")
    seq = len(app.events("shared"))
    with pytest.raises(tether.Conflict, match="thread shared: another writer"):
        late.put_writes(head.config, [("log", ["second"])], "task-2")
    with pytest.raises(tether.Conflict):  # refused until it reads the thread again
        late.put_writes(head.config, [("log", ["third"])], "task-3")
    assert len(app.events("shared")) == seq
    fresh = late.get_tuple(config)  # a read: it may write again
    assert fresh is not None and [w[2] for w in fresh.pending_writes or []] == [["first"]]
    late.put_writes(head.config, [("log", ["fourth"])], "task-4")
    after = early.get_tuple(config)
    assert after is not None
    assert [w[2] for w in after.pending_writes or []] == [["first"], ["fourth"]]


def test_a_thread_is_a_run_the_tools_work_on(app: tether.App) -> None:
    saver = TetherSaver(app)
    graph = _tally(saver)
    config: Any = {"configurable": {"thread_id": "inspect"}}
    graph.invoke({"log": []}, config, durability="sync")  # each step's checkpoint first
    assert app.record("inspect").agent == "langgraph"
    assert [r.id for r in app.runs(agent="langgraph")] == ["inspect"]
    steps = app.history("inspect").steps
    assert [s.name for s in steps if s.kind == "checkpoint"] == [
        "step:-1",
        "step:0",
        "step:1",
        "step:2",
    ]
    at_one = next(s for s in steps if s.name == "step:1")
    assert at_one.output["source"] == "loop"
    fork = app.fork("inspect", step="step:1")  # a LangGraph thread that resumes there
    forked: Any = {"configurable": {"thread_id": fork}}
    assert graph.get_state(forked).values["log"] == ["one"]
    assert graph.get_state(forked).next == ("two",)
    assert graph.invoke(None, forked)["log"] == ["one", "two"]
    assert app.record(fork).status == "completed"
    diff = app.diff(app.state("inspect", step="step:1"), app.state(fork, step="step:1"))
    assert not diff  # the fork's prefix is the thread's
    assert app.diff("inspect", fork)  # then they differ (new checkpoint ids, the fork event)
    result = app.gc(older_than=0, status=["completed"], vacuum=False)
    assert set(result.run_ids) == {"inspect", fork}
    assert saver.get_tuple(config) is None and graph.get_state(forked).values == {}


def test_a_subgraph_interrupted_and_resumed_async(app: tether.App) -> None:
    """A subgraph (its own checkpoint namespace) pauses on interrupt(); an async graph
    resumes it with a second saver, as another process would."""
    from langgraph.types import Command, interrupt

    def ask(state: Tally) -> dict[str, list[str]]:
        return {"log": [f"answer {interrupt('ok?')}"]}

    inner = StateGraph(Tally)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")
    inner.add_edge("ask", END)

    def build(saver: TetherSaver) -> Any:
        g = StateGraph(Tally)
        g.add_node("sub", inner.compile())
        g.add_edge(START, "sub")
        g.add_edge("sub", END)
        return g.compile(checkpointer=saver)

    config: Any = {"configurable": {"thread_id": "nested"}}

    async def first() -> Any:
        return await build(TetherSaver(app)).ainvoke({"log": ["start"]}, config)

    paused = asyncio.run(first())
    assert paused["__interrupt__"][0].value == "ok?"
    namespaces = {c.config["configurable"]["checkpoint_ns"] for c in TetherSaver(app).list(config)}
    assert "" in namespaces and any(ns.startswith("sub:") for ns in namespaces)

    async def second() -> Any:
        return await build(TetherSaver(app)).ainvoke(Command(resume="yes"), config)

    # as with LangGraph's InMemorySaver: the subgraph returns the log it was given, added again
    assert asyncio.run(second())["log"] == ["start", "start", "answer yes"]


def test_a_thread_written_in_the_earlier_format_reads_and_goes_on(app: tether.App) -> None:
    """A thread of the first format (values by digest, base85 of zlib, whole records;
    events saved from that version of the saver) reads as it did, and new turns are
    appended in today's format to the same log."""
    import json
    from pathlib import Path

    from tether.model.events import NewEvent
    from tether.store import NewRun

    saved = json.loads((Path(__file__).parent / "langgraph_thread_v1.json").read_text())
    events = [NewEvent(kind, data, at, None) for kind, data, at in saved]
    run = NewRun("old", "langgraph", None, "completed")
    app.store.create_run(run, events, lease_owner=None, now=saved[0][2], ttl=0.0)
    graph = _chat(TetherSaver(app))
    config: Any = {"configurable": {"thread_id": "old"}}
    state = graph.get_state(config)
    assert [m.content for m in state.values["messages"]] == [
        "hello",
        "echo hello",
        "again",
        "echo again",
    ]
    assert all(m.id for m in state.values["messages"])
    history = list(graph.get_state_history(config))
    assert [s.metadata["step"] for s in history] == [4, 3, 2, 1, 0, -1]
    out = graph.invoke({"messages": [HumanMessage("third")]}, config)
    assert [m.content for m in out["messages"]][:5] == [
        "hello",
        "echo hello",
        "again",
        "echo again",
        "third",
    ]
    fresh = _chat(TetherSaver(app)).get_state(config)  # read back from the log alone
    assert fresh.values == out
    assert [m.id for m in fresh.values["messages"][:4]] == [m.id for m in state.values["messages"]]
    added = [e.payload() for e in app.events("old")[len(saved) :]]
    assert added and all("blobs" not in d for d in added)
    assert any("b" in d for d in added)


class Keys(TypedDict):
    api_key: str


def test_what_redaction_would_rewrite_is_stored_serialized(app: tether.App) -> None:
    """tether's redaction rules rewrite events (docs/secrets.md): a checkpoint whose JSON
    they would change (a channel named like a credential, whose version is then the
    value of an ``"api_key"`` key) is stored serialized instead, values are blobs whose
    text no rule matches, and only the previews shown by the CLI are redacted."""
    key = "sk-" + "a1B2" * 10

    def rotate(state: Keys) -> dict[str, str]:
        return {"api_key": key}

    g = StateGraph(Keys)
    g.add_node("rotate", rotate)
    g.add_edge(START, "rotate")
    g.add_edge("rotate", END)
    graph = g.compile(checkpointer=TetherSaver(app))
    config: Any = {"configurable": {"thread_id": "keys"}}
    graph.invoke({"api_key": "old"}, config, durability="sync")
    fresh = g.compile(checkpointer=TetherSaver(app))  # read back from the log alone
    assert fresh.get_state(config).values == {"api_key": key}
    payloads = map(Event.payload, app.events("keys"))
    writes = [d["output"] for d in payloads if d.get("name") == "rotate"]
    assert writes == [{"api_key": "[redacted:credential-key]"}]

    saver = TetherSaver(app)
    ck = empty_checkpoint()
    ck["channel_versions"] = {"api_key": "000000000001.abc"}  # not written here: in its JSON
    stored = saver.put(
        {"configurable": {"thread_id": "versions", "checkpoint_ns": ""}}, ck, {"step": -1}, {}
    )
    tup = TetherSaver(app).get_tuple(stored)
    assert tup is not None and tup.checkpoint["channel_versions"] == ck["channel_versions"]
    (record,) = [e.payload()["lg"] for e in app.events("versions")[2:]]
    assert "d" in record["ck"]  # serialized, not JSON
