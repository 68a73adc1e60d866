"""How urgent a waiting workload is, from its slack: the ladder the priority boosts climb.

The controller lowers the effective priority of waiting work by its urgency level (see
`controller.decide.boost`), so Kueue admits the tightest deadlines of a queue first; the risk
model orders a queue the same way, so that what it predicts is the order Kueue will follow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

URGENCY_BASE_SECONDS = 3600.0
URGENCY_RATIO = 4.0
LEVELS = 5
"""Levels 0 (under an hour of slack) to 4 (over 64 hours, or no deadline)."""


def chance_to_finish(time_left: float, mean_seconds: float, sigma: float) -> float:
    """The chance that a log-normal runtime of mean `mean_seconds` and shape `sigma` ends
    within `time_left`: whether a deadline can still be made by a workload started now.
    Judged from the spread, not the mean: a point estimate calls savable work lost (a job
    expected to run 5 h and due in 4.5 h makes it 38 % of the time at sigma 0.25)."""
    if time_left <= 0:
        return 0.0
    if mean_seconds <= 0:
        return 1.0
    if sigma <= 0:
        return 1.0 if mean_seconds <= time_left else 0.0
    mu = math.log(mean_seconds) - sigma * sigma / 2
    z = (math.log(time_left) - mu) / sigma
    return 0.5 * math.erfc(-z / math.sqrt(2))


def urgency_level(slack_seconds: float | None) -> int:
    """0 for the most urgent; LEVELS - 1 for work with a day's or more slack, or no deadline."""
    if slack_seconds is None or math.isnan(slack_seconds):
        return LEVELS - 1
    if slack_seconds < URGENCY_BASE_SECONDS:
        return 0
    level = 1 + int(math.log(slack_seconds / URGENCY_BASE_SECONDS, URGENCY_RATIO))
    return min(level, LEVELS - 1)


def demoted(
    lost: Mapping[tuple[str, str], float],
    created: Mapping[tuple[str, str], float],
    *,
    now: float,
    max_wait_seconds: float,
) -> frozenset[tuple[str, str]]:
    """The lost workloads that stay demoted: those that have waited less than
    `max_wait_seconds` since they were created. Past it a lost workload takes its deadline
    order again (the most urgent level), so none waits behind savable work for ever."""
    return frozenset(key for key in lost if now - created.get(key, now) < max_wait_seconds)


__all__ = [
    "LEVELS",
    "URGENCY_BASE_SECONDS",
    "URGENCY_RATIO",
    "chance_to_finish",
    "demoted",
    "urgency_level",
]
