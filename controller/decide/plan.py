"""One decision pass over the whole policy: the one function the controller and simulator share.

An `Observation` in (the policy, the workloads, the node claims, history, each pool's state as
the last pass left it, `now`), everything the controller acts on and reports out: the mix
decision per pool with its reason, the targets the renderer turns into NodePool limits and
flavor quotas (moved only as fast as the shrinking side frees capacity), the deadline risks
under the new split, predicted waits, demand forecasts and warm-pool targets, the priority
boosts that order waiting work by deadline, and what the GPUs in use cost. No I/O, no logging,
no clock of its own. The controller, `quartermaster plan`/`explain` and the replay all call
`plan_capacity`; what they carry from one pass to the next is `CapacityPlan.states`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from controller import names
from controller.api.policy_set import PolicySet
from controller.capacity import (
    FlavorQuota,
    PoolDemand,
    PoolTarget,
    pool_demands,
    spot_allowed,
    whole_nodes,
)
from controller.collector import pausing_collector
from controller.decide.boost import boost_step, deadline_boosts
from controller.decide.lanes import Lane, LaneInput, SpotOutlook, fit_lanes, lane_candidates
from controller.decide.mix import (
    Decision,
    PoolState,
    RiskOracle,
    cooldown_seconds,
    decide_pool,
    fit_shares,
    initial_state,
    track_thresholds,
)
from controller.decide.observation import Carry, History, Observation
from controller.decide.shift import Shift, held_by_side, limit_shifts
from controller.render.desired import Rendered, render, render_quotas
from controller.risk.forecast import DemandForecast, forecast_demand, warm_pool_target
from controller.risk.model import (
    DeadlineReport,
    LostWorkload,
    RiskModel,
    Snapshot,
    project_workloads,
)
from controller.risk.pools import pool_stats
from controller.risk.recalibration import Recalibration
from controller.risk.wait import WaitEstimate
from controller.risk.workloads import WorkloadView

HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class CapacityPlan:
    decisions: tuple[Decision, ...]
    targets: Mapping[str, PoolTarget]
    rendered: Rendered
    deadlines: tuple[DeadlineReport, ...]
    waits: Mapping[str, WaitEstimate]
    """Per project, its queue's predicted wait (none when the observation asked for none)."""
    pending_gpus: Mapping[str, int]
    pending_workloads: Mapping[str, int]
    demand_gpus: Mapping[str, float]
    """Per pool, GPUs requested by running and pending workloads now."""
    forecasts: Mapping[str, DemandForecast]
    warm_targets: Mapping[str, int]
    idle_gpus: Mapping[str, float]
    """Per pool, GPUs on Ready nodes that no running workload uses: what the warm pool holds."""
    boosts: Mapping[tuple[str, str], int]
    """(namespace, name) -> priority boost for workloads that should carry one; every other
    workload of ours carries none."""
    shifts: Mapping[str, Shift]
    """Per pool, the decided on-demand GPUs and what is rendered now on the way there."""
    cost_per_hour: Mapping[tuple[str, str], float]
    """(pool, capacity type) -> dollars per hour for the GPUs in use."""
    project_cost_per_hour: Mapping[str, float]
    budget_exceeded: frozenset[str]
    lanes: Mapping[tuple[str, str], Lane] = field(default_factory=dict)
    """(namespace, name) -> the lane of each pending deadline workload this controller puts on
    on-demand (its pod sets select the capacity type, its annotation says why); every other
    workload of ours carries no lane."""
    lost: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """(namespace, name) -> chance to make it, for each waiting workload whose deadline is
    lost (under `risk.lostBelow` even if started now), in every tier: told to its owner at
    once (status, Event, metric), and, in tiers that demote lost work, placed after savable
    work while it waits."""
    lost_deadlines: Mapping[tuple[str, str], LostWorkload] = field(default_factory=dict)
    """The same workloads with the project and the deadline each was judged against (its
    earliest open one): what the status, the Event and the metric name."""
    spot_outlooks: Mapping[str, SpotOutlook] = field(default_factory=dict)
    """Per project that may run on spot, what spot may cost its workloads (what a lane is
    decided from)."""
    observation: Observation | None = field(default=None, compare=False, repr=False)
    carried: Carry | None = field(default=None, compare=False, repr=False)
    """What this pass made, for the next pass's Observation (see `Carry`)."""
    """What the plan was decided from, for `plan_holds` to compare the next pass's with."""

    @property
    def states(self) -> dict[str, PoolState]:
        return {d.pool: d.state for d in self.decisions}

    @cached_property
    def _deadlines_by_project(self) -> dict[str, tuple[DeadlineReport, ...]]:
        grouped: dict[str, list[DeadlineReport]] = {}
        for report in self.deadlines:
            grouped.setdefault(report.project, []).append(report)
        return {project: tuple(reports) for project, reports in grouped.items()}

    def deadlines_of(self, project: str) -> tuple[DeadlineReport, ...]:
        """One project's deadline reports (statuses ask for each of a thousand projects)."""
        return self._deadlines_by_project.get(project, ())

    @cached_property
    def _lost_by_project(self) -> dict[str, dict[tuple[str, str], LostWorkload]]:
        grouped: dict[str, dict[tuple[str, str], LostWorkload]] = {}
        for key, judged in self.lost_deadlines.items():
            grouped.setdefault(judged.project, {})[key] = judged
        return grouped

    def lost_of(self, project: str) -> Mapping[tuple[str, str], LostWorkload]:
        """One project's lost waiting workloads (statuses ask for each of a thousand
        projects)."""
        return self._lost_by_project.get(project, {})


