"""Tests for warm pools: placeholder Deployments scaled by KEDA from the controller's metric."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api.loader import load_policy_set
from controller.api.policy_set import PolicySet
from controller.render import keda
from tests.builders import policy_doc, pool_doc

Doc = dict[str, Any]

MANAGED = {"app.kubernetes.io/managed-by": "quartermaster", "quartermaster.dev/policy": "fleet"}
WARM_LABELS = {"app.kubernetes.io/component": "warm-pool", "quartermaster.dev/pool": "a100"}
NAMESPACE = "quartermaster-system"


def load(policy: Doc) -> PolicySet:
    return load_policy_set([("policy.yaml", policy)])


def warm(name: str = "a100", min_gpus: int = 0, max_gpus: int = 16, **pool: Any) -> Doc:
    return pool_doc(name, warmPool={"minGpus": min_gpus, "maxGpus": max_gpus}, **pool)


@pytest.mark.parametrize(
    ("pools", "want_warm"),
    [
        pytest.param([pool_doc()], [], id="a pool without a warm pool section gets nothing"),
        pytest.param(
            [warm(max_gpus=0)], [], id="a warm pool with maxGpus 0 is off and gets nothing"
        ),
        pytest.param([warm()], ["a100"], id="a warm pool with maxGpus 16 gets its objects"),
        pytest.param(
            [warm("h100"), pool_doc(), warm("l40s", max_gpus=8)],
            ["h100", "l40s"],
            id="only the pools with a warm pool get objects, in policy order",
        ),
    ],
)
def test_warm_pool_objects_only_where_enabled(pools: list[Doc], want_warm: list[str]) -> None:
    policy_set = load(policy_doc(pools=pools))
    want_names = [f"warm-{pool}" for pool in want_warm]
    assert [d["metadata"]["name"] for d in keda.deployments(policy_set, NAMESPACE)] == want_names
    assert [s["metadata"]["name"] for s in keda.scaled_objects(policy_set, NAMESPACE)] == (
        want_names
    )
    want_priority_classes = ["quartermaster-warm-pool"] if want_warm else []
    assert [p["metadata"]["name"] for p in keda.priority_classes(policy_set)] == (
        want_priority_classes
    )


def test_priority_class() -> None:
    assert keda.priority_classes(load(policy_doc(pools=[warm(), warm("h100")]))) == [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "quartermaster-warm-pool", "labels": MANAGED},
            "value": -100,
            "preemptionPolicy": "Never",
            "globalDefault": False,
            "description": "Quartermaster warm-pool placeholders: below every workload, "
            "evicted first, never preempting.",
        }
    ]


@pytest.mark.parametrize(
    ("gpus_per_node", "min_gpus", "max_gpus", "want_min", "want_max"),
    [
        pytest.param(8, 0, 16, 0, 2, id="no minimum keeps no node and 16 GPUs are 2 nodes"),
        pytest.param(8, 4, 20, 1, 3, id="part nodes round up: 4 GPUs is 1 node, 20 is 3"),
        pytest.param(8, 16, 16, 2, 2, id="a minimum equal to the maximum pins the count"),
        pytest.param(4, 5, 9, 2, 3, id="4-GPU nodes: 5 GPUs need 2 nodes, 9 need 3"),
        pytest.param(8, 0, 1, 0, 1, id="a maximum below one node still allows one node"),
        pytest.param(1, 3, 7, 3, 7, id="1-GPU nodes count GPUs"),
    ],
)
def test_replica_counts_are_whole_nodes(
    gpus_per_node: int, min_gpus: int, max_gpus: int, want_min: int, want_max: int
) -> None:
    policy_set = load(
        policy_doc(pools=[warm(min_gpus=min_gpus, max_gpus=max_gpus, gpusPerNode=gpus_per_node)])
    )
    [scaled] = keda.scaled_objects(policy_set, NAMESPACE)
    assert scaled["spec"]["minReplicaCount"] == want_min
    assert scaled["spec"]["maxReplicaCount"] == want_max
    # No idleReplicaCount: with a minimum of 0 KEDA scales to zero when the target is 0, and
    # KEDA refuses an idleReplicaCount that is not below minReplicaCount.
    assert "idleReplicaCount" not in scaled["spec"]
    assert scaled["spec"]["fallback"] == {
        "failureThreshold": 3,
        "replicas": want_min,
        "behavior": "currentReplicasIfHigher",
    }
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["metadata"]["threshold"] == str(gpus_per_node)


@pytest.mark.parametrize(
    ("prometheus", "want_metadata", "want_authentication"),
    [
        pytest.param(
            None,
            {
                "serverAddress": "http://prometheus-operated.monitoring.svc:9090",
                "query": 'max(quartermaster_warm_pool_target_gpus{pool="a100"})',
                "threshold": "8",
                "ignoreNullValues": "false",
                "unsafeSsl": "false",
            },
            None,
            id="default Prometheus: verified TLS and no authenticationRef",
        ),
        pytest.param(
            {"url": "https://prom.example.com:9091", "insecureSkipVerify": True},
            {
                "serverAddress": "https://prom.example.com:9091",
                "query": 'max(quartermaster_warm_pool_target_gpus{pool="a100"})',
                "threshold": "8",
                "ignoreNullValues": "false",
                "unsafeSsl": "true",
            },
            None,
            id="insecureSkipVerify turns unsafeSsl on and the URL is the server address",
        ),
        pytest.param(
            {"kedaAuthentication": {"name": "prom-auth"}},
            {
                "serverAddress": "http://prometheus-operated.monitoring.svc:9090",
                "query": 'max(quartermaster_warm_pool_target_gpus{pool="a100"})',
                "threshold": "8",
                "ignoreNullValues": "false",
                "unsafeSsl": "false",
            },
            {"name": "prom-auth", "kind": "ClusterTriggerAuthentication"},
            id="an authentication ref without a kind defaults to ClusterTriggerAuthentication",
        ),
        pytest.param(
            {"kedaAuthentication": {"name": "prom-auth", "kind": "TriggerAuthentication"}},
            {
                "serverAddress": "http://prometheus-operated.monitoring.svc:9090",
                "query": 'max(quartermaster_warm_pool_target_gpus{pool="a100"})',
                "threshold": "8",
                "ignoreNullValues": "false",
                "unsafeSsl": "false",
            },
            {"name": "prom-auth", "kind": "TriggerAuthentication"},
            id="an authentication ref of kind TriggerAuthentication is used as given",
        ),
    ],
)
def test_trigger(
    prometheus: Doc | None,
    want_metadata: dict[str, str],
    want_authentication: dict[str, str] | None,
) -> None:
    extra = {} if prometheus is None else {"prometheus": prometheus}
    [scaled] = keda.scaled_objects(load(policy_doc(pools=[warm()], **extra)), NAMESPACE)
    want_trigger: dict[str, Any] = {
        "type": "prometheus",
        "name": "warm-pool-target",
        "metricType": "AverageValue",
        "metadata": want_metadata,
    }
    if want_authentication is not None:
        want_trigger["authenticationRef"] = want_authentication
    assert scaled["spec"]["triggers"] == [want_trigger]


@pytest.mark.parametrize(
    ("pool", "want_query"),
    [
        pytest.param("a100", 'max(quartermaster_warm_pool_target_gpus{pool="a100"})', id="a100"),
        pytest.param(
            "h100-east",
            'max(quartermaster_warm_pool_target_gpus{pool="h100-east"})',
            id="the pool name is quoted whole, hyphens included",
        ),
    ],
)
def test_warm_pool_query(pool: str, want_query: str) -> None:
    assert keda.warm_pool_query(pool) == want_query


def test_whole_scaled_object() -> None:
    policy_set = load(policy_doc(pools=[warm(min_gpus=8, max_gpus=32)]))
    assert keda.scaled_objects(policy_set, "gpu-ops") == [
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {
                "name": "warm-a100",
                "namespace": "gpu-ops",
                "labels": {**MANAGED, **WARM_LABELS},
            },
            "spec": {
                "scaleTargetRef": {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "warm-a100",
                },
                "minReplicaCount": 1,
                "maxReplicaCount": 4,
                "pollingInterval": 30,
                "cooldownPeriod": 300,
                "fallback": {
                    "failureThreshold": 3,
                    "replicas": 1,
                    "behavior": "currentReplicasIfHigher",
                },
                "triggers": [
                    {
                        "type": "prometheus",
                        "name": "warm-pool-target",
                        "metricType": "AverageValue",
                        "metadata": {
                            "serverAddress": "http://prometheus-operated.monitoring.svc:9090",
                            "query": 'max(quartermaster_warm_pool_target_gpus{pool="a100"})',
                            "threshold": "8",
                            "ignoreNullValues": "false",
                            "unsafeSsl": "false",
                        },
                    }
                ],
            },
        }
    ]


def test_whole_deployment() -> None:
    """Starts at the minimum (0 here); a whole node's GPUs; below every workload; locked down."""
    policy_set = load(policy_doc(pools=[warm("mi300", gpuResource="amd.com/gpu", gpusPerNode=4)]))
    labels = {"app.kubernetes.io/component": "warm-pool", "quartermaster.dev/pool": "mi300"}
    [deployment] = keda.deployments(policy_set, "gpu-ops")
    assert deployment == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "warm-mi300",
            "namespace": "gpu-ops",
            "labels": {**MANAGED, **labels},
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "priorityClassName": "quartermaster-warm-pool",
                    "terminationGracePeriodSeconds": 0,
                    "automountServiceAccountToken": False,
                    "nodeSelector": {"quartermaster.dev/pool": "mi300"},
                    "tolerations": [
                        {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {
                            "key": "quartermaster.dev/spot",
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
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {
                                "requests": {"amd.com/gpu": 4},
                                "limits": {"amd.com/gpu": 4},
                            },
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


@pytest.mark.parametrize(
    ("gpus_per_node", "min_gpus", "want_replicas"),
    [
        pytest.param(8, 0, 0, id="a pool with nothing to keep warm starts no placeholder"),
        pytest.param(8, 4, 1, id="part of a node keeps a whole node warm"),
        pytest.param(8, 16, 2, id="16 GPUs of 8-GPU nodes start 2 placeholders"),
        pytest.param(4, 5, 2, id="4-GPU nodes: 5 GPUs start 2 placeholders"),
    ],
)
def test_the_deployment_starts_at_the_warm_pool_minimum(
    gpus_per_node: int, min_gpus: int, want_replicas: int
) -> None:
    """Without `replicas` the server would start 1 (a node's worth of GPUs) before KEDA acts;
    the start is KEDA's own floor, so KEDA has nothing to correct."""
    policy_set = load(
        policy_doc(pools=[warm(min_gpus=min_gpus, max_gpus=32, gpusPerNode=gpus_per_node)])
    )
    [deployment] = keda.deployments(policy_set, NAMESPACE)
    [scaled] = keda.scaled_objects(policy_set, NAMESPACE)
    assert deployment["spec"]["replicas"] == want_replicas
    assert scaled["spec"]["minReplicaCount"] == want_replicas


@pytest.mark.parametrize(
    ("gpus_per_node", "want_requests"),
    [
        pytest.param(8, {"nvidia.com/gpu": 8}, id="an 8-GPU node's placeholder asks for 8"),
        pytest.param(1, {"nvidia.com/gpu": 1}, id="a 1-GPU node's placeholder asks for 1"),
    ],
)
def test_placeholder_asks_for_a_whole_node(
    gpus_per_node: int, want_requests: dict[str, int]
) -> None:
    policy_set = load(policy_doc(pools=[warm(gpusPerNode=gpus_per_node, max_gpus=8)]))
    [deployment] = keda.deployments(policy_set, NAMESPACE)
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["resources"] == {"requests": want_requests, "limits": want_requests}
