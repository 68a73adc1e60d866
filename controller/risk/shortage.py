"""Spot shortages as the cluster reports them: in which zones one is on, and how long it may last.

Karpenter reports a spot launch that the cloud cannot serve as an `InsufficientCapacityError`
Event on the NodeClaim (which it then deletes), caches the offering (instance type, zone and
capacity type) as unavailable for three minutes, and tries again: while spot pods wait through a
shortage, the errors keep coming. As Karpenter's cache does, the shortage is kept per pool and
zone: an error puts short the zones its NodeClaim could launch in, from that error until a spot
node of the pool launches in the zone again, or until no error has come for `QUIET_SECONDS`
(nothing waits any more, or the errors stopped).

A pool is short for a workload only when every zone of the pool is: Karpenter launches in any
zone the NodePool allows, so one zone short alone costs nothing. Each zone's shortage is taken
to last the learned mean whatever it has lasted so far (the memoryless assumption: a cloud's
capacity does not come back on a schedule), and zones to come back independently, so with `k`
zones short a launch waits for the first of them: mean / k. The lanes add that to what spot
costs a workload.

How long one lasts is learned per pool, pooled over its zones: a zone sees few episodes of its
own (a pool's shortages are split among its zones), too few to learn from apart, and a GPU
type's market in one region moves much alike in its zones. An episode is a zone's first error to
the launch of the next spot node in the zone that became Ready; shrunk toward a prior while
there are few. A zone that goes quiet after a spot node of the pool launched in another zone
was not seen to end (Karpenter stopped trying it because another zone served): its time counts
as exposure, not as an episode (what the memoryless model's estimate, total time short over
episodes seen to end, takes a cut-off episode to be). Learned as an ended episode it would be
cut to the time until the first zone came back, and the mean would shrink with every zone the
pool has.
Pure: a state per pool, changed by what is observed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

PRIOR_SHORTAGE_SECONDS = 900.0
"""What a zone's shortage is taken to last before any is seen: a quarter of an hour, between the
minutes Karpenter's own cache assumes and the hours a GPU type can stay short in one zone."""
PRIOR_EPISODES = 2.0
"""How many episodes the prior counts as: two real ones outweigh it."""
QUIET_SECONDS = 600.0
"""An episode whose last error is older than this is over: Karpenter retries an unavailable
offering after three minutes, so a shortage that still blocks waiting pods reports again well
within ten."""
HALF_LIFE_EPISODES = 20.0
"""Older episodes weigh half after this many newer ones: a pool's market changes."""
ANY_ZONE = ""
"""The zone a pool whose zones are not known is kept in: such a pool is one zone."""


@dataclass(frozen=True)
class ZoneShortage:
    """A shortage in progress in one zone of a pool."""

    started: float
    """When its first error came."""
    last_error: float
    cut_off: bool = False
    """A spot node of the pool launched in another zone while it was on: Karpenter stops
    trying this one, so if it goes quiet its end was not seen."""


@dataclass(frozen=True)
class ShortageState:
    """One pool's spot shortages as observed: per zone whether one is on, and how long a zone's
    shortage lasts, learned over all the pool's zones."""

    zones: frozenset[str] = frozenset()
    """The zones the pool's nodes may launch in (the policy's); empty: not known, the pool is
    taken as one zone (`ANY_ZONE`) or the zones errors name."""
    short: Mapping[str, ZoneShortage] = field(default_factory=dict)
    """The zones a shortage is on in, and since when."""
    mean_seconds: float = PRIOR_SHORTAGE_SECONDS
    weight: float = PRIOR_EPISODES
    """Episodes behind `mean_seconds`, the prior's included, decayed."""

    @property
    def pool_zones(self) -> frozenset[str]:
        """The zones that must all be short for the pool to be: the policy's, or when it gives
        none, those errors named (the one `ANY_ZONE` when they named none)."""
        return self.zones or frozenset(self.short)

    @property
    def started(self) -> float | None:
        """Since when every zone of the pool has been short (when the last of them became so);
        None while some zone is not."""
        zones = self.pool_zones
        if not zones or not zones <= self.short.keys():
            return None
        return max(self.short[zone].started for zone in zones)

    @property
    def last_error(self) -> float | None:
        """The latest error of a shortage in progress in any zone; None when none is on."""
        return max((z.last_error for z in self.short.values()), default=None)


def reported(
    state: ShortageState, at: float, zones: Collection[str] = frozenset()
) -> ShortageState:
    """A spot launch that could go to `zones` failed for lack of capacity at `at`: each of
    them is short (all the pool's zones when `zones` is empty: the NodeClaim named none, so
    it could launch in any)."""
    state = expire(state, at)
    short = dict(state.short)
    for zone in sorted(zones or state.zones or {ANY_ZONE}):
        now_short = short.get(zone)
        started = now_short.started if now_short is not None else at
        cut_off = now_short.cut_off if now_short is not None else False
        short[zone] = ZoneShortage(started=started, last_error=at, cut_off=cut_off)
    return replace(state, short=short)


