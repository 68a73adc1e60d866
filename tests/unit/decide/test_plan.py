"""`plan_capacity`, the whole decision pass, on the example policy with generated Workloads.

The clock is fixed at Friday 27 November 2026, 20:00 UTC: `vision-research`'s yearly
`cvpr-submission` (27 November, 23:59 Pacific) falls at 07:59 UTC the next morning (11 h 59 min
away) and `nlp-eval`'s nightly cutoff is at 06:00. The "crunch" is 9 pending 8-GPU CVPR
workloads of 3.75 h each: 270 GPU-hours on vision's 24 GPUs of a100 (all spot, since the a100
floor of 16 is all production's reservation), which misses the cutoff with a risk near 0.7.
Around it, `background` adds a seeded mix of pending, running and finished workloads for every
project, as the controller would list them.

Example pools: a100 (spot $1.29, on-demand $4.10, floor 16 = the reservation, warm 0..16) and
h100 (spot $3.90, on-demand $12.29, floor 8 but 16 on-demand only for recsys-prod, warm 8..16).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from controller import names
from controller.api.loader import load_path, load_policy_set, read_documents
from controller.api.policy_set import PolicySet
from controller.capacity import spot_allowed
from controller.decide.boost import LEVELS, boost_step
from controller.decide.mix import Action, Reason
from controller.decide.observation import History, Observation
from controller.decide.plan import CapacityPlan, plan_capacity
from controller.examples import EXAMPLE_DIR
from controller.risk.pools import NodeClaimView
from controller.risk.recalibration import Recalibration, RecalibrationMap
from controller.risk.workloads import WorkloadView

FIXED_NOW = datetime(2026, 11, 27, 20, 0, tzinfo=UTC).timestamp()
HOUR = 3600.0
EXAMPLE = load_path(EXAMPLE_DIR)
NAMESPACES = {p.name: p.spec.namespaces[0] for p in EXAMPLE.projects}


def example(**risk: Any) -> PolicySet:
    """The example policy with some of spec.risk changed."""
    documents, errors = read_documents(EXAMPLE_DIR)
    assert not errors
    for _, doc in documents:
        if doc["kind"] == "CapacityPolicy":
            doc["spec"]["risk"].update(risk)
    return load_policy_set(documents)


BOOSTING = example(priorityBoost=True)


def workload(
    project: str,
    name: str,
    gpus: int,
    *,
    namespace: str | None = None,
    running_on: str | None = None,
    finished: bool = False,
    hours: float | None = None,
    deadline: str | None = None,
    labels: dict[str, str] | None = None,
) -> WorkloadView:
    """A workload of `project` in its queue; `running_on` is the flavor it was admitted to."""
    admitted = running_on is not None or finished
    all_labels = dict(labels or {}) | ({names.LABEL_DEADLINE: deadline} if deadline else {})
    return WorkloadView(
        namespace=namespace or NAMESPACES[project],
        name=name,
        queue=project,
        priority=0,
        gpus=gpus,
        created=FIXED_NOW - 2 * HOUR,
        admitted_at=FIXED_NOW - HOUR if admitted else None,
        finished=finished,
        finished_at=FIXED_NOW - 60 if finished else None,
        cluster_queue=project if admitted else None,
        flavors=(running_on,) if running_on else (),
        expected_duration=hours * HOUR if hours is not None else None,
        deadline=deadline,
        labels=all_labels,
    )


CVPR = {"example.com/paper": "cvpr"}
CRUNCH = [workload("vision-research", f"cvpr-{i}", 8, hours=3.2, labels=CVPR) for i in range(9)]


def background(seed: int) -> list[WorkloadView]:
    """Six workloads per project: pending, running (on a flavor it may use) or finished, 1-8
    GPUs, half annotated with a duration, some labelled with one of the project's deadlines."""
    rng = random.Random(seed)
    out = []
    for project in EXAMPLE.projects:
        pools = [q.pool for q in project.spec.quotas]
        types = names.CAPACITY_TYPES if spot_allowed(EXAMPLE, project) else (names.ON_DEMAND,)
        labelled = [None, *(d.name for d in project.spec.deadlines if not d.match_labels)]
        for i in range(6):
            kind = rng.choice(("pending", "running", "finished"))
            flavor = names.flavor_name(rng.choice(pools), rng.choice(types))
            out.append(
                workload(
                    project.name,
                    f"{project.name}-bg-{i}",
                    rng.choice((1, 2, 4, 8)),
                    namespace=rng.choice(project.spec.namespaces),
                    running_on=flavor if kind == "running" else None,
                    finished=kind == "finished",
                    hours=rng.choice((None, rng.uniform(0.5, 4.0))),
                    deadline=rng.choice(labelled),
                )
            )
    return out