def state_target(state: PoolState) -> PoolTarget:
    """The target a pool's state describes, when nothing holds its shift back."""
    return PoolTarget(state.on_demand_gpus, dict(state.assignments), state.deferred_tiers)


def _costs(
    policy_set: PolicySet,
    workloads: Sequence[WorkloadView],
    by_project: Mapping[str, list[WorkloadView]],
) -> tuple[dict[tuple[str, str], float], dict[str, float]]:
    pools = {p.name: p for p in policy_set.policy.spec.pools}
    flavor_price: dict[str, tuple[str, str, float]] = {}
    for pool in pools.values():
        flavor_price[names.flavor_name(pool.name, names.SPOT)] = (
            pool.name,
            names.SPOT,
            pool.prices.spot_per_gpu_hour,
        )
        flavor_price[names.flavor_name(pool.name, names.ON_DEMAND)] = (
            pool.name,
            names.ON_DEMAND,
            pool.prices.on_demand_per_gpu_hour,
        )
    by_flavor = {(p, c): 0.0 for p in pools for c in names.CAPACITY_TYPES}

    def cost(workload: WorkloadView) -> tuple[tuple[str, str], float] | None:
        if not workload.running or not workload.flavors:
            return None
        pool, capacity_type, price = flavor_price.get(workload.flavors[0], ("", "", 0.0))
        return ((pool, capacity_type), workload.gpus * price) if pool else None

    # Each running workload's cost once (a pass reads some 10,000 workloads, most of them
    # pending), by identity: `by_project` holds the same views.
    costs: dict[int, float] = {}
    for workload in workloads:
        item = cost(workload)
        if item is not None:
            by_flavor[item[0]] += item[1]
            costs[id(workload)] = item[1]
    per_project = {
        project: sum(c for w in items if (c := costs.get(id(w))) is not None)
        for project, items in by_project.items()
    }
    return by_flavor, per_project


def _retrack(
    policy_set: PolicySet,
    decisions: tuple[Decision, ...],
    reports: Sequence[DeadlineReport],
    *,
    now: float,
    recalibration: Recalibration | None = None,
) -> tuple[Decision, ...]:
    """After a change, the thresholds' timers follow the risk under the new split.

    The next pass measures risk under the split just decided; carrying timers measured under
    the old one would make it disagree with this pass's status, and write for nothing.
    """
    settings = policy_set.policy.spec.risk
    out = []
    for decision in decisions:
        if not decision.changed:
            out.append(decision)
            continue
        pool_projects = {p.name for p, _ in policy_set.quotas_in(decision.pool)}
        worst = max(
            (
                _risk(policy_set, recalibration, r.project, r.estimate.risk)
                for r in reports
                if r.project in pool_projects
            ),
            default=0.0,
        )
        out.append(
            replace(decision, state=track_thresholds(decision.state, worst, settings, now=now))
        )
    return tuple(out)


