"""Tests for the Karpenter NodePools: one per pool and capacity type, limited by the mix."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api.loader import load_policy_set
from controller.api.policy_set import PolicySet
from controller.api.types import PoolMix
from controller.capacity import resolve_mix
from controller.render import karpenter
from controller.render.objects import KubeObject
from tests.builders import policy_doc, pool_doc

Doc = dict[str, Any]

MANAGED = {"app.kubernetes.io/managed-by": "quartermaster", "quartermaster.dev/policy": "fleet"}
H100 = pool_doc("h100", onDemand={"floorGpus": 0, "ceilingGpus": 32})


def load(policy: Doc) -> PolicySet:
    return load_policy_set([("policy.yaml", policy)])


def by_name(node_pools: list[KubeObject]) -> dict[str, KubeObject]:
    return {n["metadata"]["name"]: n for n in node_pools}


def test_one_node_pool_per_pool_and_capacity_type_in_policy_order() -> None:
    policy_set = load(policy_doc(pools=[H100, pool_doc()]))
    node_pools = karpenter.node_pools(policy_set, resolve_mix(policy_set))
    assert [n["metadata"]["name"] for n in node_pools] == [
        "h100-spot",
        "h100-on-demand",
        "a100-spot",
        "a100-on-demand",
    ]
    assert [n["metadata"]["labels"]["quartermaster.dev/pool"] for n in node_pools] == [
        "h100",
        "h100",
        "a100",
        "a100",
    ]
    assert [n["spec"]["template"]["metadata"]["labels"] for n in node_pools] == [
        {"quartermaster.dev/pool": pool} for pool in ("h100", "h100", "a100", "a100")
    ]


@pytest.mark.parametrize(
    ("mixes", "want_limits"),
    [
        pytest.param(
            (PoolMix("a100", on_demand_gpus=8, spot_gpus=8), PoolMix("h100", 0, 24)),
            {"a100-spot": 8, "a100-on-demand": 8, "h100-spot": 24, "h100-on-demand": 0},
            id="an even split and an all-spot pool",
        ),
        pytest.param(
            (PoolMix("a100", on_demand_gpus=64, spot_gpus=0), PoolMix("h100", 16, 8)),
            {"a100-spot": 0, "a100-on-demand": 64, "h100-spot": 8, "h100-on-demand": 16},
            id="an all-on-demand pool gets a spot limit of zero",
        ),
        pytest.param(
            (PoolMix("a100", on_demand_gpus=0, spot_gpus=0), PoolMix("h100", 3, 97)),
            {"a100-spot": 0, "a100-on-demand": 0, "h100-spot": 104, "h100-on-demand": 8},
            id="an empty pool can launch nothing and part-node limits round up to whole nodes",
        ),
    ],
)
def test_limits_equal_the_mix(mixes: tuple[PoolMix, ...], want_limits: dict[str, int]) -> None:
    policy_set = load(policy_doc(pools=[pool_doc(), H100]))
    got = {
        name: n["spec"]["limits"]
        for name, n in by_name(karpenter.node_pools(policy_set, mixes)).items()
    }
    assert got == {name: {"nvidia.com/gpu": gpus} for name, gpus in want_limits.items()}


def test_limits_are_on_the_pool_gpu_resource() -> None:
    policy_set = load(policy_doc(pools=[pool_doc("mi300", gpuResource="amd.com/gpu")]))
    node_pools = karpenter.node_pools(policy_set, (PoolMix("mi300", 8, 40),))
    assert [n["spec"]["limits"] for n in node_pools] == [{"amd.com/gpu": 40}, {"amd.com/gpu": 8}]


def test_spot_weighs_more_than_on_demand() -> None:
    policy_set = load(policy_doc())
    pools = by_name(karpenter.node_pools(policy_set, resolve_mix(policy_set)))
    assert pools["a100-spot"]["spec"]["weight"] == 100
    assert pools["a100-on-demand"]["spec"]["weight"] == 10
    assert pools["a100-spot"]["spec"]["weight"] > pools["a100-on-demand"]["spec"]["weight"]


@pytest.mark.parametrize(
    ("pool", "want_requirements"),
    [
        pytest.param(
            pool_doc(),
            {
                "spot": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                    {
                        "key": "topology.kubernetes.io/zone",
                        "operator": "In",
                        "values": ["us-east-1a"],
                    },
                ],
                "on-demand": [
                    {
                        "key": "karpenter.sh/capacity-type",
                        "operator": "In",
                        "values": ["on-demand"],
                    },
                    {
                        "key": "topology.kubernetes.io/zone",
                        "operator": "In",
                        "values": ["us-east-1a"],
                    },
                ],
            },
            id="capacity type and zone only when no instance types or node labels are given",
        ),
        pytest.param(
            pool_doc(
                zones=["us-east-1c", "us-east-1a", "us-east-1b"],
                instanceTypes=["p4de.24xlarge", "p4d.24xlarge"],
                nodeLabels={"team": "ml", "accelerator": "a100"},
            ),
            {
                capacity_type: [
                    {
                        "key": "karpenter.sh/capacity-type",
                        "operator": "In",
                        "values": [capacity_type],
                    },
                    {
                        "key": "topology.kubernetes.io/zone",
                        "operator": "In",
                        "values": ["us-east-1a", "us-east-1b", "us-east-1c"],
                    },
                    {
                        "key": "node.kubernetes.io/instance-type",
                        "operator": "In",
                        "values": ["p4d.24xlarge", "p4de.24xlarge"],
                    },
                    {"key": "accelerator", "operator": "In", "values": ["a100"]},
                    {"key": "team", "operator": "In", "values": ["ml"]},
                ]
                for capacity_type in ("spot", "on-demand")
            },
            id="zones and instance types sorted, then node labels sorted by key",
        ),
    ],
)
def test_requirements(pool: Doc, want_requirements: dict[str, list[dict[str, Any]]]) -> None:
    policy_set = load(policy_doc(pools=[pool]))
    pools = by_name(karpenter.node_pools(policy_set, resolve_mix(policy_set)))
    got = {
        name.removeprefix("a100-"): n["spec"]["template"]["spec"]["requirements"]
        for name, n in pools.items()
    }
    assert got == want_requirements


@pytest.mark.parametrize(
    ("pool", "want_taints"),
    [
        pytest.param(
            pool_doc(),
            {
                "a100-spot": [
                    {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
                    {"key": "quartermaster.dev/spot", "value": "true", "effect": "NoSchedule"},
                ],
                "a100-on-demand": [
                    {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
                ],
            },
            id="both node pools are tainted for GPUs and only spot nodes for spot",
        ),
        pytest.param(
            pool_doc("mi300", gpuResource="amd.com/gpu"),
            {
                "mi300-spot": [
                    {"key": "amd.com/gpu", "value": "true", "effect": "NoSchedule"},
                    {"key": "quartermaster.dev/spot", "value": "true", "effect": "NoSchedule"},
                ],
                "mi300-on-demand": [
                    {"key": "amd.com/gpu", "value": "true", "effect": "NoSchedule"},
                ],
            },
            id="the GPU taint is keyed by the pool's GPU resource",
        ),
    ],
)
def test_taints(pool: Doc, want_taints: dict[str, list[dict[str, str]]]) -> None:
    policy_set = load(policy_doc(pools=[pool]))
    pools = by_name(karpenter.node_pools(policy_set, resolve_mix(policy_set)))
    assert {
        name: n["spec"]["template"]["spec"]["taints"] for name, n in pools.items()
    } == want_taints


@pytest.mark.parametrize(
    ("node_class", "want_ref"),
    [
        pytest.param(
            {"name": "gpu"},
            {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
            id="a node class by name alone defaults to the AWS EC2NodeClass",
        ),
        pytest.param(
            {"name": "gpu-azure", "group": "karpenter.azure.com", "kind": "AKSNodeClass"},
            {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "gpu-azure"},
            id="a given group and kind are used as given",
        ),
    ],
)
def test_node_class_ref(node_class: Doc, want_ref: dict[str, str]) -> None:
    policy_set = load(policy_doc(pools=[pool_doc(nodeClass=node_class)]))
    for node_pool in karpenter.node_pools(policy_set, resolve_mix(policy_set)):
        assert node_pool["spec"]["template"]["spec"]["nodeClassRef"] == want_ref


def test_whole_on_demand_node_pool() -> None:
    """Disruption removes only empty nodes, never drifts or consolidates busy ones; no expiry."""
    policy_set = load(policy_doc())
    node_pools = by_name(karpenter.node_pools(policy_set, (PoolMix("a100", 24, 40),)))
    assert node_pools["a100-on-demand"] == {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {
            "name": "a100-on-demand",
            "labels": {**MANAGED, "quartermaster.dev/pool": "a100"},
        },
        "spec": {
            "weight": 10,
            "limits": {"nvidia.com/gpu": 24},
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": "10m",
                "budgets": [
                    {"nodes": "10%", "reasons": ["Empty"]},
                    {"nodes": "0", "reasons": ["Drifted", "Underutilized"]},
                ],
            },
            "template": {
                "metadata": {"labels": {"quartermaster.dev/pool": "a100"}},
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": "gpu",
                    },
                    "requirements": [
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": ["on-demand"],
                        },
                        {
                            "key": "topology.kubernetes.io/zone",
                            "operator": "In",
                            "values": ["us-east-1a"],
                        },
                    ],
                    "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                    "expireAfter": "Never",
                },
            },
        },
    }
    spot = node_pools["a100-spot"]["spec"]
    assert spot["disruption"] == node_pools["a100-on-demand"]["spec"]["disruption"]
    assert spot["template"]["spec"]["expireAfter"] == "Never"
