"""The reconciler's moves, on the in-memory stand-in for the API server (a fake, said so): a move
lane deactivates its Workload (counted, told by an Event), and every Workload our move
deactivated is activated again on every pass, with no lane in the plan, with no policy or an
invalid one; a reactivation refused with the lane is sent without it. That a real server takes
the patches (Kueue's schema) is tests/integration/test_lane_moves.py's part.

The plan here is the one the decision layer makes (see test_lane_writes for cvpr-tight's lane,
worked by hand), with its lane marked `move` where a test needs a move: which admitted workload
gets one is the decision layer's to test.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any, cast

import pytest

from controller import names
from controller.decide.observation import Observation
from controller.decide.plan import CapacityPlan, plan_capacity
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from controller.metrics import Metrics
from controller.reconcile import reconciler as reconciler_module
from controller.reconcile.reconciler import Reconciler
from testenv.memoryserver import MemoryServer
from tests.unit.reconcile.test_lane_writes import FIXED_NOW, KEY, store, stored
from tests.unit.reconcile.test_lost import Recorder

__all__ = ["store"]  # the fixture, shared with test_lane_writes

ON_DEMAND = {names.CAPACITY_TYPE_LABEL: names.ON_DEMAND}
WAITING = [
    {"type": "QuotaReserved", "status": "True"},
    {"type": "Admitted", "status": "True"},
    {"type": "PodsReady", "status": "False"},
]
SPOT_ADMISSION = {
    "clusterQueue": "vision-research",
    "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "a100-spot"}, "count": 1}],
}


def passes(server: MemoryServer, events: Recorder, metrics: Metrics | None = None) -> Reconciler:
    return Reconciler(
        cast(KubeClient, server), wall_clock=lambda: FIXED_NOW, events=events, metrics=metrics
    )


def admitted_on_spot(server: MemoryServer, name: str) -> None:
    """Kueue admitted it on the spot flavor; its pods wait for a node."""
    body = copy.deepcopy(stored(server, name))
    body["status"] = {"conditions": copy.deepcopy(WAITING), "admission": SPOT_ADMISSION}
    server.put(body)


def evicted(server: MemoryServer, name: str) -> None:
    """Kueue evicted it (inactive): its quota given back."""
    body = copy.deepcopy(stored(server, name))
    body["status"] = {
        "conditions": [
            {"type": "QuotaReserved", "status": "False"},
            {"type": "Admitted", "status": "False"},
            {"type": "Evicted", "status": "True", "reason": "InactiveWorkload"},
        ]
    }
    server.put(body)


def moved_and_evicted(server: MemoryServer, name: str) -> None:
    """As our move left it and Kueue then evicted it."""
    body = copy.deepcopy(stored(server, name))
    body["spec"]["active"] = False
    body["metadata"]["annotations"] |= {
        names.ANNOTATION_MOVING_TO: names.ON_DEMAND,
        names.ANNOTATION_LANE: names.ON_DEMAND,
        names.ANNOTATION_LANE_REASON: "the lane's reason",
    }
    server.put(body)
    evicted(server, name)


def stopped_by_its_owner(server: MemoryServer, name: str) -> None:
    body = copy.deepcopy(stored(server, name))
    body["spec"]["active"] = False
    server.put(body)


def with_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision layer's plan, each lane of it marked `move`."""

    def moving(seen: Observation) -> CapacityPlan:
        plan = plan_capacity(seen)
        return replace(plan, lanes={k: replace(v, move=True) for k, v in plan.lanes.items()})

    monkeypatch.setattr(reconciler_module, "plan_capacity", moving)


def without_lanes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision layer's plan with no lanes at all."""

    def none(seen: Observation) -> CapacityPlan:
        return replace(plan_capacity(seen), lanes={})

    monkeypatch.setattr(reconciler_module, "plan_capacity", none)


def selectors(workload: dict[str, Any]) -> list[Any]:
    return [p["template"]["spec"].get("nodeSelector") for p in workload["spec"]["podSets"]]


