"""Jittered exponential backoff, defined once with tenacity for every retry in the controller.

The delay after the n-th failure in a row is `initial * 2**(n-1)`, capped at `maximum`, plus up
to half of it again at random. Doubling keeps a flapping API server from turning a controller
into a hot loop; the random half spreads the watches and replicas that failed at one moment
(an API server restart cuts them all) so they do not all come back in the same instant.

Retry loops use `jittered` as tenacity's `wait`; the reconcile loop, which must stay awake for
watch events between two tries of a pass, asks a `Backoff` for the next delay instead.
"""

from __future__ import annotations

import threading

from tenacity import (
    RetryCallState,
    Retrying,
    wait_exponential,
    wait_random_exponential,
)
from tenacity.stop import stop_base
from tenacity.wait import wait_base


def jittered(initial: float, maximum: float) -> wait_base:
    """A tenacity wait: `initial * 2**(n-1)` capped at `maximum`, plus up to half as much."""
    # wait_random_exponential draws uniformly below its own capped exponential: with half the
    # multiplier and half the cap, that is up to half of the deterministic part.
    return wait_exponential(multiplier=initial, max=maximum) + wait_random_exponential(
        multiplier=initial / 2, max=maximum / 2
    )


class stop_when_set(stop_base):  # noqa: N801 (named as tenacity names its stop conditions)
    """Stop retrying once `event` is set: the controller is shutting down."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.event.is_set()


class Backoff:
    """Delays after consecutive failures, from `jittered`, for a loop that keeps control.

    A tenacity `Retrying` sleeps between tries; the reconcile loop instead waits for the next
    try while still answering wake-ups, so it only asks how long to wait.
    """

    def __init__(self, *, initial: float, maximum: float) -> None:
        self._wait = jittered(initial, maximum)
        self._state = RetryCallState(Retrying(), None, (), {})
        self.failures = 0

    def next_delay(self) -> float:
        """Count one more failure; the seconds to wait before trying again."""
        self.failures += 1
        self._state.attempt_number = self.failures
        return float(self._wait(self._state))

    def reset(self) -> None:
        self.failures = 0
