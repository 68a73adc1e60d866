"""Giving trace jobs what the traces lack: a project, a tier, a deadline, a declared runtime.

Public GPU traces carry no teams, priorities or deadlines, so a replay has to invent them, and
a result is only as credible as the rule that did. The rule is therefore fixed, stated here,
and seeded, so that anyone can reproduce a replay's assignment from the trace, the policy and
an `AssignmentRule`:

1. Project. `u = H("project", seed, job_id)` is a uniform number in [0, 1) (below). Projects,
   in name order, each get a slice of [0, 1) proportional to their total nominal GPU quota
   (summed over pools), and the job goes to the project whose slice holds `u`. The load each
   project sees then matches the quota it was given, in expectation. Projects with no quota
   get no jobs.
2. Wide jobs. A job asking for more GPUs than its project can ever hold (its nominal quota over
   all pools plus what it may borrow: its borrowing limit, capped by what the rest of its
   tier's cohort, tier reservations included, can lend; projects outside a cohort borrow
   nothing) would never start, which measures nothing about the policy. It goes instead to the
   project with the largest nominal quota (ties: the larger reach, then the first name). A job
   wider even than that project can hold keeps that assignment rather than being dropped, so
   the replay's job count stays the trace's; it cannot start.
3. Tier and priority: the project's tier and that tier's priority.
4. Deadline. The trace's own deadline, when it has one, as is. Otherwise the job gets a
   deadline when `H("deadline", seed, job_id) < deadline_share`, namely
   `submit + duration x slack`, with `slack = slack_min + H("slack", seed, job_id) x (slack_max -
   slack_min)`: a deadline as tight or loose as the slack says, relative to the job's true
   length. With `deadline_from="declared"`, relative to its declared length instead (5.): the
   length its submitter knew. From the true length, every deadline leaves at least
   `slack_min` times the job's run, which tells a model of the declared runtime something no
   submitter could know; from the declared one, a job that runs longer than it said can miss
   a deadline however fast it starts.
5. Declared runtime. `expected_duration = duration x exp(expected_sigma x z)`, where z is the
   standard normal quantile of `H("expected", seed, job_id)` (plus 2^-54, which keeps it off
   0, where the quantile is infinite): what the job would declare in its
   expected-duration annotation, a log-normal guess around the truth (median exact). The true
   `duration` is kept for the replay to run.
6. `checkpoint_seconds` is the rule's, the same for every job.

`H(purpose, seed, job_id)` is the 8-byte BLAKE2b digest of the UTF-8 text f"{seed}:{job_id}",
personalised with `purpose` (so each draw is an independent hash of the same key), read as a
big-endian integer whose top 53 bits are scaled into [0, 1). Nothing depends on the order of the
jobs or on any global random state: a job's assignment is a function of its own row, the
policy and the rule.
"""

from __future__ import annotations

import hashlib
import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from statistics import NormalDist

from controller.api.policy_set import PolicySet
from controller.api.types import PoolQuota, TrainingProject
from controller.sim.model import SimJob, TraceJob

_STANDARD_NORMAL = NormalDist()
DEADLINE_FROM = ("true", "declared")
"""The runtimes a deadline can be set from (`AssignmentRule.deadline_from`)."""
_SCALE_53 = 2.0**-53


