"""Per-workload lanes: which pending deadline workload goes to on-demand, and why.

The pool-wide mix moves all of a pool's work at once; a deadline is met or missed one workload
at a time. After *Can't Be Late* (NSDI'24), a deadline workload stays on spot while the time
left to its deadline covers what spot may cost it on top of its runtime, and moves to on-demand
when it no longer does but on-demand would still make it:

- its runtime at the deadline's target confidence (the log-normal quantile of the risk model's
  remaining-runtime estimate), so a declared runtime that is often exceeded is not trusted as a
  point;
- on spot, a node launch, the rest of a capacity shortage the pool is known to be in, and the
  interruptions it must survive: the Poisson quantile, at the same confidence, of the pool's
  interruption rate over its nodes and runtime, each costing a relaunch and half a checkpoint
  interval of lost work;
- on on-demand, a node launch.

A workload that would miss on either is not moved (on-demand would buy nothing); a workload
whose owner chose a capacity type is never touched; a workload moved to on-demand stays there
while it waits (a lane changes at most once, so it cannot flap). An admitted one keeps what
Kueue admitted it on, with one exception: admitted on spot, its pods still waiting for a node
(a shortage, or a node lost to an interruption), it is judged like a pending one from what it
has waited, and if spot would now make it late where on-demand would not, the lane *moves* it
(`Lane.move`): Kueue gives back its spot quota and admits it again on on-demand. That is the
wait on-demand-only never has, and the one the pool-wide mix cannot reach. Pure: plain values
in, lanes out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import NamedTuple

from controller import names

MIN_CONFIDENCE = 0.5
MAX_CONFIDENCE = 0.999


@dataclass(frozen=True)
class SpotOutlook:
    """What spot may cost a workload in one pool, from what its nodes have shown."""

    launch_seconds: float
    interruptions_per_node_hour: float
    gpus_per_node: int
    shortage_seconds: float = 0.0
    """How much longer a spot launch is expected to wait for a shortage the pool is in."""
    on_demand_launch_seconds: float | None = None
    """On-demand's launch, when it differs from spot's."""


class LaneInput(NamedTuple):
    """One pending workload of a project with deadlines, as the risk model sees it. (A named
    tuple: a pass at 1,000 projects makes one for each of some 3,000 such workloads.)"""

    key: tuple[str, str]
    """(namespace, name) of the Workload."""
    project: str
    gpus: int
    time_left: float
    """Seconds to the earliest open deadline it counts toward."""
    confidence: float
    """That deadline's target confidence."""
    runtime_seconds: float
    """Expected remaining runtime (the mean)."""
    sigma: float
    """Log-normal spread of the runtime."""
    checkpoint_seconds: float
    lane: str | None = None
    """The lane it is in (our annotation), if any."""
    owner_chose: bool = False
    waiting_seconds: float | None = None
    """Set for a workload admitted on spot whose pods wait for a node: how long since its
    admission. None for a pending one."""


@dataclass(frozen=True)
class Lane:
    capacity_type: str
    reason: str
    needed_on_spot: float
    """Seconds the workload needs on spot at the deadline's confidence."""
    needed_on_demand: float
    move: bool = False
    """The workload is admitted on spot and its pods wait for a node: the lane is carried out
    by evicting it (Kueue takes back its spot quota) and queueing it again on on-demand."""


def runtime_quantile(mean: float, sigma: float, confidence: float) -> float:
    """The `confidence` quantile of a log-normal runtime of mean `mean` and shape `sigma`."""
    if mean <= 0 or sigma <= 0:
        return max(mean, 0.0)
    z = _normal_quantile(min(max(confidence, MIN_CONFIDENCE), MAX_CONFIDENCE))
    return mean * math.exp(z * sigma - sigma * sigma / 2)


@lru_cache(maxsize=256)
def _normal_quantile(confidence: float) -> float:
    """A policy has a handful of target confidences; a pass asks for each thousands of times."""
    return NormalDist().inv_cdf(confidence)


def poisson_quantile(mean: float, confidence: float) -> int:
    """The least k with P(N <= k) >= confidence for N ~ Poisson(mean)."""
    if mean <= 0:
        return 0
    confidence = min(max(confidence, MIN_CONFIDENCE), MAX_CONFIDENCE)
    term = math.exp(-mean)
    total, k = term, 0
    while total < confidence and k < 10_000:
        k += 1
        term *= mean / k
        total += term
    return k


def needs(workload: LaneInput, outlook: SpotOutlook) -> tuple[float, float, int]:
    """Seconds it needs on spot and on on-demand at its deadline's confidence, and the
    interruptions the spot figure survives.

    A workload admitted on spot and waiting for its node has had part of a launch already,
    unless its pool is in a shortage: then its node comes after the shortage and a launch."""
    runtime = runtime_quantile(workload.runtime_seconds, workload.sigma, workload.confidence)
    nodes = max(math.ceil(workload.gpus / max(outlook.gpus_per_node, 1)), 1)
    expected = outlook.interruptions_per_node_hour * nodes * runtime / 3600.0
    interruptions = poisson_quantile(expected, workload.confidence)
    lost = min(workload.checkpoint_seconds, runtime) / 2
    launch = outlook.launch_seconds
    if workload.waiting_seconds is not None and not outlook.shortage_seconds:
        launch = max(launch - workload.waiting_seconds, 0.0)
    on_spot = (
        runtime
        + launch
        + outlook.shortage_seconds
        + interruptions * (outlook.launch_seconds + lost)
    )
    od_launch = (
        outlook.on_demand_launch_seconds
        if outlook.on_demand_launch_seconds is not None
        else outlook.launch_seconds
    )
    return on_spot, runtime + od_launch, interruptions


