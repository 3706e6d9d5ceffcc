"""Bytes stored by a long conversation: tether sessions against LangGraph's SqliteSaver.

    .venv-bench/bin/python bench/conversation.py            # 100 turns
    .venv-bench/bin/python bench/conversation.py --quick    # 40 turns, for CI (seconds)

One scripted conversation, the same for every system: each turn appends a user message
(~800 bytes) and calls the model once on the whole conversation; the model's reply
(~200 bytes) is appended too. So each turn adds ~1 KB of real content, and the model sees
everything said so far.

* **tether, one run**: one agent run drives the conversation (the script plays the
  user): ``run.session.add`` the user message, ``run.llm(…, messages=prompt_view())``,
  ``run.session.add`` the reply. The model call's prompt is recorded as references to
  the stored messages.
* **tether, a run per turn**: how a chat server uses it: ``session.add`` the user
  message, then ``app.run_in(session, respond)`` for the model call and the reply; each
  turn also pays for a run (its row and its created/started/completed events).
* **LangGraph**: ``StateGraph(MessagesState)`` with one node that calls the model,
  compiled with ``SqliteSaver``, ``graph.invoke({"messages": [user]}, thread)`` per turn
  with ``durability="sync"`` (a turn is durable when invoke returns, as with tether).

*Raw* is the UTF-8 bytes of every message's content. *Stored* is how much the database
file grew over an empty store of the same system (WAL checkpointed into the file), and
*rows* the bytes of the rows themselves (SQLite's ``dbstat`` payload, so page slack and
free space are left out). The last columns show the row bytes one turn adds, in the first
and in the last tenth of the turns: flat means O(new content) per turn; growing means the
conversation is copied again.
Every system runs in a fresh directory; SQLite 3 with WAL for all. Results go to
bench/results/conversation.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # tether from this repository

import tether  # noqa: E402

WORDS = [
    "the",
    "checkout",
    "service",
    "latency",
    "p99",
    "rose",
    "after",
    "deploy",
    "inventory",
    "client",
    "retries",
    "timeout",
    "budget",
    "error",
    "rollback",
    "trace",
    "span",
    "request",
    "queue",
    "worker",
    "cache",
    "miss",
    "hit",
    "database",
    "index",
    "shard",
    "replica",
    "leader",
    "follower",
    "config",
    "flag",
    "canary",
    "region",
    "zone",
    "alert",
    "page",
    "runbook",
    "owner",
    "ticket",
    "customer",
    "order",
    "payment",
    "refund",
    "invoice",
    "ledger",
    "batch",
    "window",
    "metric",
    "dashboard",
]
USER_BYTES = 800
REPLY_BYTES = 200


def _text(seed: int, size: int) -> str:
    r = random.Random(seed)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < size:
        words.append(r.choice(WORDS))
    return " ".join(words)[:size]


def user_text(k: int) -> str:
    """The user's message of turn ``k`` (~800 bytes)."""
    return f"Turn {k}: " + _text(k, USER_BYTES - 10)


def reply_text(k: int) -> str:
    """The model's reply at turn ``k`` (~200 bytes)."""
    return f"Reply {k}: " + _text(-k - 1, REPLY_BYTES - 11)


def model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The scripted model: replies to the newest user turn, reports its usage."""
    k = sum(1 for m in messages if m["role"] == "user") - 1
    text = reply_text(k)
    size = sum(len(str(m["content"])) for m in messages)
    return {"content": text, "usage": {"input_tokens": size // 4, "output_tokens": len(text) // 4}}


def raw_bytes(turns: int) -> int:
    return sum(len(user_text(k).encode()) + len(reply_text(k).encode()) for k in range(turns))


# -- measuring a SQLite file ------------------------------------------------------------


def measure(path: str) -> tuple[int, int]:
    """(file bytes, row bytes) of a SQLite database, its WAL checkpointed into the file."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        rows = conn.execute("SELECT coalesce(sum(payload), 0) FROM dbstat").fetchone()[0]
    return os.path.getsize(path), int(rows)


@dataclass
class Result:
    system: str
    turns: int
    raw: int
    stored: int  # file growth over the empty store
    rows: int  # row bytes growth over the empty store
    per_turn_early: float  # row bytes one turn added, first tenth of the turns
    per_turn_late: float  # … last tenth
    seconds: float

    @property
    def ratio(self) -> float:
        return self.stored / self.raw

    @property
    def rows_ratio(self) -> float:
        return self.rows / self.raw


Play = Callable[[int, Callable[[int], None]], None]
"""``play(turns, before)``: play the conversation, calling ``before(k)`` ahead of turn k."""


