"""On-demand lanes through a real API server: the controller patches a pending Workload's pod
sets to on-demand, and only a pending one whose owner chose no capacity type.

What is real: the API server enforcing Kueue's Workload schema, the JSON Patch and its `test` of
the resourceVersion, the status subresource through which the test admits Workloads as Kueue
would. No Kueue runs (nothing admits on its own) and Events are a stand-in custom resource on
the CRD-only server. The clock is injected: the example's llm-pretrain cutoff is Friday 18:00
Berlin, 101 hours after FIXED_MONDAY_NOON, on any date.

Why a lane, by hand (controller.decide.lanes, with llm-pretrain's spot figures from the
policy's priors over its two pools: the slower launch, the h100's 600 s, and an interruption rate
between the a100's 0.04 and the h100's 0.08 per node-hour, weighted by their spot GPUs, here
0.056; the deadline's confidence 0.99; a declared runtime's spread 0.25): a Workload of 2 nodes
declared at 50 hours needs its 0.99 runtime quantile, 50 h x exp(2.326 x 0.25 - 0.25^2 / 2) =
86.7 h (312,091 s), plus a launch on on-demand: 312,691 s, inside the 363,600 s (101 h) left. On
spot it must also survive the 0.99 Poisson quantile of 0.056 x 2 x 86.7 = 9.7 interruptions
(17), each a relaunch and half a 4-hour checkpoint interval (7,800 s): 445,291 s, past the
cutoff. So on-demand makes the deadline and spot does not; at 10 hours spot makes it too.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from controller import names
from controller.kube import kinds
from controller.kube.client import KubeClient
from controller.kube.events import EventRecorder
from controller.metrics import Metrics
from controller.reconcile.reconciler import Reconciler, ReconcileResult
from testenv.controlplane import ControlPlane
from tests.clock import Clock
from tests.integration.test_reconcile import apply_doc, example_documents

REPO_ROOT = Path(__file__).parents[2]
FIXED_MONDAY_NOON = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
PROJECT = "llm-pretrain"
NAMESPACE = "llm"
DEADLINE = "weekly-checkpoint"
GPU = "nvidia.com/gpu"
TIGHT_HOURS = 50
"""Declared runtime that on-demand makes by the cutoff and spot does not (see above)."""
EASY_HOURS = 10
"""Declared runtime that spot makes by the cutoff: no lane."""


def deadline_workload(
    name: str, *, hours: float = TIGHT_HOURS, node_selector: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pending Workload of 2 pods x 8 GPUs toward llm-pretrain's cutoff, as Kueue makes it."""
    spec: dict[str, Any] = {
        "containers": [
            {"name": "train", "image": "trainer:1", "resources": {"requests": {GPU: "8"}}}
        ],
        "restartPolicy": "Never",
    }
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {names.LABEL_DEADLINE: DEADLINE},
            "annotations": {
                names.ANNOTATION_EXPECTED_DURATION: str(int(hours * 3600)),
                names.ANNOTATION_CHECKPOINT_INTERVAL: str(4 * 3600),
            },
        },
        "spec": {
            "queueName": PROJECT,
            "priority": 100000,
            "podSets": [{"name": "main", "count": 2, "template": {"spec": spec}}],
        },
    }


def reserve(kube: KubeClient, name: str, clock: Clock, *, admitted: bool) -> None:
    """Kueue's status write on reserving quota (and admitting): on the status subresource."""
    stamp = clock.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [
        {
            "type": "QuotaReserved",
            "status": "True",
            "reason": "QuotaReserved",
            "message": "quota reserved",
            "lastTransitionTime": stamp,
        }
    ]
    if admitted:
        conditions.append({**conditions[0], "type": "Admitted", "reason": "Admitted"})
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "status": {
            "conditions": conditions,
            "admission": {
                "clusterQueue": PROJECT,
                "podSetAssignments": [
                    {
                        "name": "main",
                        "flavors": {GPU: names.flavor_name("a100", names.SPOT)},
                        "count": 2,
                    }
                ],
            },
        },
    }
    kube.apply(kinds.WORKLOAD, body, field_manager="kueue", subresource="status")


