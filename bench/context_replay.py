"""Input tokens of a long agent session, with and without tether's context cache.

    .venv-bench/bin/python bench/context_replay.py            # the recorded session
    .venv-bench/bin/python bench/context_replay.py --quick    # the same (it takes seconds)

Replays the recorded session of bench/incident.py (80 model calls, 12 tools, tool
results of 0.5 to 9 KB) into a tether session, twice, and counts the input tokens of
every model call:

* **everything**: each call sends the system text, all 12 tool schemas and the whole
  history (``tether.context.Policy.off()``): what an agent without a cache sends;
* **cache**: each call sends ``tether.context.build(session, budget_tokens=…)`` with the
  default policy: results older than 3 turns and above 200 tokens paged out behind a
  handle, unused tool schemas stubbed, identical content sent once.

A model using the cache sometimes needs what was paged out. The replay plays that
model: before call *i* it checks that every fact the recorded call uses is in the
context; a fact that is only behind a handle makes the model call ``recall`` first (a
page fault: one more model call, whose input tokens count, and the result joins the
history); a call to a stubbed tool first fails and is made again (a stub fault, counted
the same way). A fact found neither in the context nor behind a handle is *lost*; the
test of this replay asserts there is none. Token counts use tether.context.tokens (tiktoken when
installed, else ~4 characters per token). Results go to bench/results/context_replay.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # tether from this repository
sys.path.insert(0, str(HERE))

import tether  # noqa: E402
from incident import CALLS, SYSTEM, TASK, TOOLS  # noqa: E402
from tether.context import tokens  # noqa: E402
from tether.context import window as context  # noqa: E402
from tether.context.conversation import Session  # noqa: E402

BUDGET = 32_000


@dataclass
class Replay:
    """Input tokens of every model call of one replay, and what the cache had to fetch."""

    mode: str
    per_call: list[int] = field(default_factory=list)  # the recorded calls
    extra_calls: list[int] = field(default_factory=list)  # the calls faults added
    recall_faults: int = 0
    stub_faults: int = 0
    lost: list[str] = field(default_factory=list)  # "call 62: <fact>"
    report: dict[str, Any] = field(default_factory=dict)  # the last build's report

    @property
    def calls(self) -> int:
        return len(self.per_call) + len(self.extra_calls)

    @property
    def total(self) -> int:
        return sum(self.per_call) + sum(self.extra_calls)

    @property
    def faults(self) -> int:
        return self.recall_faults + self.stub_faults

    @property
    def fault_rate(self) -> float:
        return self.faults / self.calls if self.calls else 0.0


def _build(session: Session, cache: bool) -> context.Context:
    policy = context.Policy() if cache else context.Policy.off()
    budget = BUDGET if cache else 10**9
    return context.build(session, budget_tokens=budget, tools=TOOLS, system=SYSTEM, policy=policy)


def _fault_in(
    session: Session, ctx: context.Context, facts: tuple[str, ...], rep: Replay, call: int
) -> context.Context:
    """Recall what the call needs from behind handles (each recall: one more model call)."""
    for fact in facts:
        if fact in ctx.text():
            continue
        handle = next(
            (h for h in ctx.paged if fact in tokens.text_of(context.recall(session, h.id))), None
        )
        if handle is None:
            rep.lost.append(f"call {call}: {fact}")
            continue
        rep.extra_calls.append(ctx.tokens)  # the model answers with a recall call
        rep.recall_faults += 1
        session.add(
            "assistant",
            f"Recalling {handle.id}.",
            tool_calls=[{"name": context.RECALL, "args": {"id": handle.id}}],
        )
        session.add(
            "tool", context.recall(session, handle.id), name=context.RECALL, args={"id": handle.id}
        )
        ctx = _build(session, cache=True)
    return ctx


def _stub_fault(session: Session, ctx: context.Context, tool: str, rep: Replay) -> context.Context:
    """A call to a stubbed tool fails once (schema not loaded) and is made again."""
    rep.extra_calls.append(ctx.tokens)
    rep.stub_faults += 1
    session.add("assistant", f"Calling {tool}.", tool_calls=[{"name": tool, "args": {}}])
    session.add(
        "tool", f"error: {tool} was called without its schema; it is loaded now", name=tool, args={}
    )
    return _build(session, cache=True)


def replay(app: tether.App, cache: bool) -> Replay:
    """Replay the recorded session into a new tether session, counting input tokens."""
    mode = "cache" if cache else "everything"
    session = app.session(f"incident-{mode}")
    session.add("user", TASK)
    rep = Replay(mode)
    for i, call in enumerate(CALLS, 1):
        ctx = _build(session, cache)
        if cache:
            ctx = _fault_in(session, ctx, call.uses, rep, i)
            if call.tool in ctx.stubbed:
                ctx = _stub_fault(session, ctx, call.tool, rep)
        elif any(fact not in ctx.text() for fact in call.uses):
            rep.lost += [f"call {i}: {f}" for f in call.uses if f not in ctx.text()]
        rep.per_call.append(ctx.tokens)
        session.add("assistant", call.text, tool_calls=[{"name": call.tool, "args": call.args}])
        session.add("tool", call.output, name=call.tool, args=call.args)
    rep.report = _build(session, cache).report.as_dict()
    return rep


def _summary(base: Replay, cached: Replay) -> dict[str, Any]:
    saved = 1 - cached.total / base.total
    return {
        "calls": len(CALLS),
        "tools": len(TOOLS),
        "tokens_everything": base.total,
        "tokens_cache": cached.total,
        "saved": saved,
        "recall_faults": cached.recall_faults,
        "stub_faults": cached.stub_faults,
        "fault_rate": cached.fault_rate,
        "lost": cached.lost,
        "counter": tokens.counter(),
    }


def table(base: Replay, cached: Replay) -> str:
    rows = [
        f"{'':<28}{'everything':>14}{'cache':>14}",
        f"{'model calls':<28}{base.calls:>14}{cached.calls:>14}",
        f"{'input tokens, total':<28}{base.total:>14,}{cached.total:>14,}",
        f"{'input tokens, mean/call':<28}{base.total // base.calls:>14,}"
        f"{cached.total // cached.calls:>14,}",
        f"{'input tokens, last call':<28}{base.per_call[-1]:>14,}{cached.per_call[-1]:>14,}",
        f"{'faults (recall + stub)':<28}{'-':>14}"
        f"{f'{cached.recall_faults} + {cached.stub_faults}':>14}",
        f"{'fault rate':<28}{'-':>14}{cached.fault_rate:>14.1%}",
        f"{'facts lost':<28}{len(base.lost):>14}{len(cached.lost):>14}",
    ]
    every = "  ".join(
        f"{n}:{base.per_call[n - 1]}/{cached.per_call[n - 1]}" for n in (1, 10, 20, 40, 60, 80)
    )
    return "\n".join(rows) + f"\ntokens at call n (everything/cache): {every}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the same replay (it is quick)")
    parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        app = tether.open(str(Path(tmp) / "replay.db"))
        try:
            base, cached = replay(app, cache=False), replay(app, cache=True)
        finally:
            app.close()
    summary = _summary(base, cached)
    print(f"{len(CALLS)} recorded model calls, {len(TOOLS)} tools; tokens: {tokens.counter()}")
    print(table(base, cached))
    print(f"input tokens saved: {summary['saved']:.1%}; fault rate {cached.fault_rate:.1%}")
    out = HERE / "results" / "context_replay.json"
    out.parent.mkdir(exist_ok=True)
    data = {"summary": summary, "everything": asdict(base), "cache": asdict(cached)}
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
