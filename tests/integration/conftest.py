"""A real API server for the integration tests, started once per session.

The control plane (etcd + the CRD API server kube-apiserver embeds, see testenv)
loads our CRDs, the pinned upstream CRDs of Kueue, KEDA, Karpenter and the Prometheus Operator,
and stand-in CRDs for the three built-in kinds the controller writes (Lease, Event,
PriorityClass) and for namespaces (see testenv/standins). The API server therefore enforces the real
upstream schemas and CEL rules. With `KUBEBUILDER_ASSETS` pointing at a real kube-apiserver
and etcd, the same tests run against that instead, which serves the built-in kinds itself.

The tests hold on both servers:
- what the server serves is read from discovery (the `server` fixture), never assumed: the CRD
  server has no core `v1` or `apps/v1`, answers an unknown bearer token with 403, and serves
  none of the built-in kinds but through the stand-ins; a kube-apiserver serves them all and
  answers an unknown token with 401;
- the namespaces a test writes into are created first (`ensure_namespaces`; the `kube`
  fixture creates the controller's, and `test_reconcile.apply_doc` a project's): both servers
  refuse a create in a namespace that does not exist (the CRD server through its admission
  and NamespaceStandIns, testenv/namespaces.py);
- the clean slate after each test deletes what tests and the controllers they ran wrote, and
  leaves alone what a kube-apiserver makes for itself (`system-` PriorityClasses, which it
  refuses to delete, and everything in the `kube-*` namespaces).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controller import names
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError, RetryPolicy
from controller.kube.crds import install_crds, read_crds
from testenv import namespaces
from testenv.controlplane import ControlPlane
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
    kinds.CONFIG_MAP,
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


SERVER_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
"""Where a kube-apiserver keeps what it makes for itself (its identity Leases)."""


def made_by_the_server(obj: dict[str, Any]) -> bool:
    """What a kube-apiserver creates on its own, which no test wrote: the `system-`
    PriorityClasses (it refuses to delete them: 403) and the objects in its `kube-*`
    namespaces. The CRD-only server makes none of these."""
    meta = obj["metadata"]
    return str(meta["name"]).startswith("system-") or meta.get("namespace") in SERVER_NAMESPACES


def written_objects(
    client: KubeClient, of_kinds: Iterable[kinds.Kind] = CLEANED_KINDS
) -> list[tuple[kinds.Kind, dict[str, Any]]]:
    """Every served object of these kinds that a test, or a controller a test ran, wrote.

    The server is the session's own and starts empty, so that is everything but what the
    server made itself (`made_by_the_server`).
    """
    served = client.served_group_versions()
    found: list[tuple[kinds.Kind, dict[str, Any]]] = []
    for kind in of_kinds:
        if kind.group_version not in served:
            continue
        items, _ = client.list(kind)
        found.extend((kind, item) for item in items if not made_by_the_server(item))
    return found


def delete_everything(client: KubeClient) -> list[str]:
    """Remove what tests and controllers created, whatever state a failed test left.

    A deletion the server refuses (403) or that conflicts (409) is reported on stderr and
    returned, not raised: the clean-up of one object must not hide the test's own result or
    leave every later object in place. Namespaces stay (see testenv/namespaces.py).
    """
    refused: list[str] = []
    for kind, item in written_objects(client):
        meta = item["metadata"]
        where = "/".join(p for p in (kind.kind, meta.get("namespace"), meta["name"]) if p)
        try:
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
        except KubeError as exc:
            if exc.status not in (403, 409):
                raise
            refused.append(f"{where}: {exc.status} {str(exc)[:200]}")
    for line in refused:
        print(f"clean-up: not deleted: {line}", file=sys.stderr)
    return refused


def ensure_namespaces(client: KubeClient, *names_: str) -> None:
    """Make these namespaces: both servers refuse a create in a namespace that does not exist
    (the CRD-only server through its NamespaceStandIns; see testenv/namespaces.py)."""
    namespaces.ensure_namespaces(client, names_)


@dataclass(frozen=True)
class Server:
    """What the session's API server serves, from its discovery documents: tests derive their
    expectations from this rather than from which server they think it is."""

    group_versions: frozenset[str]

    def serves(self, group_version: str) -> bool:
        return group_version in self.group_versions

    def serves_group(self, group: str) -> bool:
        """Any version of an API group; "" is the core group."""
        if not group:
            return self.serves("v1")
        return any(gv.startswith(f"{group}/") for gv in self.group_versions)

    @property
    def core_v1(self) -> bool:
        """Core `v1` (Namespaces, Services, ...): a kube-apiserver; not the CRD-only server."""
        return self.serves("v1")

    @property
    def authenticates(self) -> bool:
        """Whether the server runs Kubernetes' own authenticators, which refuse an unknown
        bearer token with 401: a kube-apiserver, which also serves TokenReview. The CRD-only
        server treats the request as anonymous and forbids it: 403."""
        return self.serves("authentication.k8s.io/v1")

    @property
    def unknown_token_status(self) -> int:
        return 401 if self.authenticates else 403

    def unserved(self, objects: Iterable[dict[str, Any]]) -> list[str]:
        """The kinds among `objects` this server does not serve, as "apps/v1 Deployment",
        sorted (how the controller names them in KindsServed and `plan`)."""
        return sorted(
            {f"{o['apiVersion']} {o['kind']}" for o in objects if not self.serves(o["apiVersion"])}
        )

    def served_count(self, objects: Iterable[dict[str, Any]]) -> int:
        return sum(1 for o in objects if self.serves(o["apiVersion"]))


def discovered_kinds(client: KubeClient) -> dict[tuple[str, str], kinds.Kind]:
    """(apiVersion, kind) -> REST coordinates of every resource the server lists in discovery
    (subresources left out): what it can take, read from the server rather than assumed."""
    found: dict[tuple[str, str], kinds.Kind] = {}
    for group_version in sorted(client.served_group_versions()):
        group, _, version = group_version.rpartition("/")
        path = f"/apis/{group_version}" if group else f"/api/{version}"
        for resource in client.request("GET", path).get("resources") or []:
            if "/" in resource["name"]:
                continue
            found[(group_version, resource["kind"])] = kinds.Kind(
                group, version, resource["kind"], resource["name"], bool(resource["namespaced"])
            )
    return found


@pytest.fixture(scope="session")
def server(control_plane: ControlPlane) -> Server:
    client = new_client(control_plane)
    try:
        return Server(frozenset(client.served_group_versions()))
    finally:
        client.close()


@pytest.fixture
def kube(control_plane: ControlPlane) -> Iterator[KubeClient]:
    """A client for the shared server, and a clean server after the test.

    The controller's own namespace exists, as the install makes it: the controller writes its
    Lease, Events and warm pools there.
    """
    client = new_client(control_plane)
    try:
        ensure_namespaces(client, names.DEFAULT_NAMESPACE)
        yield client
    finally:
        if not control_plane.apiserver_running:
            control_plane.start_apiserver()
        delete_everything(client)
        client.close()


MANAGED_SELECTOR = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY_VALUE}"