def plan(
    workloads: Sequence[WorkloadView],
    *,
    policy_set: PolicySet = EXAMPLE,
    now: float = FIXED_NOW,
    seed: int = 0,
    claims: Sequence[NodeClaimView] = (),
    states: Any = None,
) -> CapacityPlan:
    return plan_capacity(
        Observation(
            policy_set,
            states=states or {},
            workloads=workloads,
            node_claims=claims,
            history=History(),
            now=now,
            seed=seed,
        )
    )


def counts_toward(policy_set: PolicySet, w: WorkloadView, project: str, deadline: str) -> bool:
    """Written out again from the docs: matchLabels if the deadline has them, else the label."""
    spec = next(p for p in policy_set.projects if p.name == project).spec
    wanted = next(d for d in spec.deadlines if d.name == deadline)
    if wanted.match_labels:
        return all(w.labels.get(k) == v for k, v in wanted.match_labels.items())
    return w.labels.get(names.LABEL_DEADLINE) == deadline


# -------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"world {s}") for s in (1, 2)])
def test_plan_is_deterministic_for_a_seed(seed: int) -> None:
    world = CRUNCH + background(seed)

    first = plan(world, seed=3)
    again = plan(list(world), seed=3)
    other = plan(world, seed=4)

    assert first == again
    assert first.rendered.objects == again.rendered.objects
    risks = {(d.project, d.deadline): d.estimate.risk for d in first.deadlines}
    assert 0.2 < risks[("vision-research", "cvpr-submission")] < 1.0
    assert risks != {(d.project, d.deadline): d.estimate.risk for d in other.deadlines}, (
        "another seed draws other samples"
    )


def test_a_plan_without_wait_predictions_decides_the_same() -> None:
    """The simulator asks for no predicted waits (it publishes no metrics): nothing the
    plan decides, renders or reports otherwise may change."""
    world = [*CRUNCH, *background(2)]
    observation = Observation(
        BOOSTING, states={}, workloads=world, node_claims=[], history=History(), now=FIXED_NOW
    )

    full = plan_capacity(observation)
    lean = plan_capacity(replace(observation, predict_waits=False))

    assert set(full.waits) == {p.name for p in BOOSTING.projects}
    assert lean.waits == {}
    assert replace(lean, waits=full.waits) == full
    assert lean.rendered.objects == full.rendered.objects


# ------------------------------------------------------------------------------- boosts


@pytest.mark.parametrize(
    ("policy_set", "want_boosting"),
    [
        pytest.param(BOOSTING, True, id="with priorityBoost waiting work is ordered by deadline"),
        pytest.param(
            example(priorityBoost=False), False, id="without priorityBoost nothing is boosted"
        ),
    ],
)
def test_boosts_only_lower_waiting_work_by_its_slack(
    policy_set: PolicySet, want_boosting: bool
) -> None:
    running = workload("vision-research", "cvpr-running", 8, running_on="a100-spot", labels=CVPR)
    other = workload("vision-research", "ablation", 8, hours=3.0)
    world = [*CRUNCH, running, other, *background(5)]

    result = plan(world, policy_set=policy_set)

    if not want_boosting:
        assert result.boosts == {}
        return
    step = boost_step(
        policy_set.policy.spec.risk.priority_boost_value,
        (t.priority for t in policy_set.policy.spec.tiers),
    )
    assert step > 0
    pending = {(w.namespace, w.name) for w in world if w.pending}
    assert set(result.boosts) <= pending, "only waiting work carries a boost"
    assert ("vision", "cvpr-running") not in result.boosts, "admitted work carries none"
    assert all(-step * (LEVELS - 1) <= b < 0 for b in result.boosts.values()), (
        "a boost only ever lowers, and by less than the gap to the next tier"
    )
    assert result.boosts[("vision", "ablation")] == -step * (LEVELS - 1), (
        "work that counts toward no deadline can wait longest"
    )
    # The CVPR crunch is due in under 12 hours: its 3.75-hour workloads have some 8 hours of
    # slack, level 2, ahead of the ablation study (level 4) of the same project.
    assert {result.boosts.get(("vision", w.name)) for w in CRUNCH} == {-2 * step}