def _risk(
    policy_set: PolicySet, recalibration: Recalibration | None, project: str, risk: float
) -> float:
    """The risk a decision reads: calibrated when a recalibration is given."""
    if recalibration is None:
        return risk
    found = policy_set.project(project)
    return recalibration(found.spec.tier if found is not None else "", risk)


def _calibrated(
    policy_set: PolicySet, oracle: RiskOracle, recalibration: Recalibration | None
) -> RiskOracle:
    """`oracle` with its answers calibrated (the raw oracle when there is nothing to apply)."""
    if recalibration is None:
        return oracle

    def calibrated(project: str, pool: str, on_demand_gpus: int) -> dict[str, float]:
        return {
            name: _risk(policy_set, recalibration, project, risk)
            for name, risk in oracle(project, pool, on_demand_gpus).items()
        }

    return calibrated


def _applied_on_demand(
    policy_set: PolicySet, applied: Mapping[tuple[str, str], FlavorQuota]
) -> dict[str, int]:
    """Per pool, the on-demand GPUs of the split in effect (tier reservations included)."""
    out = {p.name: 0 for p in policy_set.policy.spec.pools}
    for tier in policy_set.policy.spec.tiers:
        for reservation in tier.reserved:
            out[reservation.pool] = out.get(reservation.pool, 0) + reservation.gpus
    for (_, pool), quota in applied.items():
        if pool in out:
            out[pool] += quota.on_demand_gpus
    return out


def _widest_pending(
    policy_set: PolicySet, by_project: Mapping[str, Sequence[WorkloadView]]
) -> dict[str, int]:
    """Per project, its widest pending pod set (the whole workload: one pod set each)."""
    return {
        name: max((w.gpus for w in items if w.pending), default=0)
        for name, items in by_project.items()
        if policy_set.project(name) is not None
    }


