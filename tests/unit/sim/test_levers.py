"""The levers the controller pulls, each in a micro-scenario with its answer worked out by hand.

The setting is `test_engine.py`'s (its module docstring): one pool `a100` of 8-GPU nodes, 100 s
provisioning latency, no interruptions, spot always available unless a case says otherwise,
an empty node gone 600 s after it empties; project `vision` in tier `production` (priority
1000; tier `research` is 100, so a boost step is (900 - 1) // 4 = 224).

- A boost reorders admission (the policy run) where the baselines keep FIFO.
- A warm node takes work without provisioning latency.
- An 8-GPU job on an 8-GPU quota at 90 % spot availability has a finite risk, every split the
  controller renders keeps a flavor it fits, and the replay admits and finishes it.
- Attribution adds up: per run and tier, the causes' counts are the misses.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from controller.api.loader import load_policy_set
from controller.api.policy_set import PolicySet
from controller.capacity import PoolTarget, whole_nodes_within
from controller.decide.observation import History, Observation
from controller.decide.plan import CapacityPlan, plan_capacity
from controller.metrics import Metrics
from controller.render.desired import Rendered, render
from controller.risk.workloads import WorkloadView
from controller.sim.engine import ABLATIONS, BASELINES, POLICY, RunSpec, replay
from controller.sim.model import CAUSES
from controller.sim.report import run_figures
from tests.builders import policy_doc, pool_doc, project_doc
from tests.unit.sim.test_engine import (
    ALL_SPOT,
    LATENCY,
    job,
    outcomes,
    policy,
    random_scenario,
    sample_at,
    vision,
)

HOUR = 3600.0
FIXED_NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC).timestamp()

# --------------------------------------------------------------------------- boosts


BOOST_JOBS = [
    job("running", duration=3000),
    # Submitted first, 100 h of slack: urgency level 4, boost -4 x 224 = -896 (priority 104).
    job("loose", submit=100, duration=1000, deadline=100 + 1000 + 100 * HOUR),
    # Submitted later, 2 h of slack: level 1, boost -224 (priority 776).
    job("tight", submit=200, duration=1000, deadline=200 + 1000 + 2 * HOUR),
]


@pytest.mark.parametrize(
    ("spec", "first", "second", "mix_changes"),
    [
        pytest.param(
            POLICY, "tight", "loose", 0, id="the policy's boosts admit the tighter deadline first"
        ),
        pytest.param(ALL_SPOT, "loose", "tight", 0, id="a static baseline keeps FIFO order"),
        pytest.param(
            BASELINES["reactive"],
            "loose",
            "tight",
            1,
            id="the reactive baseline keeps FIFO order (all on-demand from its first pass)",
        ),
    ],
)
def test_a_boost_reorders_admission(
    spec: RunSpec, first: str, second: str, mix_changes: int
) -> None:
    """vision's 8 GPUs are full with `running` (100-3100). `loose` and `tight` wait behind
    it; when it ends at 3100 the queue's head takes its node at once (still up) and runs to
    4100, and the other then runs 4100-5100. Both deadlines are met either way (the tight one
    at 8400): the risk stays low, so the policy keeps the mix and only the order differs.
    Reactive sees 8 pending GPUs at its first pass (t=0) and goes all on-demand (one change)
    before anything runs: the same times, on on-demand nodes."""
    result = replay(policy(vision(8), max_gpus=8), BOOST_JOBS, spec)

    got = outcomes(result)
    assert (got["running"].first_start, got["running"].finish) == (LATENCY, 3100.0)
    assert (got[first].first_start, got[first].finish) == (3100.0, 4100.0)
    assert (got[second].first_start, got[second].finish) == (4100.0, 5100.0)
    assert result.mix_changes == mix_changes


# --------------------------------------------------------------------------- warm pools


@pytest.mark.parametrize(
    ("warm", "start"),
    [
        pytest.param(
            {"minGpus": 8, "maxGpus": 8},
            1000.0,
            id="a warm node (up since 100) takes the job at its submit time",
        ),
        pytest.param(
            {"minGpus": 0, "maxGpus": 0},
            1000.0 + LATENCY,
            id="without a warm pool the job waits for a node: submit + 100 s",
        ),
    ],
)
def test_a_warm_node_takes_work_without_provisioning_latency(
    warm: dict[str, int], start: float
) -> None:
    """The policy run's first pass (t=0) sets the warm target; with minGpus 8 a placeholder
    node launches at 0 and is Ready at 100. The 8-GPU job arrives at 1000, preempts the
    placeholder and starts there at once; with no warm pool a node launches at 1000."""
    spec = RunSpec("policy", "policy", sample_interval=50)
    result = replay(policy(vision(16), warmPool=warm), [job("a", submit=1000)], spec)

    got = outcomes(result)["a"]
    assert (got.first_start, got.finish) == (start, start + 1000)
    warm_gpus = float(warm["minGpus"])
    assert sample_at(result, 500).gpus_provisioned == {"spot": warm_gpus, "on-demand": 0.0}
    assert sample_at(result, 500).gpus_in_use["spot"] == warm_gpus, "placeholders use the node"


@pytest.mark.parametrize(
    ("warm", "met", "cause"),
    [
        pytest.param({"minGpus": 8, "maxGpus": 8}, True, None, id="a warm node meets it"),
        pytest.param(
            {"minGpus": 0, "maxGpus": 0}, False, "waited for a node", id="a node launch misses it"
        ),
    ],
)
def test_a_deadline_tighter_than_a_node_launch_is_met_only_on_a_node_already_up(
    warm: dict[str, int], met: bool, cause: str | None
) -> None:
    """Slack 50 s (deadline 1000 + 1000 + 50) against a 100 s launch: started at its submit
    on the warm node it finishes at 2000, in time; on a new node at 2100, 50 s late. Either
    way the report counts it as tighter than a launch, and as missed only without the node."""
    spec = RunSpec("policy", "policy", sample_interval=50)
    tight = job("a", submit=1000, duration=1000, deadline=1000 + 1000 + LATENCY / 2)
    result = replay(policy(vision(16), warmPool=warm), [tight], spec)

    got = outcomes(result)["a"]
    assert (got.slack, got.launch_seconds, got.tighter_than_launch) == (LATENCY / 2, LATENCY, True)
    assert (got.met, got.cause) == (met, cause)
    overall = run_figures(result).overall
    assert (overall.tight, overall.tight_missed) == (1, 0 if met else 1)


# --------------------------------------------------------------------------- gang jobs


GANG = policy(
    vision(8, deadlines=[{"name": "paper", "at": "2026-03-03T09:00:00Z"}]),
    max_gpus=8,
    spotAvailability=0.9,
)
"""vision holds 8 GPUs of an 8-GPU pool (one node); the paper is due 24 h after FIXED_NOW."""


def gang_workload(hours: float = 2.0) -> WorkloadView:
    return WorkloadView(
        namespace="vision",
        name="train",
        queue="vision",
        priority=1000,
        gpus=8,
        created=FIXED_NOW - 60,
        expected_duration=hours * HOUR,
        deadline="paper",
    )


def gang_plan(rendered: Rendered | None = None) -> CapacityPlan:
    return plan_capacity(
        Observation(
            GANG,
            states={},
            workloads=[gang_workload()],
            node_claims=(),
            history=History(available=True),
            now=FIXED_NOW,
            applied=rendered.quotas if rendered is not None else None,
        )
    )


def widest_flavor(rendered: Rendered) -> int:
    """The largest GPU nominal quota of any flavor of vision's ClusterQueue."""
    (queue,) = [o for o in rendered.objects if o["kind"] == "ClusterQueue"]
    return max(
        int(resource["nominalQuota"])
        for group in queue["spec"]["resourceGroups"]
        for flavor in group["flavors"]
        for resource in flavor["resources"]
        if resource["name"] == "nvidia.com/gpu"
    )


