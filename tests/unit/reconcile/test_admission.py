"""The lane a Workload gets as it is created (the webhook's decision), hand-computed.

The example policy at Friday 27 November 2026, 20:00 UTC: `vision-research`'s CVPR cutoff
(23:59 Pacific) is 11 h 59 min away, 43,140 s, at 95 % confidence; its work counts toward it
by the label `example.com/paper: cvpr` and waits in LocalQueue `vision-research` in namespace
`vision`. Spot in its pool, as the last pass left it: a 300 s launch, 0.05 interruptions per
node-hour, 8-GPU nodes. Every workload is one 8-GPU node checkpointing hourly (1,800 s lost
per interruption); z(0.95) = 1.64485.

- Declared 7.5 h (27,000 s, sigma 0.25): at 95 % 27,000 x exp(1.64485 x 0.25 - 0.25^2/2) =
  39,480 s; on-demand 39,780 s, inside 43,140; on spot it expects 0.05 x 39,480 / 3,600 = 0.548
  interruptions, P(<= 1) = 0.895 < 0.95 so it must survive 2: 39,780 + 2 x 2,100 = 43,980 s,
  past the cutoff. On-demand lane.
- Declared 1 h: 5,264 s at 95 %, 7,664 s on spot. Stays.
- Declared 5 h (18,000 s, sigma 0.25): 26,320 s, 0.366 interruptions, P(<= 1) = 0.947 so 2:
  26,620 + 4,200 = 30,820 s on spot. Stays.
- Undeclared, the project's median 5 h (sigma 0.6, a history's spread): 18,000 x
  exp(1.64485 x 0.6 - 0.18) = 40,338 s, on-demand 40,638; 0.560 interruptions, 2 to survive:
  44,838 s on spot. On-demand lane: the spread of the runtime is the pass's, not a point.

The API server used by the integration tests runs no admission webhooks
(see testenv/controlplane.py), so the webhook is tested here and in
tests/unit/test_webhook.py only, never through the API server.
"""

from __future__ import annotations

import copy
import math
from datetime import UTC, datetime
from typing import Any

import pytest

from controller import names
from controller.api.loader import load_path
from controller.decide.lanes import SpotOutlook
from controller.examples import EXAMPLE_DIR
from controller.reconcile.admission import AdmissionState, LaneHolder, lane_at_creation
from controller.risk.workloads import workload_view

FIXED_NOW = datetime(2026, 11, 27, 20, 0, tzinfo=UTC).timestamp()
FIXED_CUTOFF = datetime(2026, 11, 28, 7, 59, tzinfo=UTC).timestamp()
"""cvpr-submission's cutoff: 2026-11-27 23:59 Pacific."""
TIME_LEFT = 43_140.0
Z95 = 1.6448536269514722
POLICY = load_path(EXAMPLE_DIR)
OUTLOOK = SpotOutlook(launch_seconds=300, interruptions_per_node_hour=0.05, gpus_per_node=8)
PROJECT = "vision-research"
CVPR = {"example.com/paper": "cvpr"}


def apply_patch(obj: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 `add`, as strictly as the API server applies it: the parent of each path
    must exist (an `add` under a missing map fails the whole patch)."""
    for op in operations:
        assert op["op"] == "add", op
        *parents, last = [
            t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]
        ]
        target: Any = obj
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        assert isinstance(target, dict), op["path"]
        target[last] = copy.deepcopy(op["value"])
    return obj


def q95(mean: float, sigma: float) -> float:
    return mean * math.exp(Z95 * sigma - sigma * sigma / 2)


def state(room: int = 8, median: float | None = None, **outlooks: SpotOutlook) -> AdmissionState:
    return AdmissionState(
        policy_set=POLICY,
        outlooks=outlooks or {PROJECT: OUTLOOK},
        room={PROJECT: room},
        median_runtime={PROJECT: median} if median is not None else {},
    )


def workload(
    *,
    hours: float | None = 7.5,
    labels: dict[str, str] | None = None,
    queue: str = PROJECT,
    namespace: str = "vision",
    gpus: int = 8,
    node_selector: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Workload as Kueue creates it for an 8-GPU Job (no status, no resourceVersion)."""
    notes = dict(annotations or {})
    notes[names.ANNOTATION_CHECKPOINT_INTERVAL] = "3600"
    if hours is not None:
        notes[names.ANNOTATION_EXPECTED_DURATION] = str(hours * 3600)
    spec: dict[str, Any] = {
        "containers": [
            {"name": "train", "image": "train", "resources": {"requests": {"nvidia.com/gpu": gpus}}}
        ]
    }
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "job-train-1-abcde",
            "namespace": namespace,
            "labels": CVPR if labels is None else labels,
            "annotations": notes,
        },
        "spec": {
            "queueName": queue,
            "podSets": [{"name": "main", "count": 1, "template": {"spec": spec}}],
        },
    }


