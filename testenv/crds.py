"""Every CRD the harness loads into the test API server: upstream, ours, and the stand-ins.

The demo, `make cluster`, the e2e scenario, the soak and the benches all start from the same
cluster: the pinned upstream Kueue, KEDA, Karpenter and Prometheus Operator CRDs (from
`third_party/crds` or `$QUARTERMASTER_UPSTREAM_CRDS`), ours (`manifests/crds`) and stand-ins for
the built-in kinds the controller writes (Lease, Event, PriorityClass) where the server does
not serve them. Reading them is slow (the upstream ones are large), so it is a step of its own
that a caller can run while the servers start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.kube import kinds
from controller.kube.client import KubeClient
from controller.kube.crds import install_crds, read_crds
from testenv.controlplane import STANDINS_DIR
from testenv.namespaces import serves_core_v1

REPO_ROOT = Path(__file__).resolve().parents[1]
UPSTREAM_ENV = "QUARTERMASTER_UPSTREAM_CRDS"
UPSTREAM_PROJECTS = ("kueue", "keda", "karpenter", "prometheus-operator")
OUR_CRDS = REPO_ROOT / "manifests" / "crds"
WARMED_KINDS: tuple[kinds.Kind, ...] = (
    kinds.CAPACITY_POLICY,
    kinds.TRAINING_PROJECT,
    kinds.WORKLOAD,
    kinds.LEASE,
    kinds.EVENT,
    *kinds.MANAGED_KINDS,
)
"""Listed once after the CRDs are established: the server answers 429 "storage is
(re)initializing" for a few seconds after a CRD is established; this pays for it up front."""

Document = dict[str, Any]


class CrdSourceError(RuntimeError):
    """A CRD directory is missing or empty; the message says which and what to do."""


def upstream_crds_dir() -> Path:
    """`$QUARTERMASTER_UPSTREAM_CRDS`, else the repository's `third_party/crds` (as tests do)."""
    configured = os.environ.get(UPSTREAM_ENV)
    directory = Path(configured) if configured else REPO_ROOT / "third_party" / "crds"
    if not directory.is_dir():
        raise CrdSourceError(
            f"upstream CRD directory {directory} does not exist: put the pinned Kueue, KEDA, "
            f"Karpenter and Prometheus Operator CRDs there, or set ${UPSTREAM_ENV}"
        )
    return directory


@dataclass(frozen=True)
class CrdSet:
    documents: list[Document]
    counts: dict[str, int]
    """CRDs per source, for the summary line."""


def crd_sources() -> dict[str, Path]:
    """Label -> directory of every CRD the harness loads; CrdSourceError when one is missing."""
    upstream = upstream_crds_dir()
    sources = {
        **{name: upstream / name for name in UPSTREAM_PROJECTS},
        "quartermaster": OUR_CRDS,
        "stand-ins": STANDINS_DIR,
    }
    for path in sources.values():
        if not path.is_dir():
            raise CrdSourceError(f"CRD directory {path} does not exist")
    return sources


def read_crd_set(sources: Mapping[str, Path]) -> CrdSet:
    """Parse the CRDs (a few seconds: the upstream ones are large)."""
    documents: list[Document] = []
    counts: dict[str, int] = {}
    for label, path in sources.items():
        found = read_crds([path])
        if not found:
            raise CrdSourceError(f"no CustomResourceDefinitions in {path}")
        documents.extend(found)
        counts[label] = len(found)
    return CrdSet(documents, counts)


def load_crds(client: KubeClient, documents: list[Document], *, timeout: float = 120) -> None:
    """Apply the CRDs, wait until established, then list each kind the controller uses once.

    A kube-apiserver (it serves core v1) serves Lease, Event and PriorityClass itself, so the
    stand-ins for them are left out there; the CRD-only server needs them.

    Right after a CRD is established the server answers 429 "storage is (re)initializing" for
    a moment; the client retries after the Retry-After second. Listing the kinds in parallel
    pays that wait once rather than once per kind.
    """
    if serves_core_v1(client):
        standins = {d["metadata"]["name"] for d in read_crds([STANDINS_DIR])}
        documents = [d for d in documents if d["metadata"]["name"] not in standins]
    install_crds(client, documents, timeout=timeout)
    served = client.served_group_versions()
    warmed = [kind for kind in WARMED_KINDS if kind.group_version in served]
    with ThreadPoolExecutor(max_workers=len(warmed), thread_name_prefix="warm") as pool:
        for _ in pool.map(client.list, warmed):
            pass
