"""Lost work behind savable work: the order that holds under overload, hand-computed.

Earliest-deadline-first collapses under overload: work already late goes first and makes
savable work late too. Here a queue of one 8-GPU slot, hour-long jobs, and deadlines such that
EDF without demotion misses more than FIFO, while the new order (lost work last) does not.
"""

from __future__ import annotations

import pytest

from controller.decide.boost import deadline_boosts, demoted
from controller.risk.urgency import LEVELS, chance_to_finish, urgency_level


@pytest.mark.parametrize(
    ("time_left", "mean", "sigma", "chance"),
    [
        # Median 5 h x exp(-0.25^2/2) = 4.846 h; due in 4.5 h: z = ln(4.5/4.846)/0.25 = -0.297.
        (4.5 * 3600, 5 * 3600, 0.25, 0.3834),
        # Due in 3 h: z = ln(3/4.846)/0.25 = -1.918.
        (3 * 3600, 5 * 3600, 0.25, 0.0275),
        (0.0, 3600, 0.25, 0.0),
        (7200, 3600, 0.0, 1.0),
        (3000, 3600, 0.0, 0.0),
    ],
)
def test_the_chance_to_finish_from_the_runtime_spread(
    time_left: float, mean: float, sigma: float, chance: float
) -> None:
    assert chance_to_finish(time_left, mean, sigma) == pytest.approx(chance, abs=1e-4)


def test_a_point_estimate_would_call_savable_work_lost() -> None:
    """Slack -0.5 h on the mean, yet 38 % to make it: not lost at lostBelow 0.05."""
    assert 4.5 * 3600 - 5 * 3600 < 0
    assert chance_to_finish(4.5 * 3600, 5 * 3600, 0.25) > 0.05


def test_demoted_work_takes_the_last_level() -> None:
    slack = {("ns", "late"): -3600.0, ("ns", "soon"): 1800.0, ("ns", "none"): None}
    plain = deadline_boosts(slack, step=100)
    assert plain == {("ns", "none"): -400}  # late and soon are both level 0: first in line
    new = deadline_boosts(slack, step=100, demoted={("ns", "late")})
    assert new == {("ns", "late"): -100 * (LEVELS - 1), ("ns", "none"): -400}
    assert urgency_level(-3600.0) == 0


def test_demotion_ends_after_the_bound_so_nothing_starves() -> None:
    lost = {("ns", "old"): 0.0, ("ns", "new"): 0.01}
    created = {("ns", "old"): 0.0, ("ns", "new"): 90_000.0}
    assert demoted(lost, created, now=100_000.0, max_wait_seconds=86_400) == {("ns", "new")}
    assert demoted(lost, created, now=100_000.0, max_wait_seconds=0) == frozenset()


def schedule(
    jobs: list[tuple[str, float, float]], order: str, *, lost_below: float = 0.05
) -> list[str]:
    """One slot, jobs of `(name, runtime, deadline)` all waiting at 0, run one after another
    in the order given: `fifo` (as listed), `edf` (earliest deadline first), `edf-demote`
    (EDF, lost ones last, judged at each start by the chance to finish if started then, with
    the runtime's spread 0.25). The names of those that miss."""
    waiting = list(jobs)
    now, missed = 0.0, []
    while waiting:
        if order == "fifo":
            pick = waiting[0]
        else:
            by_deadline = sorted(waiting, key=lambda j: j[2])
            if order == "edf-demote":
                savable = [
                    j for j in by_deadline if chance_to_finish(j[2] - now, j[1], 0.25) >= lost_below
                ]
                pick = (savable or by_deadline)[0]
            else:
                pick = by_deadline[0]
        waiting.remove(pick)
        now += pick[1]
        if now > pick[2]:
            missed.append(pick[0])
    return missed


def test_under_overload_edf_loses_to_fifo_and_the_new_order_does_not() -> None:
    """`a` is already lost (a 2 h job due in 1 h); `b`, `c` and `d` are savable, hour-long,
    due at 2, 3 and 3.5 h. EDF runs `a` first (earliest deadline): 0-2 h, then b ends at 3 h
    (late), c at 4 h (late), d at 5 h (late): four misses. FIFO listed as b, c, d, a: b at 1 h,
    c at 2 h, d at 3 h, a at 5 h: one miss. With lost work last, `a` (chance to finish in
    1 h: 0.3 %) goes after the savable three: one miss, as FIFO."""
    jobs = [("b", 3600.0, 7200.0), ("c", 3600.0, 10800.0), ("d", 3600.0, 12600.0)]
    lost = ("a", 7200.0, 3600.0)
    assert chance_to_finish(3600.0, 7200.0, 0.25) < 0.05

    assert schedule([lost, *jobs], "edf") == ["a", "b", "c", "d"]
    assert schedule([*jobs, lost], "fifo") == ["a"]
    assert schedule([lost, *jobs], "edf-demote") == ["a"]
