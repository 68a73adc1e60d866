"""The cache's Workloads: cut to what a pass reads, and every reader answers as on the whole."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from controller import names
from controller.decide.lanes import Lane
from controller.kube import kinds
from controller.kube.cache import Source, Store
from controller.kube.projection import workload_as_kept
from controller.reconcile.lanes import lane_patch, move_patch, reactivation_patch
from controller.reconcile.reconciler import queues_in_use
from controller.risk.workloads import workload_view

GPU = frozenset({"nvidia.com/gpu"})
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
REQUIRED_ZONE = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["us-east-1a"]}]}
    ]
}
PREFERRED_TERM = {"matchExpressions": [{"key": "gen", "operator": "In", "values": ["a100"]}]}
LANE = Lane(names.ON_DEMAND, "deadline too close for spot", 7200.0, 3600.0)
MOVE = Lane(names.ON_DEMAND, "deadline too close for spot", 7200.0, 3600.0, move=True)


def container(name: str, gpus: Any, *, cpu: str = "8") -> dict[str, Any]:
    return {
        "name": name,
        "image": "registry.example.com/team/train:2.4.1-cuda12",
        "command": ["torchrun", "--nproc-per-node=8", "train.py"],
        "args": ["--config", "/etc/train/config.yaml", "--resume"],
        "env": [{"name": f"VAR_{i}", "value": "x" * 40} for i in range(20)],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "resources": {
            "requests": {"cpu": cpu, "memory": "64Gi", "nvidia.com/gpu": gpus},
            "limits": {"nvidia.com/gpu": gpus},
        },
        "readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}},
    }


def kueue_workload() -> dict[str, Any]:
    """A Workload as Kueue makes it from a Job: the Job's whole pod template in each pod set."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "job-train-3f2a1",
            "namespace": "vision",
            "resourceVersion": "4711",
            "uid": "0b6f0c38-0000-4000-8000-000000000001",
            "creationTimestamp": "2026-03-02T10:00:00Z",
            "labels": {"quartermaster.dev/deadline": "paper", "kueue.x-k8s.io/job-uid": "u1"},
            "annotations": {
                "quartermaster.dev/expected-duration-seconds": "7200",
                "quartermaster.dev/checkpoint-interval-seconds": "1800",
                "kueue.x-k8s.io/priority-boost": "40",
            },
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train"}],
        },
        "spec": {
            "queueName": "vision",
            "priority": 1000,
            "priorityClassName": "research",
            "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
            "active": True,
            "podSets": [
                {
                    "name": "launcher",
                    "count": 1,
                    "template": {
                        "metadata": {"labels": {"app": "train"}},
                        "spec": {
                            "containers": [container("launcher", 0, cpu="1")],
                            "restartPolicy": "Never",
                        },
                    },
                },
                {
                    "name": "workers",
                    "count": 4,
                    "minCount": 2,
                    "template": {
                        "spec": {
                            "initContainers": [container("fetch", 0)],
                            "containers": [container("trainer", 8), container("sidecar", "1")],
                            "volumes": [
                                {"name": "data", "persistentVolumeClaim": {"claimName": "d"}}
                            ],
                            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                            "nodeSelector": {"karpenter.sh/capacity-type": "spot"},
                            "affinity": {
                                "nodeAffinity": {
                                    REQUIRED: REQUIRED_ZONE,
                                    "preferredDuringSchedulingIgnoredDuringExecution": [
                                        {"weight": 1, "preference": PREFERRED_TERM}
                                    ],
                                },
                                "podAntiAffinity": {
                                    "preferredDuringSchedulingIgnoredDuringExecution": [
                                        {"weight": 1, "podAffinityTerm": {"topologyKey": "h"}}
                                    ]
                                },
                            },
                        }
                    },
                },
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "lastTransitionTime": "2026-03-02T10:01:00Z",
                },
                {
                    "type": "Admitted",
                    "status": "True",
                    "lastTransitionTime": "2026-03-02T10:01:00Z",
                },
            ],
            "admission": {
                "clusterQueue": "vision",
                "podSetAssignments": [
                    {
                        "name": "workers",
                        "flavors": {"nvidia.com/gpu": "a100-spot", "cpu": "default"},
                    }
                ],
            },
            "requeueState": {"count": 2},
            "accumulatedPastExecutionTimeSeconds": 300,
        },
    }


