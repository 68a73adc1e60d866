"""The status of our objects, as `kubectl get` and `kubectl describe` show it.

Pure: the reconciler passes what it observed and did, and the clock. A condition keeps its
lastTransitionTime while its status does not change, so a steady state computes the very same
status and the reconciler writes nothing.

Status is built as the typed classes the CRD schema is generated from (`controller.api.types`)
and serialised once, with `to_json`; what a pass carries over from the stored status, and what
`quartermaster explain` shows, is read back with the same parser `validate` uses. Writer, reader
and schema cannot drift apart.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from controller import names
from controller.api.introspect import to_json
from controller.api.parse import FieldError, parse_object
from controller.api.policy_set import PolicyError
from controller.api.types import (
    MAX_LOST_LISTED,
    Assignment,
    CapacityPolicyStatus,
    Condition,
    ConditionStatus,
    Deadline,
    DeadlineState,
    DeadlineStatus,
    LostWorkload,
    PoolMix,
    PoolStatus,
    RuntimeHistory,
    TrainingProjectStatus,
)
from controller.api.types import Decision as StatusDecision
from controller.capacity import FlavorQuota
from controller.decide.mix import Action, Decision, PoolState, Reason
from controller.decide.plan import CapacityPlan
from controller.timestamps import epoch, format_duration, format_time

MAX_MESSAGE = 1024


def _second(now: datetime) -> datetime:
    """The whole-second UTC instant status holds: a time written to the second reads back equal,
    so a carried-over time does not look like a change."""
    return now.astimezone(UTC).replace(microsecond=0)


def condition(
    type_: str,
    status: bool,
    reason: str,
    message: str,
    *,
    previous: Sequence[Condition],
    generation: int | None,
    now: datetime,
) -> Condition:
    """One condition, keeping the stored lastTransitionTime while its status is unchanged: a
    steady state then computes the very same condition and writes nothing."""
    value = ConditionStatus.TRUE if status else ConditionStatus.FALSE
    before = next((c for c in previous if c.type == type_), None)
    return Condition(
        type=type_,
        status=value,
        reason=reason,
        message=message[:MAX_MESSAGE],
        last_transition_time=before.last_transition_time
        if before is not None and before.status == value
        else _second(now),
        observed_generation=generation,
    )


ConditionMaker = Callable[[str, bool, str, str], Condition]


def _stored(live: Mapping[str, Any]) -> Mapping[str, Any]:
    status = live.get("status")
    return status if isinstance(status, Mapping) else {}


def _generation(live: Mapping[str, Any]) -> int | None:
    generation = (live.get("metadata") or {}).get("generation")
    return generation if isinstance(generation, int) else None


def _previous_conditions(live: Mapping[str, Any]) -> tuple[Condition, ...]:
    """The stored conditions, each read on its own: one the schema would refuse (written by hand
    or by another version) is as if absent, so its next transition time is now rather than a
    misread one."""
    entries = _stored(live).get("conditions")
    out = []
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        parsed = parse_object(Condition, entry, f"status.conditions[{i}]", [])
        if parsed is not None:
            out.append(parsed)
    return tuple(out)


def _condition_maker(live: Mapping[str, Any], now: datetime) -> ConditionMaker:
    """Conditions for one object, carrying over its transition times."""
    generation = _generation(live)
    previous = _previous_conditions(live)

    def make(type_: str, status: bool, reason: str, message: str) -> Condition:
        return condition(
            type_, status, reason, message, previous=previous, generation=generation, now=now
        )

    return make


def status_json(status: TrainingProjectStatus | CapacityPolicyStatus) -> dict[str, Any]:
    """A typed status as the status subresource stores it.

    Empty lists are left out (like Go's omitempty), as the controller has always written
    them: a project with nothing estimated shows no `deadlines: []`, and a status written by an
    earlier version compares equal in `status_changed` rather than being rewritten once.
    """
    return {key: value for key, value in to_json(status).items() if value != []}


S = TypeVar("S", TrainingProjectStatus, CapacityPolicyStatus)
_INDEX = re.compile(r"\[(\d+)\]")


def read_status(cls: type[S], live: Mapping[str, Any]) -> tuple[S, tuple[FieldError, ...]]:
    """An object's status as its typed class, and what of it could not be read.

    A status written by another version of the controller, or edited by hand, may hold a field
    or an entry the schema refuses. A reader such as `quartermaster explain` is better served
    by the rest and a word on what was left out than by nothing: a bad entry of a list is left
    out on its own, any other bad field whole. A missing status reads as the empty one.
    """
    raw = live.get("status")
    if raw is None:
        return cls(), ()
    errors: list[FieldError] = []
    parsed = parse_object(cls, raw, "status", errors)
    if parsed is not None:
        return parsed, ()
    kept = _without(raw, errors) if isinstance(raw, Mapping) else None
    again = parse_object(cls, kept, "status", []) if kept is not None else None
    return (cls() if again is None else again), tuple(errors)


def _without(raw: Mapping[str, Any], errors: Sequence[FieldError]) -> dict[str, Any] | None:
    """`raw` without the fields and list entries the errors point into; None when an error is
    about the status as a whole."""
    out = dict(raw)
    dropped: dict[str, set[int]] = {}
    for error in errors:
        rest = error.path.removeprefix("status.")
        if rest == error.path:
            return None
        # The longest key the path starts with: field names may hold dots or brackets.
        key = max(
            (k for k in raw if rest == k or rest.startswith((f"{k}.", f"{k}["))),
            key=len,
            default=None,
        )
        if key is None:
            return None
        index = _INDEX.match(rest, len(key))
        if index is not None and isinstance(out.get(key), list):
            dropped.setdefault(key, set()).add(int(index.group(1)))
        else:
            out.pop(key, None)
    for key, indexes in dropped.items():
        if isinstance(out.get(key), list):
            out[key] = [entry for i, entry in enumerate(out[key]) if i not in indexes]
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
    """Kinds this cluster does not serve, as "apps/v1 Deployment": of the rendered objects, or,
    while the policy is invalid and nothing is rendered, of every kind the controller writes."""
    kept: tuple[str, ...]
    apply_error: str | None = None
    pools: tuple[PoolStatus, ...] = ()
    """status.pools, as `pool_status_entries` made them."""
    history_error: str | None = None
    binding: tuple[str, ...] = ()
    """Pools whose ceiling or budgets bind, as "pool: reason"."""


def policy_status(
    live: Mapping[str, Any], outcome: PolicyOutcome, *, now: datetime
) -> dict[str, Any]:
    """The CapacityPolicy status to write, as JSON: `status_changed` compares it with the stored
    one, within the estimate's noise."""
    return status_json(capacity_policy_status(live, outcome, now=now))


def capacity_policy_status(
    live: Mapping[str, Any], outcome: PolicyOutcome, *, now: datetime
) -> CapacityPolicyStatus:
    """What the controller did with the policy: conditions, the mix in force, each pool's state."""
    cond = _condition_maker(live, now)

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
    conditions.append(cond("KindsServed", *_kinds_served(outcome.unserved, rendered=valid)))
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
    if valid:
        conditions.append(
            cond(
                "HistoryAvailable",
                outcome.history_error is None,
                "Queried" if outcome.history_error is None else "PrometheusUnreachable",
                ""
                if outcome.history_error is None
                else f"{outcome.history_error}; using priors and the last good history, and never "
                "lowering on-demand capacity until Prometheus answers",
            )
        )
        conditions.append(
            cond(
                "CapacityBound",
                bool(outcome.binding),
                "CeilingOrBudget" if outcome.binding else "WithinBounds",
                "; ".join(outcome.binding),
            )
        )
    return CapacityPolicyStatus(
        observed_generation=_generation(live),
        conditions=tuple(conditions),
        projects=outcome.projects,
        mix=outcome.mix,
        pools=outcome.pools,
    )


def _kinds_served(unserved: Sequence[str], *, rendered: bool) -> tuple[bool, str, str]:
    if not unserved:
        return True, "AllServed", ""
    kinds = ", ".join(unserved)
    if rendered:
        return False, "NotServed", f"not served by this cluster, not applied: {kinds}"
    return (
        False,
        "NotServed",
        f"not served by this cluster: {kinds} (the policy is invalid, so nothing is rendered; "
        "these are the kinds the controller writes that the cluster lacks)",
    )


@dataclass(frozen=True)
class DeadlineTracking:
    """What the DeadlinesTracked condition is computed from, as the risk model counted it."""

    deadlines: tuple[Deadline, ...]
    queued: int
    """Unfinished Workloads in the project's queues (pending in its LocalQueues or admitted to
    its ClusterQueue)."""
    counted: Mapping[str, int]
    """Per deadline name, the unfinished Workloads counting toward it."""


@dataclass(frozen=True)
class ProjectOutcome:
    errors: tuple[PolicyError, ...]
    policy_valid: bool
    quotas: tuple[FlavorQuota, ...]
    apply_error: str | None = None
    capacity: TrainingProjectStatus | None = None
    """The part of the status the capacity plan fills: risk, slack, pending GPUs, cost and last
    decision (`project_capacity_status`); None when no risk was estimated."""
    applied_before: bool = False
    """Objects labelled with the project exist: an invalid spec keeps them as they are."""
    passed_deadlines: tuple[Deadline, ...] | None = None
    """One-off deadlines already behind now; None when the spec could not be read."""
    tracking: DeadlineTracking | None = None
    """Whether its Workloads reach its deadlines; None when no risk was estimated."""


def invalid_spec_message(errors: Iterable[PolicyError], *, applied_before: bool) -> str:
    """The Valid=False message and InvalidSpec Event note: what is wrong and what is kept."""
    return _errors_message(errors) + (
        "; the objects applied before are kept"
        if applied_before
        else "; nothing has been applied for this project yet"
    )


def _deadlines_current(passed: Sequence[Deadline]) -> tuple[bool, str, str]:
    """DeadlinesCurrent: one-off deadlines that have passed, each named with its time. Stable
    from pass to pass (no "ago"), so a steady cluster writes nothing."""
    if not passed:
        return True, "NonePassed", ""
    listed = ", ".join(f"{d.name} ({format_time(d.at)})" for d in passed if d.at is not None)
    return (
        False,
        "DeadlinePassed",
        f"one-off deadlines already passed: {listed}; capacity bought now cannot help them, so "
        "they no longer drive decisions: move or remove them",
    )


def _selector_text(deadline: Deadline) -> str:
    if deadline.match_labels:
        pairs = ", ".join(f"{k}={v}" for k, v in sorted(deadline.match_labels.items()))
        return f"{deadline.name} (matchLabels {pairs})"
    return f"{deadline.name} (label {names.LABEL_DEADLINE}={deadline.name})"


def _keys_to_copy(deadlines: Sequence[Deadline]) -> list[str]:
    """The label keys Kueue must copy for these deadlines, in the order a user would add them."""
    keys = [names.LABEL_DEADLINE] if any(not d.match_labels for d in deadlines) else []
    for deadline in deadlines:
        keys.extend(k for k in sorted(deadline.match_labels) if k not in keys)
    keys.extend((names.LABEL_EXPECTED_DURATION, names.LABEL_CHECKPOINT_INTERVAL))
    return keys


def deadlines_tracked(tracking: DeadlineTracking) -> tuple[bool, str, str]:
    """DeadlinesTracked: False when the project's queues hold unfinished Workloads and none of
    them counts toward any of its deadlines, so every deadline's risk reads 0 while work waits.

    The usual cause is Kueue: a Job's Workload carries only the labels Kueue's configuration
    tells it to copy. An empty queue is not this problem, and the message names no counts, so
    a steady cluster computes the same status from pass to pass.
    """
    if not tracking.deadlines:
        return True, "NoDeadlines", ""
    if tracking.queued == 0:
        return True, "NoWorkloads", "no unfinished Workload in the project's queues yet"
    if any(tracking.counted.get(d.name, 0) for d in tracking.deadlines):
        return True, "Tracked", ""
    listed = ", ".join(_selector_text(d) for d in tracking.deadlines)
    keys = _keys_to_copy(tracking.deadlines)
    return (
        False,
        "NoMatchingWorkloads",
        f"no unfinished Workload in the project's queues counts toward its deadlines: {listed}; "
        "their risk reads 0. This usually happens when Kueue made the Workloads from Jobs: "
        "Kueue copies a Job's labels to its Workload only for keys listed in its "
        "configuration's integrations.labelKeysToCopy, and copies no annotations; add "
        f"{', '.join(keys)} there, and put them on the Jobs (JobSets, PyTorchJobs, RayJobs) "
        "as labels",
    )


def project_status(
    live: Mapping[str, Any], outcome: ProjectOutcome, *, now: datetime
) -> dict[str, Any]:
    """The TrainingProject status to write, as JSON: `status_changed` compares it with the
    stored one, within the estimate's noise."""
    return status_json(training_project_status(live, outcome, now=now))


def training_project_status(
    live: Mapping[str, Any], outcome: ProjectOutcome, *, now: datetime
) -> TrainingProjectStatus:
    """What the controller knows of a project: conditions, its quota split, and what the
    capacity plan estimated for it."""
    cond = _condition_maker(live, now)

    valid = not outcome.errors
    conditions = [
        cond(
            "Valid",
            valid,
            "Valid" if valid else "Invalid",
            ""
            if valid
            else invalid_spec_message(outcome.errors, applied_before=outcome.applied_before),
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
    if outcome.passed_deadlines is not None:
        conditions.append(cond("DeadlinesCurrent", *_deadlines_current(outcome.passed_deadlines)))
    if outcome.tracking is not None:
        conditions.append(cond("DeadlinesTracked", *deadlines_tracked(outcome.tracking)))
    return replace(
        outcome.capacity or TrainingProjectStatus(),
        observed_generation=_generation(live),
        conditions=tuple(conditions),
        nominal_gpus=sum(q.spot_gpus + q.on_demand_gpus for q in outcome.quotas)
        if outcome.quotas
        else None,
        mix=tuple(
            PoolMix(pool=q.pool, on_demand_gpus=q.on_demand_gpus, spot_gpus=q.spot_gpus)
            for q in outcome.quotas
        ),
    )


def status_changed(live: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether writing `status` would change what the object shows, beyond estimate noise."""
    current = live.get("status") or {}
    if current == status:
        return False  # the common case, settled at C speed
    return any(
        key not in current or not _close(key, current[key], value) for key, value in status.items()
    ) or any(key not in status for key in current)

    # ---------------------------------------------------------------------------- capacity state


def _instant(seconds: float | None) -> datetime | None:
    """An epoch as the whole-second instant status holds."""
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).replace(microsecond=0)


def _seconds(instant: datetime | None) -> float | None:
    return None if instant is None else instant.timestamp()


def read_pool_statuses(live_policy: Mapping[str, Any]) -> dict[str, PoolStatus]:
    """status.pools as the typed `PoolStatus` the CRD declares; an entry the schema would
    refuse (edited by hand, or written by another version) is left out, so its pool starts
    afresh rather than from a misread state."""
    out: dict[str, PoolStatus] = {}
    for i, entry in enumerate((live_policy.get("status") or {}).get("pools") or []):
        errors: list[FieldError] = []
        parsed = parse_object(PoolStatus, entry, f"status.pools[{i}]", errors)
        if parsed is not None:
            out[parsed.pool] = parsed
    return out


def pool_states(live_policy: Mapping[str, Any]) -> dict[str, PoolState]:
    """The decision state the last pass left in the policy's status (empty on first sight)."""
    return {
        name: PoolState(
            pool=name,
            on_demand_gpus=status.on_demand_gpus
            if status.target_on_demand_gpus is None
            else status.target_on_demand_gpus,
            assignments={a.project: a.gpus for a in status.assignments},
            raise_since=_seconds(status.raise_since),
            lower_since=_seconds(status.lower_since),
            last_change=_seconds(status.last_change),
            deferred_tiers=status.deferred_tiers,
            last_lower=_seconds(status.last_lower),
            flaps=status.flaps or 0,
        )
        for name, status in read_pool_statuses(live_policy).items()
    }


def _status_decision(decision: Decision, at: float) -> StatusDecision:
    instant = _instant(at)
    assert instant is not None
    return StatusDecision(
        time=instant,
        action=decision.action.value,
        reason=decision.reason.value,
        message=decision.message[:MAX_MESSAGE],
    )


def _last_decisions(live_policy: Mapping[str, Any]) -> dict[str, StatusDecision]:
    """Each pool's lastDecision as stored, read on its own: the one part of an entry a pass
    carries over unchanged."""
    out: dict[str, StatusDecision] = {}
    for i, entry in enumerate((live_policy.get("status") or {}).get("pools") or []):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("pool"), str):
            continue
        errors: list[FieldError] = []
        path = f"status.pools[{i}].lastDecision"
        parsed = parse_object(StatusDecision, entry.get("lastDecision"), path, errors)
        if parsed is not None:
            out[entry["pool"]] = parsed
    return out


def pool_status_entries(
    plan: CapacityPlan, previous: Mapping[str, Any], *, now: float
) -> tuple[PoolStatus, ...]:
    """status.pools: each pool's state, warm target and last decision that changed something,
    written through the typed `PoolStatus` the CRD declares.

    A steady hold keeps the previous lastDecision, so `kubectl get` shows the last real change.
    """
    before = _last_decisions(previous)
    mix = {m.pool: m for m in plan.rendered.mix}
    entries = []
    for decision in plan.decisions:
        state = decision.state
        last = before.get(state.pool)
        quiet = decision.action == Action.HOLD and decision.reason in {
            Reason.STEADY,
            Reason.EVALUATION_WINDOW,
        }
        # A hold that repeats the last decision (same action and reason, nothing moved) keeps
        # its time: restamping it every pass would rewrite the status every pass.
        repeated = (
            not decision.changed
            and last is not None
            and (last.action, last.reason) == (decision.action, decision.reason)
        )
        status = PoolStatus(
            pool=state.pool,
            on_demand_gpus=mix[state.pool].on_demand_gpus,
            spot_gpus=mix[state.pool].spot_gpus,
            target_on_demand_gpus=state.on_demand_gpus,
            assignments=tuple(
                Assignment(project=p, gpus=g) for p, g in sorted(state.assignments.items()) if g
            ),
            raise_since=_instant(state.raise_since),
            lower_since=_instant(state.lower_since),
            last_change=_instant(state.last_change),
            last_lower=_instant(state.last_lower),
            flaps=state.flaps or None,
            deferred_tiers=tuple(state.deferred_tiers),
            warm_pool_target_gpus=plan.warm_targets.get(state.pool, 0),
            last_decision=last if quiet or repeated else _status_decision(decision, now),
        )
        entries.append(status)
    return tuple(entries)


def project_capacity_status(
    plan: CapacityPlan,
    project: str,
    previous: Mapping[str, Any],
    *,
    now: float,
    runtime_history: Mapping[str, float] | None = None,
) -> TrainingProjectStatus:
    """The part of a project's status the capacity plan fills (deadlines, slack, pending, cost,
    last decision); `training_project_status` adds the conditions and the split.

    The last decision is the last pool decision this pass that changed capacity held for the
    project; without one, the stored lastDecision is carried over, so `kubectl get` shows the
    last real change.
    """
    reports = plan.deadlines_of(project)
    changed = [d for d in plan.decisions if project in d.state.assignments and d.changed]
    worst = max(reports, key=lambda d: d.estimate.risk) if reports else None
    tightest = min(reports, key=lambda d: d.estimate.slack_seconds) if reports else None
    lost = lost_of(plan, project)
    per_deadline: dict[str, int] = {}
    for entry in lost:
        per_deadline[entry.deadline] = per_deadline.get(entry.deadline, 0) + 1
    return TrainingProjectStatus(
        pending_gpus=plan.pending_gpus.get(project, 0),
        estimated_cost_dollars_per_hour=round(plan.project_cost_per_hour.get(project, 0.0), 2),
        budget_exceeded=project in plan.budget_exceeded,
        worst_deadline_risk=None if worst is None else round(worst.estimate.risk, 2),
        slack=None if tightest is None else format_duration(tightest.estimate.slack_seconds),
        deadlines=tuple(
            DeadlineStatus(
                name=d.deadline,
                risk=round(d.estimate.risk, 2),
                slack_seconds=_bounded_seconds(d.estimate.slack_seconds),
                cutoff=_instant(d.cutoff),
                # A median finish that never comes (work that cannot start) is left out.
                projected_finish=_instant(d.estimate.p50_finish)
                if math.isfinite(d.estimate.p50_finish)
                else None,
                state=DeadlineState.LOST if per_deadline.get(d.deadline) else DeadlineState.SAVABLE,
                lost_workloads=per_deadline.get(d.deadline, 0),
            )
            for d in reports
        ),
        lost_workloads=len(lost) if reports or lost else None,
        lost=lost[:MAX_LOST_LISTED],
        last_decision=_status_decision(changed[-1], now) if changed else _stored_decision(previous),
        # Rounded to tenths: the decayed counts change with every finish, not every pass.
        runtime_history=None
        if runtime_history is None
        else RuntimeHistory(
            declared=round(runtime_history.get("declared", 0.0), 1),
            undeclared=round(runtime_history.get("undeclared", 0.0), 1),
        ),
    )


def lost_of(plan: CapacityPlan, project: str) -> tuple[LostWorkload, ...]:
    """The project's lost waiting workloads, by namespace and name: an order that does not
    move with their chances, so the status names the same ones from pass to pass."""
    return tuple(
        LostWorkload(
            namespace=namespace, name=name, deadline=judged.deadline, chance=round(judged.chance, 3)
        )
        for (namespace, name), judged in sorted(plan.lost_of(project).items())
    )


def _stored_decision(live: Mapping[str, Any]) -> StatusDecision | None:
    """The stored lastDecision, read on its own; one the schema would refuse is dropped rather
    than written back."""
    return parse_object(
        StatusDecision, _stored(live).get("lastDecision"), "status.lastDecision", []
    )


def _bounded_seconds(value: float) -> int:
    """Slack as an integer; an impossible deadline is reported as -10 years."""
    limit = 10 * 365 * 86400
    if math.isnan(value):
        return -limit
    return int(max(min(value, limit), -limit))


# Differences below these are noise of the estimate, not news: writing them every pass would
# make the controller write all the time in a steady state.
TOLERANCES = {
    "worstDeadlineRisk": 0.05,
    "risk": 0.05,
    "chance": 0.05,
    "slackSeconds": 900.0,
    "estimatedCostDollarsPerHour": 1.0,
}
TIME_TOLERANCE_SECONDS = 900.0
TIME_FIELDS = frozenset({"projectedFinish", "raiseSince", "lowerSince"})


def _close(key: str, old: Any, new: Any) -> bool:
    if isinstance(old, dict) and isinstance(new, dict):
        return set(old) == set(new) and all(_close(k, old[k], new[k]) for k in new)
    if isinstance(old, list) and isinstance(new, list):
        return len(old) == len(new) and all(
            _close(key, o, n) for o, n in zip(old, new, strict=True)
        )
    if key in TOLERANCES and isinstance(old, int | float) and isinstance(new, int | float):
        if key == "slackSeconds" and (old < 0) != (new < 0):
            return False  # a deadline turning late is always news
        return abs(float(old) - float(new)) <= TOLERANCES[key]
    if key in TIME_FIELDS:
        a, b = epoch(old), epoch(new)
        if a is not None and b is not None:
            return abs(a - b) <= TIME_TOLERANCE_SECONDS
    if key == "slack":
        return True if old == new else _slack_close(old, new)
    return bool(old == new)


def _slack_close(old: Any, new: Any) -> bool:
    """The slack text follows slackSeconds; only its sign, days and hours are news."""
    if not isinstance(old, str) or not isinstance(new, str):
        return False

    def coarse(text: str) -> tuple[bool, str]:
        head = text.lstrip("-")
        return text.startswith("-"), head.split("h")[0] if "h" in head else "0"

    return coarse(old) == coarse(new)
