"""Checks across objects that no CRD schema can express.

The API server validates each object alone; only here can a project's tier be looked up in the
policy, two projects be found claiming one namespace, or the quotas on a pool be added up
against its ceiling. The controller runs the same checks and reports `Valid=False` rather
than applying a policy that fails them.
"""

from __future__ import annotations

import zoneinfo
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime

from controller.api.cron import CronError, next_after, parse_cron
from controller.api.policy_set import PolicyError, PolicySet
from controller.api.types import CapacityPolicy, TrainingProject

_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def check_policy_set(policy_set: PolicySet) -> list[PolicyError]:
    policy = policy_set.policy
    origin = policy_set.origins.get(("CapacityPolicy", policy.name), "policy")
    errors = list(_check_policy(policy, origin))
    for project in policy_set.projects:
        project_origin = policy_set.origins.get(("TrainingProject", project.name), "policy")
        errors.extend(_check_project(policy, project, project_origin))
    errors.extend(_check_namespaces(policy_set))
    errors.extend(_check_pool_totals(policy_set, origin))
    return errors


def _pool_names(policy: CapacityPolicy) -> str:
    return ", ".join(sorted(p.name for p in policy.spec.pools))


def _check_policy(policy: CapacityPolicy, origin: str) -> Iterator[PolicyError]:
    def error(path: str, message: str) -> PolicyError:
        return PolicyError(origin, "CapacityPolicy", policy.name, path, message)

    priorities: dict[int, str] = {}
    for i, tier in enumerate(policy.spec.tiers):
        if tier.priority in priorities:
            yield error(
                f"spec.tiers[{i}].priority",
                f"priority {tier.priority} is also used by tier {priorities[tier.priority]!r}; "
                "tiers need distinct priorities",
            )
        priorities.setdefault(tier.priority, tier.name)
        for j, reservation in enumerate(tier.reserved):
            if policy.pool(reservation.pool) is None:
                yield error(
                    f"spec.tiers[{i}].reserved[{j}].pool",
                    f"unknown pool {reservation.pool!r}; defined pools: {_pool_names(policy)}",
                )
    for i, manual in enumerate(policy.spec.override.on_demand_gpus):
        pool = policy.pool(manual.pool)
        path = f"spec.override.onDemandGpus[{i}]"
        if pool is None:
            yield error(
                f"{path}.pool",
                f"unknown pool {manual.pool!r}; defined pools: {_pool_names(policy)}",
            )
        elif not pool.on_demand.floor_gpus <= manual.gpus <= pool.on_demand.ceiling_gpus:
            yield error(
                f"{path}.gpus",
                f"{manual.gpus} is outside the on-demand bounds [{pool.on_demand.floor_gpus}, "
                f"{pool.on_demand.ceiling_gpus}] of pool {pool.name!r}",
            )


def _check_project(
    policy: CapacityPolicy, project: TrainingProject, origin: str
) -> Iterator[PolicyError]:
    def error(path: str, message: str) -> PolicyError:
        return PolicyError(origin, "TrainingProject", project.name, path, message)

    spec = project.spec
    if policy.tier(spec.tier) is None:
        tiers = ", ".join(t.name for t in policy.spec.tiers)
        yield error("spec.tier", f"unknown tier {spec.tier!r}; defined tiers: {tiers}")
    for i, quota in enumerate(spec.quotas):
        pool = policy.pool(quota.pool)
        if pool is None:
            yield error(
                f"spec.quotas[{i}].pool",
                f"unknown pool {quota.pool!r}; defined pools: {_pool_names(policy)}",
            )
        elif quota.nominal_gpus > pool.max_gpus:
            yield error(
                f"spec.quotas[{i}].nominalGpus",
                f"{quota.nominal_gpus} exceeds maxGpus ({pool.max_gpus}) of pool {pool.name!r}",
            )
    for i, deadline in enumerate(spec.deadlines):
        if deadline.schedule is not None:
            try:
                # A schedule such as "0 0 31 2 *" parses but never fires.
                next_after(parse_cron(deadline.schedule), _EPOCH, zoneinfo.ZoneInfo("UTC"))
            except CronError as exc:
                yield error(f"spec.deadlines[{i}].schedule", str(exc))
        if deadline.time_zone is not None:
            try:
                zoneinfo.ZoneInfo(deadline.time_zone)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):  # "Europe" is a folder
                yield error(
                    f"spec.deadlines[{i}].timeZone", f"unknown time zone {deadline.time_zone!r}"
                )


def _check_namespaces(policy_set: PolicySet) -> Iterator[PolicyError]:
    owner: dict[str, str] = {}
    for project in policy_set.projects:
        origin = policy_set.origins.get(("TrainingProject", project.name), "policy")
        for i, namespace in enumerate(project.spec.namespaces):
            if namespace in owner:
                yield PolicyError(
                    origin,
                    "TrainingProject",
                    project.name,
                    f"spec.namespaces[{i}]",
                    f"namespace {namespace!r} already belongs to project {owner[namespace]!r}",
                )
            else:
                owner[namespace] = project.name


def _check_pool_totals(policy_set: PolicySet, origin: str) -> Iterator[PolicyError]:
    """Quotas must fit the pool, and what cannot run on spot must fit the on-demand ceiling."""
    policy = policy_set.policy
    nominal: dict[str, int] = defaultdict(int)
    on_demand_only: dict[str, int] = defaultdict(int)
    reserved: dict[str, int] = defaultdict(int)
    for tier in policy.spec.tiers:
        for reservation in tier.reserved:
            reserved[reservation.pool] += reservation.gpus
    for project in policy_set.projects:
        project_tier = policy.tier(project.spec.tier)
        spot_ok = project.spec.allow_spot and (project_tier is None or project_tier.allow_spot)
        for quota in project.spec.quotas:
            nominal[quota.pool] += quota.nominal_gpus
            if not spot_ok:
                on_demand_only[quota.pool] += quota.nominal_gpus
    for i, pool in enumerate(policy.spec.pools):
        total = nominal[pool.name] + reserved[pool.name]
        if total > pool.max_gpus:
            yield PolicyError(
                origin,
                "CapacityPolicy",
                policy.name,
                f"spec.pools[{i}].maxGpus",
                f"projects' nominal quotas ({nominal[pool.name]}) plus tier reservations "
                f"({reserved[pool.name]}) on pool {pool.name!r} exceed maxGpus ({pool.max_gpus})",
            )
        need = on_demand_only[pool.name] + reserved[pool.name]
        if need > pool.on_demand.ceiling_gpus:
            yield PolicyError(
                origin,
                "CapacityPolicy",
                policy.name,
                f"spec.pools[{i}].onDemand.ceilingGpus",
                f"quotas that cannot run on spot ({on_demand_only[pool.name]}) plus tier "
                f"reservations ({reserved[pool.name]}) on pool {pool.name!r} need more on-demand "
                f"GPUs than ceilingGpus ({pool.on_demand.ceiling_gpus})",
            )
