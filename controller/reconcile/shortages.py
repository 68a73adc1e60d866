"""Spot shortages from what the cluster shows: the shell around `controller.risk.shortage`.

Karpenter keeps no object for a failed launch: it publishes an `InsufficientCapacityError`
Event on the NodeClaim and deletes it. The cache watches those Events (in both Event APIs,
selected by reason and kind on the server), the NodeClaims and the latest deleted NodeClaims;
each pass folds what is new of them into the `Shortages` the reconciler keeps in memory, per
pool and zone (`controller.risk.capacity_errors` reads the objects, `controller.risk.shortage.fold`
folds them, the zones of each pool from the policy), and hands each pool's expected extra spot
wait (none unless every zone of the pool is short) to the plan (`Observation.spot_shortages`),
the metrics and `explain`.

Nothing is persisted. After a restart (or a new leader) the first fold rebuilds the state from
the Events still in the API: core Events live an hour by default (`--event-ttl`), more than a
shortage is remembered for once its errors stop (`QUIET_SECONDS`), so a shortage in progress is
seen again at once. What is lost is the learned length of episodes older than that, which
falls back to the prior: a restart costs some learning, never a shortage.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from controller.kube.cache import Observed
from controller.risk.capacity_errors import capacity_errors, claim_pools, spot_launches
from controller.risk.shortage import Shortages, fold


def shortages_seen(
    observed: Observed, pools: Mapping[str, Collection[str]], previous: Shortages, *, now: float
) -> Shortages:
    """`previous` with what `observed` shows of `pools` (name -> its zones) folded in
    (`Shortages()` to rebuild from the cluster alone, as `plan`, `explain` and a restarted
    controller do).

    The NodeClaims deleted lately come first, so a live NodeClaim of the same name (none:
    Karpenter's names are random) would win.
    """
    claims = (*observed.deleted_node_claims, *observed.node_claims)
    errors = capacity_errors(observed.capacity_errors, claim_pools(claims), pools.keys())
    return fold(previous, errors, spot_launches(claims), now=now, zones=pools)


__all__ = ["shortages_seen"]
