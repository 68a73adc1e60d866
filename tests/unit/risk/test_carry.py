"""Estimates carried from one pass to the next (`RiskModel.carry`, `Carried`).

`test_plan`'s world: the example policy at a fixed clock, the CVPR crunch and a seeded
background. Carrying must never change an answer at the same clock, and must make one fresh
only where something it came from changed.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.decide.observation import Carry, History, Observation
from controller.decide.plan import plan_capacity
from controller.risk.deadline import Estimate
from controller.risk.model import (
    CARRY_MAX_AGE_SECONDS,
    Carried,
    DeadlineReport,
    RiskModel,
    Snapshot,
)
from controller.risk.pools import pool_stats
from controller.risk.workloads import WorkloadView
from tests.unit.decide.test_plan import CRUNCH, EXAMPLE, FIXED_NOW, background, workload

WORLD = list(CRUNCH + background(3))


def model(
    now: float, workloads: list[WorkloadView] | None = None, carried: Carried | None = None
) -> RiskModel:
    snapshot = Snapshot(
        policy_set=EXAMPLE,
        quotas={},
        workloads=workloads if workloads is not None else WORLD,
        pools=pool_stats(EXAMPLE.policy.spec.pools, [], now=now),
        now=now,
    )
    return RiskModel(snapshot, carried=carried)


def vision(reports: list[DeadlineReport]) -> Estimate:
    return next(r.estimate for r in reports if r.project == "vision-research")


FIRST = model(FIXED_NOW)
FIRST_REPORTS = FIRST.deadlines()
CARRIED = FIRST.carry()


def test_at_the_same_clock_carried_estimates_are_the_fresh_ones() -> None:
    again = model(FIXED_NOW, carried=CARRIED).deadlines()
    assert again == FIRST_REPORTS


@pytest.mark.parametrize(
    ("seconds", "workloads", "carried"),
    [
        pytest.param(30, None, True, id="30 s later, nothing changed: carried"),
        pytest.param(CARRY_MAX_AGE_SECONDS, None, False, id="a minute later: made again"),
        pytest.param(-1, None, False, id="the clock went back: made again"),
        pytest.param(
            30,
            [*WORLD, workload("vision-research", "one-more", 8, hours=1.0)],
            False,
            id="a new workload of the project: made again",
        ),
        pytest.param(
            30,
            [replace(w, name=w.name) if w.queue == "vision-research" else w for w in WORLD],
            False,
            id="the same workloads read again (new views): made again",
        ),
    ],
)
def test_an_estimate_is_carried_only_while_what_it_came_from_is_the_same(
    seconds: float, workloads: list[WorkloadView] | None, carried: bool
) -> None:
    later = model(FIXED_NOW + seconds, workloads, CARRIED)
    estimate = vision(later.deadlines())
    fresh = vision(model(FIXED_NOW + seconds, workloads).deadlines())
    if carried:
        assert estimate == vision(FIRST_REPORTS)  # made 30 s ago, kept
        assert estimate != fresh  # a pass made afresh would have moved with the clock
    else:
        assert estimate == fresh


def test_other_projects_are_carried_when_one_project_changes() -> None:
    changed = [*WORLD, workload("vision-research", "one-more", 8, hours=1.0)]
    later = model(FIXED_NOW + 30, changed, CARRIED).deadlines()
    before = {(r.project, r.deadline): r.estimate for r in FIRST_REPORTS}
    kept = {
        (r.project, r.deadline)
        for r in later
        if r.project != "vision-research" and r.estimate == before[(r.project, r.deadline)]
    }
    others = {k for k in before if k[0] != "vision-research"}
    assert kept == others


def test_a_plan_with_the_last_pass_carried_decides_as_one_without_at_the_same_clock() -> None:
    seen = Observation(
        EXAMPLE, states={}, workloads=WORLD, node_claims=(), history=History(), now=FIXED_NOW
    )
    first = plan_capacity(seen)
    assert isinstance(first.carried, Carry)
    again = plan_capacity(replace(seen, carried=first.carried))
    assert again.decisions == first.decisions
    assert again.deadlines == first.deadlines
    assert again.waits == first.waits
    assert again.rendered is first.rendered  # same targets: the very same objects