def test_the_reference_figures() -> None:
    assert FIXED_CUTOFF - FIXED_NOW == TIME_LEFT
    assert q95(27_000, 0.25) == pytest.approx(39_480, abs=1)
    assert q95(18_000, 0.6) == pytest.approx(40_338, abs=1)


def test_a_workload_that_spot_would_make_late_is_put_on_on_demand_as_it_is_created() -> None:
    obj = workload(hours=7.5)

    decision = lane_at_creation(obj, state(), now=FIXED_NOW)

    assert decision is not None
    assert (decision.project, decision.gpus) == (PROJECT, 8)
    assert decision.lane.capacity_type == names.ON_DEMAND
    assert decision.lane.needed_on_demand == pytest.approx(q95(27_000, 0.25) + 300)
    assert decision.lane.needed_on_spot == pytest.approx(q95(27_000, 0.25) + 300 + 2 * 2100)
    assert "43140s to its deadline" in decision.lane.reason
    patched = apply_patch(copy.deepcopy(obj), decision.operations)
    template = patched["spec"]["podSets"][0]["template"]["spec"]
    assert template["nodeSelector"] == {names.CAPACITY_TYPE_LABEL: names.ON_DEMAND}
    notes = patched["metadata"]["annotations"]
    assert notes[names.ANNOTATION_LANE] == names.ON_DEMAND
    assert notes[names.ANNOTATION_LANE_REASON] == decision.lane.reason
    assert notes[names.ANNOTATION_EXPECTED_DURATION] == "27000.0"  # the rest kept
    # No resourceVersion to test: the API server applies it to the object it is creating.
    assert all(op["op"] == "add" for op in decision.operations)
    # What the next pass reads of it: its lane, and no owner's choice.
    view = workload_view(patched, frozenset({"nvidia.com/gpu"}))
    assert (view.lane, view.capacity_type, view.owner_chose_capacity) == (
        names.ON_DEMAND,
        names.ON_DEMAND,
        False,
    )


@pytest.mark.parametrize(
    ("why", "obj", "given"),
    [
        ("spot makes it in time (1 h declared)", workload(hours=1), state()),
        ("spot makes it in time (5 h declared)", workload(hours=5), state()),
        ("no room: the quota has no free on-demand GPUs", workload(), state(room=0)),
        ("no room: 4 free GPUs do not admit 8", workload(), state(room=4)),
        (
            "the owner chose spot",
            workload(node_selector={names.CAPACITY_TYPE_LABEL: names.SPOT}),
            state(),
        ),
        (
            "the owner chose on-demand",
            workload(node_selector={names.CAPACITY_TYPE_LABEL: names.ON_DEMAND}),
            state(),
        ),
        ("counts toward no deadline", workload(labels={}), state()),
        ("another paper's", workload(labels={"example.com/paper": "iclr"}), state()),
        ("not a project's queue", workload(queue="someone-else"), state()),
        ("not in the project's namespaces", workload(namespace="llm"), state()),
        (
            "no spot outlook: lanes off, or a project that may not use spot",
            workload(),
            AdmissionState(policy_set=POLICY, outlooks={}, room={PROJECT: 8}),
        ),
        (
            "would miss on on-demand too (15 h)",
            workload(hours=15),
            state(),
        ),
    ],
)
def test_no_lane(why: str, obj: dict[str, Any], given: AdmissionState) -> None:
    assert lane_at_creation(obj, given, now=FIXED_NOW) is None, why


