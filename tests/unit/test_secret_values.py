"""tether.Secret and the redaction rules, without a store: what is shown, stored, hashed."""

from __future__ import annotations

import copy
import json
import os
import pickle
import re
import secrets as random
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tether
from tether.errors import InvalidInput, InvalidState
from tether.model import codec, redact
from tether.model import secrets as known_values
from tether.model.redact import Redact
from tether.model.secrets import Secret, literal_at, reveal_all

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def default_rules() -> Iterator[None]:
    """Each test leaves the process's rules, and the secret values it knows, as they were
    (the values this file makes would otherwise be hidden from other files' tests)."""
    before = redact.active()
    known = dict(known_values._known)
    yield
    redact.configure(before)
    with known_values._lock:
        known_values._known.clear()
        known_values._known.update(known)
        known_values._snapshot = tuple(
            sorted(known.items(), key=lambda kv: len(kv[0]), reverse=True)
        )


def _value() -> str:
    return "v" + random.token_hex(12)


def test_a_secret_never_shows_its_value() -> None:
    v = _value()
    s = Secret(v, name="openai")
    shown = [repr(s), str(s), f"{s}", f"{s!r:>40}", format(s), repr([s]), repr({"k": s})]
    assert all(v not in text for text in shown), shown
    assert repr(s) == "Secret(name='openai')" and repr(Secret(v)) == "Secret('***')"
    assert repr(Secret.env("HOME", name="home")) == "Secret.env('HOME', name='home')"
    assert s.reveal() == v
    assert copy.deepcopy({"k": s})["k"] is s  # never copied into a second place
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(s)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "must be a str .or bytes., not NoneType"),
        (42, "must be a str .or bytes., not int"),
        ({"a": 1}, "must be a str .or bytes., not dict"),
        (Secret("inner-value"), "already a Secret"),
    ],
)
def test_what_is_not_a_secret_value_is_refused(value: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        Secret(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "x" * 101, "a\nb", 7])
def test_a_bad_label_is_refused(name: object) -> None:
    with pytest.raises(InvalidInput, match="name labels the stored marker"):
        Secret("value", name=name)  # type: ignore[arg-type]


def test_a_secret_is_not_a_dict_key() -> None:
    with pytest.raises(TypeError, match="unhashable"):
        {Secret("value"): 1}


def test_it_is_stored_as_its_marker_and_read_back_unrevealable() -> None:
    v = _value()
    value = {"a": [Secret(v, name="k"), (Secret(v),)], "b": {"c": Secret.env("TETHER_X")}}
    text = codec.encode(value)
    assert v not in text
    assert '{"$t":"secret","v":{"name":"k"}}' in text
    assert '{"$t":"secret","v":{"env":"TETHER_X"}}' in text
    back = codec.decode(text)
    assert back == value  # equal markers: what the store can tell apart
    stored = back["a"][0]
    assert not stored.revealable
    with pytest.raises(InvalidState, match=r"read back from the store.*Secret.env"):
        stored.reveal()


def test_an_env_secret_reveals_this_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    s = codec.decode(codec.encode(Secret.env("TETHER_TEST_SECRET")))
    monkeypatch.delenv("TETHER_TEST_SECRET", raising=False)
    with pytest.raises(InvalidInput, match="'TETHER_TEST_SECRET' is not set in this process"):
        s.reveal()
    monkeypatch.setenv("TETHER_TEST_SECRET", "first")
    assert s.reveal() == "first"
    monkeypatch.setenv("TETHER_TEST_SECRET", "rotated")
    assert s.reveal() == "rotated"
    for bad in ("", "A=B", 3):
        with pytest.raises(InvalidInput, match="environment variable's name"):
            Secret.env(bad)  # type: ignore[arg-type]


def test_the_digest_holds_the_marker_so_a_rotated_value_keeps_it() -> None:
    a, b = Secret(_value(), name="key"), Secret(_value(), name="key")
    args = {"args": ["hi"], "kwargs": {"api_key": a}}
    assert codec.digest(args) == codec.digest({"args": ["hi"], "kwargs": {"api_key": b}})
    assert codec.digest(args) != codec.digest({"args": ["hi"], "kwargs": {"api_key": "x"}})
    assert codec.digest(args) != codec.digest({"args": ["hi"], "kwargs": {"other": a}})


def test_known_values_are_scrubbed_from_string_values() -> None:
    v = _value()
    Secret(v)
    value = {"error": f"401 for {v}!", "tb": f'line "{v}"', v: [f"{v}{v}", 1]}
    text = codec.encode(value)
    assert codec.decode(text) == {"error": "401 for ***!", "tb": 'line "***"', v: ["******", 1]}
    short = Secret("abcde")  # too short to search for in free text: it would mangle it
    assert "abcde" in codec.encode("abcdef") and short.reveal() == "abcde"


@pytest.mark.parametrize("value", ["null12", "123456", "true:1", 'a"b:cd', "n12345"])
def test_a_known_value_never_breaks_the_json_around_it(value: str) -> None:
    Secret(value)
    data = {"n": 123456, "flag": True, "x": None, "s": f"a\n12345{value}", value: 'a"b:cd'}
    back = codec.decode(codec.encode(data))  # still JSON, the same shape
    assert set(back) == set(data) and back["n"] == 123456 and back["flag"] is True
    assert value not in json.dumps([back["s"], back[value]])


def test_reveal_all_copies_only_what_holds_a_secret() -> None:
    v = _value()
    plain = {"a": [1, "x"], "b": (2,)}
    assert reveal_all(plain) is plain
    mixed = {"a": [1, Secret(v)], "b": plain}
    out = reveal_all(mixed)
    assert out == {"a": [1, v], "b": plain} and out["b"] is plain
    assert literal_at(mixed) == "$.a[1]" and literal_at({"e": Secret.env("X")}) is None


