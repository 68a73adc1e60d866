"""Karpenter's spot capacity errors and spot launches, read from the objects a cluster shows.

When the cloud cannot serve a launch, Karpenter publishes a Warning Event with reason
`InsufficientCapacityError` on the NodeClaim and deletes the NodeClaim; nothing else keeps the
failure. Its recorder writes core `v1` Events (`involvedObject`, `message`, `firstTimestamp`,
`lastTimestamp`, `count`; a repeat for the same NodeClaim updates the one Event), and the API
server shows the same Events through `events.k8s.io/v1` (`regarding`, `note`, `eventTime`,
`series`, and the core fields as `deprecatedFirstTimestamp`, `deprecatedLastTimestamp`,
`deprecatedCount`). Both shapes are read here, and an Event seen in both counts once (by uid).

The Event names the NodeClaim but not its pool, so the pool comes from, in this order:

1. the NodeClaim's own `karpenter.sh/nodepool` label (`<pool>-spot` for ours), from the
   NodeClaims the controller watches, those deleted lately included (the cache keeps the last
   few hundred deleted). This is the one relied on: a label is Karpenter's API, and the
   watch sees a NodeClaim when it is created, before its launch is tried and fails.
2. else the NodeClaim's name: Karpenter names a NodeClaim after its NodePool
   (`generateName: <nodepool>-`), so `<pool>-spot-x7k2p`, matched against the policy's pools.
   A naming convention, not an API, so only the fallback: for an Event whose NodeClaim the
   watch never saw, above all after a restart, when the deleted NodeClaims are gone but the
   Events (kept an hour by default) are still there.

The zones a failed launch speaks for are those its NodeClaim could launch in: its
`topology.kubernetes.io/zone` requirement (`In`), which Karpenter copies from the NodePool
(ours lists the pool's zones) and narrows to what the pods allow; a NodeClaim known only by
name, or naming none, speaks for all the pool's zones. A spot launch ends the shortage in the
zone its NodeClaim's zone label names (else its requirement, when that names one zone).

Only spot NodeClaims count: an on-demand launch failing says nothing of spot's market. An
Event stands for its last occurrence (a repeat moves it) and, when that is within
`QUIET_SECONDS` of it, its first: a restart that reads an Event repeated over five minutes
learns that the shortage began five minutes ago.
Pure: objects in, plain values out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controller import names
from controller.risk.pools import node_claim_view
from controller.risk.shortage import QUIET_SECONDS, CapacityError, SpotLaunch
from controller.timestamps import epoch

KARPENTER_GROUP = "karpenter.sh"


@dataclass(frozen=True)
class ClaimSeen:
    """What a NodeClaim the watch saw says of where it was to launch."""

    pool: str
    capacity_type: str
    zones: frozenset[str] = frozenset()
    """The zones it could launch in; empty: any of the pool's."""


def claim_pools(claims: Iterable[Mapping[str, Any]]) -> dict[str, ClaimSeen]:
    """NodeClaim name -> its pool and capacity type (from its NodePool label) and the zones it
    could launch in (its zone requirement); only ours."""
    out: dict[str, ClaimSeen] = {}
    for claim in claims:
        view = node_claim_view(claim)
        name = (claim.get("metadata") or {}).get("name")
        if view is not None and name:
            out[str(name)] = ClaimSeen(view.pool, view.capacity_type, view.zones)
    return out


def pool_from_name(name: str, pools: Collection[str]) -> tuple[str, str] | None:
    """(pool, capacity type) of a NodeClaim named `<pool>-<capacity type>-<suffix>` for one
    of `pools`; None when the name fits none (the longest pool name wins a tie)."""
    for pool in sorted(pools, key=len, reverse=True):
        for capacity_type in names.CAPACITY_TYPES:
            prefix = f"{names.nodepool_name(pool, capacity_type)}-"
            rest = name[len(prefix) :]
            if name.startswith(prefix) and rest and "-" not in rest:
                return pool, capacity_type
    return None


def event_times(event: Mapping[str, Any]) -> tuple[float, float] | None:
    """(first, last) occurrence of an Event in either API; None when it carries no time."""
    series = event.get("series") or {}
    first = (
        epoch(event.get("firstTimestamp"))
        or epoch(event.get("deprecatedFirstTimestamp"))
        or epoch(event.get("eventTime"))
        or epoch((event.get("metadata") or {}).get("creationTimestamp"))
    )
    last = (
        epoch(series.get("lastObservedTime"))
        or epoch(event.get("lastTimestamp"))
        or epoch(event.get("deprecatedLastTimestamp"))
        or first
    )
    if first is None or last is None:
        return None
    return min(first, last), last


def regarding(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """The object an Event is about, in either API."""
    return event.get("regarding") or event.get("involvedObject") or {}


def is_capacity_error(event: Mapping[str, Any]) -> bool:
    """Karpenter's InsufficientCapacityError about a NodeClaim (karpenter.sh, any version)."""
    about = regarding(event)
    group = str(about.get("apiVersion") or "").partition("/")[0]
    return (
        event.get("reason") == names.CAPACITY_ERROR_REASON
        and about.get("kind") == "NodeClaim"
        and group == KARPENTER_GROUP
    )


def capacity_errors(
    events: Iterable[Mapping[str, Any]],
    claims: Mapping[str, ClaimSeen],
    pools: Collection[str],
) -> list[CapacityError]:
    """The spot capacity errors of `pools` the Events report, each Event once (an Event seen
    through both APIs has one uid): its first and its last occurrence, with the zones its
    NodeClaim could launch in. `claims` is `claim_pools` of the NodeClaims seen, deleted
    included."""
    out: list[CapacityError] = []
    done: set[str] = set()
    for event in events:
        if not is_capacity_error(event):
            continue
        meta = event.get("metadata") or {}
        uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        if uid in done:
            continue  # the same Event through the other API
        done.add(uid)
        claim = str(regarding(event).get("name") or "")
        by_name = pool_from_name(claim, pools)
        where = claims.get(claim) or (ClaimSeen(*by_name) if by_name is not None else None)
        times = event_times(event)
        if where is None or times is None:
            continue
        pool = where.pool
        if where.capacity_type != names.SPOT or pool not in pools:
            continue
        first, last = times
        # The first occurrence too when it is of the same episode as the last: with more than
        # `QUIET_SECONDS` between them, the reports in between are not known to have come.
        for at in sorted({first, last} if last - first <= QUIET_SECONDS else {last}):
            out.append(CapacityError(pool=pool, at=at, key=f"{uid}@{at}", zones=where.zones))
    return out


def spot_launches(claims: Iterable[Mapping[str, Any]]) -> list[SpotLaunch]:
    """The spot NodeClaims of our pools that became Ready, deleted ones included, with the
    zone each launched in when it shows it."""
    out: list[SpotLaunch] = []
    for claim in claims:
        view = node_claim_view(claim)
        if view is None or view.capacity_type != names.SPOT or view.ready_at is None:
            continue
        meta = claim.get("metadata") or {}
        key = str(meta.get("uid") or meta.get("name"))
        out.append(
            SpotLaunch(
                view.pool, requested=view.created, ready=view.ready_at, key=key, zone=view.zone
            )
        )
    return out


__all__ = [
    "ClaimSeen",
    "capacity_errors",
    "claim_pools",
    "event_times",
    "is_capacity_error",
    "pool_from_name",
    "spot_launches",
]
