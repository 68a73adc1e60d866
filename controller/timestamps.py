"""Times as Kubernetes objects carry them and as people read them.

Workloads, NodeClaims and our own status all store times as RFC 3339 strings; the risk model and
the decision code count in epoch seconds. Malformed or absent times read as None, never raise.
Durations are shown as `kubectl` users expect them: 3h20m, 45m, 541d12h.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any


def epoch(value: Any) -> float | None:
    """Epoch seconds of an RFC 3339 time ("2026-11-21T13:04:05Z"), or None."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def format_time(value: datetime) -> str:
    """An aware time as RFC 3339 in UTC, to the second: 2026-11-21T13:04:05Z."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_duration(seconds: float) -> str:
    """3h20m, 45m, -1h05m, 541d12h; "inf" when a deadline cannot be met at all."""
    if math.isinf(seconds) or math.isnan(seconds):
        return "-inf" if seconds < 0 else "inf"
    sign = "-" if seconds < 0 else ""
    minutes = int(abs(seconds) // 60)
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{sign}{days}d{hours}h"
    return f"{sign}{hours}h{mins:02d}m" if hours else f"{sign}{mins}m"