@pausing_collector
def plan_capacity(observation: Observation) -> CapacityPlan:
    """One pass: decide each pool's mix, render it as far as the ceiling allows, report."""
    policy_set = observation.policy_set
    policy = policy_set.policy
    # Status keeps whole seconds: a pass works on the clock it can write back, so the state
    # the controller reads next is exactly the state the replay carries in memory.
    now = float(math.floor(observation.now))
    workloads, node_claims, history = (
        observation.workloads,
        observation.node_claims,
        observation.history,
    )
    previous = {
        pool.name: observation.states.get(pool.name) or initial_state(policy_set, pool.name)
        for pool in policy.spec.pools
    }
    applied = _applied(observation, previous)
    stats = pool_stats(policy.spec.pools, node_claims, now=now)
    # Effective priority per urgency level: 0 when boosts are off (or the tiers leave no room).
    step = (
        boost_step(policy.spec.risk.priority_boost_value, (t.priority for t in policy.spec.tiers))
        if policy.spec.risk.priority_boost
        else 0
    )
    snapshot = Snapshot(
        policy_set=policy_set,
        quotas=applied,
        workloads=workloads,
        pools=stats,
        now=now,
        median_runtime=history.median_runtime,
        samples=policy.spec.risk.samples,
        seed=observation.seed,
        max_jobs=observation.max_jobs,
        deadline_first=step > 0,
        runtimes=observation.runtimes if policy.spec.risk.learn_runtimes else None,
    )
    by_project = project_workloads(policy_set, workloads)
    widest = _widest_pending(policy_set, by_project)
    carry = observation.carried or Carry()
    model = RiskModel(replace(snapshot, pod_sets=widest), by_project, carried=carry.estimates)
    oracle = _calibrated(policy_set, model.oracle, observation.recalibration)
    decisions = tuple(
        decide_pool(
            policy_set,
            previous[pool.name],
            oracle,
            now=now,
            baseline={
                project: split.on_demand_gpus
                for (project, pool_name), split in applied.items()
                if pool_name == pool.name
            },
            history_available=history.available,
            prefetch=model.prefetch,
        )
        for pool in policy.spec.pools
    )
    demands = pool_demands(policy_set)
    candidates, held, outlooks = _lanes_and_holds(observation, model, decisions, by_project)
    shifts = limit_shifts(
        {d.pool: _lane_target(policy_set, d, held[d.pool], demands) for d in decisions},
        {name: demand.total_gpus for name, demand in demands.items()},
        held_by_side(policy.spec.pools, workloads, node_claims),
    )
    targets = {}
    for decision in decisions:
        state, shift = decision.state, shifts[decision.pool]
        fixed = demands[decision.pool].on_demand_only_gpus
        targets[decision.pool] = PoolTarget(
            shift.applied,
            fit_shares(policy_set, decision.pool, held[decision.pool], shift.applied - fixed),
            state.deferred_tiers,
            pod_sets={
                project.name: widest[project.name]
                for project in policy_set.projects
                if widest.get(project.name)
                and any(q.pool == decision.pool for q in project.spec.quotas)
            },
            spot_gpus=shift.spot,
            nodepool_gpus={
                names.SPOT: shift.spot_limit,
                names.ON_DEMAND: shift.on_demand_limit,
            },
        )
    rendered = _render(policy_set, targets, observation.namespace, carry.rendered)
    # Same world, new split: a project whose capacity did not change reuses its estimates.
    final = model.with_quotas(rendered.quotas)
    reports = tuple(final.deadlines())
    decisions = _retrack(
        policy_set, decisions, reports, now=now, recalibration=observation.recalibration
    )
    boosts, lost = _boosts(observation, final, step)
    running_by_pool: dict[str, float] = {p.name: 0.0 for p in policy.spec.pools}
    pending_by_pool: dict[str, float] = {p.name: 0.0 for p in policy.spec.pools}
    pending_counts: dict[str, int] = {}
    for project in policy_set.projects:
        # A project's GPUs count in each of its pools in proportion to its quota there.
        running_gpus = pending_gpus = pending = 0
        for workload in final.by_project[project.name]:
            if workload.running:
                running_gpus += workload.gpus
            else:
                pending_gpus += workload.gpus
                pending += 1
        pending_counts[project.name] = pending
        total = sum(q.nominal_gpus for q in project.spec.quotas) or 1
        for quota in project.spec.quotas:
            running_by_pool[quota.pool] += running_gpus * quota.nominal_gpus / total
            pending_by_pool[quota.pool] += pending_gpus * quota.nominal_gpus / total
    up = {p.name: 0.0 for p in policy.spec.pools}
    pool_sizes = {p.name: p.gpus_per_node for p in policy.spec.pools}
    for claim in node_claims:
        if claim.ready_at is not None and not claim.deleting and claim.pool in up:
            up[claim.pool] += pool_sizes[claim.pool]
    forecasts = {
        pool.name: forecast_demand(
            pool.name,
            running_gpus=running_by_pool[pool.name],
            pending_gpus=pending_by_pool[pool.name],
            historical_changes=history.demand_changes.get(pool.name, ()),
        )
        for pool in policy.spec.pools
    }
    warm = {
        pool.name: warm_pool_target(
            forecasts[pool.name],
            in_use_gpus=running_by_pool[pool.name],
            min_gpus=pool.warm_pool.min_gpus,
            # Placeholders take room under the NodePool limits: never more than the pool has
            # free, and none while a shift waits for nodes to go.
            max_gpus=min(
                pool.warm_pool.max_gpus,
                0
                if shifts[pool.name].waiting_gpus
                else max(int(demands[pool.name].total_gpus - running_by_pool[pool.name]), 0),
            ),
        )
        for pool in policy.spec.pools
    }
    idle = {name: max(gpus - running_by_pool[name], 0.0) for name, gpus in up.items()}
    by_flavor, per_project = _costs(policy_set, workloads, final.by_project)
    exceeded = frozenset(
        project.name
        for project in policy_set.projects
        if project.spec.budget is not None
        and per_project.get(project.name, 0.0) * HOURS_PER_MONTH
        > project.spec.budget.dollars_per_month
    )
    return CapacityPlan(
        decisions=decisions,
        targets=targets,
        rendered=rendered,
        deadlines=reports,
        waits=final.waits() if observation.predict_waits else {},
        pending_gpus=final.pending_gpus(),
        pending_workloads=pending_counts,
        demand_gpus={p: running_by_pool[p] + pending_by_pool[p] for p in running_by_pool},
        forecasts=forecasts,
        warm_targets=warm,
        idle_gpus=idle,
        boosts=boosts,
        shifts=shifts,
        cost_per_hour=by_flavor,
        project_cost_per_hour=per_project,
        budget_exceeded=exceeded,
        lost={key: judged.chance for key, judged in lost.items()},
        lost_deadlines=lost,
        lanes=_final_lanes(policy_set, candidates, rendered.quotas, by_project),
        spot_outlooks=outlooks,
        observation=replace(observation, carried=None),
        carried=Carry(
            estimates=final.carry(),
            rendered=(policy_set, targets, observation.namespace, rendered),
        ),
    )


