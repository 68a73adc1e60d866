"""Every kind the controller reads or writes, with the REST coordinates to reach it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    def path(self, name: str | None = None, namespace: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


CAPACITY_POLICY = Kind("quartermaster.dev", "v1alpha1", "CapacityPolicy", "capacitypolicies", False)
TRAINING_PROJECT = Kind(
    "quartermaster.dev", "v1alpha1", "TrainingProject", "trainingprojects", False
)

PRIORITY_CLASS = Kind("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False)
WORKLOAD_PRIORITY_CLASS = Kind(
    "kueue.x-k8s.io", "v1beta2", "WorkloadPriorityClass", "workloadpriorityclasses", False
)
RESOURCE_FLAVOR = Kind("kueue.x-k8s.io", "v1beta2", "ResourceFlavor", "resourceflavors", False)
COHORT = Kind("kueue.x-k8s.io", "v1beta2", "Cohort", "cohorts", False)
CLUSTER_QUEUE = Kind("kueue.x-k8s.io", "v1beta2", "ClusterQueue", "clusterqueues", False)
LOCAL_QUEUE = Kind("kueue.x-k8s.io", "v1beta2", "LocalQueue", "localqueues", True)
WORKLOAD = Kind("kueue.x-k8s.io", "v1beta2", "Workload", "workloads", True)
NODE_POOL = Kind("karpenter.sh", "v1", "NodePool", "nodepools", False)
NODE_CLAIM = Kind("karpenter.sh", "v1", "NodeClaim", "nodeclaims", False)
DEPLOYMENT = Kind("apps", "v1", "Deployment", "deployments", True)
SCALED_OBJECT = Kind("keda.sh", "v1alpha1", "ScaledObject", "scaledobjects", True)
LEASE = Kind("coordination.k8s.io", "v1", "Lease", "leases", True)
EVENT = Kind("events.k8s.io", "v1", "Event", "events", True)
CORE_EVENT = Kind("", "v1", "Event", "events", True)
"""The same Events in their older shape (`involvedObject`, `message`, `count`): read only,
for Karpenter's capacity errors where `events.k8s.io/v1` is not served."""
CONFIG_MAP = Kind("", "v1", "ConfigMap", "configmaps", True)
"""One only, in the controller's namespace: what it learned (`reconcile/learned_store.py`)."""
CRD = Kind(
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False
)

# What the renderer produces, in the order objects are applied (dependencies first).
MANAGED_KINDS: tuple[Kind, ...] = (
    PRIORITY_CLASS,
    WORKLOAD_PRIORITY_CLASS,
    RESOURCE_FLAVOR,
    COHORT,
    CLUSTER_QUEUE,
    LOCAL_QUEUE,
    NODE_POOL,
    DEPLOYMENT,
    SCALED_OBJECT,
)
# Managed kinds that live only in the controller's own namespace (the warm pools). They are
# listed and watched there alone, so the controller needs no cluster-wide rights on
# Deployments: a ClusterRole that can write any Deployment could run any image anywhere.
CONTROLLER_NAMESPACE_KINDS: frozenset[Kind] = frozenset({DEPLOYMENT, SCALED_OBJECT})
OWNERSHIP_READ_KINDS: frozenset[Kind] = frozenset({DEPLOYMENT})
"""Kinds whose `metadata.managedFields` a pass reads (the create-only hand-over, see
`reconcile/diff.py`). Every other kind's cached objects leave them out."""
_BY_API_KIND = {
    (k.api_version, k.kind): k
    for k in (
        *MANAGED_KINDS,
        CAPACITY_POLICY,
        TRAINING_PROJECT,
        WORKLOAD,
        NODE_CLAIM,
        LEASE,
        EVENT,
        CORE_EVENT,
        CONFIG_MAP,
        CRD,
    )
}


def kind_of(obj: dict[str, object]) -> Kind:
    """The Kind of a rendered or fetched object, from its apiVersion and kind."""
    key = (str(obj.get("apiVersion")), str(obj.get("kind")))
    if key not in _BY_API_KIND:
        raise KeyError(f"unknown kind {key[1]} in {key[0]}")
    return _BY_API_KIND[key]
