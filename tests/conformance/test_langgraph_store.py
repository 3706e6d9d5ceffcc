"""TetherStore against BaseStore's documented semantics (LangGraph publishes no suite for
stores), on SQLite and PostgreSQL: get/put/delete, namespaces, filters, pagination, TTL on
the injected clock, semantic search with the user's embeddings, the async twins."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator

import pytest
from _conformance import Backend

import tether
from tether.integrations.langgraph import TetherStore
from tether.model.clock import FakeClock

WORDS = ["cat", "dog", "pizza", "pasta", "rain", "snow"]


def embed(texts: list[str]) -> list[list[float]]:
    """A toy embedding: counts of a few words (the user's own function, no network)."""
    out = []
    for text in texts:
        v = [float(text.lower().count(w)) for w in WORDS]
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        out.append([x / norm for x in v] if any(v) else [1e-3] * len(WORDS))
    return out


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def app(backend: Backend, clock: FakeClock) -> Iterator[tether.App]:
    a = tether.open(backend.url, clock=clock)
    yield a
    a.close()


def test_put_get_update_delete(app: tether.App) -> None:
    store = TetherStore(app)
    assert store.get(("users", "u1"), "prefs") is None
    store.put(("users", "u1"), "prefs", {"theme": "dark"})
    item = store.get(("users", "u1"), "prefs")
    assert item is not None and item.value == {"theme": "dark"}
    assert item.namespace == ("users", "u1") and item.key == "prefs"
    created = item.created_at
    store.put(("users", "u1"), "prefs", {"theme": "light"})
    again = store.get(("users", "u1"), "prefs")
    assert again is not None and again.value == {"theme": "light"}
    assert again.created_at == created and again.updated_at >= created
    store.delete(("users", "u1"), "prefs")
    assert store.get(("users", "u1"), "prefs") is None


def test_namespaces_prefix_suffix_depth_and_paging(app: tether.App) -> None:
    store = TetherStore(app)
    for ns in [("a", "x", "1"), ("a", "x", "2"), ("a", "y", "1"), ("b", "x", "1")]:
        store.put(ns, "k", {"v": 1})
    assert store.list_namespaces() == [
        ("a", "x", "1"),
        ("a", "x", "2"),
        ("a", "y", "1"),
        ("b", "x", "1"),
    ]
    assert store.list_namespaces(prefix=("a", "x")) == [("a", "x", "1"), ("a", "x", "2")]
    assert store.list_namespaces(suffix=("1",)) == [
        ("a", "x", "1"),
        ("a", "y", "1"),
        ("b", "x", "1"),
    ]
    assert store.list_namespaces(prefix=("*", "x")) == [
        ("a", "x", "1"),
        ("a", "x", "2"),
        ("b", "x", "1"),
    ]
    assert store.list_namespaces(max_depth=2) == [("a", "x"), ("a", "y"), ("b", "x")]
    assert store.list_namespaces(limit=2, offset=1) == [("a", "x", "2"), ("a", "y", "1")]


def test_search_filters_and_pagination(app: tether.App) -> None:
    store = TetherStore(app)
    for i in range(10):
        store.put(("docs",), f"d{i}", {"n": i, "kind": "even" if i % 2 == 0 else "odd"})
    store.put(("other",), "o", {"n": 3, "kind": "odd"})
    odd = store.search(("docs",), filter={"kind": "odd"}, limit=100)
    assert sorted(i.key for i in odd) == ["d1", "d3", "d5", "d7", "d9"]
    big = store.search(("docs",), filter={"n": {"$gte": 7}}, limit=100)
    assert sorted(i.key for i in big) == ["d7", "d8", "d9"]
    mixed = store.search(("docs",), filter={"kind": "even", "n": {"$gt": 2, "$lt": 8}})
    assert sorted(i.key for i in mixed) == ["d4", "d6"]
    assert {i.key for i in store.search(("docs",), filter={"n": {"$ne": 0}}, limit=100)} == {
        f"d{i}" for i in range(1, 10)
    }
    pages = [store.search(("docs",), limit=4, offset=o) for o in (0, 4, 8)]
    assert [len(p) for p in pages] == [4, 4, 2]
    assert len({i.key for p in pages for i in p}) == 10
    assert {i.namespace for i in store.search((), limit=100)} == {("docs",), ("other",)}


def test_ttl_on_the_injected_clock_with_refresh(app: tether.App, clock: FakeClock) -> None:
    store = TetherStore(app, ttl={"default_ttl": 10, "refresh_on_read": True})
    store.put(("s",), "short", {"v": 1}, ttl=1)  # minutes
    store.put(("s",), "default", {"v": 2})
    store.put(("s",), "forever", {"v": 3}, ttl=None)
    clock.advance(50)
    assert store.get(("s",), "short") is not None  # a read refreshes: 1 minute from now
    clock.advance(50)
    assert store.get(("s",), "short", refresh_ttl=False) is not None
    clock.advance(20)
    assert store.get(("s",), "short") is None  # 70 s after the refresh
    clock.advance(600)
    assert store.get(("s",), "default") is None
    forever = store.get(("s",), "forever")
    assert forever is not None and forever.value == {"v": 3}  # the TTL key is not shown
    assert [i.key for i in store.search(("s",))] == ["forever"]


def test_semantic_search_with_the_users_embeddings(app: tether.App) -> None:
    store = TetherStore(app, index={"embed": embed, "dims": len(WORDS), "fields": ["text"]})
    store.put(("m",), "pets", {"text": "my cat and my dog", "tag": "a"})
    store.put(("m",), "food", {"text": "pizza or pasta tonight", "tag": "b"})
    store.put(("m",), "weather", {"text": "rain then snow", "tag": "a"})
    store.put(("m",), "hidden", {"text": "cat cat cat"}, index=False)
    hits = store.search(("m",), query="a dog or a cat?", limit=2)
    assert hits[0].key == "pets" and hits[0].score is not None
    assert "hidden" not in [h.key for h in store.search(("m",), query="cat", limit=10)]
    food = store.search(("m",), query="pasta", filter={"tag": "b"}, limit=1)
    assert [h.key for h in food] == ["food"]


def test_the_async_methods(app: tether.App) -> None:
    store = TetherStore(app)

    async def go() -> list[str]:
        await store.aput(("a",), "k1", {"v": 1})
        await store.aput(("a",), "k2", {"v": 2})
        await store.adelete(("a",), "k2")
        got = await store.aget(("a",), "k1")
        assert got is not None and got.value == {"v": 1}
        assert await store.alist_namespaces() == [("a",)]
        return [i.key for i in await store.asearch(("a",))]

    assert asyncio.run(go()) == ["k1"]


def test_a_graph_uses_it_as_its_store(app: tether.App) -> None:
    """``compile(store=TetherStore(app))``: a node reads and writes long-term memory that
    outlives the thread (another thread sees it)."""
    from typing import TypedDict

    from langgraph.config import get_store
    from langgraph.graph import END, START, StateGraph

    from tether.integrations.langgraph import TetherSaver

    class S(TypedDict):
        seen: int

    def remember(state: S) -> dict[str, int]:
        store = get_store()
        found = store.get(("users", "u1"), "visits")
        visits = (found.value["n"] if found else 0) + 1
        store.put(("users", "u1"), "visits", {"n": visits})
        return {"seen": visits}

    g = StateGraph(S)
    g.add_node("remember", remember)
    g.add_edge(START, "remember")
    g.add_edge("remember", END)
    graph = g.compile(checkpointer=TetherSaver(app), store=TetherStore(app))
    assert graph.invoke({"seen": 0}, {"configurable": {"thread_id": "a"}})["seen"] == 1
    assert graph.invoke({"seen": 0}, {"configurable": {"thread_id": "b"}})["seen"] == 2
    item = TetherStore(app).get(("users", "u1"), "visits")
    assert item is not None and item.value == {"n": 2}
