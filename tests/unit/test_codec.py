"""The codec round-trips every storable value exactly and names what it refuses."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import socket
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.errors import EncodeError
from tether.model import codec

pytestmark = pytest.mark.unit

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(max_size=20)
    | st.datetimes()
    | st.dates()
    | st.uuids()
    | st.decimals(allow_nan=False, allow_infinity=False)
)
hashables = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=5), inner, max_size=4)
        | st.dictionaries(hashables, inner, max_size=3)
        | st.sets(hashables, max_size=4)
    ),
    max_leaves=20,
)


@given(values)
def test_round_trip_is_exact(value: Any) -> None:
    back = codec.decode(codec.encode(value))
    assert back == value
    assert _types(back) == _types(value)


def _types(v: Any) -> Any:
    """The value's shape with every container's and leaf's type (hashable)."""
    if isinstance(v, dict):
        return (dict, frozenset((k, type(k), _types(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return (type(v), tuple(_types(x) for x in v))
    if isinstance(v, (set, frozenset)):
        return (type(v), frozenset((x, type(x)) for x in v))
    return type(v)


@given(values)
def test_digest_is_stable_across_encodings(value: Any) -> None:
    assert codec.digest(value) == codec.digest(codec.decode(codec.encode(value)))


def test_non_finite_floats_round_trip() -> None:
    back = codec.decode(codec.encode([math.inf, -math.inf, math.nan]))
    assert back[0] == math.inf and back[1] == -math.inf and math.isnan(back[2])


def test_tag_key_in_user_dict_is_escaped() -> None:
    value = {"$t": "tuple", "v": [1, 2]}
    assert codec.decode(codec.encode(value)) == value


def test_special_types_keep_their_type() -> None:
    value = {
        "when": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        "day": dt.date(2026, 1, 2),
        "t": dt.time(1, 2),
        "money": decimal.Decimal("1.10"),
        "id": uuid.UUID(int=7),
        "raw": b"\x00\xff",
        "pair": (1, "a"),
        "tags": {"x", "y"},
        "by_int": {1: "one"},
    }
    assert codec.decode(codec.encode(value)) == value


def test_unencodable_value_names_type_and_path() -> None:
    sock = socket.socket()
    try:
        with pytest.raises(EncodeError) as info:
            codec.encode({"results": [1, 2, {"conn": sock}]})
    finally:
        sock.close()
    assert info.value.path == "$.results[2].conn"
    assert info.value.type_name == "socket.socket"
    assert "socket.socket at $.results[2].conn" in str(info.value)


def test_set_of_objects_is_refused_with_path() -> None:
    class Thing:
        pass

    with pytest.raises(EncodeError) as info:
        codec.encode({"s": {Thing()}})
    assert info.value.path == "$.s[0]"
    assert "Thing" in info.value.type_name


def test_digest_never_fails_on_objects() -> None:
    assert len(codec.digest([object(), {"a": socket}])) == 64


def test_digest_is_the_same_as_earlier_versions_wrote() -> None:
    # A run started by an earlier tether resumes under this one: its recorded argument
    # digests must still match. This value's digest was computed by tether at 4190264.
    value = [[600, 1.5e-06, 1e16, (1, 2)], {"k": {"x": [None, True, "é"]}, "u": uuid.UUID(int=7)}]
    assert codec.digest(value) == (
        "33f2e414a4f97fcf9bba080db064f91c469f0ea1fea292a66305f95e590faba9"
    )


@pytest.mark.parametrize(
    "value",
    [
        2**64,  # past orjson's integers: the stdlib encoder writes it
        -(2**70),
        {"deep": [[[[[[[[[[1]]]]]]]]]] * 30},
        {"a": 1.5e-06, "b": -0.0, "c": 1e300, "d": [0.1, 2.5e-320]},
        {"text": 'naïve ☃ \u2028 \\ " \n'},
    ],
)
def test_values_orjson_refuses_or_writes_differently_round_trip(value: Any) -> None:
    text = codec.encode(value)
    assert codec.decode(text) == value
    assert codec.encode(codec.decode(text)) == text


def test_nesting_past_orjsons_limit_falls_back_to_the_stdlib() -> None:
    value: Any = 1
    for _ in range(300):  # orjson refuses more than 255 levels
        value = [value]
    assert codec.decode(codec.encode(value)) == value


def test_a_value_that_contains_itself_is_refused_clearly() -> None:
    cycle: list[Any] = [1]
    cycle.append({"again": cycle})
    with pytest.raises(EncodeError) as info:
        codec.encode({"output": cycle})
    assert "contains itself" in str(info.value)


def test_plain_values_are_encoded_without_a_copy_and_others_are_tagged() -> None:
    plain = {"a": [1, 2.5, "x", None, True, {"b": []}]}
    assert codec.encode(plain) == '{"a":[1,2.5,"x",null,true,{"b":[]}]}'
    for tagged in ({"t": (1,)}, {"f": math.inf}, {1: "x"}, {"$t": "x", "v": 1}, [{"s": {1}}]):
        assert '"$t"' in codec.encode(tagged), tagged
        assert codec.decode(codec.encode(tagged)) == tagged
