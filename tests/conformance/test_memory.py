"""Long-term memory (tether.context.memory) on SQLite and PostgreSQL: round trips, search and its
ranking, filters, prefixes, TTL with an injected clock, forgetting, embeddings, bad input."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from _conformance import Backend
from _memory import DIMS, count, memory_tables, toy_embed

import tether
from tether.context.memory import Memory

pytestmark = pytest.mark.conformance

U7 = ("user", "u-7")


@pytest.fixture
def clock() -> tether.FakeClock:
    return tether.FakeClock()


@pytest.fixture
def app(backend: Backend, clock: tether.FakeClock) -> Iterator[tether.App]:
    a = tether.open(backend.url, clock=clock)
    yield a
    a.close()


@pytest.fixture
def memory(app: tether.App) -> Memory:
    return app.memory


def keys(items: list[tether.context.memory.MemoryItem]) -> list[str]:
    return [i.key for i in items]


# -- round trips ----------------------------------------------------------------

VALUES: list[Any] = [
    {"theme": "dark", "langs": ("fr", "en"), "avatar": b"\x00\xffpng"},
    ("a", 1, 2.5, None, True),
    b"\x00\x01binary\xff",
    {1: "int key", (2, 3): "tuple key"},
    {"when": dt.datetime(2024, 5, 1, 12, 30), "price": decimal.Decimal("9.99")},
    {"id": uuid.UUID(int=7), "tags": {"b", "a"}, "frozen": frozenset({1})},
    "plain text with \x00 a NUL",
    [],
    0,
]


@pytest.mark.parametrize("value", VALUES, ids=[type(v).__name__ for v in VALUES])
def test_put_then_get_returns_exactly_the_value(memory: Memory, value: Any) -> None:
    memory.put(U7, "k", value)
    item = memory.get(U7, "k")
    assert item is not None
    assert item.value == value and type(item.value) is type(value)
    assert item.namespace == U7 and item.key == "k"


def test_put_replaces_and_keeps_created_at(memory: Memory, clock: tether.FakeClock) -> None:
    first = memory.put(U7, "prefs", {"theme": "dark"})
    clock.advance(5)
    memory.put(U7, "prefs", {"theme": "light"}, text="light colours")
    item = memory.get(U7, "prefs")
    assert item is not None and item.value == {"theme": "light"}
    assert item.text == "light colours"
    assert (item.created_at, item.updated_at) == (first.created_at, first.created_at + 5)
    assert keys(memory.search(U7, "colours")) == ["prefs"]
    assert memory.search(U7, "dark") == []


def test_get_of_an_unknown_item_is_none(memory: Memory) -> None:
    memory.put(U7, "prefs", 1)
    assert memory.get(U7, "other") is None
    assert memory.get(("user", "u-8"), "prefs") is None
    assert memory.get(("user",), "prefs") is None


def test_delete_removes_one_item(memory: Memory, backend: Backend) -> None:
    memory.put(U7, "a", 1)
    memory.put(U7, "b", 2)
    assert memory.delete(U7, "a") is True
    assert memory.delete(U7, "a") is False
    assert memory.get(U7, "a") is None and memory.get(U7, "b") is not None
    assert count(backend, "memory_items") == 1


def test_namespaces_are_listed_in_order_under_a_prefix(memory: Memory) -> None:
    for ns in [("user", "u-8"), U7, ("org", "o-1"), ("user", "u-7", "notes"), ("users",)]:
        memory.put(ns, "k", "v")
    assert memory.list_namespaces() == [
        ("org", "o-1"),
        ("user", "u-7"),
        ("user", "u-7", "notes"),
        ("user", "u-8"),
        ("users",),
    ]
    assert memory.list_namespaces(("user",)) == [U7, ("user", "u-7", "notes"), ("user", "u-8")]
    assert memory.list_namespaces(("user",), limit=1) == [U7]
    assert memory.list_namespaces(("nobody",)) == []


def test_memory_is_not_run_state(app: tether.App, backend: Backend) -> None:
    @app.agent
    def agent(run: tether.Run) -> str:
        app.memory.put(U7, "seen", run.id)
        return "ok"

    run_id = app.run(agent).id
    assert app.memory.get(U7, "seen").value == run_id  # type: ignore[union-attr]
    assert all("memory" not in e.type for e in app.events(run_id))
    app.gc(older_than=0, vacuum=False)
    assert app.memory.get(U7, "seen") is not None  # gc of runs keeps memory


# -- full-text search ---------------------------------------------------------------


def _background(memory: Memory, n: int = 6) -> None:
    """Unrelated items, so that the query words are rare (as in any real corpus)."""
    for i in range(n):
        memory.put(("user", "bg"), f"bg{i}", f"weather report number {i} sunny skies")


def test_an_item_matching_more_query_words_ranks_first(memory: Memory) -> None:
    _background(memory)
    memory.put(U7, "one", "prefers the dark theme")
    memory.put(U7, "two", "prefers the dark theme in mode compact")
    memory.put(U7, "none", "prefers the light theme")
    found = memory.search(("user",), "dark compact mode")
    assert keys(found) == ["two", "one"]
    assert found[0].score is not None and found[1].score is not None
    assert found[0].score > found[1].score


def test_an_item_matching_more_often_ranks_first(memory: Memory) -> None:
    _background(memory)
    memory.put(U7, "once", "coffee tea water juice")
    memory.put(U7, "thrice", "coffee coffee coffee tea")
    assert keys(memory.search(U7, "coffee")) == ["thrice", "once"]


def test_any_query_word_may_match_and_case_is_ignored(memory: Memory) -> None:
    memory.put(U7, "a", {"food": "Pizza"})
    memory.put(U7, "b", {"drink": "espresso"})
    assert sorted(keys(memory.search(U7, "what PIZZA or ESPRESSO does she like?"))) == [
        "a",
        "b",
    ]


def test_the_default_text_has_the_keys_and_values(memory: Memory) -> None:
    item = memory.put(U7, "prefs", {"theme": "dark", "size": 12, "tags": ["bold"]})
    assert item.text == "theme dark size 12 tags bold"
    assert keys(memory.search(U7, "theme")) == ["prefs"]
    assert keys(memory.search(U7, "bold")) == ["prefs"]


def test_search_syntax_in_the_query_is_just_words(memory: Memory) -> None:
    memory.put(U7, "a", "near the river")
    for query in ['near" OR NOT (river', "NEAR(river", "river*", "-river", "'river'", "r:iver"]:
        memory.search(U7, query)  # never a syntax error
    assert keys(memory.search(U7, 'NEAR(river" AND')) == ["a"]
    assert memory.search(U7, "?!-*") == []


def test_a_prefix_scopes_the_search(memory: Memory) -> None:
    memory.put(U7, "a", "dark theme")
    memory.put(("user", "u-8", "notes"), "b", "dark theme")
    memory.put(("org", "o-1"), "c", "dark theme")
    memory.put(("users",), "d", "dark theme")
    assert sorted(keys(memory.search(("user",), "dark"))) == ["a", "b"]
    assert keys(memory.search(("user", "u-8"), "dark")) == ["b"]
    assert keys(memory.search(("org",), "dark")) == ["c"]
    assert sorted(keys(memory.search((), "dark"))) == ["a", "b", "c", "d"]


def test_a_part_that_extends_another_is_not_under_its_prefix(memory: Memory) -> None:
    memory.put(("user", "u-7"), "a", "x")
    memory.put(("user", "u-70"), "b", "x")
    memory.put(("user", "u-7!"), "c", "x")
    assert keys(memory.search(("user", "u-7"), "x")) == ["a"]


def test_search_without_a_query_lists_the_newest_first(
    memory: Memory, clock: tether.FakeClock
) -> None:
    for key in ["old", "mid", "new"]:
        memory.put(U7, key, {"k": key})
        clock.advance(1)
    assert keys(memory.search(U7)) == ["new", "mid", "old"]
    assert keys(memory.search(U7, "  ", limit=2)) == ["new", "mid"]


def test_limit_caps_the_results(memory: Memory) -> None:
    for i in range(5):
        memory.put(U7, f"k{i}", "apple")
    assert len(memory.search(U7, "apple", limit=3)) == 3


# -- filters -----------------------------------------------------------------------------


def test_a_filter_keeps_items_whose_fields_are_equal(memory: Memory) -> None:
    memory.put(U7, "fr", {"lang": "fr", "kind": "pref", "n": 1, "on": True, "x": None})
    memory.put(U7, "en", {"lang": "en", "kind": "pref", "n": 1.0, "on": 1})
    memory.put(U7, "list", ["lang", "fr"])
    memory.put(U7, "text", "lang fr pref")
    memory.put(U7, "nested", {"inner": {"lang": "fr"}, "kind": "pref"})
    assert keys(memory.search(U7, "pref", filter={"lang": "fr"})) == ["fr"]
    assert sorted(keys(memory.search(U7, "pref", filter={"kind": "pref"}))) == [
        "en",
        "fr",
        "nested",
    ]
    assert sorted(keys(memory.search(U7, filter={"n": 1}))) == ["en", "fr"]  # 1 == 1.0
    assert keys(memory.search(U7, filter={"on": True})) == ["fr"]  # True is not 1
    assert keys(memory.search(U7, filter={"on": 1})) == ["en"]
    assert keys(memory.search(U7, filter={"x": None})) == ["fr"]  # null, not missing
    assert memory.search(U7, "pref", filter={"lang": "de"}) == []
    assert sorted(keys(memory.search(U7, "pref", filter={}))) == sorted(
        ["fr", "en", "text", "nested"]
    )


def test_a_filter_applies_to_vector_search(memory: Memory) -> None:
    memory.embedder = toy_embed
    memory.put(U7, "a", {"about": "cat", "lang": "fr"})
    memory.put(U7, "b", {"about": "cat", "lang": "en"})
    assert keys(memory.search(U7, "kitten", filter={"lang": "en"}, mode="vector")) == ["b"]


# -- TTL ---------------------------------------------------------------------------------


def test_an_expired_item_is_invisible_at_once_and_sweep_removes_it(
    memory: Memory, clock: tether.FakeClock, backend: Backend
) -> None:
    memory.put(U7, "short", "ephemeral secret", ttl=10)
    memory.put(U7, "week", "weekly secret", ttl="7d")
    memory.put(U7, "forever", "lasting secret")
    clock.advance(9.5)
    assert memory.get(U7, "short") is not None
    clock.advance(0.5)
    assert memory.get(U7, "short") is None
    assert sorted(keys(memory.search(U7, "secret"))) == ["forever", "week"]
    assert count(backend, "memory_items") == 3  # invisible, not yet deleted
    assert memory.sweep() == 1
    assert count(backend, "memory_items") == 2
    clock.advance(7 * 86400)
    assert memory.get(U7, "week") is None
    assert memory.sweep() == 1 and memory.sweep() == 0
    assert keys(memory.search(U7, "secret")) == ["forever"]
    for table in memory_tables(backend):
        assert count(backend, table) == 1, table


def test_a_namespace_of_only_expired_items_is_not_listed(
    memory: Memory, clock: tether.FakeClock
) -> None:
    memory.put(U7, "a", 1, ttl=1)
    clock.advance(1)
    assert memory.list_namespaces() == []


def test_put_over_an_expired_item_starts_it_anew(memory: Memory, clock: tether.FakeClock) -> None:
    memory.put(U7, "a", "old", ttl=1)
    clock.advance(2)
    memory.put(U7, "a", "new")
    item = memory.get(U7, "a")
    assert item is not None and item.value == "new" and item.expires_at is None
    assert item.created_at == clock.now()


def test_delete_of_an_expired_item_reports_nothing_visible(
    memory: Memory, clock: tether.FakeClock, backend: Backend
) -> None:
    memory.put(U7, "a", 1, ttl=1)
    clock.advance(1)
    assert memory.delete(U7, "a") is False
    assert count(backend, "memory_items") == 0


# -- forgetting ------------------------------------------------------------------------


def test_delete_namespace_leaves_no_rows_behind(memory: Memory, backend: Backend) -> None:
    memory.embedder = toy_embed
    memory.put(U7, "prefs", {"secret": "zanzibarian flamingo"})
    memory.put(("user", "u-7", "notes"), "n1", "zanzibarian flamingo notes", ttl=60)
    memory.put(("user", "u-70"), "keep", "kept walrus")
    memory.put(("org", "o-1"), "keep", "kept walrus")
    assert memory.delete_namespace(U7) == 2
    assert memory.list_namespaces() == [("org", "o-1"), ("user", "u-70")]
    assert memory.search((), "zanzibarian flamingo", mode="text") == []
    assert memory.search((), "zanzibarian", mode="vector")[0].key == "keep"  # only others
    for table in memory_tables(backend):
        assert count(backend, table) == 2, table
    remaining = backend.sql("SELECT namespace FROM memory_items ORDER BY namespace")
    assert [r[0] for r in remaining] == ["org\x1fo-1\x1f", "user\x1fu-70\x1f"]
    if backend.name == "sqlite":  # no token of the forgotten text is left in the FTS index
        blocks = b"".join(bytes(r[0]) for r in backend.sql("SELECT block FROM memory_fts_data"))
        assert b"walrus" in blocks and b"zanzibarian" not in blocks and b"flamingo" not in blocks


def test_delete_namespace_of_nothing_deletes_nothing(memory: Memory, backend: Backend) -> None:
    memory.put(U7, "a", 1)
    assert memory.delete_namespace(("user", "u-8")) == 0
    assert count(backend, "memory_items") == 1


# -- embeddings and semantic search -------------------------------------------------------


def _animals(memory: Memory) -> None:
    memory.put(U7, "cat", "the cat sleeps on the mat")
    memory.put(U7, "stock", "stock prices fell sharply today")
    memory.put(U7, "dog", "a dog barks at the mailman")


def test_vector_search_returns_the_nearest_first(memory: Memory) -> None:
    memory.embedder = toy_embed
    _animals(memory)
    assert memory.search(U7, "kitten rug", mode="text") == []  # no shared word
    found = memory.search(U7, "kitten rug", mode="vector")
    assert keys(found)[0] == "cat"
    assert [i.score for i in found] == sorted([i.score for i in found], reverse=True)
    assert keys(memory.search(U7, "equities", mode="vector", limit=1)) == ["stock"]


def test_hybrid_search_fuses_text_and_vector_results(memory: Memory) -> None:
    memory.embedder = toy_embed
    _animals(memory)
    memory.put(U7, "kitten", "kitten adoption form")
    found = keys(memory.search(U7, "kitten"))  # auto: hybrid with an embedder
    assert found[:2] == ["kitten", "cat"]  # the word match, then the meaning match


def test_embeddings_are_stored_as_float32_vectors(memory: Memory, backend: Backend) -> None:
    memory.embedder = toy_embed
    memory.put(U7, "a", "cat")
    memory.put(U7, "blank", b"bytes have no text")
    blobs = dict(backend.sql("SELECT key, embedding FROM memory_items"))
    assert len(bytes(blobs["a"])) == 4 * DIMS
    assert blobs["blank"] is None


def test_open_takes_the_embedder(backend: Backend, clock: tether.FakeClock) -> None:
    app = tether.open(backend.url, clock=clock, embed=toy_embed)
    try:
        app.memory.put(U7, "cat", "a cat")
        assert keys(app.memory.search(U7, "feline", mode="vector")) == ["cat"]
    finally:
        app.close()


def test_reembed_fills_in_the_missing_embeddings(memory: Memory) -> None:
    _animals(memory)
    memory.embedder = toy_embed
    assert memory.search(U7, "kitten", mode="vector") == []
    assert memory.reembed(("user",)) == 3
    assert memory.reembed(("user",)) == 0
    assert keys(memory.search(U7, "kitten", mode="vector"))[0] == "cat"
    assert memory.reembed(all=True, batch=2) == 3


def test_a_changed_embedder_dimension_is_a_clear_error(memory: Memory) -> None:
    memory.embedder = toy_embed
    memory.put(U7, "a", "cat")
    memory.embedder = lambda texts: [[1.0, 0.0] for _ in texts]
    message = r"\('user', 'u-7'\)/'a' has a 32-dimension .* returns 2 .*reembed\(all=True\)"
    with pytest.raises(ValueError, match=message):
        memory.search(U7, "cat", mode="vector")
    assert memory.reembed(all=True) == 1
    assert keys(memory.search(U7, "cat", mode="vector")) == ["a"]


# -- bad input: a clear error and nothing changed -----------------------------------------

Call = Callable[[Memory], object]

BAD: list[tuple[str, Call, type[Exception], str]] = [
    ("empty namespace", lambda m: m.put((), "k", 1), ValueError, "namespace is empty"),
    ("str namespace", lambda m: m.put("user", "k", 1), TypeError, r"write \('user',\)"),  # type: ignore[arg-type]
    ("list of ints", lambda m: m.put(("user", 7), "k", 1), TypeError, "part 1 .* must be a str"),  # type: ignore[arg-type]
    ("empty part", lambda m: m.put(("user", ""), "k", 1), ValueError, "part 1 .* is empty"),
    ("separator", lambda m: m.put(("a\x1fb",), "k", 1), ValueError, "separator U\\+001F"),
    ("NUL in part", lambda m: m.put(("a\x00",), "k", 1), ValueError, "NUL"),
    ("int key", lambda m: m.put(U7, 5, 1), TypeError, "the key must be a str, not int"),  # type: ignore[arg-type]
    ("empty key", lambda m: m.put(U7, "", 1), ValueError, "the key is empty"),
    ("bad ttl", lambda m: m.put(U7, "k", 1, ttl="soon"), ValueError, "not a duration"),
    ("zero ttl", lambda m: m.put(U7, "k", 1, ttl=0), ValueError, "ttl must be positive"),
    ("int text", lambda m: m.put(U7, "k", 1, text=5), TypeError, "text must be a str"),  # type: ignore[arg-type]
    (
        "list filter",
        lambda m: m.search(U7, "x", filter={"tags": ["a"]}),
        TypeError,
        r"filter\['tags'\] is list",
    ),
    ("bad mode", lambda m: m.search(U7, "x", mode="fuzzy"), ValueError, "mode is"),  # type: ignore[arg-type]
    ("no embedder", lambda m: m.search(U7, "x", mode="vector"), ValueError, "embed=fn"),
    ("zero limit", lambda m: m.search(U7, "x", limit=0), ValueError, "positive int"),
    ("forget all", lambda m: m.delete_namespace(()), ValueError, "forget every namespace"),
    ("str prefix", lambda m: m.search("user", "x"), TypeError, "not the string"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input_is_a_clear_error_and_changes_nothing(
    memory: Memory, backend: Backend, case: tuple[str, Call, type[Exception], str]
) -> None:
    _, call, error, message = case
    memory.put(U7, "k", {"v": 1})
    before = backend.sql("SELECT namespace, key, value, updated_at FROM memory_items")
    with pytest.raises(error, match=message):
        call(memory)
    assert backend.sql("SELECT namespace, key, value, updated_at FROM memory_items") == before


def test_an_unencodable_value_names_its_path_and_changes_nothing(
    memory: Memory, backend: Backend
) -> None:
    memory.put(U7, "k", {"v": 1})
    with pytest.raises(tether.EncodeError, match=r"\$\.clients\[1\]") as info:
        memory.put(U7, "k", {"clients": [1, object()]})
    assert info.value.path == "$.clients[1]"
    assert memory.get(U7, "k").value == {"v": 1}  # type: ignore[union-attr]
    assert count(backend, "memory_items") == 1


def test_a_failing_embedder_changes_nothing(memory: Memory, backend: Backend) -> None:
    memory.put(U7, "k", "before")

    def broken(texts: list[str]) -> list[list[float]]:
        return [[float("nan")] for _ in texts]

    memory.embedder = broken
    with pytest.raises(ValueError, match="vector 0 is empty, zero or not finite"):
        memory.put(U7, "k", "after")
    memory.embedder = lambda texts: []
    with pytest.raises(ValueError, match="returned 0 vectors for 1 texts"):
        memory.put(U7, "k", "after")
    assert memory.get(U7, "k").value == "before"  # type: ignore[union-attr]
    assert count(backend, "memory_items") == 1
