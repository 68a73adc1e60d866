"""The loop's pacing rule: how long a pass waits after a wake-up or a due resync."""

from __future__ import annotations

import pytest

from controller.reconcile.loop import wait_before_pass

NEVER = float("-inf")


@pytest.mark.parametrize(
    ("last_pass_started", "now", "woken", "want"),
    [
        pytest.param(NEVER, 100.0, True, 0.3, id="the first wake-up waits only the quiet period"),
        pytest.param(NEVER, 100.0, False, 0.0, id="the first pass not woken starts at once"),
        pytest.param(
            100.0, 100.5, True, 1.5, id="a wake-up soon after a pass waits out the interval"
        ),
        pytest.param(
            100.0, 101.9, True, 0.3, id="a wake-up near the interval's end waits the quiet period"
        ),
        pytest.param(
            100.0, 105.0, True, 0.3, id="a wake-up long after a pass waits the quiet period"
        ),
        pytest.param(100.0, 100.5, False, 1.5, id="a resync or retry also waits out the interval"),
        pytest.param(100.0, 105.0, False, 0.0, id="a resync long after a pass starts at once"),
    ],
)
def test_wait_before_pass(last_pass_started: float, now: float, woken: bool, want: float) -> None:
    waited = wait_before_pass(
        now=now,
        last_pass_started=last_pass_started,
        min_interval_seconds=2.0,
        debounce_seconds=0.3,
        woken=woken,
    )
    assert waited == pytest.approx(want)


@pytest.mark.parametrize("rate", [pytest.param(r, id=f"{r} events a second") for r in (1, 10, 100)])
def test_steady_events_cost_at_most_one_pass_per_interval(rate: int) -> None:
    """Events arrive all the time, each waking the loop; passes take 0.2 s. Driven on a
    virtual clock through the rule, a minute costs at most 60 / interval + 1 passes."""
    interval, debounce, duration = 2.0, 0.3, 0.2
    now, last, passes = 0.0, NEVER, 0
    while True:
        now += wait_before_pass(
            now=now,
            last_pass_started=last,
            min_interval_seconds=interval,
            debounce_seconds=debounce,
            woken=True,
        )
        if now >= 60.0:
            break
        last, passes = now, passes + 1
        now += max(duration, 1.0 / rate)  # the next event arrives during or after the pass
    assert passes <= 60.0 / interval + 1
    assert passes >= 60.0 / (interval + debounce + duration)
