"""Redaction: credentials that were not marked secret, removed before text is stored.

The codec passes every text it writes (events, audit records, effect results, signal
payloads, snapshots: :func:`tether.model.codec.encode`) and every text it hashes
(:func:`tether.model.codec.digest`, rules only: :func:`by_rules`) through
:func:`apply`, which

* replaces what a rule's pattern matches (an OpenAI or Anthropic key, an AWS access
  key id, a GitHub or Slack token, ``Bearer <token>``, a PEM private key) by
  ``[redacted:<rule>]``;
* replaces the whole string value of a dict key named like a credential
  (``password``, ``api_key``, ``client_secret``, ``Authorization``, ``x-api-key``…) by
  ``[redacted:<rule>]``;
* replaces every value of a :class:`~tether.model.secrets.Secret` made in this
  process by ``***`` inside string values (an exception message that quoted the key).

Rules work on the JSON text the codec wrote (compact, ``":"`` between a key and its
value), so a text that matches nothing pays a substring search per distinct hint and
one split at ``":"`` (see :class:`Redactor`), and no copy. The rules are the
process's: ``tether.open(url, redact=...)`` sets them (:func:`configure`); the
defaults (``Redact.DEFAULTS``) are on until then. Hashing the redacted text keeps a
credential out of digests too, and makes an idempotency key independent of a rotated
credential.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from tether.errors import InvalidInput
from tether.model import secrets


@dataclass(frozen=True, slots=True)
class Redact:
    """One redaction rule: ``pattern`` (a regular expression) names what to hide.

    ``keys=False``: what the pattern matches in any stored text is replaced by
    ``[redacted:<name>]``. ``keys=True``: the pattern matches dict *key names* (the
    whole name, case-insensitive), and each such key's string value is replaced whole.

    ``hints``, optional, make the rule cheap on text it cannot match (almost every
    text): for a value rule, substrings one of which the text holds wherever the pattern
    matches (the pattern runs only on such text); for a key rule, lowercase endings one
    of which a matching key name has. Without hints the pattern runs on every text.
    :attr:`DEFAULTS` is the default set; ``tether.open(url, redact=[*tether.Redact.DEFAULTS,
    tether.Redact("acme", r"acme_[0-9a-f]{32}", hints=("acme_",))])`` adds one.
    """

    name: str
    pattern: str
    keys: bool = False
    hints: tuple[str, ...] = ()

    DEFAULTS: ClassVar[tuple[Redact, ...]] = ()  # the default rules, set below


# how a credential's key name ends (the whole name, or after _ - . or a space)
_WORDS = [
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "api_key",
    "api-key",
    "apikey",
    "authorization",
    "private_key",
    "private-key",
    "privatekey",
    "access_key",
    "access-key",
    "accesskey",
    "credential",
    "credentials",
    "cookie",
]
_KEY_WORDS = "|".join(re.escape(w) for w in _WORDS)

# where a credential may start: not inside a word (risk-…), but after a JSON escape (\n)
_START = r"(?:(?<![A-Za-z0-9])|(?<=\\[nrt]))"

Redact.DEFAULTS = (
    Redact("anthropic-key", _START + r"sk-ant-[A-Za-z0-9_\-]{20,}", hints=("sk-",)),
    Redact("openai-key", _START + r"sk-(?!ant-)[A-Za-z0-9_\-]{20,}", hints=("sk-",)),
    Redact(
        "aws-access-key-id",
        _START + r"(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])",
        hints=("AKIA", "ASIA"),
    ),
    Redact(
        "github-token",
        _START + r"gh(?:[pousr]_[A-Za-z0-9]{30,}|ithub_pat_[A-Za-z0-9_]{40,})",
        hints=("gh",),
    ),
    Redact("slack-token", _START + r"xox[abposr]-[A-Za-z0-9\-]{10,}", hints=("xox",)),
    Redact(
        "bearer",
        r"(?:[Bb]earer|BEARER)\s+(?=[A-Za-z._~+/=\-]*[0-9])[A-Za-z0-9._~+/=\-]{20,}",
        hints=("earer", "EARER"),
    ),
    Redact(
        "private-key",
        # within one JSON string: never across a quote, so the text stays JSON
        r'-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[^"\\]|\\.)*?-----END [A-Z ]*PRIVATE KEY-----',
        hints=("PRIVATE KEY-----",),
    ),
    Redact(
        "credential-key", rf"(?:[^\"\\]*[_\-. ])?(?:{_KEY_WORDS})", keys=True, hints=tuple(_WORDS)
    ),
)

# a JSON string, quotes and escapes included: the value a key rule replaces
_JSON_STR = r'"(?:[^"\\]|\\.)*"'


@dataclass(frozen=True, slots=True)
class _Rule:
    hints: tuple[str, ...]
    find: re.Pattern[str]  # what is replaced
    by: Any  # its replacement (a str, or a function of the match)
    key: re.Pattern[str] | None = None  # a key rule: matches a key's name


class Redactor:
    """Compiled rules: :meth:`apply` on JSON text.

    A value rule with hints runs only when the text holds one (each distinct hint is
    searched once). A key rule with hints runs only when a string-valued key's name ends
    with one of them and matches its pattern (see :meth:`_key_rules_in`)."""

    def __init__(self, rules: Iterable[Redact]) -> None:
        self.rules = tuple(rules)
        self._values: dict[str, list[_Rule]] = {}  # hint -> the rules it gates
        self._keys: list[_Rule] = []
        self._always: list[_Rule] = []
        for r in self.rules:
            if r.keys:
                find = re.compile(rf'"(?P<tether_key>(?i:{r.pattern}))":{_JSON_STR}')
                by = _keep_key(f'"\\g<tether_key>":"[redacted:{r.name}]"')
                rule = _Rule(r.hints, find, by, re.compile(r.pattern, re.IGNORECASE))
                if r.hints:
                    self._keys.append(rule)
                else:
                    self._always.append(rule)
                continue
            rule = _Rule(r.hints, re.compile(r.pattern, re.DOTALL), f"[redacted:{r.name}]")
            if not r.hints:
                self._always.append(rule)
            for h in r.hints:
                self._values.setdefault(h, []).append(rule)
        self._names: dict[str, tuple[_Rule, ...]] = {}  # key name -> the key rules it matches

    def apply(self, text: str) -> str:
        """``text`` (JSON written by the codec) with what the rules match replaced."""
        done: set[int] = set()
        for hint, rules in self._values.items():
            if hint in text:
                for rule in rules:
                    if id(rule) not in done:
                        done.add(id(rule))
                        text = rule.find.sub(rule.by, text)
        if self._keys and '":"' in text:
            for rule in self._key_rules_in(text):
                text = rule.find.sub(rule.by, text)
        for rule in self._always:
            if rule.find.search(text) is not None:
                text = rule.find.sub(rule.by, text)
        return text

    def _key_rules_in(self, text: str) -> list[_Rule]:
        """The key rules that match a string-valued key of ``text``. In JSON text ``":"``
        is only ever the end of a key whose value is a string (a quote inside a string is
        escaped), so the names are what precedes each ``":"`` back to its quote; what each
        name matches is remembered (the same few names come back in every event)."""
        pieces = text.split('":"')
        pieces.pop()  # what follows the last one
        found: list[_Rule] = []
        cache = self._names
        for piece in pieces:
            name = piece[piece.rfind('"') + 1 :]
            hit = cache.get(name)
            if hit is None:
                low = name.lower()
                hit = tuple(
                    r
                    for r in self._keys
                    if low.endswith(r.hints) and r.key is not None and r.key.fullmatch(name)
                )
                if len(cache) >= _NAMES_MAX:
                    cache.clear()
                cache[name] = hit
            for rule in hit:
                if rule not in found:
                    found.append(rule)
        return found


_NAMES_MAX = 4096  # key names remembered by a Redactor


def _keep_key(template: str) -> Any:
    """The replacement of a key rule's match: the key as it was, its value redacted."""

    def sub(m: re.Match[str]) -> str:
        return m.expand(template)

    return sub


