"""Karpenter NodePools (karpenter.sh/v1): one per pool and capacity type.

The GPU limit of each NodePool is its side of the pool's mix rounded up to whole nodes, so
Karpenter can never launch more on-demand nodes than the controller chose, and can always launch
the node that serves the last GPU of quota Kueue admits. Spot NodePools weigh more, so Karpenter
tries them first. Disruption only removes empty nodes and never drifts a node out from under a
running job: a training run that loses its node loses the work since its last checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller import names
from controller.api.policy_set import PolicySet
from controller.api.types import GpuPool, PoolMix
from controller.capacity import whole_nodes
from controller.render.objects import KubeObject, metadata

API_VERSION = "karpenter.sh/v1"
SPOT_WEIGHT = 100
ON_DEMAND_WEIGHT = 10
CONSOLIDATE_AFTER = "10m"


def _requirements(pool: GpuPool, capacity_type: str) -> list[dict[str, Any]]:
    requirements: list[dict[str, Any]] = [
        {"key": names.CAPACITY_TYPE_LABEL, "operator": "In", "values": [capacity_type]},
        {"key": names.ZONE_LABEL, "operator": "In", "values": sorted(pool.zones)},
    ]
    if pool.instance_types:
        requirements.append(
            {
                "key": names.INSTANCE_TYPE_LABEL,
                "operator": "In",
                "values": sorted(pool.instance_types),
            }
        )
    requirements.extend(
        {"key": key, "operator": "In", "values": [value]}
        for key, value in sorted(pool.node_labels.items())
    )
    return requirements


def _taints(pool: GpuPool, capacity_type: str) -> list[dict[str, str]]:
    taints = [{"key": pool.gpu_resource, "value": "true", "effect": "NoSchedule"}]
    if capacity_type == names.SPOT:
        taints.append({"key": names.SPOT_TAINT_KEY, "value": "true", "effect": "NoSchedule"})
    return taints


def node_pools(
    policy_set: PolicySet,
    mixes: tuple[PoolMix, ...],
    at_least: Mapping[str, Mapping[str, int]] | None = None,
) -> list[KubeObject]:
    """`at_least[pool][capacity type]`: GPUs a NodePool's limit must allow beyond its side of
    the mix (admitted work whose quota a shift lowered still needs its nodes)."""
    policy = policy_set.policy
    by_pool = {m.pool: m for m in mixes}
    out = []
    for pool in policy.spec.pools:
        mix = by_pool[pool.name]
        for capacity_type in names.CAPACITY_TYPES:
            gpus = whole_nodes(
                max(
                    mix.spot_gpus if capacity_type == names.SPOT else mix.on_demand_gpus,
                    (at_least or {}).get(pool.name, {}).get(capacity_type, 0),
                ),
                pool.gpus_per_node,
            )
            out.append(
                {
                    "apiVersion": API_VERSION,
                    "kind": "NodePool",
                    "metadata": metadata(
                        names.nodepool_name(pool.name, capacity_type),
                        policy=policy.name,
                        labels={names.LABEL_POOL: pool.name},
                    ),
                    "spec": {
                        "weight": SPOT_WEIGHT if capacity_type == names.SPOT else ON_DEMAND_WEIGHT,
                        "limits": {pool.gpu_resource: gpus},
                        "disruption": {
                            "consolidationPolicy": "WhenEmpty",
                            "consolidateAfter": CONSOLIDATE_AFTER,
                            "budgets": [
                                {"nodes": "10%", "reasons": ["Empty"]},
                                {"nodes": "0", "reasons": ["Drifted", "Underutilized"]},
                            ],
                        },
                        "template": {
                            "metadata": {"labels": {names.LABEL_POOL: pool.name}},
                            "spec": {
                                "nodeClassRef": {
                                    "group": pool.node_class.group,
                                    "kind": pool.node_class.kind,
                                    "name": pool.node_class.name,
                                },
                                "requirements": _requirements(pool, capacity_type),
                                "taints": _taints(pool, capacity_type),
                                "expireAfter": "Never",
                            },
                        },
                    },
                }
            )
    return out