def run_system(
    name: str, turns: int, opener: Callable[[str], tuple[Play, Callable[[], None]]]
) -> Result:
    """Open ``name`` on a fresh file, measure it empty, play ``turns`` turns, measure again."""
    tenth = max(1, turns // 10)
    marks = {tenth, turns - tenth}
    sizes: dict[int, tuple[int, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "conversation.db")
        play, close = opener(path)
        empty_file, empty_rows = measure(path)

        def before(k: int) -> None:
            if k in marks:
                sizes[k] = measure(path)

        started = time.perf_counter()
        play(turns, before)
        seconds = time.perf_counter() - started
        close()
        file_bytes, row_bytes = measure(path)
    early = (sizes[tenth][1] - empty_rows) / tenth  # row bytes: exact, no page granularity
    late = (row_bytes - sizes[turns - tenth][1]) / tenth
    return Result(
        name,
        turns,
        raw_bytes(turns),
        file_bytes - empty_file,
        row_bytes - empty_rows,
        early,
        late,
        seconds,
    )


# -- the systems ------------------------------------------------------------------------


def tether_one_run(path: str) -> tuple[Play, Callable[[], None]]:
    """One agent run plays the whole conversation (the script is the user)."""
    app = tether.open(path)
    session = app.session("bench", owner="u-1")

    @app.agent(name="conversation")
    def conversation(run: tether.Run, turns: int) -> int:
        assert run.session is not None
        for k in range(turns):
            measuring(k)  # not journaled: the benchmark looks at the file between turns
            run.session.add("user", user_text(k))
            run.session.reply("reply", model, messages=run.session.prompt_view())
        return turns

    measuring: Callable[[int], None] = lambda k: None  # noqa: E731

    def play(turns: int, before: Callable[[int], None]) -> None:
        nonlocal measuring
        measuring = before
        app.run_in(session, conversation, turns)

    return play, app.close


def tether_run_per_turn(path: str) -> tuple[Play, Callable[[], None]]:
    """A run per turn, as a chat server does it: store the user message, run the agent."""
    app = tether.open(path)
    session = app.session("bench", owner="u-1")

    @app.agent(name="respond")
    def respond(run: tether.Run) -> None:
        assert run.session is not None
        run.session.reply("reply", model, messages=run.session.prompt_view())

    def play(turns: int, before: Callable[[int], None]) -> None:
        for k in range(turns):
            before(k)
            session.add("user", user_text(k))
            app.run_in(session, respond)

    return play, app.close


def langgraph(path: str) -> tuple[Play, Callable[[], None]]:
    """StateGraph(MessagesState) with one model node, checkpointed by SqliteSaver."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()

    def respond(state: MessagesState) -> dict[str, Any]:
        msgs = [
            {"role": "user" if m.type == "human" else "assistant", "content": m.content}
            for m in state["messages"]
        ]
        return {"messages": [AIMessage(content=model(msgs)["content"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    builder.add_edge("respond", END)
    graph = builder.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "bench"}}

    def play(turns: int, before: Callable[[int], None]) -> None:
        for k in range(turns):
            before(k)
            message = HumanMessage(content=user_text(k))
            graph.invoke({"messages": [message]}, config, durability="sync")

    return play, conn.close


SYSTEMS: dict[str, Callable[[str], tuple[Play, Callable[[], None]]]] = {
    "tether, one run": tether_one_run,
    "tether, a run per turn": tether_run_per_turn,
    "LangGraph SqliteSaver": langgraph,
}


# -- report -----------------------------------------------------------------------------


def _kb(n: float) -> str:
    return f"{n / 1000:,.1f}"


def table(results: list[Result]) -> str:
    """The results as a fixed-width table, with each system's bytes against tether's."""
    best = min(r.stored for r in results if r.system.startswith("tether"))
    head = (
        f"{'system':<24} {'turns':>5} {'raw KB':>8} {'stored KB':>10} {'x raw':>6} "
        f"{'rows KB':>9} {'x raw':>6} {'rows/turn 1st':>13} {'rows/turn last':>14} "
        f"{'x tether':>9} {'s':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(
            f"{r.system:<24} {r.turns:>5} {_kb(r.raw):>8} {_kb(r.stored):>10} {r.ratio:>6.2f} "
            f"{_kb(r.rows):>9} {r.rows_ratio:>6.2f} {r.per_turn_early:>13,.0f} "
            f"{r.per_turn_late:>14,.0f} {r.stored / best:>9.1f} {r.seconds:>6.2f}"
        )
    return "\n".join(lines)


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version}
    for dist in ("langgraph", "langgraph-checkpoint-sqlite", "langchain-core"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="40 turns (CI)")
    parser.add_argument("--turns", type=int, default=None, help="turns (default 100)")
    parser.add_argument("--only", choices=["tether", "langgraph"], help="one family of systems")
    args = parser.parse_args(argv)
    turns = args.turns or (40 if args.quick else 100)
    results = []
    for name, opener in SYSTEMS.items():
        if args.only and not name.lower().startswith(args.only):
            continue
        results.append(run_system(name, turns, opener))
    print(
        f"{turns}-turn conversation, ~{(USER_BYTES + REPLY_BYTES) // 1000} KB per turn "
        f"({USER_BYTES} B user + {REPLY_BYTES} B reply), one model call per turn"
    )
    print(table(results))
    out = HERE / "results" / "conversation.json"
    out.parent.mkdir(exist_ok=True)
    data = {
        "turns": turns,
        "versions": versions(),
        "results": [asdict(r) | {"ratio": r.ratio, "rows_ratio": r.rows_ratio} for r in results],
    }
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
