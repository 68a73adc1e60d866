"""Kueue objects (kueue.x-k8s.io/v1beta2) for a policy: flavors, priorities, cohorts, queues.

A project's ClusterQueue lists, for each of its pools in the order the project gave them, the
spot flavor first (when its tier and the project allow spot) then the on-demand flavor, so
Kueue fills cheap capacity first. A workload borrows only once none of its queue's flavors has
room of the queue's own (`OWN_QUOTA_FIRST`), so the on-demand GPUs the policy gives a project
are what its work runs on once its spot quota is full. Each flavor also carries CPU and memory
quota in proportion to its GPUs: a workload that requests a resource its ClusterQueue does not
cover cannot be admitted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from controller import names
from controller.api.policy_set import PolicySet
from controller.api.types import GpuPool, Preemption, Tier, TrainingProject
from controller.capacity import FlavorQuota, spot_allowed
from controller.render.objects import KubeObject, gibibytes, metadata, weight

API_VERSION = "kueue.x-k8s.io/v1beta2"

OWN_QUOTA_FIRST = "TryNextFlavor"
"""`flavorFungibility.whenCanBorrow` as the controller renders it: a workload that would have
to borrow in one flavor goes on to the next, and borrows only when no flavor has room of its
queue's own. With Kueue's default (`KUEUE_DEFAULT_WHEN_CAN_BORROW`) it takes the first flavor
it fits, borrowing or not: while the cohort has spot quota to lend, a project whose on-demand
share the policy raised still lands on spot, and waits there for the nodes a spot shortage
withholds, so the raise buys nothing the risk model counts on."""

KUEUE_DEFAULT_WHEN_CAN_BORROW = "MayStopSearch"
"""Kueue's default: what a team running a fixed split or reactive scaling has (the replay's
baselines)."""

_PREEMPTION: dict[Preemption, dict[str, Any]] = {
    Preemption.NEVER: {
        "withinClusterQueue": "Never",
        "reclaimWithinCohort": "Never",
        "borrowWithinCohort": {"policy": "Never"},
    },
    Preemption.LOWER_PRIORITY: {
        "withinClusterQueue": "LowerPriority",
        "reclaimWithinCohort": "LowerPriority",
        "borrowWithinCohort": {"policy": "Never"},
    },
    Preemption.ANY: {
        "withinClusterQueue": "LowerOrNewerEqualPriority",
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "LowerPriority"},
    },
}


def _gpu_resources(pools: Iterable[GpuPool]) -> list[str]:
    return sorted({p.gpu_resource for p in pools})


def _covered(gpu_resources: list[str]) -> list[str]:
    return ["cpu", "memory", *gpu_resources]


def _resources(
    pool: GpuPool,
    gpu_resources: list[str],
    gpus: int,
    borrowing: int | None = None,
    lending: int | None = None,
) -> list[dict[str, Any]]:
    """One flavor's quotas for every covered resource, CPU and memory scaled from GPUs."""
    limits = [
        (key, n)
        for key, n in (
            ("nominalQuota", gpus),
            ("borrowingLimit", borrowing),
            ("lendingLimit", lending),
        )
        if n is not None
    ]
    cpu: dict[str, Any] = {"name": "cpu"}
    memory: dict[str, Any] = {"name": "memory"}
    for key, n in limits:
        cpu[key] = n * pool.cpus_per_gpu
        memory[key] = gibibytes(n * pool.memory_gib_per_gpu)
    resources = [cpu, memory]
    for resource in gpu_resources:
        if resource == pool.gpu_resource:
            resources.append({"name": resource, **dict(limits)})
        else:
            resources.append({"name": resource, "nominalQuota": 0})
    return resources


