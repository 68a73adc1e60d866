"""A replay policy sized to a trace, for when there is no real policy to judge.

The traces come from clusters of a size we do not know and cannot copy, so the replay's
cluster is sized from the trace's own demand: big enough that it is not hopelessly short, small
enough that queueing, spot and on-demand choices still matter. The shape of the policy (three
tiers, one pool, twelve projects) is the example policy's, reduced to what the replay can tell
apart, so a result reads the same way as the example.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from controller.api.loader import load_policy_set
from controller.api.policy_set import PolicySet
from controller.api.types import API_VERSION
from controller.sim.model import TraceJob

POOL = "gpu"
GPUS_PER_NODE = 8
MAX_POOL_GPUS = 100000
"""The API's bound on a pool's maxGpus."""
PROJECTS_PER_TIER = 4
TIERS: tuple[tuple[str, int, str, float], ...] = (
    # name, priority, preemption, share of the pool's quota
    ("production", 100000, "LowerPriority", 0.4),
    ("research", 1000, "LowerPriority", 0.4),
    ("exploratory", 100, "Never", 0.2),
)


@dataclass(frozen=True)
class Demand:
    """A trace's GPU demand if every job started at its submit time, over the submit period."""

    p95: float
    """GPUs demanded at or below which 95 % of the time is spent (time-weighted)."""
    mean: float
    """Time-weighted mean GPUs demanded."""
    peak: float
    start: float
    end: float
    """The period measured, in trace seconds."""


def measure_demand(jobs: Sequence[TraceJob], *, percentile: float = 95.0) -> Demand:
    """Demand as a step function (a sweep over submits and finishes), measured while jobs arrive.

    The period is from the first to the last submit: the drain after the last submit is the
    trace's end, not its load, and a long one would pull the percentile down. When every job
    arrives at once it is the first submit to the last finish instead.
    """
    if not jobs:
        raise ValueError("cannot measure the demand of an empty trace")
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    submit = np.fromiter((j.submit for j in jobs), dtype=np.float64, count=len(jobs))
    finish = submit + np.fromiter((j.duration for j in jobs), dtype=np.float64, count=len(jobs))
    gpus = np.fromiter((j.gpus for j in jobs), dtype=np.float64, count=len(jobs))
    start = float(submit.min())
    end = float(submit.max())
    if end <= start:
        end = float(finish.max())
    times = np.concatenate([submit, finish])
    deltas = np.concatenate([gpus, -gpus])
    # Finishes before starts at the same instant, so a job ending as another starts is not
    # counted twice.
    order = np.lexsort((deltas, times))
    times, level = times[order], np.cumsum(deltas[order])
    # Level k holds from times[k] to times[k + 1]; clip those spans to the measured period.
    span = np.clip(np.append(times[1:], times[-1]), start, end) - np.clip(times, start, end)
    held = span > 0
    levels, spans = level[held], span[held]
    by_level = np.argsort(levels, kind="stable")
    levels, spans = levels[by_level], spans[by_level]
    cumulative = np.cumsum(spans)
    total = float(cumulative[-1])
    index = int(np.searchsorted(cumulative, total * percentile / 100.0, side="left"))
    return Demand(
        p95=float(levels[min(index, len(levels) - 1)]),
        mean=float(np.dot(levels, spans) / total),
        peak=float(levels.max()),
        start=start,
        end=end,
    )


def replay_capacity(jobs: Sequence[TraceJob], *, target_utilization: float = 0.7) -> int:
    """The replay cluster's GPUs: the larger of p95 demand and mean demand / target utilization.

    p95 covers the trace's everyday peaks and leaves the rarer ones to queue, which is where
    policies differ. The utilization term only binds for flat traces, whose p95 is near their
    mean: a cluster sized to it would run near 100 % busy and queue without bound whatever
    the policy. Rounded up to whole 8-GPU nodes.
    """
    if not 0 < target_utilization <= 1:
        raise ValueError(f"target_utilization must be in (0, 1], got {target_utilization}")
    demand = measure_demand(jobs)
    raw = max(demand.p95, demand.mean / target_utilization, 1.0)
    capacity = GPUS_PER_NODE * math.ceil(raw / GPUS_PER_NODE)
    if capacity > MAX_POOL_GPUS:
        raise ValueError(
            f"the trace needs {capacity} GPUs, over the {MAX_POOL_GPUS} a pool may hold"
        )
    return capacity