def metric_values(plan: CapacityPlan) -> list[tuple[str, float]]:
    metrics = Metrics(CollectorRegistry())
    metrics.update(GANG, plan)
    return [
        (sample.name, sample.value)
        for family in metrics.registry.collect()
        for sample in family.samples
    ]


def test_an_8_gpu_job_on_an_8_gpu_quota_at_90_percent_spot_has_a_finite_risk() -> None:
    """2 hours of work due in 24: the pod set is indivisible (8 GPUs, never 7.2 fluid ones),
    so it starts on one node, spot or on-demand; even after a shortage it finishes long before
    the cutoff. Risk < 1, slack and projected finish finite, and so is the slack metric."""
    plan = gang_plan()

    (report,) = plan.deadlines
    assert report.estimate.startable
    assert report.estimate.risk < 0.5
    assert math.isfinite(report.estimate.slack_seconds)
    assert 20 * HOUR < report.estimate.slack_seconds < 24 * HOUR
    assert math.isfinite(report.estimate.p50_finish)
    assert math.isfinite(report.estimate.p90_finish)
    slack = [v for n, v in metric_values(plan) if n == "quartermaster_deadline_slack_seconds"]
    assert slack == [report.estimate.slack_seconds]


def test_no_metric_of_the_gang_job_is_infinite() -> None:
    values = metric_values(gang_plan())

    assert [(n, v) for n, v in values if not math.isfinite(v)] == []


