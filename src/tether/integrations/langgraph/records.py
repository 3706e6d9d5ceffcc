"""How a LangGraph thread's values and checkpoints are written into its events (pure code).

Serialized values are *blobs*: an event carries, under ``"b"``, the blobs that no earlier
event of the thread carried, each as text (a JSON event holds no bytes): ``"y"`` and the
base85 (``"."`` and ``","`` for ``"-"`` and ``"_"``: :func:`_b85`) of the bytes
compressed by zlib with :data:`ZDICT` as its preset dictionary (what every serialized
message repeats: a message costs its content, not its class's field names); ``"z"`` for
zlib without a dictionary (a value that is not a message); ``"r"`` for the bytes as they
are when compressing does not make them shorter; ``[type, text]`` when the serializer's
type is not ``msgpack``. A blob is referred to by its *ordinal*, its position among the
thread's blobs in log order (a number of a few digits, where a digest took 34
characters); its SHA-256 is computed when a writer needs to know whether the thread
holds a value already, never stored.

A checkpoint (without its values) is kept in a *stored form*: its ``ts`` as microseconds
since the epoch (an int) when that gives the same text back, and its
``updated_channels`` as ``1`` when they are the channels it writes a value to (sorted),
which they are in LangGraph's loop. A checkpoint is stored as the delta of its parent's
stored form (:func:`ck_delta`).

Threads written before this format (``"blobs"``: digest -> ``[type, base85(, "z")]``,
references by digest) are read as they are: :class:`~.thread.Thread` turns them into
ordinals as it folds them.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

Typed = tuple[str, bytes]
DEFAULT_TYPE = "msgpack"  # LangGraph's serializer's type for almost every value
Entry = Any  # a blob as an event holds it: str, or [type, str]
# zlib's preset dictionary for blobs tagged "y" (LangGraph's msgpack of empty langchain
# messages: what every serialized message repeats). Fixed forever: stored blobs depend on it;
# another dictionary would be a new tag.
ZDICT = (
    b"\xc7\x88\x05\x94\xbelangchain_core.messages.system\xadSystemMessage\x86\xa7content"
    b"\xa0\xb1additional_kwargs\x80\xb1response_metadata\x80\xa4type\xa6system\xa4name"
    b"\xc0\xa2id\xc0\xb3model_validate_json"
    b"\xc7\xb0\x05\x94\xbclangchain_core.messages.tool\xabToolMessage\x89\xa7content\xa0"
    b"\xb1additional_kwargs\x80\xb1response_metadata\x80\xa4type\xa4tool\xa4name\xa1t"
    b"\xa2id\xc0\xactool_call_id\xa6call-1\xa8artifact\xc0\xa6status\xa7success\xb3model"
    b"_validate_json"
    b"\xc7\xdf\x05\x94\xbalangchain_core.messages.ai\xa9AIMessage\x89\xa7content\xa0\xb1"
    b"additional_kwargs\x80\xb1response_metadata\x80\xa4type\xa2ai\xa4name\xc0\xa2id\xc0"
    b"\xaatool_calls\x91\x84\xa4name\xa6refund\xa4args\x81\xa5order\x01\xa2id\xa6call-1"
    b"\xa4type\xa9tool_call\xb2invalid_tool_calls\x90\xaeusage_metadata\xc0\xb3model_val"
    b"idate_json"
    b"\xc7\xac\x05\x94\xbalangchain_core.messages.ai\xa9AIMessage\x89\xa7content\xa0\xb1"
    b"additional_kwargs\x80\xb1response_metadata\x80\xa4type\xa2ai\xa4name\xc0\xa2id\xc0"
    b"\xaatool_calls\x90\xb2invalid_tool_calls\x90\xaeusage_metadata\xc0\xb3model_valida"
    b"te_json"
    b"\xc7\x85\x05\x94\xbdlangchain_core.messages.human\xacHumanMessage\x86\xa7content"
    b"\xa0\xb1additional_kwargs\x80\xb1response_metadata\x80\xa4type\xa5human\xa4name"
    b"\xc0\xa2id\xc0\xb3model_validate_json"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


def digest_of(typed: Typed) -> str:
    """The content address of a serialized value (its type is part of the content): the
    first 128 bits of its SHA-256, in hex."""
    h = hashlib.sha256(typed[0].encode())
    h.update(b"\0")
    h.update(typed[1])
    return h.hexdigest()[:32]


def blob_entry(typed: Typed) -> Entry:
    """A serialized value as an event keeps it (see the module docstring); base85's
    alphabet has no quote or backslash: JSON keeps it as it is."""
    data = typed[1]
    if b"langchain_core" in data:  # a message (or holds one): its fields are in ZDICT
        squeeze = zlib.compressobj(6, zdict=ZDICT)
        packed, tag = squeeze.compress(data) + squeeze.flush(), "y"
    else:  # a value of the graph's own: zlib alone (no dictionary to load)
        packed, tag = zlib.compress(data, 6), "z"
    text = tag + _b85(packed) if len(packed) < len(data) else "r" + _b85(data)
    return text if typed[0] == DEFAULT_TYPE else [typed[0], text]


def entry_typed(entry: Entry) -> Typed:
    """The inverse of :func:`blob_entry`."""
    kind, text = (DEFAULT_TYPE, entry) if isinstance(entry, str) else entry
    data = base64.b85decode(text[1:].translate(_FROM_SAFE))
    if text[0] == "y":
        unsqueeze = zlib.decompressobj(zdict=ZDICT)
        return kind, unsqueeze.decompress(data) + unsqueeze.flush()
    return kind, zlib.decompress(data) if text[0] == "z" else data


# base85 with "-" and "_" as "." and ",": no credential pattern of tether's redaction rules
# (``sk-…``, ``xoxb-…``, ``ghp_…``) can appear in a blob's text and be rewritten in it
# (the earlier format's plain base85 has neither "." nor ",": it decodes the same)
_TO_SAFE = str.maketrans("-_", ".,")
_FROM_SAFE = str.maketrans(".,", "-_")


def _b85(data: bytes) -> str:
    return base64.b85encode(data).decode("ascii").translate(_TO_SAFE)


def from_old_entry(value: list[str]) -> Entry:
    """An entry of the earlier format (``[type, base85]`` or ``[type, base85, "z"]``) as
    this one keeps it."""
    text = ("z" if value[2:] == ["z"] else "r") + value[1]
    return text if value[0] == DEFAULT_TYPE else [value[0], text]


IMMUTABLE = frozenset({str, bytes, int, float, bool, type(None)})  # safe to know by id()


class NewBlobs:
    """The blobs an event about to be appended carries: their ordinals follow the
    thread's ``start`` blobs."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.ordinals: dict[str, int] = {}  # digest -> ordinal
        self.entries: list[Entry] = []
        # digest of a message -> [ordinal, id]: the blob of the message with another id
        self.derived: dict[str, list[Any]] = {}
        # id() of an immutable value -> (the value, its ordinal): see ThreadCodec._blob
        self.recent: dict[int, tuple[Any, int]] = {}

    def get(self, digest: str) -> int | None:
        return self.ordinals.get(digest)

    def add(self, digest: str, typed: Typed) -> int:
        ordinal = self.ordinals[digest] = self.start + len(self.entries)
        self.entries.append(blob_entry(typed))
        return ordinal