def resource_flavors(policy_set: PolicySet) -> list[KubeObject]:
    policy = policy_set.policy
    out = []
    for pool in policy.spec.pools:
        for capacity_type in names.CAPACITY_TYPES:
            tolerations = [{"key": pool.gpu_resource, "operator": "Exists", "effect": "NoSchedule"}]
            if capacity_type == names.SPOT:
                tolerations.append(
                    {"key": names.SPOT_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
                )
            out.append(
                {
                    "apiVersion": API_VERSION,
                    "kind": "ResourceFlavor",
                    "metadata": metadata(
                        names.flavor_name(pool.name, capacity_type),
                        policy=policy.name,
                        labels={names.LABEL_POOL: pool.name},
                    ),
                    "spec": {
                        "nodeLabels": {
                            names.CAPACITY_TYPE_LABEL: capacity_type,
                            names.LABEL_POOL: pool.name,
                            **dict(sorted(pool.node_labels.items())),
                        },
                        "tolerations": tolerations,
                    },
                }
            )
    return out


def workload_priority_classes(policy_set: PolicySet) -> list[KubeObject]:
    policy = policy_set.policy
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": metadata(
                tier.name, policy=policy.name, labels={names.LABEL_TIER: tier.name}
            ),
            "value": tier.priority,
            "description": f"Quartermaster tier {tier.name} of policy {policy.name}",
        }
        for tier in policy.spec.tiers
    ]


def _tier_cohort(policy_set: PolicySet, tier: Tier) -> KubeObject:
    policy = policy_set.policy
    spec: dict[str, Any] = {
        "parentName": names.root_cohort_name(policy.name),
        "fairSharing": {"weight": weight(tier.fair_share_weight)},
    }
    reserved_pools = [(policy.pool(r.pool), r.gpus) for r in tier.reserved]
    pools = [(pool, gpus) for pool, gpus in reserved_pools if pool is not None]
    if pools:
        gpu_resources = _gpu_resources(pool for pool, _ in pools)
        spec["resourceGroups"] = [
            {
                "coveredResources": _covered(gpu_resources),
                "flavors": [
                    {
                        "name": names.flavor_name(pool.name, names.ON_DEMAND),
                        "resources": _resources(pool, gpu_resources, gpus),
                    }
                    for pool, gpus in pools
                ],
            }
        ]
    return {
        "apiVersion": API_VERSION,
        "kind": "Cohort",
        "metadata": metadata(
            names.tier_cohort_name(policy.name, tier.name),
            policy=policy.name,
            labels={names.LABEL_TIER: tier.name},
        ),
        "spec": spec,
    }


def cohorts(policy_set: PolicySet) -> list[KubeObject]:
    """The root cohort, and one per tier beneath it holding the tier's reservations."""
    policy = policy_set.policy
    root = {
        "apiVersion": API_VERSION,
        "kind": "Cohort",
        "metadata": metadata(names.root_cohort_name(policy.name), policy=policy.name),
        "spec": {},
    }
    return [root, *(_tier_cohort(policy_set, tier) for tier in policy.spec.tiers)]


def _flavors(
    policy_set: PolicySet,
    project: TrainingProject,
    quotas: Mapping[tuple[str, str], FlavorQuota],
    gpu_resources: list[str],
    deferred: Mapping[str, tuple[str, ...]],
) -> list[dict[str, Any]]:
    flavors = []
    spot_ok = spot_allowed(policy_set, project)
    for pool_quota in project.spec.quotas:
        pool = policy_set.policy.pool(pool_quota.pool)
        assert pool is not None, "validated policies name only defined pools"
        split = quotas[(project.name, pool.name)]
        if project.spec.tier in deferred.get(pool.name, ()):
            # The pool's ceiling binds: the lowest tier stops borrowing there.
            split = replace(split, spot_borrowing_limit=0, on_demand_borrowing_limit=0)
        if spot_ok:
            flavors.append(
                {
                    "name": names.flavor_name(pool.name, names.SPOT),
                    "resources": _resources(
                        pool,
                        gpu_resources,
                        split.spot_gpus,
                        borrowing=split.spot_borrowing_limit,
                        lending=split.spot_lending_limit,
                    ),
                }
            )
        flavors.append(
            {
                "name": names.flavor_name(pool.name, names.ON_DEMAND),
                "resources": _resources(
                    pool,
                    gpu_resources,
                    split.on_demand_gpus,
                    borrowing=split.on_demand_borrowing_limit,
                    lending=split.on_demand_lending_limit,
                ),
            }
        )
    return flavors


