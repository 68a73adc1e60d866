"""The test control plane itself: what it serves, and that it enforces upstream schemas."""

from __future__ import annotations

from typing import Any

import pytest

from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from testenv import namespaces
from testenv.controlplane import ControlPlane
from tests.integration.conftest import Server


def test_it_serves_every_group_the_controller_writes(
    kube: KubeClient, control_plane: ControlPlane
) -> None:
    """Every kind the controller writes is served, by CRDs, stand-ins or the server itself;
    apps/v1 (the warm-pool Deployments) only by a real kube-apiserver, never by the CRD-only
    server, whichever binaries KUBEBUILDER_ASSETS gave the control plane."""
    served = kube.served_group_versions()
    for kind in (
        *kinds.MANAGED_KINDS,
        kinds.CAPACITY_POLICY,
        kinds.TRAINING_PROJECT,
        kinds.WORKLOAD,
        kinds.LEASE,
        kinds.EVENT,
    ):
        if kind is kinds.DEPLOYMENT:
            assert (kind.group_version in served) == control_plane.binaries.full_kube_apiserver
        else:
            assert kind.group_version in served, kind
    # Core v1 (Namespaces) likewise: the CRD-only server answers /api with no versions.
    assert ("v1" in served) == control_plane.binaries.full_kube_apiserver


def test_it_rejects_an_object_the_upstream_schema_forbids(kube: KubeClient) -> None:
    bad = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "bad"},
        "spec": {
            "weight": 0,
            "template": {
                "spec": {
                    "requirements": [],
                    "nodeClassRef": {"group": "g", "kind": "k", "name": "n"},
                }
            },
        },
    }
    with pytest.raises(KubeError) as raised:
        kube.apply(kinds.NODE_POOL, bad, field_manager="test")
    assert raised.value.status == 422
    assert "spec.weight" in str(raised.value)


def lease_in(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": kinds.LEASE.api_version,
        "kind": kinds.LEASE.kind,
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {"holderIdentity": "a"},
    }


def test_a_create_in_a_namespace_that_does_not_exist_is_refused_until_it_is_made(
    kube: KubeClient, server: Server
) -> None:
    """As a cluster refuses it: the CRD-only server has no Namespace kind, so its admission
    looks for a NamespaceStandIn (testenv/namespaces.py); a kube-apiserver for a Namespace.
    Code that forgets to make its namespaces fails here, not first in a cluster."""
    namespace = "never-made-before"
    kind = namespaces.namespace_kind(server.core_v1)
    assert kube.get(kind, namespace) is None
    with pytest.raises(KubeError) as created:
        kube.create(kinds.LEASE, lease_in(namespace))
    with pytest.raises(KubeError) as applied:
        kube.apply(kinds.LEASE, lease_in(namespace), field_manager="test")
    for refused in (created.value, applied.value):
        assert refused.status == 404
        assert f'namespaces "{namespace}" not found' in str(refused)
    assert kube.get(kinds.LEASE, "probe", namespace) is None

    assert namespaces.ensure_namespaces(kube, [namespace]) == [namespace]
    assert namespaces.ensure_namespaces(kube, [namespace]) == [], "made once, then found"
    assert kube.create(kinds.LEASE, lease_in(namespace))["metadata"]["namespace"] == namespace


@pytest.mark.parametrize("namespace", ["default", "kube-system"])
def test_the_namespaces_every_cluster_has_exist_from_the_start(
    kube: KubeClient, namespace: str
) -> None:
    assert kube.create(kinds.LEASE, lease_in(namespace))["metadata"]["name"] == "probe"
    kube.delete(kinds.LEASE, "probe", namespace)
