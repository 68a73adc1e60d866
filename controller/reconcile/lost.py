"""Telling a team at once that a waiting workload can no longer make its deadline.

The plan judges each waiting deadline workload (`CapacityPlan.lost_deadlines`): lost when,
even started now, its chance to finish in time is under `risk.lostBelow`. A deadline known
lost early is worth more to a team than one missed late, so the reconciler puts a Warning
Event (`DeadlineLost`) on each newly lost Workload, once: the chance changes from pass to pass,
and an Event per pass would bury the news under repeats.

Which Workloads were told lives in the reconciler's memory, kept for as long as the Workload
is unfinished. A restarted controller (or a new leader) starts from the workloads the project
statuses name as lost (`status.lost`, up to `MAX_LOST_LISTED` each), so a restart repeats the
Event only for those a status could not name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from controller.api.types import Tier, TrainingProject, TrainingProjectStatus
from controller.reconcile.status import read_status
from controller.risk.model import LostWorkload
from controller.timestamps import format_duration, format_time

REASON = "DeadlineLost"
ACTION = "Judge"


def lost_note(
    judged: LostWorkload, *, lost_below: float, tier: Tier | None, max_wait_seconds: float
) -> str:
    """The Event's note: the deadline, the chance, and what the controller does about it
    (nothing is cancelled; the tier says whether it waits behind savable work)."""
    at = format_time(datetime.fromtimestamp(judged.cutoff, UTC))
    if tier is not None and tier.demote_lost:
        order = (
            f"it is still admitted, after the savable work of its queue for at most "
            f"{format_duration(max_wait_seconds)} since it was created"
        )
    else:
        order = "it is still admitted in its deadline order (its tier does not demote lost work)"
    return (
        f"deadline {judged.deadline} ({at}) of project {judged.project} is lost for this "
        f"workload: even started now it has a {judged.chance:.1%} chance to finish in time "
        f"(under risk.lostBelow {lost_below:.0%}); {order}"
    )


def told_before(projects: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """The workloads the stored project statuses name as lost: told by an earlier pass (of
    this replica or another), so a restart does not tell them again."""
    out: set[tuple[str, str]] = set()
    for project in projects:
        status, _ = read_status(TrainingProjectStatus, project)
        out.update((entry.namespace, entry.name) for entry in status.lost)
    return out


def to_tell(
    lost: Mapping[tuple[str, str], LostWorkload],
    told: set[tuple[str, str]],
    unfinished: Iterable[tuple[str, str]],
) -> tuple[list[tuple[str, str]], set[tuple[str, str]]]:
    """The lost workloads to tell now (in name order), and what stays told: a workload is told
    once while it exists, even if it turns savable and lost again; a finished or deleted one
    is forgotten, so the memory stays bounded by the workloads there are."""
    present = set(unfinished)
    kept = told & present
    return sorted(key for key in lost if key in present and key not in kept), kept


def workload_key(workload: Mapping[str, Any]) -> tuple[str, str]:
    meta = workload.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def tiers_of(projects: Sequence[TrainingProject], tiers: Sequence[Tier]) -> dict[str, Tier]:
    """Per project name, its tier: the Event says whether the tier demotes lost work. A
    project whose tier the policy lacks is left out (its note says it keeps its order)."""
    by_name = {t.name: t for t in tiers}
    return {p.name: by_name[p.spec.tier] for p in projects if p.spec.tier in by_name}


__all__ = ["ACTION", "REASON", "lost_note", "tiers_of", "to_tell", "told_before", "workload_key"]
