"""Demand per pool over the next provisioning-latency horizon, with quantiles.

Seasonal-naive: how demand moved over the same horizon at the same time of week in past weeks
(from Prometheus history), added to what is asked for now (running plus pending GPUs). Without
history the median is the live demand and the upper quantile adds half the pending queue again
(arrivals like those already waiting), so a controller without Prometheus warms capacity for
what is queueing and little more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DemandForecast:
    pool: str
    p50_gpus: float
    p90_gpus: float
    from_history: bool


def forecast_demand(
    pool: str,
    *,
    running_gpus: float,
    pending_gpus: float,
    historical_changes: Sequence[float] = (),
) -> DemandForecast:
    """`historical_changes`: demand at (t - k weeks + horizon) minus at (t - k weeks), per k."""
    current = running_gpus + pending_gpus
    if len(historical_changes) >= 2:
        changes = np.asarray(historical_changes, dtype=np.float64)
        p50, p90 = np.quantile(changes, [0.5, 0.9])
        return DemandForecast(
            pool, max(current + float(p50), 0.0), max(current + float(p90), 0.0), True
        )
    return DemandForecast(pool, current, current + pending_gpus * 0.5, False)


def warm_pool_target(
    forecast: DemandForecast, *, in_use_gpus: float, min_gpus: int, max_gpus: int
) -> int:
    """Idle GPUs to keep up: the upper forecast beyond what workloads use now, within bounds.

    Measured against GPUs in use rather than GPUs up: the placeholders that hold the warm pool
    keep nodes up themselves, so a target net of capacity up would fall as soon as the warm pool
    filled, KEDA would scale the placeholders away, and the pool would oscillate.
    """
    wanted = int(np.ceil(max(forecast.p90_gpus - in_use_gpus, 0.0)))
    return min(max(wanted, min_gpus), max_gpus)
