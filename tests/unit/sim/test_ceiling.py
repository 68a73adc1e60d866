"""The pool ceiling holds while the mix moves (issue 14): a side grows only by what the other freed.

Lowering a ClusterQueue's quota evicts nothing and lowering a NodePool's limit removes no node,
so a shift of the mix under load must wait for the shrinking side's work to drain
(`controller.decide.shift`). First the rule itself, table-driven; then a replay where a raise
and then a give-back happen under full load, with the times worked out by hand; then the
traces in third_party: no run's peak passes its pool's ceiling.

The replay's setting is `test_engine.py`'s (its module docstring): one pool `a100` of 8-GPU
nodes, maxGpus 16, on-demand from 0 to 16, 100 s provisioning latency, spot always available,
no interruptions, an empty node removed 600 s after it empties; vision holds all 16 GPUs.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pytest

from controller.api.loader import load_policy_set
from controller.api.types import GpuPool
from controller.decide.shift import Held, held_by_side, limit_shift
from controller.risk.pools import NodeClaimView
from controller.risk.workloads import WorkloadView
from controller.sim.engine import BASELINES, RunSpec, parse_run, replay
from controller.sim.model import RunResult, Sample
from controller.sim.run import prepare, traces_dir
from tests.builders import policy_doc
from tests.unit.sim.test_engine import job, outcomes, policy, sample_at, vision

SPOT, ON_DEMAND = "spot", "on-demand"

# --------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("target", "held", "want"),
    [
        pytest.param(
            8,
            Held(0, 0),
            (8, 8, 8, 8),
            id="an idle pool shifts at once: 8 on-demand, 8 spot",
        ),
        pytest.param(
            8,
            Held(16, 0, spot_admitted_gpus=16),
            (0, 8, 0, 16),
            id="a raise with all 16 spot GPUs busy: on-demand waits at 0, spot quota drops to 8 "
            "but its NodePool keeps 16 for the admitted work",
        ),
        pytest.param(
            16,
            Held(16, 0, spot_admitted_gpus=16),
            (0, 0, 0, 16),
            id="a raise to all on-demand under full spot: nothing grows, spot admits nothing new",
        ),
        pytest.param(
            16,
            Held(8, 0, spot_admitted_gpus=8),
            (8, 0, 8, 8),
            id="half the spot work drained: on-demand grows by the 8 GPUs freed",
        ),
        pytest.param(
            16,
            Held(16, 0, spot_admitted_gpus=8),
            (0, 0, 0, 8),
            id="spot work drained but its node still up (not yet consolidated): still held",
        ),
        pytest.param(
            0,
            Held(0, 16, on_demand_admitted_gpus=16),
            (0, 0, 16, 0),
            id="a give-back with all 16 on-demand GPUs busy: spot waits at 0",
        ),
        pytest.param(
            0,
            Held(0, 8, on_demand_admitted_gpus=8),
            (0, 8, 8, 8),
            id="a give-back half drained: spot grows by the 8 freed",
        ),
        pytest.param(
            8,
            Held(8, 8, spot_admitted_gpus=8, on_demand_admitted_gpus=8),
            (8, 8, 8, 8),
            id="a mix already in place holds",
        ),
    ],
)
def test_limit_shift(target: int, held: Held, want: tuple[int, int, int, int]) -> None:
    """want = (on-demand quota, spot quota, on-demand NodePool limit, spot NodePool limit), for a
    pool of 16 GPUs. The quotas never add up to more than 16; the limits never do either."""
    shift = limit_shift("a100", total=16, target=target, held=held)

    got = (shift.applied, shift.spot, shift.on_demand_limit, shift.spot_limit)
    assert got == want
    assert shift.applied + shift.spot <= 16
    assert shift.on_demand_limit + shift.spot_limit <= 16
    complete = shift.applied == target and shift.spot == 16 - target
    assert (shift.waiting_gpus == 0) == complete
    assert shift.waiting_gpus == (target - shift.applied) + (16 - target - shift.spot)


def test_limit_shift_never_overshoots_on_any_state() -> None:
    """Every target and every state of a 16-GPU pool of 8-GPU nodes a real cluster can be in
    (whole nodes, admitted work within its side's nodes or coming, sides within the ceiling)."""
    for target in range(0, 17, 8):
        for spot_nodes in range(0, 17, 8):
            for od_nodes in range(0, 17 - spot_nodes, 8):
                for spot_admitted in range(0, spot_nodes + 1, 8):
                    for od_admitted in range(0, od_nodes + 1, 8):
                        held = Held(spot_nodes, od_nodes, spot_admitted, od_admitted)
                        shift = limit_shift("a100", total=16, target=target, held=held)
                        assert shift.applied + shift.spot <= 16, held
                        assert shift.on_demand_limit + shift.spot_limit <= 16, held
                        # Each side may keep what it holds of admitted work.
                        assert shift.on_demand_limit >= od_admitted
                        assert shift.spot_limit >= spot_admitted


POOL = load_policy_set([("policy", policy_doc())]).policy.spec.pools


def view(gpus: int, flavor: str | None, *, finished: bool = False) -> WorkloadView:
    admitted = flavor is not None
    return WorkloadView(
        namespace="vision",
        name=f"w{gpus}-{flavor}",
        queue="vision",
        priority=0,
        gpus=gpus,
        created=0.0,
        admitted_at=1.0 if admitted else None,
        finished=finished,
        cluster_queue="vision" if admitted else None,
        flavors=(flavor,) if flavor else (),
    )


def claim(capacity_type: str, *, ready: bool = True, deleting: bool = False) -> NodeClaimView:
    return NodeClaimView("a100", capacity_type, 0.0, 100.0 if ready else None, deleting)


@pytest.mark.parametrize(
    ("workloads", "claims", "want"),
    [
        pytest.param([], [], Held(0, 0), id="nothing runs, no nodes: nothing held"),
        pytest.param(
            [view(8, "a100-spot"), view(4, "a100-on-demand")],
            [],
            Held(8, 8, 8, 8),
            id="admitted GPUs in whole nodes: 4 on-demand GPUs hold a node",
        ),
        pytest.param(
            [view(12, "a100-spot")],
            [claim(SPOT)],
            Held(16, 0, 16, 0),
            id="admitted work counts though its second node is not there yet",
        ),
        pytest.param(
            [],
            [claim(SPOT), claim(ON_DEMAND, ready=False)],
            Held(8, 8, 0, 0),
            id="empty nodes, Ready or coming, are held until they go",
        ),
        pytest.param(
            [view(8, None), view(8, "a100-spot", finished=True)],
            [claim(SPOT, deleting=True)],
            Held(0, 0),
            id="pending or finished work and nodes being deleted hold nothing",
        ),
        pytest.param(
            [view(8, "h100-spot")],
            [],
            Held(0, 0),
            id="work on another pool's flavor is not this pool's",
        ),
    ],
)
def test_held_by_side(
    workloads: list[WorkloadView], claims: list[NodeClaimView], want: Held
) -> None:
    pools: Sequence[GpuPool] = POOL
    running = [w for w in workloads if not w.finished]
    assert held_by_side(pools, running, claims) == {"a100": want}


# --------------------------------------------------------------------------- the replay


REACTIVE = RunSpec("reactive:0.9", "reactive", threshold=0.9, sample_interval=100)
"""Steps on-demand up a node while more than 14.4 GPUs wait (so 16 waiting, never 8), down a
node after two passes with nothing waiting: the raise and the give-back come at known passes
(every 900 s)."""

JOBS = [
    job("s1", submit=1, duration=5000),
    job("s2", submit=1, duration=8000),
    job("o1", submit=1000, duration=6000),
    job("o2", submit=1000, duration=6000),
    job("g1", submit=12000, duration=1000),
    job("g2", submit=15500, gpus=12, duration=1000),
]


@functools.cache
def shifting() -> RunResult:
    return replay(policy(vision(16)), JOBS, REACTIVE)


def total(sample: Sample) -> tuple[float, float]:
    return sample.gpus_provisioned[SPOT], sample.gpus_provisioned[ON_DEMAND]


def test_the_ceiling_holds_at_every_sample() -> None:
    result = shifting()

    assert len(result.timeline) > 150
    assert max(sum(total(s)) for s in result.timeline) == 16
    assert result.peak_provisioned == {"a100": 16}
    assert result.ceilings == {"a100": 16}
    assert result.unfinished == 0


def test_a_raise_under_full_spot_waits_for_spot_work_to_finish() -> None:
    """s1 and s2 take the 16 spot GPUs at 1 (nodes Ready at 101) and run 101-5101 and
    101-8101. o1 and o2 (16 GPUs) wait from 1000; reactive raises to 8 on-demand at 1800 and to
    16 at 2700, but spot holds 16: on-demand quota stays 0 and spot's drops to 0 (its NodePool
    keeps 16 for the admitted work). s1's node empties at 5101 and goes at 5701; the pass at
    6300 grows on-demand by those 8 GPUs and o1 starts on a new node at 6400. s2's node goes at
    8701 and the pass at 9000 completes the shift (16 on-demand): o2 starts at 9100."""
    result = shifting()
    got = outcomes(result)

    assert (got["s1"].first_start, got["s1"].finish) == (101.0, 5101.0)
    assert (got["s2"].first_start, got["s2"].finish) == (101.0, 8101.0)
    assert (got["o1"].first_start, got["o2"].first_start) == (6400.0, 9100.0)
    want = {
        1700.0: ((16.0, 0.0), 0.0),  # before the raise
        2800.0: ((16.0, 0.0), 0.0),  # raised to 16, nothing freed: on-demand quota 0
        5600.0: ((16.0, 0.0), 0.0),  # s1 done, its node not yet gone
        5800.0: ((8.0, 0.0), 0.0),  # node gone; the next pass is at 6300
        6400.0: ((8.0, 8.0), 8.0),  # on-demand grew by the 8 GPUs spot freed
        8600.0: ((8.0, 8.0), 8.0),  # s2 done at 8101, its node up until 8701
        8800.0: ((0.0, 8.0), 8.0),
        9100.0: ((0.0, 16.0), 16.0),  # the shift completed at 9000
    }
    for at, (provisioned, on_demand_quota) in want.items():
        sample = sample_at(result, at)
        assert (total(sample), sample.on_demand_target_by_pool["a100"]) == (
            provisioned,
            on_demand_quota,
        ), at


def test_a_give_back_under_full_on_demand_waits_for_on_demand_work_to_finish() -> None:
    """o1 (6400-12400) and o2 (9100-15100) hold all 16 on-demand GPUs. Nothing waits from 9000:
    reactive lowers to 8 at 10800 and to 0 at 11700; on-demand quota drops at once, but spot
    grows only by what on-demand frees. g1 (8 spot GPUs) arrives at 12000 and waits; o1's node
    goes at 13000 and the pass at 13500 gives spot 8: g1 starts at 13600 on a new spot node (and
    its node goes at 15200). g2 (12 GPUs, under the 14.4 that would raise) arrives at 15500 and
    fits only a spot quota of 16: o2's node goes at 15700, the pass at 16200 completes the
    give-back, and g2 starts at 16300 on two new spot nodes."""
    result = shifting()
    got = outcomes(result)

    assert (got["o1"].finish, got["o2"].finish) == (12400.0, 15100.0)
    assert (got["g1"].first_start, got["g1"].finish) == (13600.0, 14600.0)
    assert (got["g2"].first_start, got["g2"].finish) == (16300.0, 17300.0)
    want = {
        10700.0: ((0.0, 16.0), 16.0),
        10900.0: ((0.0, 16.0), 8.0),  # lowered to 8 at 10800: quota 8, both nodes kept
        11800.0: ((0.0, 16.0), 0.0),  # lowered to 0 at 11700
        12900.0: ((0.0, 16.0), 0.0),  # o1 done at 12400, its node up until 13000
        13100.0: ((0.0, 8.0), 0.0),  # gone; spot grows at the next pass, 13500
        13600.0: ((8.0, 8.0), 0.0),  # spot grew by the 8 freed: g1's node
        15000.0: ((8.0, 8.0), 0.0),  # g1 done at 14600, its node up until 15200
        15600.0: ((0.0, 8.0), 0.0),  # g2 waits: spot quota 8, o2's node up until 15700
        15800.0: ((0.0, 0.0), 0.0),
        16300.0: ((16.0, 0.0), 0.0),  # the give-back completed at 16200
    }
    for at, (provisioned, on_demand_quota) in want.items():
        sample = sample_at(result, at)
        assert (total(sample), sample.on_demand_target_by_pool["a100"]) == (
            provisioned,
            on_demand_quota,
        ), at


# ------------------------------------------------------------------- the traces in third_party


TRACE = "alibaba_openb_2023.csv.gz"
WINDOW = "busiest14d"
"""The whole trace takes some 30 s for these six runs on this machine (the reactive ones most);
its busiest 14 days (1,262 jobs on a sized pool of 32 GPUs, reactive changing the mix 32 times)
take some 6 s."""
RUNS = (*BASELINES, "reactive:0.5", "static:0.3")


@functools.cache
def alibaba() -> dict[str, RunResult]:
    path = traces_dir() / TRACE
    if not path.is_file():
        pytest.fail(f"{path} is not on this machine: the traces ship in third_party/traces")
    inputs = prepare(path, seed=0, window=WINDOW)
    return {name: replay(inputs.policy_set, inputs.jobs, parse_run(name)) for name in RUNS}


@pytest.mark.parametrize("name", RUNS)
def test_no_baseline_passes_the_ceiling_on_the_alibaba_trace(name: str) -> None:
    result = alibaba()[name]

    assert result.ceilings
    for pool, ceiling in result.ceilings.items():
        assert 0 < result.peak_provisioned[pool] <= ceiling, (pool, result.peak_provisioned)
    ceiling = sum(result.ceilings.values())
    assert max(sum(s.gpus_provisioned.values()) for s in result.timeline) <= ceiling
    if name.startswith("reactive"):
        assert result.mix_changes > 0, "the mix moved under load, so the ceiling was tested"


def test_a_raise_of_the_policy_under_full_spot_usage_holds_the_ceiling() -> None:
    """The policy run on the same load, at 30 % spot availability, seed 1: the fake market is
    short of spot at the start, so s1 and s2 start late and hold all 16 GPUs; p and q, due at
    10,000 s, make it only if what s1 frees comes back as on-demand (spot delivers 30 % of its
    quota), so their deadlines come under risk and the policy raises on-demand while spot is
    full; the pool never holds more than its 16 GPUs."""
    jobs = [
        job("s1", submit=1, duration=5000),
        job("s2", submit=1, duration=8000),
        *(job(n, submit=1000, duration=1000, deadline=10_000) for n in ("p", "q")),
    ]
    spec = RunSpec("policy", "policy", sample_interval=100)
    result = replay(policy(vision(16), spotAvailability=0.3), jobs, spec, seed=1)

    assert result.mix_changes > 0, "the policy moved the mix under load"
    assert max(s.on_demand_target for s in result.timeline) > 0
    assert max(sum(total(s)) for s in result.timeline) <= 16
    assert result.peak_provisioned == {"a100": 16}
    assert result.unfinished == 0
