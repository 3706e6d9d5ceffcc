"""The five-field cron parser: what each field takes, what it refuses (naming the field),
and the next tick after a time, checked against a minute-by-minute scan."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.model.cron import parse

pytestmark = pytest.mark.unit


def _t(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M")


@pytest.mark.parametrize(
    ("line", "after", "expected"),
    [
        ("*/5 * * * *", "2026-11-27T10:03:59", "2026-11-27T10:05"),
        ("*/5 * * * *", "2026-11-27T10:05:00", "2026-11-27T10:10"),  # strictly after
        ("0 9 * * mon-fri", "2026-11-27T10:00", "2026-11-30T09:00"),  # Fri 27th -> Mon
        ("30 2 1 * *", "2026-12-15T00:00", "2027-01-01T02:30"),
        ("0 0 29 feb *", "2026-03-01T00:00", "2028-02-29T00:00"),  # the next leap day
        ("0 0 1 * mon", "2026-11-27T00:00", "2026-11-30T00:00"),  # either day field: Monday
        ("0 0 1 * mon", "2026-11-30T00:00", "2026-12-01T00:00"),  # ... or the 1st
        ("15,45 */6 * jan,jul 0", "2026-06-30T00:00", "2026-07-05T00:15"),  # Sunday 5 July
        ("0 12 * * 7", "2026-11-27T00:00", "2026-11-29T12:00"),  # 7 is Sunday too
        ("5-10/2 1 * * *", "2026-11-27T01:06", "2026-11-27T01:07"),
        ("10/20 * * * *", "2026-11-27T01:31", "2026-11-27T01:50"),  # a/n: from a to the end
    ],
)
def test_the_next_tick(line: str, after: str, expected: str) -> None:
    assert _iso(parse(line).next_after(_t(after))) == expected


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("* * * *", "has 4 fields; it needs 5"),
        ("60 * * * *", "the minute field '60' is out of range"),
        ("* 24 * * *", "the hour field '24' is out of range"),
        ("* * 0 * *", "the day of month field '0'"),
        ("* * * 13 *", "the month field '13'"),
        ("* * * * 8", "the day of week field '8'"),
        ("*/0 * * * *", "a step that is not a whole number of 1 or more"),
        ("5-1 * * * *", "out of range or backwards"),
        ("* * * foo *", "is not a number or a name"),
        ("x * * * *", "the minute field 'x' is not a number"),
        ("0 0 31 feb,apr *", "names a day that none of its months has"),
    ],
)
def test_a_bad_line_names_its_field(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse(line)


def _scan(line: str, after: float) -> float:
    cron = parse(line)
    d = datetime.fromtimestamp(after, UTC).replace(second=0, microsecond=0)
    while True:
        d += timedelta(minutes=1)
        dom, dow = d.day in cron.days, (d.isoweekday() % 7) in cron.weekdays
        day = (dom and dow) if (cron.any_day or cron.any_weekday) else (dom or dow)
        if d.month in cron.months and day and d.hour in cron.hours and d.minute in cron.minutes:
            return d.timestamp()


_FIELD = st.one_of(
    st.just("*"),
    st.integers(0, 59).map(lambda n: f"*/{n % 17 + 1}"),
    st.lists(st.integers(0, 59), min_size=1, max_size=3).map(lambda v: ",".join(map(str, v))),
)


@settings(max_examples=60, deadline=None)
@given(
    minute=_FIELD,
    hour=st.sampled_from(["*", "3", "*/7", "0,12", "22-23"]),
    dom=st.sampled_from(["*", "1", "15", "*/10", "28-31"]),
    dow=st.sampled_from(["*", "mon", "0,6", "1-5"]),
    month=st.sampled_from(["*", "*/4", "jun-aug"]),
    after=st.integers(1_767_225_600, 1_830_297_600),  # 2026 .. 2027
)
def test_next_after_is_the_first_minute_a_scan_finds(
    minute: str, hour: str, dom: str, dow: str, month: str, after: int
) -> None:
    line = f"{minute} {hour} {dom} {month} {dow}"
    assert parse(line).next_after(after) == _scan(line, after), line


@pytest.mark.parametrize(
    ("macro", "line"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@HOURLY", "0 * * * *"),
    ],
)
def test_a_macro_ticks_as_its_five_fields(macro: str, line: str) -> None:
    """Vixie cron's macros: the same ticks as the line each stands for (and its text kept)."""
    cron, plain = parse(macro), parse(line)
    assert cron.text == macro
    t = _t("2026-02-27T13:41:00")
    for _ in range(6):
        assert cron.next_after(t) == plain.next_after(t)
        t = cron.next_after(t)


def test_an_unknown_macro_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"'@every5m' has 1 fields.*'@daily'.*@hourly are known"):
        parse("@every5m")
