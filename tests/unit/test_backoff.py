"""The one backoff every retry uses: doubling, capped, jittered by up to half."""

from __future__ import annotations

import random

import pytest

from controller.backoff import Backoff


@pytest.mark.parametrize(
    ("failures", "low", "high"),
    [
        pytest.param(1, 1.0, 1.5, id="the first failure waits the initial delay, plus jitter"),
        pytest.param(2, 2.0, 3.0, id="each failure in a row doubles it"),
        pytest.param(4, 8.0, 12.0, id="the jitter is up to half the delay"),
        pytest.param(10, 60.0, 90.0, id="the delay stops at the maximum"),
    ],
)
def test_the_delay_doubles_to_a_cap_with_jitter(failures: int, low: float, high: float) -> None:
    random.seed(failures)
    delays = []
    for _ in range(200):
        backoff = Backoff(initial=1.0, maximum=60.0)
        delays.append([backoff.next_delay() for _ in range(failures)][-1])
    assert low <= min(delays) and max(delays) <= high
    assert max(delays) - min(delays) > (high - low) / 2, "jittered, not fixed"


def test_a_reset_starts_again_from_the_initial_delay() -> None:
    backoff = Backoff(initial=0.5, maximum=30.0)
    for _ in range(5):
        backoff.next_delay()
    backoff.reset()
    assert 0.5 <= backoff.next_delay() <= 0.75
    assert backoff.failures == 1
