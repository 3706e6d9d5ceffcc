"""tether.context.tokens: the documented estimate (4 characters per token, rounded up) when
tiktoken is not installed, and what a message costs."""

from __future__ import annotations

import importlib.util

import pytest

from tether.context import tokens

pytestmark = pytest.mark.unit

no_tiktoken = pytest.mark.skipif(
    importlib.util.find_spec("tiktoken") is not None, reason="tiktoken counts instead"
)


@no_tiktoken
def test_without_tiktoken_four_characters_make_a_token() -> None:
    assert tokens.counter() == "estimate (4 chars/token)"
    assert [tokens.count("x" * n) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    assert tokens.count({"a": 1}) == 2  # structured content counts as its JSON: {"a":1}
    assert tokens.count("é" * 8) == 2  # characters, not bytes


def test_a_message_costs_its_content_its_fields_and_the_overhead() -> None:
    bare = tokens.count_message({"role": "user", "content": "hello there"})
    assert bare == tokens.MESSAGE_OVERHEAD + tokens.count("hello there")
    named = tokens.count_message({"role": "tool", "content": "hello there", "name": "calc"})
    assert named == bare + tokens.count({"name": "calc"})
    assert tokens.text_of("plain") == "plain" and tokens.text_of([1, "a"]) == '[1,"a"]'
