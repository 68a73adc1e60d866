"""Priority boosts in the Kueue model: the cycle the old rule made, and none under the new one.

One ClusterQueue `vision` preempting `withinClusterQueue: LowerPriority`, with quota for one
8-GPU workload on one flavor; two 8-GPU workloads of the same project and base priority (0),
`a` admitted and `b` pending. Each round is one pass of the controller as the replay plays it:
the rendered queues are applied again (`Kueue.reconfigure`, which puts set-aside workloads back
in line, as the replay's `_apply` does every pass), the boosts of the rule are written (the
annotation on pending work, none on admitted work), and Kueue schedules.

The old rule (real Kueue showed it: issue 11 §1) boosted a pending at-risk workload by +1000
and dropped the boost once it was admitted. Both workloads are at risk, so the pending one
always outranks the admitted one (1000 > 0) and evicts it; the evicted one is then pending and
at risk, is boosted in turn, and evicts the other on the next pass: one eviction per round,
for ever. The rule in `controller.decide.boost` only lowers pending work (boosts <= 0), so the
pending workload never outranks an admitted one of the same base priority: no eviction at all,
whatever the slacks.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

import pytest

from controller.decide.boost import LEVELS, boost_step, deadline_boosts, urgency_level
from controller.decide.observation import History, Observation
from controller.decide.plan import plan_capacity
from controller.sim.kueue import (
    LOWER_PRIORITY,
    FlavorQuota,
    Kueue,
    QueueSpec,
    Workload,
)
from tests.unit.decide.test_plan import BOOSTING, CRUNCH, FIXED_NOW, background

FLAVOR = "a100-spot"
ROUNDS = 20
ROUND_SECONDS = 900.0
A, B = 0, 1
QUEUES = [
    QueueSpec(
        name="vision",
        cohort=None,
        flavors=(FLAVOR,),
        quotas={FLAVOR: FlavorQuota(nominal=8)},
        within_cluster_queue=LOWER_PRIORITY,
    )
]
STEP = boost_step(1000, (1000, 100))
"""The step of the default policy's tiers (1000 and 100): (900 - 1) // 4 = 224."""

BoostRule = Callable[[Kueue, float], dict[int, int]]
"""Round start time -> the boost the rule gives each workload (key -> boost)."""


def one_admitted() -> Kueue:
    """`a` admitted at 0 (it came first), `b` pending behind it."""
    kueue = Kueue(QUEUES, [])
    kueue.submit(Workload(key=A, queue="vision", gpus=8, priority=0, created=0.0))
    kueue.submit(Workload(key=B, queue="vision", gpus=8, priority=0, created=1.0, queued_at=1.0))
    admissions = kueue.schedule(now=0.0)
    assert [(x.key, x.victims) for x in admissions] == [(A, ())]
    return kueue


def run_rounds(kueue: Kueue, rule: BoostRule) -> tuple[int, list[int]]:
    """ROUNDS passes: re-apply the queues, write the rule's boosts, schedule. Returns the
    evictions and which workload held the quota after each round."""
    evictions = 0
    holders = []
    for i in range(ROUNDS):
        now = ROUND_SECONDS * (i + 1)
        kueue.reconfigure(QUEUES, [])
        for key, boost in rule(kueue, now).items():
            kueue.set_boost(key, boost)
        for admission in kueue.schedule(now=now):
            evictions += len(admission.victims)
        (holder,) = kueue.admitted("vision")
        holders.append(holder.key)
    return evictions, holders


def old_rule(kueue: Kueue, now: float) -> dict[int, int]:
    """+1000 on pending at-risk work (both are at risk), dropped once admitted."""
    return {key: 0 if w.admitted_at is not None else 1000 for key, w in kueue.workloads.items()}


def new_rule(slack: Mapping[int, float | None]) -> BoostRule:
    """`controller.decide.boost` on pending work only; admitted work carries none. `slack` is
    each workload's slack at time 0; it shrinks as time passes."""

    def rule(kueue: Kueue, now: float) -> dict[int, int]:
        pending: dict[tuple[str, str], float | None] = {}
        for key, workload in kueue.workloads.items():
            if workload.admitted_at is None:
                at_start = slack[key]
                pending[("ns", str(key))] = None if at_start is None else at_start - now
        boosts = deadline_boosts(pending, step=STEP)
        return {key: boosts.get(("ns", str(key)), 0) for key in kueue.workloads}

    return rule


