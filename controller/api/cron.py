"""Standard 5-field cron expressions for recurring training deadlines.

A recurring deadline such as "every Friday 18:00 Europe/Berlin" is stored as a cron expression
plus a time zone. The controller, the CLI and the simulator must agree to the second on when
each cutoff falls, including across daylight-saving changes: if they differ, a job can be
admitted by one and counted as late by another. Keeping the parser and the evaluator here,
pure and with no third-party dependency, gives all three the same answer. It also keeps a
cron library, with its own reading of DST and of the day-of-month/day-of-week rule, out of
the controller image.

Semantics follow Vixie cron, since that is what people expect from a crontab line:

* A day matches if EITHER the day-of-month or the day-of-week matches when both fields are
  restricted. If either field starts with ``*`` (this includes ``*/2``, as in Vixie cron),
  the day must match both.
* Day-of-week accepts 0-7, where both 0 and 7 mean Sunday. ``*`` and ``a/n`` stop at 6, so
  that ``1/2`` means Monday, Wednesday, Friday and does not add Sunday by way of 7.
* Fire times are wall-clock times in the schedule's time zone. A time that does not exist
  (it falls in a spring-forward gap) does not fire: the next match after it does. A time
  that happens twice (in a fall-back overlap) fires once, at its first occurrence.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import MAXYEAR, MINYEAR, UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

__all__ = [
    "CronError",
    "CronSchedule",
    "next_after",
    "parse_cron",
    "previous_at_or_before",
]


class CronError(ValueError):
    """A cron expression is malformed, or a schedule can never fire.

    It is a ValueError so that code validating user input can catch one familiar type. It has
    its own class so that code that must tell a bad schedule apart from other bad values can.
    """


@dataclass(frozen=True)
class CronSchedule:
    """A parsed cron expression, expanded so that evaluating it is only set lookups.

    The expression is kept as written so error messages and logs show what the user wrote,
    not a normalised form. The two ``*_restricted`` flags record whether a day field started
    with ``*``. The expanded sets cannot tell ``*`` apart from an explicit full list such as
    ``1-31``, and the Vixie day rule depends on that difference.
    """

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    day_of_month_restricted: bool
    day_of_week_restricted: bool


@dataclass(frozen=True)
class _FieldSpec:
    """The limits of one field, so that all five fields share one parser and one set of messages.

    ``star_high`` can be below ``high`` because day-of-week accepts 7 for Sunday. Expanding
    ``*`` or ``a/n`` up to 7 would list Sunday twice, or add it where nobody asked for it.
    """

    name: str
    low: int
    high: int
    star_high: int
    names: Mapping[str, int]


_MONTH_NAMES: Mapping[str, int] = {
    name: number
    for number, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"),
        start=1,
    )
}
_DAY_NAMES: Mapping[str, int] = {
    name: number for number, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))
}

_FIELDS: tuple[_FieldSpec, ...] = (
    _FieldSpec("minute", 0, 59, 59, {}),
    _FieldSpec("hour", 0, 23, 23, {}),
    _FieldSpec("day-of-month", 1, 31, 31, {}),
    _FieldSpec("month", 1, 12, 12, _MONTH_NAMES),
    _FieldSpec("day-of-week", 0, 7, 6, _DAY_NAMES),
)

_MACROS: Mapping[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# Longest each month can be, so that "never fires" can be decided before any search starts.
_MAX_DAYS_IN_MONTH: Mapping[int, int] = {
    1: 31,
    2: 29,
    3: 31,
    4: 30,
    5: 31,
    6: 30,
    7: 31,
    8: 31,
    9: 30,
    10: 31,
    11: 30,
    12: 31,
}

# One full Gregorian cycle. The calendar repeats after it, so if nothing fires in this span
# nothing ever will. Schedules that the calendar makes impossible are rejected before any
# search starts, so in practice only a DST pathology could use up this bound. A five-year bound
# would be too short: Feb 29 can be eight years from the next one (2096 -> 2104).
_SEARCH_DAYS = 146_097
_ONE_DAY = timedelta(days=1)


@lru_cache(maxsize=1024)
def parse_cron(expr: str) -> CronSchedule:
    """Parse a cron expression once, so that evaluating it later can never fail on syntax.

    Raises CronError with a message that names the field and what is wrong with it. The
    message is meant to go straight back to whoever wrote the expression.
    """
    text = expr.strip()
    if text.startswith("@"):
        expanded = _MACROS.get(text.lower())
        if expanded is None:
            supported = ", ".join(_MACROS)
            raise CronError(f'unknown macro "{text}" (supported: {supported})')
        text = expanded
    fields = text.split()
    if len(fields) != len(_FIELDS):
        names = " ".join(spec.name for spec in _FIELDS)
        raise CronError(f"expected {len(_FIELDS)} fields ({names}), got {len(fields)}")
    minutes, hours, days_of_month, months, days_of_week = (
        _parse_field(field, spec) for field, spec in zip(fields, _FIELDS, strict=True)
    )
    return CronSchedule(
        expression=expr,
        minutes=minutes,
        hours=hours,
        days_of_month=days_of_month,
        months=months,
        days_of_week=frozenset(day % 7 for day in days_of_week),
        day_of_month_restricted=not fields[2].startswith("*"),
        day_of_week_restricted=not fields[4].startswith("*"),
    )


def next_after(schedule: CronSchedule, after: datetime, tz: ZoneInfo) -> datetime:
    """Return the first fire time strictly after ``after``, as an aware datetime in UTC.

    "Strictly after" lets a caller step from one cutoff to the next by feeding the result
    back in. The answer is in UTC because deadlines are compared across components and
    stored, and a UTC instant has only one meaning.
    """
    _require_aware(after, "after")
    _require_can_fire(schedule)
    after_utc = after.astimezone(UTC)
    # A fire time's wall clock is never earlier than the wall clock of ``after``. That holds
    # even when ``after`` is the second pass through a fall-back hour, because fire times
    # always take the first pass. So the search can start at the minute ``after`` is in, and
    # the UTC comparison below drops whatever in that range is not actually later.
    start = after.astimezone(tz).replace(tzinfo=None, second=0, microsecond=0, fold=0)
    room = (date.max - _ONE_DAY - start.date()).days
    last = start.date() + timedelta(days=max(-1, min(_SEARCH_DAYS, room)))
    for wall in _walls_forward(schedule, start, last):
        fire = _resolve(wall, tz)
        if fire is not None and fire > after_utc:
            return fire
    raise _search_exhausted(schedule, tz, start.date(), last)


def previous_at_or_before(schedule: CronSchedule, at: datetime, tz: ZoneInfo) -> datetime:
    """Return the latest fire time at or before ``at``, as an aware datetime in UTC.

    This gives "the cutoff that just passed". It is inclusive so that a check that runs
    exactly at a deadline counts that deadline as passed.
    """
    _require_aware(at, "at")
    _require_can_fire(schedule)
    at_utc = at.astimezone(UTC)
    local = at.astimezone(tz)
    # If ``at`` is in the second pass through a fall-back hour, fire times from the first
    # pass with a later wall clock (02:50 on the first pass comes before 02:10 on the second)
    # are still at or before it. Starting from the wall clock that ``at`` would have under the
    # first pass's offset covers them. Outside an overlap this is simply the wall clock of ``at``.
    shift = _utc_offset(local.replace(fold=0)) - _utc_offset(local)
    start = (local.replace(tzinfo=None, fold=0) + shift).replace(second=0, microsecond=0)
    room = (start.date() - date.min - _ONE_DAY).days
    last = start.date() - timedelta(days=max(-1, min(_SEARCH_DAYS, room)))
    for wall in _walls_backward(schedule, start, last):
        fire = _resolve(wall, tz)
        if fire is not None and fire <= at_utc:
            return fire
    raise _search_exhausted(schedule, tz, start.date(), last)


def _parse_field(text: str, spec: _FieldSpec) -> frozenset[int]:
    """Expand one field, naming the whole field in errors since that is what the user typed."""
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise _field_error(spec, text, "empty list element")
        values.update(_parse_part(part, text, spec))
    return frozenset(values)


def _parse_part(part: str, text: str, spec: _FieldSpec) -> range:
    """Expand one list element; a ``range`` keeps steps exact without building lists by hand."""
    base, slash, step_text = part.partition("/")
    step = 1
    if slash:
        if "/" in step_text:
            raise _field_error(spec, text, 'more than one "/"')
        if not step_text:
            raise _field_error(spec, text, 'missing step after "/"')
        if not _is_number(step_text):
            raise _field_error(spec, text, f'step "{step_text}" is not a number')
        step = int(step_text)
        if step < 1:
            raise _field_error(spec, text, "step must be at least 1")
        if not base:
            raise _field_error(spec, text, 'missing value before "/"')
    if base == "*":
        return range(spec.low, spec.star_high + 1, step)
    if "-" in base:
        start_text, _, end_text = base.partition("-")
        if not start_text or not end_text or "-" in end_text:
            raise _field_error(spec, text, f'malformed range "{base}"')
        start = _parse_value(start_text, text, spec)
        end = _parse_value(end_text, text, spec)
        if start > end:
            raise _field_error(spec, text, f"range start {start} is greater than end {end}")
        return range(start, end + 1, step)
    start = _parse_value(base, text, spec)
    # "a/n" runs from a to the end of the field, as in cronie; a bare "a" is just itself.
    end = spec.star_high if slash else start
    return range(start, max(start, end) + 1, step)


def _parse_value(token: str, text: str, spec: _FieldSpec) -> int:
    """Read one number or name; names are matched case-insensitively, as crontabs allow."""
    if _is_number(token):
        value = int(token)
        if not spec.low <= value <= spec.high:
            raise _field_error(spec, text, f"value {value} out of range {spec.low}-{spec.high}")
        return value
    if spec.names and token.isalpha():
        value_or_none = spec.names.get(token.upper())
        if value_or_none is None:
            raise _field_error(spec, text, f'unknown name "{token}"')
        return value_or_none
    raise _field_error(spec, text, f'value "{token}" is not a number')


def _is_number(token: str) -> bool:
    """Accept ASCII digits only: ``str.isdigit`` also accepts "²", which ``int`` rejects."""
    return token.isascii() and token.isdigit()


def _field_error(spec: _FieldSpec, text: str, reason: str) -> CronError:
    """Give every field error the same shape, so that users learn to read one format."""
    return CronError(f'{spec.name} field "{text}": {reason}')


def _require_aware(moment: datetime, name: str) -> None:
    """Refuse naive datetimes, which would silently be read in the host's zone and be wrong."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(
            f"{name} must be a timezone-aware datetime, got naive {moment.isoformat()}"
        )


