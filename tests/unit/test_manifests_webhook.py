"""The lanes webhook's optional components, built by the real kustomize into the production
overlay that uses them (manifests/overlays/production-webhook), and checked for what the API
server and the controller need of each other.

Every built-in object meets Kubernetes' strict schema (cert-manager's kinds are not built in:
their fields are checked here by hand). The test API server runs no admission webhooks
(see testenv/controlplane.py), so no test sends a Workload through this configuration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controller import webhook
from testenv.kustomize import build
from tests.unit.test_manifests import MANIFESTS, one, selects
from tests.upstream import validate_any_builtin

Doc = dict[str, Any]


@pytest.fixture(scope="module")
def objects() -> list[Doc]:
    return build(MANIFESTS / "overlays/production-webhook")


def test_every_built_in_object_meets_the_kubernetes_schema(objects: list[Doc]) -> None:
    errors = {
        f"{o['kind']}/{o['metadata']['name']}": validate_any_builtin(o)
        for o in objects
        if o["apiVersion"].split("/")[0] not in ("monitoring.coreos.com", "cert-manager.io")
    }
    assert {k: v for k, v in errors.items() if v} == {}


def test_the_webhook_may_only_help(objects: list[Doc]) -> None:
    config = one(objects, "MutatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["timeoutSeconds"] == 2
    assert hook["rules"] == [
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "apiVersions": ["v1beta2"],
            "operations": ["CREATE"],
            "resources": ["workloads"],
            "scope": "Namespaced",
        }
    ]
    excluded = hook["namespaceSelector"]["matchExpressions"][0]
    assert excluded["operator"] == "NotIn"
    assert {"kube-system", "quartermaster-system"} <= set(excluded["values"])


def test_the_api_server_reaches_the_path_and_port_the_controller_serves(
    objects: list[Doc],
) -> None:
    config = one(objects, "MutatingWebhookConfiguration")
    target = config["webhooks"][0]["clientConfig"]["service"]
    assert target["path"] == webhook.PATH
    service = one(objects, "Service", target["name"])
    assert service["metadata"]["namespace"] == target["namespace"]
    (port,) = service["spec"]["ports"]
    assert port["port"] == target["port"]
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert selects(
        service["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"]
    )
    container = pod["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    address = next(a for a in container["args"] if a.startswith("--webhook-address="))
    assert ports[port["targetPort"]] == int(address.rsplit(":", 1)[1])
    ingress = one(objects, "NetworkPolicy")["spec"]["ingress"]
    assert {"ports": [{"port": port["targetPort"], "protocol": "TCP"}]} in ingress


def test_the_certificate_is_mounted_where_the_controller_reads_it(objects: list[Doc]) -> None:
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    cert_dir = next(a for a in container["args"] if a.startswith("--webhook-cert-dir="))
    mount = next(
        m for m in container["volumeMounts"] if m["mountPath"] == cert_dir.split("=", 1)[1]
    )
    assert mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    certificate = one(objects, "Certificate")
    assert volume["secret"]["secretName"] == certificate["spec"]["secretName"]
    config = one(objects, "MutatingWebhookConfiguration")
    meta = certificate["metadata"]
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{meta['namespace']}/{meta['name']}"
    )
    service = config["webhooks"][0]["clientConfig"]["service"]
    assert f"{service['name']}.{service['namespace']}.svc" in certificate["spec"]["dnsNames"]
    issuer = one(objects, "Issuer", certificate["spec"]["issuerRef"]["name"])
    assert issuer["metadata"]["namespace"] == meta["namespace"]


def test_the_webhook_needs_no_rbac_and_production_stays_as_it_was(objects: list[Doc]) -> None:
    production = build(MANIFESTS / "overlays/production")
    for kind in ("ClusterRole", "Role"):
        assert one(objects, kind)["rules"] == one(production, kind)["rules"]
    kept = {(o["kind"], o["metadata"]["name"]) for o in production}
    added = {(o["kind"], o["metadata"]["name"]) for o in objects} - kept
    assert added == {
        ("MutatingWebhookConfiguration", "quartermaster-lanes"),
        ("Service", "quartermaster-webhook"),
        ("Certificate", "quartermaster-webhook"),
        ("Issuer", "quartermaster-selfsigned"),
    }


def test_the_components_are_optional() -> None:
    assert not any(
        o["kind"] == "MutatingWebhookConfiguration"
        for o in build(MANIFESTS / "overlays/production")
    )
    assert Path(MANIFESTS / "components/webhook/kustomization.yaml").is_file()
