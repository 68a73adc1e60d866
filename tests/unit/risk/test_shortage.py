"""Spot shortages from Karpenter's errors, hand-computed.

The prior: 900 s, worth two episodes. An episode learned with 20-episode half-life decay:
kept = 2 x 0.5^(1/20) = 1.93187; the mean becomes (900 x kept + length) / (kept + 1). An
episode cut off (its zone went quiet after a launch in another) adds its length to the time
short and no episode: the mean becomes mean + length / weight.

Per zone: a pool of zones a and b is short only while both are; then a launch waits for the
first to come back, mean / 2 (memoryless, independent zones).
"""

from __future__ import annotations

import pytest

from controller.risk.shortage import (
    PRIOR_SHORTAGE_SECONDS,
    QUIET_SECONDS,
    ShortageState,
    expected_wait,
    expire,
    launched,
    reported,
    short_zones,
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


# ------------------------------------------------------------------------------ per zone
AB = ShortageState(zones=frozenset({"a", "b"}))
"""A pool that may launch in zones a and b."""


def error(zones: set[str], at: float) -> tuple[str, float, frozenset[str]]:
    return ("error", at, frozenset(zones))


def launch(zone: str | None, requested: float) -> tuple[str, float, str | None]:
    return ("launch", requested, zone)


@pytest.mark.parametrize(
    ("steps", "now", "short", "wait"),
    [
        pytest.param([error({"a"}, 100)], 200, {"a"}, 0.0, id="one zone of two short: not short"),
        pytest.param(
            [error({"a"}, 100), error({"b"}, 150)],
            200,
            {"a", "b"},
            450.0,
            id="both short, from errors of each: the first back, 900 / 2",
        ),
        pytest.param(
            [error(set(), 100)],
            200,
            {"a", "b"},
            450.0,
            id="an error whose NodeClaim names no zone marks all the pool's zones",
        ),
        pytest.param(
            [error({"a", "b"}, 100)],
            200,
            {"a", "b"},
            450.0,
            id="an error whose NodeClaim could go to both",
        ),
        pytest.param(
            [error(set(), 100), launch("b", 400)],
            450,
            {"a"},
            0.0,
            id="a launch in zone b ends b's only: a still short, the pool not",
        ),
        pytest.param(
            [error(set(), 100), launch(None, 400)],
            450,
            set(),
            0.0,
            id="a launch whose zone is not known ends every zone's",
        ),
        pytest.param(
            [error(set(), 100), launch("b", 400), error({"b"}, 500)],
            550,
            {"a", "b"},
            ((900 * KEPT + 300) / (KEPT + 1)) / 2,
            id="b short again while a is still: short, the learned mean over two",
        ),
        pytest.param(
            [error({"c"}, 100), error({"a"}, 100)],
            200,
            {"a", "c"},
            0.0,
            id="a zone the pool does not launch in counts for nothing",
        ),
    ],
)
def test_a_pool_is_short_when_every_zone_is(
    steps: list[tuple[str, float, object]], now: float, short: set[str], wait: float
) -> None:
    state = AB
    for what, at, where in steps:
        if what == "error":
            assert isinstance(where, frozenset)
            state = reported(state, at, where)
        else:
            assert where is None or isinstance(where, str)
            state = launched(state, at + 300, requested=at, zone=where)
    assert set(short_zones(state, now)) == short
    assert expected_wait(state, now) == pytest.approx(wait)
    assert (state.started is not None) == (wait > 0)


def test_since_when_a_pool_is_short_is_when_its_last_zone_became_short() -> None:
    state = reported(reported(AB, 100.0, {"a"}), 250.0, {"b"})
    assert state.started == 250.0
    assert reported(AB, 100.0, {"a"}).started is None


def test_a_zone_cut_off_by_a_launch_elsewhere_adds_time_not_an_episode() -> None:
    """Both zones short from 0, errors until 600; a node asked for in b at 600 ends b's: 600 s
    learned, weight kept + 1. a then goes quiet (Karpenter launches in b): it was short at
    least 600 s, which adds to the time short and not to the episodes: mean =
    (900 x kept + 600 + 600) / (kept + 1) = 1,002.3 s. Learned as an episode of 600 s, it would
    make the mean shrink toward the time until the first zone came back."""
    state = errors(AB, 0.0, 600.0)
    state = launched(reported(state, 600.0, frozenset()), 900.0, requested=600.0, zone="b")
    assert state.mean_seconds == pytest.approx((900 * KEPT + 600) / (KEPT + 1))
    assert short_zones(state, 700.0)["a"].cut_off
    quiet = 600.0 + QUIET_SECONDS + 1
    assert expected_wait(state, quiet) == 0.0
    over = expire(state, quiet)
    assert over.short == {}
    assert over.mean_seconds == pytest.approx((900 * KEPT + 1200) / (KEPT + 1))
    assert over.mean_seconds == pytest.approx(1002.3, abs=0.1)
    assert over.weight == pytest.approx(KEPT + 1)


def test_a_zone_that_goes_quiet_with_no_launch_anywhere_is_an_episode_as_before() -> None:
    state = reported(reported(AB, 100.0, frozenset()), 400.0, frozenset())
    over = expire(state, 400.0 + QUIET_SECONDS + 1)
    # Both zones' episodes of 300 s, learned one after the other (a, then b).
    once = (900 * KEPT + 300) / (KEPT + 1)
    kept_twice = (KEPT + 1) * 0.5 ** (1 / 20)
    assert over.mean_seconds == pytest.approx((once * kept_twice + 300) / (kept_twice + 1))
