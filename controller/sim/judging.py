"""The replay's risk estimates judged as their deadlines resolve, and recalibrated online.

The controller judges each estimate once its deadline resolves and learns a monotone
recalibration from what it has judged (`controller.risk.recalibration`). The replay does the
same while it runs, with the same map (`fit_judged`) and the same records (`Judged`), so that
the calibrated risk it reports next to the raw one is what a controller that had lived through
the trace so far would have said: no estimate is judged before its outcome could be seen, and
each calibrated risk comes from a map fitted on the estimates judged before it was made.

**When an estimate resolves.** The replay's outcome of an estimate is per estimate (what
`RiskRecord.missed` says and the calibration table scores): its members are the workloads of
the deadline's bin submitted by then and unfinished then; it is missed when one of them
finishes after the cutoff. So it resolves

- *met* at the first pass after all its members finished (each before the cutoff): nothing can
  miss it any more;
- *missed or met* at the first pass strictly after the cutoff: a member still running then
  finishes after it. (Strictly: a member finishing exactly at the cutoff met it, and a pass at
  that instant may run before the finish is seen.)

Only finishes that happened are read (`finish(index)` is None for a job still running or not
yet submitted), and only jobs submitted by the estimate's time count, so nothing of the future
is seen. The outcome agrees with the one the replay gives after the run (`Replay._risk_records`);
a test checks it.

**Why not the controller's `OutcomeLedger` itself.** The ledger judges a deadline occurrence
with one outcome for all its estimates; the replay's measure (and the goal's) judges each
estimate by the workloads counting toward it when it was made. The records, the map and its
shrinkage (evidence in distinct deadline occurrences, `deadline_id`) are the ledger's.

**Cost.** Refitting over every judged estimate at every pass would cost a whole-trace replay
minutes, so the map is refitted only once the estimates judged since the last fit number
`REFIT_GROWTH` of those it was fitted on (and at least `REFIT_MIN_NEW`): a few hundred fits
over a replay, of sizes growing geometrically, so the total stays a small multiple of one fit
over everything.
Judged estimates are held up to `MAX_JUDGED` (the ledger's bound), the oldest going first.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from controller.risk.recalibration import (
    MAX_JUDGED,
    STRENGTH,
    Judged,
    Recalibration,
    deadline_id,
    fit_judged,
)

REFIT_GROWTH = 0.05
"""The map is refitted once the judged estimates grew by this share since the last fit."""
REFIT_MIN_NEW = 50
"""... and by at least this many."""

Group = tuple[str, str]
"""(project, deadline bin): the workloads counting toward one of the replay's deadlines."""


@dataclass(frozen=True)
class _Open:
    at: float
    cutoff: float
    tier: str
    risk: float


class OnlineCalibration:
    """Open estimates, the judged ones, and the recalibration fitted on those judged so far."""

    def __init__(
        self,
        members: Mapping[Group, Sequence[tuple[float, int]]],
        *,
        strength: float = STRENGTH,
        max_judged: int = MAX_JUDGED,
        refit_growth: float = REFIT_GROWTH,
        refit_min_new: int = REFIT_MIN_NEW,
    ) -> None:
        """`members`: per group, (submit time, job index) of every job counting toward it,
        whenever submitted (an estimate counts only those submitted by its time)."""
        self._members = {group: sorted(items) for group, items in members.items()}
        self._first_unfinished = dict.fromkeys(self._members, 0)
        """Per group, the position of its first member (by submit) not seen finished: the
        members before it all finished, so it only moves forward."""
        self._open: dict[tuple[Group, float], list[_Open]] = {}
        """Per group and cutoff, the open estimates in the order they were made: those
        resolved by all their members finishing are a prefix (the earliest made), and those
        of a passed cutoff are all of them, so a pass never rescans what stays open."""
        self.strength = strength
        self.refit_growth = refit_growth
        self.refit_min_new = refit_min_new
        self.judged: deque[Judged] = deque(maxlen=max_judged)
        self.judged_count = 0
        """Estimates judged since the replay began (those dropped from `judged` included)."""
        self._fitted_at = 0
        """`judged_count` at the last fit."""
        self._fitted_size = 0
        """How many judged estimates the last fit was over."""
        self.fits = 0
        self.recalibration = Recalibration()

    def estimate(
        self, at: float, project: str, deadline: str, *, cutoff: float, tier: str, risk: float
    ) -> float:
        """Keep an estimate open until its deadline resolves; its calibrated risk now (by the
        map fitted on what was judged before)."""
        self._open.setdefault(((project, deadline), cutoff), []).append(
            _Open(at, cutoff, tier, risk)
        )
        return self.recalibration(tier, risk)

    def open_count(self) -> int:
        return sum(len(items) for items in self._open.values())

    def judge(self, now: float, finish: Callable[[int], float | None]) -> int:
        """Judge every open estimate whose outcome is known at `now` (see the module
        docstring), refit when enough were judged; how many were judged now.

        `finish(index)`: when the job finished, None while it has not (or is not submitted).
        """
        judged = 0
        for key in list(self._open):
            group, cutoff = key
            opened = self._open[key]
            if now > cutoff:
                earliest = self._earliest_late(self._members.get(group, ()), cutoff, now, finish)
                for estimate in opened:
                    self._judge(group, estimate, missed=earliest <= estimate.at, now=now)
                judged += len(opened)
                del self._open[key]
                continue
            running_since = self._first_running(group, finish)
            done = 0
            while done < len(opened) and opened[done].at < running_since:
                self._judge(group, opened[done], missed=False, now=now)
                done += 1
            judged += done
            if done == len(opened):
                del self._open[key]
            elif done:
                self._open[key] = opened[done:]
        self.judged_count += judged
        new = self.judged_count - self._fitted_at
        if new >= max(self.refit_min_new, self.refit_growth * self._fitted_size):
            self.refit()
        return judged

    def refit(self) -> None:
        """The map fitted on every held judged estimate."""
        self.recalibration = fit_judged(list(self.judged), strength=self.strength)
        self._fitted_at = self.judged_count
        self._fitted_size = len(self.judged)
        self.fits += 1

    def _first_running(self, group: Group, finish: Callable[[int], float | None]) -> float:
        """The submit of the group's earliest member (by submit) not seen finished; infinity
        when all finished. An estimate made before it has all its members finished."""
        members = self._members.get(group, ())
        first = self._first_unfinished.get(group, 0)
        while first < len(members) and finish(members[first][1]) is not None:
            first += 1
        self._first_unfinished[group] = first
        return members[first][0] if first < len(members) else math.inf

    def _judge(self, group: Group, estimate: _Open, *, missed: bool, now: float) -> None:
        project, deadline = group
        self.judged.append(
            Judged(
                deadline_id=deadline_id(project, deadline, estimate.cutoff),
                tier=estimate.tier,
                risk=estimate.risk,
                at=estimate.at,
                missed=missed,
                resolved_at=now,
            )
        )

    @staticmethod
    def _earliest_late(
        members: Sequence[tuple[float, int]],
        cutoff: float,
        now: float,
        finish: Callable[[int], float | None],
    ) -> float:
        """The earliest submit (by `now`) of a member unfinished or finished after `cutoff`;
        infinity when there is none. A member finished by the estimate's time is not late (it
        finished before the cutoff), so "late and submitted by then" is "a member missed it"."""
        for submit, index in members:
            if submit > now:
                break
            done = finish(index)
            if done is None or done > cutoff:
                return submit
        return math.inf
