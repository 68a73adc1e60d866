"""One decision pass over the whole policy: the function the controller and simulator share.

Observed world in (workloads, node claims, history, the previous pass's pool states, `now`),
everything the controller acts on and reports out: the mix decision per pool with its reason,
the targets the renderer turns into NodePool limits and flavor quotas, the deadline risks under
the new mix, predicted waits, demand forecasts and warm-pool targets, the workloads to give a
priority boost, and what the GPUs in use cost. No I/O, no logging, no clock of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from controller import names
from controller.api.policy_set import PolicySet
from controller.decide.mix import Decision, PoolState, decide_pool, initial_state
from controller.render.capacity import PoolTarget
from controller.render.desired import Rendered, render
from controller.risk.forecast import DemandForecast, forecast_demand, warm_pool_target
from controller.risk.model import DeadlineReport, RiskModel, Snapshot, deadline_workloads
from controller.risk.pools import NodeClaimView, pool_stats
from controller.risk.wait import WaitEstimate
from controller.risk.workloads import WorkloadView

HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class History:
    """What Prometheus remembers; `available` False when it could not be asked."""

    available: bool = False
    median_runtime: Mapping[str, float] = field(default_factory=dict)
    demand_changes: Mapping[str, Sequence[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class CapacityPlan:
    decisions: tuple[Decision, ...]
    targets: Mapping[str, PoolTarget]
    rendered: Rendered
    deadlines: tuple[DeadlineReport, ...]
    waits: Mapping[str, WaitEstimate]
    pending_gpus: Mapping[str, int]
    pending_workloads: Mapping[str, int]
    demand_gpus: Mapping[str, float]
    """Per pool, GPUs requested by running and pending workloads now."""
    forecasts: Mapping[str, DemandForecast]
    warm_targets: Mapping[str, int]
    idle_gpus: Mapping[str, float]
    """Per pool, GPUs on Ready nodes that no running workload uses: what the warm pool holds."""
    boosts: frozenset[tuple[str, str]]
    """(namespace, name) of workloads to boost."""
    cost_per_hour: Mapping[tuple[str, str], float]
    """(pool, capacity type) -> dollars per hour for the GPUs in use."""
    project_cost_per_hour: Mapping[str, float]
    budget_exceeded: frozenset[str]

    @property
    def states(self) -> dict[str, PoolState]:
        return {d.pool: d.state for d in self.decisions}


def _target(state: PoolState) -> PoolTarget:
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

    for workload in workloads:
        item = cost(workload)
        if item is not None:
            by_flavor[item[0]] += item[1]
    per_project = {
        project: sum(c[1] for w in items if (c := cost(w)) is not None)
        for project, items in by_project.items()
    }
    return by_flavor, per_project


def _retrack(
    policy_set: PolicySet,
    decisions: tuple[Decision, ...],
    reports: Sequence[DeadlineReport],
    *,
    now: float,
) -> tuple[Decision, ...]:
    """After a change, the thresholds' timers follow the risk under the new split.

    The next pass measures risk under the split just decided; carrying timers measured under
    the old one would make it disagree with this pass's status, and write for nothing.
    """
    settings = policy_set.policy.spec.risk
    out = []
    for decision in decisions:
        if decision.target == decision.previous:
            out.append(decision)
            continue
        pool_projects = {
            p.name
            for p in policy_set.projects
            if any(q.pool == decision.pool for q in p.spec.quotas)
        }
        worst = max((r.estimate.risk for r in reports if r.project in pool_projects), default=0.0)
        state = decision.state
        out.append(
            replace(
                decision,
                state=replace(
                    state,
                    raise_since=(state.raise_since if state.raise_since is not None else now)
                    if worst > settings.raise_threshold
                    else None,
                    lower_since=(state.lower_since if state.lower_since is not None else now)
                    if worst < settings.lower_threshold
                    else None,
                ),
            )
        )
    return tuple(out)


@dataclass(frozen=True)
class MixDecisions:
    """The decisions alone, with what they were made from: what the simulator needs."""

    decisions: tuple[Decision, ...]
    current: Rendered
    rendered: Rendered
    model: RiskModel


def decide_capacity(
    policy_set: PolicySet,
    *,
    states: Mapping[str, PoolState],
    workloads: Sequence[WorkloadView],
    node_claims: Sequence[NodeClaimView],
    history: History,
    now: float,
    namespace: str = names.DEFAULT_NAMESPACE,
    seed: int = 0,
    max_jobs: int | None = None,
) -> MixDecisions:
    """Each pool's decision and the render it leads to; `plan_capacity` adds the reports."""
    policy = policy_set.policy
    stats = pool_stats(policy.spec.pools, node_claims, now=now)
    previous = {
        pool.name: states.get(pool.name) or initial_state(policy_set, pool.name)
        for pool in policy.spec.pools
    }
    current = render(
        policy_set, targets={p: _target(s) for p, s in previous.items()}, namespace=namespace
    )
    snapshot = Snapshot(
        policy_set=policy_set,
        quotas=current.quotas,
        workloads=workloads,
        pools=stats,
        now=now,
        median_runtime=history.median_runtime,
        samples=policy.spec.risk.samples,
        seed=seed,
        max_jobs=max_jobs,
    )
    model = RiskModel(snapshot)
    decisions = tuple(
        decide_pool(
            policy_set,
            previous[pool.name],
            model.oracle,
            now=now,
            baseline={
                project: split.on_demand_gpus
                for (project, pool_name), split in current.quotas.items()
                if pool_name == pool.name
            },
            history_available=history.available,
            prefetch=model.prefetch,
        )
        for pool in policy.spec.pools
    )
    targets = {d.pool: _target(d.state) for d in decisions}
    rendered = render(policy_set, targets=targets, namespace=namespace)
    return MixDecisions(decisions, current, rendered, model)


