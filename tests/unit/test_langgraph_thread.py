"""The pure part of TetherSaver (tether.integrations.langgraph.records): a checkpoint kept
as the delta of its parent's, and in its stored form, comes back exactly; serialized
values round-trip, in this format and the earlier one."""

from __future__ import annotations

import base64
import hashlib
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.integrations.langgraph.records import (
    NESTED,
    ZDICT,
    blob_entry,
    ck_apply,
    ck_delta,
    digest_of,
    entry_typed,
    from_old_entry,
    from_stored,
    to_stored,
)

pytestmark = pytest.mark.unit

keys = st.sampled_from(["a", "b", "c", "messages", "__start__"])
kinds = st.sampled_from(["msgpack", "json", "bytes"])
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


@given(kinds, st.binary(max_size=300) | st.sampled_from([ZDICT[:137], ZDICT * 2]))
def test_a_blob_round_trips_and_its_digest_names_its_content(kind: str, data: bytes) -> None:
    assert entry_typed(blob_entry((kind, data))) == (kind, data)
    assert digest_of((kind, data)) != digest_of((kind + "x", data))
    assert len(digest_of((kind, data))) == 32


def test_a_message_costs_its_content_not_its_field_names() -> None:
    """The preset dictionary: a short message's blob is short (zlib alone: ~180 bytes)."""
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    typed = JsonPlusSerializer().dumps_typed(HumanMessage("hello there"))
    entry = blob_entry(typed)
    assert isinstance(entry, str) and entry[0] == "y" and len(entry) < 50, entry
    assert len(typed[1]) > 130  # the field names are there
    assert entry_typed(entry) == typed


def test_the_preset_dictionary_never_changes() -> None:
    """Stored blobs tagged "y" are decompressed with it: another one is another tag."""
    assert hashlib.sha256(ZDICT).hexdigest()[:16] == "a5fc7cc45c69cedd"


@given(kinds, st.binary(max_size=300), st.booleans())
def test_an_earlier_format_blob_reads(kind: str, data: bytes, packed: bool) -> None:
    stored = zlib.compress(data) if packed else data
    old = [kind, base64.b85encode(stored).decode()] + (["z"] if packed else [])
    assert entry_typed(from_old_entry(old)) == (kind, data)


@pytest.mark.parametrize(
    "ts",
    [
        "2026-11-27T02:13:00.399675+00:00",
        "2026-11-27T02:13:00+00:00",  # no fraction
        "2026-11-27T02:13:00.399675+02:00",  # another zone: kept as text
        "2026-11-27T02:13:00.399675",  # no zone: kept as text
        "yesterday",
    ],
)
def test_a_checkpoint_s_stored_form_gives_it_back(ts: str) -> None:
    values = [["b", "2", 3], ["a", "2", ["l", [1]]], ["c", "2", None]]
    ck = {"v": 4, "ts": ts, "id": "x", "updated_channels": ["a", "b"], "versions_seen": {}}
    stored = to_stored(ck, values)
    assert stored["updated_channels"] == 1
    assert (type(stored["ts"]) is int) == ts.endswith("+00:00")
    assert from_stored(stored, values) == ck
    other = {**ck, "updated_channels": ["a"]}  # not what its values imply: kept
    assert from_stored(to_stored(other, values), values) == other


@given(st.binary(max_size=400))
def test_a_blob_s_text_has_no_dash_or_underscore(data: bytes) -> None:
    """Credential patterns (``sk-``, ``xoxb-``, ``ghp_``) need them: tether's redaction
    rules never rewrite a blob in an event."""
    for kind in ("msgpack", "json"):
        entry = blob_entry((kind, data))
        text = entry if isinstance(entry, str) else entry[1]
        assert "-" not in text and "_" not in text
