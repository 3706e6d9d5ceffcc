"""Durations: one grammar for delays, sleeps, waits, approval timeouts and gc ages."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from tether.model.durations import MAX_SECONDS, parse_duration
from tether.services.retention import parse_age

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (None, None),
        (90, 90.0),
        (1.5, 1.5),
        ("10m", 600.0),
        ("24h", 86400.0),
        ("7d", 604800.0),
        ("250ms", 0.25),
        ("1h 30m", 5400.0),
        ("1h30m", 5400.0),
        ("45", 45.0),
        ("2w", 1209600.0),
        (dt.timedelta(hours=2), 7200.0),
    ],
)
def test_parse(text: object, seconds: float | None) -> None:
    assert parse_duration(text) == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad",
    [
        "ten minutes",
        "",
        "5 parsecs",
        "-3s",
        True,
        -1,
        "1e5",
        "10mm",
        float("nan"),
        float("inf"),
        -float("inf"),
        10**400,
        MAX_SECONDS * 2,
        dt.timedelta(days=-1),
        [10],
        "1" * 5000,
    ],
)
def test_bad_durations_say_what_to_write(bad: object) -> None:
    with pytest.raises((ValueError, TypeError), match=r"sleep 'nap'.*(duration|negative)"):
        parse_duration(bad, what="sleep 'nap'")  # type: ignore[arg-type]


def test_a_long_run_of_digits_is_refused_at_once() -> None:
    """The scan is linear: no backtracking over the ways to split digits into parts."""
    began = time.monotonic()
    with pytest.raises(ValueError):
        parse_duration("1" * 90 + "x")
    assert time.monotonic() - began < 5  # exponential backtracking would take hours


@pytest.mark.parametrize("age", ["1w", "90s", "1h 30m", 3600, dt.timedelta(days=30)])
def test_gc_ages_take_the_same_grammar(age: object) -> None:
    assert parse_age(age) == parse_duration(age)  # type: ignore[arg-type]
