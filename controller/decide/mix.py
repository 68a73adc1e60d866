"""How many on-demand GPUs each pool should have, and which at-risk projects they serve.

The decision per pool, on each pass:
- Freeze keeps the mix; Manual sets it from the override.
- Otherwise, when some deadline's miss probability has stayed above `raiseThreshold` for the
  evaluation window, each at-risk project gets the smallest on-demand share of its quota in the
  pool that brings every one of its deadlines under target (the lower of `1 - targetConfidence`
  and the raise threshold), found by bisection on the risk model. A project in one pool whose
  deadlines not even its whole quota on-demand brings under target gets no more than it holds:
  on-demand cannot save what waits for quota or is too late, and buying it only moves the mix
  (the pool holds and says TargetUnreachable). A project with quota in several pools may need
  on-demand in more than one, which one pool's search cannot see, so its share rises as far
  as its quota goes. Shares are capped by each
  project's budget, and their sum by the pool's ceiling; when the ceiling binds, the lowest tier
  is served last and deferred (its borrowing is cut), never the highest.
- When every deadline has stayed under `lowerThreshold` for the window, and the cooldown since
  the last change has passed, shares step back to the smallest that keeps every deadline under
  the lower threshold, so a step down does not trigger the next step up. Never on missing data:
  without Prometheus the controller holds.
- No step moves a pool by more than `maxStepGpus`, and each raise starts the evaluation window
  again, so the next step is taken only if risk is still above the threshold a window later.
- Nothing steps the pool back toward spot inside the cooldown, a raise that reshuffles shares
  included: what a project no longer needs stays in the pool until the cooldown has passed.

Pure: the risk model comes in as an oracle over candidate shares, the clock as `now`, the last
pass's state as data; the same function runs in the controller, `plan` and the simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from controller.api.policy_set import PolicySet
from controller.api.types import GpuPool, OverrideMode, RiskSettings, TrainingProject
from controller.capacity import pool_demands, resolve_mix, spot_allowed, whole_nodes_within

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
    last_lower: float | None = None
    """When the pool's on-demand GPUs last went down (by a Lower or a Raise that also gave
    back): a raise soon after it is a flap."""
    flaps: int = 0
    """Raises that came soon after a lower, net of those that did not: each doubles the
    cooldown before the next step back (see `cooldown_seconds`)."""


MAX_FLAPS = 4
"""The cooldown doubles at most this many times: 16 cooldowns (8 hours at the default)."""
FLAP_COOLDOWNS = 4
"""A raise within this many (current) cooldowns of the last lower is a flap: the lower came
too early, so the next one waits twice as long. Any other raise halves the wait back."""


def cooldown_seconds(settings: RiskSettings, state: PoolState) -> float:
    """The least time from a change of the mix to a step back toward spot: `cooldownSeconds`,
    doubled for each flap. A pool whose risk comes back soon after every lower (the same
    node bought and sold every hour) holds its on-demand longer instead, as a horizontal pod
    autoscaler's scale-down stabilization does; one whose lowers hold is back at the setting
    after as many calm raises."""
    return float(settings.cooldown_seconds * 2 ** min(max(state.flaps, 0), MAX_FLAPS))


def _count_flaps(
    decided: Decision, before: PoolState, *, settings: RiskSettings, now: float
) -> PoolState:
    """The state a Raise or Lower leaves, with its flap bookkeeping: a step down is
    remembered; a step up is a flap when it comes within `FLAP_COOLDOWNS` cooldowns of the
    last step down."""
    if decided.target < decided.previous:
        return replace(decided.state, last_lower=now)
    last = before.last_lower
    flap = last is not None and now - last < FLAP_COOLDOWNS * cooldown_seconds(settings, before)
    flaps = min(before.flaps + 1, MAX_FLAPS) if flap else max(before.flaps - 1, 0)
    return replace(decided.state, flaps=flaps)


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


def _quotas(policy_set: PolicySet, pool: str, only: Collection[str] | None = None) -> list[_Quota]:
    """The pool's projects the mix decides for (of those in `only`, when given)."""
    out = []
    raise_at = policy_set.policy.spec.risk.raise_threshold
    for project, quota in policy_set.quotas_in(pool):
        if only is not None and project.name not in only:
            continue
        nominal = quota.nominal_gpus
        if nominal == 0 or not project.spec.deadlines:
            continue
        if not spot_allowed(policy_set, project):
            continue  # all its quota is on-demand already; nothing to decide
        tier = policy_set.policy.tier(project.spec.tier)
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


