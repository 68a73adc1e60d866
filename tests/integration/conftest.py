"""A real API server for the integration tests, started once per session.

The control plane (etcd + the CRD API server kube-apiserver embeds, see controller/testenv)
loads our CRDs, the pinned upstream CRDs of Kueue, KEDA, Karpenter and the Prometheus Operator,
and stand-in CRDs for the three built-in kinds the controller writes (Lease, Event,
PriorityClass; see controller/testenv/standins). The API server therefore enforces the real
upstream schemas and CEL rules. apps/v1 Deployments cannot be served by it: tests that touch
warm-pool Deployments check that the controller reports the kind as not served.

Tests share the server; each gets a clean slate: every object of ours and every object the
controller manages is deleted after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller import names
from controller.kube import kinds
from controller.kube.client import KubeClient, RetryPolicy
from controller.kube.crds import install_crds, read_crds
from controller.testenv.controlplane import ControlPlane
from tests.upstream import upstream_crds_dir

REPO_ROOT = Path(__file__).parents[2]
UPSTREAM = ("kueue", "keda", "karpenter", "prometheus-operator")
CLEANED_KINDS = (
    kinds.CAPACITY_POLICY,
    kinds.TRAINING_PROJECT,
    kinds.WORKLOAD,
    kinds.NODE_CLAIM,
    kinds.LEASE,
    kinds.EVENT,
    *kinds.MANAGED_KINDS,
)


def all_crds(plane: ControlPlane) -> list[dict[str, Any]]:
    upstream = upstream_crds_dir()
    return read_crds(
        [
            *(upstream / name for name in UPSTREAM),
            REPO_ROOT / "manifests" / "crds",
            *plane.standin_dirs(),
        ]
    )


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    with ControlPlane() as plane:
        client = KubeClient.from_kubeconfig(str(plane.kubeconfig))
        try:
            install_crds(client, all_crds(plane))
            # The first LIST after a CRD is established can get 429 "storage is
            # (re)initializing"; pay that once here rather than in the first test.
            served = client.served_group_versions()
            for kind in CLEANED_KINDS:
                if kind.group_version in served:
                    client.list(kind)
        finally:
            client.close()
        yield plane


def new_client(plane: ControlPlane, *, max_delay_seconds: float = 30.0) -> KubeClient:
    return KubeClient.from_kubeconfig(
        str(plane.kubeconfig), retry=RetryPolicy(max_delay_seconds=max_delay_seconds)
    )


def delete_everything(client: KubeClient) -> None:
    """Remove what tests and controllers created, whatever state a failed test left."""
    served = client.served_group_versions()
    for kind in CLEANED_KINDS:
        if kind.group_version not in served:
            continue
        items, _ = client.list(kind)
        for item in items:
            meta = item["metadata"]
            if meta.get("finalizers"):
                client.apply(
                    kind,
                    {
                        "apiVersion": kind.api_version,
                        "kind": kind.kind,
                        "metadata": {
                            "name": meta["name"],
                            "namespace": meta.get("namespace"),
                            "finalizers": [],
                        },
                    },
                    field_manager="test-cleanup",
                )
            client.delete(kind, meta["name"], meta.get("namespace"))


@pytest.fixture
def kube(control_plane: ControlPlane) -> Iterator[KubeClient]:
    """A client for the shared server, and a clean server after the test."""
    client = new_client(control_plane)
    try:
        yield client
    finally:
        if not control_plane.apiserver_running:
            control_plane.start_apiserver()
        delete_everything(client)
        client.close()


MANAGED_SELECTOR = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY_VALUE}"
