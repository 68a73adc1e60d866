"""The lane's JSON Patch: written only to a pending Workload whose owner chose no capacity type,
into every pod set, guarded by the version it was built from. Answers written out by hand."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller import names
from controller.decide.lanes import Lane
from controller.reconcile.lanes import REASON_LIMIT, escape, lane_patch, lane_reason

REASON = (
    "36000s to its deadline: spot needs 41000s (3 interruption(s), launch 420s), on-demand 30420s"
)
LANE = Lane(names.ON_DEMAND, REASON, 41000.0, 30420.0)
TEST_VERSION = {"op": "test", "path": "/metadata/resourceVersion", "value": "17"}
SELECTOR_KEY = "karpenter.sh~1capacity-type"
ANNOTATIONS_ADDED = {
    "op": "add",
    "path": "/metadata/annotations",
    "value": {names.ANNOTATION_LANE: "on-demand", names.ANNOTATION_LANE_REASON: REASON},
}
ANNOTATION_OPS = [
    {"op": "add", "path": "/metadata/annotations/quartermaster.dev~1lane", "value": "on-demand"},
    {"op": "add", "path": "/metadata/annotations/quartermaster.dev~1lane-reason", "value": REASON},
]


def pod_set(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "name": name,
        "count": 2,
        "template": {"spec": {"containers": [{"name": "train"}], **spec}},
    }


def workload(
    *pod_sets: dict[str, Any],
    annotations: dict[str, str] | None = None,
    conditions: list[dict[str, str]] | None = None,
    admission: dict[str, Any] | None = None,
    version: str | None = "17",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train-1", "namespace": "llm"}
    if version is not None:
        meta["resourceVersion"] = version
    if annotations is not None:
        meta["annotations"] = annotations
    status: dict[str, Any] = {}
    if conditions is not None:
        status["conditions"] = conditions
    if admission is not None:
        status["admission"] = admission
    return {
        "metadata": meta,
        "spec": {"queueName": "llm-pretrain", "podSets": list(pod_sets or [pod_set("main")])},
        "status": status,
    }


def condition(type_: str, status: str = "True") -> dict[str, str]:
    return {"type": type_, "status": status}


def affinity(operator: str, *values: str, key: str = names.CAPACITY_TYPE_LABEL) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expression]}]
            }
        }
    }


def selector_op(index: int) -> dict[str, Any]:
    return {
        "op": "add",
        "path": f"/spec/podSets/{index}/template/spec/nodeSelector/{SELECTOR_KEY}",
        "value": "on-demand",
    }


def new_selector_op(index: int) -> dict[str, Any]:
    return {
        "op": "add",
        "path": f"/spec/podSets/{index}/template/spec/nodeSelector",
        "value": {names.CAPACITY_TYPE_LABEL: "on-demand"},
    }


WRITTEN = {
    "no node selector, no annotations: both maps are added": (
        workload(),
        [TEST_VERSION, new_selector_op(0), ANNOTATIONS_ADDED],
    ),
    "a node selector and annotations of others: our keys are added beside theirs": (
        workload(
            pod_set("main", nodeSelector={"example.com/data": "east"}),
            annotations={"team": "llm"},
        ),
        [TEST_VERSION, selector_op(0), *ANNOTATION_OPS],
    ),
    "every pod set, each as its selector stands": (
        workload(pod_set("launcher"), pod_set("workers", nodeSelector={"a": "b"})),
        [TEST_VERSION, new_selector_op(0), selector_op(1), ANNOTATIONS_ADDED],
    ),
    "a null node selector counts as none": (
        workload(pod_set("main", nodeSelector=None)),
        [TEST_VERSION, new_selector_op(0), ANNOTATIONS_ADDED],
    ),
    "QuotaReserved False: still pending": (
        workload(conditions=[condition("QuotaReserved", "False")]),
        [TEST_VERSION, new_selector_op(0), ANNOTATIONS_ADDED],
    ),
    "an affinity on another key is not a choice of capacity type": (
        workload(pod_set("main", affinity=affinity("In", "us-east-1a", key="zone"))),
        [TEST_VERSION, new_selector_op(0), ANNOTATIONS_ADDED],
    ),
    "our lane, but a pod set lost its selector: written again": (
        workload(
            pod_set("a", nodeSelector={names.CAPACITY_TYPE_LABEL: "on-demand"}),
            pod_set("b"),
            annotations={names.ANNOTATION_LANE: "on-demand"},
        ),
        [TEST_VERSION, selector_op(0), new_selector_op(1), *ANNOTATION_OPS],
    ),
}


@pytest.mark.parametrize(("live", "expected"), WRITTEN.values(), ids=WRITTEN.keys())
def test_a_pending_workload_gets_the_lane_in_every_pod_set(
    live: dict[str, Any], expected: list[dict[str, Any]]
) -> None:
    before = copy.deepcopy(live)
    assert lane_patch(live, LANE) == expected
    assert live == before, "the Workload read is not changed"


IN_PLACE = {names.CAPACITY_TYPE_LABEL: "on-demand"}
LEFT_ALONE = {
    "quota reserved": workload(conditions=[condition("QuotaReserved")]),
    "admitted": workload(conditions=[condition("QuotaReserved"), condition("Admitted")]),
    "an admission without conditions yet": workload(admission={"clusterQueue": "llm-pretrain"}),
    "finished": workload(conditions=[condition("Finished")]),
    "its owner selected spot": workload(
        pod_set("main", nodeSelector={names.CAPACITY_TYPE_LABEL: "spot"})
    ),
    "its owner selected on-demand itself": workload(pod_set("main", nodeSelector=IN_PLACE)),
    "its owner selected on one pod set of two": workload(
        pod_set("a"), pod_set("b", nodeSelector={names.CAPACITY_TYPE_LABEL: "spot"})
    ),
    "its owner's affinity asks for spot": workload(
        pod_set("main", affinity=affinity("In", "spot"))
    ),
    "its owner's affinity keeps off on-demand": workload(
        pod_set("main", affinity=affinity("NotIn", "on-demand"))
    ),
    "its owner's affinity asks for the label to exist": workload(
        pod_set("main", affinity=affinity("Exists"))
    ),
    "the lane is in place": workload(
        pod_set("main", nodeSelector=IN_PLACE), annotations={names.ANNOTATION_LANE: "on-demand"}
    ),
    "no resourceVersion to guard the write with": workload(version=None),
    "a pod set without a template spec": workload({"name": "main", "count": 1}),
    "a node selector that is not a map": workload(pod_set("main", nodeSelector="spot")),
    "no pod sets": {"metadata": {"name": "w", "resourceVersion": "1"}, "spec": {"podSets": []}},
}


@pytest.mark.parametrize("live", LEFT_ALONE.values(), ids=LEFT_ALONE.keys())
def test_no_patch(live: dict[str, Any]) -> None:
    assert lane_patch(live, LANE) is None


def test_a_long_reason_is_cut_in_the_annotation() -> None:
    long = Lane(names.ON_DEMAND, "x" * 1000, 1.0, 1.0)
    patch = lane_patch(workload(), long)
    assert patch is not None
    reason = patch[-1]["value"][names.ANNOTATION_LANE_REASON]
    assert len(reason) == REASON_LIMIT and reason.endswith("...")
    assert lane_reason(REASON) == REASON


@pytest.mark.parametrize(
    ("token", "escaped"),
    [
        ("karpenter.sh/capacity-type", "karpenter.sh~1capacity-type"),
        ("a~b/c", "a~0b~1c"),
        ("~1", "~01"),
        ("plain", "plain"),
    ],
)
def test_escape(token: str, escaped: str) -> None:
    assert escape(token) == escaped
