"""Steady state against what a real API server stores, kind by kind.

Each case pairs an object we render with the form a kube-apiserver 1.36 with Kueue 0.19,
Karpenter 1.x and KEDA 2.x gives back for it, written out here from Kubernetes' API machinery
(the test server cannot show these: it serves PriorityClass as a stand-in CRD that neither
canonicalises nor defaults, and no Deployments):
- built-in kinds (PriorityClass, Deployment) are re-encoded from Go types on every write:
  quantities canonical (`8` -> `"8"`), `omitempty` zero values gone (`globalDefault: false`),
  defaults filled in (Deployment `strategy`, `revisionHistoryLimit`,
  `progressDeadlineSeconds`; pod `dnsPolicy`, `restartPolicy`, `schedulerName`; container
  `imagePullPolicy`, `terminationMessagePath`, `terminationMessagePolicy`);
- custom resources are stored as sent plus their CRD's defaults, except where a webhook
  re-encodes them: Kueue's ClusterQueue defaulting webhook (create only) canonicalises its
  quantities (`1024Gi` -> `"1Ti"`, `0Gi` -> `"0"`) and adds its finalizer; the ResourceFlavor
  webhook adds its finalizer; KEDA labels its ScaledObjects and adds a finalizer;
- controllers add status, and Deployments also a revision annotation.
Cases marked "re-encoded" show a custom resource as another writer that round-trips it through
Go types (a webhook, `kubectl edit`, a GitOps tool) would leave it.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller import names
from controller.api.loader import load_policy_set
from controller.reconcile.diff import (
    field_changes,
    is_subset,
    list_keys,
    make_plan,
    update_form,
    with_last_applied,
)
from controller.reconcile.stored import DEFAULTS, stored_form
from controller.render.desired import render
from tests.builders import policy_doc, pool_doc, project_doc

Doc = dict[str, Any]

POLICY = policy_doc(
    tiers=[
        {
            "name": "production",
            "priority": 1000,
            "fairShareWeight": 0.5,
            "reserved": [{"pool": "a100", "gpus": 8}],
        },
        {"name": "research", "priority": 100, "preemption": "Never"},
    ],
    pools=[pool_doc(warmPool={"minGpus": 8, "maxGpus": 32})],
)
PROJECT = project_doc(
    "vision", quotas=[{"pool": "a100", "nominalGpus": 16, "borrowingLimitGpus": 8}]
)
RENDERED = render(load_policy_set([("policy.yaml", POLICY), ("projects.yaml", PROJECT)])).objects


def desired(kind: str, name: str) -> Doc:
    return copy.deepcopy(
        next(o for o in RENDERED if o["kind"] == kind and o["metadata"]["name"] == name)
    )


def stored_metadata(
    kind: str,
    name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    finalizers: list[str] | None = None,
) -> Doc:
    """Metadata as the server keeps it for an object we applied: ours plus the server's own."""
    applied = with_last_applied(update_form(desired(kind, name)))["metadata"]
    meta: Doc = {
        **applied,
        "labels": {**applied["labels"], **(labels or {})},
        "annotations": {**applied["annotations"], **(annotations or {})},
        "uid": "0b5e1c1e-5a0e-4d8c-9d7e-3f0c2a1b4c5d",
        "resourceVersion": "48213",
        "generation": 1,
        "creationTimestamp": "2026-03-02T10:00:00Z",
        "managedFields": [
            {
                "manager": names.FIELD_MANAGER,
                "operation": "Apply",
                "apiVersion": "v1",
                "time": "2026-03-02T10:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {}}},
            }
        ],
    }
    if finalizers:
        meta["finalizers"] = finalizers
    return meta


LABELS = {
    "app.kubernetes.io/managed-by": "quartermaster",
    "quartermaster.dev/policy": "fleet",
}
WARM = {"app.kubernetes.io/component": "warm-pool", "quartermaster.dev/pool": "a100"}
KUEUE = "kueue.x-k8s.io/v1beta2"
IN_USE = ["kueue.x-k8s.io/resource-in-use"]
DESCRIPTION = (
    "Quartermaster warm-pool placeholders: below every workload, evicted first, never preempting."
)


def priority_class() -> Doc:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": stored_metadata("PriorityClass", "quartermaster-warm-pool"),
        "value": -100,
        # globalDefault: false is omitted (a `bool` with omitempty).
        "preemptionPolicy": "Never",
        "description": DESCRIPTION,
    }