def launched(
    state: ShortageState, at: float, *, requested: float, zone: str | None = None
) -> ShortageState:
    """A spot node of the pool, asked for at `requested`, became Ready at `at` in `zone`
    (None: not known, so any of the pool's): a shortage in progress in that zone is over, and
    its length is learned. A node asked for before a zone's shortage began says nothing of it;
    a shortage in another zone was cut off (Karpenter served the pool elsewhere)."""
    del at
    state = expire(state, requested)
    short = dict(state.short)
    ended: list[float] = []
    for name, zone_shortage in sorted(state.short.items()):
        if requested < zone_shortage.started:
            continue
        if zone is None or name == zone:
            # The shortage ended when the launch that worked was asked for.
            ended.append(max(requested - zone_shortage.started, 0.0))
            del short[name]
        else:
            short[name] = replace(zone_shortage, cut_off=True)
    state = replace(state, short=short)
    for length in ended:
        state = _learn(state, length)
    return state


def expire(state: ShortageState, now: float) -> ShortageState:
    """A zone's shortage is over once no error has come for `QUIET_SECONDS`; it lasted until
    its last error, an episode learned as such unless it was cut off, then time exposed only."""
    quiet = sorted(
        (name, z) for name, z in state.short.items() if now - z.last_error > QUIET_SECONDS
    )
    if not quiet:
        return state
    over = {name for name, _ in quiet}
    state = replace(state, short={n: z for n, z in state.short.items() if n not in over})
    for _, zone_shortage in quiet:
        length = max(zone_shortage.last_error - zone_shortage.started, 0.0)
        state = _expose(state, length) if zone_shortage.cut_off else _learn(state, length)
    return state


def _learn(state: ShortageState, length: float) -> ShortageState:
    """An episode seen to end after `length` seconds."""
    decay = 0.5 ** (1.0 / HALF_LIFE_EPISODES)
    kept = state.weight * decay
    weight = kept + 1.0
    mean = (state.mean_seconds * kept + length) / weight
    return replace(state, mean_seconds=mean, weight=weight)


def _expose(state: ShortageState, length: float) -> ShortageState:
    """An episode cut off after `length` seconds: it lasted at least that, so the time short
    grows and the episodes seen to end do not (the mean is the one over the other)."""
    return replace(state, mean_seconds=state.mean_seconds + length / state.weight)


def short_zones(state: ShortageState, now: float) -> dict[str, ZoneShortage]:
    """The zones a shortage is on in now (of the pool's, and any other an error named), by
    name: what `explain` shows even while the pool, short in only some, costs nothing."""
    return dict(sorted(expire(state, now).short.items()))


def expected_wait(state: ShortageState, now: float) -> float:
    """Seconds a spot launch asked for now is expected to wait: while every zone of the pool is
    short, until the first of them comes back (the learned mean over the number short); none
    while some zone is not short, where Karpenter launches instead."""
    state = expire(state, now)
    zones = state.pool_zones
    if not zones or not zones <= state.short.keys():
        return 0.0
    return state.mean_seconds / len(zones)


# ------------------------------------------------------------ folding what a cluster shows
@dataclass(frozen=True)
class CapacityError:
    """One report of a pool's spot launch failing for lack of capacity."""

    pool: str
    at: float
    key: str
    """Which report this is (an Event and the time it stands for): a report seen on every
    pass is folded once."""
    zones: frozenset[str] = frozenset()
    """The zones the failed NodeClaim could launch in; empty: any of the pool's."""


@dataclass(frozen=True)
class SpotLaunch:
    """A spot node of a pool that became Ready."""

    pool: str
    requested: float
    """When it was asked for (its NodeClaim's creation)."""
    ready: float
    key: str
    """Which node (its NodeClaim)."""
    zone: str | None = None
    """The zone it launched in; None: not known (any of the pool's)."""


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
    zones: Mapping[str, Collection[str]] | None = None,
) -> Shortages:
    """`shortages` with the errors and launches not folded in yet, in time order (a launch
    at its Ready time), every pool then expired at `now`. `zones` gives pools' zones (the
    policy's, which may have changed since the last fold); a pool it leaves out keeps those
    it had.

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
    for pool, pool_zones in (zones or {}).items():
        pools[pool] = replace(pools.get(pool, ShortageState()), zones=frozenset(pool_zones))
    latest = dict(shortages.latest)
    seen = {pool: set(keys) for pool, keys in shortages.seen.items()}
    for at, _, key, item in sorted(news, key=lambda n: n[:3]):
        pool = item.pool
        mark = latest.get(pool)
        if mark is not None and (at < mark or (at == mark and key in seen.get(pool, ()))):
            continue
        state = pools.get(pool, ShortageState())
        if isinstance(item, CapacityError):
            pools[pool] = reported(state, at, item.zones)
        else:
            pools[pool] = launched(state, at, requested=item.requested, zone=item.zone)
        if mark is None or at > mark:
            latest[pool], seen[pool] = at, set()
        seen[pool].add(key)
    return Shortages(
        pools={pool: expire(state, now) for pool, state in pools.items()},
        latest=latest,
        seen={pool: frozenset(keys) for pool, keys in seen.items()},
    )


def expected_waits(shortages: Shortages, now: float) -> dict[str, float]:
    """Per pool in a shortage now (every zone of it short), the spot wait it is expected to
    add (what `Observation.spot_shortages` carries); pools in none are left out."""
    waits = {pool: expected_wait(state, now) for pool, state in shortages.pools.items()}
    return {pool: wait for pool, wait in sorted(waits.items()) if wait > 0}


__all__ = [
    "ANY_ZONE",
    "PRIOR_SHORTAGE_SECONDS",
    "QUIET_SECONDS",
    "CapacityError",
    "ShortageState",
    "Shortages",
    "SpotLaunch",
    "ZoneShortage",
    "expected_wait",
    "expected_waits",
    "expire",
    "fold",
    "launched",
    "reported",
    "short_zones",
]