def _applied(
    observation: Observation, previous: Mapping[str, PoolState]
) -> dict[tuple[str, str], FlavorQuota]:
    """The split in effect: what the live queues say, and for queues not rendered yet what the
    states describe (rendered only when some are missing: most passes read them all)."""
    policy_set = observation.policy_set
    live = observation.applied or {}
    if all((p.name, q.pool) in live for p in policy_set.projects for q in p.spec.quotas):
        return dict(live)
    targets = {pool: state_target(state) for pool, state in previous.items()}
    return {**render_quotas(policy_set, targets=targets)[1], **live}


def _boosts(
    observation: Observation, model: RiskModel, step: int
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], LostWorkload]]:
    """The priority boosts of waiting work (deadline order, lost work last for as long as
    the policy lets it wait), and the lost workloads. Lost work is judged in every tier,
    since its owner is told whatever the tier; only tiers with `demoteLost` place it after
    savable work. No deadline order, no demotion: the lost are still reported."""
    lost = model.lost_workloads(observation.policy_set.policy.spec.risk.lost_below)
    if not step:
        return {}, lost
    return deadline_boosts(model.pending_slack(), step=step, demoted=model.demoted()), lost


def _lanes_and_holds(
    observation: Observation,
    model: RiskModel,
    decisions: Sequence[Decision],
    by_project: Mapping[str, Sequence[WorkloadView]],
) -> tuple[list[tuple[LaneInput, Lane]], dict[str, dict[str, int]], dict[str, SpotOutlook]]:
    """The pending deadline workloads that want an on-demand lane (none when the observation
    turns lanes off), the on-demand GPUs held per pool and project for the lanes the on-demand room
    takes (with the project's on-demand work in use), and the spot outlooks they were decided
    from. What is held is rendered this pass, and `_final_lanes` moves workloads into it."""
    policy_set = observation.policy_set
    if not observation.lanes:
        return [], _held_for_lanes(policy_set, decisions, {}, by_project), {}
    outlooks = _outlooks(model, policy_set, observation.spot_shortages)
    inputs = [LaneInput(*f) for f in model.lane_workloads()]
    # Held: the lanes the on-demand room takes, with what idle spot quota the project has
    # turned into on-demand. Holding on-demand for every lane wanted, out of spot quota in use
    # or not, was tried: it cost the Alibaba replay (seed 0) 74 more misses than holding none.
    quotas = model.snapshot.quotas
    candidates = lane_candidates(inputs, outlooks)
    wanting = {workload.project for workload, _ in candidates}
    room = on_demand_room(policy_set, quotas, by_project, wanting)
    idle = idle_spot(policy_set, quotas, by_project, wanting)
    lanes = fit_lanes(candidates, {p: room.get(p, 0) + idle.get(p, 0) for p in room})
    return candidates, _held_for_lanes(policy_set, decisions, lanes, by_project), outlooks


def _first_pool_quotas(
    policy_set: PolicySet,
    applied: Mapping[tuple[str, str], FlavorQuota],
    projects: Collection[str] | None = None,
) -> Iterator[tuple[str, str, FlavorQuota]]:
    """(project, pool, quota) of each project's first pool (of those named in `projects`,
    when given): where a lane's workload waits (Kueue tries the project's flavors in order,
    and the lane leaves it only on-demand ones)."""
    for project in policy_set.projects:
        if projects is not None and project.name not in projects:
            continue
        if project.spec.quotas:
            pool = project.spec.quotas[0].pool
            quota = applied.get((project.name, pool))
            if quota is not None:
                yield project.name, pool, quota


