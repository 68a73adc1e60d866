"""The assignment rule against its statement: determinism, quota-weighted projects, deadlines.

Proportions are checked over 10,000 synthetic jobs, where a share's binomial standard error is
at most 0.005, so the 0.02 tolerance is four of them; with a fixed seed the outcome is fixed
anyway, so these cannot flake.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import controller.examples
from controller.api.loader import load_path, load_policy_set
from controller.api.policy_set import PolicySet
from controller.sim.assign import AssignmentRule, assign_jobs
from controller.sim.model import SimJob, TraceJob
from tests.builders import policy_doc, pool_doc, project_doc

N = 10_000


@cache
def example() -> PolicySet:
    return load_path(Path(controller.examples.__file__).parent)


def synthetic(n: int = N, *, gpus: int = 1) -> list[TraceJob]:
    return [TraceJob(f"job-{i}", float(i), 100.0 + i % 50, gpus) for i in range(n)]


def policy(*projects: dict[str, Any], **spec: Any) -> PolicySet:
    docs: list[dict[str, Any]] = [policy_doc(**spec), *projects]
    return load_policy_set((f"doc{i}", d) for i, d in enumerate(docs))


def by_id(jobs: list[SimJob]) -> dict[str, SimJob]:
    return {j.job_id: j for j in jobs}


# --------------------------------------------------------------------------- determinism


def test_same_seed_same_assignment_whatever_the_order() -> None:
    jobs = synthetic(2000)
    shuffled = jobs.copy()
    random.Random(7).shuffle(shuffled)
    first = assign_jobs(jobs, example(), AssignmentRule(seed=3))
    assert first == assign_jobs(jobs, example(), AssignmentRule(seed=3))
    assert by_id(assign_jobs(shuffled, example(), AssignmentRule(seed=3))) == by_id(first)
    assert [j.job_id for j in first] == [j.job_id for j in jobs]


def test_different_seeds_assign_differently() -> None:
    jobs = synthetic(2000)
    a = assign_jobs(jobs, example(), AssignmentRule(seed=0))
    b = assign_jobs(jobs, example(), AssignmentRule(seed=1))
    moved = sum(x.project != y.project for x, y in zip(a, b, strict=True))
    # Two independent draws of a project agree with probability sum(w^2) ~ 0.34 here.
    assert moved > len(jobs) / 2
    assert all(x.deadline != y.deadline for x, y in zip(a, b, strict=True))
    assert all(x.expected_duration != y.expected_duration for x, y in zip(a, b, strict=True))


def test_the_true_job_is_kept() -> None:
    jobs = synthetic(100, gpus=2)
    for trace_job, sim_job in zip(
        jobs, assign_jobs(jobs, example(), AssignmentRule()), strict=True
    ):
        assert (sim_job.job_id, sim_job.submit, sim_job.duration, sim_job.gpus) == (
            trace_job.job_id,
            trace_job.submit,
            trace_job.duration,
            trace_job.gpus,
        )


# --------------------------------------------------------------------------- projects


@pytest.mark.parametrize(
    "seed",
    [pytest.param(0, id="seed 0"), pytest.param(12345, id="seed 12345")],
)
def test_projects_follow_quota_weights(seed: int) -> None:
    policy_set = example()
    quota = {p.name: sum(q.nominal_gpus for q in p.spec.quotas) for p in policy_set.projects}
    total = sum(quota.values())
    counts = Counter(
        j.project for j in assign_jobs(synthetic(), policy_set, AssignmentRule(seed=seed))
    )
    for name, gpus in quota.items():
        assert counts[name] / N == pytest.approx(gpus / total, abs=0.02), name


def test_tier_and_priority_come_from_the_project() -> None:
    policy_set = example()
    for sim_job in assign_jobs(synthetic(1000), policy_set, AssignmentRule()):
        project = policy_set.project(sim_job.project)
        assert project is not None
        tier = policy_set.policy.tier(project.spec.tier)
        assert tier is not None
        assert (sim_job.tier, sim_job.priority) == (tier.name, tier.priority)


def test_projects_without_quota_get_no_jobs() -> None:
    policy_set = policy(
        project_doc("empty", quotas=[{"pool": "a100", "nominalGpus": 0}]),
        project_doc("full", quotas=[{"pool": "a100", "nominalGpus": 8}]),
    )
    assert {j.project for j in assign_jobs(synthetic(500), policy_set, AssignmentRule())} == {
        "full"
    }


def test_no_quota_anywhere_raises() -> None:
    policy_set = policy(project_doc("empty", quotas=[{"pool": "a100", "nominalGpus": 0}]))
    with pytest.raises(ValueError, match="no TrainingProject has any nominal GPU quota"):
        assign_jobs(synthetic(1), policy_set, AssignmentRule())


@cache
def reach_policy() -> PolicySet:
    """Projects whose reach (nominal + borrowable) is known by hand, and one clearly largest.

    production cohort: anchor 48, capped 8 (borrows at most 4).
    research cohort (reserves 4 of a100): open 8 (no limit), lender 16 (lends at most 6).
    alone: research, outside the cohort, 8 a100 + 8 h100.
    """
    return policy(
        project_doc("anchor", quotas=[{"pool": "a100", "nominalGpus": 48}]),
        project_doc("capped", quotas=[{"pool": "a100", "nominalGpus": 8, "borrowingLimitGpus": 4}]),
        project_doc("open", tier="research", quotas=[{"pool": "a100", "nominalGpus": 8}]),
        project_doc(
            "lender",
            tier="research",
            quotas=[{"pool": "a100", "nominalGpus": 16, "lendingLimitGpus": 6}],
        ),
        project_doc(
            "alone",
            tier="research",
            shareCapacity=False,
            quotas=[{"pool": "a100", "nominalGpus": 8}, {"pool": "h100", "nominalGpus": 8}],
        ),
        tiers=[
            {"name": "production", "priority": 1000},
            {"name": "research", "priority": 100, "reserved": [{"pool": "a100", "gpus": 4}]},
        ],
        pools=[pool_doc("a100"), pool_doc("h100")],
    )


def job_landing_on(project: str, seed: int = 0) -> str:
    """A job id the rule sends to `project` when the job is narrow."""
    for i in range(10_000):
        job = TraceJob(f"probe-{i}", 0.0, 10.0, 1)
        if assign_jobs([job], reach_policy(), AssignmentRule(seed=seed))[0].project == project:
            return job.job_id
    raise AssertionError(f"no probe lands on {project}")


@pytest.mark.parametrize(
    ("natural", "gpus", "want"),
    [
        pytest.param("capped", 12, "capped", id="8 nominal + a borrowing limit of 4 holds 12"),
        pytest.param("capped", 13, "anchor", id="13 is over capped's reach: to the largest"),
        pytest.param(
            "open", 18, "open", id="no limit borrows what the cohort lends: 8 + 6 lent + 4 reserved"
        ),
        pytest.param("open", 19, "anchor", id="a lending limit caps what can be borrowed"),
        pytest.param("lender", 28, "lender", id="16 + open's 8 + the 4 reserved"),
        pytest.param("lender", 29, "anchor", id="what a project lends itself is not borrowable"),
        pytest.param("alone", 16, "alone", id="quotas add up over pools"),
        pytest.param("alone", 17, "anchor", id="outside a cohort nothing is borrowed"),
        pytest.param("anchor", 500, "anchor", id="wider than anything: stays on the largest"),
    ],
)
def test_wide_jobs_go_to_the_largest_project(natural: str, gpus: int, want: str) -> None:
    job = TraceJob(job_landing_on(natural), 0.0, 10.0, gpus)
    assert assign_jobs([job], reach_policy(), AssignmentRule())[0].project == want


def test_largest_project_ties_go_to_the_first_name() -> None:
    policy_set = policy(
        project_doc("beta", shareCapacity=False),
        project_doc("alpha", shareCapacity=False),
        project_doc("tiny", shareCapacity=False, quotas=[{"pool": "a100", "nominalGpus": 1}]),
    )
    wide = assign_jobs(synthetic(300, gpus=17), policy_set, AssignmentRule())
    assert {j.project for j in wide} == {"alpha"}


# --------------------------------------------------------------------------- deadlines


@pytest.mark.parametrize(
    "rule",
    [
        pytest.param(AssignmentRule(), id="with every job given a deadline"),
        pytest.param(AssignmentRule(deadline_share=0.0), id="with no job given one"),
    ],
)
def test_trace_deadlines_are_used_as_is(rule: AssignmentRule) -> None:
    jobs = [TraceJob(f"j{i}", 10.0 * i, 100.0, 1, deadline=5.0 + i) for i in range(200)]
    assert [j.deadline for j in assign_jobs(jobs, example(), rule)] == [j.deadline for j in jobs]


@pytest.mark.parametrize(
    ("slack_min", "slack_max"),
    [
        pytest.param(1.5, 4.0, id="the default 1.5-4"),
        pytest.param(1.0, 1.2, id="tight deadlines"),
        pytest.param(2.0, 2.0, id="one slack for every job"),
    ],
)
def test_slack_stays_in_range_and_spans_it(slack_min: float, slack_max: float) -> None:
    rule = AssignmentRule(slack_min=slack_min, slack_max=slack_max)
    slacks = []
    for j in assign_jobs(synthetic(), example(), rule):
        assert j.deadline is not None
        slacks.append((j.deadline - j.submit) / j.duration)
    assert slack_min - 1e-9 <= min(slacks) <= slack_min + 0.01 * (slack_max - slack_min) + 1e-9
    assert slack_max - 0.01 * (slack_max - slack_min) - 1e-9 <= max(slacks) <= slack_max + 1e-9
    assert statistics.fmean(slacks) == pytest.approx((slack_min + slack_max) / 2, rel=0.02)


@pytest.mark.parametrize(
    "share",
    [
        pytest.param(0.0, id="none"),
        pytest.param(0.25, id="a quarter"),
        pytest.param(0.5, id="half"),
        pytest.param(1.0, id="all"),
    ],
)
def test_deadline_share_is_honoured(share: float) -> None:
    jobs = assign_jobs(synthetic(), example(), AssignmentRule(deadline_share=share))
    given = sum(j.deadline is not None for j in jobs) / N
    assert given == pytest.approx(share, abs=0.02)
    if share in (0.0, 1.0):
        assert given == share


def test_deadline_share_does_not_move_projects() -> None:
    """Each draw is its own hash, so changing one knob changes nothing else."""
    jobs = synthetic(2000)
    some = assign_jobs(jobs, example(), AssignmentRule(deadline_share=0.3))
    every = assign_jobs(jobs, example(), AssignmentRule(deadline_share=1.0))
    assert [j.project for j in some] == [j.project for j in every]
    assert [j.expected_duration for j in some] == [j.expected_duration for j in every]
    assert all(a.deadline in (None, b.deadline) for a, b in zip(some, every, strict=True))


def test_deadlines_from_the_declared_runtime_take_the_same_slack() -> None:
    """The same jobs, projects, declared runtimes and slack draws; only the runtime the slack
    multiplies differs, so some deadlines no longer leave room for the true run."""
    jobs = synthetic(2000)
    true = assign_jobs(jobs, example(), AssignmentRule())
    declared = assign_jobs(jobs, example(), AssignmentRule(deadline_from="declared"))
    for a, b in zip(true, declared, strict=True):
        assert (a.project, a.expected_duration) == (b.project, b.expected_duration)
        assert a.deadline is not None and b.deadline is not None
        slack = (a.deadline - a.submit) / a.duration
        assert (b.deadline - b.submit) / b.expected_duration == pytest.approx(slack)
    assert all(a.deadline is not None and a.deadline - a.submit >= 1.5 * a.duration for a in true)
    short = sum(
        1 for b in declared if b.deadline is not None and b.deadline < b.submit + b.duration
    )
    assert 0 < short < len(declared) // 10


# --------------------------------------------------------------------------- declared runtimes


@pytest.mark.parametrize(
    "sigma",
    [pytest.param(0.3, id="the default spread"), pytest.param(1.0, id="a wide spread")],
)
def test_expected_duration_is_lognormal_around_the_truth(sigma: float) -> None:
    jobs = assign_jobs(synthetic(), example(), AssignmentRule(expected_sigma=sigma))
    logs = [math.log(j.expected_duration / j.duration) for j in jobs]
    assert statistics.fmean(logs) == pytest.approx(0.0, abs=0.03 * sigma)
    assert statistics.stdev(logs) == pytest.approx(sigma, rel=0.03)


def test_zero_sigma_declares_the_true_duration_and_checkpoint_comes_from_the_rule() -> None:
    rule = AssignmentRule(expected_sigma=0.0, checkpoint_seconds=600.0)
    for j in assign_jobs(synthetic(500), example(), rule):
        assert (j.expected_duration, j.checkpoint_seconds) == (j.duration, 600.0)


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        pytest.param(
            {"slack_min": 3.0, "slack_max": 2.0}, "slack_min <= slack_max", id="min > max"
        ),
        pytest.param({"slack_min": 0.0}, "0 < slack_min", id="zero slack"),
        pytest.param({"slack_max": math.inf}, "finite", id="infinite slack"),
        pytest.param({"deadline_share": 1.5}, "deadline_share", id="share over 1"),
        pytest.param({"deadline_share": -0.1}, "deadline_share", id="negative share"),
        pytest.param({"expected_sigma": -1.0}, "expected_sigma", id="negative sigma"),
        pytest.param({"checkpoint_seconds": -1.0}, "checkpoint_seconds", id="negative checkpoint"),
        pytest.param(
            {"deadline_from": "guess"},
            "deadline_from must be one of true, declared, got 'guess'",
            id="deadlines from an unknown runtime",
        ),
    ],
)
def test_bad_rules_raise(knobs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AssignmentRule(**knobs)