def default_policy_set(jobs: Sequence[TraceJob], *, target_utilization: float = 0.7) -> PolicySet:
    """A valid replay policy whose one pool, and its projects' quotas, are sized to the trace.

    Choices, and why:

    - Capacity C = `replay_capacity` (p95 of demand, or mean / target utilization when larger),
      a whole number of nodes. The pool's maxGpus is C and the projects' nominal quotas sum to
      C, so quotas promise exactly what the pool can hold.
    - Tiers as in the example policy: production (priority 100000, preempts lower priorities,
      may use spot), research (1000, preempts lower priorities), exploratory (100, never
      preempts). Production and research get 40 % of C each, exploratory 20 %: most capacity
      guaranteed to the work deadlines matter for, some to work that can wait.
    - Four projects per tier with equal quotas (largest remainders make them sum exactly), all
      sharing capacity in their tier's cohort with no borrowing limit, so idle quota is used.
    - One pool, `gpu`, 8 GPUs a node, on-demand anywhere from 0 to C: the replay then measures
      the controller's choice of mix, not a floor or ceiling set by hand. Prices (spot 1.2,
      on-demand 4.0 per GPU-hour), 300 s provisioning, 0.05 spot interruptions per node-hour
      and 90 % spot availability are round figures near the example's A100 pool. No warm pool,
      so provisioning latency is visible.
    - Risk settings as the example (raise 0.2, lower 0.05, 600 s window, 1800 s cooldown), with
      the step scaled to the cluster: max(8, C // 10), so a big cluster is not ten times slower
      to react than a small one.

    The documents go through `load_policy_set`, so the result is a policy `quartermaster
    validate` would accept.
    """
    return load_policy_set(default_policy_documents(jobs, target_utilization=target_utilization))


def default_policy_documents(
    jobs: Sequence[TraceJob], *, target_utilization: float = 0.7
) -> list[tuple[str, Any]]:
    """The YAML documents of `default_policy_set`, as (origin, document), before validation:
    a sweep changes fields of them (`controller.sim.sweep_grid.apply_overrides`) and then
    validates them as any policy is."""
    capacity = replay_capacity(jobs, target_utilization=target_utilization)
    shares = [share / PROJECTS_PER_TIER for *_, share in TIERS for _ in range(PROJECTS_PER_TIER)]
    quotas = iter(_apportion(capacity, shares))
    policy = {
        "apiVersion": API_VERSION,
        "kind": "CapacityPolicy",
        "metadata": {"name": "replay"},
        "spec": {
            "tiers": [
                {
                    "name": name,
                    "priority": priority,
                    "preemption": preemption,
                    "allowSpot": True,
                }
                for name, priority, preemption, _ in TIERS
            ],
            "pools": [
                {
                    "name": POOL,
                    "zones": ["zone-a"],
                    "gpusPerNode": GPUS_PER_NODE,
                    "maxGpus": capacity,
                    "onDemand": {"floorGpus": 0, "ceilingGpus": capacity},
                    "nodeClass": {"name": POOL},
                    "prices": {"spotPerGpuHour": 1.2, "onDemandPerGpuHour": 4.0},
                    "provisioningLatencySeconds": 300,
                    "spotInterruptionsPerHour": 0.05,
                    "spotAvailability": 0.9,
                    "warmPool": {"minGpus": 0, "maxGpus": 0},
                }
            ],
            "risk": {
                "raiseThreshold": 0.2,
                "lowerThreshold": 0.05,
                "evaluationWindowSeconds": 600,
                "cooldownSeconds": 1800,
                "maxStepGpus": max(8, capacity // 10),
            },
        },
    }
    documents: list[tuple[str, Any]] = [("scenario/policy", policy)]
    for tier, *_ in TIERS:
        for i in range(1, PROJECTS_PER_TIER + 1):
            name = f"{tier}-{i}"
            documents.append(
                (
                    f"scenario/{name}",
                    {
                        "apiVersion": API_VERSION,
                        "kind": "TrainingProject",
                        "metadata": {"name": name},
                        "spec": {
                            "tier": tier,
                            "namespaces": [name],
                            "shareCapacity": True,
                            "quotas": [{"pool": POOL, "nominalGpus": next(quotas)}],
                        },
                    },
                )
            )
    return documents


def _apportion(total: int, shares: Sequence[float]) -> list[int]:
    """Whole numbers in proportion to `shares` that sum to `total` (largest remainders)."""
    exact = [total * share / sum(shares) for share in shares]
    counts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(shares)), key=lambda i: (counts[i] - exact[i], i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts
