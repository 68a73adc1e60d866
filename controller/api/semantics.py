"""Checks across objects that no CRD schema can express.

The API server validates each object alone; only here can a project's tier be looked up in the
policy, two projects be found claiming one namespace, or the quotas on a pool be added up
against its ceiling. The controller runs the same checks and reports `Valid=False` rather
than applying a policy that fails them.
"""

from __future__ import annotations

import zoneinfo
from collections import defaultdict
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

from controller.api.cron import CronError, next_after, parse_cron
from controller.api.policy_set import PolicyError, PolicySet, PolicyWarning
from controller.api.types import CapacityPolicy, Deadline, TrainingProject
from controller.timestamps import format_duration, format_time

_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def check_policy_set(policy_set: PolicySet, *, order: Sequence[str] = ()) -> list[PolicyError]:
    """Every cross-object error. `order` lists project names in the order they were added
    (load order of the files, or creation order on the cluster); of two projects claiming one
    namespace, the later is blamed. Projects it does not list come after, by name."""
    policy = policy_set.policy
    origin = policy_set.origins.get(("CapacityPolicy", policy.name), "policy")
    errors = list(_check_policy(policy, origin))
    for project in policy_set.projects:
        project_origin = policy_set.origins.get(("TrainingProject", project.name), "policy")
        errors.extend(_check_project(policy, project, project_origin))
    errors.extend(_check_namespaces(policy_set, order))
    errors.extend(_check_pool_totals(policy_set, origin))
    return errors


def past_deadlines(project: TrainingProject, *, now: datetime) -> list[tuple[int, Deadline, float]]:
    """The project's one-off deadlines already behind `now`: (index, deadline, seconds ago).

    Valid, but almost always a slip (a year typed wrong, a date left behind after a launch):
    capacity bought now cannot help a deadline that has passed, so it drives no decision, and
    its slack only grows more negative.
    """
    return [
        (i, deadline, (now - deadline.at).total_seconds())
        for i, deadline in enumerate(project.spec.deadlines)
        if deadline.at is not None and deadline.at <= now
    ]


def policy_warnings(policy_set: PolicySet, *, now: datetime) -> list[PolicyWarning]:
    """What is valid but probably not meant, as of `now` (passed in: no clock is read here)."""
    warnings: list[PolicyWarning] = []
    for project in policy_set.projects:
        origin = policy_set.origins.get(("TrainingProject", project.name), "policy")
        warnings.extend(
            PolicyWarning(
                origin,
                "TrainingProject",
                project.name,
                f"spec.deadlines[{i}].at",
                f"deadline {deadline.name!r} ({format_time(deadline.at)}) passed "
                f"{format_duration(ago)} ago; move or remove it",
            )
            for i, deadline, ago in past_deadlines(project, now=now)
            if deadline.at is not None
        )
    return sorted(warnings)


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


def _check_namespaces(policy_set: PolicySet, order: Sequence[str]) -> Iterator[PolicyError]:
    rank = {name: i for i, name in enumerate(order)}
    projects = sorted(policy_set.projects, key=lambda p: (rank.get(p.name, len(rank)), p.name))
    owner: dict[str, str] = {}
    for project in projects:
        origin = policy_set.origins.get(("TrainingProject", project.name), "policy")
        for i, namespace in enumerate(project.spec.namespaces):
            first = owner.setdefault(namespace, project.name)
            if first != project.name:
                first_origin = policy_set.origins.get(("TrainingProject", first))
                yield PolicyError(
                    origin,
                    "TrainingProject",
                    project.name,
                    f"spec.namespaces[{i}]",
                    f"namespace {namespace!r} already belongs to project {first!r}"
                    + (f" (in {first_origin})" if first_origin else ""),
                )


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
