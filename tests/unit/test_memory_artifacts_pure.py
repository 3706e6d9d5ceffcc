"""The pure parts of context.memory and context.artifacts: namespace ranges, the default
search text, rank fusion, artifact references and the offload threshold."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tether
from tether.context.artifacts import (
    DEFAULT_THRESHOLD,
    VALUE_MEDIA_TYPE,
    ArtifactRef,
    is_ref,
    offload,
    ref_for,
    restore,
    verify,
)
from tether.context.memory import _bounds, _decode_namespace, _encode_namespace, render_text
from tether.context.vectors import dot, fuse, pack, unit, unpack
from tether.model import codec

pytestmark = pytest.mark.unit

part = st.text(st.characters(blacklist_characters="\x1f\x00"), min_size=1, max_size=4)
namespaces = st.lists(part, min_size=1, max_size=4).map(tuple)


@given(namespaces, st.lists(part, max_size=3).map(tuple))
def test_a_prefix_range_holds_exactly_the_namespaces_under_it(
    ns: tuple[str, ...], prefix: tuple[str, ...]
) -> None:
    bounds = _bounds(prefix)
    stored = _encode_namespace(ns)
    inside = stored >= bounds["lo"] and (bounds["hi"] is None or stored < bounds["hi"])
    # byte order of UTF-8 == code point order: what SQLite BINARY and COLLATE "C" compare
    assert inside == (ns[: len(prefix)] == prefix)
    assert _decode_namespace(stored) == ns


def test_render_text_lists_keys_and_scalar_values_in_order() -> None:
    value = {"name": "Ada", "age": 36, "langs": ("en", "fr"), "raw": b"\x00", "none": None}
    assert render_text(value) == "name Ada age 36 langs en fr raw none"
    assert render_text("just text") == "just text"
    assert render_text({"s": {"b", "a"}}) == "s a b"


def test_fusion_rewards_items_high_in_both_rankings() -> None:
    fused = fuse([[1, 2, 3], [3, 1, 4]])
    assert [i for i, _ in fused] == [1, 3, 2, 4]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)


class MemoryStore:
    """An ArtifactStore in a dict: the protocol is all offload needs."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def put(self, data: bytes, media_type: str = "application/octet-stream") -> ArtifactRef:
        ref = ref_for(data, media_type)
        self.blobs.setdefault(ref.sha256, data)
        return ref

    def get(self, ref: ArtifactRef) -> bytes:
        return verify(ref, self.blobs[ref.sha256], "a dict")

    def exists(self, ref: ArtifactRef) -> bool:
        return ref.sha256 in self.blobs

    def delete(self, ref: ArtifactRef) -> bool:
        return self.blobs.pop(ref.sha256, None) is not None


def test_offload_keeps_a_value_at_the_threshold_and_stores_one_above() -> None:
    store = MemoryStore()
    at = "x" * (DEFAULT_THRESHOLD - 2)  # encoded with its two quotes: exactly the threshold
    assert len(codec.encode(at).encode()) == DEFAULT_THRESHOLD
    assert offload(at, store) == at and store.blobs == {}
    above = at + "x"
    ref = offload(above, store)
    assert is_ref(ref) and ref["media_type"] == VALUE_MEDIA_TYPE
    assert ref["sha256"] == hashlib.sha256(codec.encode(above).encode()).hexdigest()
    assert restore(ref, store) == above
    assert offload({"n": 1}, store, threshold=4) != {"n": 1}


def test_restore_leaves_other_values_and_returns_file_bytes() -> None:
    store = MemoryStore()
    assert restore({"$t": "artifact"}, store) == {"$t": "artifact"}
    assert restore([1, 2], store) == [1, 2]
    ref = store.put(b"file bytes", "text/plain")
    assert restore(ref.to_value(), store) == b"file bytes"


def test_a_reference_survives_the_codec_and_tampering_is_caught() -> None:
    store = MemoryStore()
    ref: Any = offload(list(range(30_000)), store)
    assert codec.decode(codec.encode(ref)) == ref
    store.blobs[ref["sha256"]] = b"[1]"
    with pytest.raises(tether.ArtifactCorrupt, match=ref["sha256"]):
        restore(ref, store)


def test_offload_of_an_unstorable_value_names_its_path() -> None:
    with pytest.raises(tether.EncodeError, match=r"\$\.conn"):
        offload({"conn": object()}, MemoryStore())


def test_a_reference_is_checked() -> None:
    with pytest.raises(ValueError, match="not a SHA-256 digest"):
        ArtifactRef("ABC", 1)
    with pytest.raises(ValueError, match="not an artifact reference"):
        ArtifactRef.from_value({"sha256": "0" * 64})


def test_vectors_are_stored_at_unit_length_as_float32() -> None:
    v = unit([3.0, 4.0], "v")
    assert v == [0.6, 0.8]
    blob = pack(v)
    assert len(blob) == 8 and list(unpack(blob)) == pytest.approx(v)
    assert dot(unpack(blob), v) == pytest.approx(1.0)
    for bad in ([], [0.0, 0.0], [float("inf")]):
        with pytest.raises(ValueError, match="the vector is empty, zero or not finite"):
            unit(bad, "the vector")
    with pytest.raises(TypeError, match="the vector is not a list of numbers"):
        unit(["a"], "the vector")  # type: ignore[list-item]
