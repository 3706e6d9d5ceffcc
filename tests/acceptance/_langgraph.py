"""Graphs for the LangGraph crash tests, run as real processes:

    python _langgraph.py URL THREAD MODE LEDGER

MODE ``crash``: a fresh run of the fan-out graph whose node ``b`` SIGKILLs its own process
once node ``a``'s writes are committed (before the superstep's checkpoint); ``resume``:
the same graph resumed from the thread's last checkpoint; ``race``: resume the race
graph's thread (paused before ``work``), meeting another process inside ``work`` so that
both read the thread before either writes. Every node execution appends its name to
LEDGER. Exit 0: done; 3: tether.Conflict.
"""

from __future__ import annotations

import operator
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

import tether
from tether.integrations.langgraph import TetherSaver


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _ledger(path: str, name: str) -> None:
    with open(path, "a") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())


def _pending(reader: TetherSaver, thread: str) -> list[tuple[str, Any]]:
    tup = reader.get_tuple({"configurable": {"thread_id": thread}})
    return [(w[1], w[2]) for w in (tup.pending_writes or [])] if tup else []


def fanout(saver: TetherSaver, ledger: str, thread: str, crash: bool) -> Any:
    """START -> a, b (one superstep) -> join -> END."""

    def a(state: State) -> dict[str, list[str]]:
        _ledger(ledger, "a")
        return {"log": ["a"]}

    def b(state: State) -> dict[str, list[str]]:
        _ledger(ledger, "b")
        if crash:  # die after a's writes are committed, before the checkpoint of a and b
            while ("log", ["a"]) not in _pending(TetherSaver(saver.app), thread):
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)
        return {"log": ["b"]}

    def join(state: State) -> dict[str, list[str]]:
        _ledger(ledger, "join")
        return {"log": ["join"]}

    g = StateGraph(State)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_node("join", join)
    g.add_edge(START, "a")
    g.add_edge(START, "b")
    g.add_edge(["a", "b"], "join")
    g.add_edge("join", END)
    return g.compile(checkpointer=saver)


def race(saver: TetherSaver, ledger: str) -> Any:
    """START -> work -> END, paused before ``work``; ``work`` waits for a second process."""

    def work(state: State) -> dict[str, list[str]]:
        _ledger(ledger, f"work {os.getpid()}")
        deadline = time.monotonic() + 30
        while Path(ledger).read_text().count("work") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        return {"log": [f"work {os.getpid()}"]}

    g = StateGraph(State)
    g.add_node("work", work)
    g.add_edge(START, "work")
    g.add_edge("work", END)
    return g.compile(checkpointer=saver, interrupt_before=["work"])


def main(url: str, thread: str, mode: str, ledger: str) -> int:
    app = tether.open(url)
    saver = TetherSaver(app)
    config: Any = {"configurable": {"thread_id": thread}}
    try:
        if mode == "race":
            race(saver, ledger).invoke(None, config)
        else:
            graph = fanout(saver, ledger, thread, crash=mode == "crash")
            graph.invoke({"log": []} if mode == "crash" else None, config)
    except tether.Conflict as e:
        print(f"Conflict: {e}", flush=True)
        return 3
    finally:
        app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