def test_a_move_lane_deactivates_and_a_later_pass_without_lanes_activates_in_the_lane(
    store: MemoryServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    events, metrics = Recorder(), Metrics()
    reconciler = passes(store, events, metrics)
    admitted_on_spot(store, "cvpr-tight")
    with_moves(monkeypatch)
    first = reconciler.reconcile(store.snapshot())
    assert first.capacity is not None and KEY in first.capacity.lanes
    lane = first.capacity.lanes[KEY]
    assert (first.lanes_moved, first.lanes_written, first.moves_done) == (1, 0, 0)
    tight = stored(store, "cvpr-tight")
    assert tight["spec"]["active"] is False
    assert selectors(tight) == [None], "not while Kueue holds its quota"
    annotations = tight["metadata"]["annotations"]
    assert annotations[names.ANNOTATION_MOVING_TO] == names.ON_DEMAND
    assert annotations[names.ANNOTATION_LANE] == names.ON_DEMAND
    assert annotations[names.ANNOTATION_LANE_REASON] == lane.reason
    assert [e for e in events.emitted if e[2] == "MovedToOnDemand"] == [
        ("cvpr-tight", "Normal", "MovedToOnDemand", lane.reason)
    ]
    labels = {"project": "vision-research", "lane": names.ON_DEMAND}
    sample = metrics.registry.get_sample_value
    assert sample("quartermaster_lane_moves_total", labels) == 1
    assert sample("quartermaster_lane_writes_total", labels) is None

    # Still admitted (Kueue has not evicted it yet): nothing more is written.
    before = len(store.writes)
    again = reconciler.reconcile(store.snapshot())
    assert (again.lanes_moved, again.moves_done) == (0, 0)
    assert ("Workload", "cvpr-tight") not in store.writes[before:]

    # Evicted; the plan has no lanes at all now: activated again in its lane all the same.
    evicted(store, "cvpr-tight")
    monkeypatch.undo()
    without_lanes(monkeypatch)
    done = reconciler.reconcile(store.snapshot())
    assert done.capacity is not None and not done.capacity.lanes
    assert done.moves_done == 1
    tight = stored(store, "cvpr-tight")
    assert tight["spec"]["active"] is True
    assert selectors(tight) == [ON_DEMAND]
    assert names.ANNOTATION_MOVING_TO not in tight["metadata"]["annotations"]
    assert tight["metadata"]["annotations"][names.ANNOTATION_LANE] == names.ON_DEMAND
    assert [e[2:] for e in events.emitted if e[0] == "cvpr-tight"][-1] == (
        "LaneMoveDone",
        "activated again with its pods on on-demand",
    )
    assert reconciler.reconcile(store.snapshot()).moves_done == 0
    assert sample("quartermaster_lane_moves_total", labels) == 1


def test_pods_ready_is_not_moved(store: MemoryServer, monkeypatch: pytest.MonkeyPatch) -> None:
    admitted_on_spot(store, "cvpr-tight")
    body = copy.deepcopy(stored(store, "cvpr-tight"))
    body["status"]["conditions"][-1]["status"] = "True"
    store.put(body)
    with_moves(monkeypatch)
    result = passes(store, Recorder()).reconcile(store.snapshot())
    assert result.capacity is not None and KEY in result.capacity.lanes
    assert (result.lanes_moved, result.lanes_written) == (0, 0)
    assert "active" not in stored(store, "cvpr-tight")["spec"]


def invalid_policy(server: MemoryServer) -> None:
    policy = copy.deepcopy(server.objects[("CapacityPolicy", "", "gpu-fleet")])
    policy["spec"]["pools"] = "not a list"
    server.put(policy)


def no_policy(server: MemoryServer) -> None:
    del server.objects[("CapacityPolicy", "", "gpu-fleet")]


@pytest.mark.parametrize("policy", [invalid_policy, no_policy], ids=["invalid", "none"])
def test_what_a_move_stopped_is_activated_again_without_a_valid_policy(
    store: MemoryServer, policy: Any
) -> None:
    moved_and_evicted(store, "cvpr-tight")
    stopped_by_its_owner(store, "cvpr-easy")
    policy(store)
    easy = copy.deepcopy(stored(store, "cvpr-easy"))
    result = passes(store, Recorder()).reconcile(store.snapshot())
    assert result.capacity is None
    assert result.moves_done == 1
    tight = stored(store, "cvpr-tight")
    assert tight["spec"]["active"] is True
    assert selectors(tight) == [ON_DEMAND]
    assert names.ANNOTATION_MOVING_TO not in tight["metadata"]["annotations"]
    assert stored(store, "cvpr-easy") == easy, "stopped by someone else: never touched"


def test_a_reactivation_refused_with_the_lane_is_sent_without_it(
    store: MemoryServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refusal at the very version read (not a race) would be one at every try: the next
    try at that version activates it without the lane, and after both were refused none is
    sent until the Workload changes."""
    moved_and_evicted(store, "cvpr-tight")
    tries: list[tuple[str, bool]] = []
    json_patch = store.json_patch

    def refuse_lanes(
        kind: kinds.Kind, name: str, namespace: str | None, patch: list[Any], **kw: Any
    ) -> dict[str, Any]:
        lane = any(op["path"].startswith("/spec/podSets/") for op in patch)
        tries.append((patch[0]["value"], lane))  # the version it was built from
        if lane:
            raise KubeError("admission webhook denied the request", status=422, reason="Invalid")
        return json_patch(kind, name, namespace, patch, **kw)

    monkeypatch.setattr(store, "json_patch", refuse_lanes)
    reconciler = passes(store, Recorder())
    # The first pass's boost writes the Workload after the refusal: one more try with the lane
    # on that version, then one without.
    done = [reconciler.reconcile(store.snapshot()).moves_done for _ in range(3)]
    assert done == [0, 0, 1]
    assert [lane for _, lane in tries] == [True, True, False]
    assert tries[1][0] == tries[2][0], "without the lane only at the version refused with it"
    tight = stored(store, "cvpr-tight")
    assert tight["spec"]["active"] is True
    assert selectors(tight) == [None]
    assert names.ANNOTATION_MOVING_TO not in tight["metadata"]["annotations"]


def test_refused_both_ways_is_not_sent_again_until_the_workload_changes(
    store: MemoryServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    moved_and_evicted(store, "cvpr-tight")
    tries: list[str] = []

    def refuse(
        kind: kinds.Kind, name: str, namespace: str | None, patch: list[Any], **kw: Any
    ) -> dict[str, Any]:
        tries.append(patch[0]["value"])  # the version it was built from
        raise KubeError("conflict", status=409, reason="Conflict")

    monkeypatch.setattr(store, "json_patch", refuse)
    reconciler = passes(store, Recorder())
    # One snapshot for every pass: its lanes settle after the first, and the second pass
    # tries the reactivation all the same.
    snapshot = store.snapshot()
    version = stored(store, "cvpr-tight")["metadata"]["resourceVersion"]
    for _ in range(4):
        assert reconciler.reconcile(snapshot).moves_done == 0
    assert tries == [version, version], "with the lane, then without; not again at this version"

    monkeypatch.undo()
    store.put(copy.deepcopy(stored(store, "cvpr-tight")))  # a new version (Kueue wrote it)
    assert reconciler.reconcile(store.snapshot()).moves_done == 1
    assert selectors(stored(store, "cvpr-tight")) == [ON_DEMAND]


def test_a_server_error_fails_the_pass(
    store: MemoryServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    moved_and_evicted(store, "cvpr-tight")

    def unavailable(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise KubeError("etcd unavailable", status=503)

    monkeypatch.setattr(store, "json_patch", unavailable)
    with pytest.raises(KubeError):
        passes(store, Recorder()).reconcile(store.snapshot())
