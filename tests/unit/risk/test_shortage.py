"""Spot shortages from Karpenter's errors, hand-computed.

The prior: 900 s, worth two episodes. An episode learned with 20-episode half-life decay:
kept = 2 x 0.5^(1/20) = 1.93136; the mean becomes (900 x kept + length) / (kept + 1).
"""

from __future__ import annotations

import pytest

from controller.risk.shortage import (
    PRIOR_SHORTAGE_SECONDS,
    QUIET_SECONDS,
    ShortageState,
    expected_wait,
    launched,
    reported,
)

KEPT = 2 * 0.5 ** (1 / 20)


def test_no_error_no_shortage() -> None:
    assert expected_wait(ShortageState(), 0.0) == 0.0


def test_an_error_starts_a_shortage_of_the_prior_length() -> None:
    state = reported(ShortageState(), 100.0)
    assert state.started == 100.0
    assert expected_wait(state, 200.0) == PRIOR_SHORTAGE_SECONDS
    # More errors keep it on, from the first.
    state = reported(state, 400.0)
    assert (state.started, state.last_error) == (100.0, 400.0)


def errors(state: ShortageState, start: float, end: float) -> ShortageState:
    """Karpenter's errors every three minutes from `start` to `end`."""
    at = start
    while at <= end:
        state = reported(state, at)
        at += 180.0
    return state


def test_a_spot_launch_ends_it_and_its_length_is_learned() -> None:
    """Errors from 100 s; a spot node asked for at 3,700 s (ready later) ends it: 3,600 s."""
    state = launched(errors(ShortageState(), 100.0, 3700.0), 4000.0, requested=3700.0)
    assert state.started is None
    assert state.mean_seconds == pytest.approx((900 * KEPT + 3600) / (KEPT + 1))
    assert state.mean_seconds == pytest.approx(1820.9, abs=0.1)
    assert expected_wait(state, 4000.0) == 0.0
    # The next shortage is expected to last what was learned.
    assert expected_wait(reported(state, 5000.0), 5000.0) == pytest.approx(1820.9, abs=0.1)


def test_a_node_asked_for_before_the_shortage_says_nothing_of_it() -> None:
    state = reported(ShortageState(), 100.0)
    assert launched(state, 400.0, requested=50.0) == state


def test_a_shortage_no_error_reports_any_more_is_over_at_its_last_error() -> None:
    state = reported(reported(ShortageState(), 100.0), 400.0)
    assert expected_wait(state, 400.0 + QUIET_SECONDS) == PRIOR_SHORTAGE_SECONDS
    assert expected_wait(state, 401.0 + QUIET_SECONDS) == 0.0
    # It lasted 300 s, which is learned when the next error comes.
    later = reported(state, 5000.0)
    assert later.started == 5000.0
    assert later.mean_seconds == pytest.approx((900 * KEPT + 300) / (KEPT + 1))


def test_old_episodes_fade() -> None:
    """Forty hour-long shortages after the prior: the mean nears an hour."""
    state = ShortageState()
    for i in range(40):
        start = i * 10_000.0
        state = errors(state, start, start + 3600.0)
        state = launched(state, start + 3700.0, requested=start + 3600.0)
    assert 3400.0 < state.mean_seconds < 3600.0