def plan_capacity(
    policy_set: PolicySet,
    *,
    states: Mapping[str, PoolState],
    workloads: Sequence[WorkloadView],
    node_claims: Sequence[NodeClaimView],
    history: History,
    now: float,
    namespace: str = names.DEFAULT_NAMESPACE,
    seed: int = 0,
) -> CapacityPlan:
    policy = policy_set.policy
    mixed = decide_capacity(
        policy_set,
        states=states,
        workloads=workloads,
        node_claims=node_claims,
        history=history,
        now=now,
        namespace=namespace,
        seed=seed,
    )
    decisions, current, rendered, model = (
        mixed.decisions,
        mixed.current,
        mixed.rendered,
        mixed.model,
    )
    targets = {d.pool: _target(d.state) for d in decisions}
    snapshot = model.snapshot
    final = RiskModel(replace(snapshot, quotas=rendered.quotas))  # same world, the new split
    unchanged = {
        project.name: estimates
        for project in policy_set.projects
        if all(
            rendered.quotas.get((project.name, q.pool))
            == current.quotas.get((project.name, q.pool))
            for q in project.spec.quotas
        )
        and (estimates := model.current_estimates(project)) is not None
    }
    reports = tuple(final.deadlines(known=unchanged))
    decisions = _retrack(policy_set, decisions, reports, now=now)
    boosts: set[tuple[str, str]] = set()
    if policy.spec.risk.priority_boost:
        for report in reports:
            if report.estimate.risk > policy.spec.risk.raise_threshold:
                boosts.update(
                    (w.namespace, w.name) for w in deadline_workloads(final, report) if w.pending
                )
    running_by_pool: dict[str, float] = {p.name: 0.0 for p in policy.spec.pools}
    pending_by_pool: dict[str, float] = {p.name: 0.0 for p in policy.spec.pools}
    for project in policy_set.projects:
        quotas = {q.pool: q.nominal_gpus for q in project.spec.quotas}
        total = sum(quotas.values()) or 1
        for workload in final.by_project[project.name]:
            for pool, nominal in quotas.items():
                share = workload.gpus * nominal / total
                if workload.running:
                    running_by_pool[pool] += share
                else:
                    pending_by_pool[pool] += share
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
            max_gpus=pool.warm_pool.max_gpus,
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
    pending_counts = {
        name: sum(1 for w in items if w.pending) for name, items in final.by_project.items()
    }
    return CapacityPlan(
        decisions=decisions,
        targets=targets,
        rendered=rendered,
        deadlines=reports,
        waits=final.waits(),
        pending_gpus=final.pending_gpus(),
        pending_workloads=pending_counts,
        demand_gpus={p: running_by_pool[p] + pending_by_pool[p] for p in running_by_pool},
        forecasts=forecasts,
        warm_targets=warm,
        idle_gpus=idle,
        boosts=frozenset(boosts),
        cost_per_hour=by_flavor,
        project_cost_per_hour=per_project,
        budget_exceeded=exceeded,
    )
