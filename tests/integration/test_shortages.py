"""Spot shortages through a real API server: Karpenter's InsufficientCapacityError Event on a
spot NodeClaim puts its pool in a shortage in the controller's plan (the spot outlook its lanes
are decided from), its metrics and explain, and a spot NodeClaim of the pool that becomes
Ready ends it.

What is real: the API server, its watches with field selectors (the cache's Event stores see
only the capacity errors), the NodeClaim schema, and a NodeClaim deleted as Karpenter deletes
one whose launch failed (the cache keeps its last state). Events are a stand-in custom
resource on the CRD-only server (testenv/standins), declaring `reason` and
`regarding.kind` selectable as the real Event API serves them; no Karpenter runs, so the test
writes what it would: the NodeClaim, the Event (as events.k8s.io/v1 shows the core v1 Event
Karpenter writes), the deletion, and later a Ready NodeClaim labelled with the zone it launched
in. The example's a100 pool has one zone, so that zone short is the pool short.

Why a lane only in the shortage, by hand (controller.decide.lanes; llm-pretrain's spot figures
from the policy's priors over its two pools: the slower launch, the h100's 600 s, and an
interruption rate between the a100's 0.04 and the h100's 0.08 per node-hour weighted by their
spot GPUs, here 0.0533; the deadline's confidence 0.99; a declared runtime's spread 0.25): a
Workload of 2 nodes declared at 185,560 s and checkpointing hourly needs its 0.99 runtime
quantile, 185,560 x exp(2.326 x 0.25 - 0.25^2 / 2) = 321,731 s; on spot it must also survive
the 0.99 Poisson quantile of 0.0533 x 2 x 89.4 h = 9.5 interruptions (17), each a relaunch and
half a checkpoint interval (2,400 s): 321,731 + 600 + 17 x 2,400 = 363,131 s, inside the
363,595 s left to the Friday 18:00 Berlin cutoff five seconds after Monday noon. The
shortage's 900 s (the prior: none learned yet) make it 364,031 s, past the cutoff, while
on-demand (322,331 s) makes it: a lane, and only in the shortage. (The lane is checked on the
plan's outlook: the example's first pass gives llm-pretrain no on-demand room to write one into,
as test_lanes shows.)

Times: the server stamps creationTimestamp with its own clock, so the Event's times are taken
from the failed NodeClaim's, as Karpenter's would be; the plan's clock is the fixed Monday
noon that the cutoff arithmetic needs, before them, so the shortage is on (its last error is
not ten minutes past) whatever the date.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from controller import cli, names
from controller.decide.lanes import LaneInput, choose_lane
from controller.kube import kinds
from controller.kube.cache import Cache, controller_sources
from controller.kube.client import KubeClient
from controller.kube.events import EventRecorder
from controller.metrics import Metrics
from controller.reconcile.reconciler import Reconciler, ReconcileResult
from controller.risk.shortage import PRIOR_SHORTAGE_SECONDS
from testenv.controlplane import ControlPlane
from tests.clock import Clock
from tests.integration.test_lanes import (
    FIXED_MONDAY_NOON,
    NAMESPACE,
    PROJECT,
    deadline_workload,
)
from tests.integration.test_reconcile import apply_doc, example_documents

SHORT_SECONDS = 185_560
"""Declared runtime spot makes by the cutoff with no shortage and misses with one (above)."""
CHECKPOINT_SECONDS = 3600
WORKLOAD = "short-0"
FAILED_CLAIM = "a100-spot-x7k2p"
READY_CLAIM = "a100-spot-r2d2q"
GAUGE = "quartermaster_spot_shortage_expected_wait_seconds"
ZONE = "us-east-1a"
"""The example policy's a100 pool's one zone: short, the pool is."""


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def spot_claim(name: str, *, launched_in: str | None = None) -> dict[str, Any]:
    """A spot NodeClaim of the a100 pool, as Karpenter creates it: its requirements copied
    from the NodePool, the pool's zone among them; `launched_in`, the zone label Karpenter
    puts on it once the cloud has placed the node."""
    labels = {names.NODEPOOL_LABEL: "a100-spot"}
    if launched_in is not None:
        labels[names.ZONE_LABEL] = launched_in
    return {
        "apiVersion": kinds.NODE_CLAIM.api_version,
        "kind": kinds.NODE_CLAIM.kind,
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
            "requirements": [
                {"key": names.CAPACITY_TYPE_LABEL, "operator": "In", "values": ["spot"]},
                {"key": names.ZONE_LABEL, "operator": "In", "values": [ZONE]},
            ],
        },
    }


def event(name: str, claim: dict[str, Any], *, reason: str, at: str) -> dict[str, Any]:
    """An Event on `claim` as events.k8s.io/v1 shows the core v1 Event Karpenter writes
    (deprecated timestamps, no eventTime), in `default`, where a cluster-scoped object's go."""
    return {
        "apiVersion": kinds.EVENT.api_version,
        "kind": kinds.EVENT.kind,
        "metadata": {"name": name, "namespace": "default"},
        "regarding": {
            "apiVersion": kinds.NODE_CLAIM.api_version,
            "kind": kinds.NODE_CLAIM.kind,
            "name": claim["metadata"]["name"],
            "uid": claim["metadata"]["uid"],
        },
        "reason": reason,
        "type": "Warning",
        "note": f"NodeClaim {claim['metadata']['name']} event: InsufficientCapacityError: no "
        "capacity for p4d.24xlarge spot in us-east-1a",
        "eventTime": None,
        "deprecatedFirstTimestamp": at,
        "deprecatedLastTimestamp": at,
        "deprecatedCount": 1,
        "deprecatedSource": {"component": "karpenter"},
        "reportingController": "karpenter",
    }


