"""The replay engine on micro scenarios small enough to work out by hand, through `replay()`.

Unless a case says otherwise: one pool `a100` of 8-GPU nodes, at most 16 GPUs, on-demand from
0 to 16, spot $1 and on-demand $4 a GPU-hour, 100 s provisioning latency, no spot
interruptions and spot always available; project `vision` in tier `production` (priority 1000,
preempts LowerPriority) with 16 GPUs of quota; tier `research` is priority 100 and never
preempts. Jobs are 8 GPUs and checkpoint every 1000 s. Runs use a static mix (a fixed
on-demand fraction of the quota, so the quotas per flavor are known exactly) and, where the
timeline is read, a sample every 250 s, away from the event times asserted on.

Times that follow from the rules, used throughout: a node launched at t is ready at t + 100;
a job starts when its node is ready and finishes `duration - progress` later; a stopped job
keeps floor(progress / 1000) x 1000 s of work; an empty node goes 600 s after it empties; a
replay ends at the last job's finish, and nodes still up then are billed up to it.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from typing import Any

import pytest

from controller.api.loader import load_policy_set
from controller.api.policy_set import PolicySet
from controller.decide.plan import plan_capacity
from controller.sim.engine import BASELINES, POLICY, RunSpec, replay
from controller.sim.model import FlavorGpus, JobOutcome, RunResult, Sample, SimJob
from tests.builders import policy_doc, pool_doc, project_doc

Doc = dict[str, Any]
SPOT, ON_DEMAND = "spot", "on-demand"
LATENCY = 100.0
CHECKPOINT = 1000.0
SPOT_PRICE, ON_DEMAND_PRICE = 1.0, 4.0
SAMPLE = 250.0
ALL_SPOT = RunSpec("all-spot", "static", on_demand_fraction=0.0, sample_interval=SAMPLE)
HALF = RunSpec("half", "static", on_demand_fraction=0.5, sample_interval=SAMPLE)


def quota(gpus: int) -> list[Doc]:
    return [{"pool": "a100", "nominalGpus": gpus}]


def vision(gpus: int = 16, **spec: Any) -> Doc:
    return project_doc("vision", quotas=quota(gpus), **spec)


def nlp(gpus: int = 8, **spec: Any) -> Doc:
    """A research project: lower priority, never preempts."""
    return project_doc("nlp", tier="research", quotas=quota(gpus), **spec)


def policy(*projects: Doc, max_gpus: int = 16, **pool: Any) -> PolicySet:
    settings: Doc = {
        "maxGpus": max_gpus,
        "onDemand": {"floorGpus": 0, "ceilingGpus": max_gpus},
        "prices": {"spotPerGpuHour": SPOT_PRICE, "onDemandPerGpuHour": ON_DEMAND_PRICE},
        "provisioningLatencySeconds": int(LATENCY),
        "spotInterruptionsPerHour": 0,
        "spotAvailability": 1.0,
    }
    settings.update(pool)
    docs = [policy_doc(pools=[pool_doc(**settings)]), *(projects or (vision(),))]
    return load_policy_set((f"doc{i}", d) for i, d in enumerate(docs))


def job(
    job_id: str,
    *,
    submit: float = 0.0,
    duration: float = 1000.0,
    gpus: int = 8,
    project: str = "vision",
    priority: int | None = None,
    checkpoint: float = CHECKPOINT,
    deadline: float | None = None,
) -> SimJob:
    tier = "production" if project == "vision" else "research"
    return SimJob(
        job_id=job_id,
        submit=submit,
        duration=duration,
        gpus=gpus,
        project=project,
        tier=tier,
        priority=priority if priority is not None else (1000 if tier == "production" else 100),
        deadline=deadline,
        expected_duration=duration,
        checkpoint_seconds=checkpoint,
    )


def outcomes(result: RunResult) -> dict[str, JobOutcome]:
    return {o.job_id: o for o in result.outcomes}


def sample_at(result: RunResult, time: float) -> Sample:
    for sample in result.timeline:
        if sample.time == time:
            return sample
    raise AssertionError(f"no sample at {time}: {[s.time for s in result.timeline]}")


def gpu_hours(*node_seconds: float) -> float:
    """GPU-hours of 8-GPU nodes up for these many seconds each."""
    return 8 * sum(node_seconds) / 3600.0


def assert_conserved(result: RunResult) -> None:
    """used == work + lost for every finished job, to 1e-6 GPU-seconds."""
    for o in result.outcomes:
        if o.finish is not None:
            assert o.used_gpu_seconds == pytest.approx(
                o.work_gpu_seconds + o.lost_gpu_seconds, abs=1e-6
            ), o


# --------------------------------------------------------------------------- admission


def test_admission_fills_nominal_quota_flavor_by_flavor_spot_first() -> None:
    """Half of vision's 16 GPUs is spot, half on-demand. a takes spot, b (spot now full)
    on-demand, both starting when their new nodes are ready; c fits neither and waits for a,
    then starts at once on a's spot node, still up. b ran on on-demand: at t=2000, after c is
    done, only an on-demand node is busy."""
    jobs = [job("a", duration=1000), job("b", duration=3000), job("c", duration=500)]
    result = replay(policy(), jobs, HALF)
    got = outcomes(result)
    assert (got["a"].first_start, got["a"].finish) == (LATENCY, 1100.0)
    assert (got["b"].first_start, got["b"].finish) == (LATENCY, 3100.0)
    assert (got["c"].first_start, got["c"].finish) == (1100.0, 1600.0)
    assert sample_at(result, 500).gpus_in_use == {SPOT: 8.0, ON_DEMAND: 8.0}
    assert sample_at(result, 2000).gpus_in_use == {SPOT: 0.0, ON_DEMAND: 8.0}
    # The spot node empties at 1600 and goes at 2200; the on-demand one lasts to the end, 3100.
    assert result.gpu_hours_by_capacity_type == pytest.approx(
        {SPOT: gpu_hours(2200), ON_DEMAND: gpu_hours(3100)}
    )
    assert result.cost_by_capacity_type == pytest.approx(
        {SPOT: gpu_hours(2200) * SPOT_PRICE, ON_DEMAND: gpu_hours(3100) * ON_DEMAND_PRICE}
    )
    assert result.unfinished == 0


@pytest.mark.parametrize(
    ("spot_ok", "in_use"),
    [
        pytest.param(True, {SPOT: 8.0, ON_DEMAND: 0.0}, id="a project allowed spot runs on spot"),
        pytest.param(
            False,
            {SPOT: 0.0, ON_DEMAND: 8.0},
            id="a project forbidding spot runs on on-demand even in the all-spot mix",
        ),
    ],
)
def test_spot_only_where_the_project_allows_it(spot_ok: bool, in_use: dict[str, float]) -> None:
    result = replay(policy(vision(allowSpot=spot_ok)), [job("a", duration=1000)], ALL_SPOT)
    assert outcomes(result)["a"].first_start == LATENCY
    assert sample_at(result, 500).gpus_in_use == in_use


@pytest.mark.parametrize(
    ("latency", "start"),
    [
        pytest.param(0, 0.0, id="no provisioning latency: the job starts at submit"),
        pytest.param(100, 100.0, id="100 s latency: the job starts 100 s after submit"),
        pytest.param(3600, 3600.0, id="an hour's latency: the job starts an hour late"),
    ],
)
def test_a_new_node_is_ready_after_the_pool_provisioning_latency(
    latency: int, start: float
) -> None:
    result = replay(policy(provisioningLatencySeconds=latency), [job("a", duration=500)], ALL_SPOT)
    got = outcomes(result)["a"]
    assert (got.first_start, got.finish) == (start, start + 500)


def test_a_job_waiting_for_quota_starts_after_a_launch_when_no_node_is_free() -> None:
    """All 16 GPUs spot. q (16 GPUs) waits for p's quota; at 1100 it is admitted, finds p's
    node (8 free) short by a node, and starts when the one launched then is ready: 1200."""
    jobs = [job("p", duration=1000), job("q", gpus=16, duration=1000)]
    result = replay(policy(), jobs, ALL_SPOT)
    got = outcomes(result)
    assert got["p"].finish == 1100.0
    assert (got["q"].first_start, got["q"].finish) == (1200.0, 2200.0)
    assert result.gpu_hours_by_capacity_type[SPOT] == pytest.approx(gpu_hours(2200, 1100))


# --------------------------------------------------------------------------- borrowing


@pytest.mark.parametrize(
    ("vision_shares", "nlp_shares", "start"),
    [
        pytest.param(
            True, True, LATENCY, id="a sharing project borrows an idle sharing project's quota"
        ),
        pytest.param(
            False, True, None, id="a project outside the cohort (shareCapacity false) cannot borrow"
        ),
        pytest.param(
            True,
            False,
            None,
            id="a project outside the cohort does not lend its quota",
        ),
    ],
)
def test_borrowing_the_cohort_unused_quota(
    vision_shares: bool, nlp_shares: bool, start: float | None
) -> None:
    """vision and nlp hold 8 spot GPUs each; vision asks for 16 (two nodes) while nlp is idle."""
    projects = vision(8, shareCapacity=vision_shares), nlp(8, shareCapacity=nlp_shares)
    result = replay(policy(*projects), [job("wide", gpus=16)], ALL_SPOT)
    got = outcomes(result)["wide"]
    assert got.first_start == start
    assert result.unfinished == (0 if start is not None else 1)


# --------------------------------------------------------------------------- preemption


def test_a_higher_priority_job_preempts_within_its_queue_and_the_victim_redoes_work() -> None:
    """One 8-GPU node, vision's 8 spot GPUs. low (priority 10, 5000 s) runs from 100. high
    (priority 1000) arrives at 2600 and preempts it: low ran 2500 s, keeps 2000 (its last
    checkpoint) and loses 500 s x 8 GPUs. high runs 2600-3600 on the same node; low restarts
    then with 3000 s left and finishes at 6600."""
    jobs = [job("low", duration=5000, priority=10), job("high", submit=2600, duration=1000)]
    result = replay(policy(vision(8), max_gpus=8), jobs, ALL_SPOT)
    got = outcomes(result)
    assert (got["high"].first_start, got["high"].finish) == (2600.0, 3600.0)
    low = got["low"]
    assert (low.first_start, low.finish, low.preemptions) == (LATENCY, 6600.0, 1)
    assert low.lost_gpu_seconds == pytest.approx(8 * 500)
    assert low.used_gpu_seconds == pytest.approx(8 * (2500 + 3000))
    assert got["high"].preemptions == 0
    assert_conserved(result)


@pytest.mark.parametrize(
    ("projects", "jobs"),
    [
        pytest.param(
            (vision(16),),
            [
                job("older", duration=9000, priority=10),
                job("newer", submit=10, gpus=4, duration=9000, priority=10),
                job("high", submit=2000, gpus=12),
            ],
            id="16 GPUs of quota, 12 in use: a 12-GPU job needs only the 8-GPU victim",
        ),
        pytest.param(
            (project_doc("vision", quotas=quota(16), shareCapacity=False), nlp(8)),
            [
                job("busy", project="nlp", duration=9000),
                job("older", duration=9000, priority=10),
                job("newer", submit=10, gpus=4, duration=9000, priority=10),
                job("high", submit=2000, gpus=8),
            ],
            id="a queue outside the cohort frees only what its own quota lacks",
        ),
    ],
)
def test_preemption_stops_at_the_victims_it_needs(
    projects: tuple[Doc, ...], jobs: list[SimJob]
) -> None:
    """vision holds a low-priority 8-GPU job (`older`, from 100) and a newer 4-GPU one
    (`newer`, from 110), 12 GPUs. `high` arrives at 2000 and one victim is enough: `older` in
    the first case (16 - 4 leaves room for 12), `newer` in the second (16 - 8 leaves room for
    8). The victim keeps 1000 s of work, loses the rest of its run (1900 or 1890 s), and
    restarts when `high` ends at 3000, finishing at 3000 + 8000; the other job is untouched."""
    result = replay(policy(*projects, max_gpus=24), jobs, ALL_SPOT)
    got = outcomes(result)
    assert (got["high"].first_start, got["high"].finish) == (2000.0, 3000.0)
    victim, spared = ("older", "newer") if got["high"].gpus == 12 else ("newer", "older")
    assert (got[spared].preemptions, got[spared].lost_gpu_seconds) == (0, 0.0)
    spared_start = got[spared].first_start
    assert spared_start is not None and got[spared].finish == spared_start + 9000
    assert got[victim].preemptions == 1
    assert got[victim].lost_gpu_seconds == pytest.approx(
        got[victim].gpus * (2000 - (got[victim].first_start or 0) - 1000)
    )
    assert got[victim].finish == 11000.0
    assert_conserved(result)


def test_a_queue_reclaims_its_nominal_quota_from_a_borrower_in_another_queue() -> None:
    """nlp (research) borrows vision's idle 8 GPUs for a 16-GPU job from 100. vision's job
    arrives at 2600 within its own nominal quota and reclaims it: nlp's job keeps 2000 s and
    loses 500 s x 16 GPUs. vision runs 2600-3600 on the first node; the second, empty since
    2600, goes at 3200, so at 3600 nlp's job needs a new node and restarts at 3700 with 3000 s
    left, finishing at 6700."""
    jobs = [
        job("borrower", project="nlp", gpus=16, duration=5000),
        job("owner", submit=2600, duration=1000),
    ]
    result = replay(policy(vision(8), nlp(8)), jobs, ALL_SPOT)
    got = outcomes(result)
    assert (got["owner"].first_start, got["owner"].finish) == (2600.0, 3600.0)
    borrower = got["borrower"]
    assert (borrower.first_start, borrower.finish, borrower.preemptions) == (100.0, 6700.0, 1)
    assert borrower.lost_gpu_seconds == pytest.approx(16 * 500)
    assert result.gpu_hours_by_capacity_type[SPOT] == pytest.approx(gpu_hours(6700, 3200, 3100))
    assert_conserved(result)


def test_a_tier_that_never_preempts_waits_instead() -> None:
    """The reclaim case the other way round: nlp (preemption Never) must wait for vision's
    borrowing job to finish at 1100, then starts on its node at once."""
    jobs = [job("borrower", gpus=16, duration=1000), job("owner", project="nlp", submit=500)]
    result = replay(policy(vision(8), nlp(8)), jobs, ALL_SPOT)
    got = outcomes(result)
    assert got["borrower"].preemptions == 0
    assert (got["owner"].first_start, got["owner"].finish) == (1100.0, 2100.0)


# --------------------------------------------------------------------------- spot


@pytest.mark.parametrize(
    "seed",
    [pytest.param(0, id="seed 0"), pytest.param(1, id="seed 1"), pytest.param(2, id="seed 2")],
)
def test_a_spot_interruption_loses_the_work_since_the_last_checkpoint(seed: int) -> None:
    """One spot node at 10 interruptions an hour (one every 6 minutes on average) and a
    2-hour job checkpointing every 5 minutes: it is interrupted many times, loses less than a
    checkpoint interval of work each time, and its GPU-seconds add up."""
    checkpoint = 300.0
    result = replay(
        policy(vision(8), max_gpus=8, spotInterruptionsPerHour=10, provisioningLatencySeconds=60),
        [job("long", duration=7200, checkpoint=checkpoint)],
        ALL_SPOT,
        seed=seed,
    )
    got = outcomes(result)["long"]
    assert got.finish is not None
    assert got.interruptions >= 1
    assert 0 < got.lost_gpu_seconds <= got.interruptions * checkpoint * 8
    assert_conserved(result)
    # Each restart waits for a new node: the run took at least the work plus the latencies.
    assert got.finish - got.submit >= 7200 + 60 * (got.interruptions + 1)


def test_without_checkpoints_an_interruption_loses_everything_done() -> None:
    """checkpoint_seconds 0 keeps no work: each interruption loses the whole segment, so lost
    is used minus the one uninterrupted run of the full duration."""
    result = replay(
        policy(vision(8), max_gpus=8, spotInterruptionsPerHour=2, provisioningLatencySeconds=0),
        [job("fragile", duration=600, checkpoint=0.0)],
        ALL_SPOT,
        seed=3,
    )
    got = outcomes(result)["fragile"]
    assert got.finish is not None
    assert got.lost_gpu_seconds == pytest.approx(got.used_gpu_seconds - 8 * 600)
    assert_conserved(result)


# --------------------------------------------------------------------------- Karpenter


@pytest.mark.parametrize(
    ("fraction", "limits"),
    [
        pytest.param(0.0, {SPOT: 32, ON_DEMAND: 0}, id="all spot: 32 spot GPUs, no on-demand"),
        pytest.param(0.25, {SPOT: 24, ON_DEMAND: 8}, id="a quarter on-demand: 24 spot, 8 od"),
        pytest.param(0.5, {SPOT: 16, ON_DEMAND: 16}, id="half and half: 16 and 16"),
        pytest.param(1.0, {SPOT: 0, ON_DEMAND: 32}, id="all on-demand: 32 od GPUs, no spot"),
    ],
)
def test_never_more_gpus_provisioned_than_the_nodepool_limit(
    fraction: float, limits: dict[str, int]
) -> None:
    """Far more work than the pool holds, with interruptions and failed spot launches so
    nodes come and go: every sample of the timeline stays within both NodePool limits."""
    ps = policy(
        vision(16),
        nlp(16),
        max_gpus=32,
        spotInterruptionsPerHour=3,
        spotAvailability=0.6,
    )
    pick = random.Random(11)
    jobs = [
        job(
            f"j{i}",
            submit=pick.uniform(0, 6 * 3600),
            duration=pick.uniform(300, 7200),
            gpus=pick.choice((1, 2, 4, 8, 16)),
            project=pick.choice(("vision", "nlp")),
        )
        for i in range(120)
    ]
    spec = RunSpec("limits", "static", on_demand_fraction=fraction, sample_interval=60)
    result = replay(ps, jobs, spec, seed=5)
    assert len(result.timeline) > 100
    peak = {ct: max(s.gpus_provisioned[ct] for s in result.timeline) for ct in (SPOT, ON_DEMAND)}
    for ct, limit in limits.items():
        assert peak[ct] <= limit, (ct, peak)
    busiest = max(limits, key=lambda ct: limits[ct])
    assert peak[busiest] == limits[busiest], "the busy capacity type reached its limit"


@pytest.mark.parametrize("latency", [300, 600, 900])
def test_a_wide_job_that_loses_one_node_restarts_whatever_the_provisioning_latency(
    latency: int,
) -> None:
    """A 16-GPU job on two spot nodes loses one to an interruption. Its pod on the surviving
    node stays bound there, so that node is never consolidated while the replacement comes up
    (with a latency at or past the 600 s consolidation delay it used to be removed just as the
    replacement was ready, forever)."""
    ps = policy(vision(16), provisioningLatencySeconds=latency, spotInterruptionsPerHour=0.5)
    result = replay(ps, [job("wide", gpus=16, duration=20000)], ALL_SPOT, seed=1)
    wide = outcomes(result)["wide"]
    assert wide.finish is not None
    assert wide.interruptions >= 1
    assert_conserved(result)


def test_a_launch_covers_only_what_free_nodes_lack() -> None:
    """a's node (8 GPUs) is idle at 1200 when b asks for 16: one more node is enough, and
    b starts on both at 1300. Only 16 GPUs should ever be provisioned."""
    ps = policy(vision(24), max_gpus=24)
    spec = RunSpec("all-spot", "static", sample_interval=50)
    result = replay(ps, [job("a"), job("b", submit=1200, gpus=16)], spec)
    assert outcomes(result)["b"].first_start == 1300.0
    assert max(s.gpus_provisioned[SPOT] for s in result.timeline) == 16
    assert result.gpu_hours_by_capacity_type[SPOT] == pytest.approx(gpu_hours(2300, 1100))


def test_a_sample_splits_each_pools_nodes_into_in_use_idle_and_launching() -> None:
    """Two 4-GPU jobs on spot. a's node launches at 0 and is ready at 100; a runs to 1100 beside
    4 free GPUs; the node then stands empty until b, submitted at 1500, runs on it. Samples every
    50 s see no node at 0, the node launching at 50, half used at 150 and empty at 1150; the
    totals stay the sums over pools."""
    spec = RunSpec("all-spot", "static", sample_interval=50)
    result = replay(policy(), [job("a", gpus=4), job("b", gpus=4, submit=1500)], spec)
    assert sample_at(result, 0.0).by_flavor == {}
    want = {
        50.0: FlavorGpus(in_use=0.0, idle=0.0, launching=8.0),
        150.0: FlavorGpus(in_use=4.0, idle=4.0, launching=0.0),
        1150.0: FlavorGpus(in_use=0.0, idle=8.0, launching=0.0),
    }
    for time, flavor in want.items():
        sample = sample_at(result, time)
        assert sample.by_flavor == {("a100", SPOT): flavor}, time
        assert sample.gpus_in_use[SPOT] == flavor.in_use
        assert sample.gpus_provisioned[SPOT] == flavor.in_use + flavor.idle + flavor.launching
        assert sample.on_demand_target_by_pool == {"a100": 0.0}
    assert outcomes(result)["b"].first_start == 1500.0


def test_every_job_of_a_static_baseline_can_run() -> None:
    """24 GPUs, 20 % on-demand. Two 8-GPU jobs take spot; a 4-GPU job is admitted wherever
    its quota is, and whether that is spot or on-demand, a node can be launched for it."""
    ps = policy(vision(24), max_gpus=24)
    jobs = [job("a"), job("b"), job("small", gpus=4)]
    result = replay(ps, jobs, BASELINES["fixed-80-20"])
    assert result.unfinished == 0
    assert outcomes(result)["small"].first_start == LATENCY


# --------------------------------------------------------------------------- whole runs


def random_scenario(
    seed: int = 7, count: int = 150, *, warm_pool: Doc | None = None
) -> tuple[PolicySet, list[SimJob]]:
    """Three tiers (one preempting Any), a project forbidding spot, one outside the cohort,
    interruptions, failed spot launches and jobs of every width: most of the engine at once.
    `warm_pool`, the pool's warmPool, adds placeholders (the policy run keeps them)."""
    tiers = [
        {"name": "production", "priority": 1000, "preemption": "LowerPriority"},
        {"name": "research", "priority": 100, "preemption": "Any"},
        {"name": "batch", "priority": 10, "preemption": "Never"},
    ]
    warm: Doc = {"warmPool": warm_pool} if warm_pool else {}
    docs: list[Doc] = [
        policy_doc(
            tiers=tiers,
            pools=[
                pool_doc(
                    maxGpus=64,
                    onDemand={"floorGpus": 0, "ceilingGpus": 64},
                    provisioningLatencySeconds=120,
                    spotInterruptionsPerHour=2,
                    spotAvailability=0.7,
                    **warm,
                )
            ],
        ),
        project_doc("vision", quotas=quota(16)),
        project_doc("secure", quotas=quota(8), allowSpot=False),
        project_doc("nlp", tier="research", quotas=quota(16)),
        project_doc("solo", tier="research", quotas=quota(8), shareCapacity=False),
        project_doc("sweep", tier="batch", quotas=quota(16)),
    ]
    ps = load_policy_set((f"doc{i}", d) for i, d in enumerate(docs))
    tier_of = {p.name: p.spec.tier for p in ps.projects}
    priority = {t.name: t.priority for t in ps.policy.spec.tiers}
    pick = random.Random(seed)
    jobs = []
    for i in range(count):
        project = pick.choice(sorted(tier_of))
        submit = pick.uniform(0, 2 * 86400)
        duration = math.exp(pick.uniform(math.log(60), math.log(8 * 3600)))
        jobs.append(
            SimJob(
                job_id=f"job-{i:03d}",
                submit=submit,
                duration=duration,
                gpus=pick.choice((1, 2, 4, 8, 8, 16)),
                project=project,
                tier=tier_of[project],
                priority=priority[tier_of[project]],
                deadline=submit + duration * pick.uniform(1.5, 4) if pick.random() < 0.8 else None,
                expected_duration=duration * pick.uniform(0.7, 1.4),
                checkpoint_seconds=pick.choice((600.0, 1800.0)),
            )
        )
    return ps, jobs


