"""A move to on-demand through a real API server: a Workload admitted on spot whose pods wait
for a node is deactivated with our moving-to annotation, and once Kueue has evicted it a later
pass, with no lane in the plan at all, puts every pod set on on-demand and activates it again.

What is real: the API server enforcing Kueue's Workload schema (`spec.active`, the pod sets,
the CEL rules), the JSON Patches with their `test` of the resourceVersion, the status
subresource through which the test admits and evicts Workloads as Kueue would. No Kueue runs:
the test writes the eviction Kueue makes of an inactive Workload (QuotaReserved and Admitted
False, the admission cleared). The clock is injected (FIXED_MONDAY_NOON, as in test_lanes).

The lane itself is the decision layer's (`controller.decide`): the plan the reconciler makes is
given a move lane for the admitted Workload, with test_lanes' figures for a 50-hour Workload
toward llm-pretrain's cutoff (on spot 445,291 s, on on-demand 312,691 s, 363,600 s left).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from controller import names
from controller.decide.lanes import Lane
from controller.decide.observation import Observation
from controller.decide.plan import CapacityPlan, plan_capacity
from controller.kube import kinds
from controller.kube.client import KubeClient
from controller.reconcile import reconciler as reconciler_module
from tests.clock import Clock
from tests.integration.test_lanes import (
    NAMESPACE,
    PROJECT,
    World,
    deadline_workload,
    live,
    selectors,
    world,
)

__all__ = ["world"]  # the fixture, shared with test_lanes

GPU = "nvidia.com/gpu"
REASON = "363600s to its deadline: spot needs 445291s, on-demand 312691s (pods wait for a node)"
MOVE = Lane(names.ON_DEMAND, REASON, 445291.0, 312691.0, move=True)
ON_DEMAND = {names.CAPACITY_TYPE_LABEL: names.ON_DEMAND}


def condition(type_: str, status: str, reason: str, stamp: str) -> dict[str, str]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": reason,
        "lastTransitionTime": stamp,
    }


def write_status(kube: KubeClient, name: str, status: dict[str, Any]) -> None:
    """Kueue's status write, on the status subresource under Kueue's field manager (so a
    field left out of a later write is removed, as Kueue's own writes do)."""
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "status": status,
    }
    kube.apply(kinds.WORKLOAD, body, field_manager="kueue", subresource="status")


def admit_on_spot_waiting(kube: KubeClient, name: str, clock: Clock, pod_sets: int = 1) -> None:
    """Admitted on the a100's spot flavor; PodsReady False: its pods wait for a node."""
    stamp = clock.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    write_status(
        kube,
        name,
        {
            "conditions": [
                condition("QuotaReserved", "True", "QuotaReserved", stamp),
                condition("Admitted", "True", "Admitted", stamp),
                condition("PodsReady", "False", "PodsReady", stamp),
            ],
            "admission": {
                "clusterQueue": PROJECT,
                "podSetAssignments": [
                    {
                        "name": f"ps-{i}" if pod_sets > 1 else "main",
                        "flavors": {GPU: names.flavor_name("a100", names.SPOT)},
                        "count": 2,
                    }
                    for i in range(pod_sets)
                ],
            },
        },
    )


def evict(kube: KubeClient, name: str, clock: Clock) -> None:
    """What Kueue writes of an inactive Workload: evicted, its quota given back."""
    stamp = clock.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    write_status(
        kube,
        name,
        {
            "conditions": [
                condition("QuotaReserved", "False", "Pending", stamp),
                condition("Admitted", "False", "NoReservation", stamp),
                condition("Evicted", "True", "InactiveWorkload", stamp),
                condition("PodsReady", "False", "PodsReady", stamp),
            ]
        },
    )


def two_pod_sets(name: str) -> dict[str, Any]:
    """A launcher and workers, the workers with a node selector of their own."""
    workload = deadline_workload(name)
    main = workload["spec"]["podSets"][0]
    workers = {
        "name": "ps-1",
        "count": 2,
        "template": {
            "spec": {
                **main["template"]["spec"],
                "nodeSelector": {"example.com/network": "efa"},
            }
        },
    }
    workload["spec"]["podSets"] = [{**main, "name": "ps-0"}, workers]
    return workload


def planned(
    monkeypatch: pytest.MonkeyPatch,
    lanes: Callable[[CapacityPlan], dict[tuple[str, str], Lane]],
) -> None:
    """The decision layer's plan with its lanes replaced (the reconciler's own `plan_capacity`,
    so the pass decides, renders and writes as it always does)."""

    def decide(seen: Observation) -> CapacityPlan:
        plan = plan_capacity(seen)
        return replace(plan, lanes=lanes(plan))

    monkeypatch.setattr(reconciler_module, "plan_capacity", decide)