class World:
    """The example policy, a reconciler on the fixed clock, and the controller's cache."""

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
        self.cache = Cache(kube, controller_sources(names.DEFAULT_NAMESPACE))

    def reconcile(self) -> ReconcileResult:
        return self.reconciler.reconcile(self.cache.snapshot())

    def gauge(self) -> float | None:
        return self.metrics.registry.get_sample_value(GAUGE, {"pool": "a100"})


@pytest.fixture
def world(kube: KubeClient) -> Iterator[World]:
    made = World(kube)
    made.cache.start()
    try:
        wait_until(made.cache.synced, "the cache synced")
        yield made
    finally:
        made.cache.stop()
        made.cache.join(timeout=5)


def shortages(result: ReconcileResult) -> dict[str, float]:
    assert result.capacity is not None and result.capacity.observation is not None
    return dict(result.capacity.observation.spot_shortages)


def explain(world: World, control_plane: ControlPlane) -> str:
    out, err = io.StringIO(), io.StringIO()
    argv = ["explain", PROJECT, "--kubeconfig", str(control_plane.kubeconfig)]
    assert cli.main(argv, out, err, now=world.clock) == cli.EXIT_OK, err.getvalue()
    return out.getvalue()


def test_a_capacity_error_on_a_spot_node_claim_puts_its_pool_in_a_shortage_until_a_launch(
    world: World, control_plane: ControlPlane
) -> None:
    kube = world.kube
    workload = deadline_workload(WORKLOAD, hours=SHORT_SECONDS / 3600)
    workload["metadata"]["annotations"].update(
        {
            names.ANNOTATION_EXPECTED_DURATION: str(SHORT_SECONDS),
            names.ANNOTATION_CHECKPOINT_INTERVAL: str(CHECKPOINT_SECONDS),
        }
    )
    kube.apply(kinds.WORKLOAD, workload, field_manager="kueue")
    wait_until(lambda: len(world.cache.snapshot().workloads) == 1, "the Workload in the cache")

    # Karpenter's failed launch: the NodeClaim, its Event, the NodeClaim deleted.
    failed = kube.create(kinds.NODE_CLAIM, spot_claim(FAILED_CLAIM))
    wait_until(lambda: len(world.cache.snapshot().node_claims) == 1, "the NodeClaim seen")
    kube.delete(kinds.NODE_CLAIM, FAILED_CLAIM)
    wait_until(lambda: not world.cache.snapshot().node_claims, "the NodeClaim deleted")
    at = failed["metadata"]["creationTimestamp"]
    # Another Event about the NodeClaim first: the field selector keeps it from the cache.
    kube.create(kinds.EVENT, event("launched.1", failed, reason="Launched", at=at))
    kube.create(kinds.EVENT, event("ice.1", failed, reason=names.CAPACITY_ERROR_REASON, at=at))
    wait_until(lambda: bool(world.cache.snapshot().capacity_errors), "the Event seen")
    observed = world.cache.snapshot()
    assert [e["metadata"]["name"] for e in observed.capacity_errors] == ["ice.1"]
    # The deleted NodeClaim's last state is what still names its pool.
    assert [c["metadata"]["name"] for c in observed.deleted_node_claims] == [FAILED_CLAIM]

    world.clock.advance(5)
    result = world.reconcile()
    assert shortages(result) == {"a100": PRIOR_SHORTAGE_SECONDS}
    assert world.gauge() == PRIOR_SHORTAGE_SECONDS
    # The plan's spot outlook for the project carries the shortage, and with it the lane
    # decision moves the Workload to on-demand where without it spot makes the deadline.
    # (Whether the lane is then written also needs on-demand room in the project's quota now,
    # which the example's first pass does not give llm-pretrain: see test_lanes.)
    assert result.capacity is not None
    outlook = result.capacity.spot_outlooks[PROJECT]
    assert outlook.shortage_seconds == PRIOR_SHORTAGE_SECONDS
    assert (outlook.launch_seconds, round(outlook.interruptions_per_node_hour, 4)) == (600, 0.0533)
    waiting = LaneInput(
        key=(NAMESPACE, WORKLOAD),
        project=PROJECT,
        gpus=16,
        time_left=101 * 3600 - 5,
        confidence=0.99,
        runtime_seconds=SHORT_SECONDS,
        sigma=0.25,
        checkpoint_seconds=CHECKPOINT_SECONDS,
    )
    lane = choose_lane(waiting, outlook)
    assert lane is not None and "shortage 900s" in lane.reason
    assert (round(lane.needed_on_spot), round(lane.needed_on_demand)) == (364031, 322331)
    assert choose_lane(waiting, replace(outlook, shortage_seconds=0.0)) is None
    assert set(world.reconciler.shortages.state("a100").short) == {ZONE}
    # explain rebuilds the shortage from the cluster, as a restarted controller would.
    shown = explain(world, control_plane)
    assert "Spot shortage in pool a100: Karpenter's launches failing for capacity since" in shown
    assert f"in every zone it launches in ({ZONE})" in shown

    # A spot node of the pool, asked for after the shortage began, becomes Ready: it is over.
    ready = kube.create(kinds.NODE_CLAIM, spot_claim(READY_CLAIM, launched_in=ZONE))
    created = ready["metadata"]["creationTimestamp"]
    kube.apply(
        kinds.NODE_CLAIM,
        {
            "apiVersion": kinds.NODE_CLAIM.api_version,
            "kind": kinds.NODE_CLAIM.kind,
            "metadata": {"name": READY_CLAIM},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "Ready",
                        "message": "",
                        "lastTransitionTime": created,
                    }
                ]
            },
        },
        field_manager="karpenter",
        subresource="status",
    )
    wait_until(
        lambda: any(
            (c.get("status") or {}).get("conditions") for c in world.cache.snapshot().node_claims
        ),
        "the Ready NodeClaim seen",
    )
    world.clock.advance(5)
    result = world.reconcile()
    assert shortages(result) == {}
    assert world.gauge() == 0.0
    assert world.reconciler.shortages.state("a100").started is None
    assert not world.reconciler.shortages.state("a100").short
    assert result.capacity is not None
    assert result.capacity.spot_outlooks[PROJECT].shortage_seconds == 0.0
    assert "Spot shortage" not in explain(world, control_plane)