def choose_lane(workload: LaneInput, outlook: SpotOutlook) -> Lane | None:
    """On-demand when the deadline survives on-demand and not spot; None leaves it as it is
    (spot, Kueue's first flavor, or what its owner chose)."""
    if workload.owner_chose:
        return None
    on_spot, on_demand, interruptions = needs(workload, outlook)
    moving = workload.waiting_seconds is not None
    if workload.lane == names.ON_DEMAND and not moving:
        return Lane(names.ON_DEMAND, "kept while it waits", on_spot, on_demand)
    if on_spot <= workload.time_left or on_demand > workload.time_left:
        return None
    if moving:
        reason = (
            f"{workload.time_left:.0f}s to its deadline: admitted on spot, its pods waited "
            f"{workload.waiting_seconds:.0f}s for a node; spot needs {on_spot:.0f}s more"
            + (f" (shortage {outlook.shortage_seconds:.0f}s)" if outlook.shortage_seconds else "")
            + f", on-demand {on_demand:.0f}s"
        )
        return Lane(names.ON_DEMAND, reason, on_spot, on_demand, move=True)
    reason = (
        f"{workload.time_left:.0f}s to its deadline: spot needs {on_spot:.0f}s "
        f"({interruptions} interruption(s), launch {outlook.launch_seconds:.0f}s"
        + (f", shortage {outlook.shortage_seconds:.0f}s" if outlook.shortage_seconds else "")
        + f"), on-demand {on_demand:.0f}s"
    )
    return Lane(names.ON_DEMAND, reason, on_spot, on_demand)


def lane_candidates(
    workloads: Iterable[LaneInput], outlooks: Mapping[str, SpotOutlook]
) -> list[tuple[LaneInput, Lane]]:
    """The workloads `choose_lane` would put on on-demand, in the order room goes to them:
    those already in the lane first, then the most urgent. A pass fits them into two rooms
    (before and after the split it renders), and the lane each wants does not depend on room."""
    out: list[tuple[LaneInput, Lane]] = []
    for workload in sorted(workloads, key=lambda w: (w.lane != names.ON_DEMAND, w.time_left)):
        outlook = outlooks.get(workload.project)
        if outlook is None:
            continue
        lane = choose_lane(workload, outlook)
        if lane is not None:
            out.append((workload, lane))
    return out


def fit_lanes(
    candidates: Sequence[tuple[LaneInput, Lane]], room: Mapping[str, int] | None = None
) -> dict[tuple[str, str], Lane]:
    """(namespace, name) -> lane for the `lane_candidates` that fit `room` (see
    `choose_lanes`), in their order."""
    out: dict[tuple[str, str], Lane] = {}
    left = dict(room) if room is not None else None
    for workload, lane in candidates:
        if left is not None and workload.lane != names.ON_DEMAND:
            free = left.get(workload.project, 0)
            if workload.gpus > free:
                continue
            left[workload.project] = free - workload.gpus
        out[workload.key] = lane
    return out


def choose_lanes(
    workloads: Iterable[LaneInput],
    outlooks: Mapping[str, SpotOutlook],
    room: Mapping[str, int] | None = None,
) -> dict[tuple[str, str], Lane]:
    """(namespace, name) -> lane, for each workload moved to (or kept on) on-demand.

    `outlooks` is per project: the spot outlook of the pools it runs in. `room` is per
    project the on-demand GPUs its quota has free now: a workload moves only into room it can
    be admitted in at once, the most urgent first. A lane into a full on-demand quota trades a
    spot node that may fail for a wait that surely does: replays showed it making deadlines
    late by the hundred. Without `room`, no quota limits the move."""
    return fit_lanes(lane_candidates(workloads, outlooks), room)


def lane_gpus(
    lanes: Mapping[tuple[str, str], Lane],
    projects: Mapping[tuple[str, str], str],
    gpus: Mapping[tuple[str, str], int],
) -> dict[str, int]:
    """Per project, the GPUs its on-demand lanes ask for."""
    out: dict[str, int] = {}
    for key, lane in lanes.items():
        if lane.capacity_type == names.ON_DEMAND and key in projects:
            out[projects[key]] = out.get(projects[key], 0) + gpus.get(key, 0)
    return out


__all__ = [
    "Lane",
    "LaneInput",
    "SpotOutlook",
    "choose_lane",
    "choose_lanes",
    "fit_lanes",
    "lane_candidates",
    "lane_gpus",
    "needs",
    "poisson_quantile",
    "runtime_quantile",
]
