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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

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


# ------------------------------------------------------------ folding what a cluster shows
@dataclass(frozen=True)
class CapacityError:
    """One report of a pool's spot launch failing for lack of capacity."""

    pool: str
    at: float
    key: str
    """Which report this is (an Event and the time it stands for): a report seen on every
    pass is folded once."""


@dataclass(frozen=True)
class SpotLaunch:
    """A spot node of a pool that became Ready."""

    pool: str
    requested: float
    """When it was asked for (its NodeClaim's creation)."""
    ready: float
    key: str
    """Which node (its NodeClaim)."""


@dataclass(frozen=True)
class Shortages:
    """Every pool's shortage state, and how far what the cluster shows has been folded in.

    A pass sees the same reports and nodes again and again; `latest` and `seen` let `fold`
    take in each once, in time order.
    """

    pools: Mapping[str, ShortageState] = field(default_factory=dict)
    latest: Mapping[str, float] = field(default_factory=dict)
    """Per pool, the time of the latest report or launch folded in."""
    seen: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Per pool, the keys of what was folded at exactly its `latest` time."""

    def state(self, pool: str) -> ShortageState:
        return self.pools.get(pool, ShortageState())


def fold(
    shortages: Shortages,
    errors: Iterable[CapacityError],
    launches: Iterable[SpotLaunch],
    *,
    now: float,
) -> Shortages:
    """`shortages` with the errors and launches not folded in yet, in time order (a launch
    at its Ready time), every pool then expired at `now`.

    What is older than the latest thing folded for its pool is left out: taken in late, an
    error would move the last error back and a launch would end a shortage that errors after
    it show still on. Reports and nodes reach the controller through watches within moments,
    far less than the time between two passes, so in a running controller that drops
    nothing; after a restart the first fold sees everything at once and puts it in order.
    """
    news: list[tuple[float, int, str, CapacityError | SpotLaunch]] = []
    for error in errors:
        news.append((error.at, 0, error.key, error))
    for launch in launches:
        news.append((launch.ready, 1, launch.key, launch))
    pools = dict(shortages.pools)
    latest = dict(shortages.latest)
    seen = {pool: set(keys) for pool, keys in shortages.seen.items()}
    for at, _, key, item in sorted(news, key=lambda n: n[:3]):
        pool = item.pool
        mark = latest.get(pool)
        if mark is not None and (at < mark or (at == mark and key in seen.get(pool, ()))):
            continue
        state = pools.get(pool, ShortageState())
        if isinstance(item, CapacityError):
            pools[pool] = reported(state, at)
        else:
            pools[pool] = launched(state, at, requested=item.requested)
        if mark is None or at > mark:
            latest[pool], seen[pool] = at, set()
        seen[pool].add(key)
    return Shortages(
        pools={pool: expire(state, now) for pool, state in pools.items()},
        latest=latest,
        seen={pool: frozenset(keys) for pool, keys in seen.items()},
    )


def expected_waits(shortages: Shortages, now: float) -> dict[str, float]:
    """Per pool in a shortage now, the spot wait it is expected to add (what
    `Observation.spot_shortages` carries); pools in none are left out."""
    waits = {pool: expected_wait(state, now) for pool, state in shortages.pools.items()}
    return {pool: wait for pool, wait in sorted(waits.items()) if wait > 0}


__all__ = [
    "PRIOR_SHORTAGE_SECONDS",
    "QUIET_SECONDS",
    "CapacityError",
    "ShortageState",
    "Shortages",
    "SpotLaunch",
    "expected_wait",
    "expected_waits",
    "expire",
    "fold",
    "launched",
    "reported",
]
