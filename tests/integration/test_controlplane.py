"""The test control plane itself: what it serves, and that it enforces upstream schemas."""

from __future__ import annotations

import pytest

from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from testenv.controlplane import ControlPlane


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
