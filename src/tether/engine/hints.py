"""Declared shapes: whether a value fits a type hint, said as problems a person can act on.

A tool with a contract (:mod:`tether.engine.contracts`) has its arguments checked against
its parameters' annotations before the call, and its result against its return
annotation after. This is a small checker for the types tool signatures use: ``int``,
``float`` (an int fits), ``str``, ``bool``, ``bytes``, ``None``, ``Any``, unions and
``Optional``, ``Literal``, ``list``/``tuple``/``set``/``Sequence`` of a type, ``dict``/
``Mapping`` of key and value types, ``Annotated``, any class (``isinstance``), and a
pydantic model when pydantic is loaded (its ``model_validate``). A hint it does not know
(a ``TypeVar``, a ``Protocol``) is not checked. tether depends on no validation library.
"""

from __future__ import annotations

import collections.abc as abc
import sys
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

MAX_PROBLEMS = 5  # per value: enough to act on, never the whole of a long list
_SEQUENCES = (list, tuple, set, frozenset, abc.Sequence, abc.Collection, abc.Iterable, abc.Set)
_MAPPINGS = (dict, abc.Mapping, abc.MutableMapping)


def problems(value: Any, hint: Any, where: str) -> list[str]:
    """What is wrong with ``value`` as a ``hint`` (empty: it fits), each naming ``where``."""
    return _check(value, hint, where)[:MAX_PROBLEMS]


def _check(value: Any, hint: Any, where: str) -> list[str]:
    if hint is Any or hint is object:
        return []
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        return _check(value, args[0], where)
    if hint is None or hint is type(None):
        return [] if value is None else [_wrong(where, "None", value)]
    if origin is Union or origin is types.UnionType:
        if any(not _check(value, a, where) for a in args):
            return []
        return [_wrong(where, " | ".join(_name(a) for a in args), value)]
    if origin is Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return []
        return [f"{where}: expected one of {', '.join(repr(a) for a in args)}, got {_got(value)}"]
    if origin is not None:
        return _generic(value, origin, args, hint, where)
    if isinstance(hint, type):
        return _class(value, hint, where)
    return []  # a hint this checker does not know: not checked


def _class(value: Any, hint: type, where: str) -> list[str]:
    if _is_model(hint):
        return _model(value, hint, where)
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, hint)
    return [] if ok else [_wrong(where, _name(hint), value)]


def _generic(value: Any, origin: Any, args: tuple[Any, ...], hint: Any, where: str) -> list[str]:
    if origin in _MAPPINGS:
        if not isinstance(value, dict):
            return [_wrong(where, _name(hint), value)]
        if len(args) != 2:
            return []
        out: list[str] = []
        for k, v in value.items():
            out += _check(k, args[0], f"{where} key {k!r}") + _check(v, args[1], f"{where}[{k!r}]")
            if len(out) >= MAX_PROBLEMS:
                break
        return out
    if origin in _SEQUENCES:
        if not isinstance(value, list | tuple | set | frozenset):
            return [_wrong(where, _name(hint), value)]
        return _items(list(value), origin, args, where)
    if isinstance(origin, type):  # type[X], a user generic: the class alone
        return [] if isinstance(value, origin) else [_wrong(where, _name(hint), value)]
    return []


def _items(items: list[Any], origin: Any, args: tuple[Any, ...], where: str) -> list[str]:
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(items) != len(args):
            return [f"{where}: expected {len(args)} items, got {len(items)}"]
        hints = list(args)
    else:
        hints = [args[0] if args else Any] * len(items)
    out: list[str] = []
    for i, (item, h) in enumerate(zip(items, hints, strict=True)):
        out += _check(item, h, f"{where}[{i}]")
        if len(out) >= MAX_PROBLEMS:
            break
    return out


def _is_model(hint: type) -> bool:
    pydantic = sys.modules.get("pydantic")  # never imported here: loaded by whoever uses it
    return pydantic is not None and issubclass(hint, pydantic.BaseModel)


def _model(value: Any, model: Any, where: str) -> list[str]:
    pydantic = sys.modules["pydantic"]
    try:
        model.model_validate(value)
    except pydantic.ValidationError as e:
        return [
            f"{where}.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
            if err.get("loc")
            else f"{where}: {err['msg']}"
            for err in e.errors()
        ]
    return []


def _wrong(where: str, expected: str, value: Any) -> str:
    return f"{where}: expected {expected}, got {_got(value)}"


def _got(value: Any) -> str:
    text = repr(value)
    text = text if len(text) <= 40 else text[:39] + "…"
    return f"{type(value).__name__} {text}"


def _name(hint: Any) -> str:
    if hint is None or hint is type(None):
        return "None"
    if isinstance(hint, type) and get_origin(hint) is None:
        return hint.__name__
    return str(hint).replace("typing.", "")
