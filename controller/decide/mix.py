"""How many on-demand GPUs each pool should have, and which at-risk projects they serve.

The decision per pool, on each pass:
- Freeze keeps the mix; Manual sets it from the override.
- Otherwise, when some deadline's miss probability has stayed above `raiseThreshold` for the
  evaluation window, each at-risk project gets the smallest on-demand share of its quota in the
  pool that brings every one of its deadlines under target (the lower of `1 - targetConfidence`
  and the raise threshold), found by bisection on the risk model. Shares are capped by each
  project's budget, and their sum by the pool's ceiling; when the ceiling binds, the lowest tier
  is served last and deferred (its borrowing is cut), never the highest.
- When every deadline has stayed under `lowerThreshold` for the window, and the cooldown since
  the last change has passed, shares step back to the smallest that keeps every deadline under
  the lower threshold, so a step down does not trigger the next step up. Never on missing data:
  without Prometheus the controller holds.
- No step moves a pool by more than `maxStepGpus`, and each raise starts the evaluation window
  again, so the next step is taken only if risk is still above the threshold a window later.

Pure: the risk model comes in as an oracle over candidate shares, the clock as `now`, the last
pass's state as data; the same function runs in the controller, `plan` and the simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from controller.api.policy_set import PolicySet
from controller.api.types import OverrideMode, TrainingProject
from controller.capacity import pool_demands, resolve_mix, spot_allowed

HOURS_PER_MONTH = 730.0

RiskOracle = Callable[[str, str, int], Mapping[str, float]]
"""(project, pool, on-demand GPUs of the project in the pool) -> risk per deadline name."""


class Action(StrEnum):
    """What one pass did to a pool's on-demand GPUs (status `lastDecision.action`)."""

    RAISE = "Raise"
    LOWER = "Lower"
    HOLD = "Hold"
    FREEZE = "Freeze"
    MANUAL = "Manual"


class Reason(StrEnum):
    """Why (status `lastDecision.reason`, the `reason` label of the decision counter)."""

    RISK_ABOVE_THRESHOLD = "RiskAboveThreshold"
    RISK_CLEARED = "RiskCleared"
    EVALUATION_WINDOW = "EvaluationWindow"
    COOLDOWN = "Cooldown"
    STEADY = "Steady"
    CEILING_BINDS = "CeilingBinds"
    BUDGET_BINDS = "BudgetBinds"
    PROMETHEUS_UNAVAILABLE = "PrometheusUnavailable"
    OVERRIDE = "Override"
    TARGET_UNREACHABLE = "TargetUnreachable"


@dataclass(frozen=True)
class PoolState:
    """What a pool's decision carries from one pass to the next (kept in the policy's status)."""

    pool: str
    on_demand_gpus: int
    assignments: Mapping[str, int] = field(default_factory=dict)
    """On-demand GPUs held for at-risk projects, by project."""
    raise_since: float | None = None
    lower_since: float | None = None
    last_change: float | None = None
    deferred_tiers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    pool: str
    action: Action
    reason: Reason
    previous: int
    target: int
    message: str
    inputs: Mapping[str, float]
    state: PoolState

    @property
    def changed(self) -> bool:
        """The one rule for "did this decision change the mix", which the log line, the
        Events, the decision counter and both statuses' lastDecision all follow: the pool's
        on-demand GPUs moved, or a Raise or Lower moved them between projects."""
        return self.target != self.previous or self.action in (Action.RAISE, Action.LOWER)


@dataclass(frozen=True)
class _Quota:
    project: TrainingProject
    nominal: int
    tier_priority: int
    targets: Mapping[str, float]


def _quotas(policy_set: PolicySet, pool: str) -> list[_Quota]:
    out = []
    for project in policy_set.projects:
        if not spot_allowed(policy_set, project):
            continue  # all its quota is on-demand already; nothing to decide
        nominal = sum(q.nominal_gpus for q in project.spec.quotas if q.pool == pool)
        if nominal == 0 or not project.spec.deadlines:
            continue
        tier = policy_set.policy.tier(project.spec.tier)
        raise_at = policy_set.policy.spec.risk.raise_threshold
        targets = {d.name: min(1 - d.target_confidence, raise_at) for d in project.spec.deadlines}
        out.append(_Quota(project, nominal, tier.priority if tier else 0, targets))
    return out


