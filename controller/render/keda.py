"""Warm pools: placeholder pods that hold GPU nodes up ahead of demand, scaled by KEDA.

Each pool with a warm-pool maximum gets a Deployment of pause pods, each asking for a whole
node's GPUs at a priority below every workload and never preempting, so a real job evicts a
placeholder and lands on a node that is already up. KEDA scales the Deployment from the
controller's `quartermaster_warm_pool_target_gpus` through Prometheus; when Prometheus cannot
be read, KEDA's fallback keeps the current replicas rather than scaling down on missing data.

The Deployment is created with the pool's minimum in whole nodes as `replicas` (0 when
`minGpus` is 0: a Deployment without `replicas` would start one placeholder, a node's worth of
GPUs, before KEDA acts). After the create, `replicas` is KEDA's: the reconciler never applies
it again (`reconcile.diff.CREATE_ONLY`). KEDA keeps the count between `minReplicaCount` (the
same minimum) and `maxReplicaCount`, and scales to zero when the minimum is 0 and the target
is 0.
"""

from __future__ import annotations

from math import ceil
from typing import Any

from controller import names
from controller.api.policy_set import PolicySet
from controller.api.types import GpuPool
from controller.render.objects import KubeObject, metadata

PLACEHOLDER_IMAGE = "registry.k8s.io/pause:3.10"
WARM_POOL_PRIORITY = -100
POLLING_INTERVAL_SECONDS = 30
COOLDOWN_SECONDS = 300
FALLBACK_FAILURES = 3


def warm_pool_query(pool: str) -> str:
    """PromQL giving exactly one sample however many controller replicas export the metric."""
    return f'max({names.WARM_POOL_TARGET_METRIC}{{pool="{pool}"}})'


def _warm_pools(policy_set: PolicySet) -> list[GpuPool]:
    return [p for p in policy_set.policy.spec.pools if p.warm_pool.max_gpus > 0]


def priority_classes(policy_set: PolicySet) -> list[KubeObject]:
    if not _warm_pools(policy_set):
        return []
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": metadata(names.WARM_POOL_PRIORITY_CLASS, policy=policy_set.policy.name),
            "value": WARM_POOL_PRIORITY,
            "preemptionPolicy": "Never",
            "globalDefault": False,
            "description": "Quartermaster warm-pool placeholders: below every workload, "
            "evicted first, never preempting.",
        }
    ]


def min_replicas(pool: GpuPool) -> int:
    """The warm-pool minimum in whole nodes: where the Deployment starts, and KEDA's floor."""
    return ceil(pool.warm_pool.min_gpus / pool.gpus_per_node)


def _pod_labels(pool: GpuPool) -> dict[str, str]:
    return {names.LABEL_COMPONENT: "warm-pool", names.LABEL_POOL: pool.name}


def deployments(policy_set: PolicySet, namespace: str) -> list[KubeObject]:
    out = []
    for pool in _warm_pools(policy_set):
        gpus = {pool.gpu_resource: pool.gpus_per_node}
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": metadata(
                    names.warm_pool_name(pool.name),
                    policy=policy_set.policy.name,
                    namespace=namespace,
                    labels=_pod_labels(pool),
                ),
                "spec": {
                    # Set on create only; KEDA owns the scale afterwards (see the docstring).
                    "replicas": min_replicas(pool),
                    "selector": {"matchLabels": _pod_labels(pool)},
                    "template": {
                        "metadata": {"labels": _pod_labels(pool)},
                        "spec": {
                            "priorityClassName": names.WARM_POOL_PRIORITY_CLASS,
                            "terminationGracePeriodSeconds": 0,
                            "automountServiceAccountToken": False,
                            "nodeSelector": {names.LABEL_POOL: pool.name},
                            "tolerations": [
                                {
                                    "key": pool.gpu_resource,
                                    "operator": "Exists",
                                    "effect": "NoSchedule",
                                },
                                {
                                    "key": names.SPOT_TAINT_KEY,
                                    "operator": "Exists",
                                    "effect": "NoSchedule",
                                },
                            ],
                            "securityContext": {
                                "runAsNonRoot": True,
                                "runAsUser": 65535,
                                "seccompProfile": {"type": "RuntimeDefault"},
                            },
                            "containers": [
                                {
                                    "name": "placeholder",
                                    "image": PLACEHOLDER_IMAGE,
                                    "resources": {"requests": dict(gpus), "limits": dict(gpus)},
                                    "securityContext": {
                                        "allowPrivilegeEscalation": False,
                                        "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]},
                                    },
                                }
                            ],
                        },
                    },
                },
            }
        )
    return out


def scaled_objects(policy_set: PolicySet, namespace: str) -> list[KubeObject]:
    prometheus = policy_set.policy.spec.prometheus
    out = []
    for pool in _warm_pools(policy_set):
        floor = min_replicas(pool)
        trigger: dict[str, Any] = {
            "type": "prometheus",
            "name": "warm-pool-target",
            "metricType": "AverageValue",
            "metadata": {
                "serverAddress": prometheus.url,
                "query": warm_pool_query(pool.name),
                "threshold": str(pool.gpus_per_node),
                "ignoreNullValues": "false",
                "unsafeSsl": "true" if prometheus.insecure_skip_verify else "false",
            },
        }
        if prometheus.keda_authentication is not None:
            trigger["authenticationRef"] = {
                "name": prometheus.keda_authentication.name,
                "kind": prometheus.keda_authentication.kind.value,
            }
        out.append(
            {
                "apiVersion": "keda.sh/v1alpha1",
                "kind": "ScaledObject",
                "metadata": metadata(
                    names.warm_pool_name(pool.name),
                    policy=policy_set.policy.name,
                    namespace=namespace,
                    labels=_pod_labels(pool),
                ),
                "spec": {
                    "scaleTargetRef": {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": names.warm_pool_name(pool.name),
                    },
                    "minReplicaCount": floor,
                    "maxReplicaCount": max(1, ceil(pool.warm_pool.max_gpus / pool.gpus_per_node)),
                    "pollingInterval": POLLING_INTERVAL_SECONDS,
                    "cooldownPeriod": COOLDOWN_SECONDS,
                    "fallback": {
                        "failureThreshold": FALLBACK_FAILURES,
                        "replicas": floor,
                        "behavior": "currentReplicasIfHigher",
                    },
                    "triggers": [trigger],
                },
            }
        )
    return out
