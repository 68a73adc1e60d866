"""The wall clock a test injects: what the code under test reads as "now", moved by the test.

A test that runs on this clock never reads the real one, so it passes on any date. A literal
start instant is fine (name it `FIXED_...`, see tests/unit/test_no_dates_as_now.py) as long as
everything the test compares with it reads this clock too: the loop, the reconciler and the
Event recorder share one.
"""

from __future__ import annotations

from datetime import datetime, timedelta


class Clock:
    """A settable wall clock: `clock()` is the current instant, `advance` moves it forward."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("a clock's start must carry a time zone")
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
