"""The controller's ServiceAccount can do what the controller does, and nothing more.

The test API server cannot answer a SubjectAccessReview (it authorizes only system:masters and
serves no rbac.authorization.k8s.io), so this is the equivalent check, against the real server:
every request the controller makes is recorded by testenv/faultproxy.py on its way to the
server, turned into the attributes the API server's authorizer sees (testenv/rbac.py),
and checked against the roles `kustomize build manifests/base` binds to the ServiceAccount, both
ways:

- every recorded request is allowed by a rule (the controller can do its job), and
- every permission the roles grant was used by some recorded request (nothing more), except
  in API groups the server does not serve (on the CRD-only server, apps: the warm pools'
  Deployments; see the test), read from discovery.

The recorded run covers what a controller process does: the Controller loop with leader
election (Lease, list and watch of every kind), and reconcile passes on the same injected clock
as the loop, so a raise happens within the test: applying what the policy renders, status,
Events, the priority boost, and pruning a removed project. An Event repeat (a PATCH of its
series) is made deterministic: a pass a minute after the fleet shrinks warns again that a
project's queues are kept for their Workloads, and the test checks that Event's series on the
server before anything else. Stand-ins: Lease and Event are custom resources on this server
(testenv/standins).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from controller import names
from controller.decide.mix import Action
from controller.history import HistoryReader
from controller.kube import kinds
from controller.kube.client import KubeClient
from controller.kube.events import EventRecorder
from controller.metrics import Metrics
from controller.reconcile.reconciler import Reconciler
from testenv.controlplane import ControlPlane
from testenv.faultproxy import FaultProxy, client_for
from testenv.kustomize import build
from testenv.rbac import (
    Attributes,
    Grant,
    attributes,
    denied,
    grants,
    is_discovery,
    unused,
)
from tests.clock import Clock
from tests.integration.conftest import Server
from tests.integration.test_capacity_loop import (
    FIXED_MONDAY_NOON,
    HOPELESS,
    WINDOW,
    deadline_workload,
)
from tests.integration.test_controller_faults import RunningController, options, wait_for
from tests.integration.test_reconcile import apply_doc, example_documents

REPO = Path(__file__).resolve().parents[2]
SUBJECT = (names.DEFAULT_NAMESPACE, "quartermaster")
REMOVED_PROJECT = "interns"
KEPT_PROJECT = "vision-research"


@pytest.fixture
def proxy(control_plane: ControlPlane) -> Iterator[FaultProxy]:
    with FaultProxy.for_control_plane(control_plane) as running:
        yield running


def run_the_controller(kube: KubeClient, proxy: FaultProxy) -> None:
    """Everything the controller does, its requests going through `proxy`; the test's own
    writes (the GitOps side, Kueue's Workloads) go straight to the server, unrecorded."""
    for doc in example_documents():
        if doc["kind"] == "CapacityPolicy":
            doc["spec"]["risk"].update(priorityBoost=True, priorityBoostValue=5000)
        apply_doc(kube, doc)
    for index in range(HOPELESS):
        kube.apply(kinds.WORKLOAD, deadline_workload(index), field_manager="kueue")

    # One clock for the loop and the passes after it: the loop's pass opens the evaluation
    # window at the clock's start, and the passes' decisions follow from it on any date.
    clock = Clock(FIXED_MONDAY_NOON)
    # The loop: leader election, watches, a first pass; then a graceful stop releases the Lease.
    looped = RunningController(
        client_for(proxy),
        options(
            leader_election=True,
            lease_duration_seconds=4.0,
            renew_deadline_seconds=3.0,
            retry_period_seconds=0.5,
        ),
        wall_clock=clock,
    ).start()
    try:
        wait_for(lambda: bool(looped.results), 60, "the loop's first reconcile")
    finally:
        looped.stop()
    assert looped.stopped_cleanly()

    # Passes on that clock: a raise a window later, a prune after a project is removed from
    # Git, the fleet shrinking, and a repeated Event.
    client = client_for(proxy)
    try:
        reconciler = Reconciler(
            client,
            events=EventRecorder(client, reporting_instance="rbac-test", wall_clock=clock),
            wall_clock=clock,
            metrics=Metrics(),
            history=HistoryReader(),
        )
        clock.advance(WINDOW + 1)
        result = reconciler.reconcile()
        assert result.capacity is not None
        assert Action.RAISE in {d.action for d in result.capacity.decisions}
        clock.advance(WINDOW + 1)
        kube.delete(kinds.TRAINING_PROJECT, REMOVED_PROJECT)
        result = reconciler.reconcile()
        assert result.pruned > 0
        # The fleet shrinks in Git: one project left, the h100 pool, the exploratory tier and
        # the warm pools gone. Every kind the controller writes is pruned once; llm-pretrain's
        # queues are kept, since its Workloads still use them.
        for doc in example_documents():
            if doc["kind"] == "TrainingProject" and doc["metadata"]["name"] != KEPT_PROJECT:
                kube.delete(kinds.TRAINING_PROJECT, doc["metadata"]["name"])
            elif doc["kind"] == "CapacityPolicy":
                spec = doc["spec"]
                spec["tiers"] = [t for t in spec["tiers"] if t["name"] != "exploratory"]
                spec["pools"] = [p for p in spec["pools"] if p["name"] == "a100"]
                spec["pools"][0]["warmPool"] = {"minGpus": 0, "maxGpus": 0}
                apply_doc(kube, doc)
        clock.advance(WINDOW + 1)
        result = reconciler.reconcile()
        assert result.pruned > 0
        assert result.kept
        # A minute later, well within the Event series window, the same warning again: the
        # recorder counts it on the Event it wrote (a PATCH) instead of creating another.
        clock.advance(60)
        reconciler.reconcile()
    finally:
        client.close()
    repeated = [
        e
        for e in kube.list(kinds.EVENT)[0]
        if e.get("reason") == "PruneBlocked" and (e.get("series") or {}).get("count") == 2
    ]
    assert repeated, "no PruneBlocked Event was counted twice"


@pytest.fixture
def recorded(kube: KubeClient, proxy: FaultProxy) -> list[tuple[Attributes, int]]:
    run_the_controller(kube, proxy)
    out = []
    for request in proxy.requests:
        if is_discovery(request.path) and attributes(request.method, request.path) is None:
            continue
        found = attributes(request.method, request.path, request.query)
        assert found is not None, request
        out.append((found, request.status))
        if found.verb == "patch" and request.status == 201:
            # A server-side apply that creates the object is authorized for create as well.
            out.append((replace(found, verb="create"), request.status))
    return out


@pytest.fixture(scope="module")
def granted() -> list[Grant]:
    return grants(build(REPO / "manifests" / "base"), subject=SUBJECT)


def test_every_request_the_controller_makes_is_allowed(
    recorded: list[tuple[Attributes, int]], granted: list[Grant]
) -> None:
    requests = [r for r, _ in recorded]
    assert len(requests) > 50
    assert [str(r) for r in denied(requests, granted)] == []
    # The server accepted what was sent: no request was refused as malformed or forbidden
    # (404 for a vanished object and 429 while storage initializes are part of normal work).
    refused = [f"{r} -> {status}" for r, status in recorded if status in (400, 401, 403, 422)]
    assert refused == []


def test_every_permission_granted_is_used(
    recorded: list[tuple[Attributes, int]], granted: list[Grant], server: Server
) -> None:
    """Grants in a group the server does not serve cannot be exercised on it (apps on the
    CRD-only server); on a kube-apiserver every grant must be used."""
    requests = [r for r, _ in recorded]
    never = [g for g in unused(requests, granted) if server.serves_group(g.group)]
    assert "\n".join(str(g) for g in never) == ""


def test_the_warm_pool_deployments_get_exactly_what_their_scaled_objects_get(
    granted: list[Grant],
) -> None:
    """Deployments cannot be served on the CRD-only server, so their use cannot be recorded
    there; this holds on any server, from the roles alone. The reconciler
    writes both warm-pool kinds, in the controller's namespace, through the same apply and
    prune code, so their grants must be the same verbs in the same namespace."""

    def verbs(group: str, resource: str) -> set[tuple[str, str | None]]:
        return {
            (g.verb, g.namespace) for g in granted if (g.group, g.resource) == (group, resource)
        }

    assert verbs("apps", "deployments") == verbs("keda.sh", "scaledobjects")
    assert {n for _, n in verbs("apps", "deployments")} == {names.DEFAULT_NAMESPACE}
    assert kinds.DEPLOYMENT in kinds.CONTROLLER_NAMESPACE_KINDS
    assert kinds.SCALED_OBJECT in kinds.CONTROLLER_NAMESPACE_KINDS


def test_a_permission_the_controller_needs_taken_away_is_noticed(
    recorded: list[tuple[Attributes, int]], granted: list[Grant]
) -> None:
    """The check could fail: without status patches, the status writes are denied."""
    fewer = [g for g in granted if not g.resource.endswith("/status")]
    refused = denied([r for r, _ in recorded], fewer)
    assert refused and all(r.resource.endswith("/status") for r in refused)


def show(recorded: list[tuple[Attributes, Any]]) -> list[str]:
    return sorted({str(r) for r, _ in recorded})