def with_spec(spec: Any) -> dict[str, Any]:
    workload = kueue_workload()
    workload["spec"] = spec
    return workload


def with_pod_sets(pod_sets: Any) -> dict[str, Any]:
    workload = kueue_workload()
    workload["spec"]["podSets"] = pod_sets
    return workload


def pending(workload: dict[str, Any]) -> dict[str, Any]:
    """The Workload before Kueue reserved it quota: the lane patch has something to say."""
    workload = copy.deepcopy(workload)
    del workload["status"]
    return workload


def worker_spec(**fields: Any) -> dict[str, Any]:
    """A pending Workload whose workers' template spec has these fields beside a container."""
    workload = pending(kueue_workload())
    workload["spec"]["podSets"][1]["template"]["spec"] = {
        "containers": [container("trainer", 8)],
        **fields,
    }
    return workload


def pods_waiting() -> dict[str, Any]:
    """Admitted on spot, its pods waiting for a node, and its owner chose no capacity type:
    the move's first patch has something to say."""
    workload = kueue_workload()
    del workload["spec"]["podSets"][1]["template"]["spec"]["nodeSelector"]
    workload["status"]["conditions"].append({"type": "PodsReady", "status": "False"})
    return workload


def being_moved() -> dict[str, Any]:
    """Deactivated by our move and evicted: the move's second patch has something to say."""
    workload = pending(pods_waiting())
    workload["spec"]["active"] = False
    workload["metadata"]["annotations"][names.ANNOTATION_MOVING_TO] = names.ON_DEMAND
    workload["metadata"]["annotations"][names.ANNOTATION_LANE] = names.ON_DEMAND
    return workload


SHAPES = {
    "as Kueue makes it": kueue_workload(),
    "admitted on spot, its pods waiting": pods_waiting(),
    "deactivated by our move and evicted": being_moved(),
    "no spec": with_spec(None),
    "no pod sets": with_spec({"queueName": "vision"}),
    "pod sets not a list": with_pod_sets({"name": "workers", "count": 2}),
    "a pod set not a map": with_pod_sets(["workers", {"name": "w", "count": 1}]),
    "a pod set without a template": with_pod_sets([{"name": "w", "count": 3}]),
    "a template that is not a map": with_pod_sets([{"name": "w", "count": 3, "template": "t"}]),
    "a template spec that is not a map": with_pod_sets(
        [{"name": "w", "count": 3, "template": {"spec": 7}}]
    ),
    "containers not a list": with_pod_sets(
        [{"name": "w", "count": 3, "template": {"spec": {"containers": {"a": 1}}}}]
    ),
    "a container not a map": with_pod_sets(
        [{"name": "w", "count": 3, "template": {"spec": {"containers": [4, container("t", 2)]}}}]
    ),
    "no count": with_pod_sets([{"name": "w", "template": {"spec": {"containers": []}}}]),
    "a count that is not a number": with_pod_sets(
        [{"name": "w", "count": "2", "template": {"spec": {"containers": [container("t", 2)]}}}]
    ),
    "pending, selecting spot": pending(kueue_workload()),
    "pending, no node selection": worker_spec(),
    "pending, a node selector without the capacity type": worker_spec(nodeSelector={"a": "b"}),
    "a node selector that is null": worker_spec(nodeSelector=None),
    "a node selector that is not a map": worker_spec(nodeSelector=["spot"]),
    "an affinity that is not a map": worker_spec(affinity="anywhere"),
    "a node affinity that is not a map": worker_spec(affinity={"nodeAffinity": 3}),
    "only a pod affinity": worker_spec(affinity={"podAffinity": {}}),
    "a required affinity on the capacity type": worker_spec(
        affinity={
            "nodeAffinity": {
                REQUIRED: {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": names.CAPACITY_TYPE_LABEL,
                                    "operator": "In",
                                    "values": ["on-demand"],
                                }
                            ]
                        }
                    ]
                }
            }
        }
    ),
}