def _require_can_fire(schedule: CronSchedule) -> None:
    """Reject schedules the calendar makes impossible, such as Feb 30, without searching.

    When both day fields are restricted, any listed weekday will do, and every month has every
    weekday. Otherwise a day must be in ``days_of_month``, so some listed month must be long
    enough for the smallest listed day. Over a 400-year cycle every date that exists falls on
    every weekday, so this test is exact for the calendar.
    """
    if schedule.day_of_month_restricted and schedule.day_of_week_restricted:
        return
    first_day = min(schedule.days_of_month)
    if any(first_day <= _MAX_DAYS_IN_MONTH[month] for month in schedule.months):
        return
    raise CronError(
        f'schedule "{schedule.expression}" never fires: '
        "none of its days of the month exist in any of its months"
    )


def _search_exhausted(schedule: CronSchedule, tz: ZoneInfo, one: date, other: date) -> CronError:
    """Report the span that was searched, so a DST oddity or a date-range edge can be traced.

    Schedules that the calendar rules out never get here; see ``_require_can_fire``.
    """
    first, last = sorted((one, other))
    return CronError(
        f'schedule "{schedule.expression}" never fires: no match in {tz.key} local time '
        f"from {first.isoformat()} to {last.isoformat()}"
    )


def _utc_offset(moment: datetime) -> timedelta:
    """Return the UTC offset; a tzinfo that returns None here cannot place a deadline."""
    offset = moment.utcoffset()
    if offset is None:
        raise ValueError(f"time zone {moment.tzinfo!r} gives no UTC offset for {moment}")
    return offset