# ------------------------------------------------------------------------ warm targets


def claim(pool: str, *, ready: bool = True, deleting: bool = False) -> NodeClaimView:
    return NodeClaimView(
        pool=pool,
        capacity_type=names.SPOT,
        created=FIXED_NOW - HOUR,
        ready_at=FIXED_NOW - HOUR + 300 if ready else None,
        deleting=deleting,
    )


NIGHTLY = [workload("nlp-eval", f"eval-{i}", 2, deadline="nightly-eval") for i in range(2)]


@pytest.mark.parametrize(
    ("world", "claims", "want_warm"),
    [
        pytest.param([], [], {"a100": 0, "h100": 8}, id="no demand keeps each pool's minimum"),
        pytest.param(
            NIGHTLY,
            [],
            {"a100": 6, "h100": 8},
            id="4 pending GPUs in a100: upper forecast 4 + 4/2 = 6 GPUs warm",
        ),
        pytest.param(
            NIGHTLY,
            [claim("a100")],
            {"a100": 6, "h100": 8},
            id="a ready idle node does not lower the target: the placeholders may be on it",
        ),
        pytest.param(
            NIGHTLY,
            [claim("a100", ready=False), claim("a100", deleting=True)],
            {"a100": 6, "h100": 8},
            id="nodes not ready or being deleted cover nothing",
        ),
        pytest.param(
            CRUNCH, [], {"a100": 16, "h100": 8}, id="72 pending GPUs are capped at the maximum 16"
        ),
    ],
)
def test_warm_targets(
    world: list[WorkloadView], claims: list[NodeClaimView], want_warm: dict[str, int]
) -> None:
    assert plan(world, claims=claims).warm_targets == want_warm


def test_idle_gpus_are_ready_node_gpus_no_running_workload_uses() -> None:
    """Two ready a100 nodes of 8 and one not ready: 16 up; the nightly's 4 GPUs are pending."""
    got = plan(NIGHTLY, claims=[claim("a100"), claim("a100"), claim("a100", ready=False)])

    assert got.idle_gpus == {"a100": 16.0, "h100": 0.0}


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"world {s}") for s in range(5)])
def test_warm_targets_stay_within_bounds(seed: int) -> None:
    result = plan(CRUNCH[: seed * 2] + background(seed), claims=[claim("h100")] * seed)

    for pool in EXAMPLE.policy.spec.pools:
        warm = result.warm_targets[pool.name]
        if result.shifts[pool.name].waiting_gpus:
            # Placeholders would take nodes the shift waits to see go: none until it is done.
            assert warm == 0
        else:
            assert pool.warm_pool.min_gpus <= warm <= pool.warm_pool.max_gpus


# ---------------------------------------------------------------------- costs, budgets


@pytest.mark.parametrize(
    ("world", "want_flavors", "want_projects"),
    [
        pytest.param(
            [
                workload("llm-pretrain", "pre-1", 16, running_on="a100-spot"),
                workload("llm-pretrain", "pre-2", 8, running_on="h100-on-demand"),
                workload("llm-pretrain", "pre-3", 8),
                workload("llm-pretrain", "pre-4", 8, running_on="a100-spot", finished=True),
            ],
            # 16 * $1.29 = $20.64; 8 * $12.29 = $98.32; pending and finished cost nothing
            {("a100", "spot"): 20.64, ("h100", "on-demand"): 98.32},
            {"llm-pretrain": 118.96},
            id="running workloads cost their GPUs at their flavor's price",
        ),
        pytest.param(
            [
                workload("sandbox", "play", 4, running_on="a100-on-demand"),
                workload("sandbox", "play-2", 2, running_on="h100-spot"),
                workload("interns", "try", 1, running_on="a100-spot"),
            ],
            # 4 * $4.10 = $16.40, 2 * $3.90 = $7.80, 1 * $1.29
            {("a100", "on-demand"): 16.40, ("h100", "spot"): 7.80, ("a100", "spot"): 1.29},
            {"sandbox": 24.20, "interns": 1.29},
            id="each project pays for its own workloads",
        ),
        pytest.param(
            [workload("sandbox", "odd", 4, running_on="b200-spot")],
            {},
            {},
            id="a flavor of no pool costs nothing",
        ),
    ],
)
def test_costs(
    world: list[WorkloadView],
    want_flavors: dict[tuple[str, str], float],
    want_projects: dict[str, float],
) -> None:
    result = plan(world)

    zero = {(p.name, c): 0.0 for p in EXAMPLE.policy.spec.pools for c in names.CAPACITY_TYPES}
    assert result.cost_per_hour == pytest.approx(zero | want_flavors)
    zero_projects = {p.name: 0.0 for p in EXAMPLE.projects}
    assert result.project_cost_per_hour == pytest.approx(zero_projects | want_projects)


