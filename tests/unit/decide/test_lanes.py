"""Lanes, hand-computed: when a pending deadline workload goes to on-demand and when it stays.

The reference workload: 8 GPUs (one 8-GPU node), an expected runtime of an hour with the
spread of a declared runtime (sigma 0.25), hourly checkpoints, a deadline at 95 % confidence.
Its runtime at 95 %: 3600 x exp(1.6449 x 0.25 - 0.25^2 / 2) = 5264.0 s. On on-demand it needs
that plus a 300 s launch: 5564.0 s. On spot, with 0.05 interruptions per node-hour, it expects
0.05 x 5264 / 3600 = 0.073 interruptions; P(none) = 0.930 < 0.95, so it must survive one, at a
relaunch (300 s) and half a checkpoint interval of lost work (1800 s): 5564.0 + 2100 = 7664.0 s.
"""

from __future__ import annotations

import math

import pytest

from controller import names
from controller.decide.lanes import (
    LaneInput,
    SpotOutlook,
    choose_lane,
    choose_lanes,
    needs,
    poisson_quantile,
    runtime_quantile,
)

RUNTIME_95 = 3600 * math.exp(1.6448536269514722 * 0.25 - 0.25**2 / 2)
ON_DEMAND_NEED = RUNTIME_95 + 300
SPOT_NEED = ON_DEMAND_NEED + 300 + 1800
FLAKY = SpotOutlook(launch_seconds=300, interruptions_per_node_hour=0.05, gpus_per_node=8)
STEADY = SpotOutlook(launch_seconds=300, interruptions_per_node_hour=0.01, gpus_per_node=8)
SHORT = SpotOutlook(
    launch_seconds=300, interruptions_per_node_hour=0.01, gpus_per_node=8, shortage_seconds=1800
)


def workload(time_left: float, **changes: object) -> LaneInput:
    fields: dict[str, object] = {
        "key": ("team", "train-1"),
        "project": "vision",
        "gpus": 8,
        "time_left": time_left,
        "confidence": 0.95,
        "runtime_seconds": 3600.0,
        "sigma": 0.25,
        "checkpoint_seconds": 3600.0,
    }
    fields.update(changes)
    return LaneInput(**fields)  # type: ignore[arg-type]


def test_the_reference_figures() -> None:
    assert runtime_quantile(3600, 0.25, 0.95) == pytest.approx(5264.03, abs=0.01)
    assert needs(workload(0), FLAKY) == pytest.approx((SPOT_NEED, ON_DEMAND_NEED, 1))
    # One interruption in a hundred node-hours: P(none) = 0.985, nothing to survive.
    assert needs(workload(0), STEADY) == pytest.approx((ON_DEMAND_NEED, ON_DEMAND_NEED, 0))
    # A shortage adds what it is expected to last to every spot launch.
    assert needs(workload(0), SHORT) == pytest.approx((ON_DEMAND_NEED + 1800, ON_DEMAND_NEED, 0))


@pytest.mark.parametrize(
    ("mean", "confidence", "k"),
    [(0.0, 0.95, 0), (0.05, 0.95, 0), (0.2, 0.95, 1), (0.2, 0.8, 0), (3.0, 0.95, 6)],
)
def test_poisson_quantile(mean: float, confidence: float, k: int) -> None:
    """P(N <= k) >= confidence, the least such k: e.g. mean 0.2, P(0) = 0.819, P(<=1) = 0.982;
    mean 3, P(<=5) = 0.916, P(<=6) = 0.966."""
    assert poisson_quantile(mean, confidence) == k


@pytest.mark.parametrize(
    ("time_left", "outlook", "lane"),
    [
        # Room for spot's interruption: spot.
        (8000, FLAKY, None),
        # Not for spot's, but for on-demand's: on-demand.
        (7000, FLAKY, names.ON_DEMAND),
        # Not even for on-demand's: lost either way, so it stays where it is (cheaper).
        (5000, FLAKY, None),
        # A steady pool: nothing to survive, spot makes it.
        (7000, STEADY, None),
        # The same pool in a shortage: on-demand.
        (7000, SHORT, names.ON_DEMAND),
    ],
)
def test_a_lane_from_slack_interruptions_and_shortage(
    time_left: float, outlook: SpotOutlook, lane: str | None
) -> None:
    chosen = choose_lane(workload(time_left), outlook)
    assert (chosen.capacity_type if chosen else None) == lane
    if chosen is not None:
        assert chosen.needed_on_spot > time_left >= chosen.needed_on_demand
        assert "spot needs" in chosen.reason


def test_a_workload_whose_owner_chose_a_capacity_type_is_left_alone() -> None:
    assert choose_lane(workload(7000, owner_chose=True), FLAKY) is None


