"""Installing CustomResourceDefinitions and waiting until the API server serves them."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from controller import names
from controller.kube.client import KubeClient, KubeError
from controller.kube.kinds import CRD


def read_crds(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """CRD documents from files or directories of YAML."""
    docs: list[dict[str, Any]] = []
    for path in paths:
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        for file in files:
            docs.extend(
                d
                for d in yaml.safe_load_all(file.read_text())
                if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"
            )
    return docs


def install_crds(client: KubeClient, crds: list[dict[str, Any]], *, timeout: float = 60) -> None:
    """Apply every CRD, then wait until each is Established (served and ready for objects)."""
    for crd in crds:
        client.apply(CRD, crd, field_manager=names.FIELD_MANAGER)
    deadline = time.monotonic() + timeout
    pending = {crd["metadata"]["name"] for crd in crds}
    while pending:
        for name in sorted(pending):
            live = client.get(CRD, name)
            conditions = (live or {}).get("status", {}).get("conditions") or []
            if any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            ):
                pending.discard(name)
        if pending and time.monotonic() > deadline:
            raise KubeError(f"CRDs not established after {timeout} s: {sorted(pending)}")
        if pending:
            time.sleep(0.1)