def initial_state(policy_set: PolicySet, pool: str) -> PoolState:
    mix = {m.pool: m for m in resolve_mix(policy_set)}
    return PoolState(pool=pool, on_demand_gpus=mix[pool].on_demand_gpus)


def track_thresholds(
    state: PoolState, worst: float, settings: RiskSettings, *, now: float
) -> PoolState:
    """The thresholds' timers under the worst risk seen now: a timer starts when its threshold
    is crossed, keeps its start while the risk stays across, and stops when it comes back.
    The one place this rule lives (the decision and `plan`'s re-tracking after a change)."""
    return replace(
        state,
        raise_since=(state.raise_since if state.raise_since is not None else now)
        if worst > settings.raise_threshold
        else None,
        lower_since=(state.lower_since if state.lower_since is not None else now)
        if worst < settings.lower_threshold
        else None,
    )


@dataclass(frozen=True)
class _Pass:
    """What every step of one pool's decision reads: the pool's bounds, the risk under the
    current split, and the state with its timers tracked."""

    policy_set: PolicySet
    pool: GpuPool
    state: PoolState
    tracked: PoolState
    oracle: RiskOracle
    prefetch: Prefetch | None
    now: float
    floor: int
    ceiling: int
    fixed: int
    quotas: list[_Quota]
    current: Mapping[str, int]
    risk_now: Mapping[str, Mapping[str, float]]
    worst: float
    history_available: bool

    @property
    def settings(self) -> RiskSettings:
        return self.policy_set.policy.spec.risk

    @property
    def previous(self) -> int:
        return self.state.on_demand_gpus

    @property
    def cooldown(self) -> float:
        return cooldown_seconds(self.settings, self.state)

    @property
    def cooled(self) -> bool:
        """The cooldown since the last change of the mix has passed (or there was none)."""
        last = self.state.last_change
        return last is None or self.now - last >= self.cooldown

    @property
    def may_give_back(self) -> bool:
        return self.cooled and self.history_available

    @property
    def risk_inputs(self) -> dict[str, float]:
        return {
            "worst_risk": self.worst,
            "raise_threshold": self.settings.raise_threshold,
            "lower_threshold": self.settings.lower_threshold,
        }

    def decision(
        self,
        action: Action,
        reason: Reason,
        target: int,
        message: str,
        new_state: PoolState,
        **inputs: float,
    ) -> Decision:
        return Decision(
            pool=self.pool.name,
            action=action,
            reason=reason,
            previous=self.previous,
            target=target,
            message=message,
            inputs={"floor": self.floor, "ceiling": self.ceiling, "fixed": self.fixed, **inputs},
            state=new_state,
        )

    def hold(self, reason: Reason, message: str) -> Decision:
        return self.decision(
            Action.HOLD, reason, self.previous, message, self.tracked, **self.risk_inputs
        )


def decide_pool(
    policy_set: PolicySet,
    state: PoolState,
    oracle: RiskOracle,
    *,
    now: float,
    baseline: Mapping[str, int] | None = None,
    history_available: bool = True,
    prefetch: Prefetch | None = None,
) -> Decision:
    """One pool's decision: an override wins; else raise, lower or give back, each after its
    window, cooldown and data allow it; else hold.

    `baseline`: each project's on-demand GPUs in the pool under the current split.
    `prefetch`, when given, is told each round's questions before they are asked one by one,
    so the risk model can answer them in one batch; the answers are the same either way.
    """
    overridden = _override(policy_set, state, now=now)
    if overridden is not None:
        return overridden
    step = _measure(
        policy_set,
        state,
        oracle,
        now=now,
        baseline=baseline,
        history_available=history_available,
        prefetch=prefetch,
    )
    if step.tracked.raise_since is not None:
        decided = _raise_step(step)
    elif step.tracked.lower_since is not None and step.previous > step.floor:
        decided = _lower_step(step)
    else:
        given_back = _give_back_step(step) if step.may_give_back and state.assignments else None
        decided = given_back or step.hold(Reason.STEADY, "risk within thresholds")
    if decided.action not in (Action.RAISE, Action.LOWER) or decided.target == decided.previous:
        return decided
    return replace(decided, state=_count_flaps(decided, state, settings=step.settings, now=now))


def _bounds(policy_set: PolicySet, pool: GpuPool) -> tuple[int, int, int]:
    """(fixed, floor, ceiling) of a pool's on-demand GPUs."""
    demand = pool_demands(policy_set)[pool.name]
    fixed = demand.on_demand_only_gpus
    floor = max(pool.on_demand.floor_gpus, fixed)
    ceiling = max(min(pool.on_demand.ceiling_gpus, demand.total_gpus), floor)
    return fixed, floor, ceiling