def cluster_queue(
    policy_set: PolicySet,
    project: TrainingProject,
    quotas: Mapping[tuple[str, str], FlavorQuota],
    *,
    deferred: Mapping[str, tuple[str, ...]] | None = None,
    when_can_borrow: str = OWN_QUOTA_FIRST,
) -> KubeObject:
    policy = policy_set.policy
    tier = policy.tier(project.spec.tier)
    assert tier is not None, "validated projects name only defined tiers"
    pools = [policy.pool(q.pool) for q in project.spec.quotas]
    gpu_resources = _gpu_resources(p for p in pools if p is not None)
    spec: dict[str, Any] = {}
    if project.spec.share_capacity:
        spec["cohortName"] = names.tier_cohort_name(policy.name, tier.name)
    spec |= {
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": names.NAMESPACE_NAME_LABEL,
                    "operator": "In",
                    "values": sorted(project.spec.namespaces),
                }
            ]
        },
        "queueingStrategy": "BestEffortFIFO",
        "flavorFungibility": {"whenCanBorrow": when_can_borrow, "whenCanPreempt": "TryNextFlavor"},
        "preemption": _PREEMPTION[tier.preemption],
        "fairSharing": {"weight": weight(project.spec.fair_share_weight)},
        "resourceGroups": [
            {
                "coveredResources": _covered(gpu_resources),
                "flavors": _flavors(policy_set, project, quotas, gpu_resources, deferred or {}),
            }
        ],
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": metadata(
            project.name,
            policy=policy.name,
            labels={names.LABEL_PROJECT: project.name, names.LABEL_TIER: tier.name},
        ),
        "spec": spec,
    }


def local_queues(policy_set: PolicySet, project: TrainingProject) -> list[KubeObject]:
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "LocalQueue",
            "metadata": metadata(
                project.name,
                policy=policy_set.policy.name,
                namespace=namespace,
                labels={names.LABEL_PROJECT: project.name},
            ),
            "spec": {"clusterQueue": project.name},
        }
        for namespace in sorted(project.spec.namespaces)
    ]


def _whole(value: Any) -> int | None:
    """A GPU quantity as the server may store it (48, "48"); None when absent or not whole."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(str(value))
    except ValueError:
        return None
    return int(number) if number.is_integer() else None


def applied_quotas(
    policy_set: PolicySet, cluster_queues: Iterable[Mapping[str, Any]]
) -> dict[tuple[str, str], FlavorQuota]:
    """The split in effect, read back from live ClusterQueues: (project, pool) -> quota.

    The inverse of `cluster_queue` for the GPU resource of each pool, so a pass measures risk
    under the quotas Kueue enforces now, not the ones it meant to render. Queues of projects
    or pools the policy does not know, and flavors it did not render, are ignored.
    """
    out: dict[tuple[str, str], FlavorQuota] = {}
    for obj in cluster_queues:
        project = policy_set.project(str((obj.get("metadata") or {}).get("name", "")))
        if project is None:
            continue
        found: dict[tuple[str, str], dict[str, int | None]] = {}
        for group in (obj.get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                for pool_quota in project.spec.quotas:
                    pool = policy_set.policy.pool(pool_quota.pool)
                    if pool is None:
                        continue
                    for capacity_type in names.CAPACITY_TYPES:
                        if flavor.get("name") != names.flavor_name(pool.name, capacity_type):
                            continue
                        for resource in flavor.get("resources") or []:
                            if resource.get("name") == pool.gpu_resource:
                                found[(pool.name, capacity_type)] = {
                                    "nominal": _whole(resource.get("nominalQuota")),
                                    "borrowing": _whole(resource.get("borrowingLimit")),
                                    "lending": _whole(resource.get("lendingLimit")),
                                }
        for pool_quota in project.spec.quotas:
            spot = found.get((pool_quota.pool, names.SPOT), {})
            on_demand = found.get((pool_quota.pool, names.ON_DEMAND))
            if on_demand is None or on_demand["nominal"] is None:
                continue  # not rendered yet (or not ours): no split in effect to read
            out[(project.name, pool_quota.pool)] = FlavorQuota(
                project=project.name,
                pool=pool_quota.pool,
                spot_gpus=spot.get("nominal") or 0,
                on_demand_gpus=on_demand["nominal"],
                spot_borrowing_limit=spot.get("borrowing"),
                on_demand_borrowing_limit=on_demand["borrowing"],
                spot_lending_limit=spot.get("lending"),
                on_demand_lending_limit=on_demand["lending"],
            )
    return out
