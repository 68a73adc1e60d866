"""The whole desired state for a policy, in the fixed order the renderer promises.

Objects come out ordered by kind (dependencies first: priorities and flavors before the queues
that name them) and then by namespace and name, so `quartermaster render` gives the same bytes
for the same policy and mix, and GitOps diffs show only real changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from controller import names
from controller.api.policy_set import PolicySet
from controller.api.types import PoolMix
from controller.capacity import FlavorQuota, PoolTarget, resolve_mix, split_quotas
from controller.render import karpenter, keda, kueue
from controller.render.objects import KubeObject

KIND_ORDER = (
    "PriorityClass",
    "WorkloadPriorityClass",
    "ResourceFlavor",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
    "NodePool",
    "Deployment",
    "ScaledObject",
)
_KIND_RANK = {kind: rank for rank, kind in enumerate(KIND_ORDER)}


@dataclass(frozen=True)
class Rendered:
    """The desired objects and the mix they were rendered for."""

    objects: tuple[KubeObject, ...]
    mix: tuple[PoolMix, ...]
    quotas: Mapping[tuple[str, str], FlavorQuota]
    """Each (project, pool) quota split between spot and on-demand."""


def _order(obj: KubeObject) -> tuple[int, str, str]:
    meta = obj["metadata"]
    return _KIND_RANK[obj["kind"]], meta.get("namespace", ""), meta["name"]


def _spot_cap(targets: Mapping[str, PoolTarget] | None, pool: str) -> int | None:
    target = (targets or {}).get(pool)
    return None if target is None else target.spot_gpus


def render_quotas(
    policy_set: PolicySet,
    *,
    on_demand_gpus: Mapping[str, int] | None = None,
    targets: Mapping[str, PoolTarget] | None = None,
) -> tuple[tuple[PoolMix, ...], dict[tuple[str, str], FlavorQuota]]:
    """The mix and the per-project quota splits `render` would write, without the objects:
    what a pass needs of the split in force."""
    counts = dict(on_demand_gpus or {})
    counts.update({pool: t.on_demand_gpus for pool, t in (targets or {}).items()})
    mix = tuple(
        replace(m, spot_gpus=min(m.spot_gpus, cap))
        if (cap := _spot_cap(targets, m.pool)) is not None
        else m
        for m in resolve_mix(policy_set, counts or None)
    )
    quotas = split_quotas(
        policy_set,
        mix,
        {pool: t.assignments for pool, t in (targets or {}).items()},
        {pool: t.pod_sets for pool, t in (targets or {}).items() if t.pod_sets},
    )
    return mix, quotas


def render(
    policy_set: PolicySet,
    *,
    on_demand_gpus: Mapping[str, int] | None = None,
    targets: Mapping[str, PoolTarget] | None = None,
    namespace: str = names.DEFAULT_NAMESPACE,
    when_can_borrow: str = kueue.OWN_QUOTA_FIRST,
) -> Rendered:
    """Every object the policy needs, for the decided pool targets (or plain on-demand counts;
    the floors when neither is given). `when_can_borrow` is for the replay's baselines, which
    run on Kueue's default (see `kueue.OWN_QUOTA_FIRST`)."""
    mix, quotas = render_quotas(policy_set, on_demand_gpus=on_demand_gpus, targets=targets)
    deferred = {pool: t.deferred_tiers for pool, t in (targets or {}).items() if t.deferred_tiers}
    objects: list[KubeObject] = [
        *keda.priority_classes(policy_set),
        *kueue.workload_priority_classes(policy_set),
        *kueue.resource_flavors(policy_set),
        *kueue.cohorts(policy_set),
    ]
    for project in policy_set.projects:
        objects.append(
            kueue.cluster_queue(
                policy_set, project, quotas, deferred=deferred, when_can_borrow=when_can_borrow
            )
        )
        objects.extend(kueue.local_queues(policy_set, project))
    objects.extend(
        karpenter.node_pools(
            policy_set,
            mix,
            {pool: t.nodepool_gpus for pool, t in (targets or {}).items() if t.nodepool_gpus},
        )
    )
    objects.extend(keda.deployments(policy_set, namespace))
    objects.extend(keda.scaled_objects(policy_set, namespace))
    return Rendered(objects=tuple(sorted(objects, key=_order)), mix=mix, quotas=quotas)
