"""Tests for the Kueue objects a policy renders to: flavors, priorities, cohorts and queues.

The default pool `a100` of `tests.builders` has 8 CPUs and 64 GiB of memory per GPU and an
on-demand floor of 8; `mi300` below is an AMD pool (`amd.com/gpu`, which sorts before
`nvidia.com/gpu`) with 12 CPUs and 96 GiB per GPU and no floor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from controller.api.loader import load_policy_set
from controller.api.policy_set import PolicySet
from controller.capacity import resolve_mix, split_quotas
from controller.render import kueue
from controller.render.objects import KubeObject
from tests.builders import policy_doc, pool_doc, project_doc

Doc = dict[str, Any]

MANAGED = {"app.kubernetes.io/managed-by": "quartermaster", "quartermaster.dev/policy": "fleet"}
MI300 = pool_doc(
    "mi300",
    gpuResource="amd.com/gpu",
    cpusPerGpu=12,
    memoryGiBPerGpu=96,
    onDemand={"floorGpus": 0, "ceilingGpus": 32},
)
H100 = pool_doc("h100", onDemand={"floorGpus": 0, "ceilingGpus": 32})
TIERS: list[Doc] = [
    {"name": "production", "priority": 1000},
    {"name": "research", "priority": 100, "preemption": "Never"},
    {"name": "secure", "priority": 500, "allowSpot": False},
]


def load(policy: Doc, *projects: Doc) -> PolicySet:
    return load_policy_set(
        [("policy.yaml", policy), *((f"project-{i}.yaml", p) for i, p in enumerate(projects))]
    )


def queue_of(
    policy_set: PolicySet, project: str, targets: Mapping[str, int] | None = None
) -> KubeObject:
    """The ClusterQueue of one project under the mix resolved for `targets`."""
    found = policy_set.project(project)
    assert found is not None
    quotas = split_quotas(policy_set, resolve_mix(policy_set, targets))
    return kueue.cluster_queue(policy_set, found, quotas)


def quota(nominal: int, pool: str = "a100", **limits: int) -> list[Doc]:
    return [{"pool": pool, "nominalGpus": nominal, **limits}]


def resource(name: str, nominal: int | str, **limits: int | str) -> dict[str, Any]:
    return {"name": name, "nominalQuota": nominal, **limits}


# --------------------------------------------------------------------------- ClusterQueue


@pytest.mark.parametrize(
    ("project", "want_flavors"),
    [
        pytest.param(
            project_doc(quotas=quota(16)),
            ["a100-spot", "a100-on-demand"],
            id="a spot-capable project lists the spot flavor before the on-demand one",
        ),
        pytest.param(
            project_doc(quotas=[*quota(8, "h100"), *quota(16)]),
            ["h100-spot", "h100-on-demand", "a100-spot", "a100-on-demand"],
            id="pools come in the project's quota order, each spot then on-demand",
        ),
        pytest.param(
            project_doc(quotas=[*quota(16), *quota(8, "h100")]),
            ["a100-spot", "a100-on-demand", "h100-spot", "h100-on-demand"],
            id="reversing the quota order reverses the pools",
        ),
        pytest.param(
            project_doc(quotas=[*quota(8, "h100"), *quota(16)], allowSpot=False),
            ["h100-on-demand", "a100-on-demand"],
            id="a project that forbids spot lists only on-demand flavors",
        ),
        pytest.param(
            project_doc(tier="secure", quotas=[*quota(8, "h100"), *quota(16)]),
            ["h100-on-demand", "a100-on-demand"],
            id="a project in a tier that forbids spot lists only on-demand flavors",
        ),
    ],
)
def test_cluster_queue_flavor_order(project: Doc, want_flavors: list[str]) -> None:
    policy_set = load(policy_doc(tiers=TIERS, pools=[pool_doc(), H100]), project)
    queue = queue_of(policy_set, "vision")
    [group] = queue["spec"]["resourceGroups"]
    assert [f["name"] for f in group["flavors"]] == want_flavors


@pytest.mark.parametrize(
    ("project", "targets", "want_group"),
    [
        pytest.param(
            project_doc(quotas=quota(16)),
            None,
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "a100-spot",
                        "resources": [
                            resource("cpu", 64),
                            resource("memory", "512Gi"),
                            resource("nvidia.com/gpu", 8),
                        ],
                    },
                    {
                        "name": "a100-on-demand",
                        "resources": [
                            resource("cpu", 64),
                            resource("memory", "512Gi"),
                            resource("nvidia.com/gpu", 8),
                        ],
                    },
                ],
            },
            id="the floor of 8 of 16 GPUs gives each flavor 8 GPUs, 64 CPUs and 512Gi",
        ),
        pytest.param(
            project_doc(quotas=[*quota(8, "mi300"), *quota(16)]),
            {"mi300": 2, "a100": 12},
            {
                "coveredResources": ["cpu", "memory", "amd.com/gpu", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "mi300-spot",
                        "resources": [
                            resource("cpu", 72),
                            resource("memory", "576Gi"),
                            resource("amd.com/gpu", 6),
                            resource("nvidia.com/gpu", 0),
                        ],
                    },
                    {
                        "name": "mi300-on-demand",
                        "resources": [
                            resource("cpu", 24),
                            resource("memory", "192Gi"),
                            resource("amd.com/gpu", 2),
                            resource("nvidia.com/gpu", 0),
                        ],
                    },
                    {
                        "name": "a100-spot",
                        "resources": [
                            resource("cpu", 32),
                            resource("memory", "256Gi"),
                            resource("amd.com/gpu", 0),
                            resource("nvidia.com/gpu", 4),
                        ],
                    },
                    {
                        "name": "a100-on-demand",
                        "resources": [
                            resource("cpu", 96),
                            resource("memory", "768Gi"),
                            resource("amd.com/gpu", 0),
                            resource("nvidia.com/gpu", 12),
                        ],
                    },
                ],
            },
            id="a second GPU resource is covered in sorted order and is 0 on the other pool",
        ),
        pytest.param(
            project_doc(quotas=quota(16, borrowingLimitGpus=10, lendingLimitGpus=4)),
            None,
            # under the 8/8 floor mix both limits split evenly: borrowing 5/5, lending 2/2
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": name,
                        "resources": [
                            resource("cpu", 64, borrowingLimit=40, lendingLimit=16),
                            resource(
                                "memory", "512Gi", borrowingLimit="320Gi", lendingLimit="128Gi"
                            ),
                            resource("nvidia.com/gpu", 8, borrowingLimit=5, lendingLimit=2),
                        ],
                    }
                    for name in ("a100-spot", "a100-on-demand")
                ],
            },
            id="borrowing and lending limits scale to CPU and memory like the nominal quota",
        ),
        pytest.param(
            project_doc(quotas=[*quota(8, "mi300", borrowingLimitGpus=4), *quota(16)]),
            {"mi300": 8},
            {
                "coveredResources": ["cpu", "memory", "amd.com/gpu", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "mi300-spot",
                        "resources": [
                            resource("cpu", 0, borrowingLimit=0),
                            resource("memory", "0Gi", borrowingLimit="0Gi"),
                            resource("amd.com/gpu", 0, borrowingLimit=0),
                            resource("nvidia.com/gpu", 0),
                        ],
                    },
                    {
                        "name": "mi300-on-demand",
                        "resources": [
                            resource("cpu", 96, borrowingLimit=48),
                            resource("memory", "768Gi", borrowingLimit="384Gi"),
                            resource("amd.com/gpu", 8, borrowingLimit=4),
                            resource("nvidia.com/gpu", 0),
                        ],
                    },
                    {
                        "name": "a100-spot",
                        "resources": [
                            resource("cpu", 64),
                            resource("memory", "512Gi"),
                            resource("amd.com/gpu", 0),
                            resource("nvidia.com/gpu", 8),
                        ],
                    },
                    {
                        "name": "a100-on-demand",
                        "resources": [
                            resource("cpu", 64),
                            resource("memory", "512Gi"),
                            resource("amd.com/gpu", 0),
                            resource("nvidia.com/gpu", 8),
                        ],
                    },
                ],
            },
            id="the other pool's GPU resource carries no limits, only a zero nominal quota",
        ),
    ],
)
def test_cluster_queue_resources(
    project: Doc, targets: Mapping[str, int] | None, want_group: dict[str, Any]
) -> None:
    policy_set = load(policy_doc(pools=[pool_doc(), MI300]), project)
    queue = queue_of(policy_set, "vision", targets)
    assert queue["spec"]["resourceGroups"] == [want_group]
    for flavor in want_group["flavors"]:
        assert [r["name"] for r in flavor["resources"]] == want_group["coveredResources"]


def test_cluster_queue_whole_object() -> None:
    policy_set = load(
        policy_doc(),
        project_doc("vision", namespaces=["vision-train", "vision-eval"], fairShareWeight=3),
    )
    assert queue_of(policy_set, "vision", {"a100": 12}) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {
            "name": "vision",
            "labels": {
                **MANAGED,
                "quartermaster.dev/project": "vision",
                "quartermaster.dev/tier": "production",
            },
        },
        "spec": {
            "cohortName": "fleet-tier-production",
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "In",
                        "values": ["vision-eval", "vision-train"],
                    }
                ]
            },
            "queueingStrategy": "BestEffortFIFO",
            "flavorFungibility": {
                "whenCanBorrow": "TryNextFlavor",
                "whenCanPreempt": "TryNextFlavor",
            },
            "preemption": {
                "withinClusterQueue": "LowerPriority",
                "reclaimWithinCohort": "LowerPriority",
                "borrowWithinCohort": {"policy": "Never"},
            },
            "fairSharing": {"weight": 3},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100-spot",
                            "resources": [
                                resource("cpu", 32),
                                resource("memory", "256Gi"),
                                resource("nvidia.com/gpu", 4),
                            ],
                        },
                        {
                            "name": "a100-on-demand",
                            "resources": [
                                resource("cpu", 96),
                                resource("memory", "768Gi"),
                                resource("nvidia.com/gpu", 12),
                            ],
                        },
                    ],
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("project", "want_cohort"),
    [
        pytest.param(
            project_doc(),
            "fleet-tier-production",
            id="a project sharing capacity joins its tier's cohort by default",
        ),
        pytest.param(
            project_doc(tier="research", shareCapacity=True),
            "fleet-tier-research",
            id="the cohort is the project's own tier's",
        ),
        pytest.param(
            project_doc(shareCapacity=False),
            None,
            id="a project that does not share capacity has no cohortName at all",
        ),
    ],
)
def test_cluster_queue_cohort(project: Doc, want_cohort: str | None) -> None:
    spec = queue_of(load(policy_doc(), project), "vision")["spec"]
    assert spec.get("cohortName") == want_cohort
    assert ("cohortName" in spec) is (want_cohort is not None)


@pytest.mark.parametrize(
    ("namespaces", "want_values"),
    [
        pytest.param(["vision"], ["vision"], id="one namespace"),
        pytest.param(
            ["zeta", "alpha", "mid"],
            ["alpha", "mid", "zeta"],
            id="namespaces are selected in sorted order whatever order the project lists them",
        ),
    ],
)
def test_cluster_queue_namespace_selector(namespaces: list[str], want_values: list[str]) -> None:
    spec = queue_of(load(policy_doc(), project_doc(namespaces=namespaces)), "vision")["spec"]
    assert spec["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": want_values}
        ]
    }


@pytest.mark.parametrize(
    ("stance", "want_preemption"),
    [
        pytest.param(
            "Never",
            {
                "withinClusterQueue": "Never",
                "reclaimWithinCohort": "Never",
                "borrowWithinCohort": {"policy": "Never"},
            },
            id="a Never tier preempts nothing, anywhere",
        ),
        pytest.param(
            "LowerPriority",
            {
                "withinClusterQueue": "LowerPriority",
                "reclaimWithinCohort": "LowerPriority",
                "borrowWithinCohort": {"policy": "Never"},
            },
            id="a LowerPriority tier preempts and reclaims from lower priorities only",
        ),
        pytest.param(
            "Any",
            {
                "withinClusterQueue": "LowerOrNewerEqualPriority",
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority"},
            },
            id="an Any tier reclaims whatever the priority and may preempt to borrow",
        ),
    ],
)
def test_cluster_queue_preemption(stance: str, want_preemption: dict[str, Any]) -> None:
    policy = policy_doc(tiers=[{"name": "production", "priority": 1000, "preemption": stance}])
    spec = queue_of(load(policy, project_doc()), "vision")["spec"]
    assert spec["preemption"] == want_preemption


@pytest.mark.parametrize(
    ("fair_share_weight", "want_weight"),
    [
        pytest.param(None, 1, id="the default weight 1 is the integer 1"),
        pytest.param(2, 2, id="weight 2 stays the integer 2"),
        pytest.param(2.0, 2, id="weight 2.0 becomes the integer 2"),
        pytest.param(0.5, "0.5", id="weight 0.5 becomes the quantity string 0.5"),
        pytest.param(0, 0, id="weight 0 is the integer 0"),
    ],
)
def test_fair_share_weights(fair_share_weight: float | None, want_weight: int | str) -> None:
    extra: Doc = {} if fair_share_weight is None else {"fairShareWeight": fair_share_weight}
    policy = policy_doc(tiers=[{"name": "production", "priority": 1000, **extra}])
    policy_set = load(policy, project_doc(**extra))
    queue = queue_of(policy_set, "vision")
    assert queue["spec"]["fairSharing"] == {"weight": want_weight}
    tier_cohort = kueue.cohorts(policy_set)[1]
    assert tier_cohort["spec"]["fairSharing"] == {"weight": want_weight}


# --------------------------------------------------------------------------- LocalQueue


@pytest.mark.parametrize(
    ("namespaces", "want_namespaces"),
    [
        pytest.param(["vision"], ["vision"], id="one namespace gets one LocalQueue"),
        pytest.param(
            ["vision-train", "vision-eval"],
            ["vision-eval", "vision-train"],
            id="each namespace gets a LocalQueue, in sorted order",
        ),
    ],
)
def test_local_queues(namespaces: list[str], want_namespaces: list[str]) -> None:
    policy_set = load(policy_doc(), project_doc(namespaces=namespaces))
    assert kueue.local_queues(policy_set, policy_set.projects[0]) == [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {
                "name": "vision",
                "namespace": namespace,
                "labels": {**MANAGED, "quartermaster.dev/project": "vision"},
            },
            "spec": {"clusterQueue": "vision"},
        }
        for namespace in want_namespaces
    ]


# --------------------------------------------------------------------------- cohorts


def test_cohorts_root_and_tiers_with_reservations() -> None:
    policy = policy_doc(
        pools=[pool_doc(), MI300],
        tiers=[
            {
                "name": "production",
                "priority": 1000,
                "fairShareWeight": 2,
                "reserved": [{"pool": "a100", "gpus": 8}, {"pool": "mi300", "gpus": 4}],
            },
            {"name": "research", "priority": 100, "fairShareWeight": 0.5},
            {"name": "batch", "priority": 10, "reserved": [{"pool": "a100", "gpus": 2}]},
        ],
    )
    assert kueue.cohorts(load(policy)) == [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {"name": "fleet", "labels": MANAGED},
            "spec": {},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {
                "name": "fleet-tier-production",
                "labels": {**MANAGED, "quartermaster.dev/tier": "production"},
            },
            "spec": {
                "parentName": "fleet",
                "fairSharing": {"weight": 2},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "amd.com/gpu", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "a100-on-demand",
                                "resources": [
                                    resource("cpu", 64),
                                    resource("memory", "512Gi"),
                                    resource("amd.com/gpu", 0),
                                    resource("nvidia.com/gpu", 8),
                                ],
                            },
                            {
                                "name": "mi300-on-demand",
                                "resources": [
                                    resource("cpu", 48),
                                    resource("memory", "384Gi"),
                                    resource("amd.com/gpu", 4),
                                    resource("nvidia.com/gpu", 0),
                                ],
                            },
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {
                "name": "fleet-tier-research",
                "labels": {**MANAGED, "quartermaster.dev/tier": "research"},
            },
            "spec": {"parentName": "fleet", "fairSharing": {"weight": "0.5"}},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {
                "name": "fleet-tier-batch",
                "labels": {**MANAGED, "quartermaster.dev/tier": "batch"},
            },
            "spec": {
                "parentName": "fleet",
                "fairSharing": {"weight": 1},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "a100-on-demand",
                                "resources": [
                                    resource("cpu", 16),
                                    resource("memory", "128Gi"),
                                    resource("nvidia.com/gpu", 2),
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    ]


# --------------------------------------------------------------------------- priorities


def test_workload_priority_classes_carry_each_tier_priority() -> None:
    policy_set = load(policy_doc(tiers=TIERS))
    assert kueue.workload_priority_classes(policy_set) == [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": tier, "labels": {**MANAGED, "quartermaster.dev/tier": tier}},
            "value": value,
            "description": f"Quartermaster tier {tier} of policy fleet",
        }
        for tier, value in (("production", 1000), ("research", 100), ("secure", 500))
    ]


# --------------------------------------------------------------------------- ResourceFlavor


@pytest.mark.parametrize(
    ("pool", "want_flavors"),
    [
        pytest.param(
            pool_doc(),
            [
                (
                    "a100-spot",
                    {"karpenter.sh/capacity-type": "spot", "quartermaster.dev/pool": "a100"},
                    [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {
                            "key": "quartermaster.dev/spot",
                            "operator": "Exists",
                            "effect": "NoSchedule",
                        },
                    ],
                ),
                (
                    "a100-on-demand",
                    {"karpenter.sh/capacity-type": "on-demand", "quartermaster.dev/pool": "a100"},
                    [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                ),
            ],
            id="the spot flavor alone tolerates the spot taint; both tolerate the GPU taint",
        ),
        pytest.param(
            pool_doc(
                "mi300",
                gpuResource="amd.com/gpu",
                nodeLabels={"team": "ml", "accelerator": "mi300x"},
            ),
            [
                (
                    "mi300-spot",
                    {
                        "karpenter.sh/capacity-type": "spot",
                        "quartermaster.dev/pool": "mi300",
                        "accelerator": "mi300x",
                        "team": "ml",
                    },
                    [
                        {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {
                            "key": "quartermaster.dev/spot",
                            "operator": "Exists",
                            "effect": "NoSchedule",
                        },
                    ],
                ),
                (
                    "mi300-on-demand",
                    {
                        "karpenter.sh/capacity-type": "on-demand",
                        "quartermaster.dev/pool": "mi300",
                        "accelerator": "mi300x",
                        "team": "ml",
                    },
                    [{"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                ),
            ],
            id="pool node labels join the flavor's node labels and the GPU toleration follows "
            "the pool's resource",
        ),
    ],
)
def test_resource_flavors(
    pool: Doc, want_flavors: list[tuple[str, dict[str, str], list[dict[str, str]]]]
) -> None:
    flavors = kueue.resource_flavors(load(policy_doc(pools=[pool])))
    assert flavors == [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {
                "name": name,
                "labels": {**MANAGED, "quartermaster.dev/pool": pool["name"]},
            },
            "spec": {"nodeLabels": labels, "tolerations": tolerations},
        }
        for name, labels, tolerations in want_flavors
    ]
    for flavor, (_, labels, _) in zip(flavors, want_flavors, strict=True):
        assert list(flavor["spec"]["nodeLabels"]) == list(labels)


def test_resource_flavors_cover_every_pool_in_policy_order() -> None:
    flavors = kueue.resource_flavors(load(policy_doc(pools=[pool_doc(), MI300, H100])))
    assert [f["metadata"]["name"] for f in flavors] == [
        "a100-spot",
        "a100-on-demand",
        "mi300-spot",
        "mi300-on-demand",
        "h100-spot",
        "h100-on-demand",
    ]
