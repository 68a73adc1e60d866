"""Valid policy documents with overrides, so each test states only what it changes."""

from __future__ import annotations

import copy
from typing import Any

from controller.api.types import API_VERSION


def policy_doc(**spec_overrides: Any) -> dict[str, Any]:
    """A small valid CapacityPolicy: two tiers, one pool `a100`."""
    spec: dict[str, Any] = {
        "tiers": [
            {"name": "production", "priority": 1000},
            {"name": "research", "priority": 100, "preemption": "Never"},
        ],
        "pools": [pool_doc()],
    }
    spec.update(copy.deepcopy(spec_overrides))
    return {
        "apiVersion": API_VERSION,
        "kind": "CapacityPolicy",
        "metadata": {"name": "fleet"},
        "spec": spec,
    }


def pool_doc(name: str = "a100", **overrides: Any) -> dict[str, Any]:
    pool: dict[str, Any] = {
        "name": name,
        "zones": ["us-east-1a"],
        "gpusPerNode": 8,
        "maxGpus": 128,
        "onDemand": {"floorGpus": 8, "ceilingGpus": 64},
        "nodeClass": {"name": "gpu"},
        "prices": {"spotPerGpuHour": 1.0, "onDemandPerGpuHour": 4.0},
    }
    pool.update(copy.deepcopy(overrides))
    return pool


def project_doc(name: str = "vision", **spec_overrides: Any) -> dict[str, Any]:
    """A small valid TrainingProject in tier `production` with 16 GPUs of `a100`."""
    spec: dict[str, Any] = {
        "tier": "production",
        "namespaces": [name],
        "quotas": [{"pool": "a100", "nominalGpus": 16}],
    }
    spec.update(copy.deepcopy(spec_overrides))
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainingProject",
        "metadata": {"name": name},
        "spec": spec,
    }


def set_path(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `doc` with the dotted/indexed `path` (spec.pools[0].maxGpus) set or removed.

    A value of `DELETE` removes the key.
    """
    out = copy.deepcopy(doc)
    parts: list[str | int] = []
    for segment in path.split("."):
        name, _, rest = segment.partition("[")
        parts.append(name)
        while rest:
            index, _, rest = rest.partition("]")
            parts.append(int(index))
            rest = rest.removeprefix("[")
    target: Any = out
    for step in parts[:-1]:
        target = target[step]
    if value is DELETE:
        del target[parts[-1]]
    else:
        target[parts[-1]] = value
    return out


DELETE: Any = object()
