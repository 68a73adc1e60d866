"""What the pools' nodes have shown: provisioning latency and spot interruption rate.

Karpenter NodeClaims carry their pool (through the NodePool label), when they were created and
when they became Ready. A spot NodeClaim being deleted while not empty is counted as an
interruption. Observations are blended with the policy's priors, as if the prior had been seen
for `PRIOR_NODE_HOURS`, so a quiet cluster keeps the prior and a few events move it only a
little.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from statistics import median
from typing import Any

from controller import names
from controller.api.types import GpuPool
from controller.timestamps import epoch

PRIOR_NODE_HOURS = 200.0
MIN_LATENCY_OBSERVATIONS = 3


@dataclass(frozen=True)
class NodeClaimView:
    pool: str
    capacity_type: str
    created: float
    ready_at: float | None
    deleting: bool
    zones: frozenset[str] = frozenset()
    """The zones it may launch in (its `topology.kubernetes.io/zone` requirement); empty: it
    names none, so any its NodePool allows."""
    zone: str | None = None
    """The zone it launched in: its zone label (Karpenter sets it once the cloud has placed the
    node), else its requirement's when that names one; None: not known."""


@dataclass(frozen=True)
class PoolStats:
    pool: str
    provisioning_latency_seconds: float
    interruptions_per_node_hour: float
    spot_availability: float
    observed_nodes: int


def node_claim_view(obj: Mapping[str, Any]) -> NodeClaimView | None:
    """None for NodeClaims not from one of our NodePools (named `<pool>-<capacity type>`)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    nodepool = str(labels.get("karpenter.sh/nodepool") or "")
    for capacity_type in names.CAPACITY_TYPES:
        suffix = f"-{capacity_type}"
        if nodepool.endswith(suffix):
            pool = nodepool[: -len(suffix)]
            break
    else:
        return None
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = next(
        (c for c in conditions if c.get("type") == "Ready" and c.get("status") == "True"), None
    )
    zones = requirement_values(obj, names.ZONE_LABEL)
    label = labels.get(names.ZONE_LABEL)
    return NodeClaimView(
        pool=pool,
        capacity_type=capacity_type,
        created=epoch(meta.get("creationTimestamp")) or 0.0,
        ready_at=epoch(ready.get("lastTransitionTime")) if ready else None,
        deleting=bool(meta.get("deletionTimestamp")),
        zones=zones,
        zone=str(label) if label else next(iter(zones)) if len(zones) == 1 else None,
    )


def requirement_values(obj: Mapping[str, Any], key: str) -> frozenset[str]:
    """The values a NodeClaim's `spec.requirements` allow for `key` (those of every `In` entry
    for it); empty when none restricts it so (no entry, or another operator: then it is not
    read as a list of values)."""
    allowed: frozenset[str] | None = None
    for requirement in (obj.get("spec") or {}).get("requirements") or []:
        if not isinstance(requirement, Mapping) or requirement.get("key") != key:
            continue
        if requirement.get("operator") != "In":
            continue
        values = frozenset(str(v) for v in requirement.get("values") or [])
        allowed = values if allowed is None else allowed & values
    return allowed or frozenset()


def pool_stats(
    pools: Iterable[GpuPool], claims: Iterable[NodeClaimView], *, now: float
) -> dict[str, PoolStats]:
    by_pool: dict[str, list[NodeClaimView]] = {}
    for claim in claims:
        by_pool.setdefault(claim.pool, []).append(claim)
    out = {}
    for pool in pools:
        mine = by_pool.get(pool.name, [])
        latencies = [c.ready_at - c.created for c in mine if c.ready_at and c.ready_at >= c.created]
        latency = (
            float(median(latencies))
            if len(latencies) >= MIN_LATENCY_OBSERVATIONS
            else float(pool.provisioning_latency_seconds)
        )
        spot = [c for c in mine if c.capacity_type == names.SPOT]
        node_hours = sum(max(now - c.created, 0.0) for c in spot) / 3600.0
        interruptions = sum(1 for c in spot if c.deleting)
        rate = (pool.spot_interruptions_per_hour * PRIOR_NODE_HOURS + interruptions) / (
            PRIOR_NODE_HOURS + node_hours
        )
        out[pool.name] = PoolStats(
            pool=pool.name,
            provisioning_latency_seconds=latency,
            interruptions_per_node_hour=rate,
            spot_availability=pool.spot_availability,
            observed_nodes=len(mine),
        )
    return out