def _check(rule: object) -> Redact:
    if isinstance(rule, Redact):
        pattern = rule.pattern
    elif isinstance(rule, str | re.Pattern):
        pattern = rule if isinstance(rule, str) else rule.pattern
        rule = Redact("custom", pattern)
    else:
        raise InvalidInput(
            f"redact: a rule is a tether.Redact, a regular expression (str) or a compiled "
            f"re.Pattern, not {rule!r}"
        )
    if not isinstance(pattern, str) or not pattern:
        raise InvalidInput(f"redact: rule {rule.name!r} needs a non-empty str pattern")
    if isinstance(rule.hints, str) or not all(
        isinstance(h, str) and h and (h == h.lower() or not rule.keys) for h in rule.hints
    ):
        raise InvalidInput(
            f"redact: rule {rule.name!r}: hints is a tuple of non-empty str (lowercase for a "
            f"key rule), not {rule.hints!r}"
        )
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise InvalidInput(f"redact: rule {rule.name!r}: {pattern!r} is not a regex: {e}") from None
    if compiled.search("") is not None:
        raise InvalidInput(
            f"redact: rule {rule.name!r}: {pattern!r} matches the empty string, which would "
            f"redact everywhere; make it match a credential"
        )
    return rule


def rules_of(redact: Any) -> tuple[Redact, ...]:
    """The rules a ``redact=`` argument names: None or True the defaults, False none, an
    iterable of rules (Redact, str or re.Pattern) exactly those."""
    if redact is None or redact is True:
        return tuple(Redact.DEFAULTS)
    if redact is False:
        return ()
    if isinstance(redact, str | bytes | re.Pattern | Redact) or not isinstance(redact, Iterable):
        raise InvalidInput(
            f"redact must be True/None (the default rules), False (none) or a list of "
            f"rules, not {redact!r}; e.g. redact=[*tether.Redact.DEFAULTS, r'acme_\\w{{32}}']"
        )
    return tuple(_check(r) for r in redact)