def test_a_workload_in_an_on_demand_lane_stays_there_while_it_waits() -> None:
    """Even with time to spare on spot now (its deadline moved, or the pool calmed down): a
    lane changes once, so it cannot flap."""
    kept = choose_lane(workload(100_000, lane=names.ON_DEMAND), STEADY)
    assert kept is not None
    assert kept.capacity_type == names.ON_DEMAND


def test_a_wider_workload_must_survive_more_interruptions() -> None:
    """32 GPUs are four nodes: 4 x 0.073 = 0.29 expected, P(<=1) = 0.965, still one; at 64
    GPUs (0.58 expected) P(<=1) = 0.885, two."""
    assert needs(workload(0, gpus=32), FLAKY)[2] == 1
    assert needs(workload(0, gpus=64), FLAKY)[2] == 2


def test_lanes_go_only_where_on_demand_quota_has_room_the_most_urgent_first() -> None:
    """Two workloads of a project need on-demand, its quota has room for one: the one due
    sooner gets it; the other stays on spot rather than wait for a quota that is full. A
    workload already in its lane is kept whatever the room."""
    late = workload(7200, key=("team", "late"))
    soon = workload(6600, key=("team", "soon"))
    kept = workload(100_000, key=("team", "kept"), lane=names.ON_DEMAND)
    outlooks = {"vision": FLAKY}

    lanes = choose_lanes([late, soon, kept], outlooks, room={"vision": 8})
    assert set(lanes) == {("team", "soon"), ("team", "kept")}

    assert set(choose_lanes([late, soon], outlooks, room={"vision": 16})) == {
        ("team", "soon"),
        ("team", "late"),
    }
    assert choose_lanes([late, soon], outlooks, room={}) == {}
    # A project without an outlook (it may not run on spot) gets none.
    assert choose_lanes([late], {}, room={"vision": 8}) == {}


# A workload admitted on spot whose pods wait for a node: STEADY has nothing to survive, so on
# spot it needs its runtime and what is left of its node's launch (all of a launch after a
# shortage, which comes first); on on-demand its runtime and a launch.
@pytest.mark.parametrize(
    ("time_left", "waited", "outlook", "moved", "on_spot"),
    [
        # 200 s of a 300 s launch waited, no shortage: 100 s more; 5600 s left is enough.
        (5600, 200.0, STEADY, False, RUNTIME_95 + 100),
        # Waited longer than a launch: nothing more is expected of it; spot still makes it.
        (5300, 900.0, STEADY, False, RUNTIME_95),
        # The pool is in a shortage: 1800 s, then a whole launch, 7364.0 s on spot. With 7000 s
        # left it misses there and makes it on on-demand (5564.0 s): moved.
        (7000, 200.0, SHORT, True, RUNTIME_95 + 1800 + 300),
        # With 7400 s left spot still makes it: it stays.
        (7400, 200.0, SHORT, False, RUNTIME_95 + 1800 + 300),
        # With 5500 s left even on-demand misses: moving buys nothing.
        (5500, 200.0, SHORT, False, RUNTIME_95 + 1800 + 300),
    ],
)
def test_a_workload_waiting_on_spot_for_a_node_moves_when_spot_would_make_it_late(
    time_left: float, waited: float, outlook: SpotOutlook, moved: bool, on_spot: float
) -> None:
    waiting = workload(time_left, waiting_seconds=waited)
    assert needs(waiting, outlook)[:2] == pytest.approx((on_spot, ON_DEMAND_NEED))
    chosen = choose_lane(waiting, outlook)
    assert (chosen is not None) == moved
    if chosen is not None:
        assert chosen.move
        assert chosen.capacity_type == names.ON_DEMAND
        assert f"its pods waited {waited:.0f}s for a node" in chosen.reason
        assert "shortage 1800s" in chosen.reason


def test_a_move_needs_on_demand_room_and_an_owner_who_chose_nothing() -> None:
    """Moving off spot takes on-demand quota like any lane: without room it waits on spot
    (on-demand quota that is full is a surer wait); its owner's choice is never overridden."""
    waiting = workload(7000, waiting_seconds=200.0)
    assert choose_lanes([waiting], {"vision": SHORT}, room={"vision": 0}) == {}
    moved = choose_lanes([waiting], {"vision": SHORT}, room={"vision": 8})
    assert moved[("team", "train-1")].move
    assert choose_lane(workload(7000, waiting_seconds=200.0, owner_chose=True), SHORT) is None


def test_a_pending_workload_is_never_a_move() -> None:
    chosen = choose_lane(workload(7000), SHORT)
    assert chosen is not None
    assert not chosen.move
