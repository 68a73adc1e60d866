"""What the controller's /metrics says of its passes: the reconcile histogram and errors.

The soak takes the pass latency from the log and, as a cross-check that does not depend on
the log, from `quartermaster_reconcile_duration_seconds` as Prometheus would scrape it: two
scrapes, the difference of their buckets, a quantile interpolated within its bucket as
`histogram_quantile` does. Parsing and the quantile are pure; `scrape` is the one GET.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

DURATION = "quartermaster_reconcile_duration_seconds"
ERRORS = "quartermaster_reconcile_errors_total"


@dataclass(frozen=True)
class Scrape:
    """What /metrics said: the reconcile histogram, the error counter, the series count."""

    buckets: tuple[tuple[float, float], ...]
    """(upper bound, cumulative count), ascending."""
    count: float
    total_seconds: float
    errors: float
    series: int


def parse_scrape(text: str) -> Scrape:
    """The figures of one /metrics page (Prometheus text format)."""
    buckets: list[tuple[float, float]] = []
    count = total = errors = 0.0
    series = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series += 1
            if sample.name == f"{DURATION}_bucket":
                buckets.append((float(sample.labels["le"]), sample.value))
            elif sample.name == f"{DURATION}_count":
                count = sample.value
            elif sample.name == f"{DURATION}_sum":
                total = sample.value
            elif sample.name == ERRORS:
                errors = sample.value
    return Scrape(tuple(sorted(buckets)), count, total, errors, series)


def scrape(url: str) -> Scrape | None:
    """GET the metrics page at `url`; None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None
    return parse_scrape(text)


def bucket_quantile(start: Scrape, end: Scrape, q: float) -> str:
    """Quantile of the passes between two scrapes, interpolated within its bucket (as
    Prometheus's histogram_quantile does); '>X' when it falls in the +Inf bucket, 'n/a' when no
    pass ended between them."""
    before = dict(start.buckets)
    deltas = [(le, cum - before.get(le, 0.0)) for le, cum in end.buckets]
    total = deltas[-1][1] if deltas else 0.0
    if total <= 0:
        return "n/a"
    rank = q * total
    lower, below = 0.0, 0.0
    for le, cum in deltas:
        if cum >= rank:
            if le == float("inf"):
                return f">{lower:g}"
            share = (rank - below) / (cum - below) if cum > below else 1.0
            return f"{lower + (le - lower) * share:.3f}"
        lower, below = le, cum
    return "n/a"
