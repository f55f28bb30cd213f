"""Five-field cron schedules, as Kubernetes CronJobs read them, and their next run time.

Pure, no dependency. `minute hour day-of-month month day-of-week`, in UTC:

    *        every value            */15     every 15th from the lowest
    5        one value              1-5      a range (inclusive)
    1-10/3   every 3rd of a range   1,15,30  a list of any of these
    JAN-DEC and SUN-SAT             names for months and weekdays (7 is Sunday too)

and the macros @yearly (@annually), @monthly, @weekly, @daily (@midnight), @hourly.
When both day-of-month and day-of-week are restricted, a day matches either (as in
Vixie cron and Kubernetes); when one is `*`, only the other counts.

Our own rather than croniter or cronsim: both accept more than the CRD admits (seconds and
year fields, `L`, `W`, `#`, `H`; croniter also wrapping ranges such as `5-1`), so the
field-by-field check that names what is wrong would stay anyway, and neither gives the same
next times: cronsim reads a day field that merely starts with `*` (`*/2`) as unrestricted
(Debian's rule), and croniter 7 answers some valid schedules wrongly (`59-59 10 ...` at
minute 0, a `7-7` weekday range ignored). What is left is a search over days bounded by
`_SEARCH_DAYS`, short enough to read whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _field_pattern(value: str) -> str:
    """A field of values in range: `*` or `v` or `v-v`, each with an optional `/step`, listed."""
    item = rf"(\*|{value}(-{value})?)(/[0-9]+)?"
    return rf"{item}(,{item})*"


_FIELD_VALUES = (
    r"[0-5]?[0-9]",  # minute
    r"(1?[0-9]|2[0-3])",  # hour
    r"(0?[1-9]|[12][0-9]|3[01])",  # day of month
    r"(0?[1-9]|1[0-2]|[A-Za-z]{3})",  # month
    r"([0-7]|[A-Za-z]{3})",  # day of week
)
# What the CRD accepts (the API server refuses the rest at admission): five fields whose
# values are in range, or a macro. Names and combinations no day matches are left to
# `parse_cron`, which the operator runs on every spec.
SCHEDULE_PATTERN = (
    r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|"
    + " +".join(_field_pattern(v) for v in _FIELD_VALUES)
    + ")$"
)
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_NUMBER = re.compile(r"^\d+$")
# A schedule that matches no real day (30 February) is refused rather than searched forever.
_SEARCH_DAYS = 366 * 8


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    name_base: int = 0


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day of month", 1, 31),
    _Field("month", 1, 12, _MONTHS, 1),
    _Field("day of week", 0, 7, _DAYS, 0),
)


class CronError(ValueError):
    """A schedule that is not a five-field cron expression (the message says which part)."""


@dataclass(frozen=True)
class CronSchedule:
    """A parsed schedule: the allowed values of each field."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    """0 = Sunday ... 6 = Saturday."""
    days_restricted: bool
    weekdays_restricted: bool

    def _day_matches(self, day: datetime) -> bool:
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = (day.isoweekday() % 7) in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return in_month or in_week
        if self.days_restricted:
            return in_month
        if self.weekdays_restricted:
            return in_week
        return True

    def next_after(self, moment: datetime) -> datetime:
        """The first matching minute strictly after `moment` (UTC)."""
        start = moment.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
        day = start.replace(hour=0, minute=0)
        for offset in range(_SEARCH_DAYS):
            current = day + timedelta(days=offset)
            if not self._day_matches(current):
                continue
            for hour in sorted(self.hours):
                for minute in sorted(self.minutes):
                    candidate = current.replace(hour=hour, minute=minute)
                    if candidate >= start:
                        return candidate
        raise CronError(f"schedule {self.text!r} matches no day within {_SEARCH_DAYS // 366} years")


def _value(field: _Field, text: str) -> int:
    upper = text.upper()
    if field.names and upper in field.names:
        return field.names.index(upper) + field.name_base
    if not _NUMBER.match(text):
        allowed = f"{field.low}-{field.high}"
        if field.names:
            allowed += f" or {field.names[0]}-{field.names[-1]}"
        raise CronError(f"{field.name}: {text!r} is not a value ({allowed})")
    value = int(text)
    if not field.low <= value <= field.high:
        raise CronError(f"{field.name}: {value} is out of range {field.low}-{field.high}")
    return value


def _part(field: _Field, part: str) -> set[int]:
    body, _, step_text = part.partition("/")
    step = 1
    if step_text:
        if not _NUMBER.match(step_text) or int(step_text) == 0:
            raise CronError(f"{field.name}: step {step_text!r} is not a positive number")
        step = int(step_text)
    if body == "*":
        low, high = field.low, field.high
    elif "-" in body:
        first, _, last = body.partition("-")
        low, high = _value(field, first), _value(field, last)
        if low > high:
            raise CronError(f"{field.name}: range {body!r} runs backwards")
    else:
        low = _value(field, body)
        # `5/15` means from 5 to the end every 15, as in Vixie cron.
        high = field.high if step_text else low
    return set(range(low, high + 1, step))


def _field_values(field: _Field, text: str) -> set[int]:
    if not text:
        raise CronError(f"{field.name}: empty")
    values: set[int] = set()
    for part in text.split(","):
        values |= _part(field, part)
    return values


def parse_cron(text: str) -> CronSchedule:
    """A schedule from its text; `CronError` names the field that is wrong and why."""
    expanded = MACROS.get(text.strip().lower(), text.strip())
    parts = expanded.split()
    if len(parts) != len(_FIELDS):
        raise CronError(
            f"{text!r} has {len(parts)} fields; a schedule has 5 (minute hour day-of-month "
            "month day-of-week, e.g. '0 3 * * *') or is one of " + ", ".join(MACROS)
        )
    minutes, hours, days, months, weekdays = (
        _field_values(field, part) for field, part in zip(_FIELDS, parts, strict=True)
    )
    if 7 in weekdays:
        weekdays = (weekdays - {7}) | {0}
    return CronSchedule(
        text=text,
        minutes=frozenset(minutes),
        hours=frozenset(hours),
        days=frozenset(days),
        months=frozenset(months),
        weekdays=frozenset(weekdays),
        days_restricted=parts[2] != "*",
        weekdays_restricted=parts[4] != "*",
    )
