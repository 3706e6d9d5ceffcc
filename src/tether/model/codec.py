"""The value codec: what a step may return, and how it is stored.

Values are stored as JSON text. Plain JSON values (``None``, ``bool``, ``int``,
``float``, ``str``, ``list``, ``dict`` with ``str`` keys) are stored as they are;
the types JSON would silently change are stored *tagged* so that a replayed step
returns exactly what the first execution returned::

    tuple, set, frozenset, bytes, dict with non-str keys, NaN/±inf,
    datetime, date, time, Decimal, UUID          -> {"$t": <tag>, "v": ...}
    tether.Secret                                -> {"$t": "secret", "v": {"name": …}}

A :class:`~tether.model.secrets.Secret` is stored as its marker, never its value; and
every text :func:`encode` writes or :func:`digest` hashes is redacted first
(:mod:`tether.model.redact`: credentials matched by the process's rules, and the
values of the Secrets this process made).

Subclasses of ``str``/``int``/``float`` (``StrEnum``, ``IntEnum``) are stored as
their base value. Anything else (a socket, a client object, a dataclass) is
refused with :class:`~tether.errors.EncodeError` naming the type and the path
inside the value (``$.results[3].conn``): return plain data from steps.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import hashlib
import json
import json.encoder
import math
import uuid
from collections.abc import Callable
from typing import Any

import orjson

from tether.errors import CorruptRecord, EncodeError
from tether.model import redact, secrets
from tether.model.secrets import Secret

TAG = "$t"


def _encoder(*, sort_keys: bool) -> Callable[[Any], str]:
    """JSON text of a value that the walk (:func:`_enc`) has already checked.

    The stdlib's ``JSONEncoder.encode`` builds a new C encoder on every call and
    tracks containers to refuse cycles; a step encodes twice (its arguments'
    digest and its event), so the C encoder is built once here. Cycle tracking is
    left out because the walk recurses into every container first (a cycle is
    refused there).
    """
    options = {"ensure_ascii": False, "separators": (",", ":"), "allow_nan": False}
    fallback = json.JSONEncoder(**options, sort_keys=sort_keys).encode  # type: ignore[arg-type]
    make = getattr(json.encoder, "c_make_encoder", None)
    quote = getattr(json.encoder, "c_encode_basestring", None)
    if make is None or quote is None:  # an interpreter without the C accelerator
        return fallback
    chunks = make(None, None, quote, None, ":", ",", sort_keys, False, False)
    join = "".join
    return lambda value: join(chunks(value, 0))


_canonical = _encoder(sort_keys=True)  # digests: the stdlib's text, stable across versions
_stdlib_dumps = _encoder(sort_keys=False)


def _dumps(value: Any) -> str:
    """JSON text of a walked value, for storage (never hashed for replay: digests use
    :data:`_canonical`). orjson writes it ~8x faster than the stdlib, which is a step's
    largest client cost on PostgreSQL; what orjson refuses (an int past 64 bits, a lone
    surrogate, nesting past 255) goes to the stdlib, which stores it as before, except
    text that is not Unicode (:class:`_NotUnicode`)."""
    try:
        return orjson.dumps(value).decode()  # its output is always valid UTF-8
    except orjson.JSONEncodeError:
        text = _stdlib_dumps(value)
    if not text.isascii():  # O(1): CPython knows whether a str is ASCII
        try:
            text.encode()
        except UnicodeEncodeError:
            raise _NotUnicode from None
    return text


class _NotUnicode(Exception):
    """Internal: the text holds a lone surrogate (``json.loads('"\\ud800"')``, a truncated
    emoji escape from a model), which no database stores as text: UTF-8 has no bytes for
    it (sqlite3 and PostgreSQL refuse it; it used to fail inside a write transaction)."""


def _surrogate_at(value: Any, path: str = "$") -> tuple[str, str] | None:
    """``(path, description)`` of the first text in ``value`` (a key or a value) that holds
    a lone surrogate, or None."""
    if isinstance(value, str):
        for i, ch in enumerate(value):
            if "\ud800" <= ch <= "\udfff":
                return path, f"str holding a lone surrogate ({ch!r} at index {i}: not Unicode)"
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            where = f"{path}.{k}" if isinstance(k, str) and k.isidentifier() else f"{path}[{k!r}]"
            found = _surrogate_at(k, f"{path} (the key {k!r})") or _surrogate_at(v, where)
            if found:
                return found
        return None
    if isinstance(value, list | tuple | set | frozenset):
        for i, v in enumerate(value):
            found = _surrogate_at(v, f"{path}[{i}]")
            if found:
                return found
    return None


def _not_unicode(value: Any, what: str) -> EncodeError:
    path, description = _surrogate_at(value) or ("$", "text that is not Unicode")
    return EncodeError(
        f"cannot store {what}: the {description} at {path} cannot be stored as text (it has "
        f"no UTF-8 bytes; often a truncated emoji escape such as '\\ud83d' from a model). "
        f"Replace it first, e.g. text.encode('utf-8', 'replace').decode().",
        path=path,
        type_name=description,
    )


class _Unencodable(Exception):
    """Internal: carries the offending type and the path, built up while unwinding."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name
        self.parts: list[str] = []


