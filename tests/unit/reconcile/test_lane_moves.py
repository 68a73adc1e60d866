"""A move to a lane, in its two JSON Patches: a Workload admitted on spot whose pods wait is
deactivated with our moving-to annotation; once Kueue holds no quota for it, it is put in the
lane and activated again. Each guarded by the version it was built from. Answers written out
by hand."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller import names
from controller.decide.lanes import Lane
from controller.reconcile.lanes import lane_patch, move_patch, reactivation_patch
from tests.unit.reconcile.test_lanes import (
    REASON,
    TEST_VERSION,
    affinity,
    condition,
    new_selector_op,
    pod_set,
    selector_op,
    workload,
)

MOVE = Lane(names.ON_DEMAND, REASON, 41000.0, 30420.0, move=True)
SPOT_ADMISSION = {
    "clusterQueue": "llm-pretrain",
    "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "a100-spot"}}],
}
ADMITTED = [condition("QuotaReserved"), condition("Admitted")]
WAITING = [*ADMITTED, condition("PodsReady", "False")]
MOVING = {
    names.ANNOTATION_MOVING_TO: "on-demand",
    names.ANNOTATION_LANE: "on-demand",
    names.ANNOTATION_LANE_REASON: REASON,
}
DEACTIVATE = {"op": "add", "path": "/spec/active", "value": False}
ACTIVATE = {"op": "replace", "path": "/spec/active", "value": True}
UNMARK = {"op": "remove", "path": "/metadata/annotations/quartermaster.dev~1moving-to"}
MOVING_ADDED = {"op": "add", "path": "/metadata/annotations", "value": MOVING}
MOVING_OPS = [
    {
        "op": "add",
        "path": "/metadata/annotations/quartermaster.dev~1moving-to",
        "value": "on-demand",
    },
    {"op": "add", "path": "/metadata/annotations/quartermaster.dev~1lane", "value": "on-demand"},
    {"op": "add", "path": "/metadata/annotations/quartermaster.dev~1lane-reason", "value": REASON},
]
ON_DEMAND = {names.CAPACITY_TYPE_LABEL: "on-demand"}


def admitted(
    *pod_sets: dict[str, Any],
    conditions: list[dict[str, str]] | None = None,
    annotations: dict[str, str] | None = None,
    active: bool | None = None,
    version: str | None = "17",
) -> dict[str, Any]:
    """Admitted on the spot flavor, its pods waiting for a node (unless `conditions` say else)."""
    live = workload(
        *pod_sets,
        annotations=annotations,
        conditions=WAITING if conditions is None else conditions,
        admission=SPOT_ADMISSION,
        version=version,
    )
    if active is not None:
        live["spec"]["active"] = active
    return live


def evicted(
    *pod_sets: dict[str, Any],
    annotations: dict[str, str] | None = None,
    active: bool = False,
    conditions: list[dict[str, str]] | None = None,
    version: str | None = "17",
) -> dict[str, Any]:
    """Deactivated and evicted: Kueue gave its quota back (QuotaReserved and Admitted False)."""
    live = workload(
        *pod_sets,
        annotations=dict(MOVING) if annotations is None else annotations,
        conditions=conditions
        or [
            condition("QuotaReserved", "False"),
            condition("Admitted", "False"),
            condition("Evicted"),
            condition("PodsReady", "False"),
        ],
        version=version,
    )
    live["spec"]["active"] = active
    return live


MOVED = {
    "admitted on spot, pods waiting: deactivated, annotations added as a map": (
        admitted(),
        [TEST_VERSION, DEACTIVATE, MOVING_ADDED],
    ),
    "annotations of others: ours added beside them": (
        admitted(annotations={"team": "llm"}),
        [TEST_VERSION, DEACTIVATE, *MOVING_OPS],
    ),
    "spec.active true said outright": (
        admitted(active=True),
        [TEST_VERSION, DEACTIVATE, MOVING_ADDED],
    ),
    "quota reserved, not yet admitted, pods waiting": (
        admitted(conditions=[condition("QuotaReserved"), condition("PodsReady", "False")]),
        [TEST_VERSION, DEACTIVATE, MOVING_ADDED],
    ),
    "a node selector on another key, two pod sets": (
        admitted(pod_set("launcher"), pod_set("workers", nodeSelector={"zone": "a"})),
        [TEST_VERSION, DEACTIVATE, MOVING_ADDED],
    ),
}


@pytest.mark.parametrize(("live", "expected"), MOVED.values(), ids=MOVED.keys())
def test_a_workload_admitted_on_spot_whose_pods_wait_is_deactivated(
    live: dict[str, Any], expected: list[dict[str, Any]]
) -> None:
    before = copy.deepcopy(live)
    assert move_patch(live, MOVE) == expected
    assert live == before, "the Workload read is not changed"


NOT_MOVED = {
    "no quota reserved (pending: its lane is lane_patch's)": workload(
        conditions=[condition("PodsReady", "False")]
    ),
    "finished": admitted(conditions=[*WAITING, condition("Finished")]),
    "its pods are ready (running)": admitted(conditions=[*ADMITTED, condition("PodsReady")]),
    "no PodsReady condition (Kueue without waitForPodsReady)": admitted(conditions=ADMITTED),
    "already inactive (someone else's)": admitted(active=False),
    "already being moved": admitted(annotations={names.ANNOTATION_MOVING_TO: "on-demand"}),
    "its owner selected spot": admitted(
        pod_set("main", nodeSelector={names.CAPACITY_TYPE_LABEL: "spot"})
    ),
    "its owner selected spot on one pod set of two": admitted(
        pod_set("a"), pod_set("b", nodeSelector={names.CAPACITY_TYPE_LABEL: "spot"})
    ),
    "its owner's affinity asks for spot": admitted(
        pod_set("main", affinity=affinity("In", "spot"))
    ),
    "the lane already in every pod set (admitted on it)": admitted(
        pod_set("main", nodeSelector=ON_DEMAND), annotations={names.ANNOTATION_LANE: "on-demand"}
    ),
    "a pod set without a template spec": admitted({"name": "main", "count": 1}),
    "no resourceVersion to guard the write with": admitted(version=None),
}


@pytest.mark.parametrize("live", NOT_MOVED.values(), ids=NOT_MOVED.keys())
def test_no_move(live: dict[str, Any]) -> None:
    assert move_patch(live, MOVE) is None


REACTIVATED = {
    "ours, evicted: the lane into the pod set, active, our mark removed": (
        evicted(),
        [TEST_VERSION, new_selector_op(0), ACTIVATE, UNMARK],
    ),
    "every pod set, each as its selector stands": (
        evicted(pod_set("launcher"), pod_set("workers", nodeSelector={"zone": "a"})),
        [TEST_VERSION, new_selector_op(0), selector_op(1), ACTIVATE, UNMARK],
    ),
    "the lane annotation went missing: added back beside the selector": (
        evicted(annotations={names.ANNOTATION_MOVING_TO: "on-demand"}),
        [
            TEST_VERSION,
            new_selector_op(0),
            {
                "op": "add",
                "path": "/metadata/annotations/quartermaster.dev~1lane",
                "value": "on-demand",
            },
            ACTIVATE,
            UNMARK,
        ],
    ),
    "no admission, no conditions yet (Kueue cleared them)": (
        evicted(conditions=[]),
        [TEST_VERSION, new_selector_op(0), ACTIVATE, UNMARK],
    ),
    "a pod set without a template spec: activated without a selector": (
        evicted({"name": "main", "count": 1}),
        [TEST_VERSION, ACTIVATE, UNMARK],
    ),
    "a node selector that is not a map: activated without a selector": (
        evicted(pod_set("main", nodeSelector="spot")),
        [TEST_VERSION, ACTIVATE, UNMARK],
    ),
    "a lane that is no capacity type: activated without a selector": (
        evicted(annotations={**MOVING, names.ANNOTATION_MOVING_TO: "gold"}),
        [TEST_VERSION, ACTIVATE, UNMARK],
    ),
    "its owner selected spot meanwhile, our lane annotation gone: without a selector": (
        evicted(
            pod_set("main", nodeSelector={names.CAPACITY_TYPE_LABEL: "spot"}),
            annotations={names.ANNOTATION_MOVING_TO: "on-demand"},
        ),
        [TEST_VERSION, ACTIVATE, UNMARK],
    ),
}


@pytest.mark.parametrize(("live", "expected"), REACTIVATED.values(), ids=REACTIVATED.keys())
def test_our_deactivated_workload_is_activated_again_in_its_lane(
    live: dict[str, Any], expected: list[dict[str, Any]]
) -> None:
    before = copy.deepcopy(live)
    assert reactivation_patch(live) == expected
    assert live == before, "the Workload read is not changed"


def test_without_the_lane_when_asked() -> None:
    """The server refused the patch with the lane at this version: activated all the same."""
    assert reactivation_patch(evicted(), with_lane=False) == [TEST_VERSION, ACTIVATE, UNMARK]


NOT_REACTIVATED = {
    "inactive without our annotation (the user's)": evicted(
        annotations={names.ANNOTATION_LANE: "on-demand"}
    ),
    "still reserved (Kueue has not evicted it yet)": admitted(annotations=MOVING, active=False),
    "an admission without conditions yet": evicted(conditions=[condition("Evicted")])
    | {"status": {"admission": SPOT_ADMISSION}},
    "finished": evicted(conditions=[condition("Finished")]),
    "no resourceVersion to guard the write with": evicted(version=None),
}


@pytest.mark.parametrize("live", NOT_REACTIVATED.values(), ids=NOT_REACTIVATED.keys())
def test_no_reactivation(live: dict[str, Any]) -> None:
    assert reactivation_patch(live) is None


@pytest.mark.parametrize(
    "live",
    [evicted(active=True), admitted(annotations=MOVING, active=True)],
    ids=["activated again while evicted", "activated again and admitted"],
)
def test_a_move_someone_else_ended_only_loses_its_annotation(live: dict[str, Any]) -> None:
    """Active again, but not by us: only the moving-to annotation goes (nothing else is
    ours to change), so the lanes treat it as any other again."""
    assert reactivation_patch(live) == [TEST_VERSION, UNMARK]


def test_an_inactive_workload_takes_no_pending_lane() -> None:
    """Ours being moved gets the lane from its reactivation (a pending lane's patch would race
    it); one stopped by someone else is never touched. Evicted and active, it is pending."""
    assert lane_patch(evicted(), MOVE) is None
    assert lane_patch(evicted(annotations={}), MOVE) is None
    assert lane_patch(evicted(annotations={}, active=True), MOVE) == [
        TEST_VERSION,
        new_selector_op(0),
        {
            "op": "add",
            "path": "/metadata/annotations/quartermaster.dev~1lane",
            "value": "on-demand",
        },
        {
            "op": "add",
            "path": "/metadata/annotations/quartermaster.dev~1lane-reason",
            "value": REASON,
        },
    ]
