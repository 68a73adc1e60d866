"""The replay policy sized to a trace: demand measured by hand, and a policy that validates.

Demand cases are step functions small enough to integrate by eye; the policy is then checked
for what the scenario promises (tiers, shares, one pool whose quotas sum to its size) on
synthetic traces and on both real ones.
"""

from __future__ import annotations

from dataclasses import asdict
from functools import cache

import pytest

from controller.api.policy_set import PolicySet
from controller.api.types import Preemption
from controller.sim.model import TraceJob
from controller.sim.run import traces_dir
from controller.sim.scenario import (
    Demand,
    default_policy_set,
    measure_demand,
    replay_capacity,
)
from controller.sim.trace import load_trace

TRACES = traces_dir()  # third_party/traces, or $QUARTERMASTER_TRACES


def job(job_id: str, submit: float, duration: float, gpus: int) -> TraceJob:
    return TraceJob(job_id, submit, duration, gpus)


SPIKE = [
    job("base", 0, 2000, 4),
    job("spike", 900, 100, 16),
    job("last", 1000, 10, 1),
]
"""4 GPUs for 90 % of [0, 1000] and 20 for the last 10 %."""


@pytest.mark.parametrize(
    ("jobs", "percentile", "want"),
    [
        pytest.param(
            SPIKE,
            95.0,
            Demand(p95=20, mean=5.6, peak=20, start=0, end=1000),
            id="p95 sits in a spike holding 10 % of the time; mean (4x900 + 20x100) / 1000",
        ),
        pytest.param(
            SPIKE,
            90.0,
            Demand(p95=4, mean=5.6, peak=20, start=0, end=1000),
            id="p90 is the base level that fills exactly 90 % of the time",
        ),
        pytest.param(
            [job("a", 0, 100, 8), job("b", 100, 100, 8), job("c", 200, 1, 1)],
            95.0,
            Demand(p95=8, mean=8, peak=8, start=0, end=200),
            id="a job ending as another starts is not counted twice",
        ),
        pytest.param(
            [job("a", 0, 100, 8), job("b", 0, 300, 2)],
            95.0,
            Demand(p95=10, mean=(10 * 100 + 2 * 200) / 300, peak=10, start=0, end=300),
            id="all submitted at once: measured to the last finish",
        ),
        pytest.param(
            [job("a", 0, 10, 8), job("b", 100, 10_000, 2), job("c", 200, 1, 1)],
            95.0,
            Demand(p95=2, mean=(8 * 10 + 2 * 100) / 200, peak=8, start=0, end=200),
            id="idle gaps count as zero and the drain after the last submit is left out",
        ),
    ],
)
def test_measure_demand(jobs: list[TraceJob], percentile: float, want: Demand) -> None:
    assert asdict(measure_demand(jobs, percentile=percentile)) == pytest.approx(asdict(want))


@pytest.mark.parametrize(
    ("jobs", "target", "want"),
    [
        pytest.param(SPIKE, 0.7, 24, id="bursty: p95 (20) binds, rounded up to whole nodes"),
        pytest.param(
            [job("flat", 0, 2000, 100), job("last", 1000, 1, 1)],
            0.7,
            144,
            id="flat: mean / 0.7 = 142.9 binds, so the cluster is not 100 % busy",
        ),
        pytest.param(
            [job("flat", 0, 2000, 100), job("last", 1000, 1, 1)],
            1.0,
            104,
            id="flat at 100 % utilization: 100 rounded up to 13 nodes",
        ),
        pytest.param([job("one", 0, 10, 1)], 0.7, 8, id="a single GPU still gets a node"),
    ],
)
def test_replay_capacity(jobs: list[TraceJob], target: float, want: int) -> None:
    assert replay_capacity(jobs, target_utilization=target) == want


