"""The report's summaries: percentiles and a slope per hour, on numbers with known answers."""

from __future__ import annotations

import pytest

from testenv.stats import percentiles, slope_per_hour


def test_percentiles_interpolate_and_round_to_the_millisecond() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentiles(values) == {"p50": 50.5, "p90": 90.1, "p99": 99.01, "max": 100.0}
    assert percentiles([0.12345]) == {"p50": 0.123, "p90": 0.123, "p99": 0.123, "max": 0.123}


def test_no_values_have_no_percentiles() -> None:
    assert percentiles([]) == {"p50": None, "p90": None, "p99": None, "max": None}


@pytest.mark.parametrize(
    ("points", "want"),
    [
        pytest.param([(0.0, 80.0), (1800.0, 81.0), (3600.0, 82.0)], 2.0, id="2 a hour"),
        pytest.param(
            [(100.0, 90.0), (700.0, 89.0), (1300.0, 88.0), (1900.0, 87.0)],
            -6.0,
            id="falling, from a start that is not zero",
        ),
        pytest.param([(0.0, 80.0), (3600.0, 90.0)], None, id="two points say nothing"),
    ],
)
def test_slope_per_hour(points: list[tuple[float, float]], want: float | None) -> None:
    assert slope_per_hour(points) == want
