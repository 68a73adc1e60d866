"""Demand forecasts per pool and the warm pool they ask for, computed by hand.

np.quantile interpolates linearly: of n sorted changes, quantile q sits at index q (n - 1).
"""

from __future__ import annotations

import pytest

from controller.risk.forecast import DemandForecast, forecast_demand, warm_pool_target


@pytest.mark.parametrize(
    ("running", "pending", "changes", "want"),
    [
        pytest.param(
            10,
            6,
            (0.0, 4.0, 8.0, 12.0),
            DemandForecast("a100", 22.0, 26.8, True),
            id="4 weeks of history: 16 now + median 6 = 22, + p90 (8 + 0.7 x 4) = 26.8",
        ),
        pytest.param(
            10,
            0,
            (2.0, -2.0),
            DemandForecast("a100", 10.0, 11.6, True),
            id="2 weeks of history is enough: 10 now + median 0, + p90 (-2 + 0.9 x 4) = 11.6",
        ),
        pytest.param(
            4,
            2,
            (-10.0, -6.0, -30.0),
            DemandForecast("a100", 0.0, 0.0, True),
            id="history falling by more than the 6 GPUs asked for now gives 0, never negative",
        ),
        pytest.param(
            4,
            2,
            (-4.0, -8.0, 0.0),
            DemandForecast("a100", 2.0, 5.2, True),
            id="history falling: 6 now - median 4 = 2, p90 (-4 + 0.8 x 4) = -0.8 gives 5.2",
        ),
        pytest.param(
            10,
            6,
            (),
            DemandForecast("a100", 16.0, 19.0, False),
            id="no history: p50 is the 16 GPUs asked for now, p90 adds half of the 6 pending",
        ),
        pytest.param(
            10,
            6,
            (40.0,),
            DemandForecast("a100", 16.0, 19.0, False),
            id="1 week of history is not enough: as without history",
        ),
        pytest.param(
            8, 0, (), DemandForecast("a100", 8.0, 8.0, False), id="no history, nothing pending"
        ),
    ],
)
def test_forecast_demand(
    running: float, pending: float, changes: tuple[float, ...], want: DemandForecast
) -> None:
    got = forecast_demand(
        "a100", running_gpus=running, pending_gpus=pending, historical_changes=changes
    )
    assert got.pool == want.pool
    assert got.from_history == want.from_history
    assert (got.p50_gpus, got.p90_gpus) == pytest.approx((want.p50_gpus, want.p90_gpus))


@pytest.mark.parametrize(
    ("p90", "in_use", "min_gpus", "max_gpus", "want"),
    [
        pytest.param(20.0, 8.0, 0, 64, 12, id="p90 20 with 8 in use: 12 more"),
        pytest.param(20.2, 8.0, 0, 64, 13, id="a fraction of a GPU rounds up: 12.2 -> 13"),
        pytest.param(20.0, 0.0, 0, 64, 20, id="nothing in use: the whole p90"),
        pytest.param(20.0, 32.0, 0, 64, 0, id="more in use than the p90: none"),
        pytest.param(20.0, 32.0, 4, 64, 4, id="more in use than the p90, but at least the minimum"),
        pytest.param(20.0, 18.0, 4, 64, 4, id="2 wanted is raised to the minimum of 4"),
        pytest.param(200.0, 8.0, 0, 64, 64, id="192 wanted is capped at the maximum of 64"),
        pytest.param(20.0, 8.0, 12, 12, 12, id="minimum equal to maximum pins the target"),
    ],
)
def test_warm_pool_target_is_the_p90_beyond_what_is_in_use_within_bounds(
    p90: float, in_use: float, min_gpus: int, max_gpus: int, want: int
) -> None:
    forecast = DemandForecast("a100", p50_gpus=min(p90, 10.0), p90_gpus=p90, from_history=True)
    got = warm_pool_target(forecast, in_use_gpus=in_use, min_gpus=min_gpus, max_gpus=max_gpus)
    assert (got, type(got)) == (want, int)


def test_without_history_the_warm_pool_covers_half_the_pending_queue_again() -> None:
    """8 running + 8 pending: p90 20; beyond the 8 in use, 12 GPUs kept idle for them."""
    forecast = forecast_demand("a100", running_gpus=8, pending_gpus=8)
    assert warm_pool_target(forecast, in_use_gpus=8, min_gpus=0, max_gpus=64) == 12
