"""How far a pool's mix may move now: the ceiling holds while the mix shifts.

Lowering a ClusterQueue's quota evicts no admitted workload, and lowering a NodePool's limit
removes no node: what a side of the pool holds is its usage, not its quota, until that work
ends. If the controller handed spot quota to on-demand while spot work still ran, on-demand
would launch nodes beside the spot ones and the pool would run past its ceiling (and a project
past its budget) for as long as the old work ran, which for training is days. So a shift moves
each side on its own:

- the side that shrinks drops to its new quota at once, so nothing new is admitted to it;
- the side that grows gets at most the pool's total minus what the shrinking side holds, and
  grows further as that work drains;

where a side holds the larger of its admitted GPUs (rounded up to whole nodes) and its nodes.
With on-demand decided at D of a pool of T GPUs, on-demand is min(D, T - spot held) and spot
is min(T - D, T - on-demand held): at most T in all, whichever way the mix moves. What is
left waits, reported in status and an Event, and the next passes carry the shift on as work
drains. The decided target stays in the pool's state, so a waiting shift is never forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller import names
from controller.api.types import GpuPool
from controller.capacity import whole_nodes
from controller.risk.pools import NodeClaimView
from controller.risk.workloads import WorkloadView


@dataclass(frozen=True)
class Held:
    """GPUs each side of a pool holds now, whatever its quota says (whole nodes)."""

    spot_gpus: int
    on_demand_gpus: int
    spot_admitted_gpus: int = 0
    on_demand_admitted_gpus: int = 0
    """The admitted part: work that must still get (or keep) nodes of its side."""


@dataclass(frozen=True)
class Shift:
    pool: str
    total: int
    """The pool's GPUs: its projects' quotas and tier reservations."""
    target: int
    """The on-demand GPUs decided."""
    applied: int
    """The on-demand GPUs rendered now."""
    spot: int
    """The spot GPUs rendered now."""
    on_demand_limit: int = 0
    spot_limit: int = 0
    """What each side's NodePool must allow: its quota, or more while admitted work of the
    side (quota lowered under it) still needs its nodes."""

    @property
    def waiting_gpus(self) -> int:
        """GPUs the shrinking side must still free (0 when the shift is complete)."""
        return (self.target - self.applied) + (self.total - self.target - self.spot)


def held_by_side(
    pools: Iterable[GpuPool],
    workloads: Iterable[WorkloadView],
    node_claims: Iterable[NodeClaimView],
) -> dict[str, Held]:
    """Per pool, what spot and on-demand hold: admitted GPUs on their flavors, in whole nodes,
    or their nodes (Ready or coming, not being deleted), whichever is more."""
    by_flavor: dict[str, tuple[str, str]] = {}
    per_node: dict[str, int] = {}
    for pool in pools:
        per_node[pool.name] = pool.gpus_per_node
        for capacity_type in names.CAPACITY_TYPES:
            by_flavor[names.flavor_name(pool.name, capacity_type)] = (pool.name, capacity_type)
    admitted = {(p, c): 0 for p in per_node for c in names.CAPACITY_TYPES}
    for workload in workloads:
        if workload.running and workload.flavors:
            side = by_flavor.get(workload.flavors[0])
            if side is not None:
                admitted[side] += workload.gpus
    nodes = dict.fromkeys(admitted, 0)
    for claim in node_claims:
        key = (claim.pool, claim.capacity_type)
        if key in nodes and not claim.deleting:
            nodes[key] += per_node[claim.pool]
    out: dict[str, Held] = {}
    for name, size in per_node.items():
        spot_admitted = whole_nodes(admitted[(name, names.SPOT)], size)
        on_demand_admitted = whole_nodes(admitted[(name, names.ON_DEMAND)], size)
        out[name] = Held(
            spot_gpus=max(spot_admitted, nodes[(name, names.SPOT)]),
            on_demand_gpus=max(on_demand_admitted, nodes[(name, names.ON_DEMAND)]),
            spot_admitted_gpus=spot_admitted,
            on_demand_admitted_gpus=on_demand_admitted,
        )
    return out


def limit_shift(pool: str, *, total: int, target: int, held: Held) -> Shift:
    """The on-demand and spot GPUs to render now on the way to `target` on-demand.

    A side whose quota drops under its admitted work keeps a NodePool limit that work can
    still launch nodes under: the quota stops new admissions, the limit lets the admitted
    finish (Kueue does not evict it). The limits together stay within the pool's total,
    because the growing side's quota leaves out everything the shrinking side holds.
    """
    applied = max(min(target, total - held.spot_gpus), 0)
    spot = max(min(total - target, total - held.on_demand_gpus), 0)
    return Shift(
        pool,
        total,
        target,
        applied=applied,
        spot=spot,
        on_demand_limit=max(applied, held.on_demand_admitted_gpus),
        spot_limit=max(spot, held.spot_admitted_gpus),
    )


def limit_shifts(
    targets: Mapping[str, int], totals: Mapping[str, int], held: Mapping[str, Held]
) -> dict[str, Shift]:
    return {
        pool: limit_shift(pool, total=totals[pool], target=target, held=held.get(pool, Held(0, 0)))
        for pool, target in targets.items()
    }


__all__ = ["Held", "Shift", "held_by_side", "limit_shift", "limit_shifts"]
