"""The five-field cron syntax, and when a schedule's ticks fall (pure: no clock read).

``minute hour day-of-month month day-of-week``, in UTC. Each field is ``*``, a number, a
range ``a-b``, a step ``*/n`` or ``a-b/n`` (``a/n``: from a to the end), or a list of
those separated by commas; months and days may be named (``jan``…``dec``,
``sun``…``sat``; 0 and 7 are both Sunday). As in Vixie cron, when both day fields are
restricted a day matches either one (``0 0 1 * mon``: the 1st and every Monday), and a
line may be one of its macros: ``@yearly`` (``@annually``), ``@monthly``, ``@weekly``,
``@daily`` (``@midnight``), ``@hourly``.

:func:`parse` checks a line and returns a :class:`Cron`; ``cron.next_after(t)`` is the
first tick strictly after ``t`` (seconds since the epoch).
"""

from __future__ import annotations

import calendar
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (name, low, high, names whose index + offset is the value)
_FIELDS = (
    ("minute", 0, 59, (), 0),
    ("hour", 0, 23, (), 0),
    ("day of month", 1, 31, (), 0),
    ("month", 1, 12, _MONTHS, 1),
    ("day of week", 0, 7, _DAYS, 0),
)
_YEARS = 8  # a line no date matches within this many years (Feb 30th) is refused
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed cron line: the allowed values of each field (day of week 0-6, Sunday 0)."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    any_day: bool  # day of month is *
    any_weekday: bool  # day of week is *

    def _day_matches(self, d: datetime) -> bool:
        dom = d.day in self.days
        dow = (d.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return dom and dow
        return dom or dow  # both restricted: either (Vixie cron)

    def next_after(self, t: float) -> float:
        """The first tick strictly after ``t`` (seconds since the epoch, UTC)."""
        d = datetime.fromtimestamp(t, UTC).replace(second=0, microsecond=0)
        d += timedelta(minutes=1)
        limit = d.year + _YEARS
        while d.year <= limit:
            if d.month not in self.months:
                d = _next_month(d)
            elif not self._day_matches(d):
                d = (d + timedelta(days=1)).replace(hour=0, minute=0)
            elif d.hour not in self.hours:
                d = (d + timedelta(hours=1)).replace(minute=0)
            elif d.minute not in self.minutes:
                d += timedelta(minutes=1)
            else:
                return d.timestamp()
        raise ValueError(f"cron {self.text!r} matches no date")  # parse refuses such lines


def _next_month(d: datetime) -> datetime:
    year, month = (d.year + 1, 1) if d.month == 12 else (d.year, d.month + 1)
    return d.replace(year=year, month=month, day=1, hour=0, minute=0)


def parse(text: str) -> Cron:
    """A cron line as a :class:`Cron`; ValueError naming the field and what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"a cron line is a str such as '*/5 * * * *', not {text!r}")
    parts = _MACROS.get(text.strip().lower(), text).split()
    if len(parts) != 5:
        known = f" ({', '.join(_MACROS)} are known)" if text.strip().startswith("@") else ""
        raise ValueError(
            f"cron {text!r} has {len(parts)} fields; it needs 5: minute hour day-of-month "
            f"month day-of-week, e.g. '*/5 * * * *', or a macro such as '@daily'{known}"
        )
    sets = [_field(p, *spec, text) for p, spec in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in sets[4])
    minutes, hours, days, months = sets[:4]
    cron = Cron(text, minutes, hours, days, months, weekdays, parts[2] == "*", parts[4] == "*")
    _check_some_day(cron)
    return cron


def _check_some_day(cron: Cron) -> None:
    longest = {m: calendar.monthrange(2024, m)[1] for m in cron.months}  # a leap year
    if cron.any_weekday and not any(d <= longest[m] for m in cron.months for d in cron.days):
        raise ValueError(f"cron {cron.text!r} names a day that none of its months has")


def _field(
    part: str, what: str, low: int, high: int, names: tuple[str, ...], offset: int, text: str
) -> frozenset[int]:
    values: set[int] = set()
    for item in part.split(","):
        values |= _item(item, what, low, high, names, offset, text)
    return frozenset(values)


def _item(
    item: str, what: str, low: int, high: int, names: tuple[str, ...], offset: int, text: str
) -> set[int]:
    def bad(why: str) -> ValueError:
        return ValueError(f"cron {text!r}: the {what} field {item!r} {why} ({low}-{high})")

    base, _, step_text = item.partition("/")
    step = 1
    if step_text:
        if not step_text.isdigit() or int(step_text) < 1:
            raise bad("has a step that is not a whole number of 1 or more")
        step = int(step_text)
    if base == "*":
        first, last = low, high
    else:
        first_text, dash, last_text = base.partition("-")
        first = _value(first_text, names, offset, bad)
        last = _value(last_text, names, offset, bad) if dash else (high if step_text else first)
    if not low <= first <= last <= high:
        raise bad("is out of range or backwards")
    return set(range(first, last + 1, step))


def _value(text: str, names: tuple[str, ...], offset: int, bad: Callable[[str], ValueError]) -> int:
    if text.isdigit():
        return int(text)
    if text.lower() in names:
        return names.index(text.lower()) + offset
    raise bad("is not a number" + (" or a name" if names else ""))