@pytest.mark.parametrize(
    ("jobs", "target", "message"),
    [
        pytest.param([], 0.7, "empty trace", id="no jobs"),
        pytest.param(SPIKE, 0.0, "target_utilization", id="zero utilization"),
        pytest.param(SPIKE, 1.5, "target_utilization", id="over 100 % utilization"),
        pytest.param([job("huge", 0, 10, 200_000)], 0.7, "over the 100000", id="too big"),
    ],
)
def test_bad_inputs_raise(jobs: list[TraceJob], target: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        default_policy_set(jobs, target_utilization=target)


def check_policy(policy_set: PolicySet, capacity: int) -> None:
    """What default_policy_set promises about any trace's policy."""
    spec = policy_set.policy.spec
    assert [(t.name, t.priority, t.preemption, t.allow_spot) for t in spec.tiers] == [
        ("production", 100000, Preemption.LOWER_PRIORITY, True),
        ("research", 1000, Preemption.LOWER_PRIORITY, True),
        ("exploratory", 100, Preemption.NEVER, True),
    ]
    (pool,) = spec.pools
    assert (pool.name, pool.gpus_per_node, pool.max_gpus) == ("gpu", 8, capacity)
    assert (pool.on_demand.floor_gpus, pool.on_demand.ceiling_gpus) == (0, capacity)
    assert (pool.prices.spot_per_gpu_hour, pool.prices.on_demand_per_gpu_hour) == (1.2, 4.0)
    assert (pool.provisioning_latency_seconds, pool.spot_interruptions_per_hour) == (300, 0.05)
    assert (pool.spot_availability, pool.warm_pool.max_gpus) == (0.9, 0)
    risk = spec.risk
    assert (
        risk.raise_threshold,
        risk.lower_threshold,
        risk.evaluation_window_seconds,
        risk.cooldown_seconds,
        risk.max_step_gpus,
    ) == (0.2, 0.05, 600, 1800, max(8, capacity // 10))
    assert len(policy_set.projects) == 12
    quota: dict[str, list[int]] = {}
    for project in policy_set.projects:
        assert project.spec.share_capacity
        (pool_quota,) = project.spec.quotas
        assert (pool_quota.pool, pool_quota.borrowing_limit_gpus) == ("gpu", None)
        quota.setdefault(project.spec.tier, []).append(pool_quota.nominal_gpus)
    assert sum(map(sum, quota.values())) == capacity
    for tier, share in [("production", 0.4), ("research", 0.4), ("exploratory", 0.2)]:
        assert len(quota[tier]) == 4
        assert max(quota[tier]) - min(quota[tier]) <= 1, "split evenly"
        assert abs(sum(quota[tier]) - share * capacity) <= 4, "the tier's share, to the GPU"


@pytest.mark.parametrize(
    ("jobs", "capacity"),
    [
        pytest.param(SPIKE, 24, id="a small bursty trace"),
        pytest.param([job("one", 0, 10, 1)], 8, id="one node: some projects get no GPUs"),
        pytest.param(
            [job(f"j{i}", i * 60.0, 3600.0, 1 + i % 8) for i in range(1000)],
            376,
            id="a steady stream: mean 261.7 / 0.7 = 373.9 is over p95 (278) and binds",
        ),
    ],
)
def test_default_policy_set_on_synthetic_traces(jobs: list[TraceJob], capacity: int) -> None:
    check_policy(default_policy_set(jobs), capacity)


@cache
def real_jobs(name: str) -> list[TraceJob]:
    return load_trace(TRACES / name).jobs


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("philly.csv.gz", id="Philly"),
        pytest.param("alibaba_openb_2023.csv.gz", id="Alibaba 2023"),
    ],
)
def test_default_policy_set_on_real_traces(name: str) -> None:
    if not (TRACES / name).exists():
        pytest.fail(f"{TRACES / name} is missing: the traces ship in third_party/traces")
    jobs = real_jobs(name)
    demand = measure_demand(jobs)
    policy_set = default_policy_set(jobs)
    capacity = policy_set.policy.spec.pools[0].max_gpus
    # Captured: pytest shows it with a failure, and -q output stays clean.
    print(
        f"\n{name}: C = {capacity} GPUs (demand p95 {demand.p95:.0f}, mean "
        f"{demand.mean:.0f}, peak {demand.peak:.0f})"
    )
    assert capacity % 8 == 0
    assert capacity >= demand.p95
    check_policy(policy_set, capacity)