def _resolve(wall: datetime, tz: ZoneInfo) -> datetime | None:
    """Map a naive wall-clock time to its fire instant in UTC, or None if it does not exist.

    ``fold=0`` picks the first pass through a fall-back hour, which makes an ambiguous time
    fire once. A time in a spring-forward gap does not survive the round trip through UTC,
    and that is how such times are found without asking the zone for its transitions.
    """
    instant = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    if instant.astimezone(tz).replace(tzinfo=None) != wall:
        return None
    return instant


def _walls_forward(schedule: CronSchedule, start: datetime, last: date) -> Iterator[datetime]:
    """Yield matching wall-clock minutes from ``start`` on, skipping whole days and hours."""
    hours = sorted(schedule.hours)
    minutes = sorted(schedule.minutes)
    first_day = start.date()
    for day in _days_forward(schedule, first_day, last):
        on_first_day = day == first_day
        for hour in hours:
            if on_first_day and hour < start.hour:
                continue
            on_first_hour = on_first_day and hour == start.hour
            for minute in minutes:
                if on_first_hour and minute < start.minute:
                    continue
                yield datetime.combine(day, time(hour, minute))


def _walls_backward(schedule: CronSchedule, start: datetime, last: date) -> Iterator[datetime]:
    """Yield matching wall-clock minutes from ``start`` back to ``last``, latest first."""
    hours = sorted(schedule.hours, reverse=True)
    minutes = sorted(schedule.minutes, reverse=True)
    first_day = start.date()
    for day in _days_backward(schedule, first_day, last):
        on_first_day = day == first_day
        for hour in hours:
            if on_first_day and hour > start.hour:
                continue
            on_first_hour = on_first_day and hour == start.hour
            for minute in minutes:
                if on_first_hour and minute > start.minute:
                    continue
                yield datetime.combine(day, time(hour, minute))