def workload_priority_class() -> Doc:
    return {
        "apiVersion": KUEUE,
        "kind": "WorkloadPriorityClass",
        "metadata": stored_metadata("WorkloadPriorityClass", "production"),
        "value": 1000,
        "description": "Quartermaster tier production of policy fleet",
    }


def resource_flavor() -> Doc:
    return {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": stored_metadata("ResourceFlavor", "a100-spot", finalizers=IN_USE),
        "spec": {
            "nodeLabels": {
                "karpenter.sh/capacity-type": "spot",
                "quartermaster.dev/pool": "a100",
            },
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "quartermaster.dev/spot", "operator": "Exists", "effect": "NoSchedule"},
            ],
        },
    }


def tier_cohort(*, weight: Any, cpu: Any, memory: Any, gpus: Any) -> Doc:
    return {
        "apiVersion": KUEUE,
        "kind": "Cohort",
        "metadata": stored_metadata("Cohort", "fleet-tier-production"),
        "spec": {
            "parentName": "fleet",
            "fairSharing": {"weight": weight},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100-on-demand",
                            "resources": [
                                {"name": "cpu", "nominalQuota": cpu},
                                {"name": "memory", "nominalQuota": memory},
                                {"name": "nvidia.com/gpu", "nominalQuota": gpus},
                            ],
                        }
                    ],
                }
            ],
        },
        "status": {"conditions": []},
    }


def quota(name: str, nominal: Any, borrowing: Any) -> Doc:
    return {"name": name, "nominalQuota": nominal, "borrowingLimit": borrowing}


def cluster_queue(*, spot_gpus: Any = "16", labels: dict[str, str] | None = None) -> Doc:
    """After Kueue's create webhook: every quantity canonical, its finalizer added."""
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": stored_metadata("ClusterQueue", "vision", labels=labels, finalizers=IN_USE),
        "spec": {
            "cohortName": "fleet-tier-production",
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["vision"]}
                ]
            },
            "queueingStrategy": "BestEffortFIFO",
            "stopPolicy": "None",  # the CRD's default
            "flavorFungibility": {
                "whenCanBorrow": "TryNextFlavor",
                "whenCanPreempt": "TryNextFlavor",
            },
            "preemption": {
                "withinClusterQueue": "LowerPriority",
                "reclaimWithinCohort": "LowerPriority",
                "borrowWithinCohort": {"policy": "Never"},
            },
            "fairSharing": {"weight": "1"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100-spot",
                            "resources": [
                                quota("cpu", "128", "64"),
                                quota("memory", "1Ti", "512Gi"),
                                quota("nvidia.com/gpu", spot_gpus, "8"),
                            ],
                        },
                        {
                            "name": "a100-on-demand",
                            "resources": [
                                quota("cpu", "0", "0"),
                                quota("memory", "0", "0"),
                                quota("nvidia.com/gpu", "0", "0"),
                            ],
                        },
                    ],
                }
            ],
        },
        "status": {"pendingWorkloads": 0, "admittedWorkloads": 0, "conditions": []},
    }


def local_queue() -> Doc:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": stored_metadata("LocalQueue", "vision"),
        "spec": {"clusterQueue": "vision", "stopPolicy": "None"},
        "status": {"pendingWorkloads": 0},
    }


def node_pool(limit: Any) -> Doc:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": stored_metadata("NodePool", "a100-on-demand"),
        "spec": {
            "weight": 10,
            "limits": {"nvidia.com/gpu": limit},
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
        "status": {"nodes": 1, "resources": {"nvidia.com/gpu": "8"}, "conditions": []},
    }


def deployment(replicas: int) -> Doc:
    """Re-encoded from apps/v1 with its defaults; `replicas` as KEDA last set it."""
    gpus = {"nvidia.com/gpu": "8"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": stored_metadata(
            "Deployment", "warm-a100", annotations={"deployment.kubernetes.io/revision": "1"}
        ),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": WARM},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
            },
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
            "template": {
                "metadata": {"labels": WARM},
                "spec": {
                    "containers": [
                        {
                            "name": "placeholder",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": gpus, "limits": gpus},
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File",
                            "imagePullPolicy": "IfNotPresent",
                        }
                    ],
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 0,
                    "dnsPolicy": "ClusterFirst",
                    "nodeSelector": {"quartermaster.dev/pool": "a100"},
                    "automountServiceAccountToken": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65535,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "schedulerName": "default-scheduler",
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {
                            "key": "quartermaster.dev/spot",
                            "operator": "Exists",
                            "effect": "NoSchedule",
                        },
                    ],
                    "priorityClassName": "quartermaster-warm-pool",
                },
            },
        },
        "status": {"replicas": replicas, "readyReplicas": replicas, "observedGeneration": 1},
    }