def idle_spot(
    policy_set: PolicySet,
    applied: Mapping[tuple[str, str], FlavorQuota],
    by_project: Mapping[str, Sequence[WorkloadView]],
    projects: Collection[str] | None = None,
) -> dict[str, int]:
    """Per project (of `projects`, when given), the spot GPUs of its first pool's quota that
    no admitted work uses: quota a lane may take over for on-demand without making anyone
    wait for it."""
    out: dict[str, int] = {}
    for name, pool, quota in _first_pool_quotas(policy_set, applied, projects):
        flavor = names.flavor_name(pool, names.SPOT)
        used = sum(w.gpus for w in by_project.get(name, ()) if w.running and flavor in w.flavors)
        out[name] = max(quota.spot_gpus - used, 0)
    return out


def _final_lanes(
    policy_set: PolicySet,
    candidates: Sequence[tuple[LaneInput, Lane]],
    quotas: Mapping[tuple[str, str], FlavorQuota],
    by_project: Mapping[str, Sequence[WorkloadView]],
) -> dict[tuple[str, str], Lane]:
    """The lanes written this pass: those that fit the on-demand room of the split just
    rendered (Kueue reads the new quotas as soon as they are written, before the lanes)."""
    if not candidates:
        return {}
    wanting = {workload.project for workload, _ in candidates}
    return fit_lanes(candidates, on_demand_room(policy_set, quotas, by_project, wanting))


def on_demand_room(
    policy_set: PolicySet,
    applied: Mapping[tuple[str, str], FlavorQuota],
    by_project: Mapping[str, Sequence[WorkloadView]],
    projects: Collection[str] | None = None,
) -> dict[str, int]:
    """Per project (of `projects`, when given: a pass asks only for those with workloads
    wanting a lane), the on-demand GPUs free in its first pool's quota now: the applied
    on-demand quota less what its admitted on-demand work and its workloads already in an
    on-demand lane take. What a new lane may use without waiting for quota."""
    out: dict[str, int] = {}
    for name, pool, quota in _first_pool_quotas(policy_set, applied, projects):
        flavor = names.flavor_name(pool, names.ON_DEMAND)
        taken = sum(
            w.gpus
            for w in by_project.get(name, ())
            if (w.running and flavor in w.flavors) or (w.pending and w.lane == names.ON_DEMAND)
        )
        out[name] = max(quota.on_demand_gpus - taken, 0)
    return out


def _outlooks(
    model: RiskModel, policy_set: PolicySet, shortages: Mapping[str, float]
) -> dict[str, SpotOutlook]:
    """Per project with deadlines that may run on spot, what spot may cost its workloads:
    its pools' launch latency and interruption rate, as its capacity has them, and the rest
    of a shortage its first pool is known to be in (where its lanes' work would wait). A
    project that may not run on spot has nothing to move."""
    outlooks: dict[str, SpotOutlook] = {}
    for project in policy_set.projects:
        if not project.spec.deadlines or not spot_allowed(policy_set, project):
            continue
        capacity = model.spot_capacity(project.name)
        if capacity is None:
            continue
        first = project.spec.quotas[0].pool if project.spec.quotas else ""
        outlooks[project.name] = SpotOutlook(
            launch_seconds=capacity.provisioning_latency_seconds,
            interruptions_per_node_hour=capacity.interruptions_per_node_hour,
            gpus_per_node=capacity.gpus_per_node,
            shortage_seconds=shortages.get(first, 0.0),
        )
    return outlooks


def _held_for_lanes(
    policy_set: PolicySet,
    decisions: Sequence[Decision],
    lanes: Mapping[tuple[str, str], Lane],
    by_project: Mapping[str, Sequence[WorkloadView]],
) -> dict[str, dict[str, int]]:
    """Per pool, the on-demand GPUs held per project: the decision's, raised where a
    project's on-demand lanes need more than it holds. A lane's workload waits for quota on
    the on-demand flavor of its project's first pool (Kueue tries the project's flavors in
    order, and a node selector leaves it only on-demand ones), beside the project's admitted
    on-demand work there; both are held, in whole nodes."""
    held = {d.pool: dict(d.state.assignments) for d in decisions}
    if not lanes:
        return held
    sizes = {p.name: p.gpus_per_node for p in policy_set.policy.spec.pools}
    for project in policy_set.projects:
        if not project.spec.quotas:
            continue
        pool = project.spec.quotas[0].pool
        if pool not in held:
            continue
        flavor = names.flavor_name(pool, names.ON_DEMAND)
        lane_gpus = in_use = 0
        for workload in by_project.get(project.name, ()):
            if (workload.namespace, workload.name) in lanes:  # pending, or moving off spot
                lane_gpus += workload.gpus
            elif workload.running and flavor in workload.flavors:
                in_use += workload.gpus
        if lane_gpus:
            need = whole_nodes(lane_gpus + in_use, sizes[pool])
            held[pool][project.name] = max(held[pool].get(project.name, 0), need)
    return held


