"""Whether a given policy is the right size for the trace it is replayed on.

A replay of a policy far too small for its trace still runs, and its hit rates look like a
verdict on the policy's mix when they only say that most jobs queued for days. A policy far
too big says as little: its ceiling never binds, so no job waits for quota. The check compares
the policy's ceiling with the trace's demand (`scenario.measure_demand`) and says so in words,
with the numbers, before anyone reads the tables.

The ceiling is the pool's quota, not its maxGpus. The renderer sets each pool's NodePool limits
(spot plus on-demand) to the projects' nominal quotas plus the tiers' reservations on it, and
Kueue admits nothing beyond that quota, so no more GPUs than the quota ever run at once; the
validator keeps the quota at or below maxGpus, which is only an upper bound (the example
policy: maxGpus 384, quota 196). The minimum of the two is taken all the same, so a policy that
skipped validation still gets the smaller, true figure.

Thresholds, and why:

- **Too small**: the ceiling is below half the p95 demand, or below the mean demand. The
  replay's own sized policy holds max(p95, mean / 0.7): the p95 is where a cluster starts to be
  big enough. At half of it the trace's everyday busy hours queue; below the mean, the queue
  grows for the whole submit period and the replay is mostly its drain.
- **Too big**: the ceiling is more than twice the peak demand. Even the busiest instant, with
  every job started at its submit, uses under half of it: jobs then wait for provisioning,
  spot and their own project's quota, never for the cluster's.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.api.policy_set import PolicySet
from controller.capacity import pool_demands
from controller.sim.scenario import Demand

TOO_SMALL_OF_P95 = 0.5
"""Warn when the ceiling is below this share of the p95 demand (or below the mean demand)."""
TOO_BIG_OF_PEAK = 2.0
"""Warn when the ceiling is above this multiple of the peak demand."""


@dataclass(frozen=True)
class PoolCapacity:
    """One pool's bounds: what the policy lets run in it at once."""

    pool: str
    max_gpus: int
    quota_gpus: int
    """Projects' nominal quotas plus tier reservations on the pool: its NodePool limits' sum."""

    @property
    def ceiling_gpus(self) -> int:
        return min(self.max_gpus, self.quota_gpus)


@dataclass(frozen=True)
class PolicyCapacity:
    name: str
    pools: tuple[PoolCapacity, ...]

    @property
    def ceiling_gpus(self) -> int:
        """GPUs that can run at once over every pool."""
        return sum(p.ceiling_gpus for p in self.pools)

    @property
    def max_gpus(self) -> int:
        return sum(p.max_gpus for p in self.pools)


def policy_capacity(policy_set: PolicySet) -> PolicyCapacity:
    """The pools' maxGpus and quotas, in the policy's pool order."""
    demands = pool_demands(policy_set)
    return PolicyCapacity(
        name=policy_set.policy.name,
        pools=tuple(
            PoolCapacity(pool.name, pool.max_gpus, demands[pool.name].total_gpus)
            for pool in policy_set.policy.spec.pools
        ),
    )


def size_warnings(capacity: PolicyCapacity, demand: Demand) -> list[str]:
    """Sentences saying the policy is far too small or far too big for the demand; [] if not.

    The trace's jobs carry no pool, so the comparison is over every pool together; the
    sentence names each pool's ceiling so a reader sees where the GPUs are.
    """
    ceiling = capacity.ceiling_gpus
    facts = (
        f"{_holds(capacity)}, and the trace's demand (every job started at its submit) has a "
        f"p95 of {_gpus(demand.p95)} GPUs and a mean of {_gpus(demand.mean)} (peak "
        f"{_gpus(demand.peak)})"
    )
    remedy = (
        "Size the quotas to the demand, or leave out --policy to replay a policy sized to the "
        "trace."
    )
    if ceiling < demand.mean:
        times = f"{demand.mean / ceiling:.1f} x the ceiling" if ceiling > 0 else "above it"
        return [
            f"policy {capacity.name} is far too small for this trace: {facts}. Even the mean "
            f"is {times}: the queue grows through the whole submit period, most jobs will "
            f"queue for days, and hit rates measure the shortfall, not the mix. {remedy}"
        ]
    if ceiling < TOO_SMALL_OF_P95 * demand.p95:
        return [
            f"policy {capacity.name} is far too small for this trace: {facts}. The ceiling is "
            f"under {TOO_SMALL_OF_P95:g} x the p95: the trace's busy hours queue for long, and "
            f"hit rates measure the shortfall more than the mix. {remedy}"
        ]
    if ceiling > TOO_BIG_OF_PEAK * demand.peak:
        return [
            f"policy {capacity.name} is far bigger than this trace needs: {facts}. The ceiling "
            f"is over {TOO_BIG_OF_PEAK:g} x the peak, so it never binds: jobs wait for "
            "provisioning, spot and their own project's quota, not for the cluster, and the "
            "replay says little about how the policy copes when capacity runs short."
        ]
    return []


def _holds(capacity: PolicyCapacity) -> str:
    """How many GPUs the policy runs at once, where, and why that and not maxGpus."""
    details = ["its quotas plus tier reservations"]
    if len(capacity.pools) > 1:
        details[0] += ": " + ", ".join(f"{p.pool} {_gpus(p.ceiling_gpus)}" for p in capacity.pools)
    if capacity.max_gpus > capacity.ceiling_gpus:
        details.append(
            f"maxGpus adds up to {_gpus(capacity.max_gpus)}, but the NodePool limits follow "
            "the quotas"
        )
    return f"it can run at most {_gpus(capacity.ceiling_gpus)} GPUs at once ({'; '.join(details)})"


def _gpus(value: float) -> str:
    return f"{value:,.0f}"
