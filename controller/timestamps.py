"""Reading the RFC 3339 times Kubernetes objects carry, as epoch seconds.

Workloads, NodeClaims and our own status all store times as strings; the risk model and the
decision code count in epoch seconds. Malformed or absent times read as None, never raise.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any


def epoch(value: Any) -> float | None:
    """Epoch seconds of an RFC 3339 time ("2026-11-21T13:04:05Z"), or None."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