Question = tuple[str, str, int]
Prefetch = Callable[[Sequence[Question]], None]


def _search(low: int, nominal: int) -> Generator[int, bool, tuple[int, bool]]:
    """Bisection for the smallest share in [low, nominal] that meets the targets.

    A generator: it yields the share to test and is sent whether it met them, so many
    projects' searches can run in lockstep with one batched risk estimate per round. Risk
    falls as the share grows (the model uses common random numbers), so bisection works.
    Returns the share and whether any share met the targets.
    """
    if (yield low):
        return low, True
    high = nominal
    if not (yield high):
        return high, False
    while high - low > 1:
        mid = (low + high) // 2
        if (yield mid):
            high = mid
        else:
            low = mid
    return high, True


def _smallest_shares(
    oracle: RiskOracle,
    prefetch: Prefetch | None,
    pool: str,
    searches: Mapping[str, tuple[int, int, Callable[[str], float]]],
) -> dict[str, tuple[int, bool]]:
    """Run each project's search (low, nominal, limit per deadline) in lockstep."""
    results: dict[str, tuple[int, bool]] = {}
    running: dict[str, Generator[int, bool, tuple[int, bool]]] = {}
    asked: dict[str, int] = {}
    for project, (low, nominal, _) in searches.items():
        search = _search(low, nominal)
        running[project] = search
        asked[project] = next(search)
    while asked:
        if prefetch is not None:
            prefetch([(project, pool, share) for project, share in asked.items()])
        following: dict[str, int] = {}
        for project, share in asked.items():
            limit = searches[project][2]
            met = all(risk <= limit(name) for name, risk in oracle(project, pool, share).items())
            try:
                following[project] = running[project].send(met)
            except StopIteration as done:
                results[project] = done.value
        asked = following
    return results


