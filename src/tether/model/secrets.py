"""Secret values: what a run may use but tether never stores, logs or shows in clear.

``Secret(value, name=None)`` wraps a value; its ``repr``/``str`` never show it
(``Secret('***')``, ``Secret(name='openai')``) and :meth:`Secret.reveal` returns it
to the code that needs it. Wherever a Secret is stored (step, tool and model call
arguments, task variables, approval and signal payloads, decisions), the codec writes
a constant *marker* instead, ``{"$t": "secret", "v": {"name": "openai"}}``: never the
value, and never a hash of it (a short secret would be found again from its hash).
Because the marker does not depend on the value, the digest of a call's arguments,
and so its idempotency key and the replay check, stay the same when the value changes
(a rotated key).

``Secret.env("VAR")`` stores a *reference* instead, ``{"$t": "secret", "v": {"env":
"VAR"}}``: read back in any process, it reveals that process's ``$VAR``. It is the
one kind of Secret that survives storage; a literal Secret read back from the store
(a signal's payload, a fork's variables) is a Secret whose :meth:`reveal` raises
InvalidState saying its value was never stored.

Every literal Secret made in this process, and every value a Secret.env revealed, is
remembered (the last :data:`MAX_KNOWN`, of :data:`MIN_SCRUB` characters or more), so
that :func:`scrub` and :func:`scrub_json` can remove it from text about to be stored:
an exception message, a traceback, a model's answer that quoted the key.
"""

from __future__ import annotations

import json
import os
import re
import threading
from typing import Any, NoReturn

from tether.errors import InvalidInput, InvalidState

TAG = "secret"  # the codec's tag: {"$t": "secret", "v": {...}}
MIN_SCRUB = 6  # shorter values are not searched for in free text (they would mangle it)
MAX_KNOWN = 256  # the most values remembered for scrub (the oldest are forgotten)
NAME_MAX = 100
HIDDEN = "***"  # what replaces a known secret's value in free text


class Secret:
    """A value that tether never stores, logs or shows in clear (see the module doc).

    ``value`` is a ``str`` (or ``bytes``); ``name``, optional, labels its marker (what
    ``tether show`` prints instead of it). A Secret cannot be a dict key (it is not
    hashable) and cannot wrap another Secret.
    """

    __slots__ = ("_value", "name", "var")
    __hash__ = None  # type: ignore[assignment]  # never a dict key: its marker is not unique

    _value: str | bytes | None
    name: str | None
    var: str | None  # the environment variable of a Secret.env reference

    def __init__(self, value: str | bytes, *, name: str | None = None) -> None:
        if isinstance(value, Secret):
            raise TypeError(
                f"Secret({value!r}): the value is already a Secret; pass that Secret as it is"
            )
        if not isinstance(value, str | bytes):
            raise TypeError(
                f"Secret(value): the value must be a str (or bytes), not "
                f"{type(value).__name__}; convert it first, e.g. Secret(str(value))"
            )
        self._value = value
        self.name = _label(name)
        self.var = None
        _remember(value)

    @classmethod
    def env(cls, var: str, *, name: str | None = None) -> Secret:
        """A reference to the environment variable ``var``, revealed from the environment
        of the process that reveals it (a run resumed elsewhere reads its own ``$var``).
        Stored as the reference, so it is the Secret to put in a run's input."""
        if not isinstance(var, str) or not var or "=" in var or "\0" in var:
            raise InvalidInput(
                f"Secret.env(var): var must be an environment variable's name, not {var!r}"
            )
        s = cls.__new__(cls)
        s._value, s.name, s.var = None, _label(name), var
        return s

    @classmethod
    def _stored(cls, name: str | None) -> Secret:
        """A literal Secret read back from the store: its value was never stored."""
        s = cls.__new__(cls)
        s._value, s.name, s.var = None, name, None
        return s

    @property
    def revealable(self) -> bool:
        """Whether :meth:`reveal` can give the value (a literal made here, or an env ref)."""
        return self._value is not None or self.var is not None

    def reveal(self) -> Any:
        """The value (``str`` or ``bytes``). Raises InvalidInput for a Secret.env whose
        variable is not set here, and InvalidState for a literal Secret read back from
        the store (only its marker was stored)."""
        if self._value is not None:
            return self._value
        if self.var is not None:
            value = os.environ.get(self.var)
            if value is None:
                raise InvalidInput(
                    f"{self!r}: the environment variable {self.var!r} is not set in this "
                    f"process (pid {os.getpid()}); set it where the run executes"
                )
            _remember(value)
            return value
        _unavailable(self)

    def marker(self) -> dict[str, Any]:
        """What is stored instead of the value (the ``v`` of the codec's tag)."""
        out: dict[str, Any] = {}
        if self.var is not None:
            out["env"] = self.var
        if self.name is not None:
            out["name"] = self.name
        return out

    def __repr__(self) -> str:
        label = f"name={self.name!r}" if self.name is not None else None
        if self.var is not None:
            return f"Secret.env({', '.join(x for x in (repr(self.var), label) if x)})"
        return f"Secret({label or repr(HIDDEN)})"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __eq__(self, other: object) -> bool:
        """Secrets are equal when their markers are (what the store can tell apart)."""
        if not isinstance(other, Secret):
            return NotImplemented
        return self.marker() == other.marker()

    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Secret:
        return self

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            f"{self!r} cannot be pickled (that would write its value in clear); pass "
            f"Secret.env('VAR') to another process, or reveal it there"
        )


