"""Why a deadline was missed: one cause per miss, so the causes of a run add up to its misses.

A job that missed its deadline lost time in one or more ways between its submit and its
finish; the replay measures each in seconds of the job's own clock:

- **waited for quota**: pending in its queue before its first admission;
- **waited for a node**: admitted, before its first start, while its nodes were launched;
- **work lost to interruptions**: work redone after spot nodes were reclaimed, and the waits
  for new nodes that followed;
- **preempted**: work redone after Kueue took its quota back, and the waits that followed,
  in the queue and for nodes.

The cause is the largest of these. It is **infeasible at submit** instead when no schedule
could have met the deadline: its runtime alone ends after it, or it is wider than its queue
could ever admit. Ties go to the earlier cause in `CAUSES` order.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller.sim.model import (
    CAUSES,
    INFEASIBLE,
    INTERRUPTED,
    PREEMPTED,
    WAITED_FOR_NODE,
    WAITED_FOR_QUOTA,
)

DELAY_CAUSES = (WAITED_FOR_QUOTA, WAITED_FOR_NODE, INTERRUPTED, PREEMPTED)


def attribute(
    *,
    submit: float,
    duration: float,
    deadline: float | None,
    finish: float | None,
    delays: Mapping[str, float],
    admissible: bool = True,
) -> str | None:
    """The cause of a missed deadline, or None when the deadline was met (or there was none)."""
    if deadline is None or (finish is not None and finish <= deadline):
        return None
    if submit + duration > deadline or not admissible:
        return INFEASIBLE
    return max(DELAY_CAUSES, key=lambda c: (delays.get(c, 0.0), -DELAY_CAUSES.index(c)))


__all__ = ["CAUSES", "DELAY_CAUSES", "attribute"]
