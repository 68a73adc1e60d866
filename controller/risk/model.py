"""From a policy, its quota split and the observed workloads to risk problems and estimates.

Pure assembly around `deadline.estimate_many`:
- a workload belongs to a project when it waits in the project's LocalQueue (named after the
  project) in one of the project's namespaces, or was admitted to its ClusterQueue;
- it counts toward a deadline when its labels match the deadline's `matchLabels`, or, without
  them, when it carries `quartermaster.dev/deadline=<name>`;
- its runtime is its `expected-duration-seconds` annotation (tight), else the project's median
  from Prometheus history (looser), else a prior of an hour (loose); a running workload's
  remaining runtime is that minus what it has run, never under a tenth of it;
- the deadline is the `at` time, or the schedule's next cutoff after now in its time zone.
The same snapshot answers "what if this project had x on-demand GPUs in that pool" for the
decision search (`oracle`), and the predicted wait of each ClusterQueue.
"""

from __future__ import annotations

import itertools
import zoneinfo
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cache
from typing import NamedTuple

from controller import names
from controller.api.cron import next_after, parse_cron
from controller.api.policy_set import PolicySet
from controller.api.types import Deadline, PoolQuota, TrainingProject
from controller.capacity import FlavorQuota, spot_allowed
from controller.risk.deadline import Capacity, Estimate, Job, Problem, estimate_many
from controller.risk.learning import RuntimeLearner
from controller.risk.pools import PoolStats
from controller.risk.urgency import LEVELS, chance_to_finish, demoted, urgency_level
from controller.risk.wait import WaitEstimate, WaitProblem, estimate_waits
from controller.risk.workloads import WorkloadView

LaneFields = tuple[
    tuple[str, str], str, int, float, float, float, float, float, str | None, bool, float | None
]
"""A deadline workload as `RiskModel.lane_workloads` gives it."""


class LostWorkload(NamedTuple):
    """A waiting workload whose deadline is lost (`RiskModel.lost_workloads`)."""

    chance: float
    """Its chance to make the deadline even if started now (after a node's launch)."""
    project: str
    deadline: str
    """The earliest open deadline it counts toward: the one it was judged against."""
    cutoff: float
    """That deadline's time (epoch seconds)."""


PRIOR_RUNTIME_SECONDS = 3600.0
DEFAULT_CHECKPOINT_SECONDS = 3600.0
SIGMA_ANNOTATED = 0.25
SIGMA_HISTORY = 0.6
SIGMA_PRIOR = 1.0


@dataclass(frozen=True)
class Snapshot:
    """Everything the model needs, as plain data."""

    policy_set: PolicySet
    quotas: Mapping[tuple[str, str], FlavorQuota]
    """(project, pool) -> the current split."""
    workloads: Sequence[WorkloadView]
    pools: Mapping[str, PoolStats]
    now: float
    median_runtime: Mapping[str, float] = field(default_factory=dict)
    """project -> median runtime from history, when Prometheus has it."""
    samples: int = 500
    seed: int = 0
    max_jobs: int | None = None
    """At most this many of a project's workloads, in admission order, enter each estimate
    (the simulator's bound on cost; the controller uses all of them)."""
    pod_sets: Mapping[str, int] = field(default_factory=dict)
    """Per project, its widest pending pod set (GPUs)."""
    deadline_first: bool = False
    """Whether the controller boosts waiting work by urgency (`priorityBoost`), so that Kueue
    admits a queue's tightest deadlines first: the model then queues them first too."""
    runtimes: RuntimeLearner | None = None
    """Runtimes learned from finished work (`controller.risk.learning`): when given, a
    workload's runtime is the learned distribution for its project and queue, which with no
    history is exactly the declared or prior one below. None: the fixed spreads alone."""


@dataclass(frozen=True)
class DeadlineReport:
    project: str
    deadline: str
    cutoff: float
    estimate: Estimate
    workloads: int
    """Unfinished workloads counting toward it."""
    target: float
    """The miss probability it may have: 1 - targetConfidence."""


@cache
def _zone(name: str) -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(name)


def cutoff(deadline: Deadline, now: float) -> float:
    if deadline.at is not None:
        return deadline.at.timestamp()
    assert deadline.schedule is not None, "validated deadlines have at or schedule"
    return _next_cutoff(deadline.schedule, deadline.time_zone or "UTC", now)


_CUTOFFS: dict[tuple[str, str], tuple[float, float]] = {}
"""(schedule, zone) -> (the clock it was worked out at, the next cutoff after it)."""
CUTOFFS_KEPT = 1024
"""Schedules held at once; more than a policy names, so the bound only stops a runaway."""


