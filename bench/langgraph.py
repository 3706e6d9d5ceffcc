"""TetherSaver against LangGraph's SqliteSaver and PostgresSaver, the same graphs in one run.

    .venv/bin/python bench/langgraph.py            # 100 turns, 30 x 10-step runs
    .venv/bin/python bench/langgraph.py --quick    # 30 turns, 5 runs (seconds)

Needs ``tether[langgraph]`` plus ``langgraph-checkpoint-sqlite`` and
``langgraph-checkpoint-postgres`` (a saver that is not installed is left out) and, for
the PostgreSQL rows, a server at ``TETHER_PG_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``; each system gets a schema of its own,
dropped at the end).

* **Superstep latency**: a chain of 10 nodes, each replacing a ~1 KB state value; runs
  with ``durability="sync"`` (a step is durable when the next one starts), so each
  superstep is one checkpoint and one task's writes. Reported: µs per superstep, the
  median of the runs.
* **LangGraph's floor**: the same chain with no checkpointer (LangGraph's own work per
  superstep) and with ``InMemorySaver`` (a dict: LangGraph's checkpointing without a
  database), so that what a saver can win is known (``verdict``).
* **Storage**: a chat graph (``add_messages``) of ``--turns`` turns, each adding a ~800
  byte user message and a ~200 byte reply; the model sees the whole history. *Content*
  is the UTF-8 bytes of every message's text; *stored* is what the database grew by: on
  SQLite its pages (WAL included) over the same empty store's, on PostgreSQL the total
  relation size of the system's schema over the empty schema (``_schema_size``). Two
  threads of the same turns, one after the other: the *first* in the fresh database pays
  pages a database pays once whatever it holds (the first leaf page of each index a row
  enters, a table's free space map); the *next* is what each further thread costs.

Ratios are against TetherSaver on the same backend, measured in this run.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

HERE = Path(__file__).resolve().parent
# this file is named langgraph.py: its folder must not hide the langgraph package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent / "src"))  # tether from this repository

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.base import BaseCheckpointSaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402

import tether  # noqa: E402
from tether.integrations.langgraph import TetherSaver  # noqa: E402

PG_URL = os.environ.get("TETHER_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
NODES = 10
PAYLOAD = "x" * 1000


class Chain(TypedDict):
    value: str
    n: int


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def chain_graph(saver: BaseCheckpointSaver[Any] | None) -> Any:
    g = StateGraph(Chain)
    names = [f"n{i}" for i in range(NODES)]
    for name in names:
        g.add_node(name, lambda s: {"value": f"{s['n']}{PAYLOAD}", "n": s["n"] + 1})
    g.add_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        g.add_edge(a, b)
    g.add_edge(names[-1], END)
    return g.compile(checkpointer=saver)


def chat_graph(saver: BaseCheckpointSaver[Any]) -> Any:
    def reply(state: Chat) -> dict[str, list[AnyMessage]]:
        seen = sum(len(str(m.content)) for m in state["messages"])
        reply = " ".join(random.Random(seen).choice(VOCABULARY) for _ in range(30))
        return {"messages": [AIMessage(f"({seen} chars read) {reply}"[:200])]}

    g = StateGraph(Chat)
    g.add_node("reply", reply)
    g.add_edge(START, "reply")
    g.add_edge("reply", END)
    return g.compile(checkpointer=saver)


VOCABULARY = [
    "the",
    "checkout",
    "service",
    "latency",
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
    "database",
    "index",
    "shard",
    "replica",
    "leader",
    "config",
    "flag",
    "canary",
    "region",
    "alert",
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


def user(k: int) -> str:
    """Turn ``k``'s user message: ~800 bytes of words drawn at random (seeded)."""
    r = random.Random(k)
    words = [f"Turn {k}:"]
    while sum(len(w) + 1 for w in words) < 790:
        words.append(r.choice(VOCABULARY))
    return " ".join(words)[:790]


# -- the systems: each yields (saver, size()) on a fresh store ------------------------------

System = Callable[[Path], Any]


@contextmanager
def no_checkpointer(tmp: Path) -> Iterator[tuple[Any, Callable[[], int]]]:
    yield None, lambda: 0  # LangGraph alone: the floor of a superstep


@contextmanager
def in_memory(tmp: Path) -> Iterator[tuple[Any, Callable[[], int]]]:
    from langgraph.checkpoint.memory import InMemorySaver

    yield InMemorySaver(), lambda: 0  # LangGraph's own saver, a dict: no database


@contextmanager
def tether_sqlite(tmp: Path) -> Iterator[tuple[Any, Callable[[], int]]]:
    app = tether.open(str(tmp / "tether.db"))
    yield TetherSaver(app), lambda: _file_size(tmp / "tether.db")
    app.close()