@pytest.mark.parametrize("whole", SHAPES.values(), ids=SHAPES.keys())
def test_every_reader_answers_on_the_kept_workload_as_on_the_whole(whole: dict[str, Any]) -> None:
    kept = workload_as_kept(whole)
    assert workload_view(kept, GPU) == workload_view(whole, GPU)
    local_queues = [{"metadata": {"namespace": "vision", "name": "vision"}, "spec": {}}]
    assert queues_in_use([kept], local_queues) == queues_in_use([whole], local_queues)
    # A lane's patch is built from the kept Workload and must be the one the whole would get.
    assert lane_patch(kept, LANE) == lane_patch(whole, LANE)
    # So are a move's two patches.
    assert move_patch(kept, MOVE) == move_patch(whole, MOVE)
    assert reactivation_patch(kept) == reactivation_patch(whole)
    # The boosts and the finished test read metadata and status, kept whole.
    assert kept["metadata"] == whole["metadata"]
    assert kept.get("status") == whole.get("status")


def test_the_kept_workload_counts_the_gpus_of_every_pod_set() -> None:
    # 4 workers x (8 + 1) GPUs; the launcher asks for none: what the pass must still see.
    assert workload_view(workload_as_kept(kueue_workload()), GPU).gpus == 36


def test_the_pod_templates_are_cut_to_each_containers_resources() -> None:
    whole = kueue_workload()
    kept = workload_as_kept(whole)
    workers = kept["spec"]["podSets"][1]
    assert workers == {
        "name": "workers",
        "count": 4,
        "minCount": 2,
        "template": {
            "spec": {
                "containers": [
                    {"name": "trainer", "resources": container("trainer", 8)["resources"]},
                    {"name": "sidecar", "resources": container("sidecar", "1")["resources"]},
                ],
                # What selects a capacity type; the preferred and pod affinities are cut.
                "nodeSelector": {"karpenter.sh/capacity-type": "spot"},
                "affinity": {"nodeAffinity": {REQUIRED: REQUIRED_ZONE}},
            }
        },
    }
    assert {k: kept["spec"][k] for k in ("queueName", "priority", "priorityClassName")} == {
        "queueName": "vision",
        "priority": 1000,
        "priorityClassName": "research",
    }
    assert len(json.dumps(kept)) < len(json.dumps(whole)) / 3


def test_a_spec_that_is_not_a_map_is_kept_as_it_came() -> None:
    # The schema rules it out; were it to come, the readers see what they would have seen.
    whole = with_spec(["queueName", "x"])
    assert workload_as_kept(whole) == whole


def test_the_workload_given_is_not_changed() -> None:
    whole = kueue_workload()
    before = copy.deepcopy(whole)
    workload_as_kept(whole)
    assert whole == before


def test_the_store_keeps_workloads_cut_and_other_kinds_whole() -> None:
    workloads = Store(Source(kinds.WORKLOAD))
    workloads.replace([kueue_workload()], "10")
    (stored,) = workloads.items()
    assert stored == workload_as_kept(kueue_workload())
    # A spec field no pass reads, of a kind that is not a Workload, is kept.
    claims = Store(Source(kinds.NODE_CLAIM))
    claim = {
        "metadata": {"name": "c1", "resourceVersion": "3"},
        "spec": {"nodeClassRef": {"name": "default"}, "taints": []},
    }
    claims.replace([claim], "10")
    assert claims.items()[0]["spec"] == claim["spec"]