def events(kube: KubeClient, reason: str) -> dict[str, str]:
    """Workload name -> note of its Event of `reason`."""
    return {
        e["regarding"]["name"]: e["note"]
        for e in kube.list(kinds.EVENT)[0]
        if e.get("reason") == reason and e["regarding"]["kind"] == "Workload"
    }


def test_an_admitted_workload_whose_pods_wait_is_moved_to_on_demand(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube = world.kube
    world.add(deadline_workload("waiting-0"))
    world.add(two_pod_sets("waiting-1"))
    admit_on_spot_waiting(kube, "waiting-0", world.clock)
    admit_on_spot_waiting(kube, "waiting-1", world.clock, pod_sets=2)
    keys = [(NAMESPACE, "waiting-0"), (NAMESPACE, "waiting-1")]
    planned(monkeypatch, lambda plan: {**plan.lanes, **dict.fromkeys(keys, MOVE)})
    before = {name: live(kube, name) for name in ("waiting-0", "waiting-1")}

    first = world.reconcile()

    assert (first.lanes_moved, first.lanes_written, first.moves_done) == (2, 0, 0)
    for name, was in before.items():
        moved = live(kube, name)
        assert moved["spec"]["active"] is False, name
        assert moved["spec"]["podSets"] == was["spec"]["podSets"], "not while quota is held"
        annotations = moved["metadata"]["annotations"]
        assert annotations[names.ANNOTATION_MOVING_TO] == names.ON_DEMAND
        assert annotations[names.ANNOTATION_LANE] == names.ON_DEMAND
        assert annotations[names.ANNOTATION_LANE_REASON] == REASON
        assert annotations[names.ANNOTATION_EXPECTED_DURATION] == str(50 * 3600)
    assert events(kube, "MovedToOnDemand") == {"waiting-0": REASON, "waiting-1": REASON}
    moves = world.sample("quartermaster_lane_moves_total", project=PROJECT, lane="on-demand")
    assert moves == 2

    # Kueue has not evicted them yet: a pass, the same lanes still planned, writes nothing.
    again = world.reconcile()
    assert (again.lanes_moved, again.lanes_written, again.moves_done) == (0, 0, 0)

    # Kueue evicts them; the plan has no lanes at all now.
    for name in before:
        evict(kube, name, world.clock)
    monkeypatch.undo()
    planned(monkeypatch, lambda plan: {})
    world.clock.advance(60)

    done = world.reconcile()

    assert done.capacity is not None and not done.capacity.lanes
    assert done.moves_done == 2
    zero = live(kube, "waiting-0")
    assert zero["spec"]["active"] is True
    assert selectors(zero) == [ON_DEMAND]
    one = live(kube, "waiting-1")
    assert one["spec"]["active"] is True
    assert selectors(one) == [ON_DEMAND, {"example.com/network": "efa", **ON_DEMAND}]
    for moved in (zero, one):
        annotations = moved["metadata"]["annotations"]
        assert names.ANNOTATION_MOVING_TO not in annotations
        assert annotations[names.ANNOTATION_LANE] == names.ON_DEMAND
        assert annotations[names.ANNOTATION_LANE_REASON] == REASON
    assert events(kube, "LaneMoveDone") == {
        "waiting-0": "activated again with its pods on on-demand",
        "waiting-1": "activated again with its pods on on-demand",
    }

    # Done: the next pass writes nothing to them.
    after = world.reconcile()
    assert (after.lanes_moved, after.lanes_written, after.moves_done) == (0, 0, 0)
    assert (
        live(kube, "waiting-0")["metadata"]["resourceVersion"]
        == (zero["metadata"]["resourceVersion"])
    )


def test_an_inactive_workload_without_our_annotation_is_left_alone(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped by its owner (or by Kueue itself): not ours to activate, even with a move lane
    planned for it."""
    kube = world.kube
    stopped = deadline_workload("stopped-0")
    stopped["spec"]["active"] = False
    world.add(stopped)
    admit_on_spot_waiting(kube, "stopped-0", world.clock)
    planned(monkeypatch, lambda plan: {**plan.lanes, (NAMESPACE, "stopped-0"): MOVE})
    first = world.reconcile()
    evict(kube, "stopped-0", world.clock)
    before = live(kube, "stopped-0")
    second = world.reconcile()
    assert (first.lanes_moved, first.moves_done, second.lanes_moved, second.moves_done) == (
        0,
        0,
        0,
        0,
    )
    after = live(kube, "stopped-0")
    assert after["spec"] == before["spec"]
    assert after["spec"]["active"] is False
    assert names.ANNOTATION_MOVING_TO not in after["metadata"]["annotations"]
    assert events(kube, "MovedToOnDemand") == {}
    assert events(kube, "LaneMoveDone") == {}