@pytest.mark.parametrize(
    ("world", "want_exceeded"),
    [
        pytest.param([], frozenset(), id="nothing running exceeds nothing"),
        pytest.param(
            [workload("interns", "big", 4, running_on="a100-on-demand")],
            frozenset({"interns"}),
            id="interns: 4 * $4.10 * 730 h = $11,972 a month over a $5,000 budget",
        ),
        pytest.param(
            [workload("sandbox", "play", 8, running_on="a100-spot")],
            frozenset(),
            id="sandbox: 8 * $1.29 * 730 h = $7,534 a month within $20,000",
        ),
        pytest.param(
            [workload("llm-pretrain", "big", 32, running_on="h100-on-demand")],
            frozenset(),
            id="llm-pretrain: 32 * $12.29 * 730 h = $287,094 within $350,000",
        ),
        pytest.param(
            [workload("llm-pretrain", "big", 40, running_on="h100-on-demand")],
            frozenset({"llm-pretrain"}),
            id="llm-pretrain: 40 * $12.29 * 730 h = $358,868 over $350,000",
        ),
        pytest.param(
            [workload("vision-research", "big", 24, running_on="a100-on-demand")],
            frozenset(),
            id="a project without a budget never exceeds it",
        ),
    ],
)
def test_budget_exceeded(world: list[WorkloadView], want_exceeded: frozenset[str]) -> None:
    assert plan(world).budget_exceeded == want_exceeded


def test_pending_counts() -> None:
    world = [
        *CRUNCH,
        workload("vision-research", "running", 8, running_on="a100-spot"),
        workload("vision-research", "done", 8, finished=True),
        workload("recsys-prod", "refresh", 4, namespace="recsys-batch"),
        workload("recsys-prod", "stray", 4, namespace="elsewhere"),
        *NIGHTLY,
    ]

    result = plan(world)

    assert result.pending_workloads == {
        "interns": 0,
        "llm-pretrain": 0,
        "nlp-eval": 2,
        "recsys-prod": 1,  # a queue's name in a namespace of no project is not the project
        "sandbox": 0,
        "speech-research": 0,
        "vision-research": 9,
    }
    assert result.pending_gpus["vision-research"] == 72
    assert result.pending_gpus["nlp-eval"] == 4
    assert result.pending_gpus["recsys-prod"] == 4


# -------------------------------------------------------------------- state carry-over


def with_lower_threshold(policy_set: PolicySet, threshold: float) -> PolicySet:
    spec = policy_set.policy.spec
    risk = replace(spec.risk, lower_threshold=threshold)
    policy = replace(policy_set.policy, spec=replace(spec, risk=risk))
    return PolicySet(policy, policy_set.projects)


