"""`quartermaster explain PROJECT`: why the mix is what it is, from a live cluster.

A pure formatter over what the controller already recorded: the project's status (deadlines
with their risk, slack and cutoff, quota split, cost, last decision), the decision state of the
pools it uses (in the policy's status), the recent Events about either, and the workloads of
its queues that the controller put in a lane (the lane annotations on each Workload).
Answering "why did the mix change at 03:10?" or "why is this job on on-demand?" must not need
the controller's logs. The pools of the project in a spot shortage, and the zones short in
each, are shown from Karpenter's capacity-error Events, folded as a restarted controller folds
them (the controller keeps its memory of them in its process, not in a status).

Both statuses are read as the typed classes the controller writes them from
(`controller.reconcile.status.read_status`), so explain shows what the schema declares. A status
from another controller version, or edited by hand, is shown as far as it can be read, with a
one-line note naming what was left out: explain never fails on a status.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from controller import names
from controller.api.parse import FieldError
from controller.api.types import (
    CapacityPolicyStatus,
    DeadlineStatus,
    PoolStatus,
    TrainingProjectStatus,
)
from controller.api.types import Decision as StatusDecision
from controller.reconcile.status import read_status
from controller.risk.shortage import ANY_ZONE, Shortages, expected_wait, short_zones
from controller.timestamps import format_duration, format_time

MAX_EVENTS = 15
MAX_NOTED = 3
"""Unreadable fields named in a note; the rest are counted, so the note stays one line."""


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]


def _event_time(event: Mapping[str, Any]) -> str:
    series = event.get("series") or {}
    return str(
        series.get("lastObservedTime")
        or event.get("eventTime")
        or event.get("metadata", {}).get("creationTimestamp")
        or ""
    )


def _unreadable(whose: str, errors: Sequence[FieldError]) -> list[str]:
    """One line on what of a status could not be read, so the reader knows what is shown is
    partial (a status from another controller version, or edited by hand), not wrong."""
    if not errors:
        return []
    named = "; ".join(str(e) for e in errors[:MAX_NOTED])
    more = f" (and {len(errors) - MAX_NOTED} more)" if len(errors) > MAX_NOTED else ""
    if any(e.path == "status" for e in errors):
        return [f"Note: {whose} status could not be read: {named}{more}"]
    return [f"Note: part of {whose} status could not be read and is left out: {named}{more}"]


def _decision(decision: StatusDecision) -> str:
    return f"{format_time(decision.time)} {decision.action} ({decision.reason}): {decision.message}"


def _targets(spec: Mapping[str, Any]) -> dict[str, float]:
    """The miss probability each deadline may have, 1 - targetConfidence (0.05 by default). The
    spec is read as stored; a value that is not a number keeps the default."""
    out = {}
    for deadline in spec.get("deadlines") or []:
        if not isinstance(deadline, Mapping):
            continue
        confidence = deadline.get("targetConfidence", 0.95)
        if isinstance(confidence, int | float) and not isinstance(confidence, bool):
            out[str(deadline.get("name"))] = 1 - float(confidence)
    return out


def _deadline_lines(deadlines: Sequence[DeadlineStatus], targets: Mapping[str, float]) -> list[str]:
    if not deadlines:
        return ["Deadlines: none declared, or no risk estimated yet."]
    rows = [["NAME", "CUTOFF", "RISK", "TARGET", "SLACK", "PROJECTED FINISH"]]
    for d in deadlines:
        rows.append(
            [
                d.name,
                "-" if d.cutoff is None else format_time(d.cutoff),
                f"{d.risk:.2f}",
                f"{targets.get(d.name, 0.05):.2f}",
                f"{d.slack_seconds / 3600:+.1f}h",
                "never" if d.projected_finish is None else format_time(d.projected_finish),
            ]
        )
    return ["Deadlines (risk = estimated probability of missing it):", *_table(rows)]


def _runtime_history_lines(status: TrainingProjectStatus) -> list[str]:
    """How much finished work the runtime estimates rest on: the reader can tell a risk from
    learned runtimes from one on the declarations alone."""
    history = status.runtime_history
    if history is None:
        return []

    def basis(count: float, learned: str, fallback: str) -> str:
        return f"{count:.1f} finished workloads ({learned})" if count > 0 else fallback

    return [
        "Runtime estimates rest on: "
        + basis(
            history.declared,
            "actual over declared runtime",
            "no finished workload with a declared runtime (declared runtimes used as they are)",
        )
        + "; "
        + basis(
            history.undeclared,
            "runtimes of undeclared work",
            "none without one (project median or an hour assumed)",
        )
        + " (decayed counts of the finished work the controller learned from)"
    ]


def lost_lines(status: TrainingProjectStatus) -> list[str]:
    """The project's waiting workloads that can no longer make their deadline, with their
    chance: told at once (a DeadlineLost Event each), so a team can act on them early. The
    status names up to `MAX_LOST_LISTED` of them; the rest are counted."""
    listed = status.lost
    count = max(status.lost_workloads or 0, len(listed))
    if not count:
        return []
    rows = [["WORKLOAD", "DEADLINE", "CHANCE"]]
    rows.extend([f"{w.namespace}/{w.name}", w.deadline, f"{w.chance:.1%}"] for w in listed)
    lines = [
        f"Lost: {count} waiting workload(s) cannot make their deadline even if started now "
        "(still admitted; chance = of finishing in time):",
        *_table(rows),
    ]
    if count > len(listed):
        lines.append(f"  and {count - len(listed)} more")
    return lines


def _pool_lines(pool: PoolStatus, project: str) -> list[str]:
    held = {a.project: a.gpus for a in pool.assignments}
    lines = [
        "",
        f"Pool {pool.pool}: {pool.on_demand_gpus} on-demand, {pool.spot_gpus} spot; "
        f"held for {project}: {held.get(project, 0)}; "
        f"warm pool target {pool.warm_pool_target_gpus or 0} GPUs",
    ]
    # The pool's thresholds watch the worst deadline risk of every project with quota in it
    # (controller.decide.mix), not this project's alone: said so, or a project at risk 0.00
    # would read as the one above the threshold.
    for since, label in (
        (
            pool.raise_since,
            "the pool's worst deadline risk (any project's) above the raise threshold since",
        ),
        (
            pool.lower_since,
            "the pool's worst deadline risk (any project's) below the lower threshold since",
        ),
        (pool.last_change, "mix last changed"),
    ):
        if since is not None:
            lines.append(f"  {label} {format_time(since)}")
    if pool.flaps:
        lines.append(
            f"  raised again soon after a lower {pool.flaps}x: the cooldown before the next "
            f"step back is doubled {pool.flaps}x"
        )
    if pool.deferred_tiers:
        lines.append(f"  deferred tiers (no borrowing): {', '.join(pool.deferred_tiers)}")
    if pool.last_decision is not None:
        lines.append(f"  last decision {_decision(pool.last_decision)}")
    return lines


def _lane_state(workload: Mapping[str, Any]) -> str | None:
    """ "moving" (deactivated by the controller to be moved to its lane, not yet activated
    again), "waiting", "admitted", or None for a finished Workload (its lane no longer
    matters)."""
    conditions = {
        c.get("type"): c.get("status")
        for c in (workload.get("status") or {}).get("conditions") or []
        if isinstance(c, Mapping)
    }
    if conditions.get("Finished") == "True":
        return None
    annotations = (workload.get("metadata") or {}).get("annotations") or {}
    if names.ANNOTATION_MOVING_TO in annotations:
        return "moving"
    return "admitted" if conditions.get("Admitted") == "True" else "waiting"


def lane_lines(project: str, workloads: Sequence[Mapping[str, Any]]) -> list[str]:
    """The unfinished Workloads of the project's queues that carry our lane, with the reason
    recorded when it was written: who is on-demand because of the controller, and why."""
    rows: list[list[str]] = []
    for workload in workloads:
        meta = workload.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        lane = annotations.get(names.ANNOTATION_LANE)
        state = _lane_state(workload)
        if not lane or state is None or (workload.get("spec") or {}).get("queueName") != project:
            continue
        rows.append(
            [
                f"{meta.get('namespace')}/{meta.get('name')}",
                str(lane),
                state,
                str(annotations.get(names.ANNOTATION_LANE_REASON) or ""),
            ]
        )
    if not rows:
        return []
    title = f"Lanes ({len(rows)} workload(s) put on a capacity type by the controller):"
    return [title, *_table([["WORKLOAD", "LANE", "STATE", "WHY"], *sorted(rows)])]


def shortage_lines(pools: Sequence[str], shortages: Shortages, now: float) -> list[str]:
    """The project's pools in a spot shortage now: since when, in which zones, and the wait
    expected; and a pool short in only some of its zones, which costs nothing (Karpenter
    launches in the others) but says where the market is thin."""
    lines = []
    for pool in pools:
        state = shortages.state(pool)
        zones = short_zones(state, now)
        if not zones:
            continue
        wait = expected_wait(state, now)
        named = ", ".join(zone for zone in zones if zone != ANY_ZONE)
        if wait > 0 and state.started is not None:
            where = f" in every zone it launches in ({named})" if named else ""
            lines.append(
                f"Spot shortage in pool {pool}: Karpenter's launches failing for capacity since "
                f"{format_time(datetime.fromtimestamp(state.started, UTC))}{where}; a spot "
                f"launch is expected to wait {format_duration(wait)} more (the lanes count it)"
            )
            continue
        others = ", ".join(sorted(state.pool_zones - zones.keys()))
        lines.append(
            f"Spot shortage in pool {pool} in zone(s) {named} only: Karpenter launches spot in "
            f"{others or 'its other zones'}, so no wait is counted"
        )
    return lines


def format_explanation(
    project: Mapping[str, Any],
    policy: Mapping[str, Any] | None,
    events: Sequence[Mapping[str, Any]],
    workloads: Sequence[Mapping[str, Any]] = (),
    shortages: tuple[Shortages, float] | None = None,
) -> str:
    """The explanation, from the statuses read as their typed classes: whatever of a status
    cannot be read is named in a note and the rest is still shown. `shortages` is the spot
    shortages the cluster's Events show and the time to judge them at."""
    meta = project.get("metadata") or {}
    spec = project.get("spec") or {}
    status, unread = read_status(TrainingProjectStatus, project)
    name = str(meta.get("name"))
    lines = [f"TrainingProject {name} (tier {spec.get('tier')})"]
    lines.extend(_unreadable("the", unread))
    for condition in status.conditions:
        message = f": {condition.message}" if condition.message else ""
        lines.append(f"  {condition.type}={condition.status} ({condition.reason}){message}")
    lines.append("")
    lines.extend(_deadline_lines(status.deadlines, _targets(spec)))
    lost = lost_lines(status)
    if lost:
        lines.append("")
        lines.extend(lost)
    lines.append("")
    lines.append(
        f"Pending GPUs: {status.pending_gpus or 0}   "
        f"cost now: ${status.estimated_cost_dollars_per_hour or 0.0:.2f}/h"
        + ("   BUDGET EXCEEDED" if status.budget_exceeded else "")
    )
    if status.mix:
        lines.append("Quota split:")
        lines.extend(
            _table(
                [["POOL", "ON-DEMAND", "SPOT"]]
                + [[m.pool, str(m.on_demand_gpus), str(m.spot_gpus)] for m in status.mix]
            )
        )
    if status.last_decision is not None:
        lines.append(f"Last decision: {_decision(status.last_decision)}")
    lines.extend(_runtime_history_lines(status))
    if policy is not None:
        policy_status, policy_unread = read_status(CapacityPolicyStatus, policy)
        policy_name = (policy.get("metadata") or {}).get("name")
        if policy_unread:
            lines.append("")
            lines.extend(_unreadable(f"CapacityPolicy {policy_name}'s", policy_unread))
        pools = {q.get("pool") for q in spec.get("quotas") or [] if isinstance(q, Mapping)}
        for pool in policy_status.pools:
            if pool.pool in pools:
                lines.extend(_pool_lines(pool, name))
    if shortages is not None:
        quota_pools = [
            str(q.get("pool")) for q in spec.get("quotas") or [] if isinstance(q, Mapping)
        ]
        short = shortage_lines(quota_pools, *shortages)
        if short:
            lines.append("")
            lines.extend(short)
    lanes = lane_lines(name, workloads)
    if lanes:
        lines.append("")
        lines.extend(lanes)
    relevant = sorted(events, key=_event_time)[-MAX_EVENTS:]
    if relevant:
        lines.append("")
        lines.append("Recent events:")
        for event in relevant:
            regarding = event.get("regarding") or {}
            count = (event.get("series") or {}).get("count")
            lines.append(
                f"  {_event_time(event)}  {event.get('type')}  {event.get('reason')}  "
                f"{regarding.get('kind')}/{regarding.get('name')}: {event.get('note')}"
                + (f" (x{count})" if count else "")
            )
    return "\n".join(lines) + "\n"


def relevant_events(
    events: Sequence[Mapping[str, Any]], project: str, policy: str | None
) -> list[Mapping[str, Any]]:
    wanted = {("TrainingProject", project)}
    if policy:
        wanted.add(("CapacityPolicy", policy))
    return [
        e
        for e in events
        if ((e.get("regarding") or {}).get("kind"), (e.get("regarding") or {}).get("name"))
        in wanted
    ]