@pytest.mark.parametrize("asked", range(9))
def test_every_split_the_controller_renders_keeps_a_flavor_the_gang_fits(asked: int) -> None:
    """Whatever on-demand GPUs the decision asks for (0..8), the controller rounds them to whole
    nodes (`whole_nodes_within`: 0 stays 0, 1..8 become 8), so vision's ClusterQueue has a flavor
    with nominal quota 8: the job can be admitted, and its risk under that split is < 1."""
    target = whole_nodes_within(asked, 8, 8)
    assert target == (0 if asked == 0 else 8)
    rendered = render(GANG, targets={"a100": PoolTarget(target, pod_sets={"vision": 8})})

    assert widest_flavor(rendered) >= 8
    (report,) = gang_plan(rendered).deadlines
    assert report.estimate.startable
    assert report.estimate.risk < 1.0
    assert math.isfinite(report.estimate.slack_seconds)


def manual(on_demand: int) -> PolicySet:
    """GANG with the mix set by hand: `spec.override` Manual, `on_demand` GPUs of a100."""
    docs = [
        policy_doc(
            override={"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": on_demand}]},
            pools=[pool_doc(maxGpus=8, onDemand={"floorGpus": 0, "ceilingGpus": 8})],
        ),
        project_doc("vision", quotas=[{"pool": "a100", "nominalGpus": 8}]),
    ]
    return load_policy_set((f"doc{i}", d) for i, d in enumerate(docs))


@pytest.mark.parametrize("on_demand", range(1, 8))
def test_a_manual_split_off_whole_nodes_still_keeps_a_flavor_the_gang_fits(
    on_demand: int,
) -> None:
    plan = plan_capacity(
        Observation(
            manual(on_demand),
            states={},
            workloads=[gang_workload()],
            node_claims=(),
            history=History(),
            now=FIXED_NOW,
        )
    )

    assert widest_flavor(plan.rendered) >= 8


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed {s}") for s in range(3)])
def test_the_gang_job_is_admitted_and_finishes_in_the_replay(seed: int) -> None:
    """The same job in the policy run, 90 % spot availability (shortages of 30 min on average
    delay spot launches): it is admitted, starts on one whole node and meets its deadline."""
    at = 3600.0
    gang = job("train", submit=at, duration=2 * HOUR, deadline=at + 24 * HOUR)
    result = replay(policy(vision(8), max_gpus=8, spotAvailability=0.9), [gang], POLICY, seed=seed)

    got = outcomes(result)["train"]
    assert got.first_start is not None and got.finish is not None
    assert got.finish == got.first_start + 2 * HOUR
    assert got.met is True
    assert result.unfinished == 0