def _override(policy_set: PolicySet, state: PoolState, *, now: float) -> Decision | None:
    """Freeze and Manual win over everything else."""
    override = policy_set.policy.spec.override
    if override.mode not in (OverrideMode.FREEZE, OverrideMode.MANUAL):
        return None
    pool = policy_set.policy.pool(state.pool)
    assert pool is not None, "states are kept only for pools of the policy"
    fixed, floor, ceiling = _bounds(policy_set, pool)
    previous = state.on_demand_gpus
    target, action, message, new_state = previous, Action.FREEZE, "", state
    if override.mode is OverrideMode.FREEZE:
        message = "override mode Freeze keeps the mix"
    else:
        manual = {m.pool: m.gpus for m in override.on_demand_gpus}
        # Clamped as the renderer clamps it, so the mix read back next pass is the same, and
        # in whole nodes as every split is: 4 of an 8-GPU node would leave a node-wide pod
        # set no flavor to fit, and NodePool limits of 8 + 8 over a ceiling of 8.
        asked = min(max(manual.get(pool.name, previous), floor), ceiling)
        target = whole_nodes_within(asked, pool.gpus_per_node, ceiling)
        action, message = (
            Action.MANUAL,
            f"override mode Manual sets {asked}"
            + (f" ({target} in whole nodes of {pool.gpus_per_node})" if target != asked else ""),
        )
        new_state = replace(
            state,
            on_demand_gpus=target,
            assignments={},
            last_change=now if target != previous else state.last_change,
        )
    return Decision(
        pool=pool.name,
        action=action,
        reason=Reason.OVERRIDE,
        previous=previous,
        target=target,
        message=message,
        inputs={"floor": floor, "ceiling": ceiling, "fixed": fixed},
        state=new_state,
    )


def _measure(
    policy_set: PolicySet,
    state: PoolState,
    oracle: RiskOracle,
    *,
    now: float,
    baseline: Mapping[str, int] | None,
    history_available: bool,
    prefetch: Prefetch | None,
) -> _Pass:
    """Risk under the current split, per project and deadline, and the timers it moves."""
    pool = policy_set.policy.pool(state.pool)
    assert pool is not None, "states are kept only for pools of the policy"
    fixed, floor, ceiling = _bounds(policy_set, pool)
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
    risk_now: dict[str, dict[str, float]] = {}
    for q in quotas:
        for name, risk in oracle(q.project.name, pool.name, current[q.project.name]).items():
            risk_now.setdefault(q.project.name, {})[name] = risk
    worst = max((r for risks in risk_now.values() for r in risks.values()), default=0.0)
    return _Pass(
        policy_set=policy_set,
        pool=pool,
        state=state,
        tracked=track_thresholds(state, worst, policy_set.policy.spec.risk, now=now),
        oracle=oracle,
        prefetch=prefetch,
        now=now,
        floor=floor,
        ceiling=ceiling,
        fixed=fixed,
        quotas=quotas,
        current=current,
        risk_now=risk_now,
        worst=worst,
        history_available=history_available,
    )


def _window_hold(step: _Pass, since: float | None, crossed: str) -> Decision | None:
    """A hold while a threshold's evaluation window runs (`crossed`: "above 0.2", say)."""
    assert since is not None
    window = step.settings.evaluation_window_seconds
    if step.now - since >= window:
        return None
    return step.hold(
        Reason.EVALUATION_WINDOW,
        f"risk {step.worst:.2f} {crossed} for {step.now - since:.0f}s of {window}s",
    )


def _raise_step(step: _Pass) -> Decision:
    """Risk above the raise threshold: wait out the window, then raise."""
    crossed = f"above {step.settings.raise_threshold}"
    return _window_hold(step, step.tracked.raise_since, crossed) or _raise(step)