KEYS = {
    "anthropic-key": "sk-ant-api03-" + "a1B2" * 10,
    "openai-key": "sk-proj-" + "Z9y8" * 10,
    "aws-access-key-id": "AKIA" + "ABCDEFGHIJ234567",
    "github-token": "ghp_" + "aB3d" * 9,
    "slack-token": "xoxb-1234567890-abcdefghij",
    "bearer": "Bearer eyJhbGciOiJIUzI1NiJ9.payload.signature",
    "private-key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc==\n-----END RSA PRIVATE KEY-----",
}


@pytest.mark.parametrize("rule", sorted(KEYS))
def test_each_default_rule_redacts_its_credential(rule: str) -> None:
    text = codec.encode({"msg": f"the config says {KEYS[rule]} here", "m": f"x\n{KEYS[rule]}"})
    assert KEYS[rule] not in text and text.count(f"[redacted:{rule}]") == 2
    assert f"[redacted:{rule}]" in text and "here" in text


@pytest.mark.parametrize(
    "key", ["password", "API_KEY", "x-api-key", "client_secret", "Authorization", "access_token"]
)
def test_credential_named_keys_lose_their_string_values(key: str) -> None:
    text = codec.encode({key: "hunter2", "tokens": "12", "input_tokens": 7, "user": "ann"})
    assert "hunter2" not in text and f'"{key}":"[redacted:credential-key]"' in text
    assert '"tokens":"12"' in text and '"user":"ann"' in text  # not credentials


@pytest.mark.parametrize(
    "text",
    [
        "sk- is a prefix, AKIA too",
        "a risk-assessment-for-the-whole-customer-base",
        "the bearer of bad news, the bearer incomprehensibilities",
        "ghost_protocol_enabled_for_every_single_user_here",
        "PRIVATE KEY----- without its block",
    ],
)
def test_text_without_credentials_is_stored_as_it_was(text: str) -> None:
    value = {"msg": text, "n": [1, 2.5, None], "token_count": 3, "tokens": "many"}
    assert codec.decode(codec.encode(value)) == value


def test_rules_are_configurable() -> None:
    key = "acme_" + "0f" * 16
    redact.configure([*Redact.DEFAULTS, Redact("acme", r"acme_[0-9a-f]{32}")])
    assert "[redacted:acme]" in codec.encode(f"use {key}")
    redact.configure([re.compile(r"acme_\w+")])
    assert "[redacted:custom]" in codec.encode(key)
    assert KEYS["openai-key"] in codec.encode(KEYS["openai-key"])  # defaults left out
    redact.configure(False)
    # a value of this test's own: the values a process made Secrets are hidden whatever
    # the rules, and another test in this process may have made "hunter2" one
    assert codec.encode({"password": "rules-off-7f3a"}) == '{"password":"rules-off-7f3a"}'


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ("sk-.*", "a list of rules"),
        ([3], "a tether.Redact, a regular expression"),
        (["("], "is not a regex"),
        (["a*"], "matches the empty string"),
        ([Redact("x", "")], "non-empty str pattern"),
    ],
)
def test_bad_rules_are_refused(rules: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        redact.rules_of(rules)
    with pytest.raises(InvalidInput, match=message):
        tether.open(os.devnull + "/never.db", redact=rules)  # refused before opening


def test_the_unredacted_digest_is_what_a_tether_without_redaction_computed() -> None:
    args = {"kwargs": {"headers": {"Authorization": "Bearer abcdefghijkl"}}}
    redacted = codec.digest(args)
    raw = codec.digest(args, redacted=False)
    assert redacted != raw
    redact.configure(False)
    assert codec.digest(args) == raw


_pieces = st.sampled_from(
    ["sk-", "sk-proj-", "AKIA", "Bearer ", "password", '":"', '"', "\\", "\n", "-----BEGIN ", "x"]
)
_texts = st.lists(_pieces | st.text(max_size=8), max_size=6).map("".join)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _texts,
    # keys that hold no credential: a credential-like key is redacted too, and two of them
    # would become one key
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(alphabet="kq_", max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


def _shape(value: object) -> object:
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


@settings(max_examples=300, deadline=None)
@given(_json, st.text(alphabet='abcxyz09-_"\\\n', min_size=6, max_size=10))
def test_redaction_and_scrubbing_keep_the_json_and_its_shape(value: object, known: str) -> None:
    Secret(known)
    back = codec.decode(codec.encode(value))  # never CorruptRecord: still JSON
    assert _shape(back) == _shape(value)


def test_a_tool_s_secret_parameter_given_something_else_than_text_names_what_it_got() -> None:
    from tether.engine.effects import define_tool, mark_secrets

    def pay(api_key: str, amount: int) -> None: ...

    d = define_tool(
        pay, name="pay", risk="write", compensate=None, on_doubt=None, retry=None,
        secret=["api_key"],
    )  # fmt: skip
    where = r"tool 'pay': the secret parameter 'api_key' takes a str \(or bytes, or a "
    with pytest.raises(InvalidInput, match=where + r"tether.Secret\), not int: a secret is"):
        mark_secrets(d, (42, 1), {})
    with pytest.raises(InvalidInput, match=r"not float: a secret is text \(convert it first\)"):
        mark_secrets(d, (), {"api_key": 1.5, "amount": 1})
    args, kwargs = mark_secrets(d, (None,), {"amount": 1})  # an optional key left out
    assert args == (None,) and kwargs == {"amount": 1}
