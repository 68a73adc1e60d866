"""A discrete-event replay of a job trace through models of Kueue and Karpenter.

What is modelled, and how (the rest of Kueue and Karpenter is out of scope):
- **Kueue admission.** One ClusterQueue per project with the quota the renderer gives it per
  flavor, flavors tried in their ClusterQueue order (spot first where allowed). A workload is
  admitted on the first flavor where it fits its queue's nominal quota or, sharing capacity,
  borrows the cohort's unused quota within its borrowing limit. Otherwise it may preempt: within
  its queue, lower-priority workloads (tiers with LowerPriority or Any); across queues, lower
  (LowerPriority) or any (Any) workloads that borrow, when it would fit its own nominal quota.
  Pending workloads are tried by priority, then age (best-effort FIFO). One cohort spans all
  queues; tier reservations count toward it; lending limits are not modelled.
- **Karpenter capacity.** Nodes per pool and capacity type of `gpusPerNode` GPUs, launched for
  admitted workloads waiting for room, never beyond the NodePool GPU limit, ready after the
  pool's provisioning latency. A spot launch fails with probability 1 - spotAvailability and
  is retried after a minute. Each spot node is reclaimed at a seeded exponential time (rate
  `spotInterruptionsPerHour`): its workloads lose the work since their last checkpoint and wait
  for room again. Empty nodes are removed after ten minutes. Nodes cost their capacity type's
  price per GPU-hour from launch to removal.
- **The mix.** The policy run calls the controller's own decision code (`decide_capacity`,
  the same function `quartermaster run` uses) on a virtual clock; baselines set the mix by a
  fixed fraction or by reacting to queue depth. Per-job deadlines become, per project, up to
  4 deadline groups (6-hour bins, each due at its earliest job's deadline), and each estimate
  uses 100 samples and a project's first 32 queued workloads: the bounds that keep a decision
  pass to milliseconds over months of trace.
Every random draw comes from generators seeded by the run's seed, so a seed gives the same
result byte for byte.
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import numpy as np

from controller import names
from controller.api.policy_set import PolicySet
from controller.api.types import Deadline, Preemption, TrainingProject
from controller.decide.mix import PoolState
from controller.decide.plan import History, decide_capacity
from controller.render.capacity import PoolTarget, pool_demands, spot_allowed
from controller.render.desired import Rendered, render
from controller.risk.workloads import WorkloadView
from controller.sim.model import FlavorGpus, JobOutcome, RunResult, Sample, SimJob

SPOT, ON_DEMAND = names.SPOT, names.ON_DEMAND
CONSOLIDATE_AFTER = 600.0
SPOT_RETRY = 60.0
DEADLINE_BIN = 6 * 3600.0
MAX_DEADLINES = 4
SIM_SAMPLES = 100
SIM_MAX_JOBS = 32
PREEMPTION_ATTEMPTS = 8

Flavor = tuple[str, str]
"""(pool, capacity type)."""


@dataclass(frozen=True)
class RunSpec:
    """How one replay sets the mix."""

    name: str
    kind: str
    """"policy" (the decision code), "static" (a fixed on-demand fraction), "reactive"."""
    on_demand_fraction: float = 0.0
    decision_interval: float = 900.0
    sample_interval: float = 3600.0


BASELINES: dict[str, RunSpec] = {
    "on-demand-only": RunSpec("on-demand-only", "static", on_demand_fraction=1.0),
    "all-spot": RunSpec("all-spot", "static", on_demand_fraction=0.0),
    "fixed-80-20": RunSpec("fixed-80-20", "static", on_demand_fraction=0.2),
    "reactive": RunSpec("reactive", "reactive"),
}
POLICY = RunSpec("policy", "policy")


@dataclass
class _Job:
    spec: SimJob
    progress: float = 0.0
    """Seconds of work done, as of `segment_start` when running."""
    state: str = "future"  # future, pending, admitted, running, done
    flavor: Flavor | None = None
    borrowed: bool = False
    segment_start: float = 0.0
    nodes: dict[int, int] = field(default_factory=dict)
    """node id -> GPUs held on it."""
    epoch: int = 0
    first_start: float | None = None
    finish: float | None = None
    used: float = 0.0
    lost: float = 0.0
    interruptions: int = 0
    preemptions: int = 0
    admitted_at: float = 0.0

    @property
    def gpus(self) -> int:
        return self.spec.gpus

    def checkpointed(self, at: float) -> float:
        """Work kept if stopped at `at`: up to the last checkpoint."""
        done = self.progress + (at - self.segment_start if self.state == "running" else 0.0)
        step = self.spec.checkpoint_seconds
        return math.floor(done / step) * step if step > 0 else 0.0


@dataclass
class _Node:
    id: int
    flavor: Flavor
    gpus: int
    launched: float
    ready: bool = False
    free: int = 0
    jobs: set[int] = field(default_factory=set)
    idle_since: float | None = None
    gone: bool = False


@dataclass
class _Queue:
    project: TrainingProject
    flavors: list[Flavor]
    nominal: dict[Flavor, int]
    borrow: dict[Flavor, int | None]
    share: bool
    preemption: Preemption
    usage: dict[Flavor, int] = field(default_factory=dict)


class Replay:
    """One run of one trace under one way of setting the mix."""

    def __init__(
        self,
        policy_set: PolicySet,
        jobs: Sequence[SimJob],
        spec: RunSpec,
        *,
        seed: int = 0,
        progress: Callable[[float], None] | None = None,
    ) -> None:
        self.policy_set = policy_set
        self.spec = spec
        self.seed = seed
        self.progress = progress
        self.rng = np.random.default_rng(seed)
        self.jobs = [_Job(j) for j in sorted(jobs, key=lambda j: (j.submit, j.job_id))]
        self.events: list[tuple[float, int, str, int, int]] = []
        self._seq = 0
        self.now = 0.0
        self.nodes: dict[int, _Node] = {}
        self._next_node = 0
        self.pools = {p.name: p for p in policy_set.policy.spec.pools}
        self.tiers = {t.name: t for t in policy_set.policy.spec.tiers}
        self.states: dict[str, PoolState] = {}
        self.limits: dict[Flavor, int] = {}
        self.queues: dict[str, _Queue] = {}
        self.cohort_total: dict[Flavor, int] = {}
        self.cohort_usage: dict[Flavor, int] = {}
        self.pending: list[tuple[int, float, int]] = []
        """(-priority, submit, index), kept sorted: Kueue's order of trying them."""
        self.arrived: list[int] = []
        self.freed = True
        """Quota or capacity came free since the last admission pass: try every pending job."""
        self.active: dict[Flavor, set[int]] = {}
        """Admitted or running jobs by flavor, for preemption."""
        self.waiting: set[int] = set()
        """Admitted jobs waiting for room on nodes."""
        self.dirty = True
        self.mix_changes = 0
        self.decisions = 0
        self.cost: dict[str, float] = {SPOT: 0.0, ON_DEMAND: 0.0}
        self.gpu_hours: dict[str, float] = {SPOT: 0.0, ON_DEMAND: 0.0}
        self.timeline: list[Sample] = []
        self._last_mix: tuple[int, ...] = ()
        self._reactive_on_demand: dict[str, int] = {}
        self._quiet_intervals = 0
        self._retry_pending: set[Flavor] = set()
        self.activity = 0
        """Counts starts, finishes and arrivals: a world that did not move needs no new pass."""
        self.last_activity_time = 0.0
        self._decided_at_activity = -1
        self.not_submitted = len(self.jobs)
        self.running = 0
        """Jobs running now, kept as they start and stop: the end-of-run check reads it."""

    # ------------------------------------------------------------------ events
    def _push(self, at: float, kind: str, a: int = 0, b: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self.events, (at, self._seq, kind, a, b))

    # ------------------------------------------------------------------ the mix
    def _apply_render(self, rendered: Rendered) -> None:
        policy = self.policy_set.policy
        reserved: dict[Flavor, int] = {}
        for tier in policy.spec.tiers:
            for r in tier.reserved:
                key = (r.pool, ON_DEMAND)
                reserved[key] = reserved.get(key, 0) + r.gpus
        old = self.queues
        self.queues = {}
        total: dict[Flavor, int] = dict(reserved)
        for project in self.policy_set.projects:
            tier = self.tiers[project.spec.tier]
            spot_ok = spot_allowed(self.policy_set, project)
            flavors: list[Flavor] = []
            nominal: dict[Flavor, int] = {}
            borrow: dict[Flavor, int | None] = {}
            for quota in project.spec.quotas:
                split = rendered.quotas[(project.name, quota.pool)]
                if spot_ok:
                    flavors.append((quota.pool, SPOT))
                    nominal[(quota.pool, SPOT)] = split.spot_gpus
                    borrow[(quota.pool, SPOT)] = split.spot_borrowing_limit
                flavors.append((quota.pool, ON_DEMAND))
                nominal[(quota.pool, ON_DEMAND)] = split.on_demand_gpus
                borrow[(quota.pool, ON_DEMAND)] = split.on_demand_borrowing_limit
            if project.spec.share_capacity:
                # Only queues in the cohort lend their unused quota to it.
                for key, value in nominal.items():
                    total[key] = total.get(key, 0) + value
            previous = old.get(project.name)
            self.queues[project.name] = _Queue(
                project=project,
                flavors=flavors,
                nominal=nominal,
                borrow=borrow,
                share=project.spec.share_capacity,
                preemption=tier.preemption,
                usage=dict(previous.usage) if previous else {},
            )
        self.cohort_total = total
        self.freed = True
        self.limits = {}
        for mix in rendered.mix:
            self.limits[(mix.pool, ON_DEMAND)] = mix.on_demand_gpus
            self.limits[(mix.pool, SPOT)] = mix.spot_gpus
        signature = tuple(m.on_demand_gpus for m in rendered.mix)
        if self._last_mix and signature != self._last_mix:
            self.mix_changes += 1
        self._last_mix = signature
        self.dirty = True

    def _static_mix(self, fraction: float) -> Rendered:
        demands = pool_demands(self.policy_set)
        # Whole nodes: a fraction of a node's GPUs on-demand could never be launched.
        targets = {
            pool: PoolTarget(
                round(demand.total_gpus * fraction / self.pools[pool].gpus_per_node)
                * self.pools[pool].gpus_per_node
            )
            for pool, demand in demands.items()
        }
        return render(self.policy_set, targets=targets)

    def _decide(self) -> None:
        self.decisions += 1
        if self.spec.kind == "static":
            return
        if self.spec.kind == "reactive":
            self._react()
            return
        steady = all(s.raise_since is None and not s.assignments for s in self.states.values())
        if steady and not self.pending and self.activity == self._decided_at_activity:
            return  # nothing queued, moved or held since the last pass: it would hold again
        self._decided_at_activity = self.activity
        policy_set, views = self._decision_view()
        if not any(v.deadline for v in views) and steady:
            return  # nothing with a deadline and nothing held: the decision code would hold
        mixed = decide_capacity(
            policy_set,
            states=self.states,
            workloads=views,
            node_claims=(),
            history=History(available=True),
            now=self.now,
            seed=self.seed,
            max_jobs=SIM_MAX_JOBS,
        )
        self.states = {d.pool: d.state for d in mixed.decisions}
        self._apply_render(mixed.rendered)

    def _react(self) -> None:
        """Reactive step scaling on queue depth: one node's worth more on-demand GPUs while
        pending work exceeds a tenth of the pool, one less after two quiet intervals."""
        pending = sum(self.jobs[e[2]].gpus for e in self.pending)
        demands = pool_demands(self.policy_set)
        changed = False
        for pool, demand in demands.items():
            step = self.pools[pool].gpus_per_node
            current = self._reactive_on_demand.get(pool, self.pools[pool].on_demand.floor_gpus)
            if pending > 0.1 * demand.total_gpus:
                new = min(current + step, demand.total_gpus)
                self._quiet_intervals = 0
            elif pending == 0:
                self._quiet_intervals += 1
                new = max(current - step, 0) if self._quiet_intervals >= 2 else current
            else:
                new = current
            if new != current:
                changed = True
            self._reactive_on_demand[pool] = new
        if changed or not self._last_mix:
            self._apply_render(render(self.policy_set, on_demand_gpus=self._reactive_on_demand))

    def _decision_view(self) -> tuple[PolicySet, list[WorkloadView]]:
        """The world as the controller would see it: Workloads and per-project deadlines."""
        groups: dict[str, dict[str, float]] = {}
        views: list[WorkloadView] = []
        namespace = {p.name: p.spec.namespaces[0] for p in self.policy_set.projects}
        for job in self.jobs:
            if job.state not in ("pending", "admitted", "running"):
                continue
            spec = job.spec
            label: str | None = None
            if spec.deadline is not None:
                label = f"d{int(spec.deadline // DEADLINE_BIN)}"
                bins = groups.setdefault(spec.project, {})
                bins[label] = min(bins.get(label, spec.deadline), spec.deadline)
            running = job.state == "running"
            views.append(
                WorkloadView(
                    namespace=namespace[spec.project],
                    name=spec.job_id,
                    queue=spec.project,
                    priority=spec.priority,
                    gpus=spec.gpus,
                    created=spec.submit,
                    admitted_at=job.segment_start if running else None,
                    expected_duration=spec.expected_duration,
                    checkpoint_interval=spec.checkpoint_seconds,
                    deadline=label,
                    past_execution_seconds=job.progress if running else job.checkpointed(self.now),
                )
            )
        projects = []
        for project in self.policy_set.projects:
            ordered = sorted(groups.get(project.name, {}).items(), key=lambda kv: kv[1])
            confidence = (
                project.spec.deadlines[0].target_confidence if project.spec.deadlines else 0.95
            )
            deadlines = tuple(
                Deadline(
                    name=name, at=datetime.fromtimestamp(at, UTC), target_confidence=confidence
                )
                for name, at in ordered[:MAX_DEADLINES]
            )
            projects.append(replace(project, spec=replace(project.spec, deadlines=deadlines)))
        policy = self.policy_set.policy
        risk = replace(policy.spec.risk, samples=min(policy.spec.risk.samples, SIM_SAMPLES))
        policy = replace(policy, spec=replace(policy.spec, risk=risk))
        return PolicySet(policy=policy, projects=tuple(projects)), views

    # ------------------------------------------------------------------ Kueue
    def _enqueue(self, index: int) -> None:
        job = self.jobs[index]
        if job.state == "future":
            self.not_submitted -= 1
        self._touch()
        job.state = "pending"
        bisect.insort(self.pending, (-job.spec.priority, job.spec.submit, index))
        self.arrived.append(index)
        self.dirty = True

    def _fits(self, queue: _Queue, flavor: Flavor, gpus: int) -> tuple[bool, bool]:
        """(fits, borrowing) on a flavor, by nominal quota or the cohort's unused quota."""
        used = queue.usage.get(flavor, 0)
        nominal = queue.nominal.get(flavor, 0)
        if not queue.share:
            return used + gpus <= nominal, False
        cohort_free = self.cohort_total.get(flavor, 0) - self.cohort_usage.get(flavor, 0)
        if used + gpus <= nominal and gpus <= cohort_free:
            return True, False
        limit = queue.borrow.get(flavor)
        ceiling = nominal + limit if limit is not None else math.inf
        return (used + gpus <= ceiling and gpus <= cohort_free), True

    def _reserve(self, index: int, flavor: Flavor, borrowed: bool) -> None:
        job = self.jobs[index]
        queue = self.queues[job.spec.project]
        queue.usage[flavor] = queue.usage.get(flavor, 0) + job.gpus
        if queue.share:
            self.cohort_usage[flavor] = self.cohort_usage.get(flavor, 0) + job.gpus
        job.flavor, job.borrowed, job.state = flavor, borrowed, "admitted"
        job.admitted_at = self.now
        self.waiting.add(index)
        self.active.setdefault(flavor, set()).add(index)

    def _release(self, index: int) -> None:
        job = self.jobs[index]
        if job.flavor is None:
            return
        queue = self.queues[job.spec.project]
        queue.usage[job.flavor] = queue.usage.get(job.flavor, 0) - job.gpus
        if queue.share:
            self.cohort_usage[job.flavor] = self.cohort_usage.get(job.flavor, 0) - job.gpus
        self.active.get(job.flavor, set()).discard(index)
        job.flavor = None
        self.waiting.discard(index)
        self.freed = True

    def _stop(self, index: int, *, reason: str) -> None:
        """Stop a running or admitted job, keeping work up to its last checkpoint."""
        job = self.jobs[index]
        if job.state == "running":
            self.running -= 1
            kept = job.checkpointed(self.now)
            ran = self.now - job.segment_start
            job.used += job.gpus * ran
            lost = job.progress + ran - kept
            job.lost += job.gpus * lost
            job.progress = kept
            self._free_nodes(index)
        job.epoch += 1
        if reason == "preempted":
            job.preemptions += 1
            self._release(index)
            self._enqueue(index)
        else:
            job.interruptions += 1
            job.state = "admitted"
            self.waiting.add(index)
        self.dirty = True

    def _preempt_for(self, index: int, queue: _Queue) -> bool:
        job = self.jobs[index]
        if queue.preemption is Preemption.NEVER:
            return False
        for flavor in queue.flavors:
            # Within the queue: lower-priority workloads on this flavor, newest first.
            active = self.active.get(flavor, set())
            victims = (
                sorted(
                    (
                        i
                        for i in active
                        if self.jobs[i].spec.project == job.spec.project
                        and self.jobs[i].spec.priority < job.spec.priority
                    ),
                    key=lambda i: (self.jobs[i].spec.priority, -self.jobs[i].admitted_at),
                )
                if queue.usage.get(flavor, 0) + job.gpus > queue.nominal.get(flavor, 0)
                else []
            )
            # Across queues: reclaim what others borrow, when we fit our own nominal quota.
            if queue.usage.get(flavor, 0) + job.gpus <= queue.nominal.get(flavor, 0):
                victims = sorted(
                    (
                        i
                        for i in active
                        if self.jobs[i].borrowed
                        and self.jobs[i].spec.project != job.spec.project
                        and (
                            queue.preemption is Preemption.ANY
                            or self.jobs[i].spec.priority < job.spec.priority
                        )
                    ),
                    key=lambda i: (self.jobs[i].spec.priority, -self.jobs[i].admitted_at),
                )
            freed = 0
            chosen = []
            # A queue outside the cohort only has its own quota to make room in.
            needed = (
                job.gpus
                - max(self.cohort_total.get(flavor, 0) - self.cohort_usage.get(flavor, 0), 0)
                if queue.share
                else 0
            )
            if queue.usage.get(flavor, 0) + job.gpus > queue.nominal.get(flavor, 0):
                needed = max(
                    needed, queue.usage.get(flavor, 0) + job.gpus - queue.nominal.get(flavor, 0)
                )
            for victim in victims:
                if freed >= needed:
                    break
                chosen.append(victim)
                freed += self.jobs[victim].gpus
            # Like Kueue, give back the victims the last one made unnecessary.
            for victim in reversed(chosen[:-1]):
                if freed - self.jobs[victim].gpus >= needed:
                    chosen.remove(victim)
                    freed -= self.jobs[victim].gpus
            if chosen and freed >= needed:
                for victim in chosen:
                    self._stop(victim, reason="preempted")
                fits, borrowed = self._fits(queue, flavor, job.gpus)
                if fits:
                    self._reserve(index, flavor, borrowed)
                    return True
        return False

    def _admit(self) -> None:
        """One admission pass, in priority then age order (best-effort FIFO).

        When nothing came free since the last pass only new arrivals can fit, so only they are
        tried. A full pass stops once no flavor has room for the smallest job left. Preemption
        is tried for at most `PREEMPTION_ATTEMPTS` jobs a pass, the highest first.
        """
        if self.freed:
            candidates = [entry[2] for entry in self.pending]
        else:
            candidates = sorted(
                set(self.arrived),
                key=lambda i: (-self.jobs[i].spec.priority, self.jobs[i].spec.submit, i),
            )
        self.freed = False
        self.arrived = []
        attempts = PREEMPTION_ATTEMPTS
        admitted: set[int] = set()
        for index in candidates:
            job = self.jobs[index]
            if job.state != "pending":
                continue
            queue = self.queues[job.spec.project]
            for flavor in queue.flavors:
                fits, borrowed = self._fits(queue, flavor, job.gpus)
                if fits:
                    self._reserve(index, flavor, borrowed)
                    admitted.add(index)
                    break
            else:
                if attempts > 0 and queue.preemption is not Preemption.NEVER:
                    attempts -= 1
                    if self._preempt_for(index, queue):
                        admitted.add(index)
                        continue
                room = max(
                    (
                        self.cohort_total.get(f, 0) - self.cohort_usage.get(f, 0)
                        for f in self.cohort_total
                    ),
                    default=0,
                )
                if room < 1 and attempts == 0:
                    break
        if admitted:
            self.pending = [e for e in self.pending if self.jobs[e[2]].state == "pending"]

    # ------------------------------------------------------------------ Karpenter
    def _place(self) -> None:
        by_flavor: dict[Flavor, list[int]] = {}
        for index in sorted(self.waiting, key=lambda i: (self.jobs[i].admitted_at, i)):
            flavor = self.jobs[index].flavor
            assert flavor is not None
            by_flavor.setdefault(flavor, []).append(index)
        for flavor, indexes in by_flavor.items():
            ready = sorted(
                (n for n in self.nodes.values() if n.flavor == flavor and n.ready and not n.gone),
                key=lambda n: n.id,
            )
            short = 0
            for index in indexes:
                job = self.jobs[index]
                free = sum(n.free for n in ready)
                if free < job.gpus:
                    # Later jobs queue behind this one; count only what free GPUs lack.
                    short += job.gpus - free if short == 0 else job.gpus
                    continue
                need = job.gpus
                for node in ready:
                    if need == 0:
                        break
                    take = min(node.free, need)
                    if take:
                        node.free -= take
                        node.jobs.add(index)
                        node.idle_since = None
                        job.nodes[node.id] = job.nodes.get(node.id, 0) + take
                        need -= take
                self._start(index)
            if short:
                self._launch(flavor, short)

    def _launch(self, flavor: Flavor, short: int) -> None:
        pool = self.pools[flavor[0]]
        per_node = pool.gpus_per_node
        coming = sum(
            n.gpus for n in self.nodes.values() if n.flavor == flavor and not n.ready and not n.gone
        )
        have = sum(n.gpus for n in self.nodes.values() if n.flavor == flavor and not n.gone)
        wanted = max(short - coming, 0)
        room = self.limits.get(flavor, 0) - have
        count = min(math.ceil(wanted / per_node), max(room, 0) // per_node)
        for _ in range(count):
            if flavor[1] == SPOT and self.rng.random() > pool.spot_availability:
                if flavor not in self._retry_pending:
                    self._retry_pending.add(flavor)
                    self._push(self.now + SPOT_RETRY, "retry")
                break
            node = _Node(self._next_node, flavor, per_node, launched=self.now)
            self._next_node += 1
            self.nodes[node.id] = node
            self._push(self.now + pool.provisioning_latency_seconds, "ready", node.id)

    def _touch(self) -> None:
        self.activity += 1
        self.last_activity_time = self.now

    def _start(self, index: int) -> None:
        self._touch()
        self.running += 1
        job = self.jobs[index]
        self.waiting.discard(index)
        job.state = "running"
        job.segment_start = self.now
        if job.first_start is None:
            job.first_start = self.now
        job.epoch += 1
        self._push(self.now + job.spec.duration - job.progress, "finish", index, job.epoch)

    def _free_nodes(self, index: int) -> None:
        job = self.jobs[index]
        for node_id, gpus in job.nodes.items():
            node = self.nodes.get(node_id)
            if node is None or node.gone:
                continue
            node.free += gpus
            node.jobs.discard(index)
            if not node.jobs:
                node.idle_since = self.now
                self._push(self.now + CONSOLIDATE_AFTER, "idle", node.id)
        job.nodes = {}

    def _remove(self, node: _Node) -> None:
        node.gone = True
        hours = (self.now - node.launched) / 3600.0
        price = self.pools[node.flavor[0]].prices
        per_gpu = (
            price.spot_per_gpu_hour if node.flavor[1] == SPOT else price.on_demand_per_gpu_hour
        )
        self.cost[node.flavor[1]] += hours * node.gpus * per_gpu
        self.gpu_hours[node.flavor[1]] += hours * node.gpus
        del self.nodes[node.id]

    # ------------------------------------------------------------------ handlers
    def _handle(self, kind: str, a: int, b: int) -> None:
        if kind == "submit":
            self._enqueue(a)
        elif kind == "finish":
            job = self.jobs[a]
            if job.state != "running" or job.epoch != b:
                return
            job.used += job.gpus * (self.now - job.segment_start)
            job.progress = job.spec.duration
            job.state, job.finish = "done", self.now
            self.running -= 1
            self._touch()
            self._free_nodes(a)
            self._release(a)
            self.dirty = True
        elif kind == "ready":
            node = self.nodes.get(a)
            if node is None:
                return
            node.ready, node.free, node.idle_since = True, node.gpus, self.now
            self._push(self.now + CONSOLIDATE_AFTER, "idle", node.id)
            if node.flavor[1] == SPOT:
                rate = self.pools[node.flavor[0]].spot_interruptions_per_hour
                if rate > 0:
                    self._push(self.now + self.rng.exponential(3600.0 / rate), "interrupt", node.id)
            self.dirty = True
        elif kind == "interrupt":
            node = self.nodes.get(a)
            if node is None or node.gone:
                return
            for index in sorted(node.jobs):
                self._stop(index, reason="interrupted")
            self._remove(node)
        elif kind == "idle":
            node = self.nodes.get(a)
            if (
                node
                and not node.gone
                and not node.jobs
                and node.idle_since is not None
                and (self.now - node.idle_since >= CONSOLIDATE_AFTER - 1e-6)
            ):
                self._remove(node)
        elif kind == "retry":
            self._retry_pending.clear()
            self.dirty = True
        elif kind == "decide":
            self._decide()
            self._push(self.now + self.spec.decision_interval, "decide")
        elif kind == "sample":
            self._sample()
            self._push(self.now + self.spec.sample_interval, "sample")

    def _sample(self) -> None:
        in_use = {SPOT: 0.0, ON_DEMAND: 0.0}
        provisioned = {SPOT: 0.0, ON_DEMAND: 0.0}
        flavors: dict[Flavor, list[float]] = {}
        for node in self.nodes.values():
            provisioned[node.flavor[1]] += node.gpus
            in_use[node.flavor[1]] += node.gpus - node.free if node.ready else 0
            tally = flavors.setdefault(node.flavor, [0.0, 0.0, 0.0])  # in use, idle, launching
            if node.ready:
                tally[0] += node.gpus - node.free
                tally[1] += node.free
            else:
                tally[2] += node.gpus
        self.timeline.append(
            Sample(
                time=self.now,
                gpus_in_use=in_use,
                gpus_provisioned=provisioned,
                on_demand_target=float(
                    sum(v for (_, ct), v in self.limits.items() if ct == ON_DEMAND)
                ),
                pending_jobs=len(self.pending),
                by_flavor={flavor: FlavorGpus(*tally) for flavor, tally in flavors.items()},
                on_demand_target_by_pool={
                    pool: float(v) for (pool, ct), v in self.limits.items() if ct == ON_DEMAND
                },
            )
        )

    # ------------------------------------------------------------------ run
    def run(self) -> RunResult:
        started = time.monotonic()
        if self.spec.kind == "static":
            self._apply_render(self._static_mix(self.spec.on_demand_fraction))
        elif self.spec.kind == "reactive":
            self._react()
        else:
            self._apply_render(render(self.policy_set))
        for index, job in enumerate(self.jobs):
            self._push(job.spec.submit, "submit", index)
        end = max((j.spec.submit for j in self.jobs), default=0.0)
        self._push(0.0, "decide")
        self._push(0.0, "sample")
        horizon = end + max((j.spec.duration for j in self.jobs), default=0.0) * 3 + 86400
        reported = -1.0
        while self.events:
            at, _, kind, a, b = heapq.heappop(self.events)
            if at > horizon or (kind in ("decide", "sample") and self._stalled(at)):
                break
            self.now = at
            self._handle(kind, a, b)
            if self.dirty and (not self.events or self.events[0][0] > self.now):
                self.dirty = False
                self._admit()
                self._place()
            if self.progress and end > 0 and at - reported > end / 200:
                reported = at
                self.progress(min(at / end, 1.0))
        for node in list(self.nodes.values()):
            self._remove(node)
        return self._result(time.monotonic() - started)

    def _stalled(self, at: float) -> bool:
        """Everything has run, or for a day nothing has run, waited for nodes or arrived.

        Jobs still pending then cannot be admitted (wider than any quota): they are reported
        as unfinished rather than replayed for months.
        """
        if self.not_submitted or self.waiting:
            return False
        if not self.pending and not self.running:
            return True
        return not self.running and at - self.last_activity_time > 86400

    def _result(self, wall: float) -> RunResult:
        outcomes = [
            JobOutcome(
                job_id=j.spec.job_id,
                project=j.spec.project,
                tier=j.spec.tier,
                gpus=j.gpus,
                submit=j.spec.submit,
                first_start=j.first_start,
                finish=j.finish,
                deadline=j.spec.deadline,
                work_gpu_seconds=j.gpus * j.spec.duration,
                used_gpu_seconds=j.used,
                lost_gpu_seconds=j.lost,
                interruptions=j.interruptions,
                preemptions=j.preemptions,
            )
            for j in self.jobs
        ]
        return RunResult(
            name=self.spec.name,
            outcomes=outcomes,
            timeline=self.timeline,
            cost_by_capacity_type=dict(self.cost),
            gpu_hours_by_capacity_type=dict(self.gpu_hours),
            mix_changes=self.mix_changes,
            decisions=self.decisions,
            wall_seconds=wall,
            unfinished=sum(1 for j in self.jobs if j.state != "done"),
        )


def replay(
    policy_set: PolicySet,
    jobs: Sequence[SimJob],
    spec: RunSpec,
    *,
    seed: int = 0,
    progress: Callable[[float], None] | None = None,
) -> RunResult:
    return Replay(policy_set, jobs, spec, seed=seed, progress=progress).run()