def _label(name: str | None) -> str | None:
    if name is None:
        return None
    if not isinstance(name, str) or not name or len(name) > NAME_MAX or not name.isprintable():
        raise InvalidInput(
            f"Secret(..., name=...): the name labels the stored marker: a printable str of 1 "
            f"to {NAME_MAX} characters, not {name!r}"
        )
    return name


def _unavailable(s: Secret) -> NoReturn:
    raise InvalidState(
        f"{s!r} was read back from the store, which holds only its marker, never its "
        f"value: it cannot be revealed. Pass secrets that must outlive the process as "
        f"Secret.env('VAR') (stored as a reference), or give the value again."
    )


def from_marker(v: Any) -> Secret:
    """The Secret a stored marker stands for (the codec's decoder)."""
    if not isinstance(v, dict):
        raise ValueError(f"a secret marker holds a dict, not {type(v).__name__}")
    name, var = v.get("name"), v.get("env")
    if var is not None:
        return Secret.env(var, name=name)
    return Secret._stored(_label(name))


# -- values this process knows are secret, removed from free text before it is stored ----

_lock = threading.Lock()
_known: dict[str, str] = {}  # value -> its JSON-escaped form (as in stored text), in order
# (value, escaped), longest first: read without the lock, replaced whole on every change
_snapshot: tuple[tuple[str, str], ...] = ()
# every JSON string, in order (so that the scan never starts inside one), and whether it is
# a key (followed by a colon in the codec's compact text)
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"(:?)')


def _remember(value: str | bytes) -> None:
    global _snapshot
    if isinstance(value, bytes):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            return  # not text: it cannot appear in an error message as it is
    if len(value) < MIN_SCRUB:
        return
    with _lock:
        if value in _known:
            return
        _known[value] = json.dumps(value, ensure_ascii=False)[1:-1]
        if len(_known) > MAX_KNOWN:
            del _known[next(iter(_known))]
        # longest first: a secret that contains another is hidden whole
        _snapshot = tuple(sorted(_known.items(), key=lambda kv: len(kv[0]), reverse=True))


def known() -> bool:
    """Whether this process knows any secret value (see :func:`scrub`)."""
    return bool(_snapshot)


def scrub(text: str) -> str:
    """Plain ``text`` (an error message) with every known secret value replaced by
    ``***``."""
    for value, _ in _snapshot:
        if value in text:
            text = text.replace(value, HIDDEN)
    return text


def scrub_json(text: str) -> str:
    """JSON ``text`` (as the codec writes it) with every known secret value replaced by
    ``***`` inside the string values that hold it. Keys and the structure are left as
    they are, so the text stays the JSON it was; a string whose replacement would not be
    valid JSON (the value began inside an escape, ``\\n…``) is replaced whole."""
    hits = [escaped for _, escaped in _snapshot if escaped in text]
    if not hits:
        return text

    def sub(m: re.Match[str]) -> str:
        found = m.group(0)
        if m.group(1):  # a key: left as it is
            return found
        out = found
        for escaped in hits:
            if escaped in out:
                out = out.replace(escaped, HIDDEN)
        if out is found:
            return found
        try:
            json.loads(out)
        except ValueError:
            return f'"{HIDDEN}"'
        return out

    return _JSON_STRING.sub(sub, text)


# -- walks ------------------------------------------------------------------------------


def reveal_all(value: Any) -> Any:
    """``value`` with every Secret inside it (lists, tuples, dicts) replaced by its value:
    what a step's or a tool's function receives. The same object when there is none, so a
    call without secrets pays one walk and no copy. Raises as :meth:`Secret.reveal` does
    (a Secret read back from the store, an unset environment variable)."""
    t = type(value)
    if t is str or t is int or t is float or t is bool or value is None:
        return value
    if t is Secret:
        return value.reveal()
    if t is list or t is tuple:
        items = [reveal_all(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if t is list else tuple(items)
    if t is dict:
        out = {k: reveal_all(v) for k, v in value.items()}
        if all(out[k] is v for k, v in value.items()):
            return value
        return out
    return value


def literal_at(value: Any, path: str = "$") -> str | None:
    """The path of the first literal Secret holding its value inside ``value``, or None:
    not a Secret.env (stored as the reference), nor a Secret read back from the store
    (stored as it was read)."""
    if isinstance(value, Secret):
        return path if value._value is not None else None
    if isinstance(value, dict):
        for k, v in value.items():
            where = f"{path}.{k}" if isinstance(k, str) and k.isidentifier() else f"{path}[{k!r}]"
            found = literal_at(v, where)
            if found:
                return found
    elif isinstance(value, list | tuple | set | frozenset):
        for i, v in enumerate(value):
            found = literal_at(v, f"{path}[{i}]")
            if found:
                return found
    return None
