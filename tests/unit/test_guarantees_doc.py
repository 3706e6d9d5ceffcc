"""docs/guarantees.md states the numbers and defaults the code has, and the README links
it instead of promising more."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import tether
from tether.engine.effects import derived_doubt
from tether.engine.journal import DEFER_BELOW

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "guarantees.md").read_text()
README = (ROOT / "README.md").read_text()


def test_the_readme_links_the_guarantees_and_does_not_overpromise() -> None:
    assert "docs/guarantees.md" in README
    for claim in ("ever runs twice", "Exactly-once side effects", "journaled and idempotent"):
        assert claim not in README


def test_the_numbers_are_the_codes() -> None:
    assert f"under {DEFER_BELOW * 1000:g} ms" in DOC
    ttl = inspect.signature(tether.open).parameters["lease_ttl"].default
    assert f"lease** ({ttl:g} s by default, extended every third of" in DOC


def test_the_derived_on_doubt_is_the_documented_one() -> None:
    assert "**`retry` for a `write` tool that takes\n`idempotency_key`**" in DOC
    assert (derived_doubt("write", True), derived_doubt("write", False)) == ("retry", "ask")
    assert derived_doubt("irreversible", True) == "ask"
    assert inspect.signature(tether.tool).parameters["on_doubt"].default is None


def test_the_child_runs_recheck_is_the_codes() -> None:
    from tether.engine.children import JOIN_RECHECK

    assert f"up to {JOIN_RECHECK:g} s later" in DOC
