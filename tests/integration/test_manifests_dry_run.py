"""The kustomize output of every install, sent to the real API server with server-side dry-run.

The test API server serves CRDs (apiextensions.k8s.io) and every CRD group, with the upstream
Prometheus Operator CRDs loaded: our CRDs, the ServiceMonitor and the PrometheusRule are checked
by the server itself, its structural schemas and CEL rules included. Core, apps, policy, rbac and
networking kinds cannot be served by it (see ../shared/controlplane/README.md); those are checked
against Kubernetes' own strict schemas in tests/unit/test_manifests.py. This test asserts which
kinds went where, so no kind the server could check is left to the offline check silently.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from controller.kube.client import KubeClient, KubeError
from controller.kube.kinds import Kind
from controller.testenv.kustomize import build

REPO = Path(__file__).resolve().parents[2]
BUILDS = ("base", "overlays/dev", "overlays/production")
SERVER_CHECKED = {"CustomResourceDefinition", "ServiceMonitor", "PrometheusRule"}
OFFLINE_CHECKED = {
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
PLURALS = {
    "CustomResourceDefinition": ("customresourcedefinitions", False),
    "ServiceMonitor": ("servicemonitors", True),
    "PrometheusRule": ("prometheusrules", True),
}
Doc = dict[str, Any]


def kind_of(obj: Doc) -> Kind:
    group, _, version = obj["apiVersion"].rpartition("/")
    plural, namespaced = PLURALS[obj["kind"]]
    return Kind(group, version, obj["kind"], plural, namespaced)


def dry_run(kube: KubeClient, obj: Doc) -> Doc:
    return kube.apply(kind_of(obj), obj, field_manager="install-dry-run", dry_run=True)


@pytest.mark.parametrize("overlay", BUILDS)
def test_the_server_accepts_every_object_it_can_serve_and_stores_none(
    kube: KubeClient, overlay: str
) -> None:
    objects = build(REPO / "manifests" / overlay)
    served = kube.served_group_versions()
    by_server = [o for o in objects if o["apiVersion"] in served]
    offline = [o for o in objects if o["apiVersion"] not in served]

    assert {o["kind"] for o in by_server} == SERVER_CHECKED
    assert {o["kind"] for o in offline} <= OFFLINE_CHECKED
    for obj in by_server:
        answer = dry_run(kube, obj)
        assert answer["kind"] == obj["kind"]
        assert answer["metadata"]["name"] == obj["metadata"]["name"]
    for obj in by_server:
        if obj["kind"] != "CustomResourceDefinition":  # ours are installed by the fixture
            meta = obj["metadata"]
            assert kube.get(kind_of(obj), meta["name"], meta.get("namespace")) is None


def test_the_server_keeps_the_alerts_exactly_as_written(kube: KubeClient) -> None:
    """Pruning or defaulting by the upstream schema would change what Prometheus loads."""
    rule = next(o for o in build(REPO / "manifests/base") if o["kind"] == "PrometheusRule")

    answer = dry_run(kube, rule)

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
    kube: KubeClient, kind: str, break_it: Any, path: str
) -> None:
    obj = copy.deepcopy(next(o for o in build(REPO / "manifests/base") if o["kind"] == kind))
    break_it(obj)

    with pytest.raises(KubeError) as caught:
        dry_run(kube, obj)

    assert caught.value.status == 422
    assert path in str(caught.value)