def scaled_object() -> Doc:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": stored_metadata(
            "ScaledObject",
            "warm-a100",
            labels={"scaledobject.keda.sh/name": "warm-a100"},
            finalizers=["finalizer.keda.sh"],
        ),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "warm-a100"},
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
        "status": {"hpaName": "keda-hpa-warm-a100", "conditions": []},
    }


STEADY = [
    pytest.param(
        ("PriorityClass", "quartermaster-warm-pool"),
        priority_class(),
        True,
        id="PriorityClass: globalDefault false omitted by the server",
    ),
    pytest.param(
        ("WorkloadPriorityClass", "production"),
        workload_priority_class(),
        False,
        id="WorkloadPriorityClass: stored as sent",
    ),
    pytest.param(
        ("ResourceFlavor", "a100-spot"),
        resource_flavor(),
        False,
        id="ResourceFlavor: Kueue's finalizer added",
    ),
    pytest.param(
        ("Cohort", "fleet-tier-production"),
        tier_cohort(weight="0.5", cpu=64, memory="512Gi", gpus=8),
        False,
        id="Cohort: stored as sent (Kueue has no Cohort mutating webhook)",
    ),
    pytest.param(
        ("Cohort", "fleet-tier-production"),
        tier_cohort(weight="500m", cpu="64", memory="512Gi", gpus="8"),
        True,
        id="Cohort re-encoded: weight 0.5 is 500m, numbers are strings",
    ),
    pytest.param(
        ("ClusterQueue", "vision"),
        cluster_queue(),
        True,
        id="ClusterQueue after Kueue's create webhook: 1024Gi is 1Ti, 0Gi is 0, 16 is '16'",
    ),
    pytest.param(
        ("LocalQueue", "vision"),
        local_queue(),
        False,
        id="LocalQueue: the CRD's stopPolicy default added",
    ),
    pytest.param(
        ("NodePool", "a100-on-demand"),
        node_pool(8),
        False,
        id="NodePool: stored as sent (Karpenter has no webhook)",
    ),
    pytest.param(
        ("NodePool", "a100-on-demand"),
        node_pool("8"),
        True,
        id="NodePool re-encoded: the GPU limit is '8'",
    ),
    pytest.param(
        ("Deployment", "warm-a100"),
        deployment(replicas=3),
        True,
        id="Deployment: defaults filled, GPUs '8', replicas 3 set by KEDA",
    ),
    pytest.param(
        ("Deployment", "warm-a100"),
        deployment(replicas=0),
        True,
        id="Deployment: KEDA scaled the pool to zero",
    ),
    pytest.param(
        ("ScaledObject", "warm-a100"),
        scaled_object(),
        False,
        id="ScaledObject: KEDA's label and finalizer added",
    ),
]


@pytest.mark.parametrize(("which", "stored", "rewritten"), STEADY)
def test_the_stored_form_is_no_change(which: tuple[str, str], stored: Doc, rewritten: bool) -> None:
    want = desired(*which)
    plan = make_plan([want], [stored])
    assert plan.empty, [str(c) for u in plan.updates for c in u.changes]
    assert field_changes(update_form(want), stored) == ()
    # Where the server rewrote our fields, a byte-for-byte comparison would see a change.
    assert is_subset(update_form(want), stored) is not rewritten


