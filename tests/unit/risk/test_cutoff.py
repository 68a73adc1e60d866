"""A schedule's next cutoff, kept per schedule and worked out again only once it has passed."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from controller.api.cron import next_after, parse_cron
from controller.risk import model

WEEKLY = "0 9 * * 1"  # Mondays at 09:00
ZONE = "Europe/Berlin"
FIXED_MONDAY_9 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC).timestamp()  # 09:00 in Berlin (CET)
WEEK = 7 * 86400.0


@pytest.fixture(autouse=True)
def no_cutoffs_held() -> Iterator[None]:
    model._CUTOFFS.clear()
    yield
    model._CUTOFFS.clear()


def worked_out(schedule: str, zone: str, now: float) -> float:
    """The cutoff from scratch, as every call made it before it was kept."""
    moment = datetime.fromtimestamp(now, UTC)
    return next_after(parse_cron(schedule), moment, ZoneInfo(zone)).timestamp()


@pytest.mark.parametrize(
    ("clocks", "want"),
    [
        pytest.param(
            [FIXED_MONDAY_9 - 3600, FIXED_MONDAY_9 - 60, FIXED_MONDAY_9 - 0.5],
            [FIXED_MONDAY_9] * 3,
            id="the same cutoff while it is ahead",
        ),
        pytest.param(
            [FIXED_MONDAY_9 - 60, FIXED_MONDAY_9, FIXED_MONDAY_9 + 1],
            [FIXED_MONDAY_9, FIXED_MONDAY_9 + WEEK, FIXED_MONDAY_9 + WEEK],
            id="at the cutoff, the next one (strictly after)",
        ),
        pytest.param(
            [FIXED_MONDAY_9 + 60, FIXED_MONDAY_9 - 60],
            [FIXED_MONDAY_9 + WEEK, FIXED_MONDAY_9],
            id="a clock that went back works it out again",
        ),
        pytest.param(
            [FIXED_MONDAY_9 - 60, FIXED_MONDAY_9 + 2 * WEEK + 60],
            [FIXED_MONDAY_9, FIXED_MONDAY_9 + 3 * WEEK],
            id="a clock that jumped past several cutoffs",
        ),
    ],
)
def test_a_kept_cutoff_is_the_one_worked_out_from_scratch(
    clocks: list[float], want: list[float]
) -> None:
    got = [model._next_cutoff(WEEKLY, ZONE, now) for now in clocks]
    assert got == want
    assert got == [worked_out(WEEKLY, ZONE, now) for now in clocks]


def test_passes_keep_one_entry_per_schedule_not_one_per_pass() -> None:
    for k in range(2000):  # a pass every 10 s for 5.5 hours, across a daily cutoff
        now = FIXED_MONDAY_9 - 3600 + 10.0 * k
        for schedule in (WEEKLY, "30 17 * * *"):
            assert model._next_cutoff(schedule, ZONE, now) == worked_out(schedule, ZONE, now)
    assert len(model._CUTOFFS) == 2


def test_the_kept_schedules_are_bounded() -> None:
    for minute in range(model.CUTOFFS_KEPT + 10):
        model._next_cutoff(f"{minute % 60} {minute // 60 % 24} * * *", "UTC", FIXED_MONDAY_9)
    assert len(model._CUTOFFS) <= model.CUTOFFS_KEPT
