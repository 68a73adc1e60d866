"""`quartermaster explain PROJECT`: why the mix is what it is, from a live cluster.

A pure formatter over what the controller already recorded: the project's status (deadlines
with their risk, slack and cutoff, quota split, cost, last decision), the decision state of the
pools it uses (in the policy's status), and the recent Events about either. Answering "why did
the mix change at 03:10?" must not need the controller's logs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_EVENTS = 15


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


def format_explanation(
    project: Mapping[str, Any],
    policy: Mapping[str, Any] | None,
    events: Sequence[Mapping[str, Any]],
) -> str:
    meta = project.get("metadata") or {}
    spec = project.get("spec") or {}
    status = project.get("status") or {}
    name = str(meta.get("name"))
    lines = [f"TrainingProject {name} (tier {spec.get('tier')})"]
    for condition in status.get("conditions") or []:
        message = f": {condition['message']}" if condition.get("message") else ""
        lines.append(
            f"  {condition.get('type')}={condition.get('status')} "
            f"({condition.get('reason')}){message}"
        )
    lines.append("")
    deadlines = status.get("deadlines") or []
    if deadlines:
        targets = {
            d.get("name"): 1 - float(d.get("targetConfidence", 0.95))
            for d in spec.get("deadlines") or []
        }
        lines.append("Deadlines (risk = estimated probability of missing it):")
        rows = [["NAME", "CUTOFF", "RISK", "TARGET", "SLACK", "PROJECTED FINISH"]]
        for d in deadlines:
            slack = int(d.get("slackSeconds", 0))
            rows.append(
                [
                    str(d.get("name")),
                    str(d.get("cutoff", "-")),
                    f"{float(d.get('risk', 0)):.2f}",
                    f"{targets.get(d.get('name'), 0.05):.2f}",
                    f"{slack / 3600:+.1f}h",
                    str(d.get("projectedFinish", "never")),
                ]
            )
        lines.extend(_table(rows))
    else:
        lines.append("Deadlines: none declared, or no risk estimated yet.")
    lines.append("")
    lines.append(
        f"Pending GPUs: {status.get('pendingGpus', 0)}   "
        f"cost now: ${float(status.get('estimatedCostDollarsPerHour', 0)):.2f}/h"
        + ("   BUDGET EXCEEDED" if status.get("budgetExceeded") else "")
    )
    mix = status.get("mix") or []
    if mix:
        lines.append("Quota split:")
        lines.extend(
            _table(
                [["POOL", "ON-DEMAND", "SPOT"]]
                + [
                    [str(m.get("pool")), str(m.get("onDemandGpus")), str(m.get("spotGpus"))]
                    for m in mix
                ]
            )
        )
    decision = status.get("lastDecision")
    if decision:
        lines.append(
            f"Last decision: {decision.get('time')} {decision.get('action')} "
            f"({decision.get('reason')}): {decision.get('message')}"
        )
    pools = {q.get("pool") for q in spec.get("quotas") or []}
    for pool in ((policy or {}).get("status") or {}).get("pools") or []:
        if pool.get("pool") not in pools:
            continue
        held = {a.get("project"): a.get("gpus") for a in pool.get("assignments") or []}
        lines.append("")
        lines.append(
            f"Pool {pool.get('pool')}: {pool.get('onDemandGpus')} on-demand, "
            f"{pool.get('spotGpus')} spot; held for {name}: {held.get(name, 0)}; "
            f"warm pool target {pool.get('warmPoolTargetGpus', 0)} GPUs"
        )
        for key, label in (
            ("raiseSince", "risk above the raise threshold since"),
            ("lowerSince", "risk below the lower threshold since"),
            ("lastChange", "mix last changed"),
        ):
            if pool.get(key):
                lines.append(f"  {label} {pool[key]}")
        if pool.get("deferredTiers"):
            lines.append(f"  deferred tiers (no borrowing): {', '.join(pool['deferredTiers'])}")
        last = pool.get("lastDecision")
        if last:
            lines.append(
                f"  last decision {last.get('time')} {last.get('action')} "
                f"({last.get('reason')}): {last.get('message')}"
            )
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
