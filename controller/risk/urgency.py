"""How urgent a waiting workload is, from its slack: the ladder the priority boosts climb.

The controller lowers the effective priority of waiting work by its urgency level (see
`controller.decide.boost`), so Kueue admits the tightest deadlines of a queue first; the risk
model orders a queue the same way, so that what it predicts is the order Kueue will follow.
"""

from __future__ import annotations

import math

URGENCY_BASE_SECONDS = 3600.0
URGENCY_RATIO = 4.0
LEVELS = 5
"""Levels 0 (under an hour of slack) to 4 (over 64 hours, or no deadline)."""


def urgency_level(slack_seconds: float | None) -> int:
    """0 for the most urgent; LEVELS - 1 for work with a day's or more slack, or no deadline."""
    if slack_seconds is None or math.isnan(slack_seconds):
        return LEVELS - 1
    if slack_seconds < URGENCY_BASE_SECONDS:
        return 0
    level = 1 + int(math.log(slack_seconds / URGENCY_BASE_SECONDS, URGENCY_RATIO))
    return min(level, LEVELS - 1)


__all__ = ["LEVELS", "URGENCY_BASE_SECONDS", "URGENCY_RATIO", "urgency_level"]
