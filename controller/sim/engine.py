"""A discrete-event replay of a job trace through the controller, Kueue and Karpenter.

The controller is the real one: every pass of the policy run builds an `Observation` of the
replayed cluster and calls `plan_capacity`, the function `quartermaster run` calls, carrying
its pool states from pass to pass as the controller carries them in the policy's status, and
the last pass's estimates (`Carry`) as the controller's loop hands them to the next. What
it returns is applied as the controller's writes would be: the rendered ClusterQueues and
Cohorts become the quotas of the Kueue model (`controller.sim.kueue`), the rendered NodePools
the limits of the Karpenter model (`controller.sim.karpenter`), the priority boosts the
workloads' annotations, and the warm-pool targets the placeholders' scale (KEDA's part).

Baselines go through the same renderer, the same shift rule (a side grows only by what the
other has freed, `controller.decide.shift`), and the same models; they only choose the
on-demand GPUs differently: a fixed fraction of the pool (`static:F`), or one node more while
pending GPUs exceed a share of the pool and one less after two quiet intervals
(`reactive:T`). They set no priority boosts and keep no warm pool: that is what the
controller adds.

Passes: the policy run passes every `decision_interval` (15 minutes) of replayed time, and
applies a new workload's priority boost when it arrives, as the controller's watch-driven pass
would within a second (the boost of a workload depends on nothing but its own deadline and
runtime: `controller.decide.boost`). Traces carry per-job deadlines; the replay gives each
project up to four deadlines, one per 6-hour bin of its jobs' deadlines (due at the bin's
earliest), and each estimate uses 100 samples and a project's first 32 queued workloads: the
bounds that keep a pass to milliseconds over months of trace.

Lanes (`controller.decide.lanes`): a new deadline workload that wants on-demand gets its lane
when it is created, before Kueue can admit it, as the controller's admission webhook gives it
(from its own deadline and declared runtime, the last pass's spot outlook and on-demand room),
and a pass runs `LANE_PASS_SECONDS` later, as the Workload's creation wakes one, to hold
on-demand quota for the lanes wanted and move waiting workloads into the room. A pending
workload's lane is its pod sets' node selector in the Kueue model, which honours it as Kueue
does. Karpenter's capacity errors and spot launches, each with its zones (the fake market's
shortages, per zone), feed the shortage the lanes weigh (`controller.risk.shortage`), as the
controller reads them from Events and NodeClaims. The
`policy-fifo` and `policy-no-lanes` runs are the policy with its deadline order or its lanes
off; `policy-raw` decides the mix on the model's raw risk rather than the risk recalibrated
from the deadlines judged so far.

A window's replay may start with a lead-in (`scored_from`): the jobs of the days before it run
first, so that the window opens on queues, nodes and a policy state already in motion rather
than an empty cluster; the result holds only the window's jobs, in its time, and costs, mix
changes, samples and estimates count from its start.

Every random draw comes from generators seeded by the run's seed, so a seed gives the same
result byte for byte.
"""

from __future__ import annotations

import heapq
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property

import numpy as np

from controller import names
from controller.api.policy_set import PolicySet
from controller.api.types import Deadline
from controller.capacity import FlavorQuota, PoolTarget, pool_demands
from controller.decide.boost import LEVELS, boost_step, urgency_level
from controller.decide.lanes import Lane, LaneInput, SpotOutlook, choose_lane
from controller.decide.mix import PoolState, initial_state
from controller.decide.observation import Carry, History, Observation
from controller.decide.plan import CapacityPlan, plan_capacity
from controller.decide.shift import Shift, held_by_side, limit_shifts
from controller.render.desired import Rendered, render
from controller.render.kueue import KUEUE_DEFAULT_WHEN_CAN_BORROW, OWN_QUOTA_FIRST
from controller.risk.learning import FinishedRun, RuntimeLearner
from controller.risk.model import SIGMA_ANNOTATED
from controller.risk.pools import NodeClaimView
from controller.risk.shortage import ShortageState, expected_wait, launched, reported
from controller.risk.urgency import chance_to_finish
from controller.risk.workloads import WorkloadView
from controller.sim import karpenter as karpenter_model
from controller.sim import kueue as kueue_model
from controller.sim.attribution import attribute
from controller.sim.judging import OnlineCalibration
from controller.sim.model import (
    INTERRUPTED,
    PREEMPTED,
    WAITED_FOR_NODE,
    WAITED_FOR_QUOTA,
    FlavorGpus,
    JobOutcome,
    RiskRecord,
    RunResult,
    Sample,
    SimJob,
)
from controller.sim.tables import OutcomeTable, RiskTable

SPOT, ON_DEMAND = names.SPOT, names.ON_DEMAND
DEADLINE_BIN = 6 * 3600.0
MAX_DEADLINES = 4
SIM_SAMPLES = 100
SIM_MAX_JOBS = 32
STALL_SECONDS = 86400.0

Flavor = tuple[str, str]
"""(pool, capacity type)."""
_Specs = tuple[
    list[kueue_model.QueueSpec], list[kueue_model.CohortSpec], list[karpenter_model.NodePoolSpec]
]
"""What the Kueue and Karpenter models are configured with, read from a render."""


@dataclass(frozen=True)
class RunSpec:
    """How one replay sets the mix."""

    name: str
    kind: str
    """"policy" (the controller), "static" (a fixed on-demand fraction), "reactive"."""
    on_demand_fraction: float = 0.0
    threshold: float = 0.1
    """Reactive: step on-demand up while pending GPUs exceed this share of the pool."""
    decision_interval: float = 900.0
    sample_interval: float = 3600.0
    lanes: bool = True
    """The policy: pending deadline workloads get per-workload lanes."""
    deadline_order: bool = True
    """The policy: waiting work is ordered by deadline (the policy's priority boosts)."""
    learn_runtimes: bool = True
    """The policy: runtimes are learned from the jobs that finished (the risk model samples
    them only where the policy's `risk.learnRuntimes` says so)."""
    calibrated: bool = True
    """The policy: the mix is decided on the risk recalibrated from the deadlines judged so far
    (as the controller decides); off, on the model's raw risk."""
    pods_ready: bool = False
    """Kueue reports `PodsReady` (`waitForPodsReady` enabled, not blocking admission, with a
    timeout longer than the waits): the controller sees admitted work whose pods wait for a
    node, and its lanes may move deadline work stranded on spot. Off: Kueue's default, where
    admitted work counts as running from its admission."""


