"""The pure part of TetherSaver (tether.integrations.langgraph.thread): a checkpoint kept
as the delta of its parent's comes back exactly; serialized values round-trip."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.integrations.langgraph.thread import (
    NESTED,
    blob_json,
    blob_typed,
    ck_apply,
    ck_delta,
    digest_of,
)

pytestmark = pytest.mark.unit

keys = st.sampled_from(["a", "b", "c", "messages", "__start__"])
versions = st.dictionaries(keys, st.one_of(st.integers(), st.text(max_size=5)), max_size=4)
scalars = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(keys, max_size=3))


@st.composite
def checkpoints(draw: Any) -> dict[str, Any]:
    ck: dict[str, Any] = draw(st.dictionaries(st.sampled_from(["v", "ts", "x"]), scalars))
    for key in NESTED:
        if draw(st.booleans()):
            ck[key] = (
                draw(versions)
                if key == "channel_versions"
                else draw(st.dictionaries(keys, versions, max_size=3))
            )
    return ck


@given(checkpoints(), checkpoints())
def test_a_delta_applied_to_its_base_gives_the_checkpoint(
    base: dict[str, Any], ck: dict[str, Any]
) -> None:
    assert ck_apply(base, ck_delta(base, ck)) == ck


def test_an_unchanged_checkpoint_has_an_empty_delta() -> None:
    ck = {"v": 1, "channel_versions": {"a": "1"}, "versions_seen": {"n": {"a": "1"}}}
    assert ck_delta(ck, ck) == {}


@given(st.text(max_size=10), st.binary(max_size=300))
def test_a_blob_round_trips_and_its_digest_names_its_content(kind: str, data: bytes) -> None:
    assert blob_typed(blob_json((kind, data))) == (kind, data)
    assert digest_of((kind, data)) != digest_of((kind + "x", data))
    assert len(digest_of((kind, data))) == 32