def test_an_undeclared_runtime_is_the_projects_median_with_its_wider_spread() -> None:
    # Declared, 5 h stays on spot (above); the same 5 h as a median is less sure, and needs
    # on-demand.
    decision = lane_at_creation(workload(hours=None), state(median=18_000), now=FIXED_NOW)

    assert decision is not None
    assert decision.lane.needed_on_demand == pytest.approx(q95(18_000, 0.6) + 300)
    assert decision.lane.needed_on_spot == pytest.approx(q95(18_000, 0.6) + 300 + 2 * 2100)
    # Without a median, the prior of an hour (sigma 1.0): 3,600 x exp(1.64485 - 0.5) = 11,304 s
    # at 95 %, far inside the cutoff even on spot.
    assert lane_at_creation(workload(hours=None), state(), now=FIXED_NOW) is None


def test_a_workload_without_annotations_gets_the_whole_map() -> None:
    obj = workload()
    del obj["metadata"]["annotations"]
    obj["metadata"]["labels"] = {**CVPR, names.LABEL_EXPECTED_DURATION: "27000"}

    decision = lane_at_creation(obj, state(), now=FIXED_NOW)

    assert decision is not None
    patched = apply_patch(copy.deepcopy(obj), decision.operations)
    assert set(patched["metadata"]["annotations"]) == {
        names.ANNOTATION_LANE,
        names.ANNOTATION_LANE_REASON,
    }


def test_a_passed_deadline_gives_nothing() -> None:
    # At the cutoff itself the deadline is no longer open (the next is a year away).
    assert lane_at_creation(workload(), state(), now=FIXED_NOW + TIME_LEFT) is None


# ------------------------------------------------------------------------------ the holder


def test_the_holder_decides_nothing_before_a_pass() -> None:
    assert LaneHolder().decide(workload(), now=FIXED_NOW) is None


def test_a_lane_given_takes_its_gpus_from_the_room_until_a_pass_sees_its_workload() -> None:
    holder = LaneHolder()
    holder.publish(state(room=8))
    first = workload()
    second = workload()
    second["metadata"]["name"] = "job-train-2-fghij"

    assert holder.decide(first, now=FIXED_NOW) is not None
    assert holder.decide(second, now=FIXED_NOW) is None  # the 8 free GPUs went to the first

    # A pass that saw the first: its room (computed by the pass) already counts it.
    seen = workload_view(first, frozenset({"nvidia.com/gpu"}))
    holder.publish(state(room=8), [seen])
    assert holder.decide(second, now=FIXED_NOW) is not None


def test_a_dry_run_takes_no_room() -> None:
    holder = LaneHolder()
    holder.publish(state(room=8))

    assert holder.decide(workload(), now=FIXED_NOW, take_room=False) is not None
    assert holder.decide(workload(), now=FIXED_NOW) is not None


def test_room_given_to_a_workload_no_pass_sees_comes_back_after_two_passes() -> None:
    holder = LaneHolder()
    holder.publish(state(room=8))
    assert holder.decide(workload(), now=FIXED_NOW) is not None
    other = workload()
    other["metadata"]["name"] = "job-other"

    holder.publish(state(room=8))  # the pass running meanwhile may have missed it
    assert holder.decide(other, now=FIXED_NOW) is None
    holder.publish(state(room=8))  # one that started after: it was never created
    assert holder.decide(other, now=FIXED_NOW) is not None


def test_a_replica_that_stops_leading_decides_nothing() -> None:
    holder = LaneHolder()
    holder.publish(state())
    holder.clear()

    assert holder.decide(workload(), now=FIXED_NOW) is None