def test_states_carry_the_decision_over_passes() -> None:
    world = CRUNCH + background(3)
    # The crunch's risk at 32 on-demand GPUs is about 0.05, the example's lower threshold, so
    # which side of it the samples land on is chance: a threshold of 0.1 puts it clearly under.
    policy_set = with_lower_threshold(EXAMPLE, 0.1)

    first = plan(world, policy_set=policy_set)
    second = plan(world, policy_set=policy_set, states=first.states, now=FIXED_NOW + 600)
    fresh = plan(world, policy_set=policy_set, now=FIXED_NOW + 600)
    third = plan(world, policy_set=policy_set, states=second.states, now=FIXED_NOW + 660)
    fourth = plan(world, policy_set=policy_set, states=third.states, now=FIXED_NOW + 1200)

    a100 = [{d.pool: d for d in p.decisions}["a100"] for p in (first, second, fresh, third, fourth)]
    assert (a100[0].action, a100[0].reason) == (Action.HOLD, Reason.EVALUATION_WINDOW)
    assert a100[0].state.raise_since == FIXED_NOW
    # One window later the same episode raises: up one step of 16 from the floor of 16, which
    # brings the crunch under the lower threshold (risk about 0.05), so the raise timer stops
    # and the lower one starts.
    assert a100[1].action == Action.RAISE
    assert (a100[1].previous, a100[1].target) == (16, 32)
    assert (a100[1].state.raise_since, a100[1].state.lower_since) == (None, FIXED_NOW + 600)
    assert a100[1].state.last_change == FIXED_NOW + 600
    assert a100[1].state.assignments["vision-research"] == 16
    assert {m.pool: m.on_demand_gpus for m in second.rendered.mix}["a100"] == 32
    assert second.targets["a100"].assignments == {"vision-research": 16}
    # Without the state, the window starts over.
    assert (a100[2].action, a100[2].state.raise_since) == (Action.HOLD, FIXED_NOW + 600)
    # A minute later the lower threshold's window runs: nothing moves.
    assert (a100[3].action, a100[3].reason, a100[3].target) == (
        Action.HOLD,
        Reason.EVALUATION_WINDOW,
        32,
    )
    # Ten minutes on the lower threshold's window has run, but the cooldown (30 minutes from
    # the raise) has not: the pool keeps what it raised.
    assert (a100[4].action, a100[4].reason, a100[4].previous, a100[4].target) == (
        Action.HOLD,
        Reason.COOLDOWN,
        32,
        32,
    )
    assert a100[4].state.assignments == {"vision-research": 16}


# ------------------------------------------------------------------------ lost deadlines


def demoting(tier: str) -> PolicySet:
    """The boosting example policy with `demoteLost` on for one tier."""
    documents, errors = read_documents(EXAMPLE_DIR)
    assert not errors
    for _, doc in documents:
        if doc["kind"] == "CapacityPolicy":
            doc["spec"]["risk"]["priorityBoost"] = True
            for entry in doc["spec"]["tiers"]:
                if entry["name"] == tier:
                    entry["demoteLost"] = True
    return load_policy_set(documents)


@pytest.mark.parametrize(
    ("policy_set", "want_demoted"),
    [
        pytest.param(BOOSTING, False, id="demoteLost off: reported, not demoted"),
        pytest.param(demoting("research"), True, id="demoteLost on: reported and demoted"),
        pytest.param(demoting("production"), False, id="another tier demotes: not this one"),
    ],
)
def test_lost_work_is_reported_in_every_tier_and_demoted_only_where_the_tier_says(
    policy_set: PolicySet, want_demoted: bool
) -> None:
    """A 20-hour CVPR job due in under 12 hours is lost (some 2 % at the spread of a declared
    runtime); the 3.2-hour crunch is savable."""
    hopeless = workload("vision-research", "cvpr-hopeless", 8, hours=20.0, labels=CVPR)
    result = plan([*CRUNCH, hopeless], policy_set=policy_set)

    key = ("vision", "cvpr-hopeless")
    assert set(result.lost) == {key}, "the savable crunch is not lost"
    assert result.lost[key] < policy_set.policy.spec.risk.lost_below == 0.05
    judged = result.lost_deadlines[key]
    assert (judged.project, judged.deadline) == ("vision-research", "cvpr-submission")
    assert judged.cutoff == next(
        d.cutoff for d in result.deadlines_of("vision-research") if d.deadline == "cvpr-submission"
    )
    step = boost_step(
        policy_set.policy.spec.risk.priority_boost_value,
        (t.priority for t in policy_set.policy.spec.tiers),
    )
    # Undemoted its slack is negative: the most urgent level, no boost at all.
    assert result.boosts.get(key) == (-step * (LEVELS - 1) if want_demoted else None)


# -------------------------------------------------------------------------- moves off spot


