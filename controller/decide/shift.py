"""How far a pool's mix may move now: the ceiling holds while the mix shifts.

Lowering a ClusterQueue's quota evicts no admitted workload, and lowering a NodePool's limit
removes no node: what a side of the pool holds is its usage, not its quota, until that work
ends. If the controller handed spot quota to on-demand while spot work still ran, on-demand
would launch nodes beside the spot ones and the pool would run past its ceiling (and a project
past its budget) for as long as the old work ran, which for training is days. So a shift
moves only as fast as the side that shrinks frees capacity:

- raising on-demand from `applied` towards `target`, it may reach at most the pool's total
  minus what spot holds;
- lowering it, at most down to what on-demand holds;

where a side holds the larger of its admitted GPUs (rounded up to whole nodes) and its nodes.
What is left waits, reported in status and an Event, and the next passes carry the shift on as
work drains. The decided target is kept in the pool's state, so a waiting shift is never
forgotten; only what is rendered follows this rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controller import names
from controller.api.types import GpuPool
from controller.risk.pools import NodeClaimView
from controller.risk.workloads import WorkloadView


@dataclass(frozen=True)
class Held:
    """GPUs each side of a pool holds now, whatever its quota says."""

    spot_gpus: int
    on_demand_gpus: int


@dataclass(frozen=True)
class Shift:
    pool: str
    target: int
    """The on-demand GPUs decided."""
    applied: int
    """The on-demand GPUs rendered now."""

    @property
    def waiting_gpus(self) -> int:
        """GPUs the shrinking side must still free (0 when the shift is complete)."""
        return abs(self.target - self.applied)


def _whole_nodes(gpus: int, per_node: int) -> int:
    return -(-gpus // per_node) * per_node


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
    return {
        pool: Held(
            spot_gpus=max(
                _whole_nodes(admitted[(pool, names.SPOT)], size), nodes[(pool, names.SPOT)]
            ),
            on_demand_gpus=max(
                _whole_nodes(admitted[(pool, names.ON_DEMAND)], size),
                nodes[(pool, names.ON_DEMAND)],
            ),
        )
        for pool, size in per_node.items()
    }


def limit_shift(pool: str, *, total: int, applied: int, target: int, held: Held) -> Shift:
    """The on-demand GPUs to render now on the way from `applied` to `target`."""
    if target > applied:
        room = max(applied, total - held.spot_gpus)
        return Shift(pool, target, min(target, room))
    if target < applied:
        floor = min(applied, held.on_demand_gpus)
        return Shift(pool, target, max(target, floor))
    return Shift(pool, target, target)


def limit_shifts(
    targets: Mapping[str, int],
    applied: Mapping[str, int],
    totals: Mapping[str, int],
    held: Mapping[str, Held],
) -> dict[str, Shift]:
    return {
        pool: limit_shift(
            pool,
            total=totals[pool],
            applied=applied.get(pool, target),
            target=target,
            held=held.get(pool, Held(0, 0)),
        )
        for pool, target in targets.items()
    }


__all__ = ["Held", "Shift", "held_by_side", "limit_shift", "limit_shifts"]