def _tag(tag: str, value: Any) -> dict[str, Any]:
    return {TAG: tag, "v": value}


def _enc_float(x: float) -> Any:
    if math.isfinite(x):
        return x
    return _tag("float", "nan" if x != x else ("inf" if x > 0 else "-inf"))


def _enc_dict(x: dict[Any, Any]) -> Any:
    out: dict[str, Any] = {}
    k: Any = None
    try:
        for k, v in x.items():
            if type(k) is not str or k == TAG:
                break
            t = type(v)  # leaves inline: most values are str/int/bool/None
            if t is str or t is int or t is bool or v is None:
                out[k] = v
            else:
                out[k] = _enc(v)
        else:
            return out
    except _Unencodable as e:
        e.parts.append(f".{k}" if k.isidentifier() else f"[{k!r}]")
        raise
    return _enc_pairs(x)


def _enc_pairs(x: dict[Any, Any]) -> Any:
    pairs = []
    for k, v in x.items():
        try:
            pairs.append([_enc(k), _enc(v)])
        except _Unencodable as e:
            e.parts.append(f"[{k!r}]")
            raise
    return _tag("dict", pairs)


def _enc_seq(x: Any) -> list[Any]:
    out: list[Any] = []
    try:
        for v in x:
            t = type(v)
            if t is str or t is int or t is bool or v is None:
                out.append(v)
            else:
                out.append(_enc(v))
    except _Unencodable as e:
        e.parts.append(f"[{len(out)}]")  # the failing item is the next one
        raise
    return out


def _enc_set(tag: str, x: Any) -> Any:
    items = _enc_seq(x)
    items.sort(key=_canonical)  # sets have no order: store a canonical one
    return _tag(tag, items)


def _enc_other(x: Any) -> Any:
    special = _SPECIAL.get(type(x))
    if special is not None:
        return special(x)
    if isinstance(x, dict):
        return _enc_dict(dict(x))
    if isinstance(x, list):
        return _enc_seq(x)
    if isinstance(x, bool):
        return bool(x)
    if isinstance(x, str):
        return str(x)
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return _enc_float(float(x))
    raise _Unencodable(f"{type(x).__module__}.{type(x).__qualname__}")


_SPECIAL: dict[type, Callable[[Any], Any]] = {
    tuple: lambda x: _tag("tuple", _enc_seq(x)),
    set: lambda x: _enc_set("set", x),
    frozenset: lambda x: _enc_set("frozenset", x),
    bytes: lambda x: _tag("bytes", base64.b64encode(x).decode("ascii")),
    bytearray: lambda x: _tag("bytes", base64.b64encode(bytes(x)).decode("ascii")),
    dt.datetime: lambda x: _tag("datetime", x.isoformat()),
    dt.date: lambda x: _tag("date", x.isoformat()),
    dt.time: lambda x: _tag("time", x.isoformat()),
    decimal.Decimal: lambda x: _tag("decimal", str(x)),
    uuid.UUID: lambda x: _tag("uuid", str(x)),
    Secret: lambda x: _tag(secrets.TAG, x.marker()),  # never the value: see model/secrets
}


def _enc(x: Any) -> Any:
    t = type(x)
    if t is str or t is int or t is bool or x is None:
        return x
    if t is dict:
        return _enc_dict(x)
    if t is list:
        return _enc_seq(x)
    if t is float:
        return _enc_float(x)
    return _enc_other(x)