# --------------------------------------------------------------------------- attribution


@pytest.mark.parametrize(
    "spec", [pytest.param(s, id=f"{s.name} run") for s in (POLICY, *BASELINES.values())]
)
def test_the_causes_of_the_misses_add_up_per_run_and_tier(spec: RunSpec) -> None:
    """On `test_engine`'s random scenario (150 jobs, three tiers, interruptions, shortages):
    per tier and over all tiers, every miss has exactly one cause, so the causes' counts sum
    to the misses, and the tiers' misses sum to the run's."""
    ps, jobs = random_scenario()
    result = replay(ps, jobs, spec, seed=1)
    figures = run_figures(result, tiers=[t.name for t in ps.policy.spec.tiers])

    assert figures.overall.missed > 0, "the scenario misses some deadlines, so this can fail"
    for tier in (*figures.tiers, figures.overall):
        assert list(tier.misses_by_cause) == list(CAUSES)
        assert sum(tier.misses_by_cause.values()) == tier.missed, tier
    assert sum(t.missed for t in figures.tiers) == figures.overall.missed
    for cause in CAUSES:
        assert (
            sum(t.misses_by_cause[cause] for t in figures.tiers)
            == (figures.overall.misses_by_cause[cause])
        )
    # The engine gave each miss its cause, and only misses one.
    missed = [o for o in result.outcomes if o.met is False]
    assert all(o.cause in CAUSES for o in missed)
    assert all(o.cause is None for o in result.outcomes if o.met is not False)


# --------------------------------------------------------------------------- moves off spot


def test_a_job_stranded_on_spot_is_moved_to_on_demand_when_spot_would_make_it_late() -> None:
    """On a Kueue that reports PodsReady, a market with no spot at all: the 4-hour job (8 GPUs,
    due at 7 h) is admitted on spot, Kueue's first flavor, and its launch fails. The pass the
    error wakes learns the shortage (taken to last the prior's 900 s); each later pass judges
    the job stranded: its runtime at 95 % is 14,400 x exp(1.6449 x 0.25 - 0.25^2 / 2) =
    21,056 s, and on spot it needs that, the shortage and a launch, 22,056 s. At 2,700 s it has
    22,500 s left and stays; at 3,600 s it has 21,600: the lane moves it (its idle spot quota
    is held on-demand for it). Admitted on on-demand at once, its node is up at 3,700 and it
    ends at 18,100, in time. Without lanes, or on Kueue's default (no PodsReady, so nothing
    says it waits), it waits for spot to the end."""
    stranded = [job("train", duration=4 * HOUR, deadline=7 * HOUR)]
    market = policy(vision(), spotAvailability=0.0)

    moved = replay(market, stranded, ABLATIONS["policy-pods-ready"])
    outcome = outcomes(moved)["train"]
    assert (outcome.first_start, outcome.finish, outcome.cause) == (3700.0, 18100.0, None)
    assert (moved.lane_moves, moved.lane_writes) == (1, 1)
    # The wait that made it move stays a wait for a node.
    assert outcome.delays == {"waited for a node": 3700.0}

    # On Kueue's default (no PodsReady) the controller cannot tell it waits; nor without lanes.
    for spec in (POLICY, RunSpec("no-lanes", "policy", lanes=False, pods_ready=True)):
        kept = replay(market, stranded, spec)
        assert outcomes(kept)["train"].finish is None
        assert outcomes(kept)["train"].cause == "waited for a node"
        assert kept.lane_moves == 0