# -- checkpoints ------------------------------------------------------------------------


def implied_updates(values: list[list[Any]]) -> list[str]:
    """The ``updated_channels`` a checkpoint implies: the channels it writes a value to
    (``values``: ``[channel, version, ref]``, ref None for a channel written empty)."""
    return sorted(ch for ch, _, ref in values if ref is not None)


def to_stored(ck: dict[str, Any], values: list[list[Any]]) -> dict[str, Any]:
    """A checkpoint's stored form (see the module docstring)."""
    out = dict(ck)
    ts = out.get("ts")
    if isinstance(ts, str):
        try:
            micros = (datetime.fromisoformat(ts) - _EPOCH) // _MICRO
        except (ValueError, TypeError):  # not an ISO time, or without a zone
            micros = None
        if micros is not None and _iso(micros) == ts:
            out["ts"] = micros
    if out.get("updated_channels") == implied_updates(values):
        out["updated_channels"] = 1
    return out


def from_stored(ck: dict[str, Any], values: list[list[Any]]) -> dict[str, Any]:
    """The inverse of :func:`to_stored` (a new dict)."""
    out = dict(ck)
    if type(out.get("ts")) is int:
        out["ts"] = _iso(out["ts"])
    if out.get("updated_channels") == 1:
        out["updated_channels"] = implied_updates(values)
    return out


def _iso(micros: int) -> str:
    return (_EPOCH + timedelta(microseconds=micros)).isoformat()


NESTED = ("channel_versions", "versions_seen")  # a checkpoint's dicts kept entry by entry


def ck_delta(base: dict[str, Any], ck: dict[str, Any]) -> dict[str, Any]:
    """What ``ck`` (a checkpoint without values, as plain JSON) changes of ``base`` (its
    parent's): the top-level items that differ (``"top"``), the keys gone (``"-"``), and
    for the version dicts the entries that differ (``"+"``) and the keys gone (``"-"``);
    empty parts are left out. :func:`ck_apply` inverts it."""
    delta: dict[str, Any] = {}
    top = {k: v for k, v in ck.items() if k not in NESTED and (k not in base or base[k] != v)}
    gone = [k for k in base if k not in ck]
    if top:
        delta["top"] = top
    if gone:
        delta["-"] = gone
    for key in NESTED:
        new, old = ck.get(key), base.get(key)
        if not (isinstance(new, dict) and isinstance(old, dict)):
            if key in ck and (key not in base or new != old):
                delta.setdefault("top", {})[key] = new
            continue
        part: dict[str, Any] = {}
        added = {k: v for k, v in new.items() if k not in old or old[k] != v}
        if key == "versions_seen":  # a version seen that is the base's: ``[]``
            added = {k: _seen(v, base.get("channel_versions")) for k, v in added.items()}
        removed = [k for k in old if k not in new]
        if added:
            part["+"] = added
        if removed:
            part["-"] = removed
        if part:
            delta[key] = part
    return delta


def ck_apply(base: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint that ``delta`` (from :func:`ck_delta`) makes of ``base``."""
    gone = set(delta.get("-", ()))
    ck = {k: v for k, v in base.items() if k not in gone}
    for key in NESTED:
        part = delta.get(key)
        if part is not None:
            removed = set(part.get("-", ()))
            merged = {k: v for k, v in ck[key].items() if k not in removed}
            added = part.get("+", {})
            if key == "versions_seen":
                added = {k: _unseen(v, base.get("channel_versions")) for k, v in added.items()}
            merged.update(added)
            ck[key] = merged
    ck.update(delta.get("top", {}))
    return ck


def _seen(seen: Any, versions: Any) -> Any:
    """A node's versions seen, each that is the base's version of its channel as ``[]``
    (no version is a list)."""
    if not (isinstance(seen, dict) and isinstance(versions, dict)):
        return seen
    return {ch: [] if ch in versions and versions[ch] == v else v for ch, v in seen.items()}


def _unseen(seen: Any, versions: Any) -> Any:
    """The inverse of :func:`_seen`."""
    if not (isinstance(seen, dict) and isinstance(versions, dict)):
        return seen
    return {ch: versions[ch] if v == [] else v for ch, v in seen.items()}