def live(kube: KubeClient, name: str) -> dict[str, Any]:
    workload = kube.get(kinds.WORKLOAD, name, NAMESPACE)
    assert workload is not None
    return workload


def selectors(workload: dict[str, Any]) -> list[dict[str, str] | None]:
    return [p["template"]["spec"].get("nodeSelector") for p in workload["spec"]["podSets"]]


def lane_events(kube: KubeClient) -> dict[str, str]:
    """Workload name -> note of its OnDemandLane Event."""
    return {
        e["regarding"]["name"]: e["note"]
        for e in kube.list(kinds.EVENT)[0]
        if e.get("reason") == "OnDemandLane" and e["regarding"]["kind"] == "Workload"
    }


class World:
    def __init__(self, kube: KubeClient) -> None:
        for doc in example_documents():
            apply_doc(kube, doc)
        self.kube = kube
        self.clock = Clock(FIXED_MONDAY_NOON)
        self.metrics = Metrics()
        self.reconciler = Reconciler(
            kube,
            events=EventRecorder(kube, reporting_instance="test", wall_clock=self.clock),
            wall_clock=self.clock,
            metrics=self.metrics,
        )

    def add(self, workload: dict[str, Any]) -> None:
        self.kube.apply(kinds.WORKLOAD, workload, field_manager="kueue")

    def reconcile(self) -> ReconcileResult:
        return self.reconciler.reconcile()

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


@pytest.fixture
def world(kube: KubeClient) -> World:
    return World(kube)


def explain(kubeconfig: Path) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "explain",
            PROJECT,
            "--kubeconfig",
            str(kubeconfig),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_pending_workload_that_spot_would_make_late_is_put_on_on_demand(
    world: World, control_plane: ControlPlane
) -> None:
    kube_config = control_plane.kubeconfig
    kube = world.kube
    world.add(deadline_workload("tight-0"))
    world.add(deadline_workload("easy-0", hours=EASY_HOURS))
    world.add(deadline_workload("owner-0", node_selector={names.CAPACITY_TYPE_LABEL: "spot"}))
    world.add(deadline_workload("admitted-0"))
    reserve(kube, "admitted-0", world.clock, admitted=True)
    before = {name: live(kube, name)["spec"] for name in ("easy-0", "owner-0", "admitted-0")}

    result = world.reconcile()

    assert result.capacity is not None
    assert set(result.capacity.lanes) == {(NAMESPACE, "tight-0")}
    lane = result.capacity.lanes[(NAMESPACE, "tight-0")]
    assert lane.needed_on_demand < 101 * 3600 < lane.needed_on_spot
    assert (round(lane.needed_on_demand), round(lane.needed_on_spot)) == (312691, 445291)
    assert result.lanes_written == 1
    tight = live(kube, "tight-0")
    assert selectors(tight) == [{names.CAPACITY_TYPE_LABEL: names.ON_DEMAND}]
    annotations = tight["metadata"]["annotations"]
    assert annotations[names.ANNOTATION_LANE] == names.ON_DEMAND
    assert annotations[names.ANNOTATION_LANE_REASON] == lane.reason
    assert annotations[names.ANNOTATION_EXPECTED_DURATION] == str(TIGHT_HOURS * 3600)
    # Left alone: spot makes it; its owner chose spot; admitted (Kueue chose its flavor).
    for name, spec in before.items():
        now = live(kube, name)
        assert now["spec"] == spec, name
        assert names.ANNOTATION_LANE not in now["metadata"]["annotations"], name
    assert selectors(live(kube, "owner-0")) == [{names.CAPACITY_TYPE_LABEL: "spot"}]
    assert lane_events(kube) == {"tight-0": lane.reason}
    assert world.sample("quartermaster_lane_workloads", project=PROJECT, lane="on-demand") == 1
    assert world.sample("quartermaster_lane_writes_total", project=PROJECT, lane="on-demand") == 1

    # explain, run as a process against the server, names the workload and why.
    shown = explain(kube_config)
    assert "Lanes (1 workload(s) put on a capacity type by the controller):" in shown
    [row] = [line for line in shown.splitlines() if f"{NAMESPACE}/tight-0" in line]
    assert row.split()[:3] == [f"{NAMESPACE}/tight-0", names.ON_DEMAND, "waiting"]
    assert row.endswith(lane.reason)

    # The next pass finds the lane in place: no write.
    again = world.reconcile()
    assert again.lanes_written == 0
    assert set(again.capacity.lanes if again.capacity else ()) == {(NAMESPACE, "tight-0")}

    # Admitted (on the on-demand flavor, as Kueue would): the lane stays, nothing is written.
    reserve(kube, "tight-0", world.clock, admitted=True)
    admitted = live(kube, "tight-0")
    after = world.reconcile()
    assert after.lanes_written == 0
    assert after.capacity is not None and not after.capacity.lanes
    still = live(kube, "tight-0")
    assert still["spec"] == admitted["spec"]
    assert still["metadata"]["annotations"][names.ANNOTATION_LANE] == names.ON_DEMAND
    assert still["metadata"]["annotations"][names.ANNOTATION_LANE_REASON] == lane.reason
    assert world.sample("quartermaster_lane_workloads", project=PROJECT, lane="on-demand") is None


