"""The status of our objects, as `kubectl get` and `kubectl describe` show it.

Pure: the reconciler passes what it observed and did, and the clock. A condition keeps its
lastTransitionTime while its status does not change, so a steady state computes the very same
status and the reconciler writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from controller.api.policy_set import PolicyError
from controller.api.types import PoolMix
from controller.render.capacity import FlavorQuota

MAX_MESSAGE = 1024


def _time(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    type_: str,
    status: bool,
    reason: str,
    message: str,
    *,
    previous: Sequence[Mapping[str, Any]],
    generation: int | None,
    now: datetime,
) -> dict[str, Any]:
    value = "True" if status else "False"
    before = next((c for c in previous if c.get("type") == type_), None)
    transition = (
        before["lastTransitionTime"]
        if before and before.get("status") == value and before.get("lastTransitionTime")
        else _time(now)
    )
    out: dict[str, Any] = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "lastTransitionTime": transition,
    }
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def _errors_message(errors: Iterable[PolicyError]) -> str:
    return "; ".join(f"{e.path}: {e.message}" for e in errors)


@dataclass(frozen=True)
class PolicyOutcome:
    """What one reconcile found and did for the policy."""

    errors: tuple[PolicyError, ...]
    projects: int
    mix: tuple[PoolMix, ...]
    unserved: tuple[str, ...]
    kept: tuple[str, ...]
    apply_error: str | None = None


def policy_status(
    live: Mapping[str, Any], outcome: PolicyOutcome, *, now: datetime
) -> dict[str, Any]:
    meta = live.get("metadata") or {}
    generation = meta.get("generation")
    previous = (live.get("status") or {}).get("conditions") or []

    def cond(type_: str, status: bool, reason: str, message: str) -> dict[str, Any]:
        return condition(
            type_, status, reason, message, previous=previous, generation=generation, now=now
        )

    valid = not outcome.errors
    conditions = [
        cond(
            "Valid",
            valid,
            "Valid" if valid else "Invalid",
            "" if valid else _errors_message(outcome.errors),
        ),
    ]
    if not valid:
        conditions.append(
            cond(
                "Ready", False, "Invalid", "nothing is applied or pruned until the policy is fixed"
            )
        )
    elif outcome.apply_error:
        conditions.append(cond("Ready", False, "ApplyFailed", outcome.apply_error))
    else:
        conditions.append(cond("Ready", True, "Reconciled", ""))
    conditions.append(
        cond(
            "KindsServed",
            not outcome.unserved,
            "NotServed" if outcome.unserved else "AllServed",
            ("not served by this cluster, not applied: " + ", ".join(outcome.unserved))
            if outcome.unserved
            else "",
        )
    )
    conditions.append(
        cond(
            "PruneBlocked",
            bool(outcome.kept),
            "WorkloadsPresent" if outcome.kept else "NothingBlocked",
            ("kept because workloads still use them: " + ", ".join(outcome.kept))
            if outcome.kept
            else "",
        )
    )
    status: dict[str, Any] = {"conditions": conditions, "projects": outcome.projects}
    if generation is not None:
        status["observedGeneration"] = generation
    if outcome.mix:
        status["mix"] = [
            {"pool": m.pool, "onDemandGpus": m.on_demand_gpus, "spotGpus": m.spot_gpus}
            for m in outcome.mix
        ]
    return status


@dataclass(frozen=True)
class ProjectOutcome:
    errors: tuple[PolicyError, ...]
    policy_valid: bool
    quotas: tuple[FlavorQuota, ...]
    apply_error: str | None = None


def project_status(
    live: Mapping[str, Any], outcome: ProjectOutcome, *, now: datetime
) -> dict[str, Any]:
    meta = live.get("metadata") or {}
    generation = meta.get("generation")
    previous = (live.get("status") or {}).get("conditions") or []

    def cond(type_: str, status: bool, reason: str, message: str) -> dict[str, Any]:
        return condition(
            type_, status, reason, message, previous=previous, generation=generation, now=now
        )

    valid = not outcome.errors
    conditions = [
        cond(
            "Valid",
            valid,
            "Valid" if valid else "Invalid",
            ""
            if valid
            else _errors_message(outcome.errors) + "; the objects applied before are kept",
        ),
    ]
    if not valid:
        conditions.append(cond("Ready", False, "Invalid", "fix the spec; see the Valid condition"))
    elif not outcome.policy_valid:
        conditions.append(
            cond(
                "Ready",
                False,
                "PolicyInvalid",
                "the CapacityPolicy is invalid or missing; nothing is applied",
            )
        )
    elif outcome.apply_error:
        conditions.append(cond("Ready", False, "ApplyFailed", outcome.apply_error))
    else:
        conditions.append(cond("Ready", True, "Applied", "queues and quotas are in place"))
    status: dict[str, Any] = {"conditions": conditions}
    if generation is not None:
        status["observedGeneration"] = generation
    if outcome.quotas:
        status["nominalGpus"] = sum(q.spot_gpus + q.on_demand_gpus for q in outcome.quotas)
        status["mix"] = [
            {"pool": q.pool, "onDemandGpus": q.on_demand_gpus, "spotGpus": q.spot_gpus}
            for q in outcome.quotas
        ]
    return status


def status_changed(live: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether writing `status` would change what the object shows."""
    current = live.get("status") or {}
    return any(current.get(key) != value for key, value in status.items())
