"""Summaries the soak and the benches report: percentiles, and a growth rate per hour.

Pure functions over plain numbers, rounded as the reports print them, so two runs' JSON
summaries compare line by line.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

QUANTILES = (50, 90, 99)


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p90, p99 (linear interpolation, numpy's default) and max, to the millisecond;
    every one None when there are no values."""
    if not values:
        return {"p50": None, "p90": None, "p99": None, "max": None}
    p50, p90, p99 = np.percentile(np.asarray(values, dtype=float), QUANTILES)
    return {
        "p50": round(float(p50), 3),
        "p90": round(float(p90), 3),
        "p99": round(float(p99), 3),
        "max": round(max(values), 3),
    }


def slope_per_hour(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of `(seconds, value)` points, per hour, to two decimals; None with
    fewer than three points (two always fit a line exactly, and say nothing of a trend)."""
    if len(points) < 3:
        return None
    hours = np.asarray([(at - points[0][0]) / 3600 for at, _ in points], dtype=float)
    values = np.asarray([value for _, value in points], dtype=float)
    slope, _ = np.polyfit(hours, values, 1)
    return round(float(slope), 2)