BASELINES: dict[str, RunSpec] = {
    "on-demand-only": RunSpec("on-demand-only", "static", on_demand_fraction=1.0),
    "all-spot": RunSpec("all-spot", "static", on_demand_fraction=0.0),
    "fixed-80-20": RunSpec("fixed-80-20", "static", on_demand_fraction=0.2),
    "reactive": RunSpec("reactive", "reactive", threshold=0.1),
}
POLICY = RunSpec("policy", "policy")
ABLATIONS: dict[str, RunSpec] = {
    "policy-fifo": RunSpec("policy-fifo", "policy", deadline_order=False),
    "policy-no-lanes": RunSpec("policy-no-lanes", "policy", lanes=False),
    "policy-declared-runtimes": RunSpec("policy-declared-runtimes", "policy", learn_runtimes=False),
    "policy-pods-ready": RunSpec("policy-pods-ready", "policy", pods_ready=True),
    "policy-raw": RunSpec("policy-raw", "policy", calibrated=False),
}
"""The policy with one of its levers off, to show what that lever is worth; and
`policy-pods-ready`, on a Kueue that reports PodsReady, where its lanes can move work stranded
on spot."""
LANE_PASS_SECONDS = 5.0
"""How soon after a workload arrives with a lane the controller's pass acts on it: the pass a
Workload's creation wakes (a watch event), within seconds, not the next periodic pass."""
ERROR_INTERVAL_SECONDS = 180.0
"""How often a spot shortage that keeps pods waiting reports an error: Karpenter retries an
offering it found unavailable when its cache of them expires, after three minutes."""


def _error_times(first: float, last: float, *, after: float) -> list[float]:
    """The times of a shortage's errors from `first` to `last` (every
    `ERROR_INTERVAL_SECONDS`, and `last`), those after `after`, in order."""
    if last < first:
        return []
    times = [first] if first > after else []
    step = ERROR_INTERVAL_SECONDS
    n = 1 if after < first else math.floor((after - first) / step) + 1
    while first + n * step < last:
        times.append(first + n * step)
        n += 1
    if last > max(after, first):
        times.append(last)
    return times


_PARAMETRIC = re.compile(r"^(static|reactive):([0-9]*\.?[0-9]+)$")


def parse_run(text: str) -> RunSpec:
    """A baseline by name (`BASELINES`), or `static:F` (on-demand fraction F in [0, 1]) or
    `reactive:T` (the pending share T in (0, 1] that steps on-demand up). Raises ValueError."""
    word = text.strip()
    if word in BASELINES:
        return BASELINES[word]
    if word in ABLATIONS:
        return ABLATIONS[word]
    match = _PARAMETRIC.match(word)
    if match is None:
        raise ValueError(
            f"unknown baseline {text!r}: expected one of {', '.join([*BASELINES, *ABLATIONS])}, "
            "static:F (F in [0, 1]) or reactive:T (T in (0, 1])"
        )
    kind, value = match.group(1), float(match.group(2))
    if kind == "static":
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{text!r}: a static on-demand fraction is in [0, 1]")
        return RunSpec(word, "static", on_demand_fraction=value)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{text!r}: a reactive threshold is in (0, 1]")
    return RunSpec(word, "reactive", threshold=value)


def _run_policy(policy_set: PolicySet, spec: RunSpec) -> PolicySet:
    """The policy a run replays: `policy-fifo` is the policy without its deadline order (no
    priority boosts), so Kueue admits each queue's waiting work by priority and age alone."""
    if spec.kind != "policy" or spec.deadline_order:
        return policy_set
    risk = replace(policy_set.policy.spec.risk, priority_boost=False)
    policy = replace(policy_set.policy, spec=replace(policy_set.policy.spec, risk=risk))
    return replace(policy_set, policy=policy)


