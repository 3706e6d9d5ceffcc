"""The context window as a cache (tether.context.window) on SQLite and PostgreSQL: the budget,
paging and recall, tool stubs restored after a fault, dedup, and the token report."""

from __future__ import annotations

import json
from typing import Any

import pytest

import tether
from tether.context import tokens
from tether.context import window as context
from tether.context.conversation import Session
from tether.context.window import Policy

pytestmark = pytest.mark.conformance


def _schema(name: str) -> dict[str, Any]:
    props: dict[str, Any] = {
        f"arg{i}": {"type": "string", "description": f"what {name} takes as arg {i}"}
        for i in range(3)
    }
    props.update({f"opt{i}": {"type": "integer"} for i in range(6)})
    return {
        "name": name,
        "description": f"Run {name} against the production fleet. Returns JSON rows.",
        "parameters": {"type": "object", "properties": props, "required": ["arg0"]},
    }


TOOLS = [_schema(f"tool_{i}") for i in range(12)]


def result(tag: str, size: int = 2000) -> str:
    """A tool result of ``size`` characters that names ``tag``."""
    line = f"{tag}: rows for the query, latency 870 ms, host web-{len(tag)}; "
    return (line * (size // len(line) + 1))[:size]


def turn(s: Session, tool: str, output: Any, **args: Any) -> None:
    """One model turn that calls ``tool`` and the result it got."""
    s.add("assistant", f"calling {tool}", tool_calls=[{"name": tool, "args": args}])
    s.add("tool", output, name=tool, args=args)


@pytest.fixture
def session(app: tether.App) -> Session:
    s = app.session("incident")
    s.add("user", "checkout is slow since 14:02, find out why")
    for k in range(8):
        turn(s, "tool_0" if k % 2 else "tool_1", result(f"r{k}"), arg0=f"q{k}")
    return s


def test_old_large_results_are_paged_out_and_recall_brings_them_back(session: Session) -> None:
    ctx = context.build(session, budget_tokens=100_000, tools=TOOLS)
    # 8 turns: results of the last keep_turns=3 turns (and the one just returned) stay
    assert [h.id for h in ctx.paged] == ["m:3", "m:5", "m:7", "m:9"]
    assert ctx.paged[0].text == "[paged out: tool_1(arg0='q0'), 2.0 KB, recall with id m:3]"
    assert ctx.messages[2] == {"role": "tool", "content": ctx.paged[0].text, "name": "tool_1"}
    text = ctx.text()
    assert "r0: rows" not in text and "r4: rows" in text and "r7: rows" in text
    assert ctx.tools[-1]["name"] == "recall"
    assert context.recall(session, "m:3") == result("r0")
    assert ctx.report.recall_faults == 0
    # the model calls recall: its result joins the history, is sent, and is counted
    session.add("assistant", "recalling", tool_calls=[{"name": "recall", "args": {"id": "m:3"}}])
    session.add("tool", context.recall(session, "m:3"), name="recall", args={"id": "m:3"})
    again = context.build(session, budget_tokens=100_000, tools=TOOLS)
    assert "r0: rows" in again.text() and again.report.recall_faults == 1
    assert again.report.calls == 9 and again.report.fault_rate == pytest.approx(1 / 9)
    with pytest.raises(tether.NotFound, match="not a context handle"):
        context.recall(session, "bogus")
    with pytest.raises(tether.NotFound, match="no message #999"):
        context.recall(session, "m:999")


def test_the_budget_is_respected(session: Session) -> None:
    everything = context.build(session, budget_tokens=10**6, tools=TOOLS, policy=Policy.off())
    for budget in (5_000, 3_000, 1_500):
        ctx = context.build(session, budget_tokens=budget, tools=TOOLS, system="Be exact.")
        assert ctx.tokens <= budget < everything.tokens
        sent = sum(tokens.count_message(m) for m in ctx.messages)
        assert ctx.tokens == sent + sum(tokens.count(t) for t in ctx.tools)
        assert ctx.messages[0] == {"role": "system", "content": "Be exact."}
        assert ctx.messages[-1]["content"] == result("r7")  # the last entry stays whole
    tight = context.build(session, budget_tokens=1_500, tools=TOOLS)
    assert "m:1" in {h.id for h in tight.paged}  # even the first user turn went
    with pytest.raises(ValueError, match=r"cannot fit budget_tokens=300: .*need \d+ tokens"):
        context.build(session, budget_tokens=300, tools=TOOLS)


def test_unused_tools_become_stubs_until_a_call_restores_them(session: Session) -> None:
    ctx = context.build(session, budget_tokens=100_000, tools=TOOLS)
    assert set(ctx.stubbed) == {f"tool_{i}" for i in range(2, 12)}
    by_name = {t["name"]: t for t in ctx.tools}
    assert by_name["tool_0"] == TOOLS[0]
    assert by_name["tool_5"] == {
        "name": "tool_5",
        "description": "Run tool_5 against the production fleet (schema loads on first use)",
        "parameters": {"type": "object"},
    }
    full = sum(tokens.count(t) for t in TOOLS)
    assert ctx.report.stubbed == full - sum(tokens.count(t) for t in ctx.tools[:12])
    assert ctx.report.stub_faults == 0
    turn(session, "tool_5", "ok", arg0="x")  # the model called a stub: a fault
    after = context.build(session, budget_tokens=100_000, tools=TOOLS)
    assert "tool_5" not in after.stubbed
    assert {t["name"]: t for t in after.tools}["tool_5"] == TOOLS[5]
    assert after.report.stub_faults == 1 and after.report.faults == 1
    needed = context.build(session, budget_tokens=100_000, tools=TOOLS, need=["tool_9"])
    assert "tool_9" not in needed.stubbed


def test_openai_style_schemas_are_stubbed_in_their_own_shape(session: Session) -> None:
    wrapped = [{"type": "function", "function": t} for t in TOOLS]
    ctx = context.build(session, budget_tokens=100_000, tools=wrapped)
    assert ctx.tools[0] == wrapped[0]
    assert ctx.tools[5]["type"] == "function" and ctx.tools[5]["function"]["name"] == "tool_5"
    assert ctx.tools[5]["function"]["parameters"] == {"type": "object"}


def test_identical_content_is_sent_once(app: tether.App) -> None:
    s = app.session("dedup")
    s.add("user", "compare the configs")
    config = json.dumps({"replicas": 3, "timeout_ms": 250, "retries": 3, "pad": "x" * 800})
    for _ in range(3):
        turn(s, "tool_2", config, arg0="checkout")
    ctx = context.build(s, budget_tokens=100_000, policy=Policy(keep_turns=100))
    assert ctx.text().count('"timeout_ms": 250') == 1
    contents = [m["content"] for m in ctx.messages if m["role"] == "tool"]
    assert contents[:2] == ["[same content as m:7 below]"] * 2 and contents[2] == config
    assert ctx.report.deduplicated > 2 * (tokens.count(config) - 20)
    assert ctx.report.paged_out == 0
    off = context.build(s, budget_tokens=100_000, policy=Policy.off())
    assert off.text().count('"timeout_ms": 250') == 3


def test_the_report_counts_tokens_by_category(session: Session) -> None:
    session.add("tool", result("r7"), name="tool_0", args={"arg0": "q7"})  # a duplicate
    ctx = context.build(
        session, budget_tokens=100_000, tools=TOOLS, system="Be exact.", pinned=["user prefers UTC"]
    )
    r = ctx.report
    assert r.paged_out > 0 and r.stubbed > 0 and r.deduplicated > 0
    assert (
        r.kept
        == ctx.tokens
        == sum(tokens.count_message(m) for m in ctx.messages)
        + sum(tokens.count(t) for t in ctx.tools)
    )
    off = context.build(
        session,
        budget_tokens=100_000,
        tools=TOOLS,
        system="Be exact.",
        pinned=["user prefers UTC"],
        policy=Policy.off(),
    )
    assert r.without_cache == off.tokens and off.report.paged_out == 0
    assert ctx.messages[1] == {"role": "system", "content": "Pinned memory:\n- user prefers UTC"}
    assert r.counter == tokens.counter()
    data = r.as_dict()
    assert data["kept"] == r.kept and data["fault_rate"] == 0.0 and data["budget"] == 100_000


def test_a_compacted_session_sends_its_summary(session: Session) -> None:
    session.compact(lambda e: f"{len(e)} earlier entries: slow inventory client", keep_last=4)
    ctx = context.build(session, budget_tokens=100_000)
    assert ctx.messages[0]["content"] == "13 earlier entries: slow inventory client"
    assert len(ctx.messages) == 5 and ctx.paged == ()
    assert context.recall(session, "s:13").startswith("13 earlier")


def test_upto_builds_the_context_an_earlier_call_saw(session: Session) -> None:
    early = context.build(session, budget_tokens=100_000, upto=5)
    assert len(early.messages) == 5 and early.report.calls == 2


def test_a_run_log_is_a_source_too(app: tether.App) -> None:
    def search(q: str) -> str:
        return result(q)

    def think(n: int) -> dict[str, Any]:
        return {"content": f"thought {n}"}

    seen: list[context.Context] = []

    @app.agent
    def investigate(run: tether.Run) -> None:
        for k in range(6):
            run.llm("think", think, k)
            run.step("search", search, f"s{k}")
        seen.append(context.build(run, budget_tokens=100_000))

    handle = app.run(investigate)
    inside = seen[0]
    assert [h.id for h in inside.paged] == ["p:2", "p:4"]
    assert inside.paged[0].text == "[paged out: search(), 2.0 KB, recall with id p:2]"
    state = app.get(handle.id)
    outside = context.build(state, budget_tokens=100_000)
    assert outside.messages == inside.messages
    assert context.recall(state, "p:2") == result("s0")
    with pytest.raises(tether.NotFound, match="nothing to recall for 'p:99'"):
        context.recall(state, "p:99")
    with pytest.raises(TypeError, match="takes a Session, a RunState or the run object"):
        context.build(object(), budget_tokens=10)