def dumps(value: Any) -> str:
    """JSON text of data that is already plain JSON (tagged where needed, as
    :func:`to_json_value` returns it or ``json.loads`` reads it), written exactly as
    :func:`encode` writes it: an import stores the same bytes its export read.
    EncodeError for text that is not Unicode (a lone surrogate)."""
    try:
        return _dumps(value)
    except _NotUnicode:
        raise _not_unicode(value, "value") from None


def _plain(x: Any) -> bool:
    """Whether ``x`` is JSON as it is (nothing to tag or refuse), so it can be encoded
    without the walk's copy: exact dicts with str keys (none of them the tag), lists,
    str, int, bool, None and finite floats. Checking costs ~60% of walking."""
    t = type(x)
    if t is dict:
        for k in x:
            if type(k) is not str or k == TAG:
                return False
        return _plain_items(x.values())
    if t is list:
        return _plain_items(x)
    if t is str or t is int or t is bool or x is None:
        return True
    return t is float and _isfinite(x)


def _plain_items(items: Any) -> bool:
    for v in items:
        t = type(v)
        if t is str or t is int or t is bool or v is None:  # leaves inline: most are these
            continue
        if not (_isfinite(v) if t is float else _plain(v)):
            return False
    return True


_isfinite = math.isfinite


def to_json_value(value: Any, *, what: str = "value") -> Any:
    """Return ``value`` as plain JSON data (tagged where needed), or raise EncodeError."""
    try:
        return _enc(value)
    except RecursionError:
        raise _shape_error(value, what) from None
    except _Unencodable as e:
        path = "$" + "".join(reversed(e.parts))
        raise EncodeError(
            f"cannot store {what}: {e.type_name} at {path} is not storable data. "
            f"{plain_hint(e.type_name, 'from steps')}",
            path=path,
            type_name=e.type_name,
        ) from None


def plain_hint(type_name: str, where: str = "") -> str:
    """What to do about a value of ``type_name`` that cannot be stored (a sentence)."""
    if type_name == "builtins.coroutine":  # an async function called and not awaited
        return (
            "It is an async function's call, not awaited: call async functions from an "
            "async def agent (await run.step(...)), or pass a function that returns the value."
        )
    return (
        f"Return plain data (dict, list, str, int, float, bool, None, tuple, set, bytes, "
        f"datetime, Decimal, UUID){' ' + where if where else ''}, or convert that part first."
    )


CYCLE = "cycle"  # EncodeError.type_name of a value that contains itself
TOO_DEEP = "nesting"  # … of a value nested deeper than the recursion limit


def _shape_error(value: Any, what: str) -> EncodeError:
    """The walk ran out of stack: name the cycle (where it closes, and onto what), or
    the depth. Found without recursion, so any depth can be described."""
    cycle, depth = _find_cycle(value)
    if cycle is not None:
        inner, outer = cycle
        return EncodeError(
            f"cannot store {what}: it contains itself: {_short(inner)} is {_short(outer)} "
            f"(a cycle). Store a tree of plain data.",
            path=inner,
            type_name=CYCLE,
        )
    return EncodeError(
        f"cannot store {what}: it is nested {depth} levels deep, more than can be "
        f"encoded. Store a flatter value.",
        path="$",
        type_name=TOO_DEEP,
    )


def _short(path: str) -> str:
    return path if len(path) <= 120 else f"{path[:60]}…{path[-50:]}"


def _children(x: Any) -> Any:
    """``(path step, child)`` of a container, None for a leaf."""
    if isinstance(x, dict):
        return (
            (f".{k}" if isinstance(k, str) and k.isidentifier() else f"[{k!r}]", v)
            for k, v in list(x.items())
        )
    if isinstance(x, list | tuple | set | frozenset):
        return ((f"[{i}]", v) for i, v in enumerate(list(x)))
    return None


def _find_cycle(value: Any) -> tuple[tuple[str, str] | None, int]:
    """A depth-first walk with its own stack: ``((path into the repeat, path of the
    container it repeats), max depth)``; the first is None when there is no cycle."""
    kids = _children(value)
    if kids is None:
        return None, 0
    depth_of = {id(value): 0}  # the containers on the current path, by depth
    stack, deepest = [(value, kids)], 0
    steps: list[str] = []
    while stack:
        obj, it = stack[-1]
        for step, child in it:
            grandkids = _children(child)
            if grandkids is None:
                continue
            if id(child) in depth_of:
                here = "$" + "".join([*steps, step])
                return (here, "$" + "".join(steps[: depth_of[id(child)]])), deepest
            steps.append(step)
            depth_of[id(child)] = len(steps)
            stack.append((child, grandkids))
            deepest = max(deepest, len(steps))
            break
        else:
            stack.pop()
            del depth_of[id(obj)]
            if steps:
                steps.pop()
    return None, deepest