def _next_cutoff(schedule: str, zone: str, now: float) -> float:
    """The schedule's next cutoff after `now`, worked out again only once it has passed.

    Projects share a few schedules (a monthly release, a weekly review), and the next cutoff is
    the same for every clock from the one it was worked out at until the cutoff itself: so it
    is kept per schedule, not per pass. (Keyed by the pass's clock, a cache gained an entry
    every pass, held long after, and never hit across passes.) A clock that went back works it
    out again.
    """
    key = (schedule, zone)
    held = _CUTOFFS.get(key)
    if held is not None and held[0] <= now < held[1]:
        return held[1]
    moment = datetime.fromtimestamp(now, UTC)
    found = next_after(parse_cron(schedule), moment, _zone(zone)).timestamp()
    if len(_CUTOFFS) >= CUTOFFS_KEPT:
        _CUTOFFS.clear()
    _CUTOFFS[key] = (now, found)
    return found


def project_workloads(
    policy_set: PolicySet, workloads: Sequence[WorkloadView]
) -> dict[str, list[WorkloadView]]:
    """Unfinished workloads by project."""
    owner: dict[tuple[str, str], str] = {}
    for project in policy_set.projects:
        for namespace in project.spec.namespaces:
            owner[(namespace, project.name)] = project.name
    by_project: dict[str, list[WorkloadView]] = {p.name: [] for p in policy_set.projects}
    for workload in workloads:
        if workload.finished:
            continue
        name = owner.get((workload.namespace, workload.queue))
        if name is None and workload.cluster_queue in by_project:
            name = workload.cluster_queue
        if name is not None:
            by_project[name].append(workload)
    return by_project


def counting_toward(workloads: Sequence[WorkloadView], deadline: Deadline) -> list[WorkloadView]:
    """Those of `workloads` that count toward the deadline (its matchLabels, else its label)."""
    return list(itertools.compress(workloads, _counting_flags(workloads, deadline)))


def _counting_flags(workloads: Sequence[WorkloadView], deadline: Deadline) -> list[bool]:
    """Whether each of `workloads` counts toward the deadline (`_counts`, for many at once)."""
    if deadline.match_labels:
        return [_counts(w, deadline) for w in workloads]
    name = deadline.name
    return [w.deadline == name for w in workloads]


def _counts(workload: WorkloadView, deadline: Deadline) -> bool:
    if deadline.match_labels:
        return all(workload.labels.get(k) == v for k, v in deadline.match_labels.items())
    return workload.deadline == deadline.name


_DeadlineWork = tuple[TrainingProject, WorkloadView, Deadline, float, Job]
"""A pending workload counting toward an open deadline: its project, the earliest such
deadline and its cutoff, and its job as the model sees it (counting)."""


def _earliest(
    workloads: Sequence[WorkloadView],
    deadlines: Sequence[Deadline],
    project: str,
    cutoffs: Mapping[tuple[str, str], float],
) -> list[tuple[Deadline, float] | None]:
    """For each of `workloads`, the earliest of `deadlines` it counts toward, with its cutoff
    (the first listed of those due at once), or None: deadline by deadline, over the
    workloads counting toward each."""
    found: list[tuple[Deadline, float] | None] = [None] * len(workloads)
    for deadline in deadlines:
        at = cutoffs[(project, deadline.name)]
        for i, counts in enumerate(_counting_flags(workloads, deadline)):
            if counts:
                known = found[i]
                if known is None or at < known[1]:
                    found[i] = (deadline, at)
    return found


_new_job = tuple.__new__


_Learned = dict[tuple[str | None, float, float | None], tuple[float, float]]
"""One project's learned runtimes as a pass asks for them: (queue, prior sigma, prior mean or
None for a declared runtime) -> (mean, or the factor on the declaration; sigma)."""


def _project_jobs(
    workloads: Sequence[WorkloadView], snapshot: Snapshot, project: str, latency: float
) -> dict[int, tuple[Job, Job]]:
    """id(view) -> each of the project's workloads as the model sees it: not counting toward a
    deadline, and counting. One loop for the project's workloads, since a pass makes some
    10,000 of them and what they share (the project's fallback runtime, what its finished work
    taught) is looked up once.

    An admitted workload whose pods Kueue reports not ready holds its GPUs and has yet to
    start: its time left is its runtime plus the rest of a node's launch (`latency`), or a
    whole launch more once one has passed, since whatever held it up then may still.
    """
    now, runtimes = snapshot.now, snapshot.runtimes
    fallback = (
        (snapshot.median_runtime[project], SIGMA_HISTORY)
        if project in snapshot.median_runtime
        else (PRIOR_RUNTIME_SECONDS, SIGMA_PRIOR)
    )
    learned: _Learned = {}
    out: dict[int, tuple[Job, Job]] = {}
    for workload in workloads:
        declared = workload.expected_duration
        if declared is not None:
            total, sigma = declared, SIGMA_ANNOTATED
        else:
            total, sigma = fallback
        if runtimes is not None:
            key = (workload.queue or None, sigma, None if declared is not None else total)
            found = learned.get(key)
            if found is None:
                found = learned[key] = _learned(runtimes, project, key)
            if declared is not None:
                total, sigma = total * found[0], found[1]
            else:
                total, sigma = found
        admitted = workload.admitted_at
        # Pending work has run only its earlier admissions (`elapsed`, without the call).
        done = workload.past_execution_seconds if admitted is None else workload.elapsed(now)
        left = total - done
        least = total * 0.1
        remaining = left if left >= least else least
        if admitted is not None and workload.pods_waiting:
            waited = max(now - admitted, 0.0)
            remaining += latency - waited if waited < latency else latency
        gpus, running = workload.gpus, workload.running
        checkpoint = workload.checkpoint_interval or DEFAULT_CHECKPOINT_SECONDS
        # Straight to the tuples: `Job(...)` costs a call more.
        out[id(workload)] = (
            _new_job(Job, (gpus, remaining, sigma, running, checkpoint, False)),
            _new_job(Job, (gpus, remaining, sigma, running, checkpoint, True)),
        )
    return out


