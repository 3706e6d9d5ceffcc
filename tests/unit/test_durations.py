"""Durations in sleeps, waits and approval timeouts."""

from __future__ import annotations

import pytest

from tether.waits import parse_duration

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
        ("45", 45.0),
        ("2w", 1209600.0),
    ],
)
def test_parse(text: object, seconds: float | None) -> None:
    assert parse_duration(text) == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["ten minutes", "", "5 parsecs", "-3s", True, -1])
def test_bad_durations_say_what_to_write(bad: object) -> None:
    with pytest.raises(ValueError, match=r"duration|negative"):
        parse_duration(bad, what="sleep 'nap'")  # type: ignore[arg-type]