SPECS: Sequence[RunSpec] = (POLICY, *BASELINES.values())


@pytest.mark.parametrize("spec", [pytest.param(s, id=f"{s.name} run") for s in SPECS])
def test_used_equals_work_plus_lost_for_every_finished_job(spec: RunSpec) -> None:
    ps, jobs = random_scenario()
    result = replay(ps, jobs, spec, seed=1)
    finished = [o for o in result.outcomes if o.finish is not None]
    assert len(finished) >= 0.9 * len(jobs)
    assert result.unfinished == len(jobs) - len(finished)
    assert_conserved(result)
    assert sum(o.interruptions for o in result.outcomes) > 0 or spec.name == "on-demand-only"
    for o in finished:
        assert o.first_start is not None and o.finish is not None
        assert o.submit <= o.first_start <= o.finish
        # Never faster than the work itself, however often it was stopped.
        assert o.finish - o.first_start >= o.work_gpu_seconds / o.gpus - 1e-6


@pytest.mark.parametrize(
    "spec",
    [pytest.param(POLICY, id="the policy run"), pytest.param(ALL_SPOT, id="the all-spot run")],
)
def test_the_same_seed_gives_the_same_replay(spec: RunSpec) -> None:
    ps, jobs = random_scenario(count=80)
    first, second = (replay(ps, jobs, spec, seed=4) for _ in range(2))
    assert first.outcomes == second.outcomes
    assert first.timeline == second.timeline
    assert first.cost_by_capacity_type == second.cost_by_capacity_type
    assert (first.mix_changes, first.decisions) == (second.mix_changes, second.decisions)