def _learned(
    runtimes: RuntimeLearner, project: str, key: tuple[str | None, float, float | None]
) -> tuple[float, float]:
    """What the project's finished work says of a runtime, asked by `_Learned`'s key (queue,
    prior sigma, prior mean or None for a declared runtime): the factor on a declared runtime
    (the same whatever it declares) and the sigma, or the mean and sigma of an undeclared one,
    the prior shrunk toward what that work showed. A pass keeps the answers per project: its
    workloads ask a handful of distinct questions."""
    queue, sigma, prior = key
    if prior is None:
        estimate = runtimes.declared(project, 1.0, queue=queue, prior_sigma=sigma)
    else:
        estimate = runtimes.undeclared(
            project, queue=queue, prior_mean_seconds=prior, prior_sigma=sigma
        )
    return estimate.mean_seconds, estimate.sigma


def _ordered(
    workloads: Sequence[WorkloadView], levels: Mapping[tuple[str, str], int] | None = None
) -> list[WorkloadView]:
    """Running first, then pending by priority and age: the order Kueue admits them. With
    `levels` ((namespace, name) -> urgency level, the controller's boosts), pending work of
    one priority goes by level first: Kueue orders by the boosted priority."""
    levels = levels or {}
    return sorted(
        workloads,
        key=lambda w: (
            not w.running,
            w.admitted_at or 0.0,
            -w.priority,
            levels.get((w.namespace, w.name), 0),
            w.created,
            w.name,
        ),
    )


def _on_demand(
    snapshot: Snapshot, project: str, quota: PoolQuota, override: tuple[str, int] | None
) -> int:
    """The on-demand GPUs of one of a project's pools that may use spot, under `override`."""
    nominal = quota.nominal_gpus
    if override is None or override[0] != quota.pool:
        split = snapshot.quotas.get((project, quota.pool))
        return split.on_demand_gpus if split else nominal
    od = min(max(override[1], 0), nominal)
    wide = min(snapshot.pod_sets.get(project, 0), nominal)
    if wide and max(od, nominal - od) < wide:
        od = wide  # the renderer keeps the pod set whole, towards on-demand
    return od


def project_capacity(
    snapshot: Snapshot, project: TrainingProject, override: tuple[str, int] | None = None
) -> Capacity:
    """The project's GPUs over its pools, with `override` = (pool, on-demand GPUs) if given.

    With an override the split is the one the renderer would make for that share (its held
    on-demand, with the project's widest pending pod set kept whole in one flavor), so the
    decision search asks about quotas Kueue could actually admit into.
    """
    on_demand = spot = 0.0
    weighted_rate = weighted_availability = 0.0
    latency = 0.0
    per_node = 64
    widest = 0.0
    spot_ok = spot_allowed(snapshot.policy_set, project)
    shares = project.spec.share_capacity
    for quota in project.spec.quotas:
        split = snapshot.quotas.get((project.name, quota.pool))
        nominal = quota.nominal_gpus
        od = _on_demand(snapshot, project.name, quota, override) if spot_ok else nominal
        pool_spot = nominal - od
        on_demand += od
        spot += pool_spot
        for gpus, borrowing in (
            (od, split.on_demand_borrowing_limit if split else None),
            (pool_spot, split.spot_borrowing_limit if split else None),
        ):
            reach = float(gpus)
            if shares:
                reach += float("inf") if borrowing is None else borrowing
            widest = max(widest, reach)
        stats = snapshot.pools.get(quota.pool)
        pool = snapshot.policy_set.policy.pool(quota.pool)
        if stats is not None:
            weighted_rate += stats.interruptions_per_node_hour * pool_spot
            weighted_availability += stats.spot_availability * pool_spot
            latency = max(latency, stats.provisioning_latency_seconds)
        if pool is not None:
            per_node = min(per_node, pool.gpus_per_node)
    return Capacity(
        on_demand_gpus=on_demand,
        spot_gpus=spot,
        spot_availability=weighted_availability / spot if spot else 1.0,
        interruptions_per_node_hour=weighted_rate / spot if spot else 0.0,
        gpus_per_node=per_node,
        provisioning_latency_seconds=latency,
        widest_gpus=widest,
    )


