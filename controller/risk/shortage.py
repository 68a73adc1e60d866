"""Spot shortages as the cluster reports them: when one is on, and how long it may last.

Karpenter reports a spot launch that the cloud cannot serve as an `InsufficientCapacityError`
Event on the NodeClaim (which it then deletes), caches the offering as unavailable for three
minutes, and tries again: while spot pods wait through a shortage, the errors keep coming. A
shortage is on from its first error until a spot node of the pool launches again, or until no
error has come for `QUIET_SECONDS` (nothing waits any more, or the errors stopped).

How long one lasts is learned per pool from the episodes the cluster shows (first error to the
launch of the next spot node that became Ready), shrunk toward a prior while there are few; a
shortage's remaining length is taken to be that mean whatever it has lasted so far (the
memoryless assumption: a cloud's capacity does not come back on a schedule). The lanes add it
to what spot costs a workload.
Pure: a state per pool, changed by what is observed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

PRIOR_SHORTAGE_SECONDS = 900.0
"""What a shortage is taken to last before any is seen: a quarter of an hour, between the
minutes Karpenter's own cache assumes and the hours a GPU type can stay short in one zone."""
PRIOR_EPISODES = 2.0
"""How many episodes the prior counts as: two real ones outweigh it."""
QUIET_SECONDS = 600.0
"""An episode whose last error is older than this is over: Karpenter retries an unavailable
offering after three minutes, so a shortage that still blocks waiting pods reports again well
within ten."""
HALF_LIFE_EPISODES = 20.0
"""Older episodes weigh half after this many newer ones: a pool's market changes."""


@dataclass(frozen=True)
class ShortageState:
    """One pool's spot shortages as observed."""

    started: float | None = None
    """When the shortage in progress was first reported (None: none is)."""
    last_error: float | None = None
    mean_seconds: float = PRIOR_SHORTAGE_SECONDS
    weight: float = PRIOR_EPISODES
    """Episodes behind `mean_seconds`, the prior's included, decayed."""


def reported(state: ShortageState, at: float) -> ShortageState:
    """A spot launch failed for lack of capacity at `at`."""
    state = expire(state, at)
    return replace(state, started=state.started if state.started is not None else at, last_error=at)


def launched(state: ShortageState, at: float, *, requested: float) -> ShortageState:
    """A spot node of the pool, asked for at `requested`, became Ready at `at`: a shortage in
    progress is over, and its length is learned. A node asked for before the shortage began
    says nothing of it."""
    del at
    state = expire(state, requested)
    if state.started is None or requested < state.started:
        return state
    # The shortage ended when the launch that worked was asked for; its launch is a launch.
    return _learn(state, max(requested - state.started, 0.0))


def expire(state: ShortageState, now: float) -> ShortageState:
    """The shortage in progress is over once no error has come for `QUIET_SECONDS`; it lasted
    until its last error."""
    if state.started is None or state.last_error is None:
        return state
    if now - state.last_error <= QUIET_SECONDS:
        return state
    return _learn(state, max(state.last_error - state.started, 0.0))


def _learn(state: ShortageState, length: float) -> ShortageState:
    decay = 0.5 ** (1.0 / HALF_LIFE_EPISODES)
    kept = state.weight * decay
    weight = kept + 1.0
    mean = (state.mean_seconds * kept + length) / weight
    return ShortageState(started=None, last_error=None, mean_seconds=mean, weight=weight)


def expected_wait(state: ShortageState, now: float) -> float:
    """Seconds a spot launch asked for now is expected to wait: the learned mean while a
    shortage is on, none otherwise."""
    state = expire(state, now)
    return state.mean_seconds if state.started is not None else 0.0


__all__ = [
    "PRIOR_SHORTAGE_SECONDS",
    "QUIET_SECONDS",
    "ShortageState",
    "expected_wait",
    "expire",
    "launched",
    "reported",
]
