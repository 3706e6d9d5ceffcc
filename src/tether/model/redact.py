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
  process by ``***`` (an exception message that quoted the key).

Rules work on the JSON text the codec wrote (compact, ``":"`` between a key and its
value), so a call whose text matches nothing pays a few substring searches and one
regular-expression scan, and no copy. The rules are the process's: ``tether.open(url,
redact=...)`` sets them (:func:`configure`); the defaults (``Redact.DEFAULTS``) are
on until then. Hashing the redacted text keeps a credential out of digests too, and makes
an idempotency key independent of a rotated credential.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from tether.errors import InvalidInput
from tether.model import secrets

_KEY_WORDS = (
    r"password|passwd|passphrase|secret|token|api[_-]?key|apikey|authorization|"
    r"private[_-]?key|access[_-]?key|credentials?|cookie"
)


@dataclass(frozen=True, slots=True)
class Redact:
    """One redaction rule: ``pattern`` (a regular expression) names what to hide.

    ``keys=False``: what the pattern matches in any stored text is replaced by
    ``[redacted:<name>]``. ``keys=True``: the pattern matches dict *key names* (the
    whole name, case-insensitive), and each such key's string value is replaced whole.
    :attr:`DEFAULTS` is the default set; ``tether.open(url, redact=[*Redact.DEFAULTS,
    Redact("acme", r"acme_[0-9a-f]{32}")])`` adds one.
    """

    name: str
    pattern: str
    keys: bool = False

    DEFAULTS: ClassVar[tuple[Redact, ...]] = ()  # the default rules, set below


Redact.DEFAULTS = (
    Redact("anthropic-key", r"sk-ant-[A-Za-z0-9_\-]{20,}"),
    Redact("openai-key", r"sk-(?!ant-)[A-Za-z0-9_\-]{20,}"),
    Redact("aws-access-key-id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    Redact("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})"),
    Redact("slack-token", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    Redact("bearer", r"(?i:bearer)\s+[A-Za-z0-9._~+/=\-]{8,}"),
    Redact(
        "private-key",
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----",
    ),
    Redact("credential-key", rf"(?:[^\"\\]*[_\-. ])?(?:{_KEY_WORDS})", keys=True),
)

# a JSON string's inside (no quote, escapes kept): what a value rule may replace
_JSON_STR = r'"(?:[^"\\]|\\.)*"'


class Redactor:
    """Compiled rules: :meth:`apply` on JSON text."""

    def __init__(self, rules: Iterable[Redact]) -> None:
        self.rules = tuple(rules)
        values = [r for r in self.rules if not r.keys]
        keys = [r for r in self.rules if r.keys]
        self._values = [(re.compile(r.pattern, re.DOTALL), f"[redacted:{r.name}]") for r in values]
        self._any = (
            re.compile("|".join(f"(?:{r.pattern})" for r in values), re.DOTALL) if values else None
        )
        self._keys = [
            (
                re.compile(rf'"(?P<tether_key>(?i:{r.pattern}))":{_JSON_STR}'),
                f'"\\g<tether_key>":"[redacted:{r.name}]"',
            )
            for r in keys
        ]

    def apply(self, text: str) -> str:
        """``text`` (JSON written by the codec) with what the rules match replaced."""
        if self._any is not None and self._any.search(text) is not None:
            for pattern, by in self._values:
                text = pattern.sub(by, text)
        for pattern, by in self._keys:
            if pattern.search(text) is not None:
                text = pattern.sub(_keep_marker(by), text)
        return text


def _keep_marker(by: str) -> Any:
    def sub(m: re.Match[str]) -> str:
        return m.expand(by)

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
    """``text`` as it may be stored: the process's rules applied, then every secret value
    this process knows (see :func:`tether.model.secrets.scrub`) hidden."""
    text = _active.apply(text)
    if secrets.known():
        text = secrets.scrub(text)
    return text
