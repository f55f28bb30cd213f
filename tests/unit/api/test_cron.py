"""Cron schedules of the drift watch: what a user writes, and when the next run is."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from infergate.api.cron import CronError, parse_cron


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# (schedule, after, next run)
NEXT = [
    ("0 3 * * *", "2026-01-05T02:59:00", "2026-01-05T03:00:00"),
    ("0 3 * * *", "2026-01-05T03:00:00", "2026-01-06T03:00:00"),  # strictly after
    ("0 3 * * *", "2026-01-05T03:00:30", "2026-01-06T03:00:00"),
    ("*/15 * * * *", "2026-01-05T10:07:12", "2026-01-05T10:15:00"),
    ("* * * * *", "2026-01-05T10:07:59", "2026-01-05T10:08:00"),
    ("30 9 1 * *", "2026-01-31T12:00:00", "2026-02-01T09:30:00"),
    ("0 0 29 2 *", "2026-03-01T00:00:00", "2028-02-29T00:00:00"),  # next leap year
    ("0 12 * * MON-FRI", "2026-01-09T12:00:00", "2026-01-12T12:00:00"),  # Fri -> Mon
    ("0 12 * * 7", "2026-01-05T00:00:00", "2026-01-11T12:00:00"),  # 7 is Sunday
    ("0 12 * * sun", "2026-01-05T00:00:00", "2026-01-11T12:00:00"),
    # Both day fields restricted: either matches (the 13th, or any Friday).
    ("0 0 13 * FRI", "2026-01-05T00:00:00", "2026-01-09T00:00:00"),
    ("0 0 13 * FRI", "2026-01-09T00:00:00", "2026-01-13T00:00:00"),
    ("5,35 */6 * JAN,jul *", "2026-01-05T06:10:00", "2026-01-05T06:35:00"),
    ("0 1-5/2 * * *", "2026-01-05T02:00:00", "2026-01-05T03:00:00"),
    ("10/20 * * * *", "2026-01-05T10:31:00", "2026-01-05T10:50:00"),
    ("@daily", "2026-01-05T10:00:00", "2026-01-06T00:00:00"),
    ("@hourly", "2026-01-05T10:00:00", "2026-01-05T11:00:00"),
    ("@weekly", "2026-01-05T10:00:00", "2026-01-11T00:00:00"),
    ("@monthly", "2026-01-05T10:00:00", "2026-02-01T00:00:00"),
    ("@yearly", "2026-01-05T10:00:00", "2027-01-01T00:00:00"),
]


@pytest.mark.parametrize(("schedule", "after", "expected"), NEXT)
def test_next_run(schedule: str, after: str, expected: str) -> None:
    assert parse_cron(schedule).next_after(_at(after)) == _at(expected)


# (schedule, what the error must say)
REFUSED = [
    ("0 3 * *", "has 4 fields"),
    ("0 3 * * * *", "has 6 fields"),
    ("60 3 * * *", "minute: 60 is out of range 0-59"),
    ("0 24 * * *", "hour: 24 is out of range 0-23"),
    ("0 3 0 * *", "day of month: 0 is out of range 1-31"),
    ("0 3 * 13 *", "month: 13 is out of range 1-12"),
    ("0 3 * * 8", "day of week: 8 is out of range 0-7"),
    ("0 3 * FOO *", "month: 'FOO' is not a value (1-12 or JAN-DEC)"),
    ("*/0 * * * *", "minute: step '0' is not a positive number"),
    ("0 5-1 * * *", "hour: range '5-1' runs backwards"),
    ("0 3 ,1 * *", "day of month: '' is not a value"),
    ("0 0 30 2 *", "matches no day"),
]


@pytest.mark.parametrize(("schedule", "said"), REFUSED)
def test_a_schedule_that_is_not_one_names_the_field(schedule: str, said: str) -> None:
    with pytest.raises(CronError) as caught:
        parse_cron(schedule).next_after(_at("2026-01-05T00:00:00"))
    assert said in str(caught.value)
