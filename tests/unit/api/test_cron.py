"""Tests for the cron parser and evaluator behind recurring training deadlines.

Every expected instant below was worked out by hand from the calendar and the Europe/Berlin
DST rules for 2026. Berlin is on CET (UTC+1) until 2026-03-29 01:00 UTC, when 02:00 local
jumps to 03:00 CEST (UTC+2). It is on CEST until 2026-10-25 01:00 UTC, when 03:00 local falls
back to 02:00 CET, so 02:00-02:59 happens twice.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from controller.api.cron import (
    CronError,
    CronSchedule,
    next_after,
    parse_cron,
    previous_at_or_before,
)

BERLIN = ZoneInfo("Europe/Berlin")
FIXED_NAIVE_INSTANT = datetime(2026, 1, 1)
"""A fixed instant without a zone, the input the schedule functions must refuse (not now)."""
NEW_YORK = ZoneInfo("America/New_York")
ZULU = ZoneInfo("UTC")


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, *, second: int = 0
) -> datetime:
    """Spell expected instants compactly; every answer in these tests is a UTC instant."""
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        pytest.param(
            "61 * * * *",
            'minute field "61": value 61 out of range 0-59',
            id="a minute above 59 is out of range",
        ),
        pytest.param(
            "* 24 * * *",
            'hour field "24": value 24 out of range 0-23',
            id="hour 24 is out of range because hours run 0-23",
        ),
        pytest.param(
            "* * 0 * *",
            'day-of-month field "0": value 0 out of range 1-31',
            id="day of month 0 is out of range because days start at 1",
        ),
        pytest.param(
            "* * 1-32 * *",
            'day-of-month field "1-32": value 32 out of range 1-31',
            id="a range ending past day 31 is out of range",
        ),
        pytest.param(
            "* * * 13 *",
            'month field "13": value 13 out of range 1-12',
            id="month 13 is out of range",
        ),
        pytest.param(
            "* * * * 8",
            'day-of-week field "8": value 8 out of range 0-7',
            id="day of week 8 is out of range even though 7 is allowed for Sunday",
        ),
        pytest.param(
            "* * * * * *",
            "expected 5 fields (minute hour day-of-month month day-of-week), got 6",
            id="six fields are rejected so a seconds or year field is never silently misread",
        ),
        pytest.param(
            "0 18 * FRI",
            "expected 5 fields (minute hour day-of-month month day-of-week), got 4",
            id="four fields are rejected",
        ),
        pytest.param(
            "   ",
            "expected 5 fields (minute hour day-of-month month day-of-week), got 0",
            id="a blank expression reports zero fields",
        ),
        pytest.param(
            "* * * * MON-XYZ",
            'day-of-week field "MON-XYZ": unknown name "XYZ"',
            id="an unknown day name is named in the error",
        ),
        pytest.param(
            "* * * FOO *",
            'month field "FOO": unknown name "FOO"',
            id="an unknown month name is named in the error",
        ),
        pytest.param(
            "MON * * * *",
            'minute field "MON": value "MON" is not a number',
            id="names are only accepted in the month and day-of-week fields",
        ),
        pytest.param(
            "5x * * * *",
            'minute field "5x": value "5x" is not a number',
            id="a value with trailing junk is not a number",
        ),
        pytest.param(
            "\u0663 * * * *",
            'minute field "\u0663": value "\u0663" is not a number',
            id="only ASCII digits count as a number",
        ),
        pytest.param(
            "*/0 * * * *",
            'minute field "*/0": step must be at least 1',
            id="a zero step is rejected instead of looping forever",
        ),
        pytest.param(
            "*/x * * * *",
            'minute field "*/x": step "x" is not a number',
            id="a non-numeric step is rejected",
        ),
        pytest.param(
            "*/ * * * *",
            'minute field "*/": missing step after "/"',
            id="a slash without a step is rejected",
        ),
        pytest.param(
            "/5 * * * *",
            'minute field "/5": missing value before "/"',
            id="a step without a start is rejected",
        ),
        pytest.param(
            "1/2/3 * * * *",
            'minute field "1/2/3": more than one "/"',
            id="a second slash is rejected",
        ),
        pytest.param(
            "* 5-3 * * *",
            'hour field "5-3": range start 5 is greater than end 3',
            id="a reversed range is rejected rather than wrapped around midnight",
        ),
        pytest.param(
            "* * * * FRI-SUN",
            'day-of-week field "FRI-SUN": range start 5 is greater than end 0',
            id="a day range cannot wrap past Saturday because Sunday is 0",
        ),
        pytest.param(
            "-5 * * * *",
            'minute field "-5": malformed range "-5"',
            id="a negative number reads as a range with no start",
        ),
        pytest.param(
            "1-2-3 * * * *",
            'minute field "1-2-3": malformed range "1-2-3"',
            id="a range with two dashes is malformed",
        ),
        pytest.param(
            "1,,2 * * * *",
            'minute field "1,,2": empty list element',
            id="an empty list element is rejected",
        ),
        pytest.param(
            "@reboot",
            'unknown macro "@reboot" '
            "(supported: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)",
            id="reboot is not a time so it is not a supported macro",
        ),
        pytest.param(
            "@daily 5",
            'unknown macro "@daily 5" '
            "(supported: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)",
            id="a macro followed by more fields is rejected",
        ),
    ],
)
def test_parse_rejects_malformed_expressions_with_a_message_naming_field_and_reason(
    expression: str, message: str
) -> None:
    with pytest.raises(CronError, match=f"^{re.escape(message)}$"):
        parse_cron(expression)


def test_cron_error_is_a_value_error_so_input_validation_can_catch_one_type() -> None:
    with pytest.raises(ValueError, match="out of range"):
        parse_cron("60 * * * *")


ALL_MINUTES = frozenset(range(60))
ALL_HOURS = frozenset(range(24))
ALL_DAYS = frozenset(range(1, 32))
ALL_MONTHS = frozenset(range(1, 13))
ALL_WEEKDAYS = frozenset(range(7))


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        pytest.param(
            "*/15 9-17 * * MON-FRI",
            CronSchedule(
                expression="*/15 9-17 * * MON-FRI",
                minutes=frozenset({0, 15, 30, 45}),
                hours=frozenset(range(9, 18)),
                days_of_month=ALL_DAYS,
                months=ALL_MONTHS,
                days_of_week=frozenset({1, 2, 3, 4, 5}),
                day_of_month_restricted=False,
                day_of_week_restricted=True,
            ),
            id="steps over star and named day ranges expand to the listed values",
        ),
        pytest.param(
            "1-10/3,50/5 * 1,15,31 jan,Jul-sep 0,7",
            CronSchedule(
                expression="1-10/3,50/5 * 1,15,31 jan,Jul-sep 0,7",
                minutes=frozenset({1, 4, 7, 10, 50, 55}),
                hours=ALL_HOURS,
                days_of_month=frozenset({1, 15, 31}),
                months=frozenset({1, 7, 8, 9}),
                days_of_week=frozenset({0}),
                day_of_month_restricted=True,
                day_of_week_restricted=True,
            ),
            id="a value with a step runs to the field maximum and names are case-insensitive",
        ),
        pytest.param(
            "0 0 * * 5-7",
            CronSchedule(
                expression="0 0 * * 5-7",
                minutes=frozenset({0}),
                hours=frozenset({0}),
                days_of_month=ALL_DAYS,
                months=ALL_MONTHS,
                days_of_week=frozenset({5, 6, 0}),
                day_of_month_restricted=False,
                day_of_week_restricted=True,
            ),
            id="day of week 7 is stored as Sunday 0",
        ),
        pytest.param(
            "0 0 * * 1/2",
            CronSchedule(
                expression="0 0 * * 1/2",
                minutes=frozenset({0}),
                hours=frozenset({0}),
                days_of_month=ALL_DAYS,
                months=ALL_MONTHS,
                days_of_week=frozenset({1, 3, 5}),
                day_of_month_restricted=False,
                day_of_week_restricted=True,
            ),
            id="a day-of-week step stops at Saturday instead of adding Sunday by way of 7",
        ),
        pytest.param(
            "  @WEEKLY ",
            CronSchedule(
                expression="  @WEEKLY ",
                minutes=frozenset({0}),
                hours=frozenset({0}),
                days_of_month=ALL_DAYS,
                months=ALL_MONTHS,
                days_of_week=frozenset({0}),
                day_of_month_restricted=False,
                day_of_week_restricted=True,
            ),
            id="macros are case-insensitive and the expression is kept exactly as written",
        ),
        pytest.param(
            "* * */2 * *",
            CronSchedule(
                expression="* * */2 * *",
                minutes=ALL_MINUTES,
                hours=ALL_HOURS,
                days_of_month=frozenset(range(1, 32, 2)),
                months=ALL_MONTHS,
                days_of_week=ALL_WEEKDAYS,
                day_of_month_restricted=False,
                day_of_week_restricted=False,
            ),
            id="a day field starting with a star counts as unrestricted as in Vixie cron",
        ),
    ],
)
def test_parse_expands_fields(expression: str, expected: CronSchedule) -> None:
    assert parse_cron(expression) == expected


@pytest.mark.parametrize(
    ("macro", "equivalent"),
    [
        pytest.param("@yearly", "0 0 1 1 *", id="yearly is midnight on January 1st"),
        pytest.param("@annually", "0 0 1 1 *", id="annually is the same as yearly"),
        pytest.param("@monthly", "0 0 1 * *", id="monthly is midnight on the 1st"),
        pytest.param("@weekly", "0 0 * * 0", id="weekly is midnight on Sunday"),
        pytest.param("@daily", "0 0 * * *", id="daily is every midnight"),
        pytest.param("@midnight", "0 0 * * *", id="midnight is the same as daily"),
        pytest.param("@hourly", "0 * * * *", id="hourly is minute 0 of every hour"),
    ],
)
def test_macros_expand_like_the_five_field_form(macro: str, equivalent: str) -> None:
    assert parse_cron(macro) == replace(parse_cron(equivalent), expression=macro)


@pytest.mark.parametrize(
    ("expression", "after", "tz", "expected"),
    [
        pytest.param(
            "*/15 * * * *",
            utc(2026, 1, 15, 10, 7, second=30),
            BERLIN,
            utc(2026, 1, 15, 10, 15),
            id="every 15 minutes fires at the next quarter hour",
        ),
        pytest.param(
            "*/15 * * * *",
            utc(2026, 1, 15, 10, 45),
            BERLIN,
            utc(2026, 1, 15, 11, 0),
            id="next_after is strict so a fire time itself is not returned",
        ),
        pytest.param(
            "*/15 * * * *",
            utc(2026, 12, 31, 22, 59, second=59),
            BERLIN,
            utc(2026, 12, 31, 23, 0),
            id="every 15 minutes rolls over into the new local year",
        ),
        pytest.param(
            "0 18 * * FRI",
            utc(2026, 3, 27, 17, 0),
            BERLIN,
            utc(2026, 4, 3, 16, 0),
            id="Friday 18:00 Berlin moves from 17:00 to 16:00 UTC across spring forward",
        ),
        pytest.param(
            "0 18 * * FRI",
            utc(2026, 10, 23, 16, 0, second=1),
            BERLIN,
            utc(2026, 10, 30, 17, 0),
            id="Friday 18:00 Berlin moves from 16:00 to 17:00 UTC across fall back",
        ),
        pytest.param(
            "0 18 * * FRI",
            datetime(2026, 3, 27, 13, 0, tzinfo=NEW_YORK),
            BERLIN,
            utc(2026, 4, 3, 16, 0),
            id="an input in another zone is compared by instant so 13:00 EDT equals 18:00 CET",
        ),
        pytest.param(
            "30 2 * * *",
            utc(2026, 3, 28, 1, 30),
            BERLIN,
            utc(2026, 3, 30, 0, 30),
            id="02:30 does not exist on spring-forward day so the next day's 02:30 fires",
        ),
        pytest.param(
            "* * * * *",
            utc(2026, 3, 29, 0, 59),
            BERLIN,
            utc(2026, 3, 29, 1, 0),
            id="every minute goes from 01:59 CET straight to 03:00 CEST",
        ),
        pytest.param(
            "30 2 * * *",
            utc(2026, 10, 24, 12, 0),
            BERLIN,
            utc(2026, 10, 25, 0, 30),
            id="an ambiguous 02:30 on fall-back day fires at its first occurrence in CEST",
        ),
        pytest.param(
            "30 2 * * *",
            utc(2026, 10, 25, 0, 30),
            BERLIN,
            utc(2026, 10, 26, 1, 30),
            id="an ambiguous 02:30 fires only once so the repeat in CET is skipped",
        ),
        pytest.param(
            "0 * * * *",
            utc(2026, 10, 25, 0, 30),
            BERLIN,
            utc(2026, 10, 25, 2, 0),
            id="hourly skips the repeated 02:00 and fires next at 03:00 CET",
        ),
        pytest.param(
            "10 * * * *",
            utc(2026, 10, 25, 1, 5),
            BERLIN,
            utc(2026, 10, 25, 2, 10),
            id="from inside the repeated hour the first-pass 02:10 is already past",
        ),
        pytest.param(
            "0 0 13 * FRI",
            utc(2026, 1, 1),
            ZULU,
            utc(2026, 1, 2),
            id="with both day fields restricted a Friday that is not the 13th matches",
        ),
        pytest.param(
            "0 0 13 * FRI",
            utc(2026, 1, 9, 12),
            ZULU,
            utc(2026, 1, 13),
            id="with both day fields restricted a 13th that is a Tuesday matches",
        ),
        pytest.param(
            "0 0 */2 * FRI",
            utc(2026, 1, 1),
            ZULU,
            utc(2026, 1, 9),
            id="a day-of-month starting with a star must match together with the weekday",
        ),
        pytest.param(
            "0 9 * * 1-5",
            utc(2026, 1, 9, 10),
            ZULU,
            utc(2026, 1, 12, 9),
            id="a weekday schedule skips from Friday over the weekend to Monday",
        ),
        pytest.param(
            "0 12 * * 7",
            utc(2026, 1, 1),
            ZULU,
            utc(2026, 1, 4, 12),
            id="day of week 7 fires on Sunday",
        ),
        pytest.param(
            "@monthly",
            utc(2026, 1, 31, 23, 0),
            BERLIN,
            utc(2026, 2, 28, 23, 0),
            id="monthly fires at local midnight on the 1st which is 23:00 UTC the day before",
        ),
        pytest.param(
            "0 0 29 2 *",
            utc(2026, 1, 1),
            ZULU,
            utc(2028, 2, 29),
            id="Feb 29 fires in the next leap year 2028",
        ),
        pytest.param(
            "0 0 29 2 *",
            utc(2096, 3, 1),
            ZULU,
            utc(2104, 2, 29),
            id="Feb 29 after 2096 waits eight years because 2100 is not a leap year",
        ),
        pytest.param(
            "59 23 31 12 *",
            utc(2026, 12, 31, 23, 59),
            ZULU,
            utc(2027, 12, 31, 23, 59),
            id="the last minute of the year fires again a year later",
        ),
    ],
)
def test_next_after(expression: str, after: datetime, tz: ZoneInfo, expected: datetime) -> None:
    fire = next_after(parse_cron(expression), after, tz)
    assert fire == expected
    assert fire.tzinfo is UTC


@pytest.mark.parametrize(
    ("expression", "at", "tz", "expected"),
    [
        pytest.param(
            "*/15 * * * *",
            utc(2026, 1, 15, 10, 7, second=30),
            BERLIN,
            utc(2026, 1, 15, 10, 0),
            id="every 15 minutes looks back to the last quarter hour",
        ),
        pytest.param(
            "0 18 * * FRI",
            utc(2026, 4, 3, 16, 0),
            BERLIN,
            utc(2026, 4, 3, 16, 0),
            id="a deadline is passed at the very instant it falls",
        ),
        pytest.param(
            "0 18 * * FRI",
            utc(2026, 4, 3, 15, 59, second=59),
            BERLIN,
            utc(2026, 3, 27, 17, 0),
            id="just before Friday 18:00 CEST the cutoff that passed is last week's in CET",
        ),
        pytest.param(
            "0 18 * * FRI",
            utc(2026, 10, 30, 16, 30),
            BERLIN,
            utc(2026, 10, 23, 16, 0),
            id="Friday 17:30 CET after fall back looks back to the previous Friday in CEST",
        ),
        pytest.param(
            "30 2 * * *",
            utc(2026, 3, 30, 0, 0),
            BERLIN,
            utc(2026, 3, 28, 1, 30),
            id="looking back over spring-forward day skips the 02:30 that did not exist",
        ),
        pytest.param(
            "30 2 * * *",
            utc(2026, 10, 25, 1, 45),
            BERLIN,
            utc(2026, 10, 25, 0, 30),
            id="in the repeated hour the cutoff that passed is the first 02:30 not the second",
        ),
        pytest.param(
            "0 * * * *",
            utc(2026, 10, 25, 1, 30),
            BERLIN,
            utc(2026, 10, 25, 0, 0),
            id="hourly looks back past the repeated 02:00 CET to the 02:00 CEST that fired",
        ),
        pytest.param(
            "50 * * * *",
            utc(2026, 10, 25, 1, 10),
            BERLIN,
            utc(2026, 10, 25, 0, 50),
            id="at 02:10 on the second pass the first-pass 02:50 has already fired",
        ),
        pytest.param(
            "0 0 13 * FRI",
            utc(2026, 1, 15),
            ZULU,
            utc(2026, 1, 13),
            id="looking back with both day fields restricted finds the 13th",
        ),
        pytest.param(
            "@yearly",
            utc(2026, 6, 15),
            BERLIN,
            utc(2025, 12, 31, 23, 0),
            id="yearly looks back to local New Year which is 23:00 UTC on December 31st",
        ),
        pytest.param(
            "0 0 29 2 *",
            utc(2026, 1, 1),
            ZULU,
            utc(2024, 2, 29),
            id="Feb 29 looks back to the last leap year 2024",
        ),
    ],
)
def test_previous_at_or_before(
    expression: str, at: datetime, tz: ZoneInfo, expected: datetime
) -> None:
    fire = previous_at_or_before(parse_cron(expression), at, tz)
    assert fire == expected
    assert fire.tzinfo is UTC


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param("0 0 30 2 *", id="February 30th never exists"),
        pytest.param("0 0 31 4,6,9,11 *", id="the 31st never exists in thirty-day months"),
        pytest.param("0 0 30,31 FEB *", id="no listed day exists in February"),
    ],
)
def test_schedules_that_can_never_fire_are_reported_instead_of_searched_forever(
    expression: str,
) -> None:
    message = (
        f'schedule "{expression}" never fires: '
        "none of its days of the month exist in any of its months"
    )
    schedule = parse_cron(expression)
    with pytest.raises(CronError, match=f"^{re.escape(message)}$"):
        next_after(schedule, utc(2026, 1, 1), BERLIN)
    with pytest.raises(CronError, match=f"^{re.escape(message)}$"):
        previous_at_or_before(schedule, utc(2026, 1, 1), BERLIN)


def test_a_day_of_week_rescues_an_impossible_day_of_month_because_either_may_match() -> None:
    assert next_after(parse_cron("0 0 30 2 MON"), utc(2026, 1, 1), ZULU) == utc(2026, 2, 2)


@pytest.mark.parametrize(
    ("function", "name"),
    [
        pytest.param(next_after, "after", id="next_after rejects a naive datetime"),
        pytest.param(
            previous_at_or_before, "at", id="previous_at_or_before rejects a naive datetime"
        ),
    ],
)
def test_naive_datetimes_are_rejected(
    function: Callable[[CronSchedule, datetime, ZoneInfo], datetime], name: str
) -> None:
    message = f"{name} must be a timezone-aware datetime, got naive 2026-01-01T00:00:00"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        function(parse_cron("* * * * *"), FIXED_NAIVE_INSTANT, BERLIN)


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param("*/15 * * * *", id="every 15 minutes"),
        pytest.param("30 2 * * *", id="a daily time inside both DST transitions"),
        pytest.param("0 * * * *", id="hourly"),
        pytest.param("0,30 1-3 * * *", id="half-hourly around the transitions"),
        pytest.param("* 2 * * *", id="every minute of the hour that is skipped or repeated"),
    ],
)
@pytest.mark.parametrize(
    "day",
    [
        pytest.param(utc(2026, 3, 28), id="spring forward"),
        pytest.param(utc(2026, 10, 24), id="fall back"),
    ],
)
def test_search_agrees_with_minute_by_minute_oracle_across_dst(
    expression: str, day: datetime
) -> None:
    """Check both searches against a definition that is easy to trust.

    An instant fires if its Berlin wall clock matches the hour and minute fields and it is
    not the second pass through a repeated hour (fold=1). Walking every UTC minute of the
    DST weekend and asking both searches from every instant must agree with that.
    """
    schedule = parse_cron(expression)
    minutes = [day + timedelta(minutes=n) for n in range(3 * 24 * 60)]

    def fires(instant: datetime) -> bool:
        local = instant.astimezone(BERLIN)
        return local.minute in schedule.minutes and local.hour in schedule.hours and local.fold == 0

    fire_times = [instant for instant in minutes if fires(instant)]
    assert len(fire_times) >= 2
    for instant in minutes[: -24 * 60]:
        probe = instant + timedelta(seconds=30)
        expected_next = next(fire for fire in fire_times if fire > instant)
        assert next_after(schedule, instant, BERLIN) == expected_next
        assert next_after(schedule, probe, BERLIN) == expected_next
    for instant in minutes[24 * 60 :]:
        expected_previous = next(fire for fire in reversed(fire_times) if fire <= instant)
        assert previous_at_or_before(schedule, instant, BERLIN) == expected_previous