def _days_forward(schedule: CronSchedule, first: date, last: date) -> Iterator[date]:
    """Yield matching days, jumping over whole months the schedule excludes."""
    day = first
    while day <= last:
        if day.month not in schedule.months:
            if day.year == MAXYEAR and day.month == 12:
                return
            day = date(day.year + day.month // 12, day.month % 12 + 1, 1)
            continue
        if _day_matches(schedule, day):
            yield day
        day += _ONE_DAY


def _days_backward(schedule: CronSchedule, first: date, last: date) -> Iterator[date]:
    """Yield matching days from ``first`` back to ``last``, jumping over excluded months."""
    day = first
    while day >= last:
        if day.month not in schedule.months:
            if day.year == MINYEAR and day.month == 1:
                return
            day = day.replace(day=1) - _ONE_DAY
            continue
        if _day_matches(schedule, day):
            yield day
        day -= _ONE_DAY


def _day_matches(schedule: CronSchedule, day: date) -> bool:
    """Apply the Vixie rule: OR when both day fields are restricted, AND otherwise."""
    in_month = day.day in schedule.days_of_month
    in_week = day.isoweekday() % 7 in schedule.days_of_week
    if schedule.day_of_month_restricted and schedule.day_of_week_restricted:
        return in_month or in_week
    return in_month and in_week
