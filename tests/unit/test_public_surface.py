"""The public surface, pinned: every name in ``tether.__all__`` with its signature, and
every public method and property of its classes. A change here is a change for users:
if it is meant, write the new surface with
``python tests/unit/test_public_surface.py > tests/unit/public_surface.txt``
and say so in the change's notes."""

from __future__ import annotations

import functools
import inspect
import re
from pathlib import Path

import pytest

import tether

PINNED = Path(__file__).with_name("public_surface.txt")


def _signature(obj: object) -> str:
    try:
        text = str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "(...)"
    return re.sub(r" at 0x[0-9a-f]+", "", text)  # a default's repr names an address


def _members(name: str, cls: type) -> list[str]:
    out = []
    own: dict[str, object] = {}  # the class's and its tether mixins' (App: Tenancy, Settings)
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith("tether"):
            own.update(vars(klass))
    for attr, member in sorted(own.items()):
        if attr.startswith("_"):
            continue
        if isinstance(member, (property, functools.cached_property)):
            out.append(f"  {name}.{attr}: property")
            continue
        fn = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
        if callable(fn):
            out.append(f"  {name}.{attr}{_signature(fn)}")
    return out


def surface() -> list[str]:
    out = [f"__all__ = {tether.__all__!r}"]
    for name in tether.__all__:
        obj = getattr(tether, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            out.append(f"class {name}({', '.join(b.__name__ for b in obj.__bases__)})")
        elif inspect.isclass(obj):
            out.append(f"class {name}{_signature(obj)}")
            out += _members(name, obj)
        elif callable(obj):
            out.append(f"def {name}{_signature(obj)}")
        else:
            out.append(f"{name}: {type(obj).__name__}")
    return out


@pytest.mark.unit
def test_the_public_surface_is_the_pinned_one() -> None:
    pinned = PINNED.read_text().splitlines()
    now = surface()
    gone = [line for line in pinned if line not in now]
    new = [line for line in now if line not in pinned]
    assert not gone and not new, (
        "the public surface changed (see this module's docstring):\n"
        + "".join(f"- {line}\n" for line in gone)
        + "".join(f"+ {line}\n" for line in new)
    )


if __name__ == "__main__":
    print("\n".join(surface()))
