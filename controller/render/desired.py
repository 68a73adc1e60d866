"""The whole desired state for a policy, in the fixed order the renderer promises.

Objects come out ordered by kind (dependencies first: priorities and flavors before the queues
that name them) and then by namespace and name, so `quartermaster render` gives the same bytes
for the same policy and mix, and GitOps diffs show only real changes.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, replace

from controller import names
from controller.api.policy_set import PolicySet
from controller.api.types import PoolMix, TrainingProject
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


class _Reuse:
    """The objects of the last policy rendered, for the next render of that very policy.

    A pass renders some 3,000 objects at 1,000 projects, and after a decision most are what
    they were: every object but the ClusterQueues and NodePools depends on the policy alone,
    and a ClusterQueue on its project's splits. Handing the same objects again saves building
    them, and the reconciler, which remembers its diffs by the rendered object's identity
    (`controller.reconcile.memo.DiffMemo`), compares only the ones that changed. Rendered
    objects are never modified after rendering (the pass's carry hands them on already).
    Kept for one policy, recognised by identity (a weak reference: a policy no longer used
    frees its objects), under a lock only to swap policies: two renders of one policy at once
    at worst both build an object.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._policy: weakref.ref[PolicySet] | None = None
        self._static: dict[str, tuple[KubeObject, ...]] = {}
        """Per namespace the controller runs in, the objects of the policy alone."""
        self._queues: dict[str, tuple[Hashable, KubeObject]] = {}
        """Per project, its ClusterQueue and what it was rendered from."""

    def of(
        self, policy_set: PolicySet
    ) -> tuple[dict[str, tuple[KubeObject, ...]], dict[str, tuple[Hashable, KubeObject]]]:
        with self._lock:
            if self._policy is None or self._policy() is not policy_set:
                self._policy = weakref.ref(policy_set)
                self._static, self._queues = {}, {}
            return self._static, self._queues


_REUSE = _Reuse()


def _policy_objects(policy_set: PolicySet, namespace: str) -> tuple[KubeObject, ...]:
    """Every object that depends on the policy (and the controller's namespace) alone."""
    objects: list[KubeObject] = [
        *keda.priority_classes(policy_set),
        *kueue.workload_priority_classes(policy_set),
        *kueue.resource_flavors(policy_set),
        *kueue.cohorts(policy_set),
    ]
    for project in policy_set.projects:
        objects.extend(kueue.local_queues(policy_set, project))
    objects.extend(keda.deployments(policy_set, namespace))
    objects.extend(keda.scaled_objects(policy_set, namespace))
    return tuple(objects)


def _queue_inputs(
    project: TrainingProject,
    quotas: Mapping[tuple[str, str], FlavorQuota],
    deferred: Mapping[str, tuple[str, ...]],
    when_can_borrow: str,
) -> Hashable:
    """What a project's ClusterQueue is rendered from, besides the policy."""
    pools = [q.pool for q in project.spec.quotas]
    return (
        tuple(quotas.get((project.name, pool)) for pool in pools),
        tuple(project.spec.tier in deferred.get(pool, ()) for pool in pools),
        when_can_borrow,
    )


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
    run on Kueue's default (see `kueue.OWN_QUOTA_FIRST`). Objects whose inputs did not change
    since the last render of this policy are that render's (`_Reuse`)."""
    mix, quotas = render_quotas(policy_set, on_demand_gpus=on_demand_gpus, targets=targets)
    deferred = {pool: t.deferred_tiers for pool, t in (targets or {}).items() if t.deferred_tiers}
    static, queues = _REUSE.of(policy_set)
    policy_objects = static.get(namespace)
    if policy_objects is None:
        policy_objects = static[namespace] = _policy_objects(policy_set, namespace)
    objects = list(policy_objects)
    for project in policy_set.projects:
        inputs = _queue_inputs(project, quotas, deferred, when_can_borrow)
        kept = queues.get(project.name)
        if kept is None or kept[0] != inputs:
            kept = queues[project.name] = (
                inputs,
                kueue.cluster_queue(
                    policy_set, project, quotas, deferred=deferred, when_can_borrow=when_can_borrow
                ),
            )
        objects.append(kept[1])
    objects.extend(
        karpenter.node_pools(
            policy_set,
            mix,
            {pool: t.nodepool_gpus for pool, t in (targets or {}).items() if t.nodepool_gpus},
        )
    )
    return Rendered(objects=tuple(sorted(objects, key=_order)), mix=mix, quotas=quotas)