@contextmanager
def sqlite_saver(tmp: Path, synchronous: str = "NORMAL") -> Iterator[tuple[Any, Callable[[], int]]]:
    """SqliteSaver at tether's default durability (``synchronous=NORMAL``: the same
    work); ``sqlite_saver_full``: at sqlite3's default (``FULL``: an fsync per commit)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(tmp / f"lg-{synchronous}.db", check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    saver = SqliteSaver(conn)
    saver.setup()
    yield saver, lambda: _file_size(tmp / f"lg-{synchronous}.db", conn)
    conn.close()


@contextmanager
def sqlite_saver_full(tmp: Path) -> Iterator[tuple[Any, Callable[[], int]]]:
    with sqlite_saver(tmp, "FULL") as found:
        yield found


@contextmanager
def tether_postgres(tmp: Path) -> Iterator[tuple[Any, Callable[[], int]]]:
    with _schema() as schema:
        app = tether.open(f"{PG_URL}?schema={schema}")
        _no_autovacuum(schema)
        yield TetherSaver(app), lambda: _schema_size(schema)
        app.close()


@contextmanager
def postgres_saver(tmp: Path) -> Iterator[tuple[Any, Callable[[], int]]]:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    with _schema() as schema:
        conn = psycopg.connect(
            PG_URL,
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,
            options=f"-c search_path={schema}",
        )
        saver = PostgresSaver(conn)  # type: ignore[arg-type]  # psycopg's generic row type
        saver.setup()
        _no_autovacuum(schema)
        yield saver, lambda: _schema_size(schema)
        conn.close()


def _file_size(path: Path, conn: sqlite3.Connection | None = None) -> int:
    """The database's size: its pages (as a reader sees the last commit, WAL included)
    times the page size. Not the file's size: a WAL checkpoint from another connection
    gives up while tether's store has the file open, and the pages in the WAL (the empty
    schema's, at first) would then be counted in the thread's bytes."""
    c = conn if conn is not None else sqlite3.connect(path)
    try:
        pages = c.execute("PRAGMA page_count").fetchone()[0]
        return int(pages) * int(c.execute("PRAGMA page_size").fetchone()[0])
    finally:
        if conn is None:
            c.close()


@contextmanager
def _schema() -> Iterator[str]:
    import psycopg

    schema = f"bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}".encode())
    try:
        yield schema
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE".encode())


def _no_autovacuum(schema: str) -> None:
    """Autovacuum off on the tables of ``schema``, for every system alike: the workloads
    delete and update nothing, so a vacuum frees nothing, but one that happens to run
    between two measures adds a visibility map page (8 KB) to the bytes of one system and
    not of another (the second thread's 500 inserts pass autovacuum's insert threshold)."""
    import psycopg

    q = "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    q += "WHERE n.nspname = %s AND c.relkind = 'r'"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        for (table,) in conn.execute(q.encode(), (schema,)).fetchall():
            conn.execute(
                f'ALTER TABLE {schema}."{table}" SET (autovacuum_enabled = off, '
                f"toast.autovacuum_enabled = off)".encode()
            )


def _schema_size(schema: str) -> int:
    """Every table of ``schema``, as ``pg_total_relation_size`` counts it: its heap, free
    space map and visibility map, its TOAST table and the TOAST table's index, and each of
    its indexes (all of their forks). The same query for every system; nothing is
    vacuumed (see ``_no_autovacuum``)."""
    import psycopg

    q = (
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'"
    )
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        row = conn.execute(q.encode(), (schema,)).fetchone()
    return int(row[0]) if row else 0


# -- the workloads -------------------------------------------------------------------------


def latency(systems: dict[tuple[str, str], Any], runs: int) -> dict[tuple[str, str], float]:
    """Median µs per superstep of ``runs`` runs of the 10-node chain on each system; the
    systems take turns run by run, so that a busy moment of the machine hits all alike."""
    samples: dict[tuple[str, str], list[float]] = {name: [] for name in systems}
    with tempfile.TemporaryDirectory() as d, ExitStack() as stack:
        graphs = {}
        for name, system in systems.items():
            saver, _size = stack.enter_context(system(Path(d)))
            graphs[name] = chain_graph(saver)
            graphs[name].invoke({"value": "", "n": 0}, {"configurable": {"thread_id": "warm"}})
        for r in range(runs):
            for name, graph in graphs.items():
                config = {"configurable": {"thread_id": f"t{r}"}}
                t0 = time.perf_counter()
                # (LangGraph 1.x fails on durability= without a checkpointer)
                sync: dict[str, Any] = {"durability": "sync"} if graph.checkpointer else {}
                graph.invoke({"value": "", "n": 0}, config, **sync)
                samples[name].append((time.perf_counter() - t0) / NODES * 1e6)
    return {name: statistics.median(v) for name, v in samples.items()}


def storage(system: Any, turns: int) -> tuple[int, int, int]:
    """(content bytes, stored bytes of the first thread, of the next) after ``turns``
    turns of the chat graph on one thread, then as many on a second thread of the same
    database."""
    with tempfile.TemporaryDirectory() as d, system(Path(d)) as (saver, size):
        graph = chat_graph(saver)
        sizes = [size()]
        for thread in ("chat", "chat-2"):
            config = {"configurable": {"thread_id": thread}}
            for k in range(turns):
                graph.invoke({"messages": [HumanMessage(user(k))]}, config, durability="sync")
            sizes.append(size())
        final = graph.get_state(config).values["messages"]
        content = sum(len(str(m.content).encode()) for m in final)
        return content, sizes[1] - sizes[0], sizes[2] - sizes[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 turns, 5 runs")
    args = parser.parse_args()
    turns, runs = (30, 5) if args.quick else (100, 30)
    floors = {("-", "no checkpointer"): no_checkpointer, ("-", "InMemorySaver"): in_memory}
    rows = [
        ("sqlite", "TetherSaver", tether_sqlite),
        ("sqlite", "SqliteSaver", sqlite_saver),
        ("sqlite", "SqliteSaver FULL", sqlite_saver_full),
        ("postgres", "TetherSaver", tether_postgres),
        ("postgres", "PostgresSaver", postgres_saver),
    ]
    available = {}
    for backend, name, system in rows:
        try:
            with tempfile.TemporaryDirectory() as d, system(Path(d)):
                available[(backend, name)] = system
        except ImportError as e:
            print(f"{backend:8} {name:15} not installed ({e.name})")
    speeds = latency({**floors, **available}, runs)
    results: dict[tuple[str, str], tuple[float, int, int, int]] = {}
    for key, system in available.items():
        if key[1].endswith(" FULL"):  # the same bytes as at NORMAL: not measured again
            content, first, then = results[(key[0], key[1][:-5])][1:]
        else:
            content, first, then = storage(system, turns)
        results[key] = (speeds[key], content, first, then)
    print(f"\n{turns} turns of chat, {runs} runs of a {NODES}-node chain, durability=sync\n")
    print(
        f"{'backend':8} {'system':16} {'µs/superstep':>12} {'vs tether':>9} "
        f"{'first thread':>12} {'÷ content':>9} {'vs tether':>9} "
        f"{'next thread':>11} {'÷ content':>9}"
    )
    for (backend, name), (us, content, first, then) in results.items():
        base = results.get((backend, "TetherSaver"))
        speed = f"{us / base[0]:.1f}x" if base else "-"
        size = f"{first / base[2]:.1f}x" if base else "-"
        print(
            f"{backend:8} {name:16} {us:12.0f} {speed:>9} {first:12d} "
            f"{first / content:8.1f}x {size:>9} {then:11d} {then / content:8.1f}x"
        )
    print("\nLangGraph's own floor, the same chain in the same run (no database):")
    for (_, name), us in ((k, v) for k, v in speeds.items() if k in floors):
        print(f"{'-':8} {name:15} {us:12.0f}")
    print(verdict(speeds))


def verdict(speeds: dict[tuple[str, str], float]) -> str:
    """Whether ≥ 5x faster than SqliteSaver per superstep is possible at all: a saver
    takes at least what LangGraph does without one, and with one LangGraph does more (it
    builds and serializes each checkpoint: InMemorySaver, a dict, shows that share)."""
    floor = speeds[("-", "no checkpointer")]
    memory = speeds[("-", "InMemorySaver")]
    lines = []
    for backend, other in (("sqlite", "SqliteSaver"), ("postgres", "PostgresSaver")):
        mine, theirs = speeds.get((backend, "TetherSaver")), speeds.get((backend, other))
        if mine is None or theirs is None:
            continue
        goal = theirs / 5
        if goal <= floor:
            why = "impossible: LangGraph alone takes longer"
        elif goal <= memory:
            why = "impossible with LangGraph's checkpointing: InMemorySaver takes longer"
        else:
            why = "possible"
        lines.append(
            f"{backend}: TetherSaver {theirs / mine:.2f}x faster than {other} "
            f"({mine:.0f} vs {theirs:.0f} µs); 5x needs {goal:.0f} µs per superstep: {why}"
            f" (no checkpointer {floor:.0f} µs, InMemorySaver {memory:.0f} µs). Above "
            f"InMemorySaver: TetherSaver {mine - memory:.0f} µs, {other} {theirs - memory:.0f}"
            f" µs ({(theirs - memory) / max(mine - memory, 1.0):.1f}x)"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