def _lane_target(
    policy_set: PolicySet,
    decision: Decision,
    held: Mapping[str, int],
    demands: Mapping[str, PoolDemand],
) -> int:
    """The pool's on-demand GPUs with what lanes hold: the decision's target, raised to cover
    the held shares on top of the quota that must be on-demand anyway, never above the pool's
    ceiling or its quota. Not a blanket raise: only what the lanes' workloads ask."""
    if held == decision.state.assignments:
        return decision.target
    pool = next(p for p in policy_set.policy.spec.pools if p.name == decision.pool)
    demand = demands[decision.pool]
    wanted = demand.on_demand_only_gpus + sum(held.values())
    upper = max(min(pool.on_demand.ceiling_gpus, demand.total_gpus), demand.on_demand_only_gpus)
    return max(decision.target, min(whole_nodes(wanted, pool.gpus_per_node), upper))


def _render(
    policy_set: PolicySet,
    targets: Mapping[str, PoolTarget],
    namespace: str,
    last: tuple[PolicySet, Mapping[str, PoolTarget], str, Rendered] | None,
) -> Rendered:
    """`render`, or the last pass's objects when they were rendered from the same policy,
    targets and namespace (the same objects, so later steps can tell they did not change)."""
    if (
        last is not None
        and (last[0] is policy_set or last[0] == policy_set)
        and last[1] == targets
        and last[2] == namespace
    ):
        return last[3]
    return render(policy_set, targets=targets, namespace=namespace)


PLAN_MAX_AGE_SECONDS = 60.0
"""How long a plan stands for a world that has not changed: its estimates drift with the clock
alone (running work progresses, deadlines near) by far less in a minute than their own
sampling noise, and a decision waits out a window of minutes anyway."""


def plan_due(plan: CapacityPlan) -> float:
    """The first moment after the plan's pass at which the clock alone changes a decision: a
    threshold's evaluation window or the cooldown ends, or a deadline's cutoff passes."""
    seen = plan.observation
    if seen is None:
        return -math.inf
    now = float(math.floor(seen.now))
    settings = seen.policy_set.policy.spec.risk
    window = settings.evaluation_window_seconds
    moments = [r.cutoff for r in plan.deadlines]
    for state in seen.states.values():
        moments += [
            since + window for since in (state.raise_since, state.lower_since) if since is not None
        ]
        if state.last_change is not None:
            moments.append(state.last_change + cooldown_seconds(settings, state))
    return min((m for m in moments if m > now), default=math.inf)


def plan_holds(
    previous: CapacityPlan | None,
    observation: Observation,
    *,
    max_age_seconds: float = PLAN_MAX_AGE_SECONDS,
) -> bool:
    """Whether `previous` stands for `observation`, so a pass may skip deciding again.

    It does when everything but the clock is what it was decided from, the clock has moved
    forward by less than `max_age_seconds` and past no moment in `plan_due`, and the plan moved
    no mix (a change is announced once: its Events and log lines must not repeat). Comparing is
    cheap when the caller hands the same objects for what did not change (equal by identity).
    """
    seen = previous.observation if previous is not None else None
    if previous is None or seen is None:
        return False
    if any(d.changed for d in previous.decisions):
        return False
    if not 0 <= observation.now - seen.now < max_age_seconds:
        return False
    if math.floor(observation.now) >= plan_due(previous):
        return False
    return replace(observation, now=seen.now) == seen


__all__ = [
    "PLAN_MAX_AGE_SECONDS",
    "CapacityPlan",
    "History",
    "Observation",
    "plan_capacity",
    "plan_due",
    "plan_holds",
    "state_target",
]
