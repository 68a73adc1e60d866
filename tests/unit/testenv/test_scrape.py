"""The reconcile histogram read from a constructed /metrics page, and its bucket quantiles."""

from __future__ import annotations

import pytest

from testenv.scrape import Scrape, bucket_quantile, parse_scrape

PAGE = """\
# HELP quartermaster_reconcile_duration_seconds Seconds a reconcile pass took.
# TYPE quartermaster_reconcile_duration_seconds histogram
quartermaster_reconcile_duration_seconds_bucket{le="0.5"} 6.0
quartermaster_reconcile_duration_seconds_bucket{le="0.1"} 2.0
quartermaster_reconcile_duration_seconds_bucket{le="+Inf"} 10.0
quartermaster_reconcile_duration_seconds_count 10.0
quartermaster_reconcile_duration_seconds_sum 4.5
# HELP quartermaster_reconcile_errors_total Passes that failed.
# TYPE quartermaster_reconcile_errors_total counter
quartermaster_reconcile_errors_total 3.0
# HELP quartermaster_build_info Build.
# TYPE quartermaster_build_info gauge
quartermaster_build_info{version="0.1.0"} 1.0
"""


def test_a_page_gives_the_histogram_sorted_the_errors_and_the_series() -> None:
    assert parse_scrape(PAGE) == Scrape(
        buckets=((0.1, 2.0), (0.5, 6.0), (float("inf"), 10.0)),
        count=10.0,
        total_seconds=4.5,
        errors=3.0,
        series=7,
    )


def scraped(*cumulative: float) -> Scrape:
    """Buckets 0.1, 0.5 and +Inf with these cumulative counts."""
    bounds = (0.1, 0.5, float("inf"))
    return Scrape(tuple(zip(bounds, cumulative, strict=True)), cumulative[-1], 0.0, 0.0, 0)


@pytest.mark.parametrize(
    ("start", "end", "q", "want"),
    [
        pytest.param(
            scraped(0, 0, 0), scraped(2, 6, 10), 0.5, "0.400", id="interpolated within its bucket"
        ),
        pytest.param(
            scraped(2, 6, 10),
            scraped(4, 8, 12),
            0.5,
            "0.050",
            id="only the passes between the scrapes count",
        ),
        pytest.param(scraped(0, 0, 0), scraped(2, 6, 10), 0.99, ">0.5", id="in the +Inf bucket"),
        pytest.param(scraped(2, 6, 10), scraped(2, 6, 10), 0.5, "n/a", id="no pass between"),
    ],
)
def test_bucket_quantile(start: Scrape, end: Scrape, q: float, want: str) -> None:
    assert bucket_quantile(start, end, q) == want
