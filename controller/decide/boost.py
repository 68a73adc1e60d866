"""Deadline-first order for waiting work, through Kueue's priority boost, without preemption.

Kueue orders each queue's pending workloads, and the queues' heads in each scheduling cycle,
by effective priority: the base priority plus the `kueue.x-k8s.io/priority-boost` annotation.
It also uses effective priority to decide who may preempt whom, within a ClusterQueue too. A
boost that raises an at-risk pending workload above its base therefore lets it evict a running
job of its own project; that job, now pending and at risk, is raised in turn and evicts
another, without end. So the boost here only ever *lowers* waiting work, by how long it can
afford to wait:

- Who: pending workloads of projects that have deadlines. A workload's urgency is its least
  slack over the open deadlines it counts toward (cutoff, minus now, minus its expected
  remaining runtime); one that counts toward none can wait longest.
- How much: urgency levels on a ladder of powers of four from an hour (under 1 h, 4 h, 16 h,
  64 h, longer or none). Level k lowers effective priority by k steps. The steps together stay
  below the gap between any two tiers' priorities (and within `priorityBoostValue`), so a
  lowered workload never falls below a lower tier: tiers order as before, and inside a tier
  the tightest deadlines go first. Each workload changes level at most four times while it
  waits (its slack only shrinks), which bounds the writes.
- For how long: while pending. Admitted workloads carry no boost, and the controller removes
  its annotation once a workload is admitted.

Why this cannot loop: a pending workload's effective priority is at most its base, and every
admitted workload's is its base, so a boost never lets a workload preempt one of equal base
priority, in its queue or elsewhere; it can only stop a preemption between base priorities
closer than the boost. The one window is a workload admitted before the controller has taken
its (negative) boost off: a more urgent pending workload of its queue may preempt it once.
It then waits at its own level, which can only rise, so that repeats at most once per level.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Mapping

from controller.risk.urgency import LEVELS, demoted, urgency_level


def boost_step(priority_boost_value: int, tier_priorities: Iterable[int]) -> int:
    """Effective priority per urgency level: the whole ladder fits between adjacent tiers."""
    distinct = sorted(set(tier_priorities))
    gaps = [b - a for a, b in itertools.pairwise(distinct)]
    room = min([priority_boost_value, *(g - 1 for g in gaps)])
    return max(room, 0) // (LEVELS - 1)


def deadline_boosts(
    slack: Mapping[tuple[str, str], float | None],
    *,
    step: int,
    demoted: Collection[tuple[str, str]] = (),
) -> dict[tuple[str, str], int]:
    """(namespace, name) -> boost for pending workloads given their least slack (None: no
    deadline). Only non-zero boosts are returned: zero means no annotation.

    `demoted` are workloads whose deadline is lost: they take the last level, that of work
    with no deadline, behind every savable one of their queue. Earliest-deadline-first
    collapses under overload because work already late goes first and makes savable work
    late too (the domino effect); placed last, lost work still runs, in its age order."""
    if step <= 0:
        return {}
    out = {}
    for key, seconds in slack.items():
        level = LEVELS - 1 if key in demoted else urgency_level(seconds)
        if level:
            out[key] = -step * level
    return out


__all__ = ["LEVELS", "boost_step", "deadline_boosts", "demoted", "urgency_level"]