def _lower_step(step: _Pass) -> Decision:
    """Risk under the lower threshold: after the window and the cooldown, and only on
    current data, step down to the least on-demand that keeps it there."""
    settings, state = step.settings, step.state
    waiting = _window_hold(step, step.tracked.lower_since, f"below {settings.lower_threshold}")
    if waiting is not None:
        return waiting
    if not step.cooled:
        return step.hold(
            Reason.COOLDOWN,
            f"last change {step.now - (state.last_change or 0):.0f}s ago, cooldown "
            f"{step.cooldown:.0f}s"
            + (f" ({settings.cooldown_seconds}s doubled {state.flaps}x)" if state.flaps else ""),
        )
    if not step.history_available:
        return step.hold(
            Reason.PROMETHEUS_UNAVAILABLE, "Prometheus unreachable: never lower on missing data"
        )
    current = step.current
    shares = {
        project: share
        for project, (share, _) in _smallest_shares(
            step.oracle,
            step.prefetch,
            step.pool.name,
            {
                q.project.name: (0, q.nominal, lambda _: settings.lower_threshold * 0.999)
                for q in step.quotas
                if current[q.project.name] > 0
            },
        ).items()
    }
    shares.update({q.project.name: 0 for q in step.quotas if current[q.project.name] == 0})
    shares = {p: min(s, current[p]) for p, s in shares.items()}
    target = _stepped_down(step, step.fixed + sum(shares.values()))
    if target == step.previous:
        return step.hold(Reason.STEADY, "nothing to give back")
    return step.decision(
        Action.LOWER,
        Reason.RISK_CLEARED,
        target,
        f"risk {step.worst:.2f} below {settings.lower_threshold}: "
        f"{step.previous} -> {target} on-demand",
        replace(
            step.tracked,
            on_demand_gpus=target,
            assignments=_fit(shares, step.quotas, target - step.fixed),
            last_change=step.now,
            deferred_tiers=(),
        ),
        **step.risk_inputs,
    )


def _give_back_step(step: _Pass) -> Decision | None:
    """Between the thresholds: projects safe again hand back what they no longer need."""
    state = step.state
    reduced = _give_back(
        step.oracle,
        step.prefetch,
        step.pool.name,
        quotas=step.quotas,
        held=state.assignments,
        risk_now=step.risk_now,
        lower_threshold=step.settings.lower_threshold,
    )
    held = {p: s for p, s in {**state.assignments, **reduced}.items() if s > 0}
    target = _stepped_down(step, step.fixed + sum(held.values()))
    if target >= step.previous:
        return None
    released = ", ".join(sorted(p for p in reduced if reduced[p] < state.assignments[p]))
    return step.decision(
        Action.LOWER,
        Reason.RISK_CLEARED,
        target,
        f"{released} safe again: {step.previous} -> {target} on-demand",
        replace(
            step.tracked,
            on_demand_gpus=target,
            assignments=_fit(held, step.quotas, target - step.fixed),
            last_change=step.now,
        ),
        **step.risk_inputs,
    )


def _stepped_down(step: _Pass, needed: int) -> int:
    """A lower target: never under the floor, at most one step down, in whole nodes."""
    target = max(step.floor, needed, step.previous - step.settings.max_step_gpus)
    return min(whole_nodes_within(target, step.pool.gpus_per_node, step.ceiling), step.previous)


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
    return _fit(shares, _quotas(policy_set, pool, only=shares.keys()), room) if shares else {}


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


def _raise(step: _Pass) -> Decision:
    """Each at-risk project gets the smallest share that meets its targets (capped by its
    budget), held shares stay, projects safe again give theirs back; the total is stepped,
    bounded by the floor and ceiling, in whole nodes."""
    policy_set, state, oracle = step.policy_set, step.tracked, step.oracle
    quotas, current, risk_now = step.quotas, step.current, step.risk_now
    now, floor, ceiling, fixed = step.now, step.floor, step.ceiling, step.fixed
    prefetch, inputs, decision = step.prefetch, step.risk_inputs, step.decision
    settings, previous = step.settings, step.previous
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
    if step.may_give_back:
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
            if len(q.project.spec.quotas) == 1:
                # Not even its whole quota on-demand meets the target: buy none of it. (A
                # project with quota in other pools may need on-demand in several at once, which
                # no one pool's search can see: its share here rises as far as it goes.)
                share = current[q.project.name]
        cap = _budget_cap(policy_set, q, state.pool)
        if share > cap:
            budget_bound.append(q.project.name)
            share = max(cap, current[q.project.name])
        wanted[q.project.name] = max(share, wanted.get(q.project.name, 0))
    wanted = {p: s for p, s in wanted.items() if s > 0}
    needed = fixed + sum(wanted.values())
    target = min(max(needed, floor), ceiling, previous + settings.max_step_gpus)
    target = max(target, previous - settings.max_step_gpus)
    if target < previous and not step.may_give_back:
        # What projects safe again hand back stays in the pool until the cooldown has passed:
        # a step back toward spot that soon after a change is one the next pass undoes.
        target = previous
    per_node = policy_set.policy.pool(state.pool).gpus_per_node  # type: ignore[union-attr]
    target = whole_nodes_within(target, per_node, ceiling)
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