_active = Redactor(Redact.DEFAULTS)


def configure(redact: Any) -> None:
    """Set the process's redaction rules (see :func:`rules_of`)."""
    global _active
    _active = Redactor(redact if isinstance(redact, tuple) else rules_of(redact))


def active() -> tuple[Redact, ...]:
    """The process's redaction rules."""
    return _active.rules


def by_rules(text: str) -> str:
    """``text`` with the process's rules applied (what a digest hashes: the values of the
    Secrets this process happens to know are left alone there, so a digest never depends
    on what else the process did before)."""
    return _active.apply(text)


def apply(text: str) -> str:
    """JSON ``text`` (as the codec writes it) as it may be stored: the process's rules
    applied, then every secret value this process knows hidden in its string values (see
    :func:`tether.model.secrets.scrub_json`)."""
    text = _active.apply(text)
    if secrets.known():
        text = secrets.scrub_json(text)
    return text


def plain(text: str) -> str:
    """Plain ``text`` (an error message, a traceback) as it may be stored: the value rules
    applied, then every secret value this process knows hidden."""
    text = _active.apply(text)
    if secrets.known():
        text = secrets.scrub(text)
    return text


def error_info(exc: BaseException, at: float) -> dict[str, Any]:
    """An exception as plain data: type, message, traceback, time."""
    t = type(exc)
    name = t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
    # redacted here, not only when stored: RunFailed's message is built from this
    return {
        "type": name,
        "message": _storable(plain(str(exc))),
        "traceback": _storable(plain("".join(traceback.format_exception(exc)))),
        "at": at,
    }


def _storable(text: str) -> str:
    """Text that can be stored: a lone surrogate (a model's truncated emoji escape quoted in
    an error message, which UTF-8 cannot hold) kept as its escape, ``\\ud83d``."""
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode()
