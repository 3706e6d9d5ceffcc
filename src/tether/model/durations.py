"""Durations: one grammar for every delay, sleep, timeout and age.

A duration is a number of seconds (``90``, ``1.5``), a ``datetime.timedelta``, or
text: a number with an optional unit, ``ms``, ``s`` (the default), ``m``, ``h``,
``d`` or ``w``, and several such parts add up (``"1h 30m"``, ``"1h30m"``). The
same grammar serves ``start(delay=)``, ``run.sleep``, ``run.wait(timeout=)``,
approval timeouts, ``app.gc(older_than=)`` and ``tether gc --older-than``.

A duration is finite, not negative, and at most :data:`MAX_SECONDS` (a hundred
years: a due time past that is a typo, and ``nan`` or ``inf`` would be stored as
due times no comparison ever reaches).
"""

from __future__ import annotations

import datetime as dt
import math
import re

from tether.errors import InvalidInput

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
MAX_SECONDS = 100 * 365.25 * 86400.0
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*", re.ASCII)
_EXAMPLES = "seconds (90, 1.5), a timedelta, or text: '250ms', '10m', '24h', '7d', '2w', '1h 30m'"

Duration = float | int | str | dt.timedelta


def parse_duration(value: Duration | None, *, what: str = "duration") -> float | None:
    """Seconds in ``value`` (see the module docstring); None stays None. Raises
    InvalidInput (a ValueError and a TypeError) naming ``what``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str | dt.timedelta):
        raise InvalidInput(f"{what} must be a duration: {_EXAMPLES}; not {type(value).__name__}")
    if isinstance(value, str):
        seconds = _parse_text(value, what)
    elif isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, float) and math.isnan(value):
        raise InvalidInput(f"{what} must be a duration, not nan: {_EXAMPLES}")
    else:
        seconds = float(value) if abs(value) < 2**1000 else math.inf
    if seconds < 0:
        raise InvalidInput(f"{what} must not be negative, got {value!r}")
    if seconds > MAX_SECONDS:
        raise InvalidInput(
            f"{what} {_cut(value)} is longer than a hundred years; give a finite duration: "
            f"{_EXAMPLES}"
        )
    return seconds


def _parse_text(text: str, what: str) -> float:
    """The parts of ``text`` one after the other (a scan: linear in its length)."""
    text = text.strip()
    total, pos = 0.0, 0
    while pos < len(text) and len(text) <= 100:
        m = _PART.match(text, pos)
        if m is None:
            break
        total += float(m.group(1)) * UNITS[m.group(2) or "s"]
        pos = m.end()
    if not text or pos != len(text):
        raise InvalidInput(f"{what} {_cut(text)} is not a duration; write {_EXAMPLES}")
    return total


def _cut(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