def test_another_seed_interrupts_at_other_times() -> None:
    ps, jobs = random_scenario(count=80)
    runs = {seed: replay(ps, jobs, ALL_SPOT, seed=seed) for seed in (4, 5)}
    finishes = {seed: [o.finish for o in r.outcomes] for seed, r in runs.items()}
    lost = {seed: [o.lost_gpu_seconds for o in r.outcomes] for seed, r in runs.items()}
    assert finishes[4] != finishes[5]
    assert lost[4] != lost[5]
    # The jobs are the same: only when they ran changed.
    assert [o.work_gpu_seconds for o in runs[4].outcomes] == [
        o.work_gpu_seconds for o in runs[5].outcomes
    ]


# --------------------------------------------------------------------------- lead-in


def test_a_lead_in_fills_the_cluster_but_only_the_window_is_scored() -> None:
    """p (8 GPUs, the lead-in) runs on a node launched at 0, ready at 100, until 1100; the
    window starts at 500, when q (16 GPUs, deadline 2500) arrives and waits for p's quota, then
    for a second node launched at 1100: 1200-2200. Only q is scored, in the window's time
    (start 700, finish 1700, deadline 2000), and the nodes are billed from 500: the first
    1,700 s (500-2200), the second 1,100 s. Without the lead-in both are scored and billed
    from their launch, and q is the same."""
    jobs = [job("p", duration=1000), job("q", submit=500, gpus=16, deadline=2500)]
    whole = replay(policy(), jobs, ALL_SPOT)
    windowed = replay(policy(), jobs, ALL_SPOT, scored_from=500.0)
    assert set(outcomes(whole)) == {"p", "q"}
    assert whole.gpu_hours_by_capacity_type[SPOT] == pytest.approx(gpu_hours(2200, 1100))
    got = outcomes(windowed)
    assert list(got) == ["q"]
    assert (got["q"].submit, got["q"].first_start, got["q"].finish, got["q"].deadline) == (
        0.0,
        700.0,
        1700.0,
        2000.0,
    )
    assert outcomes(whole)["q"].finish == 2200.0
    assert windowed.gpu_hours_by_capacity_type[SPOT] == pytest.approx(gpu_hours(1700, 1100))
    assert windowed.cost_by_capacity_type[SPOT] == pytest.approx(gpu_hours(1700, 1100))
    assert windowed.unfinished == 0
    # Samples from the window's start, in its time: every 250 s from 500 is 0, 250, ...
    assert windowed.timeline[0].time == 0.0
    assert [s.time for s in windowed.timeline] == [
        s.time - 500.0 for s in whole.timeline if s.time >= 500.0
    ]


