"""How a pool's GPUs divide between spot and on-demand, and between projects.

Pool arithmetic that rendering, risk, the decisions and the replay all build on, so it sits
below all four (the layering is checked by import-linter in `make lint`).

The mix of a pool is one number, its on-demand GPUs; everything else follows from it: the
on-demand and spot NodePool limits, and each project's quota on the `<pool>-on-demand` and
`<pool>-spot` flavors. Quota that cannot run on spot (tier reservations, projects or tiers that
forbid spot) is on-demand first; the rest of the on-demand GPUs are shared among spot-capable
projects in proportion to their nominal quota, by largest remainder so the parts always add up.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from controller.api.policy_set import PolicySet
from controller.api.types import GpuPool, OverrideMode, PoolMix, PoolQuota, TrainingProject


@dataclass(frozen=True)
class PoolDemand:
    """What the policy asks of one pool."""

    pool: str
    total_gpus: int
    """Projects' nominal quotas plus tier reservations: the pool's GPUs under the mix."""
    on_demand_only_gpus: int
    """The part of total_gpus that must be on-demand."""


@dataclass(frozen=True)
class PoolTarget:
    """A decided mix for one pool: its on-demand GPUs, who they are held for, who is deferred."""

    on_demand_gpus: int
    assignments: Mapping[str, int] = field(default_factory=dict)
    """On-demand GPUs held for at-risk projects before the rest is shared in proportion."""
    deferred_tiers: tuple[str, ...] = ()
    """Tiers whose projects may not borrow in the pool while its ceiling binds."""
    pod_sets: Mapping[str, int] = field(default_factory=dict)
    """Per project, its widest pending pod set: the split keeps one flavor wide enough for it."""
    spot_gpus: int | None = None
    """The spot GPUs to render, when less than the rest of the pool: while on-demand is given
    back, spot grows only as on-demand work drains (`controller.decide.shift`)."""
    nodepool_gpus: Mapping[str, int] = field(default_factory=dict)
    """Per capacity type, GPUs its NodePool limit must allow even where its quota is less:
    admitted work on a side whose quota a shift lowered still needs its nodes."""


@dataclass(frozen=True)
class FlavorQuota:
    """One project's quota on one pool, split between the two capacity types."""

    project: str
    pool: str
    spot_gpus: int
    on_demand_gpus: int
    spot_borrowing_limit: int | None
    on_demand_borrowing_limit: int | None
    spot_lending_limit: int | None
    on_demand_lending_limit: int | None


def spot_allowed(policy_set: PolicySet, project: TrainingProject) -> bool:
    tier = policy_set.policy.tier(project.spec.tier)
    return project.spec.allow_spot and (tier is None or tier.allow_spot)


_LAST_DEMANDS: list[tuple[PolicySet, dict[str, PoolDemand]]] = []
"""The last policy set's demands, by identity: a pass asks for them several times (a policy
set is immutable, and the next pass usually hands the same one)."""


def pool_demands(policy_set: PolicySet) -> dict[str, PoolDemand]:
    last = _LAST_DEMANDS[-1] if _LAST_DEMANDS else None
    if last is not None and last[0] is policy_set:
        return dict(last[1])
    found = _pool_demands(policy_set)
    _LAST_DEMANDS[:] = [(policy_set, found)]
    return dict(found)


def _pool_demands(policy_set: PolicySet) -> dict[str, PoolDemand]:
    total: dict[str, int] = {p.name: 0 for p in policy_set.policy.spec.pools}
    fixed: dict[str, int] = dict.fromkeys(total, 0)
    for tier in policy_set.policy.spec.tiers:
        for reservation in tier.reserved:
            total[reservation.pool] += reservation.gpus
            fixed[reservation.pool] += reservation.gpus
    for project in policy_set.projects:
        spot_ok = spot_allowed(policy_set, project)
        for quota in project.spec.quotas:
            total[quota.pool] += quota.nominal_gpus
            if not spot_ok:
                fixed[quota.pool] += quota.nominal_gpus
    return {name: PoolDemand(name, total[name], fixed[name]) for name in total}


@dataclass(frozen=True)
class Clamp:
    """An on-demand target moved into the policy's bounds, and why (for `render --on-demand`)."""

    pool: str
    asked: int
    used: int
    reason: str


