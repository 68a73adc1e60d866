"""Namespaces for whatever a test, the demo or the e2e scenario writes into them.

A real kube-apiserver refuses a namespaced write into a namespace that does not exist (404
`namespaces "llm" not found`), as a cluster does; the CRD-only test server serves no core `v1`,
so it has no Namespace kind and takes any namespace in a path. So: create the namespaces first
where the server serves them, and do nothing where it does not.

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


def serves_core_v1(client: KubeClient) -> bool:
    """Whether the server serves the core group (`/api/v1`): a kube-apiserver does, the CRD-only
    server answers `/api` with no versions."""
    return "v1" in (client.request("GET", "/api").get("versions") or [])


def ensure_namespaces(client: KubeClient, names: Iterable[str]) -> list[str]:
    """Create each namespace that does not exist yet (409 AlreadyExists is fine); the ones
    created. A no-op on a server without core `v1` (the CRD-only server), which needs none."""
    wanted = sorted(set(names))
    if not wanted or not serves_core_v1(client):
        return []
    created = []
    for name in wanted:
        try:
            client.create(
                NAMESPACE,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
            )
        except KubeError as exc:
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
