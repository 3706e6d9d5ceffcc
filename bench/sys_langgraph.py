"""LangGraph with ``SqliteSaver``: one node looping once per super-step.

The graph is a single ``work`` node with a conditional edge back to itself, so
each step is one super-step and is checkpointed before the next begins
(``durability="sync"``, the setting that matches tether's guarantee: a step is
durable before the next one starts). ``shipped`` keeps LangGraph's defaults
instead: ``durability="async"`` (the checkpoint is written while the next step
runs) and SQLite's own ``synchronous=FULL``. The state keeps only the latest
step result (no growing message list), the cheapest shape for LangGraph.
W3 resumes by invoking the graph again with the same ``thread_id`` and
``None`` as input.
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, StateGraph
from langgraph.types import Durability

from common import PragmaLog, body

W3_THREAD = "w3"


class State(TypedDict):
    k: int  # steps done
    n: int  # steps to do
    total: int
    out: dict[str, Any] | None


def work(state: State) -> dict[str, Any]:
    k = state["k"] + 1
    out = body(k)
    return {"k": k, "total": state["total"] + out["step"], "out": out}


def more(state: State) -> str:
    return "work" if state["k"] < state["n"] else END


class LangGraphSession:
    """LangGraph on one SQLite file. ``shipped`` leaves SQLite's synchronous as is."""

    def __init__(self, db: str, durability: str) -> None:
        self.conn = sqlite3.connect(db, check_same_thread=False)
        self.mode: Durability | None = None  # LangGraph's default ("async")
        if durability != "shipped":
            self.conn.execute(f"PRAGMA synchronous = {durability.upper()}")
            self.mode = "sync"
        builder = StateGraph(State)
        builder.add_node("work", work)
        builder.set_entry_point("work")
        builder.add_conditional_edges("work", more)
        self.saver = SqliteSaver(self.conn)
        self.graph = builder.compile(checkpointer=self.saver)

    def _invoke(self, state: State | None, thread: str) -> int:
        config: Any = {"configurable": {"thread_id": thread}, "recursion_limit": 10**9}
        result = self.graph.invoke(state, config, durability=self.mode)
        return int(result["total"])

    def run(self, steps: int) -> int:
        return self._invoke({"k": 0, "n": steps, "total": 0, "out": None}, uuid.uuid4().hex)

    def start_w3(self, steps: int) -> int:
        return self._invoke({"k": 0, "n": steps, "total": 0, "out": None}, W3_THREAD)

    def recover_w3(self) -> int:
        return self._invoke(None, W3_THREAD)

    def settings(self) -> dict[str, Any]:
        self.saver.setup()  # sets journal_mode=WAL, as its first use would
        log = PragmaLog()
        log.record(self.conn)
        mode = self.mode or "async (default)"
        return {**log.seen, "durability": mode, "state": "last result only"}

    def close(self) -> None:
        self.conn.close()


def open_session(db: str, durability: str) -> LangGraphSession:
    return LangGraphSession(db, durability)