def test_a_workload_with_quota_reserved_is_not_patched(world: World) -> None:
    """Kueue reserved quota (not yet admitted: the risk model still counts it as waiting, so
    the plan lanes it): its pod sets are fixed, and the controller writes nothing to it."""
    kube = world.kube
    world.add(deadline_workload("reserved-0"))
    reserve(kube, "reserved-0", world.clock, admitted=False)
    before = live(kube, "reserved-0")
    result = world.reconcile()
    assert result.capacity is not None
    assert (NAMESPACE, "reserved-0") in result.capacity.lanes
    assert result.lanes_written == 0
    after = live(kube, "reserved-0")
    assert after["spec"] == before["spec"]
    assert names.ANNOTATION_LANE not in after["metadata"]["annotations"]
    assert lane_events(kube) == {}


def test_a_workload_that_had_quota_reserved_after_it_was_read_is_not_patched(
    world: World,
) -> None:
    """The pass decides on what it read while the Workload was pending; Kueue reserves quota
    before the write goes out. The patch's test of the resourceVersion fails at the server,
    the Workload is untouched, and the pass goes on; the next pass, on the new version, leaves
    it alone."""
    kube = world.kube
    world.add(deadline_workload("race-0"))
    stale = world.reconciler.observe()
    reserve(kube, "race-0", world.clock, admitted=False)
    reserved = live(kube, "race-0")
    with capture_logs() as logs:
        result = world.reconciler.reconcile(stale)
    [refused] = [e for e in logs if e["event"] == "lane_not_written"]
    assert (refused["log_level"], refused["workload"]) == ("info", f"{NAMESPACE}/race-0")
    assert " 422 " in refused["error"], "the test of the resourceVersion failed at the server"
    assert result.capacity is not None and (NAMESPACE, "race-0") in result.capacity.lanes
    assert result.lanes_written == 0
    now = live(kube, "race-0")
    assert now["spec"] == reserved["spec"]
    assert selectors(now) == [None]
    assert names.ANNOTATION_LANE not in now["metadata"]["annotations"]
    with capture_logs() as logs:
        assert world.reconcile().lanes_written == 0
    assert not [e for e in logs if e["event"].startswith("lane_")], "not even tried"
    assert lane_events(kube) == {}
