"""The kustomize output of every install, sent to the real API server with server-side dry-run.

Which kinds the server checks is read from its discovery, not assumed. The CRD-only test server
serves CRDs (apiextensions.k8s.io) and every CRD group; with the upstream Prometheus Operator
CRDs loaded, our CRDs, the ServiceMonitor and the PrometheusRule are checked by the server
itself, its structural schemas and CEL rules included. Core, apps, policy, rbac and networking
kinds cannot be served by it (see testenv/controlplane.py); those are checked against
Kubernetes' own strict schemas in tests/unit/test_manifests.py. A kube-apiserver serves them
all, and checks every object. This test asserts which kinds went where, so no kind the server
could check is left to the offline check silently.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.kube.client import KubeClient, KubeError
from controller.kube.kinds import Kind
from testenv.controlplane import ControlPlane
from testenv.kustomize import build
from tests.integration.conftest import discovered_kinds, new_client

REPO = Path(__file__).resolve().parents[2]
BUILDS = ("base", "overlays/dev", "overlays/production")
SERVER_CHECKED = {"CustomResourceDefinition", "ServiceMonitor", "PrometheusRule"}
"""Served by every test server: apiextensions and the Prometheus Operator's CRDs."""
BUILT_IN = {
    "Namespace",
    "ServiceAccount",
    "Service",
    "Deployment",
    "PodDisruptionBudget",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "NetworkPolicy",
}
"""Served by a kube-apiserver, by the CRD-only server not at all: left to the offline check
there."""
Doc = dict[str, Any]
Kinds = dict[tuple[str, str], Kind]


@pytest.fixture(scope="module")
def served_kinds(control_plane: ControlPlane) -> Iterator[Kinds]:
    client = new_client(control_plane)
    try:
        yield discovered_kinds(client)
    finally:
        client.close()


def kind_of(served: Kinds, obj: Doc) -> Kind:
    return served[(obj["apiVersion"], obj["kind"])]


def dry_run(kube: KubeClient, served: Kinds, obj: Doc) -> Doc:
    return kube.apply(kind_of(served, obj), obj, field_manager="install-dry-run", dry_run=True)


def stored_version(kube: KubeClient, served: Kinds, obj: Doc) -> str | None:
    meta = obj["metadata"]
    live = kube.get(kind_of(served, obj), meta["name"], meta.get("namespace"))
    return None if live is None else str(live["metadata"]["resourceVersion"])


@pytest.mark.parametrize("overlay", BUILDS)
def test_the_server_accepts_every_object_it_can_serve_and_changes_none(
    kube: KubeClient, served_kinds: Kinds, overlay: str
) -> None:
    objects = build(REPO / "manifests" / overlay)
    by_server = [o for o in objects if (o["apiVersion"], o["kind"]) in served_kinds]
    offline = [o for o in objects if (o["apiVersion"], o["kind"]) not in served_kinds]

    assert {o["kind"] for o in by_server} >= SERVER_CHECKED
    assert {o["kind"] for o in offline} <= BUILT_IN
    if ("v1", "Namespace") in served_kinds:  # a kube-apiserver: it checks every object
        assert offline == []
    else:  # the CRD-only server: exactly the CRD-served kinds
        assert {o["kind"] for o in by_server} == SERVER_CHECKED
    # Ours are installed by the fixture, and the controller's namespace by `kube`: those
    # exist, and must be left as they are; the rest must not be created.
    before = [stored_version(kube, served_kinds, o) for o in by_server]
    for obj in by_server:
        answer = dry_run(kube, served_kinds, obj)
        assert answer["kind"] == obj["kind"]
        assert answer["metadata"]["name"] == obj["metadata"]["name"]
    assert [stored_version(kube, served_kinds, o) for o in by_server] == before


def test_the_server_keeps_the_alerts_exactly_as_written(
    kube: KubeClient, served_kinds: Kinds
) -> None:
    """Pruning or defaulting by the upstream schema would change what Prometheus loads."""
    rule = next(o for o in build(REPO / "manifests/base") if o["kind"] == "PrometheusRule")

    answer = dry_run(kube, served_kinds, rule)

    assert answer["spec"] == rule["spec"]


@pytest.mark.parametrize(
    ("kind", "break_it", "path"),
    [
        pytest.param(
            "PrometheusRule",
            lambda o: o["spec"]["groups"][0].update({"interval": "every minute"}),
            "spec.groups[0].interval",
            id="an alert group interval that is not a duration",
        ),
        pytest.param(
            "PrometheusRule",
            lambda o: o["spec"]["groups"][0]["rules"][0].update({"for": "15 minutes"}),
            "spec.groups[0].rules[0].for",
            id="an alert's for that is not a duration",
        ),
        pytest.param(
            "ServiceMonitor",
            lambda o: o["spec"]["endpoints"][0].update({"scheme": "gopher"}),
            "spec.endpoints[0].scheme",
            id="a scrape scheme that is not http or https",
        ),
    ],
)
def test_the_dry_run_really_validates(
    kube: KubeClient, served_kinds: Kinds, kind: str, break_it: Any, path: str
) -> None:
    obj = copy.deepcopy(next(o for o in build(REPO / "manifests/base") if o["kind"] == kind))
    break_it(obj)

    with pytest.raises(KubeError) as caught:
        dry_run(kube, served_kinds, obj)

    assert caught.value.status == 422
    assert path in str(caught.value)
