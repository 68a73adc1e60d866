"""Namespaces for whatever a test, the demo or the e2e scenario writes into them.

A real kube-apiserver refuses a namespaced create in a namespace that does not exist (404
`namespaces "llm" not found`), and so does the test server: it serves no core `v1`, so no
Namespace kind, but its admission refuses a create in a namespace with no `NamespaceStandIn`
(a cluster-scoped stand-in CRD, `standins/testenv.quartermaster.dev_namespacestandins.yaml`)
of that name. So code that forgets to create its namespaces fails here as it would in a
cluster. `ensure_namespaces` makes what each server needs: a Namespace where core `v1` is
served, a NamespaceStandIn elsewhere. `default`, `kube-system`, `kube-public` and
`kube-node-lease` exist from the start on both, as in every cluster.

They are never deleted. Finishing a namespace's deletion is the job of kube-controller-manager's
namespace controller, which no test control plane runs: a deleted namespace would stay
`Terminating` and refuse every later write into it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from controller.kube.client import KubeClient, KubeError
from controller.kube.kinds import Kind

NAMESPACE = Kind("", "v1", "Namespace", "namespaces", False)
NAMESPACE_STANDIN = Kind(
    "testenv.quartermaster.dev", "v1", "NamespaceStandIn", "namespacestandins", False
)
"""Where the server serves no core `v1`: one per namespace that exists (see the module)."""


def serves_core_v1(client: KubeClient) -> bool:
    """Whether the server serves the core group (`/api/v1`): a kube-apiserver does, the CRD-only
    server answers `/api` with no versions."""
    return "v1" in (client.request("GET", "/api").get("versions") or [])


def namespace_kind(core_v1: bool) -> Kind:
    """What makes a namespace exist: a Namespace, or on the CRD-only server its stand-in."""
    return NAMESPACE if core_v1 else NAMESPACE_STANDIN


def ensure_namespaces(client: KubeClient, names: Iterable[str]) -> list[str]:
    """Make each namespace that does not exist yet (409 AlreadyExists is fine); the ones made.

    On the CRD-only server the stand-in CRD must be loaded first (`testenv.crds` loads it with
    the others); creating a stand-in there without it fails with 404 and says so.
    """
    wanted = sorted(set(names))
    if not wanted:
        return []
    kind = namespace_kind(serves_core_v1(client))
    created = []
    for name in wanted:
        try:
            client.create(
                kind,
                {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": name}},
            )
        except KubeError as exc:
            if exc.status == 404 and kind is NAMESPACE_STANDIN:
                raise KubeError(
                    f"cannot make namespace {name!r}: the server serves neither core v1 nor "
                    f"{kind.group_version} (load testenv/standins with the CRDs): {exc}",
                    status=404,
                ) from exc
            if exc.status != 409:
                raise
        else:
            created.append(name)
    return created


def policy_namespaces(documents: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every namespace the TrainingProjects among `documents` name: where their LocalQueues and
    Workloads go."""
    found: set[str] = set()
    for doc in documents:
        if doc.get("kind") == "TrainingProject":
            spec = doc.get("spec") or {}
            found.update(str(n) for n in spec.get("namespaces") or [] if isinstance(n, str))
    return sorted(found)