def test_mix_changes_and_estimates_count_from_the_windows_start() -> None:
    """A fixed split renders its mix at 0: a change in a replay from 0, none in the window
    from 800. The policy passes at 0 and every 900 s: its estimate of p's deadline at 0 is
    recorded without the lead-in, not with it; the one at 900 is, at 100 in the window. Passes
    are counted from the window's start too."""
    jobs = [job("p", duration=1000, deadline=4000), job("q", submit=850, deadline=5000)]
    assert replay(policy(), jobs, HALF).mix_changes == 1
    assert replay(policy(), jobs, HALF, scored_from=800.0).mix_changes == 0
    whole = replay(policy(), jobs, POLICY)
    windowed = replay(policy(), jobs, POLICY, scored_from=800.0)
    assert min(r.time for r in whole.risk_log) == 0.0
    assert sorted({r.time for r in windowed.risk_log}) == sorted(
        {r.time - 800.0 for r in whole.risk_log if r.time >= 800.0}
    )
    assert min(r.time for r in windowed.risk_log) == 100.0
    # The same replay either way: only the pass at 0 is the lead-in's.
    assert windowed.decisions == whole.decisions - 1


@pytest.mark.parametrize("scored_from", [-1.0, math.inf, math.nan])
def test_a_window_start_must_be_a_time(scored_from: float) -> None:
    with pytest.raises(ValueError, match="scored_from must be a finite time >= 0"):
        replay(policy(), [job("p")], ALL_SPOT, scored_from=scored_from)


# --------------------------------------------------------------------------- the controller's carry


def test_each_pass_is_handed_what_the_last_one_carries_as_the_controller_hands_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The controller's loop gives each pass the last plan's `carried` (estimates of projects
    whose workloads did not change, for up to a minute): the replay does the same, so a pass
    woken seconds after another decides from what the controller's would."""
    seen: list[tuple[object, object]] = []

    def recording(observation: Any) -> Any:
        plan = plan_capacity(observation)
        seen.append((observation.carried, plan.carried))
        return plan

    monkeypatch.setattr("controller.sim.engine.plan_capacity", recording)
    jobs = [
        job("a", deadline=5000.0, duration=2000),
        job("b", submit=30.0, deadline=5000.0, duration=2000),
        job("c", submit=45.0, deadline=6000.0, duration=1000),
    ]
    replay(policy(), jobs, POLICY)

    assert len(seen) >= 3, "arrivals with deadlines wake passes"
    assert seen[0][0] is None
    for (_, handed), (received, _) in itertools.pairwise(seen):
        assert received is handed
