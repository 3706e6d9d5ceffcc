"""What callers may pass in: one check in front of both stores.

Everything a user (the API, the CLI, an import file) hands to tether is checked
here before any store sees it, so that SQLite and PostgreSQL refuse the same
values with the same message: a value PostgreSQL cannot hold (a NUL character,
an integer past 64 bits, a key past its index's row size) is refused on SQLite
too, and a value SQLite would take silently (an empty queue name, ``nan``
seconds) is refused on PostgreSQL too. Each error is a :class:`tether.InvalidInput`
(a ValueError and a TypeError) that names the parameter and says what is expected.

- A **name** (agent, tool, queue, step, signal, approval, session, dedup and
  concurrency keys, who decided): a non-empty ``str`` of at most
  :data:`NAME_MAX` characters, without control characters (NUL, newlines, tabs:
  they break logs, tables and PostgreSQL) or unpaired surrogates.
- A **run id** given by the caller (``start(run_id=)``, an imported run): a name
  of at most :data:`RUN_ID_MAX` characters of ``A-Z a-z 0-9 _ . : @ + = ~ -``,
  not starting with ``.`` or ``-``: an id is also a file name and a CLI argument.
  A run id to *look up* only needs to be a string a store can hold
  (:func:`lookup_id`): older runs keep working.
- An **integer** stored or compared in the database: an ``int`` (never a
  ``bool``) within the 64-bit range and the parameter's own bounds.
- **Seconds**: a finite number (durations themselves: :mod:`tether.model.durations`).
- **Text** (a reason, a message): a ``str`` of at most :data:`TEXT_MAX`
  characters without NUL.
"""

from __future__ import annotations

import math
import re
import reprlib
import unicodedata
from typing import Any

from tether.errors import InvalidInput

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
NAME_MAX = 256
RUN_ID_MAX = 128
TEXT_MAX = 10_000
_RUN_ID = re.compile(r"^[A-Za-z0-9_@+=~:][A-Za-z0-9_.:@+=~-]*$")


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlevel = 3


def show(value: Any) -> str:
    """``value`` for a message: a short repr (a 1 MB name is not echoed whole, and a
    cyclic or deeply nested value has one)."""
    if isinstance(value, str) and len(value) > 60:
        return f"{value[:40]!r}… ({len(value)} characters)"
    return _REPR.repr(value)


_show = show


def name(value: Any, what: str) -> str:
    """``value`` if it is a valid name (see the module docstring), else a clear error."""
    if not isinstance(value, str):
        raise InvalidInput(
            f"{what} must be a name (a str), not {type(value).__name__} {_show(value)}"
        )
    if not value:
        raise InvalidInput(f"{what} must be a non-empty str, not ''")
    if len(value) > NAME_MAX:
        raise InvalidInput(f"{what} is {len(value)} characters long; at most {NAME_MAX}")
    bad = _bad_character(value)
    if bad is not None:
        raise InvalidInput(f"{what} {_show(value)} contains {bad}; names are printable text")
    return value


def optional_name(value: Any, what: str) -> str | None:
    """None, or a valid name."""
    return None if value is None else name(value, what)


def _bad_character(text: str) -> str | None:
    for i, ch in enumerate(text):
        category = unicodedata.category(ch)
        if category == "Cc":
            return f"the control character {ch!r} at index {i}"
        if category == "Cs":
            return f"an unpaired surrogate {ch!r} at index {i} (not valid Unicode)"
    return None


def run_id(value: Any, what: str = "run_id") -> str:
    """A caller-chosen run id (see the module docstring)."""
    name(value, what)
    if len(value) > RUN_ID_MAX or not _RUN_ID.match(value):
        raise InvalidInput(
            f"{what} {_show(value)} is not a run id: at most {RUN_ID_MAX} characters of "
            f"letters, digits and _ . : @ + = ~ -, not starting with . or -"
        )
    return str(value)


def lookup_id(value: Any, what: str = "run id") -> str:
    """A run id to look up: any string a store can hold (no NUL, not empty, not huge)."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a str, not {type(value).__name__} {_show(value)}")
    if not value or len(value) > 4 * NAME_MAX or "\x00" in value or _surrogate(value):
        raise InvalidInput(f"{what} {_show(value)} cannot name a run; `tether runs` lists them")
    return value


def _surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def integer(value: Any, what: str, *, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    """An ``int`` (not a bool) with ``low <= value <= high`` (both within 64 bits)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{what} must be an int, not {type(value).__name__} {_show(value)}")
    if value < low:
        least = "a positive int" if low == 1 else f"an int of {low} or more"
        raise InvalidInput(f"{what} must be {least}, not {_show(value)}")
    if value > high:
        held = " (the largest a database holds)" if high == INT64_MAX else ""
        raise InvalidInput(f"{what} must be at most {high}{held}, not {_show(value)}")
    return int(value)


def seconds(value: Any, what: str, *, low: float = 0.0, above: bool = False) -> float:
    """A finite number of seconds ``>= low`` (``> low`` with ``above``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{what} must be a number of seconds, not {type(value).__name__}")
    x = float(value) if not isinstance(value, int) or abs(value) < 2**1000 else math.inf
    if not math.isfinite(x) or x < low or (above and x == low):
        bound = f"above {low:g}" if above else f"at least {low:g}"
        raise InvalidInput(f"{what} must be a finite number of seconds {bound}, not {value!r}")
    return x


def text(value: Any, what: str, *, optional: bool = True) -> str | None:
    """Free text (a reason): a str without NUL of at most TEXT_MAX characters, or None."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a str, not {type(value).__name__} {_show(value)}")
    if len(value) > TEXT_MAX:
        raise InvalidInput(f"{what} is {len(value)} characters long; at most {TEXT_MAX}")
    if "\x00" in value or _surrogate(value):
        raise InvalidInput(f"{what} contains a NUL character or an unpaired surrogate")
    return value


def items(value: Any, what: str) -> list[Any]:
    """``value``, an iterable (a list, a tuple, a generator…), as a list; InvalidInput
    naming ``what`` and what it got instead (``'int' object is not iterable`` said
    neither)."""
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise InvalidInput(f"{what} takes a list (or another iterable) of items, not {show(value)}")
    return list(value)
