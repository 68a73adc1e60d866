"""Why on-demand-only can miss more than a mix: a one-flavor pool at its limit fragments.

Kueue admits by quota, not by node fit. In a pool with one flavor at its NodePool limit, 1-GPU
jobs spread over every node; an 8-GPU job admitted by quota then holds 8 GPUs of quota while
no node has 8 free and no node can be added, and everyone behind it waits for quota though
GPUs stand idle, until a node empties. With two flavors (two NodePools) the 8-GPU job fits
neither flavor's free quota, so it is not admitted, holds nothing, and Kueue's BestEffortFIFO
lets the small jobs behind it in. (Spot interruptions break it up too: they empty nodes.)
This is real kube-scheduler + Kueue behaviour, which the replay models; it is not a bug of
the replay.

The smallest case, in `test_engine.py`'s setting (8-GPU nodes, 100 s provisioning latency,
spot always available, no interruptions): a pool of 16 GPUs, vision's 16 GPUs of quota.
- 0: eight 1-GPU jobs `l1`..`l8` fill a first node (Ready at 100); `l8` ends at 1000, the
  others run long (to 10100).
- 200: `x` (1 GPU, to 3000) finds the first node full: a second node, Ready at 300.
- 1100: `big` (8 GPUs, 1000 s). 1200: `s1` and `s2` (1 GPU, 500 s each).

All on-demand (one flavor, 16 GPUs of quota, limit 16): at 1100 quota in use is 8 (7 + x), so
`big` is admitted; but the nodes have 1 and 7 free and the limit is reached: it waits for a
node. `s1` and `s2` find all 16 GPUs of quota taken and wait for quota, while 8 GPUs are idle.
At 3000 `x` ends: its node is free for `big` (3000-4000) and 1 GPU of quota for `s1`, which
takes the free GPU of the first node (3000-3500); `s2` waits for `s1`'s quota (3500-4000).

Half and half (8 spot GPUs, 8 on-demand, two NodePools): the `l` jobs take the spot quota and
the spot node; `x` takes on-demand and the on-demand node. At 1100 `big` fits neither flavor's
free quota (1 spot, 7 on-demand): it is not admitted and holds nothing. `s1` takes the free
spot GPU and `s2` on-demand, both at 1200 on the nodes already up. `big` is admitted on
on-demand when `x` ends (3000) and starts at once on its node.
"""

from __future__ import annotations

import pytest

from controller.sim.engine import RunSpec, replay
from controller.sim.model import WAITED_FOR_NODE, WAITED_FOR_QUOTA
from tests.unit.sim.test_engine import job, outcomes, policy, sample_at, vision

SAMPLES = 250.0
JOBS = [
    *(job(f"l{i}", gpus=1, duration=10000) for i in range(1, 8)),
    job("l8", gpus=1, duration=900),
    job("x", submit=200, gpus=1, duration=2700),
    job("big", submit=1100, gpus=8, duration=1000),
    job("s1", submit=1200, gpus=1, duration=500),
    job("s2", submit=1200, gpus=1, duration=500),
]
ON_DEMAND_ONLY = RunSpec(
    "on-demand-only", "static", on_demand_fraction=1.0, sample_interval=SAMPLES
)
HALF = RunSpec("half", "static", on_demand_fraction=0.5, sample_interval=SAMPLES)


@pytest.mark.parametrize(
    ("spec", "starts", "pending_at_2000"),
    [
        pytest.param(
            ON_DEMAND_ONLY,
            {"big": 3000.0, "s1": 3000.0, "s2": 3500.0},
            2,
            id="one flavor: big holds quota without a node, the 1-GPU jobs wait for quota",
        ),
        pytest.param(
            HALF,
            {"big": 3000.0, "s1": 1200.0, "s2": 1200.0},
            1,
            id="two flavors: big is not admitted, the 1-GPU jobs start at once",
        ),
    ],
)
def test_a_one_flavor_pool_at_its_limit_fragments(
    spec: RunSpec, starts: dict[str, float], pending_at_2000: int
) -> None:
    result = replay(policy(vision(16)), JOBS, spec)
    got = outcomes(result)

    assert {o.job_id: o.first_start for o in result.outcomes if o.job_id[0] == "l"} == {
        f"l{i}": 100.0 for i in range(1, 9)
    }
    assert (got["l8"].finish, got["x"].first_start, got["x"].finish) == (1000.0, 300.0, 3000.0)
    assert {name: got[name].first_start for name in starts} == starts
    assert max(sum(s.gpus_provisioned.values()) for s in result.timeline) == 16
    # At 2000 both nodes are up and 8 of their 16 GPUs idle, whatever the flavors; with one
    # flavor s1 and s2 wait in the queue beside them (big is admitted), with two only big does.
    sample = sample_at(result, 2000)
    assert sum(sample.gpus_provisioned.values()) == 16
    assert sum(sample.gpus_in_use.values()) == 8
    assert sample.pending_jobs == pending_at_2000


def test_in_the_one_flavor_pool_the_wait_is_for_quota_held_by_a_job_without_a_node() -> None:
    """What the replay records about each wait: `big` waited 1900 s for a node (admitted at
    1100, started at 3000), `s1` 1800 s for quota (1200-3000) and `s2` 2300 s (1200-3500)."""
    got = outcomes(replay(policy(vision(16)), JOBS, ON_DEMAND_ONLY))

    assert got["big"].delays == {WAITED_FOR_NODE: 1900.0}
    assert got["s1"].delays == {WAITED_FOR_QUOTA: 1800.0}
    assert got["s2"].delays == {WAITED_FOR_QUOTA: 2300.0}