@dataclass(frozen=True)
class AssignmentRule:
    """The knobs of the assignment rule (see the module docstring), with its seed."""

    seed: int = 0
    slack_min: float = 1.5
    slack_max: float = 4.0
    """A deadline is submit + duration x slack, slack uniform in [slack_min, slack_max]."""
    deadline_share: float = 1.0
    """The fraction of jobs without a trace deadline that get one."""
    expected_sigma: float = 0.3
    """The log-normal spread of declared runtimes around the true ones; 0 declares them exactly."""
    checkpoint_seconds: float = 1800.0
    deadline_from: str = "true"
    """Which runtime a deadline's slack multiplies: "true" (the trace's) or "declared"."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.slack_min) and math.isfinite(self.slack_max)):
            raise ValueError("slack_min and slack_max must be finite")
        if not 0 < self.slack_min <= self.slack_max:
            raise ValueError(
                f"need 0 < slack_min <= slack_max, got {self.slack_min} and {self.slack_max}"
            )
        if not 0 <= self.deadline_share <= 1:
            raise ValueError(f"deadline_share must be in [0, 1], got {self.deadline_share}")
        if not (math.isfinite(self.expected_sigma) and self.expected_sigma >= 0):
            raise ValueError(f"expected_sigma must be >= 0, got {self.expected_sigma}")
        if not (math.isfinite(self.checkpoint_seconds) and self.checkpoint_seconds >= 0):
            raise ValueError(f"checkpoint_seconds must be >= 0, got {self.checkpoint_seconds}")
        if self.deadline_from not in DEADLINE_FROM:
            raise ValueError(
                f"deadline_from must be one of {', '.join(DEADLINE_FROM)}, "
                f"got {self.deadline_from!r}"
            )


@dataclass(frozen=True)
class _Project:
    name: str
    tier: str
    priority: int
    nominal: int
    reach: int
    """The most GPUs the project can hold at once: nominal plus what it can borrow."""


def assign_jobs(
    jobs: Sequence[TraceJob], policy_set: PolicySet, rule: AssignmentRule
) -> list[SimJob]:
    """The jobs, in the order given, each with a project, tier, deadline and declared runtime.

    Raises ValueError when no project has any quota: the rule would have nowhere to put a job.
    """
    projects = _projects(policy_set)
    weighted = [p for p in projects if p.nominal > 0]
    if not weighted:
        raise ValueError("no TrainingProject has any nominal GPU quota to assign jobs to")
    bounds = list(accumulate(p.nominal for p in weighted))
    total = bounds[-1]
    largest = min(weighted, key=lambda p: (-p.nominal, -p.reach, p.name))
    seed = rule.seed
    slack_span = rule.slack_max - rule.slack_min
    from_declared = rule.deadline_from == "declared"
    out: list[SimJob] = []
    for job in jobs:
        key = f"{seed}:{job.job_id}".encode()
        u = _project_u(key)
        project = weighted[min(bisect_right(bounds, u * total), len(weighted) - 1)]
        if job.gpus > project.reach:
            project = largest
        expected = job.duration
        if rule.expected_sigma > 0:
            # Half a step up keeps the quantile off 0, where it is infinite.
            z = _STANDARD_NORMAL.inv_cdf(_expected_u(key) + _SCALE_53 / 2)
            expected = job.duration * math.exp(rule.expected_sigma * z)
        deadline = job.deadline
        if deadline is None and _deadline_u(key) < rule.deadline_share:
            slack = rule.slack_min + _slack_u(key) * slack_span
            deadline = job.submit + (expected if from_declared else job.duration) * slack
        out.append(
            SimJob(
                job_id=job.job_id,
                submit=job.submit,
                duration=job.duration,
                gpus=job.gpus,
                project=project.name,
                tier=project.tier,
                priority=project.priority,
                deadline=deadline,
                expected_duration=expected,
                checkpoint_seconds=rule.checkpoint_seconds,
            )
        )
    return out


def _projects(policy_set: PolicySet) -> list[_Project]:
    """Each project's weight and reach, in name order so the slices never depend on file order."""
    policy = policy_set.policy
    # What each tier's cohort can lend, per pool: its members' lendable quota and the tier's
    # reservations (the cohort's own quota).
    lendable: dict[tuple[str, str], int] = defaultdict(int)
    for tier in policy.spec.tiers:
        for reservation in tier.reserved:
            lendable[tier.name, reservation.pool] += reservation.gpus
    for project in policy_set.projects:
        if project.spec.share_capacity:
            for quota in project.spec.quotas:
                lendable[project.spec.tier, quota.pool] += _lends(quota)
    out: list[_Project] = []
    for project in sorted(policy_set.projects, key=lambda p: p.name):
        project_tier = policy.tier(project.spec.tier)
        if project_tier is None:  # load_policy_set rejects this; a hand-built set might not.
            raise ValueError(f"project {project.name!r} names unknown tier {project.spec.tier!r}")
        out.append(
            _Project(
                name=project.name,
                tier=project_tier.name,
                priority=project_tier.priority,
                nominal=sum(q.nominal_gpus for q in project.spec.quotas),
                reach=_reach(project, lendable),
            )
        )
    return out


def _reach(project: TrainingProject, lendable: dict[tuple[str, str], int]) -> int:
    spec = project.spec
    reach = 0
    for quota in spec.quotas:
        reach += quota.nominal_gpus
        if spec.share_capacity:
            others = lendable[spec.tier, quota.pool] - _lends(quota)
            limit = quota.borrowing_limit_gpus
            reach += others if limit is None else min(limit, others)
    return reach


def _lends(quota: PoolQuota) -> int:
    limit = quota.lending_limit_gpus
    return quota.nominal_gpus if limit is None else min(limit, quota.nominal_gpus)


def _uniform(purpose: bytes) -> Callable[[bytes], float]:
    """H(purpose, ...) of the module docstring: a key's uniform number in [0, 1).

    The personalised hash is set up once and copied per key, which halves the cost of a draw
    (a full trace takes four per job).
    """
    prototype = hashlib.blake2b(digest_size=8, person=purpose)

    def draw(key: bytes) -> float:
        h = prototype.copy()
        h.update(key)
        return (int.from_bytes(h.digest(), "big") >> 11) * _SCALE_53

    return draw


_project_u = _uniform(b"project")
_deadline_u = _uniform(b"deadline")
_slack_u = _uniform(b"slack")
_expected_u = _uniform(b"expected")
