"""The on_doubt a tool gets when it declares none: retry only what can dedup."""

from __future__ import annotations

import operator
from typing import Any

import pytest

import tether
from tether.engine.effects import ToolDef

pytestmark = pytest.mark.unit


def _keyed(x: int, *, idempotency_key: str) -> int:
    return x


def _plain(x: int) -> int:
    return x


def _doubt(fn: Any, **options: Any) -> str:
    d: ToolDef = tether.tool(**options)(fn).__tether_tool__
    return d.on_doubt


@pytest.mark.parametrize(
    ("fn", "options", "expected"),
    [
        (_keyed, {}, "retry"),  # a write tool that can pass its key on
        (_plain, {}, "ask"),  # nothing can dedup a call without the key
        (_keyed, {"risk": "irreversible"}, "ask"),  # irreversible asks by default
        (_plain, {"risk": "irreversible"}, "ask"),
        (_plain, {"on_doubt": "retry"}, "retry"),  # declared: the service dedups anyway
        (_keyed, {"on_doubt": "ask"}, "ask"),
        (_keyed, {"risk": "irreversible", "on_doubt": "retry"}, "retry"),
    ],
)
def test_the_default_is_derived_from_risk_and_the_key(
    fn: Any, options: dict[str, Any], expected: str
) -> None:
    assert _doubt(fn, **options) == expected


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="on_doubt must be one of"):
        _doubt(_plain, on_doubt="maybe")


def test_an_undo_whose_signature_cannot_be_read_is_not_given_a_key() -> None:
    """compensate= may be a callable inspect cannot read (a builtin, an itemgetter): it is
    called with the recorded arguments only, as passing ``idempotency_key`` would break it."""
    d: ToolDef = tether.tool(compensate=operator.itemgetter(0))(_keyed).__tether_tool__
    assert (d.takes_key, d.undo_takes_key) == (True, False)
    d = tether.tool(compensate=_keyed)(_plain).__tether_tool__
    assert (d.takes_key, d.undo_takes_key) == (False, True)