CHANGED = [
    pytest.param(
        ("ClusterQueue", "vision"),
        cluster_queue(spot_gpus="12"),
        [
            "spec.resourceGroups[0].flavors[a100-spot].resources[nvidia.com/gpu].nominalQuota: "
            '"12" -> 16'
        ],
        id="a quota someone lowered to '12' is taken back to 16",
    ),
    pytest.param(
        ("ClusterQueue", "vision"),
        cluster_queue(labels={"quartermaster.dev/tier": "research"}),
        ['metadata.labels.quartermaster.dev/tier: "research" -> "production"'],
        id="a changed label is a change",
    ),
    pytest.param(
        ("NodePool", "a100-on-demand"),
        node_pool("16"),
        ['spec.limits.nvidia.com/gpu: "16" -> 8'],
        id="a limit of '16' is not 8",
    ),
    pytest.param(
        ("PriorityClass", "quartermaster-warm-pool"),
        {**priority_class(), "globalDefault": True},
        ["globalDefault: true -> false"],
        id="a PriorityClass made the global default is taken back",
    ),
    pytest.param(
        ("PriorityClass", "quartermaster-warm-pool"),
        {k: v for k, v in priority_class().items() if k != "preemptionPolicy"},
        ['preemptionPolicy: (absent) -> "Never"'],
        id="an absent preemptionPolicy is the default PreemptLowerPriority, not Never",
    ),
]


@pytest.mark.parametrize(("which", "stored", "want_changes"), CHANGED)
def test_a_real_difference_is_still_a_change(
    which: tuple[str, str], stored: Doc, want_changes: list[str]
) -> None:
    plan = make_plan([desired(*which)], [stored])
    assert [u.desired["metadata"]["name"] for u in plan.updates] == [which[1]]
    assert [str(c) for c in plan.updates[0].changes] == want_changes


def test_a_quota_change_in_canonical_form_is_a_change() -> None:
    """48 -> 64 is a change however either side spells it."""
    live = cluster_queue()
    live["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "48"
    want = desired("ClusterQueue", "vision")
    want["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 64
    changes = field_changes(want, live)
    assert [str(c) for c in changes] == [
        'spec.resourceGroups[0].flavors[a100-spot].resources[cpu].nominalQuota: "48" -> 64'
    ]


def test_the_stored_form_compares_quantities_by_value() -> None:
    sent = stored_form({"kind": "NodePool", "spec": {"limits": {"nvidia.com/gpu": 8}}})
    kept = stored_form({"kind": "NodePool", "spec": {"limits": {"nvidia.com/gpu": "8000m"}}})
    assert sent == kept
    assert str(kept["spec"]["limits"]["nvidia.com/gpu"]) == "8"


def test_the_stored_form_fills_what_the_server_omits_or_defaults() -> None:
    assert stored_form({"kind": "PriorityClass", "value": 1}) == {
        "kind": "PriorityClass",
        "value": 1,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": "",
    }


def test_every_filled_default_is_a_field_we_render() -> None:
    """Filling a field we do not set would compare someone else's value with a default."""
    by_kind = {o["kind"]: o for o in RENDERED}
    missing = []
    for kind, defaults in DEFAULTS.items():
        for path in defaults:
            value: Any = by_kind[kind]
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if value is None:
                missing.append((kind, path))
    assert missing == []


def test_a_value_the_server_would_refuse_is_compared_as_it_is() -> None:
    assert stored_form({"kind": "NodePool", "spec": {"limits": {"gpu": "lots"}}}) == {
        "kind": "NodePool",
        "spec": {"limits": {"gpu": "lots"}},
    }


@pytest.mark.parametrize(
    ("items", "keys"),
    [
        pytest.param([{"name": "cpu"}, {"name": "memory"}], ["cpu", "memory"], id="by name"),
        pytest.param([{"coveredResources": []}], ["0"], id="no name: by position"),
        pytest.param([{"name": "a"}, {"x": 1}], ["0", "1"], id="one without: all by position"),
        pytest.param([{"name": "a"}, {"name": "a"}], ["0", "1"], id="a name twice: by position"),
        pytest.param([{"name": "7"}], ["0"], id="a name that reads as an index: by position"),
        pytest.param(["a", "b"], ["0", "1"], id="scalars: by position"),
    ],
)
def test_list_items_are_named_by_their_name_where_it_names_them(
    items: list[Any], keys: list[str]
) -> None:
    assert list_keys(items) == keys


def test_a_flavor_inserted_before_another_changes_only_its_own_fields() -> None:
    """By position, every field after the insertion would read as changed."""
    live = cluster_queue()
    want = copy.deepcopy(live)
    flavors = want["spec"]["resourceGroups"][0]["flavors"]
    flavors.insert(0, {**copy.deepcopy(flavors[0]), "name": "a100-new"})
    changed = {c.path for c in field_changes(want, live)}
    assert changed, "the new flavor is a change"
    assert all(p.startswith("spec.resourceGroups[0].flavors[a100-new].") for p in changed), changed