def stranded(flavor: str = "a100-spot", *, pods_waiting: bool = True) -> WorkloadView:
    """A 6-hour, 8-GPU CVPR workload admitted 10 minutes ago; its pods wait for a node."""
    view = workload("vision-research", "cvpr-stranded", 8, running_on=flavor, hours=6.0)
    return replace(
        view,
        labels=CVPR,
        admitted_at=FIXED_NOW - 600,
        pods_waiting=pods_waiting,
    )


def planned_with(view: WorkloadView, shortage_seconds: float) -> CapacityPlan:
    return plan_capacity(
        Observation(
            EXAMPLE,
            states={},
            workloads=[view],
            node_claims=(),
            history=History(),
            now=FIXED_NOW,
            spot_shortages={"a100": shortage_seconds},
        )
    )


def test_a_deadline_workload_stranded_on_spot_in_a_shortage_is_moved_to_on_demand() -> None:
    """CVPR is due in 11 h 59 min (43,140 s); the workload's runtime at 95 % is 6 h x
    exp(1.645 x 0.25 - 0.25^2 / 2) = 31,584 s. In a 4-hour shortage spot needs that and
    14,400 s more: too late; on-demand needs a launch on top: in time. Vision's spot quota
    it leaves idle (16 of 24) is held on-demand for it, so the move has room."""
    moved = planned_with(stranded(), shortage_seconds=4 * HOUR)
    lane = moved.lanes[(NAMESPACES["vision-research"], "cvpr-stranded")]
    assert lane.move
    assert lane.capacity_type == names.ON_DEMAND
    assert lane.needed_on_spot > 43_140 >= lane.needed_on_demand
    assert "its pods waited 600s for a node" in lane.reason
    assert moved.rendered.quotas[("vision-research", "a100")].on_demand_gpus >= 8


@pytest.mark.parametrize(
    ("view", "shortage_seconds"),
    [
        pytest.param(stranded(), 0.0, id="no shortage: its node is due"),
        pytest.param(stranded(pods_waiting=False), 4 * HOUR, id="its pods run"),
        pytest.param(stranded("a100-on-demand"), 4 * HOUR, id="admitted on on-demand"),
    ],
)
def test_admitted_work_that_is_not_stranded_on_spot_is_never_moved(
    view: WorkloadView, shortage_seconds: float
) -> None:
    assert not planned_with(view, shortage_seconds).lanes


# ---------------------------------------------------------------- calibrated decisions


def scaled(factor: float) -> Recalibration:
    """A recalibration learned with full weight that maps each raw risk r to factor * r."""
    return Recalibration(pooled=RecalibrationMap(xs=(0.0, 1.0), ys=(0.0, factor), weight=1.0))


@pytest.mark.parametrize(
    ("recalibration", "factor", "raises"),
    [
        pytest.param(None, 1.0, True, id="nothing learned: the raw risk, above 0.2"),
        pytest.param(scaled(0.25), 0.25, False, id="a quarter of such deadlines missed: under 0.2"),
        pytest.param(scaled(1.0), 1.0, True, id="learned that the raw risk is right"),
    ],
)
def test_the_mix_is_decided_on_the_calibrated_risk(
    recalibration: Recalibration | None, factor: float, raises: bool
) -> None:
    """The crunch's raw risk is between 0.2 and 1 (`test_plan_is_deterministic_for_a_seed`):
    above the raise threshold of 0.2 it starts the raise window; a map learned from outcomes
    that says a quarter of such deadlines were missed puts it under 0.25, and at most 0.25 x
    the raw worst is under 0.2 only if the raw worst is under 0.8, which the test checks. The
    estimates the plan reports stay raw (the calibrated gauge is the learning's)."""
    world = CRUNCH + background(3)
    observation = Observation(
        EXAMPLE, states={}, workloads=world, node_claims=[], history=History(), now=FIXED_NOW
    )
    raw = plan_capacity(observation)
    decided = plan_capacity(replace(observation, recalibration=recalibration))

    raw_worst = {d.pool: d for d in raw.decisions}["a100"].inputs["worst_risk"]
    a100 = {d.pool: d for d in decided.decisions}["a100"]
    assert 0.2 < raw_worst < 0.8
    assert a100.inputs["worst_risk"] == pytest.approx(factor * raw_worst)
    assert (a100.state.raise_since == FIXED_NOW) is raises
    assert [d.estimate for d in decided.deadlines] == [d.estimate for d in raw.deadlines]