CARRY_MAX_AGE_SECONDS = 60.0
"""How long an estimate is carried to later passes while its project's workloads, cutoff and
capacity stay the same: the clock alone moves it by far less in a minute than its sampling
noise (the replay decides every 15 minutes, so it never carries one)."""


@dataclass(frozen=True)
class Carried:
    """Estimates one pass made, for the next to reuse where nothing they came from changed.

    Keyed by project, with the very workload views they were made from (compared by identity:
    the controller hands the same view for a Workload that did not change), each deadline's
    cutoff, and per capacity the estimate and when it was made.
    """

    views: Mapping[str, tuple[WorkloadView, ...]] = field(default_factory=dict)
    estimates: Mapping[tuple[str, str], Mapping[Capacity, tuple[Estimate, float]]] = field(
        default_factory=dict
    )
    cutoffs: Mapping[tuple[str, str], float] = field(default_factory=dict)
    waits: Mapping[str, tuple[Capacity, WaitEstimate, float]] = field(default_factory=dict)


def _same_views(kept: tuple[WorkloadView, ...] | None, now: Sequence[WorkloadView]) -> bool:
    return (
        kept is not None
        and len(kept) == len(now)
        and all(a is b for a, b in zip(kept, now, strict=True))
    )


class RiskModel:
    """Deadline risk and queue waits for one snapshot; cheap to ask again with other shares."""

    def __init__(
        self,
        snapshot: Snapshot,
        by_project: Mapping[str, list[WorkloadView]] | None = None,
        *,
        carried: Carried | None = None,
    ) -> None:
        """`by_project`: `project_workloads` of the snapshot, when the caller has it already.
        `carried`: the last pass's estimates (`carry()`), reused where nothing changed."""
        self.snapshot = snapshot
        self.by_project = (
            dict(by_project)
            if by_project is not None
            else project_workloads(snapshot.policy_set, snapshot.workloads)
        )
        self._queues: dict[str, list[WorkloadView]] = {}
        """Per project, its unfinished workloads in the order Kueue will run them."""
        self._slacks: dict[str, dict[tuple[str, str], float | None]] = {}
        """Per project with deadlines, its pending workloads' least slack (`_slack`)."""
        self._jobs: dict[tuple[str, str], tuple[Job, ...]] = {}
        """Built when an estimate needs them: most projects' estimates are carried."""
        self._counted: dict[tuple[str, str], int] = {}
        """How many of `_jobs` count toward their deadline, counted as they are built."""
        self._capacities: dict[tuple[str, tuple[str, int] | None], Capacity] = {}
        """Per split: see `_capacity` (`with_quotas` keeps those of projects it leaves as
        they were)."""
        self._job_of: dict[str, dict[int, tuple[Job, Job]]] = {}
        """Per project, id(view) -> its job, not counting and counting (`_jobs_by_view`)."""
        self._cutoffs: dict[tuple[str, str], float] = {}
        self._answers: dict[tuple[str, str, int], dict[str, float]] = {}
        self._by_capacity: dict[tuple[str, str, Capacity], Estimate] = {}
        """(project, deadline, capacity) -> estimate: the same problem asked from another pool,
        at another share that comes to the same capacity, or by the model of a new split."""
        self._made_at: dict[tuple[str, str, Capacity], float] = {}
        self._carried: dict[tuple[str, str], Mapping[Capacity, tuple[Estimate, float]]] = {}
        self._carried_waits: dict[str, tuple[Capacity, WaitEstimate, float]] = {}
        self._deadline_work: list[_DeadlineWork] | None = None
        """`_pending_deadline_jobs`, made once: the lanes and the lost-work judgement read it
        from the models before and after a split, and it does not depend on the split."""
        self._lost: dict[float, dict[tuple[str, str], LostWorkload]] = {}
        """Per `lostBelow`, `lost_workloads`: the queue order (through `demoted`) and the plan
        both read it, and a node's launch, all it reads of the split, is the pools' own."""
        self._demoted: frozenset[tuple[str, str]] | None = None
        for project in snapshot.policy_set.projects:
            for deadline in project.spec.deadlines:
                self._cutoffs[(project.name, deadline.name)] = cutoff(deadline, snapshot.now)
        if carried is not None:
            self._take(carried)

    def _take(self, carried: Carried) -> None:
        """Keep what the last pass estimated for projects whose workloads are the same."""
        now = self.snapshot.now
        for project in self.snapshot.policy_set.projects:
            name = project.name
            if not _same_views(carried.views.get(name), self.by_project[name]):
                continue
            for deadline in project.spec.deadlines:
                key = (name, deadline.name)
                if carried.cutoffs.get(key) != self._cutoffs[key]:
                    continue
                fresh = {
                    capacity: (estimate, at)
                    for capacity, (estimate, at) in carried.estimates.get(key, {}).items()
                    if 0 <= now - at < CARRY_MAX_AGE_SECONDS
                }
                if fresh:
                    self._carried[key] = fresh
            wait = carried.waits.get(name)
            if wait is not None and 0 <= now - wait[2] < CARRY_MAX_AGE_SECONDS:
                self._carried_waits[name] = wait

    def _jobs_of(self, project: str, deadline: Deadline) -> tuple[Job, ...]:
        key = (project, deadline.name)
        if key not in self._jobs:
            ordered = self._queue(project)[: self.snapshot.max_jobs]
            counted = _counting_flags(ordered, deadline)
            jobs = self._jobs_by_view(project)
            self._jobs[key] = tuple(jobs[id(w)][c] for w, c in zip(ordered, counted, strict=True))
            self._counted[key] = sum(counted)
        return self._jobs[key]

    def _jobs_by_view(self, project: str) -> dict[int, tuple[Job, Job]]:
        """id(view) -> the job of each of the project's unfinished workloads, not counting and
        counting (index by whether it counts): each deadline of a project, its queue wait and
        its slacks read the same workloads, so they are made once, all at once. (`by_project`
        holds the views, so their ids stand while this does.)"""
        found = self._job_of.get(project)
        if found is None:
            snapshot = self.snapshot
            # What a workload whose pods wait may still wait: the slowest launch of the
            # project's pools, as its capacity has it.
            known = snapshot.policy_set.project(project)
            latency = self._capacity(known).provisioning_latency_seconds if known else 0.0
            found = self._job_of[project] = _project_jobs(
                self.by_project[project], snapshot, project, latency
            )
        return found

    def _queue(self, name: str) -> list[WorkloadView]:
        if name not in self._queues:
            levels = None
            project = self.snapshot.policy_set.project(name)
            if self.snapshot.deadline_first and project is not None and project.spec.deadlines:
                down = self.demoted()
                levels = {
                    key: LEVELS - 1 if key in down else urgency_level(slack)
                    for key, slack in self._slack(project).items()
                }
            self._queues[name] = _ordered(self.by_project[name], levels)
        return self._queues[name]

    def carry(self) -> Carried:
        """What this model estimated, for the next pass's model (see `Carried`)."""
        estimates: dict[tuple[str, str], dict[Capacity, tuple[Estimate, float]]] = {}
        for (project, deadline, capacity), estimate in self._by_capacity.items():
            at = self._made_at[(project, deadline, capacity)]
            estimates.setdefault((project, deadline), {})[capacity] = (estimate, at)
        return Carried(
            views={name: tuple(items) for name, items in self.by_project.items()},
            estimates=estimates,
            cutoffs=dict(self._cutoffs),
            waits=dict(self._carried_waits),
        )

    def with_quotas(self, quotas: Mapping[tuple[str, str], FlavorQuota]) -> RiskModel:
        """The same world under another split: workloads, jobs, cutoffs and every estimate
        made so far are shared, so only projects whose capacity changed are sampled again."""
        other = RiskModel.__new__(RiskModel)
        other.snapshot = replace(self.snapshot, quotas=quotas)
        other.by_project = self.by_project
        other._queues = self._queues
        other._slacks = self._slacks
        other._jobs = self._jobs
        other._counted = self._counted
        other._job_of = self._job_of
        # A project's capacity reads only its own quotas: those whose split is the same keep
        # theirs, so the reports after a decision recompute only the projects it moved.
        moved = {
            key[0]
            for key in self.snapshot.quotas.keys() | quotas.keys()
            if self.snapshot.quotas.get(key) != quotas.get(key)
        }
        other._capacities = {k: v for k, v in self._capacities.items() if k[0] not in moved}
        other._cutoffs = self._cutoffs
        other._answers = {}
        other._by_capacity = self._by_capacity
        other._made_at = self._made_at
        other._carried = self._carried
        other._carried_waits = self._carried_waits
        other._deadline_work = self._deadline_work
        other._lost = self._lost
        other._demoted = self._demoted
        return other

    def _estimate(
        self, asked: Sequence[tuple[TrainingProject, Deadline, Capacity]]
    ) -> list[Estimate]:
        """Estimates for (project, deadline, capacity): known ones, carried ones, and the rest
        sampled in one batch."""
        missing: dict[tuple[str, str, Capacity], tuple[TrainingProject, Deadline]] = {}
        for project, deadline, capacity in asked:
            key = (project.name, deadline.name, capacity)
            if key in self._by_capacity or key in missing:
                continue
            kept = self._carried.get((project.name, deadline.name), {}).get(capacity)
            if kept is not None:
                self._by_capacity[key], self._made_at[key] = kept
                continue
            missing[key] = (project, deadline)
        problems = [
            Problem(self._jobs_of(p.name, d), capacity, self._cutoffs[(p.name, d.name)])
            for (_, _, capacity), (p, d) in missing.items()
        ]
        fresh = estimate_many(
            problems,
            now=self.snapshot.now,
            samples=self.snapshot.samples,
            seed=self.snapshot.seed,
        )
        for key, estimate in zip(missing, fresh, strict=True):
            self._by_capacity[key] = estimate
            self._made_at[key] = self.snapshot.now
        return [self._by_capacity[(p.name, d.name, c)] for p, d, c in asked]

    def _asked(
        self,
        project: TrainingProject,
        override: tuple[str, int] | None = None,
        deadlines: Sequence[Deadline] | None = None,
    ) -> list[tuple[TrainingProject, Deadline, Capacity]]:
        capacity = self._capacity(project, override)
        return [
            (project, d, capacity)
            for d in (project.spec.deadlines if deadlines is None else deadlines)
        ]

    def _capacity(
        self, project: TrainingProject, override: tuple[str, int] | None = None
    ) -> Capacity:
        """`project_capacity` under this model's split, once per question: the reports and the
        waits read the current one, the searches of several pools the same shares."""
        key = (project.name, override)
        found = self._capacities.get(key)
        if found is None:
            if override is not None and self._unchanged_by(project, override):
                found = self._capacity(project)  # shared with the reports and the waits
            else:
                found = project_capacity(self.snapshot, project, override)
            self._capacities[key] = found
        return found

    def _unchanged_by(self, project: TrainingProject, override: tuple[str, int]) -> bool:
        """Whether `override` leaves the project's split as it is (the search asks about the
        current share of every project first)."""
        if not spot_allowed(self.snapshot.policy_set, project):
            return True
        return all(
            _on_demand(self.snapshot, project.name, quota, override)
            == _on_demand(self.snapshot, project.name, quota, None)
            for quota in project.spec.quotas
            if quota.pool == override[0]
        )

    def _open_deadlines(self, project: TrainingProject) -> list[Deadline]:
        """Deadlines still ahead: capacity bought now cannot help one that has passed, so only
        these drive decisions (the status still reports a passed one as missed)."""
        return [
            d
            for d in project.spec.deadlines
            if self._cutoffs[(project.name, d.name)] > self.snapshot.now
        ]

    def deadlines(self) -> list[DeadlineReport]:
        """Every deadline's estimate under the current split, in one batch (estimates this
        model, or the one it was made from, already has for the same capacity are reused)."""
        asked: list[tuple[TrainingProject, Deadline, Capacity]] = []
        for project in self.snapshot.policy_set.projects:
            asked.extend(self._asked(project))
        estimates = self._estimate(asked)
        return [
            DeadlineReport(
                project=project.name,
                deadline=deadline.name,
                cutoff=self._cutoffs[(project.name, deadline.name)],
                estimate=estimate,
                workloads=self._counting(project.name, deadline),
                target=1 - deadline.target_confidence,
            )
            for (project, deadline, _), estimate in zip(asked, estimates, strict=True)
        ]

    def _counting(self, project: str, deadline: Deadline) -> int:
        """Unfinished workloads counting toward a deadline (of those an estimate takes)."""
        known = self._counted.get((project, deadline.name))
        if known is not None:
            return known
        ordered = self.by_project[project]
        if self.snapshot.max_jobs is not None:
            ordered = self._queue(project)[: self.snapshot.max_jobs]
        return sum(1 for w in ordered if _counts(w, deadline))

    def oracle(self, project_name: str, pool: str, on_demand_gpus: int) -> dict[str, float]:
        """Risk per deadline of a project if it had `on_demand_gpus` on-demand in `pool`.

        Answers are remembered for the snapshot: the decision search asks some twice. Only
        deadlines still ahead are answered for.
        """
        key = (project_name, pool, on_demand_gpus)
        if key in self._answers:
            return self._answers[key]
        project = self.snapshot.policy_set.project(project_name)
        if project is None:
            return {}
        self.prefetch([key])
        return self._answers[key]

    def prefetch(self, questions: Sequence[tuple[str, str, int]]) -> None:
        """Answer many (project, pool, share) questions in one batch, for `oracle` to return.

        Each problem has its own samples, so a batched answer equals the one asked alone.
        """
        wanted: list[tuple[tuple[str, str, int], TrainingProject]] = []
        for key in dict.fromkeys(questions):
            if key in self._answers:
                continue
            project = self.snapshot.policy_set.project(key[0])
            if project is None or not self._open_deadlines(project):
                self._answers[key] = {}
                continue
            wanted.append((key, project))
        asked: list[tuple[TrainingProject, Deadline, Capacity]] = []
        for (_, pool, share), project in wanted:
            asked.extend(self._asked(project, (pool, share), self._open_deadlines(project)))
        estimates = iter(self._estimate(asked))
        for key, project in wanted:
            deadlines = self._open_deadlines(project)
            found = [next(estimates) for _ in deadlines]
            self._answers[key] = {d.name: e.risk for d, e in zip(deadlines, found, strict=True)}

    def waits(self) -> dict[str, WaitEstimate]:
        """Predicted wait of the next workload in each project's ClusterQueue."""
        out: dict[str, WaitEstimate] = {}
        asked: list[tuple[str, Capacity, WaitProblem]] = []
        for project in self.snapshot.policy_set.projects:
            capacity = self._capacity(project)
            kept = self._carried_waits.get(project.name)
            if kept is not None and kept[0] == capacity:
                out[project.name] = kept[1]
                continue
            workloads = self._queue(project.name)
            of_view = self._jobs_by_view(project.name)
            jobs = [of_view[id(w)][0] for w in workloads]
            pending = [w.gpus for w in workloads if w.pending]
            new_gpus = sorted(pending)[len(pending) // 2] if pending else 1
            usable = capacity.on_demand_gpus + capacity.spot_gpus * capacity.spot_availability
            if new_gpus <= capacity.widest_gpus:
                # A pod set is indivisible and runs once a flavor has room for it: 8 spot GPUs
                # at 90 % availability drain like 7.2, but still start an 8-GPU job.
                usable = max(usable, float(new_gpus))
            asked.append((project.name, capacity, WaitProblem(jobs, usable, new_gpus)))
        found = estimate_waits(
            [problem for _, _, problem in asked],
            samples=min(self.snapshot.samples, 100),
            seed=self.snapshot.seed,
        )
        for (name, capacity, _), wait in zip(asked, found, strict=True):
            out[name] = wait
            self._carried_waits[name] = (capacity, wait, self.snapshot.now)
        return {project.name: out[project.name] for project in self.snapshot.policy_set.projects}

    def pending_slack(self) -> dict[tuple[str, str], float | None]:
        """(namespace, name) -> least slack of each pending workload of a project with
        deadlines: over the open deadlines it counts toward, the cutoff minus now minus its
        expected remaining runtime; None when it counts toward none."""
        out: dict[tuple[str, str], float | None] = {}
        for project in self.snapshot.policy_set.projects:
            if project.spec.deadlines:
                out.update(self._slack(project))
        return out

    def _slack(self, project: TrainingProject) -> dict[tuple[str, str], float | None]:
        """Made once per snapshot: the queue order and the boosts both read it, and it does
        not depend on the split."""
        if project.name in self._slacks:
            return self._slacks[project.name]
        out: dict[tuple[str, str], float | None] = {}
        self._slacks[project.name] = out
        now = self.snapshot.now
        of_view = self._jobs_by_view(project.name)
        pending = [w for w in self.by_project[project.name] if w.pending]
        earliest = _earliest(pending, self._open_deadlines(project), project.name, self._cutoffs)
        # The least slack is the earliest cutoff's: the same remaining runtime for each.
        for workload, found in zip(pending, earliest, strict=True):
            out[(workload.namespace, workload.name)] = (
                None if found is None else found[1] - now - of_view[id(workload)][1].mean_seconds
            )
        return out

    def _pending_deadline_jobs(self) -> list[_DeadlineWork]:
        """Each pending workload counting toward an open deadline, with the earliest such
        deadline, its cutoff and the workload's job as the model sees it (counting): what the
        lanes and the lost-work judgement both read."""
        if self._deadline_work is not None:
            return self._deadline_work
        out: list[_DeadlineWork] = []
        cutoffs = self._cutoffs
        for project in self.snapshot.policy_set.projects:
            if not project.spec.deadlines:
                continue
            open_deadlines = self._open_deadlines(project)
            if not open_deadlines:
                continue
            name = project.name
            of_view = self._jobs_by_view(name)
            pending = [w for w in self.by_project[name] if w.pending]
            for workload, found in zip(
                pending, _earliest(pending, open_deadlines, name, cutoffs), strict=True
            ):
                if found is not None:
                    first, at = found
                    out.append((project, workload, first, at, of_view[id(workload)][1]))
        self._deadline_work = out
        return out

    def lane_workloads(self) -> list[LaneFields]:
        """Each pending workload of a project with open deadlines, and each admitted on spot
        whose pods wait for a node, for the lanes (`controller.decide.lanes`): (namespace,
        name), project, GPUs, seconds to the earliest open deadline it counts toward and that
        deadline's target confidence, its expected remaining runtime with its spread and
        checkpoint interval, its lane, whether its owner chose a capacity type, and for an
        admitted one the seconds since its admission (None for a pending one). Plain tuples:
        the decision layer builds its own inputs from them, and the risk layer does not
        import it."""
        out: list[LaneFields] = []
        now = self.snapshot.now
        for project, workload, first, cutoff, job in self._pending_deadline_jobs():
            out.append(
                (
                    (workload.namespace, workload.name),
                    project.name,
                    workload.gpus,
                    cutoff - now,
                    first.target_confidence,
                    job.mean_seconds,
                    job.sigma,
                    job.checkpoint_seconds,
                    workload.lane,
                    workload.owner_chose_capacity,
                    None,
                )
            )
        out.extend(self._waiting_on_spot())
        return out

    def _waiting_on_spot(self) -> list[LaneFields]:
        """The deadline workloads admitted on a spot flavor whose pods wait for a node (Kueue's
        PodsReady False), as `lane_workloads` gives them. The runtime is the job's without the
        rest of the launch the model adds for the wait: the lane weighs the launch itself."""
        out: list[LaneFields] = []
        now = self.snapshot.now
        cutoffs = self._cutoffs
        for project in self.snapshot.policy_set.projects:
            if not project.spec.deadlines:
                continue
            name = project.name
            spot = {names.flavor_name(q.pool, names.SPOT) for q in project.spec.quotas}
            waiting = [
                w
                for w in self.by_project[name]
                if w.pods_waiting
                and w.running
                and w.admitted_at is not None
                and any(f in spot for f in w.flavors)
            ]
            if not waiting:
                continue
            open_deadlines = self._open_deadlines(project)
            of_view = self._jobs_by_view(name)
            latency = self._capacity(project).provisioning_latency_seconds
            for workload, found in zip(
                waiting, _earliest(waiting, open_deadlines, name, cutoffs), strict=True
            ):
                if found is None:
                    continue
                first, at = found
                assert workload.admitted_at is not None
                waited = max(now - workload.admitted_at, 0.0)
                job = of_view[id(workload)][1]
                launch_left = latency - waited if waited < latency else latency
                out.append(
                    (
                        (workload.namespace, workload.name),
                        name,
                        workload.gpus,
                        at - now,
                        first.target_confidence,
                        max(job.mean_seconds - launch_left, 0.0),
                        job.sigma,
                        job.checkpoint_seconds,
                        workload.lane,
                        workload.owner_chose_capacity,
                        waited,
                    )
                )
        return out

    def lost_workloads(self, lost_below: float) -> dict[tuple[str, str], LostWorkload]:
        """(namespace, name) -> how it is lost, for each pending workload whose earliest open
        deadline is lost: even started now (after a node's launch), its runtime's spread gives
        it less than `lost_below` chance to finish in time. Every tier is judged: its owner is
        told whatever the tier, while only tiers with `demoteLost` are reordered (the plan
        filters them)."""
        known = self._lost.get(lost_below)
        if known is not None:
            return known
        out: dict[tuple[str, str], LostWorkload] = {}
        self._lost[lost_below] = out
        now = self.snapshot.now
        for project, workload, first, at, job in self._pending_deadline_jobs():
            launch = self._capacity(project).provisioning_latency_seconds
            chance = chance_to_finish(at - now - launch, job.mean_seconds, job.sigma)
            if chance < lost_below:
                key = (workload.namespace, workload.name)
                out[key] = LostWorkload(chance, project.name, first.name, at)
        return out

    def demoted(self) -> frozenset[tuple[str, str]]:
        """The waiting workloads the boosts place after savable work this pass: lost, in a
        tier with `demoteLost`, and created less than `lostMaxWaitSeconds` ago. The queue
        order reads it, so the model predicts the order Kueue will follow: with lost work
        first, as its negative slack alone would place it, every savable workload behind it
        looks later than it is, and the mix is raised for deadlines the order already saves.
        Empty without the deadline order (no boosts, so no demotion either)."""
        if self._demoted is not None:
            return self._demoted
        spec = self.snapshot.policy_set.policy.spec
        tiers = {t.name for t in spec.tiers if t.demote_lost}
        if not self.snapshot.deadline_first or not tiers:
            self._demoted = frozenset()
            return self._demoted
        of_tier = {p.name: p.spec.tier for p in self.snapshot.policy_set.projects}
        lost = self.lost_workloads(spec.risk.lost_below)
        demotable = {
            key: judged.chance
            for key, judged in lost.items()
            if of_tier.get(judged.project) in tiers
        }
        # Only the demotable workloads' creation times are read: their projects hold them.
        created = {
            (w.namespace, w.name): w.created
            for project in {lost[key].project for key in demotable}
            for w in self.by_project.get(project, ())
        }
        self._demoted = demoted(
            demotable,
            created,
            now=self.snapshot.now,
            max_wait_seconds=spec.risk.lost_max_wait_seconds,
        )
        return self._demoted

    def spot_capacity(self, project: str) -> Capacity | None:
        """The project's capacity under the current split (its pools' spot figures)."""
        known = self.snapshot.policy_set.project(project)
        return self._capacity(known) if known is not None else None

    def pending_gpus(self) -> dict[str, int]:
        return {
            name: sum(w.gpus for w in workloads if w.pending)
            for name, workloads in self.by_project.items()
        }


def deadline_workloads(model: RiskModel, report: DeadlineReport) -> list[WorkloadView]:
    """The unfinished workloads counting toward a deadline (for priority boosts)."""
    project = model.snapshot.policy_set.project(report.project)
    assert project is not None
    deadline = next(d for d in project.spec.deadlines if d.name == report.deadline)
    return counting_toward(model.by_project[report.project], deadline)


__all__ = [
    "CARRY_MAX_AGE_SECONDS",
    "Carried",
    "DeadlineReport",
    "LostWorkload",
    "RiskModel",
    "Snapshot",
    "counting_toward",
    "cutoff",
    "deadline_workloads",
    "project_capacity",
    "project_workloads",
]