@dataclass
class _Job:
    spec: SimJob
    namespace: str
    state: str = "future"  # future, pending, admitted, running, done
    flavor: str | None = None
    progress: float = 0.0
    progress_at_admission: float = 0.0
    """Work kept from earlier admissions when this one began: Kueue's
    `accumulatedPastExecutionTimeSeconds`, what the Workload view adds to the time since its
    admission."""
    """Seconds of work done, as of `segment_start` while running."""
    segment_start: float = 0.0
    admitted_at: float | None = None
    epoch: int = 0
    first_start: float | None = None
    finish: float | None = None
    used: float = 0.0
    lost: float = 0.0
    interruptions: int = 0
    preemptions: int = 0
    delays: dict[str, float] = field(default_factory=dict)
    since: float = 0.0
    after: str | None = None
    """Why it last stopped (interrupted or preempted): later waits count toward that."""
    lane: str | None = None
    """The lane the controller put it in (its pod sets then select that capacity type)."""
    view: tuple[tuple[object, ...], WorkloadView] | None = field(
        default=None, compare=False, repr=False
    )
    """The Workload view a pass last observed, with what it was made from: a pass rebuilds
    only the views of jobs that changed (a pending job's seldom does)."""

    @cached_property
    def label(self) -> str | None:
        """The deadline bin it counts toward, named for the bin."""
        deadline = self.spec.deadline
        return None if deadline is None else f"d{int(deadline // DEADLINE_BIN)}"

    @property
    def gpus(self) -> int:
        return self.spec.gpus

    def checkpointed(self, at: float) -> float:
        """Work kept if stopped at `at`: up to the last checkpoint."""
        done = self.progress + (at - self.segment_start if self.state == "running" else 0.0)
        step = self.spec.checkpoint_seconds
        return math.floor(done / step) * step if step > 0 else 0.0

    def account(self, now: float) -> None:
        """Adds the time since the last change of state to the delay it belongs to."""
        if self.state == "pending":
            bucket = self.after or WAITED_FOR_QUOTA
        elif self.state == "admitted":
            bucket = self.after or WAITED_FOR_NODE
        else:
            bucket = None
        if bucket is not None and now > self.since:
            self.delays[bucket] = self.delays.get(bucket, 0.0) + now - self.since
        self.since = now


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
        scored_from: float = 0.0,
    ) -> None:
        if not (math.isfinite(scored_from) and scored_from >= 0):
            raise ValueError(f"scored_from must be a finite time >= 0, got {scored_from}")
        policy_set = _run_policy(policy_set, spec)
        self.policy_set = policy_set
        self.spec = spec
        self.seed = seed
        self.scored_from = scored_from
        """The window's start: jobs submitted before it are the lead-in, replayed so that the
        window starts on a cluster already running (queues, nodes, the policy's state), and
        scored in nothing; costs, mix changes, passes, samples and estimates count from it."""
        self.progress = progress
        self.rng = np.random.default_rng(seed)
        namespace = {p.name: p.spec.namespaces[0] for p in policy_set.projects}
        self.jobs = [
            _Job(j, namespace[j.project]) for j in sorted(jobs, key=lambda j: (j.submit, j.job_id))
        ]
        self.by_name = {(j.namespace, j.spec.job_id): i for i, j in enumerate(self.jobs)}
        self.events: list[tuple[float, int, str, int, int]] = []
        self._seq = 0
        self.now = 0.0
        self.pools = {p.name: p for p in policy_set.policy.spec.pools}
        self.gpu_resources = {p.gpu_resource for p in policy_set.policy.spec.pools}
        self.karpenter = karpenter_model.Karpenter(
            self.pools, self.rng, self._push_node, market_seed=seed
        )
        self.kueue: kueue_model.Kueue | None = None
        self.flavors: dict[str, Flavor] = {}
        self.states: dict[str, PoolState] = {}
        self.applied: dict[tuple[str, str], FlavorQuota] | None = None
        self._demands = pool_demands(policy_set)
        """What the policy asks of each pool: fixed for the replay, as the policy is."""
        self._last_render: tuple[dict[str, PoolTarget], Rendered] | None = None
        self._last_specs: tuple[Rendered, _Specs] | None = None
        self.on_demand_target: dict[str, int] = {}
        self._shifts: dict[str, Shift] = {}
        self._last_mix: tuple[int, ...] = ()
        self._reactive: dict[str, int] = {}
        self._quiet_intervals = 0
        self.mix_changes = 0
        self.decisions = 0
        self.cost: dict[str, float] = {SPOT: 0.0, ON_DEMAND: 0.0}
        self.gpu_hours: dict[str, float] = {SPOT: 0.0, ON_DEMAND: 0.0}
        self.peak: dict[str, float] = dict.fromkeys(self.pools, 0.0)
        self.timeline: list[Sample] = []
        self._init_learning()
        self.dirty = True
        self.activity = 0
        self._decided_at_activity = -1
        self.last_activity_time = 0.0
        self.not_submitted = len(self.jobs)
        self.active: set[int] = set()
        """The jobs submitted and not finished (pending, admitted or running), by index: what
        a pass observes, kept so that it need not scan every job of the trace."""
        self.unfinished = len(self.jobs)
        self.running = 0
        self._init_lanes()
        self.boost_step = (
            boost_step(
                policy_set.policy.spec.risk.priority_boost_value,
                (t.priority for t in policy_set.policy.spec.tiers),
            )
            if spec.kind == "policy" and policy_set.policy.spec.risk.priority_boost
            else 0
        )

    def _init_learning(self) -> None:
        """What the policy learns from its own outcomes, as the controller does: runtimes from
        the jobs that finished, and a recalibration of its risks from the deadlines that
        resolved. The baselines estimate no risks and learn nothing."""
        self.risk_log: list[tuple[float, str, str, float, float, float | None]] = []
        """(time, project, deadline, cutoff, raw risk, calibrated risk) of each estimate."""
        learns = self.spec.kind == "policy"
        self.runtimes: RuntimeLearner | None = (
            RuntimeLearner() if learns and self.spec.learn_runtimes else None
        )
        members: dict[tuple[str, str], list[tuple[float, int]]] = {}
        for index, job in enumerate(self.jobs):
            if job.label is not None:
                members.setdefault((job.spec.project, job.label), []).append(
                    (job.spec.submit, index)
                )
        self.online: OnlineCalibration | None = OnlineCalibration(members) if learns else None
        self._tiers = {p.name: p.spec.tier for p in self.policy_set.projects}

    def _init_lanes(self) -> None:
        self.lanes = self.spec.kind == "policy" and self.spec.lanes
        self.lane_writes = 0
        """Lanes written in the window (a workload's pod sets made to select a capacity)."""
        self.moves = 0
        """Workloads a lane moved off spot while their pods waited for a node."""
        self._errors_seen: set[tuple[str, float]] = set()
        """Capacity errors a pass has been woken for: (pool, first error)."""
        self._outlooks: dict[str, SpotOutlook] = {}
        """Per project, the spot outlook of the last pass (what a new workload's lane reads)."""
        self._carry: Carry | None = None
        """What the last pass hands the next, as the controller's loop hands it: estimates of
        projects whose workloads did not change, kept for up to a minute."""
        self._shortages: dict[str, ShortageState] = {
            p: ShortageState(zones=frozenset(self.karpenter.zones(p))) for p in self.pools
        }
        """Per pool, its spot shortages (per zone) as Karpenter's errors report them."""
        self._errors_folded: dict[str, float] = {}
        """Per pool, the latest of its errors folded into `_shortages`."""
        self._demoting = frozenset(
            t.name for t in self.policy_set.policy.spec.tiers if t.demote_lost
        )
        """Tiers whose lost work goes behind savable work."""
        self._lane_pending: dict[str, int] = {}
        """Per project, GPUs of its pending workloads in an on-demand lane."""
        self._confidence = {
            p.name: p.spec.deadlines[0].target_confidence if p.spec.deadlines else 0.95
            for p in self.policy_set.projects
        }

    # ------------------------------------------------------------------ events
    def _push(self, at: float, kind: str, a: int = 0, b: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self.events, (at, self._seq, kind, a, b))

    def _push_node(self, at: float, kind: str, node: int) -> None:
        self._push(at, kind, node)

    # ------------------------------------------------------------------ applying a render
    def _apply(self, rendered: Rendered) -> None:
        """What the controller's writes do: new quotas for Kueue, new limits for Karpenter."""
        for obj in rendered.objects:
            if obj["kind"] == "ResourceFlavor":
                labels = obj["spec"]["nodeLabels"]
                self.flavors[obj["metadata"]["name"]] = (
                    labels[names.LABEL_POOL],
                    labels[names.CAPACITY_TYPE_LABEL],
                )
        specs = self._specs_of(rendered)
        queues, cohorts, nodepools = specs
        if self.kueue is None:
            self.kueue = kueue_model.Kueue(queues, cohorts)
        else:
            self.kueue.reconfigure(queues, cohorts)
        self.karpenter.configure(nodepools)
        self.applied = dict(rendered.quotas)
        signature = tuple(m.on_demand_gpus for m in rendered.mix)
        if self._last_mix and signature != self._last_mix and self.now >= self.scored_from:
            self.mix_changes += 1
        self._last_mix = signature
        self.dirty = True

    def _specs_of(self, rendered: Rendered) -> _Specs:
        """The models' specs read from a render's objects; the last ones again for the same
        render (the same object, as `_baseline_render` reuses it): the specs are a pure
        function of the objects, which nothing changes once rendered, and the models copy
        what they keep of them."""
        last = self._last_specs
        if last is not None and last[0] is rendered:
            return last[1]
        queues, cohorts = kueue_model.specs_from_objects(rendered.objects, self.gpu_resources)
        specs = (queues, cohorts, karpenter_model.specs_from_objects(rendered.objects, self.pools))
        self._last_specs = (rendered, specs)
        return specs

    def _render_baseline(self, wanted: dict[str, int]) -> None:
        """A baseline's on-demand GPUs, moved as far as the shift rule allows, rendered.

        What each side holds is counted from the admitted workloads' views only: `held_by_side`
        counts a workload only while it runs (admitted, not finished), so the views of pending
        ones add nothing to it (`tests/unit/sim/test_baseline_render.py` checks both agree).
        """
        shifts = limit_shifts(
            wanted,
            {p: d.total_gpus for p, d in self._demands.items()},
            held_by_side(self.pools.values(), self._admitted_views(), self._claims()),
        )
        self.on_demand_target = dict(wanted)
        self._shifts = shifts
        self._apply(
            self._baseline_render(
                {
                    p: PoolTarget(
                        s.applied,
                        spot_gpus=s.spot,
                        nodepool_gpus={SPOT: s.spot_limit, ON_DEMAND: s.on_demand_limit},
                    )
                    for p, s in shifts.items()
                }
            )
        )

    def _baseline_render(self, targets: dict[str, PoolTarget]) -> Rendered:
        """`render(self.policy_set, targets=targets)` on Kueue's default fungibility, the last
        one reused when its targets are equal.

        Safe because `render` is a pure function of the policy set and the targets (no clock,
        no state): the policy set of a replay never changes, so equal targets give an equal
        render. `Rendered` and its objects are only read by `_apply`, never changed.
        """
        last = self._last_render
        if last is not None and last[0] == targets:
            return last[1]
        rendered = render(
            self.policy_set, targets=targets, when_can_borrow=KUEUE_DEFAULT_WHEN_CAN_BORROW
        )
        self._last_render = (targets, rendered)
        return rendered

    def _admitted_views(self) -> list[WorkloadView]:
        """The views of the admitted (and not finished) workloads, in trace order."""
        jobs = self.jobs
        return self._workload_views(
            [jobs[i] for i in sorted(self.active) if jobs[i].admitted_at is not None]
        )

    def _applied_on_demand(self) -> dict[str, int]:
        out = dict.fromkeys(self.pools, 0)
        for tier in self.policy_set.policy.spec.tiers:
            for reservation in tier.reserved:
                out[reservation.pool] += reservation.gpus
        for (_, pool), quota in (self.applied or {}).items():
            out[pool] += quota.on_demand_gpus
        return out

    def _static_target(self, fraction: float) -> dict[str, int]:
        """A fixed fraction of each pool on-demand, in whole nodes."""
        demands = self._demands
        return {
            pool: round(demand.total_gpus * fraction / self.pools[pool].gpus_per_node)
            * self.pools[pool].gpus_per_node
            for pool, demand in demands.items()
        }

    # ------------------------------------------------------------------ the controller
    def _decide(self) -> None:
        if self.now >= self.scored_from:
            self.decisions += 1
        if self.spec.kind == "static":
            if any(s.waiting_gpus for s in self._shifts.values()):
                # A shift still waiting for work to drain: render how far it has come.
                self._render_baseline(self._static_target(self.spec.on_demand_fraction))
            return
        if self.spec.kind == "reactive":
            self._react()
            return
        # Nothing arrived, started or ended since the last pass, every pool rests at its floor
        # with no timer running, and no deadline work waits that a lane could move as its
        # deadline nears: the pass would hold, so it is skipped.
        resting = all(
            s.raise_since is None
            and not s.assignments
            and s.on_demand_gpus == initial_state(self.policy_set, s.pool).on_demand_gpus
            for s in self.states.values()
        )
        if resting and self.activity == self._decided_at_activity and not self._lane_waiting():
            return
        self._decided_at_activity = self.activity
        plan = plan_capacity(self._observe())
        self._carry = plan.carried
        self._shifts = dict(plan.shifts)
        self.states = dict(plan.states)
        self.on_demand_target = {d.pool: d.target for d in plan.decisions}
        self._apply(plan.rendered)
        self._apply_boosts(plan)
        self._outlooks = dict(plan.spot_outlooks)
        for (namespace, name), lane in plan.lanes.items():
            index = self.by_name.get((namespace, name))
            if index is not None:
                if lane.move:
                    self._move(index)
                self._set_lane(index, lane.capacity_type)
        for pool, warm in plan.warm_targets.items():
            self.karpenter.set_placeholders(pool, math.ceil(warm / self.pools[pool].gpus_per_node))
        self._record_risks(plan)

    def _lane_waiting(self) -> bool:
        """Deadline work a lane may yet move: pending, or admitted and waiting for a node."""
        return self.lanes and any(
            self.jobs[i].spec.deadline is not None
            and self.jobs[i].state in {"pending", "admitted"}
            and self.jobs[i].lane != ON_DEMAND
            for i in self.active
        )

    def _react(self) -> None:
        """One node's worth more on-demand GPUs while pending work exceeds the threshold's
        share of the pool, one less after two quiet intervals."""
        assert self.kueue is not None
        pending = self.kueue.pending_gpus()
        demands = self._demands
        wanted = {}
        for pool, demand in demands.items():
            step = self.pools[pool].gpus_per_node
            current = self._reactive.get(pool, self.pools[pool].on_demand.floor_gpus)
            if pending > self.spec.threshold * demand.total_gpus:
                current = min(current + step, demand.total_gpus)
                self._quiet_intervals = 0
            elif pending == 0:
                self._quiet_intervals += 1
                if self._quiet_intervals >= 2:
                    current = max(current - step, 0)
            wanted[pool] = current
        waiting = any(s.waiting_gpus for s in self._shifts.values())
        if wanted != self._reactive or waiting or not self._last_mix:
            self._render_baseline(wanted)
        self._reactive = wanted

    def _observe(self) -> Observation:
        policy_set, views = self._decision_view()
        return Observation(
            policy_set=policy_set,
            states=self.states,
            workloads=views,
            node_claims=self._claims(),
            history=History(available=True),
            now=self.now,
            applied=self.applied,
            seed=self.seed,
            max_jobs=SIM_MAX_JOBS,
            predict_waits=False,
            runtimes=self.runtimes,
            lanes=self.lanes,
            spot_shortages=self._shortage_waits(),
            recalibration=(
                self.online.recalibration
                if self.online is not None and self.spec.calibrated
                else None
            ),
            carried=self._carry,
        )

    def _shortage_waits(self) -> dict[str, float]:
        """Per pool, the shortage wait `controller.risk.shortage` gives from the errors the
        Karpenter model reports (the controller reads the same from Karpenter's Events)."""
        out = {}
        for pool, (first, until, zones) in self.karpenter.capacity_errors.items():
            state = self._shortages[pool]
            folded = self._errors_folded.get(pool, -math.inf)
            # Errors every few minutes from the first until the launch that works, for the
            # zones the NodeClaims could go to; each folded once, in time order, as the
            # controller folds Events (however far apart the passes that read them).
            for at in _error_times(first, min(self.now, until), after=folded):
                state, folded = reported(state, at, zones), at
            self._shortages[pool] = state
            self._errors_folded[pool] = folded
        for pool, state in self._shortages.items():
            out[pool] = expected_wait(state, self.now)
        return out

    def _claims(self) -> list[NodeClaimView]:
        claims = [
            NodeClaimView(
                pool=n.pool,
                capacity_type=n.capacity_type,
                created=n.launched,
                ready_at=n.launched + self.pools[n.pool].provisioning_latency_seconds
                if n.ready
                else None,
                deleting=False,
            )
            for n in self.karpenter.nodes.values()
        ]
        claims.extend(
            NodeClaimView(n.pool, n.capacity_type, n.launched, n.launched, True)
            for n in self.karpenter.interrupted
        )
        self.karpenter.interrupted.clear()
        return claims

    def _active_jobs(self) -> list[_Job]:
        """The jobs a pass observes, in trace order."""
        return [self.jobs[i] for i in sorted(self.active)]

    def _workload_views(self, active: Sequence[_Job] | None = None) -> list[WorkloadView]:
        views = []
        for job in self._active_jobs() if active is None else active:
            admitted = job.admitted_at is not None
            # Kueue counts past admissions' execution apart from the current one's, which the
            # view measures from `admitted_at`: the work of this admission must not count twice.
            past = job.progress_at_admission if admitted else job.progress
            # Admitted and not running: its pods wait for a node, which Kueue reports
            # (PodsReady False) when configured to, and the controller reads.
            waiting = self.spec.pods_ready and job.state == "admitted"
            made_from = (job.admitted_at, job.preemptions, job.flavor, past, job.lane, waiting)
            if job.view is None or job.view[0] != made_from:
                spec = job.spec
                view = WorkloadView(
                    namespace=job.namespace,
                    name=spec.job_id,
                    queue=spec.project,
                    priority=spec.priority,
                    gpus=spec.gpus,
                    created=spec.submit,
                    admitted_at=job.admitted_at,
                    evictions=job.preemptions,
                    cluster_queue=spec.project if admitted else None,
                    flavors=(job.flavor,) if admitted and job.flavor else (),
                    expected_duration=spec.expected_duration,
                    checkpoint_interval=spec.checkpoint_seconds,
                    deadline=job.label,
                    past_execution_seconds=past,
                    capacity_type=job.lane,
                    lane=job.lane,
                    pods_waiting=waiting,
                )
                job.view = (made_from, view)
            views.append(job.view[1])
        return views

    def _decision_view(self) -> tuple[PolicySet, list[WorkloadView]]:
        """The policy with each project's deadline bins as its deadlines, and the Workloads."""
        active = self._active_jobs()
        views = self._workload_views(active)
        groups: dict[str, dict[str, float]] = {}
        for job in active:
            if job.spec.deadline is not None:
                label = job.label
                assert label is not None
                bins = groups.setdefault(job.spec.project, {})
                bins[label] = min(bins.get(label, job.spec.deadline), job.spec.deadline)
        projects = []
        for project in self.policy_set.projects:
            ordered = sorted(groups.get(project.name, {}).items(), key=lambda kv: (kv[1], kv[0]))
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

    def _apply_boosts(self, plan: CapacityPlan) -> None:
        """The annotations the reconciler writes: the plan's boosts, none on anything else."""
        assert self.kueue is not None
        for key, workload in list(self.kueue.workloads.items()):
            job = self.jobs[key]
            boost = plan.boosts.get((job.namespace, job.spec.job_id), 0)
            self.kueue.set_boost(key, boost if workload.admitted_at is None else 0)

    def _arrival_boost(self, job: _Job) -> int:
        """The boost the controller's next pass gives a new workload (its own deadline)."""
        if not self.boost_step or job.spec.deadline is None:
            return -self.boost_step * urgency_level(None) if self.boost_step else 0
        slack = job.spec.deadline - self.now - job.spec.expected_duration
        if job.spec.tier in self._demoting:
            launch = self._launch_seconds().get(job.spec.project, 0.0)
            chance = chance_to_finish(
                job.spec.deadline - self.now - launch, job.spec.expected_duration, SIGMA_ANNOTATED
            )
            if chance < self.policy_set.policy.spec.risk.lost_below:
                return -self.boost_step * (LEVELS - 1)  # lost at once: behind savable work
        return -self.boost_step * urgency_level(slack)

    def _record_risks(self, plan: CapacityPlan) -> None:
        """Judge the estimates whose deadline resolved, then keep this pass's: each open until
        its deadline resolves, with the risk the recalibration learned so far makes of it.
        The lead-in's estimates are judged and learned from (a controller that ran before the
        window would have), but only the window's are scored."""
        online = self.online
        if online is not None:
            online.judge(self.now, self._finished_at)
        for report in plan.deadlines:
            if report.cutoff > self.now and report.workloads:
                risk = report.estimate.risk
                calibrated = None
                if online is not None:
                    tier = self._tiers.get(report.project, "")
                    calibrated = online.estimate(
                        self.now,
                        report.project,
                        report.deadline,
                        cutoff=report.cutoff,
                        tier=tier,
                        risk=risk,
                    )
                if self.now >= self.scored_from:
                    self.risk_log.append(
                        (self.now, report.project, report.deadline, report.cutoff, risk, calibrated)
                    )

    def _finished_at(self, index: int) -> float | None:
        """When the job finished; None while it has not (what the judging may know now)."""
        return self.jobs[index].finish

    # ------------------------------------------------------------------ jobs
    def _touch(self) -> None:
        self.activity += 1
        self.last_activity_time = self.now

    def _submit(self, index: int) -> None:
        assert self.kueue is not None
        job = self.jobs[index]
        self.not_submitted -= 1
        self.active.add(index)
        self._touch()
        job.state, job.since = "pending", self.now
        self.kueue.submit(
            kueue_model.Workload(
                key=index,
                queue=job.spec.project,
                gpus=job.gpus,
                priority=job.spec.priority,
                created=job.spec.submit,
                boost=self._arrival_boost(job),
                queued_at=job.spec.submit,
            )
        )
        if self.lanes and self._arrival_lane(job) is not None:
            # The lane webhook's part: into the on-demand room the last pass left, at once.
            if job.gpus <= self._on_demand_room(job.spec.project):
                self._set_lane(index, ON_DEMAND)
            # The pass the new Workload wakes: it holds on-demand quota for the lanes wanted.
            self._push(self.now + LANE_PASS_SECONDS, "lane-pass")
        self.dirty = True

    def _arrival_lane(self, job: _Job) -> Lane | None:
        """The lane a new workload wants when it is created (`controller.decide.lanes`, on its
        own deadline and declared runtime, the spread the risk model gives a declared one, and
        the last pass's spot outlook): what the controller's admission webhook decides before
        Kueue sees the Workload."""
        outlook = self._outlooks.get(job.spec.project)
        if job.spec.deadline is None or outlook is None:
            return None
        spec = self.policy_set.project(job.spec.project)
        if spec is not None and spec.spec.quotas:
            pool = spec.spec.quotas[0].pool
            outlook = replace(outlook, shortage_seconds=self._shortage_waits()[pool])
        return choose_lane(
            LaneInput(
                key=(job.namespace, job.spec.job_id),
                project=job.spec.project,
                gpus=job.gpus,
                time_left=job.spec.deadline - self.now,
                confidence=self._confidence[job.spec.project],
                runtime_seconds=job.spec.expected_duration,
                sigma=SIGMA_ANNOTATED,
                checkpoint_seconds=job.spec.checkpoint_seconds,
            ),
            outlook,
        )

    def _on_demand_room(self, project: str) -> int:
        """What `plan.on_demand_room` gives the project now: its first pool's on-demand quota
        less its admitted on-demand work and its workloads waiting in an on-demand lane."""
        assert self.kueue is not None
        spec = self.policy_set.project(project)
        if spec is None or not spec.spec.quotas or self.applied is None:
            return 0
        pool = spec.spec.quotas[0].pool
        quota = self.applied.get((project, pool))
        if quota is None:
            return 0
        flavor = names.flavor_name(pool, ON_DEMAND)
        used = self.kueue.usage(project, flavor)
        return max(quota.on_demand_gpus - used - self._lane_pending.get(project, 0), 0)

    def _set_lane(self, index: int, capacity_type: str) -> None:
        """The controller's write: the pending workload's pod sets select the capacity type."""
        assert self.kueue is not None
        job = self.jobs[index]
        if job.lane == capacity_type or job.state != "pending":
            return
        job.lane = capacity_type
        self.kueue.set_node_selector(index, {names.CAPACITY_TYPE_LABEL: capacity_type})
        if capacity_type == ON_DEMAND:
            project = job.spec.project
            self._lane_pending[project] = self._lane_pending.get(project, 0) + job.gpus
        if self.now >= self.scored_from:
            self.lane_writes += 1
        self.dirty = True

    def _move(self, index: int) -> None:
        """The controller's two writes for a lane that moves a workload off spot, whose
        outcome is the replay's at once: deactivated, Kueue evicts it and gives its quota back
        (its pods never started, or lost their node), and it queues again, to be put in its
        lane and activated (`_set_lane`). Its later waits still count as waiting for a node:
        that is what made it move."""
        assert self.kueue is not None
        job = self.jobs[index]
        if job.state != "admitted":
            return
        job.account(self.now)
        self.kueue.evict(index, now=self.now)
        self.karpenter.release(index, now=self.now)
        job.after = job.after or WAITED_FOR_NODE
        job.state, job.flavor, job.admitted_at = "pending", None, None
        job.epoch += 1
        if self.now >= self.scored_from:
            self.moves += 1
        self.dirty = True

    def _admitted(self, admission: kueue_model.Admission) -> None:
        assert self.kueue is not None
        if self.boost_step:
            # The controller takes its boost off an admitted workload on the pass the
            # admission wakes, within a second: the replay does it at once.
            self.kueue.set_boost(admission.key, 0)
        job = self.jobs[admission.key]
        job.account(self.now)
        if job.lane == ON_DEMAND and job.state == "pending":
            project = job.spec.project
            self._lane_pending[project] = self._lane_pending.get(project, 0) - job.gpus
        job.state, job.flavor, job.admitted_at = "admitted", admission.flavor, self.now
        job.progress_at_admission = job.progress
        pool, capacity_type = self.flavors[admission.flavor]
        self.karpenter.admit(admission.key, pool, capacity_type, job.gpus)

    def _start(self, index: int) -> None:
        self._touch()
        job = self.jobs[index]
        job.account(self.now)
        self.running += 1
        job.state, job.segment_start = "running", self.now
        if job.first_start is None:
            job.first_start = self.now
        job.epoch += 1
        self._push(self.now + job.spec.duration - job.progress, "finish", index, job.epoch)

    def _stop(self, index: int, *, reason: str) -> None:
        """A running or admitted job stops, keeping its work up to its last checkpoint."""
        job = self.jobs[index]
        job.account(self.now)
        if job.state == "running":
            self.running -= 1
            kept = job.checkpointed(self.now)
            ran = self.now - job.segment_start
            job.used += job.gpus * ran
            lost = job.progress + ran - kept
            job.lost += job.gpus * lost
            job.progress = kept
            job.delays[reason] = job.delays.get(reason, 0.0) + lost
        job.epoch += 1
        job.after = reason
        self.karpenter.release(index, now=self.now)
        if reason == PREEMPTED:
            job.preemptions += 1
            job.state, job.flavor, job.admitted_at = "pending", None, None
            if job.lane == ON_DEMAND:  # it waits in its lane again
                project = job.spec.project
                self._lane_pending[project] = self._lane_pending.get(project, 0) + job.gpus
        else:
            job.interruptions += 1
            job.state = "admitted"
            pool, capacity_type = self.flavors[job.flavor or ""]
            self.karpenter.admit(index, pool, capacity_type, job.gpus)
        self.dirty = True

    def _finish(self, index: int, epoch: int) -> None:
        job = self.jobs[index]
        if job.state != "running" or job.epoch != epoch:
            return
        assert self.kueue is not None
        job.account(self.now)
        job.used += job.gpus * (self.now - job.segment_start)
        job.progress = job.spec.duration
        job.state, job.finish = "done", self.now
        self.running -= 1
        self.unfinished -= 1
        self.active.discard(index)
        self._touch()
        self.karpenter.release(index, now=self.now)
        self.kueue.finish(index)
        self.dirty = True
        if self.runtimes is not None:
            # Learned only now that it ended: its true runtime is known from here on.
            spec = job.spec
            self.runtimes.observe(
                FinishedRun(
                    uid=f"{job.namespace}/{spec.job_id}",
                    project=spec.project,
                    finished_at=self.now,
                    actual_seconds=spec.duration,
                    declared_seconds=spec.expected_duration,
                    queue=spec.project,
                )
            )

    # ------------------------------------------------------------------ settling
    def _settle(self) -> None:
        """Kueue admits (and preempts), Karpenter places and launches, until nothing moves."""
        assert self.kueue is not None
        for admission in self.kueue.schedule(now=self.now):
            for victim in admission.victims:
                self._stop(victim, reason=PREEMPTED)
            self._admitted(admission)
        for index in self.karpenter.place(now=self.now):
            self._start(index)
        if self.lanes:
            for pool, (first, _, _) in self.karpenter.capacity_errors.items():
                if (pool, first) not in self._errors_seen:
                    # A launch failed for want of spot: Karpenter's Event wakes a pass.
                    self._errors_seen.add((pool, first))
                    self._push(self.now + LANE_PASS_SECONDS, "lane-pass")
        if self.now >= self.scored_from:
            for pool in self.pools:
                provisioned = self.karpenter.provisioned_in_pool(pool)
                self.peak[pool] = max(self.peak[pool], provisioned)
        self._bill()

    def _bill(self) -> None:
        for removal in self.karpenter.removed:
            node = removal.node
            # A node is billed for its time in the window: a lead-in node from the window's
            # start, one removed before it not at all.
            hours = max(removal.at - max(node.launched, self.scored_from), 0.0) / 3600.0
            prices = self.pools[node.pool].prices
            per_gpu = (
                prices.spot_per_gpu_hour
                if node.capacity_type == SPOT
                else prices.on_demand_per_gpu_hour
            )
            self.cost[node.capacity_type] += hours * node.gpus * per_gpu
            self.gpu_hours[node.capacity_type] += hours * node.gpus
        self.karpenter.removed.clear()

    # ------------------------------------------------------------------ handlers
    def _handle(self, kind: str, a: int, b: int) -> None:
        if kind == "submit":
            self._submit(a)
        elif kind == "finish":
            self._finish(a, b)
        elif kind == "ready":
            node = self.karpenter.nodes.get(a)
            if node is not None and node.capacity_type == SPOT:
                self._shortages[node.pool] = launched(
                    self._shortages[node.pool], self.now, requested=node.launched, zone=node.zone
                )
            self.karpenter.node_ready(a, now=self.now)
            self.dirty = True
        elif kind == "interrupt":
            stopped = self.karpenter.interrupt(a, now=self.now)
            for index in stopped:
                self._stop(index, reason=INTERRUPTED)
            if stopped and self.lanes:
                # The controller sees the pods fail and the NodeClaim go: a pass within
                # seconds, which may move the interrupted work to on-demand.
                self._push(self.now + LANE_PASS_SECONDS, "lane-pass")
            self.dirty = True
        elif kind == "idle":
            self.karpenter.idle(a, now=self.now)
        elif kind == "retry":
            self.karpenter.retried(self.now)
            self.dirty = True
        elif kind == "decide":
            self._decide()
            self._push(self.now + self.spec.decision_interval, "decide")
        elif kind == "lane-pass":
            self._decide()
        elif kind == "sample":
            self._sample()
            self._push(self.now + self.spec.sample_interval, "sample")

    def _sample(self) -> None:
        if self.now < self.scored_from:
            return
        in_use = {SPOT: 0.0, ON_DEMAND: 0.0}
        provisioned = {SPOT: 0.0, ON_DEMAND: 0.0}
        flavors: dict[Flavor, list[float]] = {}
        for node in self.karpenter.nodes.values():
            used = sum(node.jobs.values()) + node.placeholders * node.gpus if node.ready else 0
            provisioned[node.capacity_type] += node.gpus
            in_use[node.capacity_type] += used
            # In use, up but unused, launching.
            tally = flavors.setdefault((node.pool, node.capacity_type), [0.0, 0.0, 0.0])
            if node.ready:
                tally[0] += used
                tally[1] += node.gpus - used
            else:
                tally[2] += node.gpus
        applied = self._applied_on_demand()
        self.timeline.append(
            Sample(
                time=self.now - self.scored_from,
                gpus_in_use=in_use,
                gpus_provisioned=provisioned,
                on_demand_target=float(sum(applied.values())),
                pending_jobs=self.kueue.pending_count() if self.kueue is not None else 0,
                by_flavor={flavor: FlavorGpus(*tally) for flavor, tally in flavors.items()},
                on_demand_target_by_pool={pool: float(v) for pool, v in applied.items()},
            )
        )

    # ------------------------------------------------------------------ run
    def run(self) -> RunResult:
        started = time.monotonic()
        # The baselines run on Kueue's default fungibility, as a team running a fixed split or
        # reactive scaling would; the policy on what the controller renders.
        first = render(
            self.policy_set,
            when_can_borrow=OWN_QUOTA_FIRST
            if self.spec.kind == "policy"
            else KUEUE_DEFAULT_WHEN_CAN_BORROW,
        )
        self._apply(first)
        if self.spec.kind == "static":
            self._render_baseline(self._static_target(self.spec.on_demand_fraction))
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
                self._settle()
            if self.progress and end > 0 and at - reported > end / 200:
                reported = at
                self.progress(min(at / end, 1.0))
        for job in self.jobs:
            job.account(self.now)
        self.karpenter.remove_all(now=self.now)
        self._bill()
        return self._result(time.monotonic() - started)

    def _stalled(self, at: float) -> bool:
        """Everything has run, or for a day nothing has run, waited for nodes or arrived.

        Jobs still pending then cannot be admitted (wider than any quota): they are reported
        as unfinished rather than replayed for months.
        """
        if self.not_submitted or self.karpenter.waiting:
            return False
        if not self.unfinished:
            return True
        return not self.running and at - self.last_activity_time > STALL_SECONDS

    def _result(self, wall: float) -> RunResult:
        """The window's jobs, with times from its start (a lead-in's jobs are not scored)."""
        launch = self._launch_seconds()
        start = self.scored_from

        def shifted(at: float | None) -> float | None:
            return None if at is None else at - start

        scored = [j for j in self.jobs if j.spec.submit >= start]
        outcomes = [
            JobOutcome(
                job_id=j.spec.job_id,
                project=j.spec.project,
                tier=j.spec.tier,
                gpus=j.gpus,
                submit=j.spec.submit - start,
                first_start=shifted(j.first_start),
                finish=shifted(j.finish),
                deadline=shifted(j.spec.deadline),
                work_gpu_seconds=j.gpus * j.spec.duration,
                used_gpu_seconds=j.used,
                lost_gpu_seconds=j.lost,
                interruptions=j.interruptions,
                preemptions=j.preemptions,
                delays=dict(j.delays),
                cause=attribute(
                    submit=j.spec.submit,
                    duration=j.spec.duration,
                    deadline=j.spec.deadline,
                    finish=j.finish,
                    delays=j.delays,
                    admissible=j.first_start is not None or j.admitted_at is not None,
                ),
                launch_seconds=launch.get(j.spec.project),
            )
            for j in scored
        ]
        demands = pool_demands(self.policy_set)
        return RunResult(
            name=self.spec.name,
            outcomes=OutcomeTable(outcomes),
            timeline=self.timeline,
            cost_by_capacity_type=dict(self.cost),
            gpu_hours_by_capacity_type=dict(self.gpu_hours),
            mix_changes=self.mix_changes,
            decisions=self.decisions,
            lane_writes=self.lane_writes,
            lane_moves=self.moves,
            wall_seconds=wall,
            unfinished=sum(1 for j in scored if j.finish is None),
            risk_log=RiskTable(self._risk_records()),
            peak_provisioned=dict(self.peak),
            ceilings={
                name: min(pool.max_gpus, demands[name].total_gpus)
                for name, pool in self.pools.items()
            },
        )

    def _launch_seconds(self) -> dict[str, float]:
        """Per project, the shortest provisioning latency of the pools it has quota in."""
        out: dict[str, float] = {}
        for project in self.policy_set.projects:
            latencies = [
                float(self.pools[q.pool].provisioning_latency_seconds)
                for q in project.spec.quotas
                if q.pool in self.pools
            ]
            if latencies:
                out[project.name] = min(latencies)
        return out

    def _risk_records(self) -> list[RiskRecord]:
        """Each estimate with its outcome: did every workload counting toward the deadline
        when it was made (submitted, unfinished) finish by the cutoff?"""
        members: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for job in self.jobs:
            label = job.label
            if label is not None:
                finish = job.finish if job.finish is not None else math.inf
                members.setdefault((job.spec.project, label), []).append((job.spec.submit, finish))
        for items in members.values():
            items.sort()
        out = []
        for at, project, deadline, cutoff, risk, calibrated in self.risk_log:
            missed = any(
                finish > cutoff
                for submit, finish in members.get((project, deadline), ())
                if submit <= at and finish > at
            )
            out.append(
                RiskRecord(at - self.scored_from, project, deadline, risk, missed, calibrated)
            )
        return out


def replay(
    policy_set: PolicySet,
    jobs: Sequence[SimJob],
    spec: RunSpec,
    *,
    seed: int = 0,
    progress: Callable[[float], None] | None = None,
    scored_from: float = 0.0,
) -> RunResult:
    return Replay(
        policy_set, jobs, spec, seed=seed, progress=progress, scored_from=scored_from
    ).run()
