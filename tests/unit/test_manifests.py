"""The install manifests, built by the real kustomize, checked for what a platform team trusts.

Every built-in object is checked against Kubernetes' strict OpenAPI schemas (the test API server
cannot serve core, apps or policy kinds; tests/integration/test_manifests_dry_run.py sends the
kinds it can serve to the real server). Beyond the schema: the restricted security context, RBAC
without wildcards or access to Secrets, selectors that select what they are meant to, and the
overlays differing only where they should.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller import names
from testenv.kustomize import KustomizeError, build
from tests.upstream import validate_any_builtin

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
BUILDS = ("base", "overlays/dev", "overlays/production")
Doc = dict[str, Any]


@pytest.fixture(scope="module", params=BUILDS)
def built(request: pytest.FixtureRequest) -> tuple[str, list[Doc]]:
    return request.param, build(MANIFESTS / request.param)


def one(objects: list[Doc], kind: str, name: str | None = None) -> Doc:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} objects named {name}"
    return found[0]


def containers(deployment: Doc) -> Iterator[Doc]:
    spec = deployment["spec"]["template"]["spec"]
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


# ------------------------------------------------------------------------------ schemas


def test_every_built_in_object_meets_the_kubernetes_schema(built: tuple[str, list[Doc]]) -> None:
    _, objects = built
    errors = {
        f"{o['kind']}/{o['metadata']['name']}": validate_any_builtin(o)
        for o in objects
        if o["apiVersion"].split("/")[0] not in ("monitoring.coreos.com",)
    }
    assert {k: v for k, v in errors.items() if v} == {}


def test_the_schema_check_catches_a_misspelt_field() -> None:
    deployment = one(build(MANIFESTS / "base"), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}

    errors = validate_any_builtin(deployment)

    assert any("securityContxt" in e for e in errors), errors


def test_a_missing_directory_is_a_clear_kustomize_error(tmp_path: Path) -> None:
    with pytest.raises(KustomizeError, match="kustomize build"):
        build(tmp_path / "nothing-here")


# ------------------------------------------------------------------------------ contents


def test_everything_namespaced_lives_in_the_controller_namespace(
    built: tuple[str, list[Doc]],
) -> None:
    _, objects = built
    cluster_scoped = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for obj in objects:
        want = None if obj["kind"] in cluster_scoped else names.DEFAULT_NAMESPACE
        assert obj["metadata"].get("namespace") == want, obj["kind"]
    assert one(objects, "Namespace")["metadata"]["name"] == names.DEFAULT_NAMESPACE


def test_our_crds_are_the_generated_ones(built: tuple[str, list[Doc]]) -> None:
    _, objects = built
    crds = sorted(o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition")
    assert crds == ["capacitypolicies.quartermaster.dev", "trainingprojects.quartermaster.dev"]


def test_the_pods_run_restricted(built: tuple[str, list[Doc]]) -> None:
    _, objects = built
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    for container in containers(deployment):
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False, container["name"]
        assert security["readOnlyRootFilesystem"] is True, container["name"]
        assert security["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert security.get("privileged", False) is False, container["name"]
        assert "memory" in container["resources"]["limits"], container["name"]
        assert {"cpu", "memory"} <= set(container["resources"]["requests"]), container["name"]
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    labels = one(objects, "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_image_runs_as_the_same_non_root_user_as_the_pods() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\d+)(?::(\d+))?\s*$", dockerfile, flags=re.M)
    assert users, "the Dockerfile must end as a numeric non-root USER"
    uid, gid = users[-1]
    pod = one(build(MANIFESTS / "base"), "Deployment")["spec"]["template"]["spec"]
    assert int(uid) == pod["securityContext"]["runAsUser"] != 0
    assert int(gid or uid) == pod["securityContext"]["runAsGroup"]
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\}\s*$", dockerfile, flags=re.M), "slim final stage"
    assert "python:3.11-slim" in dockerfile


def test_the_probes_and_the_service_use_the_port_the_controller_listens_on(
    built: tuple[str, list[Doc]],
) -> None:
    _, objects = built
    deployment = one(objects, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    address = next(a for a in container["args"] if a.startswith("--health-address="))
    assert ports["http-metrics"] == int(address.rsplit(":", 1)[1])
    service = one(objects, "Service")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http-metrics"]
    monitor = one(objects, "ServiceMonitor")
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [
        service["spec"]["ports"][0]["name"]
    ]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_every_selector_selects_the_controller_pods(built: tuple[str, list[Doc]]) -> None:
    _, objects = built
    deployment = one(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(deployment["spec"]["selector"]["matchLabels"], pod_labels)
    assert selects(one(objects, "Service")["spec"]["selector"], pod_labels)
    assert selects(one(objects, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"], pod_labels)
    pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    for pdb in pdbs:
        assert selects(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    service = one(objects, "Service")
    monitor = one(objects, "ServiceMonitor")
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])


def test_rbac_has_no_wildcards_and_no_secrets(built: tuple[str, list[Doc]]) -> None:
    _, objects = built
    roles = [o for o in objects if o["kind"] in ("Role", "ClusterRole")]
    assert roles
    for role in roles:
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert "*" not in rule.get(key, []), (role["kind"], rule)
            assert not {"secrets", "pods/exec", "serviceaccounts/token"} & set(rule["resources"]), (
                rule
            )
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
            if "configmaps" in rule["resources"]:  # one, in its own namespace: what it learned
                assert role["kind"] == "Role", rule
                assert rule["resourceNames"] == [names.LEARNED_STATE_NAME], rule


def test_the_bindings_give_the_roles_to_the_controllers_service_account(
    built: tuple[str, list[Doc]],
) -> None:
    _, objects = built
    account = one(objects, "ServiceAccount")
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    for kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        binding = one(objects, kind)
        assert binding["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": account["metadata"]["name"],
                "namespace": names.DEFAULT_NAMESPACE,
            }
        ]
        assert binding["roleRef"]["kind"] == role_kind
        one(objects, role_kind, binding["roleRef"]["name"])


def test_the_named_rules_name_the_lease_and_the_configmap_the_controller_keeps() -> None:
    role = one(build(MANIFESTS / "base"), "Role")
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [names.LEASE_NAME],
            "verbs": ["get", "update"],
        },
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [names.LEARNED_STATE_NAME],
            "verbs": ["get", "create", "patch"],
        },
    ]


# ------------------------------------------------------------------------------ overlays


def test_production_runs_two_leader_elected_replicas_with_a_budget() -> None:
    objects = build(MANIFESTS / "overlays/production")
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert (
        "--no-leader-elect" not in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    assert one(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert re.fullmatch(r"[\w./-]+:\d+\.\d+\.\d+", image), image
    mounts = deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {
        "name": "prometheus-token",
        "mountPath": "/var/run/secrets/prometheus",
        "readOnly": True,
    } in mounts


def test_dev_runs_one_replica_of_the_local_image_without_a_budget() -> None:
    objects = build(MANIFESTS / "overlays/dev")
    deployment = one(objects, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == 1
    assert (container["image"], container["imagePullPolicy"]) == ("quartermaster:dev", "Never")
    assert not [o for o in objects if o["kind"] == "PodDisruptionBudget"]


def test_the_overlays_keep_the_base_security_and_rbac() -> None:
    base = build(MANIFESTS / "base")
    for overlay in ("overlays/dev", "overlays/production"):
        objects = build(MANIFESTS / overlay)
        for kind in ("ClusterRole", "Role", "NetworkPolicy"):
            assert (
                one(objects, kind)["rules" if "Role" in kind else "spec"]
                == one(base, kind)["rules" if "Role" in kind else "spec"]
            ), (overlay, kind)
        pod = one(objects, "Deployment")["spec"]["template"]["spec"]
        assert (
            pod["securityContext"]
            == one(base, "Deployment")["spec"]["template"]["spec"]["securityContext"]
        )
