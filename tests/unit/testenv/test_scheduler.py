"""The load generator's scheduler: due order, recurring actions kept to their rate, and lag.

Every action is due before the deadline the test runs to, so nothing here waits on the clock:
`run_until` runs what is due and returns.
"""

from __future__ import annotations

import time

from testenv.scheduler import Scheduler


def test_due_actions_run_in_due_order_and_the_lag_is_kept() -> None:
    scheduler = Scheduler()
    ran: list[str] = []
    now = time.monotonic()
    scheduler.at(now - 1.0, lambda: ran.append("second"))
    scheduler.at(now - 2.0, lambda: ran.append("first"))
    scheduler.at(now - 1.0, lambda: ran.append("third, scheduled after second"))
    scheduler.at(now + 3600, lambda: ran.append("not yet"))
    scheduler.run_until(now)
    assert ran == ["first", "second", "third, scheduled after second"]
    assert scheduler.max_lag >= 2.0


def test_a_recurring_action_catches_up_from_its_due_times() -> None:
    """Rescheduled from when it was due, not from when it ran: a late generator catches up
    instead of lowering the rate."""
    scheduler = Scheduler()
    ran: list[int] = []
    now = time.monotonic()
    scheduler.every(now - 0.35, 0.1, lambda: ran.append(len(ran)))
    scheduler.run_until(now)
    assert ran == [0, 1, 2, 3]  # due at -0.35, -0.25, -0.15 and -0.05 s; the next is after now


def test_clear_drops_what_was_scheduled() -> None:
    scheduler = Scheduler()
    ran: list[str] = []
    now = time.monotonic()
    scheduler.at(now - 1.0, lambda: ran.append("dropped"))
    scheduler.clear()
    scheduler.run_until(now)
    assert ran == []