def encode(value: Any, *, what: str = "value") -> str:
    """Encode ``value`` to JSON text. Raises EncodeError naming the offending type and path."""
    try:
        plain = _plain(value)
    except RecursionError:  # a cycle: the walk says so
        plain = False
    try:
        return redact.apply(_dumps(value if plain else to_json_value(value, what=what)))
    except _NotUnicode:
        raise _not_unicode(value, what) from None


def _decode_tagged(tag: str, v: Any) -> Any:
    if tag == "tuple":
        return tuple(v)
    if tag == "set":
        return set(v)
    if tag == "frozenset":
        return frozenset(v)
    if tag == "dict":
        return {_hashable(k): val for k, val in v}
    if tag == "bytes":
        return base64.b64decode(v)
    if tag == "float":
        return float(v)
    decoder = _DECODERS.get(tag)
    if decoder is None:
        raise ValueError(f"unknown tag {tag!r} in stored value; written by a newer tether?")
    return decoder(v)


def _hashable(k: Any) -> Any:
    return tuple(k) if type(k) is list else k


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "datetime": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
    "time": dt.time.fromisoformat,
    "decimal": decimal.Decimal,
    "uuid": uuid.UUID,
    secrets.TAG: secrets.from_marker,
}


def _hook(d: dict[str, Any]) -> Any:
    if TAG in d and len(d) == 2 and "v" in d:
        return _decode_tagged(d[TAG], d["v"])
    return d


def decode(text: str | bytes, *, where: str = "a stored value") -> Any:
    """Decode JSON text written by :func:`encode`. CorruptRecord (naming ``where``) for
    text that does not parse or holds a tag this tether does not know: the value was
    written by another program, a newer tether, or damaged."""
    try:
        return json.loads(text, object_hook=_hook)
    except (ValueError, TypeError, LookupError) as e:  # JSON, a tag's value (base64, a date)
        raise CorruptRecord(
            f"{where} cannot be read ({type(e).__name__}: {e}): it is not what tether wrote "
            f"(another program, a newer tether, or damage changed it). Restore the database "
            f"from a backup, or fork the run before it; tether did not change it."
        ) from None


def is_plain(value: Any) -> bool:
    """Whether ``value`` is JSON as it is: dicts with str keys, lists, str, int, bool,
    None and finite floats only (so no tuple, no set, no Secret inside). False for a
    value that contains itself."""
    try:
        return _plain(value)
    except RecursionError:
        return False


def digest(value: Any, *, redacted: bool = True, plain: bool | None = None) -> str:
    """A stable SHA-256 of ``value``'s canonical encoding (sorted keys), redacted.

    Values that cannot be encoded (a client object passed as an argument) are
    digested by their type name, so a digest never fails. ``redacted=False``: the
    digest a tether without redaction computed (a run recorded by one, resumed here).
    ``plain``: what :func:`is_plain` said of ``value``, when the caller asked already.
    """
    try:
        text = _canonical(value if (_plain(value) if plain is None else plain) else _enc(value))
    except _Unencodable:
        text = _canonical(_enc(_digestable(value)))
    except RecursionError:  # a cycle, or nesting past the stack: no digest describes it
        raise _shape_error(value, "the arguments") from None
    # the redacted text: a credential is never hashed (a short one would be found again from
    # its hash), and a rotated one leaves the digest, and so the idempotency key, as it was
    if redacted:
        text = redact.by_rules(text)
    # surrogatepass: the same bytes for any Unicode text, and a digest for text that is
    # not (an argument holding a lone surrogate), which never fails
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _digestable(value: Any) -> Any:
    """Replace unencodable leaves by ``<type>`` markers (used only for digests)."""
    try:
        return _enc(value)
    except _Unencodable:
        pass
    if isinstance(value, dict):
        return {str(k): _digestable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_digestable(v) for v in value]
    return f"<{type(value).__module__}.{type(value).__qualname__}>"
