"""The replay's spot market per zone, and what its Karpenter reports of it.

A pool of `k` zones is short only when all are; each zone is short (1 - a)^(1/k) of the time
for k x 1,800 s on average, so the pool is short 1 - a of the time for 1,800 s on average
(the first of k exponential shortages to end), whatever k: with a = 0.75 and k = 2, a zone is
short 0.5 of the time, the pool 0.25. A failed launch reports an error for every zone (the
NodeClaim could go to any), a launch goes to the first zone with capacity, and one zone is the
stream a pool drew before zones.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from controller import names
from controller.api.loader import load_policy_set
from controller.api.types import GpuPool
from controller.risk.shortage import ShortageState, expected_wait, launched, reported
from controller.sim.engine import _error_times
from controller.sim.karpenter import SHORTAGE_SECONDS, Karpenter, NodePoolSpec
from tests.builders import policy_doc

(BASE,) = load_policy_set([("policy", policy_doc())]).policy.spec.pools[:1]


def pool(zones: tuple[str, ...], availability: float) -> GpuPool:
    return dataclasses.replace(BASE, zones=zones, spot_availability=availability)


def market(zones: tuple[str, ...], availability: float, seed: int = 0) -> Karpenter:
    spot = pool(zones, availability)
    pushed: list[tuple[float, str, int]] = []
    karpenter = Karpenter(
        {spot.name: spot},
        np.random.default_rng(seed),
        lambda at, kind, node: pushed.append((at, kind, node)),
        market_seed=seed,
    )
    karpenter.configure([NodePoolSpec(spot.name, names.SPOT, 10_000, 10, 600.0)])
    return karpenter


def short_share(karpenter: Karpenter, zone: str | None, horizon: float, step: float) -> float:
    spot = karpenter.pools[BASE.name]
    times = np.arange(0.0, horizon, step)
    if zone is None:
        short = [karpenter.shortage_until(spot, t) > t for t in times]
    else:
        short = [karpenter._zone_until(spot, zone, t) > t for t in times]
    return float(np.mean(short))


def test_a_pool_is_short_the_same_share_of_the_time_whatever_its_zones() -> None:
    """Sampled each minute over 4,000 h (about 8,000 pool shortages): a zone 0.5, the pool
    0.25 of the time, within sampling error."""
    two = market(("zone-a", "zone-b"), 0.75)
    assert short_share(two, None, 4000 * 3600.0, 60.0) == pytest.approx(0.25, abs=0.02)
    two = market(("zone-a", "zone-b"), 0.75)
    assert short_share(two, "zone-b", 4000 * 3600.0, 60.0) == pytest.approx(0.5, abs=0.03)


def test_one_zone_is_the_pools_market_as_before_zones() -> None:
    """The first zone draws from the stream seeded [seed, 7, pool index], as the pool did:
    the first draw decides whether it starts short (0.1 of the time), the next how long."""
    one = market(("zone-a",), 0.9, seed=3)
    rng = np.random.default_rng([3, 7, 0])
    short = rng.random() > 0.9
    until = rng.exponential(SHORTAGE_SECONDS) if short else 0.0
    assert one.shortage_until(one.pools[BASE.name], 0.0) == until


def first_shortage(karpenter: Karpenter) -> float:
    """A time the pool is short at."""
    spot = karpenter.pools[BASE.name]
    t = 0.0
    while karpenter.shortage_until(spot, t) <= t:
        t += 60.0
    return t


def test_a_failed_launch_reports_every_zone_and_a_launch_goes_where_capacity_is() -> None:
    karpenter = market(("zone-a", "zone-b"), 0.5)
    spot = karpenter.pools[BASE.name]
    at = first_shortage(karpenter)
    assert karpenter._launch_nodes((BASE.name, names.SPOT), 1, at) == 0
    first, until, zones = karpenter.capacity_errors[BASE.name]
    assert (first, zones) == (at, frozenset({"zone-a", "zone-b"}))
    assert until == karpenter.shortage_until(spot, at) > at
    # At `until` the first zone back has capacity; the node launches there.
    assert karpenter._launch_nodes((BASE.name, names.SPOT), 1, until) == 1
    (node,) = karpenter.nodes.values()
    back = [z for z in ("zone-a", "zone-b") if karpenter._zone_until(spot, z, until) <= until]
    assert node.zone == back[0]


def test_the_replays_errors_and_launch_go_through_the_controllers_shortage_code() -> None:
    """What the replay folds (`Replay._shortage_waits`, the ready handler) on the two-zone
    errors and the launch: both zones short, the pool's wait 900 / 2; the launch in one zone
    ends that zone's only, so the pool is no longer short."""
    state = ShortageState(zones=frozenset({"zone-a", "zone-b"}))
    state = reported(state, 100.0, frozenset({"zone-a", "zone-b"}))
    assert expected_wait(state, 150.0) == 450.0
    state = launched(state, 700.0, requested=400.0, zone="zone-b")
    assert set(state.short) == {"zone-a"}
    assert expected_wait(state, 700.0) == 0.0


@pytest.mark.parametrize(
    ("first", "last", "after", "times"),
    [
        # A shortage from 0 still on at 1,000 s, never read: its errors every 180 s and now.
        (0.0, 1000.0, -np.inf, [0.0, 180.0, 360.0, 540.0, 720.0, 900.0, 1000.0]),
        # Read up to 400 s by an earlier pass: the rest only.
        (0.0, 1000.0, 400.0, [540.0, 720.0, 900.0, 1000.0]),
        # Read up to now: nothing new.
        (0.0, 1000.0, 1000.0, []),
        # Reported just now.
        (500.0, 500.0, -np.inf, [500.0]),
    ],
)
def test_a_shortage_reports_every_three_minutes_however_far_apart_the_passes(
    first: float, last: float, after: float, times: list[float]
) -> None:
    """Karpenter retries an unavailable offering every three minutes while pods wait, so the
    controller sees an error at least that often; a replay pass folds all it would have seen
    since the last, not only the first and the latest (between passes 900 s apart the
    shortage had gone quiet, `QUIET_SECONDS`, and been learned as a string of short ones)."""
    assert _error_times(first, last, after=after) == times