def whole_nodes(gpus: int, per_node: int) -> int:
    """GPUs rounded up to whole nodes. The flavor quota stays exact; the NodePool limit must
    let Karpenter launch the node that serves its last GPUs: 7 GPUs of on-demand quota on 8-GPU
    nodes need a limit of 8, or the 7th GPU's workload waits for a node that is never made."""
    return -(-gpus // per_node) * per_node


def whole_nodes_within(gpus: int, per_node: int, ceiling: int) -> int:
    """On-demand GPUs rounded up to whole nodes, but never above the ceiling.

    NodePool limits are whole nodes: a pool split 12 on-demand / 36 spot on 8-GPU nodes would
    get limits of 16 and 40, and could run 56 GPUs under a ceiling of 48. With the on-demand
    side in whole nodes, the spot side is whole too wherever the pool's total is.
    """
    return min(whole_nodes(gpus, per_node), max(ceiling, gpus))


def _choose(
    pool: GpuPool, demand: PoolDemand, *, asked: int | None, manual: int | None
) -> tuple[int, str | None]:
    """A pool's on-demand GPUs for a target (or the floor), and why it differs from `asked`."""
    floor = pool.on_demand.floor_gpus
    lower = max(floor, demand.on_demand_only_gpus)
    cap = min(pool.on_demand.ceiling_gpus, demand.total_gpus)
    upper = max(lower, cap)
    wanted = manual if manual is not None else (floor if asked is None else asked)
    chosen = min(max(wanted, lower), upper)
    if manual is not None:
        # In whole nodes, as the decisions' own splits are: a Manual 4 on 8-GPU nodes would
        # leave a node-wide pod set no flavor, and NodePool limits of 8 + 8 over 8.
        chosen = whole_nodes_within(chosen, pool.gpus_per_node, upper)
    if asked is None or asked == chosen:
        return chosen, None
    if manual is not None:
        return chosen, (
            f"the policy's override is Manual and sets {manual} for this pool "
            "(spec.override.onDemandGpus)"
            + (f", {chosen} in whole nodes of {pool.gpus_per_node}" if chosen != manual else "")
        )
    if wanted < lower:
        reason = (
            f"below the pool's on-demand floor (onDemand.floorGpus: {floor})"
            if floor >= demand.on_demand_only_gpus
            else f"below the {demand.on_demand_only_gpus} GPUs of quota that cannot run on spot "
            "(tier reservations, and projects or tiers that do not allow spot)"
        )
    elif cap < lower:
        reason = (
            f"the pool's quota ({demand.total_gpus} GPUs) is below its lower bound ({lower}: the "
            "on-demand floor, or quota that cannot run on spot), which wins"
        )
    elif cap == pool.on_demand.ceiling_gpus:
        reason = f"above the pool's on-demand ceiling (onDemand.ceilingGpus: {cap})"
    else:
        reason = (
            f"above the pool's quota ({demand.total_gpus} GPUs: projects' nominal quotas plus "
            "tier reservations); on-demand GPUs beyond it would have no quota to use them"
        )
    return chosen, reason


def _choices(
    policy_set: PolicySet, on_demand: Mapping[str, int] | None
) -> list[tuple[GpuPool, PoolDemand, int, str | None]]:
    policy = policy_set.policy
    manual = (
        {m.pool: m.gpus for m in policy.spec.override.on_demand_gpus}
        if policy.spec.override.mode is OverrideMode.MANUAL
        else {}
    )
    demands = pool_demands(policy_set)
    out = []
    for pool in policy.spec.pools:
        demand = demands[pool.name]
        chosen, reason = _choose(
            pool, demand, asked=(on_demand or {}).get(pool.name), manual=manual.get(pool.name)
        )
        out.append((pool, demand, chosen, reason))
    return out


def resolve_mix(
    policy_set: PolicySet, on_demand: Mapping[str, int] | None = None
) -> tuple[PoolMix, ...]:
    """The mix to render: a Manual override, else the given targets, else the floors.

    Targets are clamped to what the policy allows: at least the floor and what cannot run on
    spot, at most the ceiling and the pool's quota (on-demand GPUs no quota can use would only
    cost money). `clamped_targets` says which targets were moved and why.
    """
    return tuple(
        PoolMix(
            pool=pool.name,
            on_demand_gpus=chosen,
            spot_gpus=max(demand.total_gpus - chosen, 0),
        )
        for pool, demand, chosen, _ in _choices(policy_set, on_demand)
    )


def clamped_targets(policy_set: PolicySet, on_demand: Mapping[str, int]) -> list[Clamp]:
    """The targets `resolve_mix` does not use as given, each with the bound that moved it."""
    return [
        Clamp(pool.name, on_demand[pool.name], chosen, reason)
        for pool, _, chosen, reason in _choices(policy_set, on_demand)
        if reason is not None and pool.name in on_demand
    ]


def _largest_remainder(total: int, weights: list[tuple[str, int]]) -> dict[str, int]:
    """Split `total` in proportion to integer weights; ties go to names in sorted order."""
    weight_sum = sum(w for _, w in weights)
    if weight_sum == 0 or total <= 0:
        return {name: 0 for name, _ in weights}
    # Integer arithmetic: float remainders such as 1.4 - 1 would break exact ties arbitrarily.
    shares = {name: total * w // weight_sum for name, w in weights}
    remainders = {name: total * w % weight_sum for name, w in weights}
    left = total - sum(shares.values())
    for name, _ in sorted(weights, key=lambda nw: (-remainders[nw[0]], nw[0]))[:left]:
        shares[name] += 1
    return shares


def _whole_node_shares(total: int, weights: list[tuple[str, int]], per_node: int) -> dict[str, int]:
    """`total` on-demand GPUs shared in proportion to quota, in whole nodes where possible.

    Splitting every project's quota a few GPUs each way would leave most projects unable to
    place a node-wide pod set on either flavor, and would move every project's quotas at each
    change of the mix. Shared in whole nodes (by largest remainder, at most the whole nodes a
    project's quota holds), a project's share is either none or a node's worth, a change of
    the mix by one node moves one project, and any pod set up to a node wide fits one flavor.
    GPUs that do not make a whole node (the total is not a multiple of the node, or the
    projects' quotas hold no more whole nodes) go by largest remainder in GPUs.
    """
    if total <= 0 or not weights:
        return {name: 0 for name, _ in weights}
    node_caps = [(name, w // per_node) for name, w in weights]
    nodes = min(total // per_node, sum(c for _, c in node_caps))
    by_node = _largest_remainder(nodes, [(n, w) for n, w in weights])
    # Largest remainder may give a project more nodes than its quota holds: cap and pass on.
    caps = dict(node_caps)
    taken = {name: min(count, caps[name]) for name, count in by_node.items()}
    spare = nodes - sum(taken.values())
    for name, _ in sorted(weights, key=lambda nw: (-(caps[nw[0]] - taken[nw[0]]), nw[0])):
        if spare <= 0:
            break
        extra = min(spare, caps[name] - taken[name])
        taken[name] += extra
        spare -= extra
    shares = {name: count * per_node for name, count in taken.items()}
    rest = total - sum(shares.values())
    if rest > 0:
        left = [(name, w - shares[name]) for name, w in weights]
        extra_shares = _largest_remainder(min(rest, sum(w for _, w in left)), left)
        shares = {name: shares[name] + extra_shares[name] for name in shares}
    return shares


def _split_limit(
    limit: int | None, spot: int, on_demand: int, *, spot_ok: bool, within_nominal: bool
) -> tuple[int | None, int | None]:
    """A per-pool limit divided between the capacity types like the nominal quota.

    Lending limits stay within each flavor's nominal quota, as Kueue requires.
    """
    if limit is None:
        return None, None
    if not spot_ok:
        return None, limit
    total = spot + on_demand
    # Round halves up, in integers, so the split does not flip with the parity of the limit.
    on_demand_part = (2 * limit * on_demand + total) // (2 * total) if total else 0
    if within_nominal:
        on_demand_part = min(max(on_demand_part, limit - spot), on_demand)
    return limit - on_demand_part, on_demand_part


def _largest_first(shares: Mapping[str, int]) -> Iterator[str]:
    """The names by share, largest first (by name among equals), as `shares` stands when
    asked, taken lazily: the first few nearly always balance a move, and sorting every
    project for each cost a pass at 1,000 projects some milliseconds."""
    order = [(-gpus, name) for name, gpus in shares.items()]
    heapq.heapify(order)
    while order:
        yield heapq.heappop(order)[1]


def _keep_gangs_whole(
    shares: dict[str, int],
    nominal: Mapping[str, int],
    widest: Mapping[str, int],
    held: Mapping[str, int],
) -> dict[str, int]:
    """Shares moved so each project has one flavor as wide as its widest pending pod set.

    Kueue gives a pod set one flavor: a project of 8 GPUs split 6 spot / 2 on-demand could
    never admit its 8-GPU job. A project in that position moves to the nearer side that fits
    (towards on-demand when it holds on-demand for risk, towards spot otherwise), and the
    on-demand GPUs it gives or takes are taken from or given to other projects, largest
    shares first. The pool's total never changes (it is what the NodePools are sized to): a
    move that cannot be balanced is not made, and the risk model then sees the pod set as
    unable to start.
    """
    out = dict(shares)
    pinned: set[str] = set()

    def trapped(name: str, share: int) -> bool:
        wide = min(widest.get(name, 0), nominal[name])
        return bool(wide) and max(share, nominal[name] - share) < wide

    for name in sorted(out):
        if not trapped(name, out[name]):
            continue
        wide = min(widest.get(name, 0), nominal[name])
        options = [wide, nominal[name] - wide]
        if held.get(name, 0) <= 0:
            options.reverse()  # spot first unless it holds on-demand for risk
        for target in options:
            trial = dict(out)
            trial[name] = target
            delta = target - out[name]
            for other in _largest_first(trial):
                if delta == 0:
                    break
                if other == name or other in pinned:
                    continue
                room = trial[other] if delta > 0 else nominal[other] - trial[other]
                step = min(abs(delta), room)
                moved = trial[other] - step if delta > 0 else trial[other] + step
                if step == 0 or trapped(other, moved):
                    continue
                trial[other] = moved
                delta += -step if delta > 0 else step
            if delta == 0:
                out = trial
                pinned.add(name)
                break
    return out


def split_quotas(
    policy_set: PolicySet,
    mixes: tuple[PoolMix, ...],
    assignments: Mapping[str, Mapping[str, int]] | None = None,
    pod_sets: Mapping[str, Mapping[str, int]] | None = None,
) -> dict[tuple[str, str], FlavorQuota]:
    """Every (project, pool) quota divided between the pool's spot and on-demand flavors.

    `assignments[pool][project]` on-demand GPUs go to that project first (an at-risk project's
    share, decided by `controller.decide`); the rest is shared in proportion to quota.
    `pod_sets[pool][project]`, the widest pending pod set, is kept whole in one flavor.
    """
    reserved: dict[str, int] = {}
    for tier in policy_set.policy.spec.tiers:
        for reservation in tier.reserved:
            reserved[reservation.pool] = reserved.get(reservation.pool, 0) + reservation.gpus
    out: dict[tuple[str, str], FlavorQuota] = {}
    for mix in mixes:
        quotas: list[tuple[TrainingProject, PoolQuota, bool]] = [
            (project, quota, spot_allowed(policy_set, project))
            for project, quota in policy_set.quotas_in(mix.pool)
        ]
        fixed = reserved.get(mix.pool, 0) + sum(q.nominal_gpus for _, q, ok in quotas if not ok)
        room = max(mix.on_demand_gpus - fixed, 0)
        held: dict[str, int] = {}
        for project, quota, ok in quotas:
            wanted = (assignments or {}).get(mix.pool, {}).get(project.name, 0)
            if ok and wanted > 0:
                held[project.name] = min(wanted, quota.nominal_gpus, room - sum(held.values()))
        flexible = [(p.name, q.nominal_gpus - held.get(p.name, 0)) for p, q, ok in quotas if ok]
        pool = policy_set.policy.pool(mix.pool)
        per_node = pool.gpus_per_node if pool is not None else 1
        shared = _whole_node_shares(
            min(room - sum(held.values()), sum(w for _, w in flexible)), flexible, per_node
        )
        on_demand_share = {name: shared[name] + held.get(name, 0) for name in shared}
        widest = (pod_sets or {}).get(mix.pool, {})
        if widest:
            on_demand_share = _keep_gangs_whole(
                on_demand_share,
                {p.name: q.nominal_gpus for p, q, ok in quotas if ok},
                widest,
                held,
            )
        spot_share = {
            name: nominal - on_demand_share[name]
            for name, nominal in ((p.name, q.nominal_gpus) for p, q, ok in quotas if ok)
        }
        over = sum(spot_share.values()) - mix.spot_gpus
        if over > 0:
            # Spot held back while a shift drains on-demand work: each project's spot quota
            # gives up its part, in proportion.
            cuts = _largest_remainder(over, sorted(spot_share.items()))
            spot_share = {name: gpus - cuts[name] for name, gpus in spot_share.items()}
        for project, quota, ok in quotas:
            on_demand = on_demand_share[project.name] if ok else quota.nominal_gpus
            spot = spot_share[project.name] if ok else 0
            spot_borrow, on_demand_borrow = _split_limit(
                quota.borrowing_limit_gpus, spot, on_demand, spot_ok=ok, within_nominal=False
            )
            spot_lend, on_demand_lend = _split_limit(
                quota.lending_limit_gpus, spot, on_demand, spot_ok=ok, within_nominal=True
            )
            out[(project.name, mix.pool)] = FlavorQuota(
                project=project.name,
                pool=mix.pool,
                spot_gpus=spot,
                on_demand_gpus=on_demand,
                spot_borrowing_limit=spot_borrow,
                on_demand_borrowing_limit=on_demand_borrow,
                spot_lending_limit=spot_lend,
                on_demand_lending_limit=on_demand_lend,
            )
    return out