def _budget_cap(policy_set: PolicySet, quota: _Quota, pool: str) -> int:
    """The most on-demand GPUs the project's budget pays for in this pool, at full use."""
    budget = quota.project.spec.budget
    if budget is None:
        return quota.nominal
    policy = policy_set.policy
    gpu_pool = policy.pool(pool)
    assert gpu_pool is not None
    hourly = budget.dollars_per_month / HOURS_PER_MONTH
    other = 0.0
    for q in quota.project.spec.quotas:
        if q.pool == pool:
            continue
        other_pool = policy.pool(q.pool)
        if other_pool is not None:
            other += q.nominal_gpus * other_pool.prices.spot_per_gpu_hour
    spot, on_demand = gpu_pool.prices.spot_per_gpu_hour, gpu_pool.prices.on_demand_per_gpu_hour
    room = hourly - other - quota.nominal * spot
    if on_demand <= spot:
        return quota.nominal
    return max(0, min(quota.nominal, int(room // (on_demand - spot))))


def whole_nodes(gpus: int, per_node: int, ceiling: int) -> int:
    """On-demand GPUs rounded up to whole nodes, but never above the ceiling.

    NodePool limits are whole nodes: a pool split 12 on-demand / 36 spot on 8-GPU nodes would
    get limits of 16 and 40, and could run 56 GPUs under a ceiling of 48. With the on-demand
    side in whole nodes, the spot side is whole too wherever the pool's total is.
    """
    return min(-(-gpus // per_node) * per_node, max(ceiling, gpus))


def initial_state(policy_set: PolicySet, pool: str) -> PoolState:
    mix = {m.pool: m for m in resolve_mix(policy_set)}
    return PoolState(pool=pool, on_demand_gpus=mix[pool].on_demand_gpus)


def decide_pool(  # noqa: PLR0915 - split into named steps in the core cleanup
    policy_set: PolicySet,
    state: PoolState,
    oracle: RiskOracle,
    *,
    now: float,
    baseline: Mapping[str, int] | None = None,
    history_available: bool = True,
    prefetch: Prefetch | None = None,
) -> Decision:
    """`baseline`: each project's on-demand GPUs in the pool under the current split.

    `prefetch`, when given, is told each round's questions before they are asked one by one,
    so the risk model can answer them in one batch; the answers are the same either way.
    """
    policy = policy_set.policy
    settings = policy.spec.risk
    pool = policy.pool(state.pool)
    assert pool is not None, "states are kept only for pools of the policy"
    fixed = pool_demands(policy_set)[pool.name].on_demand_only_gpus
    floor = max(pool.on_demand.floor_gpus, fixed)
    ceiling = max(
        min(pool.on_demand.ceiling_gpus, pool_demands(policy_set)[pool.name].total_gpus), floor
    )
    override = policy.spec.override
    previous = state.on_demand_gpus

    def decision(
        action: Action,
        reason: Reason,
        target: int,
        message: str,
        new_state: PoolState,
        **inputs: float,
    ) -> Decision:
        return Decision(
            pool=pool.name,
            action=action,
            reason=reason,
            previous=previous,
            target=target,
            message=message,
            inputs={"floor": floor, "ceiling": ceiling, "fixed": fixed, **inputs},
            state=new_state,
        )

    if override.mode is OverrideMode.FREEZE:
        return decision(
            Action.FREEZE, Reason.OVERRIDE, previous, "override mode Freeze keeps the mix", state
        )
    if override.mode is OverrideMode.MANUAL:
        manual = {m.pool: m.gpus for m in override.on_demand_gpus}
        # Clamped as the renderer clamps it, so the mix read back next pass is the same.
        target = min(max(manual.get(pool.name, previous), floor), ceiling)
        changed = target != previous
        return decision(
            Action.MANUAL,
            Reason.OVERRIDE,
            target,
            f"override mode Manual sets {target}",
            replace(
                state,
                on_demand_gpus=target,
                assignments={},
                last_change=now if changed else state.last_change,
            ),
        )

    quotas = _quotas(policy_set, pool.name)
    current = {
        q.project.name: min(
            max(state.assignments.get(q.project.name, 0), (baseline or {}).get(q.project.name, 0)),
            q.nominal,
        )
        for q in quotas
    }
    if prefetch is not None:
        prefetch([(q.project.name, pool.name, current[q.project.name]) for q in quotas])
    risks = {
        (q.project.name, name): risk
        for q in quotas
        for name, risk in oracle(q.project.name, pool.name, current[q.project.name]).items()
    }
    worst = max(risks.values(), default=0.0)
    risk_now: dict[str, dict[str, float]] = {}
    for (project_name, deadline_name), risk in risks.items():
        risk_now.setdefault(project_name, {})[deadline_name] = risk
    cooled = state.last_change is None or now - state.last_change >= settings.cooldown_seconds
    may_give_back = cooled and history_available
    raise_since = (
        (now if state.raise_since is None else state.raise_since)
        if worst > settings.raise_threshold
        else None
    )
    lower_since = (
        (now if state.lower_since is None else state.lower_since)
        if worst < settings.lower_threshold
        else None
    )
    tracked = replace(state, raise_since=raise_since, lower_since=lower_since)
    window = settings.evaluation_window_seconds
    inputs = {
        "worst_risk": worst,
        "raise_threshold": settings.raise_threshold,
        "lower_threshold": settings.lower_threshold,
    }

    if raise_since is not None:
        if now - raise_since < window:
            return decision(
                Action.HOLD,
                Reason.EVALUATION_WINDOW,
                previous,
                f"risk {worst:.2f} above {settings.raise_threshold} for "
                f"{now - raise_since:.0f}s of {window}s",
                tracked,
                **inputs,
            )
        return _raise(
            policy_set,
            tracked,
            oracle,
            quotas,
            current,
            now=now,
            floor=floor,
            ceiling=ceiling,
            fixed=fixed,
            decision=decision,
            inputs=inputs,
            prefetch=prefetch,
            risk_now=risk_now,
            may_give_back=may_give_back,
        )

    if lower_since is not None and previous > floor:
        if now - lower_since < window:
            return decision(
                Action.HOLD,
                Reason.EVALUATION_WINDOW,
                previous,
                f"risk {worst:.2f} below {settings.lower_threshold} for "
                f"{now - lower_since:.0f}s of {window}s",
                tracked,
                **inputs,
            )
        if state.last_change is not None and now - state.last_change < settings.cooldown_seconds:
            return decision(
                Action.HOLD,
                Reason.COOLDOWN,
                previous,
                f"last change {now - state.last_change:.0f}s ago, cooldown "
                f"{settings.cooldown_seconds}s",
                tracked,
                **inputs,
            )
        if not history_available:
            return decision(
                Action.HOLD,
                Reason.PROMETHEUS_UNAVAILABLE,
                previous,
                "Prometheus unreachable: never lower on missing data",
                tracked,
                **inputs,
            )
        shares = {
            project: share
            for project, (share, _) in _smallest_shares(
                oracle,
                prefetch,
                pool.name,
                {
                    q.project.name: (0, q.nominal, lambda _: settings.lower_threshold * 0.999)
                    for q in quotas
                    if current[q.project.name] > 0
                },
            ).items()
        }
        shares.update({q.project.name: 0 for q in quotas if current[q.project.name] == 0})
        shares = {p: min(s, current[p]) for p, s in shares.items()}
        target = max(floor, fixed + sum(shares.values()), previous - settings.max_step_gpus)
        target = min(whole_nodes(target, pool.gpus_per_node, ceiling), previous)
        if target == previous:
            return decision(
                Action.HOLD, Reason.STEADY, previous, "nothing to give back", tracked, **inputs
            )
        kept = _fit(shares, quotas, target - fixed)
        return decision(
            Action.LOWER,
            Reason.RISK_CLEARED,
            target,
            f"risk {worst:.2f} below {settings.lower_threshold}: {previous} -> {target} on-demand",
            replace(
                tracked, on_demand_gpus=target, assignments=kept, last_change=now, deferred_tiers=()
            ),
            **inputs,
        )
    if may_give_back and state.assignments:
        reduced = _give_back(
            oracle,
            prefetch,
            pool.name,
            quotas=quotas,
            held=state.assignments,
            risk_now=risk_now,
            lower_threshold=settings.lower_threshold,
        )
        held = {p: s for p, s in {**state.assignments, **reduced}.items() if s > 0}
        target = max(floor, fixed + sum(held.values()), previous - settings.max_step_gpus)
        target = min(whole_nodes(target, pool.gpus_per_node, ceiling), previous)
        if target < previous:
            released = ", ".join(sorted(p for p in reduced if reduced[p] < state.assignments[p]))
            return decision(
                Action.LOWER,
                Reason.RISK_CLEARED,
                target,
                f"{released} safe again: {previous} -> {target} on-demand",
                replace(
                    tracked,
                    on_demand_gpus=target,
                    assignments=_fit(held, quotas, target - fixed),
                    last_change=now,
                ),
                **inputs,
            )
    return decision(
        Action.HOLD, Reason.STEADY, previous, "risk within thresholds", tracked, **inputs
    )


def _give_back(
    oracle: RiskOracle,
    prefetch: Prefetch | None,
    pool: str,
    *,
    quotas: list[_Quota],
    held: Mapping[str, int],
    risk_now: Mapping[str, Mapping[str, float]],
    lower_threshold: float,
) -> dict[str, int]:
    """Smaller shares for projects holding on-demand whose every deadline is now under the
    lower threshold: the smallest share that keeps them there, never more than they hold."""
    relaxed = [
        q
        for q in quotas
        if held.get(q.project.name, 0) > 0
        and max(risk_now.get(q.project.name, {}).values(), default=0.0) < lower_threshold
    ]
    found = _smallest_shares(
        oracle,
        prefetch,
        pool,
        {
            q.project.name: (0, held[q.project.name], lambda _: lower_threshold * 0.999)
            for q in relaxed
        },
    )
    return {project: min(share, held[project]) for project, (share, _) in found.items()}


def fit_shares(
    policy_set: PolicySet, pool: str, shares: Mapping[str, int], room: int
) -> dict[str, int]:
    """Held shares trimmed to `room` on-demand GPUs, the highest tier served first (what a
    shift that waits for work to drain can render of them now)."""
    return _fit(shares, _quotas(policy_set, pool), room)


def _fit(shares: Mapping[str, int], quotas: list[_Quota], room: int) -> dict[str, int]:
    """Shares trimmed to `room` GPUs, the highest tier served first."""
    out: dict[str, int] = {}
    left = max(room, 0)
    for q in sorted(quotas, key=lambda q: (-q.tier_priority, q.project.name)):
        share = min(shares.get(q.project.name, 0), left)
        if share:
            out[q.project.name] = share
        left -= share
    return out


def _raise(
    policy_set: PolicySet,
    state: PoolState,
    oracle: RiskOracle,
    quotas: list[_Quota],
    current: Mapping[str, int],
    *,
    now: float,
    floor: int,
    ceiling: int,
    fixed: int,
    decision: Callable[..., Decision],
    inputs: Mapping[str, float],
    prefetch: Prefetch | None,
    risk_now: Mapping[str, Mapping[str, float]],
    may_give_back: bool,
) -> Decision:
    settings = policy_set.policy.spec.risk
    previous = state.on_demand_gpus
    at_risk = [
        q
        for q in quotas
        if any(
            risk > q.targets.get(name, settings.raise_threshold)
            for name, risk in risk_now.get(q.project.name, {}).items()
        )
    ]
    # Held shares stay; projects safe again give theirs back; at-risk ones get what they need.
    wanted: dict[str, int] = {
        q.project.name: state.assignments[q.project.name]
        for q in quotas
        if state.assignments.get(q.project.name, 0) > 0
    }
    if may_give_back:
        wanted.update(
            _give_back(
                oracle,
                prefetch,
                state.pool,
                quotas=quotas,
                held=wanted,
                risk_now=risk_now,
                lower_threshold=settings.lower_threshold,
            )
        )
    unreachable: list[str] = []
    budget_bound: list[str] = []
    found = _smallest_shares(
        oracle,
        prefetch,
        state.pool,
        {
            q.project.name: (current[q.project.name], q.nominal, q.targets.__getitem__)
            for q in at_risk
        },
    )
    for q in at_risk:
        share, reachable = found[q.project.name]
        if not reachable:
            unreachable.append(q.project.name)
        cap = _budget_cap(policy_set, q, state.pool)
        if share > cap:
            budget_bound.append(q.project.name)
            share = max(cap, current[q.project.name])
        wanted[q.project.name] = max(share, wanted.get(q.project.name, 0))
    wanted = {p: s for p, s in wanted.items() if s > 0}
    needed = fixed + sum(wanted.values())
    target = min(max(needed, floor), ceiling, previous + settings.max_step_gpus)
    target = max(target, previous - settings.max_step_gpus)
    per_node = policy_set.policy.pool(state.pool).gpus_per_node  # type: ignore[union-attr]
    target = whole_nodes(target, per_node, ceiling)
    ceiling_binds = needed > ceiling
    assignments = _fit(wanted, quotas, target - fixed)
    deferred: tuple[str, ...] = ()
    if ceiling_binds:
        tiers = sorted(policy_set.policy.spec.tiers, key=lambda t: t.priority)
        if len(tiers) > 1:
            deferred = (tiers[0].name,)
    if target == previous and assignments == dict(state.assignments):
        reason = (
            Reason.CEILING_BINDS
            if ceiling_binds
            else Reason.BUDGET_BINDS
            if budget_bound
            else Reason.TARGET_UNREACHABLE
            if unreachable
            else Reason.STEADY
        )
        return decision(
            Action.HOLD,
            reason,
            previous,
            f"at risk but no more on-demand to give ({reason})",
            replace(state, deferred_tiers=deferred),
            needed=needed,
            **inputs,
        )
    reason = (
        Reason.CEILING_BINDS
        if ceiling_binds
        else Reason.BUDGET_BINDS
        if budget_bound
        else Reason.RISK_ABOVE_THRESHOLD
    )
    detail = ", ".join(f"{p} {s}" for p, s in sorted(assignments.items()))
    if target < previous and reason == Reason.RISK_ABOVE_THRESHOLD:
        # Projects safe again hand back more than the ones at risk take: the pool goes down,
        # and says so (a step down counted as a raise would mislead the dashboards).
        action, reason = Action.LOWER, Reason.RISK_CLEARED
    else:
        action = Action.RAISE
    return decision(
        action,
        reason,
        target,
        f"risk {inputs['worst_risk']:.2f} above {settings.raise_threshold}"
        + (", others safe again" if action == Action.LOWER else "")
        + f": {previous} -> {target} on-demand (needed {needed}; for {detail or 'no project'})"
        + (f"; budget binds for {', '.join(budget_bound)}" if budget_bound else "")
        + (f"; ceiling {ceiling} binds, tier {deferred[0]} deferred" if deferred else ""),
        # The window starts again: the next step waits to see what this one changed, rather
        # than walking the pool to its ceiling on the controller's own write events.
        replace(
            state,
            on_demand_gpus=target,
            assignments=assignments,
            last_change=now,
            raise_since=now,
            deferred_tiers=deferred,
        ),
        needed=needed,
        **inputs,
    )
