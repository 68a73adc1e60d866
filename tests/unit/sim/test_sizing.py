"""A given policy checked against the trace's demand: which sizes are warned about, and that the
warning gives the numbers a reader needs.

Capacities and demands are built by hand, so each case's ratio is plain: a 1,000-GPU p95 with a
mean of 600 and a peak of 1,200 unless a case says otherwise.
"""

from __future__ import annotations

import pytest

from controller.api.loader import load_path, load_policy_set
from controller.examples import EXAMPLE_DIR
from controller.sim.model import TraceJob
from controller.sim.run import traces_dir
from controller.sim.scenario import Demand, default_policy_set, measure_demand
from controller.sim.sizing import (
    PolicyCapacity,
    PoolCapacity,
    policy_capacity,
    size_warnings,
)
from controller.sim.trace import BusiestWindow, load_trace
from tests.builders import policy_doc, pool_doc, project_doc

TRACES = traces_dir()  # third_party/traces, or $QUARTERMASTER_TRACES
DEMAND = Demand(p95=1000.0, mean=600.0, peak=1200.0, start=0.0, end=86400.0)


def one_pool(quota: int, max_gpus: int | None = None) -> PolicyCapacity:
    return PolicyCapacity("fleet", (PoolCapacity("a100", max_gpus or quota, quota),))


@pytest.mark.parametrize(
    ("capacity", "demand", "want"),
    [
        pytest.param(one_pool(1000), DEMAND, None, id="a policy at the p95 is not warned about"),
        pytest.param(
            one_pool(600), DEMAND, None, id="at the mean and above half the p95: no warning"
        ),
        pytest.param(
            one_pool(600),
            Demand(p95=1200.0, mean=500.0, peak=1500.0, start=0.0, end=1.0),
            None,
            id="exactly half the p95 is not far below it",
        ),
        pytest.param(
            one_pool(592),
            Demand(p95=1200.0, mean=500.0, peak=1500.0, start=0.0, end=1.0),
            "far too small",
            id="under half the p95 is far too small",
        ),
        pytest.param(
            one_pool(500),
            DEMAND,
            "the queue grows through the whole submit period",
            id="under the mean the queue grows without end",
        ),
        pytest.param(one_pool(2400), DEMAND, None, id="twice the peak is not warned about"),
        pytest.param(
            one_pool(2408), DEMAND, "far bigger than this trace needs", id="over twice the peak"
        ),
        pytest.param(
            one_pool(0),
            DEMAND,
            "Even the mean is above it",
            id="a policy that can run nothing is far too small",
        ),
    ],
)
def test_which_sizes_are_warned_about(
    capacity: PolicyCapacity, demand: Demand, want: str | None
) -> None:
    warnings = size_warnings(capacity, demand)
    if want is None:
        assert warnings == []
    else:
        assert len(warnings) == 1
        assert want in warnings[0]


def test_a_warning_gives_the_ceiling_the_pools_and_the_demand() -> None:
    """The example policy's two pools against Philly's busiest 14 days (p95 1,904, mean 1,453,
    peak 2,436): the numbers a reader needs to see why the hit rates are low."""
    capacity = PolicyCapacity(
        "gpu-fleet", (PoolCapacity("a100", 256, 124), PoolCapacity("h100", 128, 72))
    )
    demand = Demand(p95=1904.0, mean=1453.1, peak=2436.0, start=0.0, end=1.0)
    (warning,) = size_warnings(capacity, demand)
    for text in (
        "policy gpu-fleet is far too small",
        "at most 196 GPUs at once (its quotas plus tier reservations: a100 124, h100 72;",
        "maxGpus adds up to 384",
        "p95 of 1,904 GPUs and a mean of 1,453 (peak 2,436)",
        "7.4 x the ceiling",
        "most jobs will queue",
        "leave out --policy",
    ):
        assert text in warning, text


def test_the_ceiling_is_the_quota_not_max_gpus() -> None:
    """The example policy: maxGpus 256 + 128, but quotas plus the production tier's 16-GPU
    reservation are 124 on a100 and 72 on h100, and only they can run."""
    capacity = policy_capacity(load_path(EXAMPLE_DIR))
    assert [(p.pool, p.max_gpus, p.quota_gpus) for p in capacity.pools] == [
        ("a100", 256, 124),
        ("h100", 128, 72),
    ]
    assert (capacity.ceiling_gpus, capacity.max_gpus) == (196, 384)


def test_a_quota_above_max_gpus_is_capped_by_it() -> None:
    """Only an unvalidated policy can hold more quota than maxGpus; the smaller still wins."""
    assert PoolCapacity("a100", max_gpus=64, quota_gpus=96).ceiling_gpus == 64


def test_a_one_pool_policy_names_no_pool() -> None:
    docs = [
        policy_doc(pools=[pool_doc(maxGpus=32, onDemand={"floorGpus": 0, "ceilingGpus": 32})]),
        project_doc("vision"),
    ]
    capacity = policy_capacity(load_policy_set((f"doc{i}", d) for i, d in enumerate(docs)))
    (warning,) = size_warnings(capacity, DEMAND)
    assert "at most 16 GPUs at once (its quotas plus tier reservations; maxGpus adds up to 32" in (
        warning
    )
    assert "a100" not in warning


@pytest.mark.parametrize(
    "jobs",
    [
        pytest.param(
            [TraceJob(f"j{i}", 600.0 * i, 3600.0, 1 + i % 8) for i in range(200)],
            id="a steady stream of jobs",
        ),
        pytest.param(
            [TraceJob("wide", 0.0, 86400.0, 64), TraceJob("small", 3600.0, 60.0, 1)],
            id="one wide job and one tiny one",
        ),
    ],
)
def test_the_policy_sized_to_a_trace_is_never_warned_about(jobs: list[TraceJob]) -> None:
    """The sized policy holds max(p95, mean / 0.7) and at most 1.43 x the peak: inside both
    thresholds by construction."""
    assert size_warnings(policy_capacity(default_policy_set(jobs)), measure_demand(jobs)) == []


def test_example_policy_against_philly_busiest_14_days() -> None:
    path = TRACES / "philly.csv.gz"
    if not path.exists():
        pytest.fail(f"{path} is not on this machine: the traces ship in third_party/traces")
    jobs = load_trace(path, window=BusiestWindow(14)).jobs
    (warning,) = size_warnings(policy_capacity(load_path(EXAMPLE_DIR)), measure_demand(jobs))
    assert "at most 196 GPUs" in warning
    assert "p95 of 1,904 GPUs and a mean of 1,453 (peak 2,436)" in warning