def test_the_old_positive_boost_evicts_every_round() -> None:
    """Round 1: b (1000) evicts a (0) and takes the quota; a, pending and at risk, is boosted
    and evicts b in round 2; and so on: 20 rounds, 20 evictions, the quota changing hands each
    time (b, a, b, a, ...)."""
    evictions, holders = run_rounds(one_admitted(), old_rule)

    assert evictions == ROUNDS
    assert holders == [B, A] * (ROUNDS // 2)


@pytest.mark.parametrize(
    "slack",
    [
        pytest.param({A: 3600.0 * 100, B: 60.0}, id="the pending one far tighter (level 0)"),
        pytest.param({A: 60.0, B: 3600.0 * 100}, id="the admitted one tighter"),
        pytest.param({A: None, B: -3600.0}, id="the pending one already late"),
        pytest.param({A: 5 * 3600.0, B: 5 * 3600.0}, id="equal slacks"),
        pytest.param({A: None, B: None}, id="no deadlines at all"),
        pytest.param({A: 3 * 3600.0, B: 20 * 3600.0}, id="slacks crossing levels as time passes"),
    ],
)
def test_the_new_boost_never_evicts(slack: dict[int, float | None]) -> None:
    """Every boost is <= 0 and only on pending work, so b's effective priority is at most 0,
    a's exactly 0: LowerPriority lets no one of them evict the other. a keeps the quota."""
    evictions, holders = run_rounds(one_admitted(), new_rule(slack))

    assert evictions == 0
    assert holders == [A] * ROUNDS


def test_the_new_boost_never_evicts_on_random_slacks() -> None:
    """The same on 200 random pairs of slacks, from late to a week ahead."""
    pick = random.Random(3)
    for _ in range(200):
        slack: dict[int, float | None] = {
            k: pick.choice([None, pick.uniform(-3600.0, 7 * 86400.0)]) for k in (A, B)
        }
        evictions, _ = run_rounds(one_admitted(), new_rule(slack))
        assert evictions == 0, slack


# --------------------------------------------------------------------------- the decision


@pytest.mark.parametrize(
    ("slack", "want"),
    [
        pytest.param(None, -4 * STEP, id="no deadline: the lowest level, 4 steps down"),
        pytest.param(-100.0, 0, id="late: level 0, no boost"),
        pytest.param(3599.0, 0, id="under an hour: level 0"),
        pytest.param(3600.0, -STEP, id="an hour: level 1"),
        pytest.param(4 * 3600.0 - 1, -STEP, id="just under 4 hours: level 1"),
        pytest.param(4 * 3600.0, -2 * STEP, id="4 hours: level 2"),
        pytest.param(16 * 3600.0, -3 * STEP, id="16 hours: level 3"),
        pytest.param(64 * 3600.0, -4 * STEP, id="64 hours: level 4"),
        pytest.param(1e9, -4 * STEP, id="decades: still level 4"),
    ],
)
def test_the_boost_ladder(slack: float | None, want: int) -> None:
    assert deadline_boosts({("ns", "w"): slack}, step=STEP).get(("ns", "w"), 0) == want


def test_the_ladder_stays_within_the_gap_between_tiers() -> None:
    """(900 - 1) // 4 = 224 a level: the lowest level, -896, keeps a production workload
    (1000) above research (100)."""
    assert STEP == 224
    assert 1000 - (LEVELS - 1) * STEP > 100


def test_no_boost_is_positive_whatever_the_slack() -> None:
    """A property of the rule: over random slacks and steps, every boost is in
    [-(LEVELS - 1) * step, 0), only non-zero boosts are returned, and a boost never rises as
    slack shrinks (the urgency level is monotone in slack)."""
    pick = random.Random(5)
    for _ in range(500):
        step = pick.randint(0, 500)
        slack = {
            ("ns", f"w{i}"): pick.choice([None, pick.uniform(-86400.0, 30 * 86400.0)])
            for i in range(10)
        }
        boosts = deadline_boosts(slack, step=step)
        assert set(boosts) <= set(slack)
        for key, boost in boosts.items():
            assert -(LEVELS - 1) * step <= boost < 0, (key, boost)
    levels = [urgency_level(s) for s in sorted(pick.uniform(-1e5, 1e7) for _ in range(500))]
    assert levels == sorted(levels)


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"world {s}") for s in range(6)])
def test_a_pass_never_boosts_up_and_never_boosts_admitted_work(seed: int) -> None:
    """The whole pass (`plan_capacity`) on the example policy with boosts on: the CVPR crunch
    and a seeded mix of pending, running and finished workloads of every project. No boost is
    positive, none is on a workload that is not pending, and none lowers past the ladder."""
    world = CRUNCH[: 2 * seed] + background(seed)
    plan = plan_capacity(
        Observation(
            BOOSTING, states={}, workloads=world, node_claims=(), history=History(), now=FIXED_NOW
        )
    )
    step = boost_step(
        BOOSTING.policy.spec.risk.priority_boost_value,
        (t.priority for t in BOOSTING.policy.spec.tiers),
    )
    pending = {(w.namespace, w.name) for w in world if w.pending}
    assert plan.boosts, "the crunch and the background give some waiting work a boost"
    assert set(plan.boosts) <= pending
    assert all(-(LEVELS - 1) * step <= b < 0 for b in plan.boosts.values())
