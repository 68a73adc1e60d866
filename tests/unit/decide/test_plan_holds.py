"""`plan_holds`: when a pass may keep the last plan instead of deciding again.

The world is `test_plan`'s: the example policy at a fixed clock (Friday 20:00 UTC), the CVPR
crunch and a seeded background. The first pass opens a100's evaluation window (raise_since =
FIXED_NOW, window 600 s) and changes no mix; the pass 10 s later starts from that state, so its
plan has a timer due at FIXED_NOW + 600. Without any state the first moment the clock alone
matters is the earliest deadline cutoff: `nlp-eval`'s nightly 06:00 UTC, 10 h away.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

import pytest

from controller.decide.mix import Action, PoolState
from controller.decide.observation import History, Observation
from controller.decide.plan import (
    PLAN_MAX_AGE_SECONDS,
    CapacityPlan,
    plan_capacity,
    plan_due,
    plan_holds,
)
from tests.unit.decide.test_plan import CRUNCH, EXAMPLE, FIXED_NOW, background, workload

HOUR = 3600.0
WORLD = tuple(CRUNCH + background(3))


def seen(now: float, *, states: Mapping[str, PoolState] | None = None) -> Observation:
    return Observation(
        EXAMPLE,
        states=states or {},
        workloads=WORLD,
        node_claims=(),
        history=History(),
        now=now,
    )


FIRST = plan_capacity(seen(FIXED_NOW))
SECOND = plan_capacity(seen(FIXED_NOW + 10, states=FIRST.states))
RAISED = plan_capacity(seen(FIXED_NOW + 600, states=SECOND.states))


def test_the_worlds_are_what_the_cases_assume() -> None:
    assert not any(d.changed for d in (*FIRST.decisions, *SECOND.decisions))
    assert SECOND.states["a100"].raise_since == FIXED_NOW
    assert {d.pool: d.action for d in RAISED.decisions}["a100"] == Action.RAISE


def test_due_is_the_first_timer_or_cutoff_after_the_pass() -> None:
    assert plan_due(FIRST) == FIXED_NOW + 10 * HOUR  # nlp-eval's nightly cutoff
    assert plan_due(SECOND) == FIXED_NOW + 600  # a100's evaluation window ends


Change = Callable[[Observation], Observation]


def later(seconds: float) -> Change:
    return lambda o: replace(o, now=FIXED_NOW + 10 + seconds)


def one_more_workload(o: Observation) -> Observation:
    extra = workload("nlp-eval", "late-arrival", 2, hours=1.0)
    return replace(o, now=o.now + 5, workloads=(*o.workloads, extra))


def one_workload_grown(o: Observation) -> Observation:
    items = list(o.workloads)
    items[0] = replace(items[0], gpus=items[0].gpus + 8)
    return replace(o, now=o.now + 5, workloads=tuple(items))


def state_forgotten(o: Observation) -> Observation:
    return replace(o, now=o.now + 5, states={})


@pytest.mark.parametrize(
    ("previous", "change", "max_age", "holds"),
    [
        pytest.param(SECOND, later(0), PLAN_MAX_AGE_SECONDS, True, id="same world, same second"),
        pytest.param(SECOND, later(30), PLAN_MAX_AGE_SECONDS, True, id="same world, 30 s on"),
        pytest.param(
            SECOND, later(PLAN_MAX_AGE_SECONDS), PLAN_MAX_AGE_SECONDS, False, id="too old"
        ),
        pytest.param(SECOND, later(-1), PLAN_MAX_AGE_SECONDS, False, id="the clock went back"),
        pytest.param(SECOND, later(589), 10_000.0, True, id="a second before the window ends"),
        pytest.param(SECOND, later(590), 10_000.0, False, id="the window ends"),
        pytest.param(FIRST, later(10 * HOUR), 1e9, False, id="a deadline's cutoff passes"),
        pytest.param(SECOND, one_more_workload, PLAN_MAX_AGE_SECONDS, False, id="new workload"),
        pytest.param(SECOND, one_workload_grown, PLAN_MAX_AGE_SECONDS, False, id="changed one"),
        pytest.param(SECOND, state_forgotten, PLAN_MAX_AGE_SECONDS, False, id="other state"),
        pytest.param(RAISED, lambda o: replace(o, now=o.now + 5), 1e9, False, id="it moved a mix"),
    ],
)
def test_plan_holds(previous: CapacityPlan, change: Change, max_age: float, holds: bool) -> None:
    assert previous.observation is not None
    assert plan_holds(previous, change(previous.observation), max_age_seconds=max_age) is holds


def test_no_previous_plan_never_holds() -> None:
    assert not plan_holds(None, seen(FIXED_NOW))


def test_a_plan_that_holds_is_the_plan_a_pass_would_make_but_for_estimate_drift() -> None:
    """What standing for the next pass means: the same decisions, targets and objects."""
    assert SECOND.observation is not None
    later_seen = replace(SECOND.observation, now=SECOND.observation.now + 30)
    assert plan_holds(SECOND, later_seen)
    again = plan_capacity(later_seen)
    # Only a message that counts the seconds in the window differs.
    assert [(d.action, d.reason, d.previous, d.target, d.state) for d in again.decisions] == [
        (d.action, d.reason, d.previous, d.target, d.state) for d in SECOND.decisions
    ]
    assert again.targets == SECOND.targets
    assert again.rendered == SECOND.rendered
    assert again.boosts.keys() == SECOND.boosts.keys()
