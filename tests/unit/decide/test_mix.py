"""`decide_pool`, one pool's on-demand decision, against a risk model whose answers we choose.

The risk oracle in these tests is a plain function of (project, pool, on-demand share): a fake
of the risk model (`RiskModel.oracle`), not of any API. Most are staircases of the share, so the
share that meets a target is known exactly and the bisection can be checked against it.

Unless a case says otherwise: pool `a100` of `tests.builders` with floor 0 and ceiling 64 (spot
$1, on-demand $4 a GPU-hour) on nodes of one GPU, so that share boundaries show exactly (the
rounding to whole nodes has cases of its own), project `vision` in tier `production` (priority
1000; `research` is 100) holding 32 GPUs of it with one deadline `release` at targetConfidence
0.95, and the default risk settings: raise above 0.2, lower under 0.05, evaluation window
600 s, cooldown 1800 s, at most 16 GPUs a step. The deadline's target is min(1 - 0.95, 0.2) = 0.05.

Cases marked `KNOWN_BUG` assert the behaviour we want but do not have yet; they are strict
xfails, so fixing the bug makes them fail until the mark is removed.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from controller.api.loader import load_policy_set
from controller.api.policy_set import PolicySet
from controller.capacity import resolve_mix, split_quotas
from controller.decide.mix import (
    MAX_FLAPS,
    Action,
    Decision,
    PoolState,
    Reason,
    RiskOracle,
    decide_pool,
)
from tests.builders import policy_doc, pool_doc, project_doc

Doc = dict[str, Any]
Levels = tuple[tuple[int, float], ...]
"""A staircase: (from this share on, this risk), shares ascending."""

FIXED_NOW = 1_800_000_000.0
WINDOW = 600.0
COOLDOWN = 1800.0
DAY = 86400.0
STEP = 60.0
RELEASE = {"name": "release", "at": "2027-03-01T00:00:00Z"}


def KNOWN_BUG(reason: str) -> pytest.MarkDecorator:  # noqa: N802 - reads as a marker
    """A case asserting the right behaviour that the code does not have yet (see reason)."""
    return pytest.mark.xfail(reason=reason, strict=True, raises=AssertionError)


def level(levels: Levels, share: int) -> float:
    """The risk of a staircase at `share`."""
    risk = levels[0][1]
    for start, value in levels:
        if share >= start:
            risk = value
    return risk


@dataclass
class FakeRisk:
    """A fake of the risk model's oracle: per project and deadline, a staircase of the share.

    It records every question, so tests can see what the bisection asked.
    """

    levels: Mapping[str, Mapping[str, Levels]]
    calls: list[tuple[str, str, int]] = field(default_factory=list)

    def __call__(self, project: str, pool: str, share: int) -> dict[str, float]:
        self.calls.append((project, pool, share))
        return {name: level(steps, share) for name, steps in self.levels.get(project, {}).items()}


def release(*steps: tuple[int, float]) -> dict[str, Levels]:
    """The staircase of a project's single deadline `release`."""
    return {"release": tuple(steps)}


POOL = pool_doc(gpusPerNode=1, onDemand={"floorGpus": 0, "ceilingGpus": 64})


def pool(floor: int = 0, ceiling: int = 64, per_node: int = 1) -> Doc:
    return pool_doc(gpusPerNode=per_node, onDemand={"floorGpus": floor, "ceilingGpus": ceiling})


def project(
    name: str = "vision", nominal: int = 32, *, deadlines: Sequence[Doc] = (RELEASE,), **spec: Any
) -> Doc:
    quotas = spec.pop("quotas", [{"pool": "a100", "nominalGpus": nominal}])
    return project_doc(name, quotas=quotas, deadlines=list(deadlines), **spec)


def load(
    *projects: Doc, pools: Sequence[Doc] = (POOL,), risk: Doc | None = None, **spec: Any
) -> PolicySet:
    policy = policy_doc(pools=list(pools), risk=risk or {}, **spec)
    return load_policy_set(
        [("policy.yaml", policy), *((f"project-{i}.yaml", p) for i, p in enumerate(projects))]
    )


DEFAULT = load(project())
EIGHT_GPU_NODES = load(project(), pools=[pool(per_node=8)])


def state(
    on_demand: int = 0,
    assignments: Mapping[str, int] | None = None,
    *,
    raise_since: float | None = None,
    lower_since: float | None = None,
    last_change: float | None = None,
    deferred: tuple[str, ...] = (),
    pool: str = "a100",
    last_lower: float | None = None,
    flaps: int = 0,
) -> PoolState:
    return PoolState(
        pool=pool,
        on_demand_gpus=on_demand,
        assignments=dict(assignments or {}),
        raise_since=raise_since,
        lower_since=lower_since,
        last_change=last_change,
        deferred_tiers=deferred,
        last_lower=last_lower,
        flaps=flaps,
    )


# ------------------------------------------------------------------------- overrides


@pytest.mark.parametrize(
    ("override", "before", "want_action", "want_target", "want_state"),
    [
        pytest.param(
            {"mode": "Freeze", "reason": "incident 4711"},
            state(24, {"vision": 24}, raise_since=FIXED_NOW - 900, last_change=FIXED_NOW - 5000),
            Action.FREEZE,
            24,
            state(24, {"vision": 24}, raise_since=FIXED_NOW - 900, last_change=FIXED_NOW - 5000),
            id="Freeze keeps the mix and the whole state, however high the risk",
        ),
        pytest.param(
            {"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": 30}]},
            state(24, {"vision": 24}, last_change=FIXED_NOW - 5000),
            Action.MANUAL,
            30,
            state(30, {}, last_change=FIXED_NOW),
            id="Manual sets the override's count, drops assignments and records the change",
        ),
        pytest.param(
            {"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": 24}]},
            state(24, {"vision": 24}, last_change=FIXED_NOW - 5000),
            Action.MANUAL,
            24,
            state(24, {}, last_change=FIXED_NOW - 5000),
            id="Manual at the count the pool already has keeps the time of the last change",
        ),
        pytest.param(
            {"mode": "Manual", "onDemandGpus": [{"pool": "h100", "gpus": 8}]},
            state(24, {"vision": 24}, last_change=FIXED_NOW - 5000),
            Action.MANUAL,
            24,
            state(24, {}, last_change=FIXED_NOW - 5000),
            id="Manual that does not name the pool keeps the pool's count",
        ),
    ],
)
def test_overrides(
    override: Doc, before: PoolState, want_action: str, want_target: int, want_state: PoolState
) -> None:
    policy_set = load(project(), pools=[POOL, pool_doc("h100")], override=override)
    risk = FakeRisk({"vision": release((0, 0.9))})

    decision = decide_pool(policy_set, before, risk, now=FIXED_NOW)

    assert (decision.action, decision.reason) == (want_action, Reason.OVERRIDE)
    assert (decision.previous, decision.target) == (24, want_target)
    assert decision.state == want_state
    assert risk.calls == [], "an override does not consult the risk model"


@pytest.mark.parametrize(
    ("manual", "want_target"),
    [
        pytest.param(
            20,
            32,
            id="Manual below the quota that cannot run on spot decides what is rendered",
        ),
        pytest.param(
            60,
            48,
            id="Manual above the pool's quota total decides what is rendered",
        ),
        pytest.param(40, 40, id="Manual within the renderable range is taken as is"),
    ],
)
def test_manual_matches_rendered_mix(manual: int, want_target: int) -> None:
    # 16 GPUs of vision plus 32 of `locked` (no spot): 48 in the pool, 32 of them on-demand only.
    policy_set = load(
        project(nominal=16),
        project("locked", allowSpot=False),
        override={"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": manual}]},
    )
    rendered = {m.pool: m.on_demand_gpus for m in resolve_mix(policy_set)}
    # What the previous pass wrote to status, read back: the rendered mix.
    before = state(rendered["a100"], last_change=FIXED_NOW - 5000)

    decision = decide_pool(policy_set, before, FakeRisk({}), now=FIXED_NOW)

    assert decision.target == rendered["a100"] == want_target
    assert decision.state.on_demand_gpus == want_target
    assert decision.state.last_change == FIXED_NOW - 5000, "a steady Manual mix is no change"


# ---------------------------------------------------------------------- the decision table


@dataclass(frozen=True)
class Given:
    state: PoolState
    levels: Mapping[str, Mapping[str, Levels]]
    policy_set: PolicySet = DEFAULT
    baseline: Mapping[str, int] | None = None
    history_available: bool = True


AT_RISK = release((0, 0.5), (12, 0.04))
"""Risk 0.5 under 12 GPUs, 0.04 (under the 0.05 target) from 12 on."""
CLEARED = release((0, 0.5), (10, 0.06), (14, 0.04))
"""Under the lower threshold from 14 GPUs on; 10 to 13 would sit between the thresholds."""
PAST_WINDOW = FIXED_NOW - WINDOW
STILL_SHORT = release((0, 0.5), (12, 0.3), (16, 0.04))
"""At risk at 14 GPUs (0.3), under the target from 16 on."""
# Budget of `vision` (32 GPUs of a100 at $1 spot, $4 on-demand): 730 h * $47 = $34,310 a month.
# $47/h - 32 GPUs * $1 at spot = $15/h of room, at $3 more per on-demand GPU-hour: 5 GPUs.
BUDGET_ONE_POOL = 730 * 47
# With 8 more GPUs in h100 (spot $2.5, paid at spot): $59/h - 8 * $2.5 - 32 * $1 = $7/h of
# room in a100, at $3 more per on-demand GPU-hour: 2 GPUs (7 // 3).
BUDGET_TWO_POOLS = 730 * 59
H100 = pool_doc(
    "h100",
    onDemand={"floorGpus": 0, "ceilingGpus": 32},
    prices={"spotPerGpuHour": 2.5, "onDemandPerGpuHour": 10.0},
)
TWO_TIERS = load(
    project("zeta", tier="production"),
    project("alpha", tier="research"),
    pools=[pool(ceiling=24)],
    risk={"maxStepGpus": 64},
)
"""`alpha` (research) sorts before `zeta` (production) by name: only the tier may decide."""


@pytest.mark.parametrize(
    ("given", "want_action", "want_reason", "want_target", "want_state"),
    [
        # --- raising
        pytest.param(
            Given(state(8), {"vision": AT_RISK}),
            Action.HOLD,
            Reason.EVALUATION_WINDOW,
            8,
            state(8, raise_since=FIXED_NOW),
            id="risk first seen above the raise threshold starts the evaluation window",
        ),
        pytest.param(
            Given(state(8, raise_since=FIXED_NOW - 599), {"vision": AT_RISK}),
            Action.HOLD,
            Reason.EVALUATION_WINDOW,
            8,
            state(8, raise_since=FIXED_NOW - 599),
            id="risk above the raise threshold inside the window holds and keeps raise_since",
        ),
        pytest.param(
            Given(state(8, raise_since=PAST_WINDOW), {"vision": AT_RISK}),
            Action.RAISE,
            Reason.RISK_ABOVE_THRESHOLD,
            12,
            state(12, {"vision": 12}, raise_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="after the window the pool rises to the smallest share meeting the target",
        ),
        pytest.param(
            Given(
                state(0, raise_since=PAST_WINDOW),
                {"vision": {"release": AT_RISK["release"], "demo": ((0, 0.5), (20, 0.009))}},
                load(
                    project(
                        deadlines=[RELEASE, {**RELEASE, "name": "demo", "targetConfidence": 0.99}]
                    )
                ),
            ),
            Action.RAISE,
            Reason.RISK_ABOVE_THRESHOLD,
            16,
            state(16, {"vision": 16}, raise_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="the share must meet every deadline's target (demo's 0.01 needs 20), within a step",
        ),
        pytest.param(
            Given(
                state(0, raise_since=PAST_WINDOW),
                {"vision": release((0, 0.6), (6, 0.19), (12, 0.01))},
                load(project(deadlines=[{**RELEASE, "targetConfidence": 0.5}])),
            ),
            Action.RAISE,
            Reason.RISK_ABOVE_THRESHOLD,
            6,
            state(6, {"vision": 6}, raise_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="a lax deadline's target is the raise threshold: 1 - 0.5 is capped at 0.2",
        ),
        pytest.param(
            Given(
                state(8, raise_since=PAST_WINDOW),
                {"vision": release((0, 0.5), (20, 0.01))},
                load(project(), risk={"maxStepGpus": 4}),
            ),
            Action.RAISE,
            Reason.RISK_ABOVE_THRESHOLD,
            12,
            state(12, {"vision": 12}, raise_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="one decision adds at most maxStepGpus: 8 + 4, not the 20 wanted",
        ),
        pytest.param(
            Given(
                state(16, raise_since=PAST_WINDOW),
                {"vision": release((0, 0.5), (4, 0.01))},
                load(project(), pools=[pool(floor=16)]),
            ),
            Action.RAISE,
            Reason.RISK_ABOVE_THRESHOLD,
            16,
            state(16, {"vision": 4}, raise_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="a share under the floor is held within the floor's GPUs, never below them",
        ),
        pytest.param(
            Given(
                state(0, raise_since=PAST_WINDOW),
                {"vision": release((0, 0.5), (4, 0.01))},
                load(project(), pools=[pool(floor=10)]),
            ),
            Action.RAISE,
            Reason.RISK_ABOVE_THRESHOLD,
            10,
            state(10, {"vision": 4}, raise_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="a pool below its floor (the floor was raised) rises to the floor",
        ),
        pytest.param(
            Given(
                state(16, {"vision": 16}, raise_since=PAST_WINDOW),
                {"vision": release((0, 0.5), (16, 0.3))},
            ),
            Action.HOLD,
            Reason.TARGET_UNREACHABLE,
            16,
            state(16, {"vision": 16}, raise_since=PAST_WINDOW),
            id="a target no share meets buys no more on-demand: the pool holds and says why",
        ),
        pytest.param(
            Given(
                state(16, {"vision": 16}, raise_since=PAST_WINDOW),
                {"vision": release((0, 0.5), (16, 0.3))},
                load(
                    project(
                        quotas=[
                            {"pool": "a100", "nominalGpus": 32},
                            {"pool": "h100", "nominalGpus": 8},
                        ]
                    ),
                    pools=[POOL, H100],
                ),
            ),
            Action.RAISE,
            Reason.RISK_ABOVE_THRESHOLD,
            32,
            state(32, {"vision": 32}, raise_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="with quota in another pool too, where on-demand may also be needed, it rises",
        ),
        pytest.param(
            Given(
                state(32, {"vision": 32}, raise_since=PAST_WINDOW, last_change=FIXED_NOW - 60),
                {"vision": release((0, 0.5), (16, 0.3))},
            ),
            Action.HOLD,
            Reason.TARGET_UNREACHABLE,
            32,
            state(32, {"vision": 32}, raise_since=PAST_WINDOW, last_change=FIXED_NOW - 60),
            id="an unreachable target with the whole quota on-demand holds and says why",
        ),
        pytest.param(
            Given(
                state(0, raise_since=PAST_WINDOW),
                {"vision": release((0, 0.5), (20, 0.01))},
                load(project(nominal=20), risk={"maxStepGpus": 64}),
            ),
            Action.RAISE,
            Reason.RISK_ABOVE_THRESHOLD,
            20,
            state(20, {"vision": 20}, raise_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="never above the pool's quota total (20) even under a ceiling of 64",
        ),
        pytest.param(
            Given(
                state(0, raise_since=PAST_WINDOW),
                {"vision": AT_RISK},
                load(project(budget={"dollarsPerMonth": BUDGET_ONE_POOL})),
            ),
            Action.RAISE,
            Reason.BUDGET_BINDS,
            5,
            state(5, {"vision": 5}, raise_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="the budget caps the share: ($34,310/730 - 32 * $1) // ($4 - $1) = 5 GPUs",
        ),
        pytest.param(
            Given(
                state(0, raise_since=PAST_WINDOW),
                {"vision": AT_RISK},
                load(
                    project(
                        quotas=[
                            {"pool": "a100", "nominalGpus": 32},
                            {"pool": "h100", "nominalGpus": 8},
                        ],
                        budget={"dollarsPerMonth": BUDGET_TWO_POOLS},
                    ),
                    pools=[POOL, H100],
                ),
            ),
            Action.RAISE,
            Reason.BUDGET_BINDS,
            2,
            state(2, {"vision": 2}, raise_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="the budget pays the other pools' quota at spot first: ($59 - $20 - $32) // $3 = 2",
        ),
        pytest.param(
            Given(
                state(5, {"vision": 5}, raise_since=PAST_WINDOW, last_change=FIXED_NOW - 60),
                {"vision": AT_RISK},
                load(project(budget={"dollarsPerMonth": BUDGET_ONE_POOL})),
            ),
            Action.HOLD,
            Reason.BUDGET_BINDS,
            5,
            state(5, {"vision": 5}, raise_since=PAST_WINDOW, last_change=FIXED_NOW - 60),
            id="at the budget's cap the pool holds and says the budget binds",
        ),
        pytest.param(
            Given(
                state(0, raise_since=PAST_WINDOW),
                {"zeta": release((0, 0.5), (16, 0.01)), "alpha": release((0, 0.5), (16, 0.01))},
                TWO_TIERS,
            ),
            Action.RAISE,
            Reason.CEILING_BINDS,
            24,
            state(
                24,
                {"zeta": 16, "alpha": 8},
                raise_since=PAST_WINDOW,
                last_change=FIXED_NOW,
                deferred=("research",),
            ),
            id="the ceiling (24 < 16 + 16) serves production first and defers research",
        ),
        pytest.param(
            Given(
                state(
                    24,
                    {"zeta": 16, "alpha": 8},
                    raise_since=PAST_WINDOW,
                    last_change=FIXED_NOW - 60,
                ),
                {"zeta": release((0, 0.5), (16, 0.01)), "alpha": release((0, 0.5), (16, 0.01))},
                TWO_TIERS,
            ),
            Action.HOLD,
            Reason.CEILING_BINDS,
            24,
            state(
                24,
                {"zeta": 16, "alpha": 8},
                raise_since=PAST_WINDOW,
                last_change=FIXED_NOW - 60,
                deferred=("research",),
            ),
            id="at the ceiling the pool holds, says the ceiling binds and keeps research deferred",
        ),
        pytest.param(
            Given(
                state(8, raise_since=PAST_WINDOW),
                {"vision": AT_RISK},
                load(project(), pools=[pool(floor=8)]),
                baseline={"vision": 8},
            ),
            Action.RAISE,
            Reason.RISK_ABOVE_THRESHOLD,
            12,
            state(12, {"vision": 12}, raise_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="8 GPUs held through the proportional split count: 12 in all, not 8 + 12",
        ),
        pytest.param(
            Given(
                state(8, raise_since=FIXED_NOW - 3600, lower_since=FIXED_NOW - 3600),
                {"vision": release((0, 0.5), (8, 0.1))},
                load(project(), pools=[pool(floor=8)]),
                baseline={"vision": 8},
            ),
            Action.HOLD,
            Reason.STEADY,
            8,
            state(8),
            id="risk between the thresholds at the baseline share holds and clears both windows",
        ),
        pytest.param(
            Given(
                state(8, raise_since=PAST_WINDOW),
                {"vision": AT_RISK},
                history_available=False,
            ),
            Action.RAISE,
            Reason.RISK_ABOVE_THRESHOLD,
            12,
            state(12, {"vision": 12}, raise_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="without history the pool still rises: only lowering needs it",
        ),
        # --- lowering (vision holds 24 with risk 0.04 there; 14 is the least under 0.05)
        pytest.param(
            Given(state(24, {"vision": 24}, last_change=FIXED_NOW - 7200), {"vision": CLEARED}),
            Action.HOLD,
            Reason.EVALUATION_WINDOW,
            24,
            state(24, {"vision": 24}, lower_since=FIXED_NOW, last_change=FIXED_NOW - 7200),
            id="risk first seen under the lower threshold starts the window",
        ),
        pytest.param(
            Given(
                state(
                    24, {"vision": 24}, lower_since=FIXED_NOW - 599, last_change=FIXED_NOW - 7200
                ),
                {"vision": CLEARED},
            ),
            Action.HOLD,
            Reason.EVALUATION_WINDOW,
            24,
            state(24, {"vision": 24}, lower_since=FIXED_NOW - 599, last_change=FIXED_NOW - 7200),
            id="risk under the lower threshold inside the window holds and keeps lower_since",
        ),
        pytest.param(
            Given(
                state(24, {"vision": 24}, lower_since=PAST_WINDOW, last_change=FIXED_NOW - 1799),
                {"vision": CLEARED},
            ),
            Action.HOLD,
            Reason.COOLDOWN,
            24,
            state(24, {"vision": 24}, lower_since=PAST_WINDOW, last_change=FIXED_NOW - 1799),
            id="after the window but inside the cooldown the pool holds",
        ),
        pytest.param(
            Given(
                state(24, {"vision": 24}, lower_since=PAST_WINDOW, last_change=FIXED_NOW - 1800),
                {"vision": CLEARED},
            ),
            Action.LOWER,
            Reason.RISK_CLEARED,
            14,
            state(14, {"vision": 14}, lower_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="after window and cooldown the pool steps down to the least share under 0.05",
        ),
        pytest.param(
            Given(state(8, raise_since=PAST_WINDOW), {"vision": AT_RISK}, EIGHT_GPU_NODES),
            Action.RAISE,
            Reason.RISK_ABOVE_THRESHOLD,
            16,
            state(16, {"vision": 12}, raise_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="on 8-GPU nodes the 12 GPUs wanted are two whole nodes: 16 (the project wants 12)",
        ),
        pytest.param(
            Given(
                state(8, raise_since=PAST_WINDOW),
                {"vision": release((0, 0.5), (18, 0.04))},
                load(project(), pools=[pool(ceiling=20, per_node=8)]),
            ),
            Action.RAISE,
            Reason.RISK_ABOVE_THRESHOLD,
            20,
            state(20, {"vision": 18}, raise_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="whole nodes never pass the ceiling: 18 wanted is 24 in nodes, held at 20",
        ),
        pytest.param(
            Given(
                state(24, {"vision": 24}, lower_since=PAST_WINDOW, last_change=FIXED_NOW - 1800),
                {"vision": CLEARED},
                EIGHT_GPU_NODES,
            ),
            Action.LOWER,
            Reason.RISK_CLEARED,
            16,
            state(16, {"vision": 14}, lower_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="on 8-GPU nodes the step down to 14 keeps two whole nodes: 16 (the project, 14)",
        ),
        pytest.param(
            Given(
                state(24, {"vision": 24}, lower_since=PAST_WINDOW, deferred=("research",)),
                {"vision": CLEARED},
            ),
            Action.LOWER,
            Reason.RISK_CLEARED,
            14,
            state(14, {"vision": 14}, lower_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="a pool never changed has no cooldown; lowering ends the deferral",
        ),
        pytest.param(
            Given(
                state(24, {"vision": 24}, lower_since=PAST_WINDOW),
                {"vision": release((0, 0.5), (10, 0.06), (14, 0.05), (18, 0.04))},
            ),
            Action.LOWER,
            Reason.RISK_CLEARED,
            18,
            state(18, {"vision": 18}, lower_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="a share at exactly the lower threshold is not under it: 18, not 14",
        ),
        pytest.param(
            Given(
                state(24, {"vision": 24}, lower_since=PAST_WINDOW),
                {"vision": CLEARED},
                load(project(), risk={"maxStepGpus": 4}),
            ),
            Action.LOWER,
            Reason.RISK_CLEARED,
            20,
            state(20, {"vision": 14}, lower_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="one decision gives back at most maxStepGpus: 24 - 4, not 14",
        ),
        pytest.param(
            Given(
                state(24, {"vision": 24}, lower_since=PAST_WINDOW),
                {"vision": CLEARED},
                load(project(), pools=[pool(floor=20)]),
            ),
            Action.LOWER,
            Reason.RISK_CLEARED,
            20,
            state(20, {"vision": 14}, lower_since=PAST_WINDOW, last_change=FIXED_NOW),
            id="lowering stops at the floor",
        ),
        pytest.param(
            Given(
                state(24, {"vision": 24}, lower_since=PAST_WINDOW),
                {"vision": CLEARED},
                history_available=False,
            ),
            Action.HOLD,
            Reason.PROMETHEUS_UNAVAILABLE,
            24,
            state(24, {"vision": 24}, lower_since=PAST_WINDOW),
            id="without history the pool never lowers",
        ),
        pytest.param(
            Given(state(14, {"vision": 14}, lower_since=PAST_WINDOW), {"vision": CLEARED}),
            Action.HOLD,
            Reason.STEADY,
            14,
            state(14, {"vision": 14}, lower_since=PAST_WINDOW),
            id="nothing to give back when a smaller share would leave the lower threshold",
        ),
        pytest.param(
            Given(
                state(24, {"vision": 24}, lower_since=PAST_WINDOW),
                {"vision": CLEARED},
                load(project(), pools=[pool(floor=24)]),
            ),
            Action.HOLD,
            Reason.STEADY,
            24,
            state(24, {"vision": 24}, lower_since=PAST_WINDOW),
            id="a pool at its floor has nothing to lower",
        ),
        pytest.param(
            Given(
                state(24, {"vision": 24}, raise_since=PAST_WINDOW),
                {"vision": release((0, 0.04)), "nlp": AT_RISK},
                load(project(), project("nlp")),
            ),
            Action.LOWER,
            Reason.RISK_CLEARED,
            12,
            state(12, {"nlp": 12}, raise_since=FIXED_NOW, last_change=FIXED_NOW),
            id="at risk, but a safe project hands back more than the other takes: a Lower",
        ),
        pytest.param(
            Given(
                state(24, {"vision": 14}, raise_since=PAST_WINDOW, last_change=FIXED_NOW - 900),
                {"vision": STILL_SHORT},
            ),
            Action.RAISE,
            Reason.RISK_ABOVE_THRESHOLD,
            24,
            state(24, {"vision": 16}, raise_since=FIXED_NOW, last_change=FIXED_NOW),
            id="inside the cooldown the 10 GPUs a step down left unassigned stay in the pool",
        ),
        pytest.param(
            Given(
                state(24, {"vision": 14}, raise_since=PAST_WINDOW, last_change=FIXED_NOW - 1800),
                {"vision": STILL_SHORT},
            ),
            Action.LOWER,
            Reason.RISK_CLEARED,
            16,
            state(16, {"vision": 16}, raise_since=FIXED_NOW, last_change=FIXED_NOW),
            id="after the cooldown the pool keeps only what the project needs: 16",
        ),
    ],
)
def test_decide_pool(
    given: Given, want_action: str, want_reason: str, want_target: int, want_state: PoolState
) -> None:
    decision = decide_pool(
        given.policy_set,
        given.state,
        FakeRisk(given.levels),
        now=FIXED_NOW,
        baseline=given.baseline,
        history_available=given.history_available,
    )

    assert (decision.action, decision.reason) == (want_action, want_reason), decision.message
    assert (decision.previous, decision.target) == (given.state.on_demand_gpus, want_target)
    # A raise starts the evaluation window again, pacing the next step a window later.
    paced = (
        replace(want_state, raise_since=FIXED_NOW) if want_action == Action.RAISE else want_state
    )
    if want_target < given.state.on_demand_gpus:
        paced = replace(paced, last_lower=FIXED_NOW)  # remembered, to tell a flap
    assert decision.state == paced
    assert decision.changed is (want_action in (Action.RAISE, Action.LOWER))


def test_ceiling_message_names_the_deferred_tier() -> None:
    decision = decide_pool(
        TWO_TIERS,
        state(0, raise_since=PAST_WINDOW),
        FakeRisk({"zeta": release((0, 0.5), (16, 0.01)), "alpha": release((0, 0.5), (16, 0.01))}),
        now=FIXED_NOW,
    )

    assert decision.message == (
        "risk 0.50 above 0.2: 0 -> 24 on-demand (needed 32; for alpha 8, zeta 16); "
        "ceiling 24 binds, tier research deferred"
    )
    assert decision.inputs["needed"] == 32
    assert decision.inputs["ceiling"] == 24


def test_baseline_is_where_the_search_starts() -> None:
    risk = FakeRisk({"vision": AT_RISK})

    decide_pool(
        load(project(), pools=[pool(floor=8)]),
        state(8, raise_since=PAST_WINDOW),
        risk,
        now=FIXED_NOW,
        baseline={"vision": 8},
    )

    assert risk.calls[0] == ("vision", "a100", 8), "risk is first asked at the share held now"
    assert min(share for _, _, share in risk.calls) == 8, "no share under the baseline is tried"


@pytest.mark.parametrize(
    ("boundary", "want_share"),
    [
        pytest.param(b, b if b <= 32 else 0, id=f"risk meets the target from {b} GPUs on")
        for b in range(1, 34)
    ],
)
def test_bisection_finds_the_boundary(boundary: int, want_share: int) -> None:
    """Every boundary of a step function in 1..32 is found exactly, in logarithmic questions.

    Past 32 (the quota) nothing meets the target: no on-demand is bought for it.
    """
    risk = FakeRisk({"vision": release((0, 0.5), (boundary, 0.01))})

    decision = decide_pool(
        load(project(), risk={"maxStepGpus": 64}),
        state(0, raise_since=PAST_WINDOW),
        risk,
        now=FIXED_NOW,
    )

    assert decision.state.assignments == ({"vision": want_share} if want_share else {})
    assert decision.target == want_share
    # One question at the current share for the window, then low, high and log2(32) = 5 halvings.
    assert len(risk.calls) <= 1 + 2 + math.ceil(math.log2(32))
    assert all(0 <= share <= 32 for _, _, share in risk.calls)


@pytest.mark.parametrize(
    "start",
    [
        pytest.param(
            0.0,
            id="a window that started at time 0 (a simulator's clock) still ends",
        ),
        pytest.param(1.0, id="a window that started at time 1 ends 600 s later"),
    ],
)
def test_window_start_at_clock_zero(start: float) -> None:
    decision = decide_pool(
        DEFAULT, state(8, raise_since=start), FakeRisk({"vision": AT_RISK}), now=start + WINDOW
    )

    assert decision.action == Action.RAISE
    assert decision.state.raise_since == start + WINDOW  # the next step waits a window


# ---------------------------------------------------------------------------- stability

Series = Callable[[int, int], float]
"""(minute of the day, vision's on-demand share) -> risk of its deadline."""


def simulate(policy_set: PolicySet, series: Series, *, start: PoolState) -> list[Decision]:
    """A day of decisions every 60 s, the state carried over and the baseline split recomputed
    from it as `plan_capacity` does."""

    def oracle_at(minute: int) -> RiskOracle:
        def oracle(project: str, pool: str, share: int) -> dict[str, float]:
            return {"release": series(minute, share)} if project == "vision" else {}

        return oracle

    decisions = []
    current = start
    for minute in range(int(DAY // STEP)):
        mix = resolve_mix(policy_set, {current.pool: current.on_demand_gpus})
        split = split_quotas(policy_set, mix, {current.pool: current.assignments})
        baseline = {p: q.on_demand_gpus for (p, name), q in split.items() if name == current.pool}
        decision = decide_pool(
            policy_set, current, oracle_at(minute), now=FIXED_NOW + minute * STEP, baseline=baseline
        )
        decisions.append(decision)
        current = decision.state
    return decisions


def noise(seed: int) -> list[float]:
    """A stationary risk for every minute of the day: mean 0.1, uniform within +-0.05."""
    rng = random.Random(seed)
    return [0.1 + rng.uniform(-0.05, 0.05) for _ in range(int(DAY // STEP))]


def spikes(seed: int, *, longest: int) -> set[int]:
    """Minutes of short spikes: one every 45-120 minutes, 1 to `longest` minutes long."""
    rng = random.Random(seed)
    out: set[int] = set()
    minutes = int(DAY // STEP)
    minute = rng.randint(20, 90)
    while minute < minutes:
        out.update(range(minute, min(minute + rng.randint(1, longest), minutes)))
        minute += rng.randint(45, 120)
    return out


def longest_run(minutes: set[int]) -> int:
    best = run = 0
    for minute in range(int(DAY // STEP)):
        run = run + 1 if minute in minutes else 0
        best = max(best, run)
    return best


STABILITY = load(project(), project("nlp", nominal=16, deadlines=()), pools=[pool(floor=8)])
"""vision (32 GPUs, a deadline) and nlp (16, none) share a100: floor 8, ceiling 48."""
MOST_CHANGES_A_DAY = math.ceil(DAY / COOLDOWN)  # 48


def changes(decisions: Sequence[Decision]) -> list[Decision]:
    return [d for d in decisions if d.changed]


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed {s}") for s in (1, 2, 3)])
def test_stationary_noise_with_spikes_shorter_than_the_window_changes_nothing(seed: int) -> None:
    """Risk hovers around 0.1 (between the thresholds) with spikes to 0.5-0.9 of at most 9
    samples: above the raise threshold for at most 8 minutes, under the 10-minute window.

    Allowed: 0 changes (and, whatever the noise, never more than ceil(day / cooldown) = 48).
    """
    base = noise(seed)
    spiking = spikes(seed, longest=9)
    rng = random.Random(seed)
    height = {m: rng.uniform(0.5, 0.9) for m in spiking}

    def series(minute: int, share: int) -> float:
        # Falls as the share grows, as the model's risk does.
        return height.get(minute, base[minute]) * (1 - share / 64)

    decisions = simulate(STABILITY, series, start=state(8))

    assert 2 <= longest_run(spiking) <= 9, "the spikes exist and stay under the window"
    held = [d for d in decisions if d.reason == Reason.EVALUATION_WINDOW]
    assert len(held) == len(spiking), "the controller saw every spike minute and waited"
    assert changes(decisions) == []
    assert len(changes(decisions)) <= MOST_CHANGES_A_DAY
    assert all(d.target == 8 for d in decisions)


@pytest.mark.parametrize("seed", [pytest.param(s, id=f"seed {s}") for s in (1, 2, 3)])
def test_step_in_demand_changes_the_mix_within_a_window_and_settles(seed: int) -> None:
    """At 06:00:30 risk jumps to about 0.6 and stays there below 28 GPUs on-demand; from 28 it
    is about 0.03, under the target. Up to 16 GPUs a step from 8, that is 24 then 28.

    Wanted: the first change within a window and a step of the jump, 28 reached one window
    later (each raise restarts the window), and nothing after that: no step down (which would
    re-raise), no oscillation.
    """
    base = noise(seed)
    rng = random.Random(seed + 100)
    jitter = [rng.uniform(-0.01, 0.01) for _ in base]
    jump = 6 * 60 * 60 + 30  # seconds into the day
    first_after = 361  # the first minute sampled after the jump

    def series(minute: int, share: int) -> float:
        if minute * STEP < jump:
            return base[minute] * (1 - share / 64)
        return 0.6 + 5 * jitter[minute] if share < 28 else 0.03 + jitter[minute]

    decisions = simulate(STABILITY, series, start=state(8))

    changed = changes(decisions)
    times = [(d.state.last_change or 0) - FIXED_NOW for d in changed]
    assert [(d.action, d.previous, d.target) for d in changed] == [
        (Action.RAISE, 8, 24),
        (Action.RAISE, 24, 28),
    ]
    assert times[0] - jump <= WINDOW + STEP
    assert times[0] == first_after * STEP + WINDOW
    assert times[1] == times[0] + WINDOW
    settled = decisions[first_after + 2 * int(WINDOW // STEP) + 1 :]
    assert all(d.target == 28 and d.state.assignments == {"vision": 28} for d in settled)
    assert {d.reason for d in settled[int((WINDOW + COOLDOWN) // STEP) :]} == {Reason.STEADY}
    assert len(changed) <= MOST_CHANGES_A_DAY


def test_bursts_longer_than_the_window_change_the_mix_at_most_once_per_cooldown() -> None:
    """Every 3 hours a 20-minute burst needs 20 GPUs on-demand (risk 0.6 below, 0.03 from 20);
    between bursts risk is about 0.02, under the lower threshold, at any share.

    Each burst raises once (8 -> 20, one window after it starts) and each quiet spell gives
    the GPUs back once (20 -> 8, after the window and the cooldown): 8 bursts, 16 changes,
    within ceil(day / cooldown) = 48, and no step down sooner than a cooldown after a change.
    """
    rng = random.Random(7)
    quiet = [0.02 + rng.uniform(-0.01, 0.01) for _ in range(int(DAY // STEP))]
    bursts = {m for start in range(60, 1440, 180) for m in range(start, start + 20)}

    def series(minute: int, share: int) -> float:
        if minute in bursts:
            return 0.6 if share < 20 else 0.03
        return quiet[minute]

    decisions = simulate(STABILITY, series, start=state(8))

    changed = changes(decisions)
    assert [(d.action, d.previous, d.target) for d in changed] == [
        (Action.RAISE, 8, 20),
        (Action.LOWER, 20, 8),
    ] * 8
    assert len(changed) <= MOST_CHANGES_A_DAY
    raises = [d.state.last_change for d in changed if d.action == Action.RAISE]
    assert [(t or 0) - FIXED_NOW for t in raises] == [(s + 10) * STEP for s in range(60, 1440, 180)]
    for before, after in itertools.pairwise(changed):
        if after.action == Action.LOWER:
            gap = (after.state.last_change or 0) - (before.state.last_change or 0)
            assert gap >= COOLDOWN


def test_a_pool_that_flaps_holds_its_on_demand_longer_each_time() -> None:
    """Every hour a 20-minute burst needs 20 GPUs on-demand (risk 0.6 below, 0.03 from 20);
    between bursts risk is 0.02 at any share.

    The first burst raises (minute 10) and the pool steps back a cooldown later (40). The next
    burst raises again 30 minutes after that lower: a flap, so the next step back waits two
    cooldowns, and so on, doubling up to 16 cooldowns (8 hours). Where a step back comes due
    inside a burst it waits for the burst to pass. Eleven changes in the day, against 48 if
    every lower came after one cooldown.
    """

    def series(minute: int, share: int) -> float:
        if minute % 60 < 20:
            return 0.6 if share < 20 else 0.03
        return 0.02

    decisions = simulate(STABILITY, series, start=state(8))

    assert [
        (d.action, d.target, ((d.state.last_change or 0) - FIXED_NOW) / STEP, d.state.flaps)
        for d in changes(decisions)
    ] == [
        (Action.RAISE, 20, 10, 0),
        (Action.LOWER, 8, 40, 0),  # one cooldown after the raise
        (Action.RAISE, 20, 70, 1),  # 30 minutes after a lower: a flap
        (Action.LOWER, 8, 140, 1),  # two cooldowns were due at 130, inside a burst
        (Action.RAISE, 20, 190, 2),
        (Action.LOWER, 8, 320, 2),  # four cooldowns: due at 310
        (Action.RAISE, 20, 370, 3),
        (Action.LOWER, 8, 620, 3),  # eight: due at 610
        (Action.RAISE, 20, 670, 4),
        (Action.LOWER, 8, 1160, 4),  # sixteen, the most: due at 1150
        (Action.RAISE, 20, 1210, 4),
    ]


@pytest.mark.parametrize(
    ("last_lower", "flaps", "want_flaps"),
    [
        pytest.param(None, 0, 0, id="a first raise is no flap"),
        pytest.param(FIXED_NOW - 4 * COOLDOWN + 1, 0, 1, id="within four cooldowns of a lower"),
        pytest.param(FIXED_NOW - 4 * COOLDOWN, 0, 0, id="four cooldowns after a lower: calm"),
        pytest.param(
            FIXED_NOW - 8 * COOLDOWN + 1, 1, 2, id="the window grows with the cooldown it counts"
        ),
        pytest.param(FIXED_NOW - DAY, 3, 2, id="a calm raise halves the wait back"),
        pytest.param(FIXED_NOW - 60, 4, 4, id="at most sixteen cooldowns"),
    ],
)
def test_a_raise_counts_a_flap_when_it_follows_a_lower_soon(
    last_lower: float | None, flaps: int, want_flaps: int
) -> None:
    decision = decide_pool(
        DEFAULT,
        state(8, {"vision": 8}, raise_since=PAST_WINDOW, last_lower=last_lower, flaps=flaps),
        FakeRisk({"vision": AT_RISK}),
        now=FIXED_NOW,
    )

    assert (decision.action, decision.target) == (Action.RAISE, 12)
    assert (decision.state.flaps, decision.state.last_lower) == (want_flaps, last_lower)


@pytest.mark.parametrize(
    ("flaps", "since_change", "want_reason"),
    [
        pytest.param(0, COOLDOWN, Reason.RISK_CLEARED, id="no flaps: one cooldown"),
        pytest.param(2, 4 * COOLDOWN - 1, Reason.COOLDOWN, id="two flaps: four cooldowns"),
        pytest.param(2, 4 * COOLDOWN, Reason.RISK_CLEARED, id="two flaps, four cooldowns on"),
    ],
)
def test_flaps_lengthen_the_cooldown_before_a_lower(
    flaps: int, since_change: float, want_reason: str
) -> None:
    decision = decide_pool(
        DEFAULT,
        state(
            16,
            {"vision": 16},
            lower_since=PAST_WINDOW,
            last_change=FIXED_NOW - since_change,
            flaps=flaps,
        ),
        FakeRisk({"vision": CLEARED}),
        now=FIXED_NOW,
    )

    assert decision.reason == want_reason, decision.message
    if want_reason == Reason.RISK_CLEARED:
        assert decision.state.last_lower == FIXED_NOW
        assert decision.state.flaps == flaps  # a lower leaves the count as it is


# ------------------------------------------------------------------ one rule for "changed"


@pytest.mark.parametrize(
    ("action", "previous", "target", "want"),
    [
        pytest.param(Action.RAISE, 16, 16, True, id="a Raise moving GPUs between projects"),
        pytest.param(Action.RAISE, 8, 16, True, id="a Raise of the total"),
        pytest.param(Action.LOWER, 16, 8, True, id="a Lower"),
        pytest.param(Action.MANUAL, 16, 24, True, id="a Manual override that moves the total"),
        pytest.param(Action.MANUAL, 16, 16, False, id="a Manual override already in place"),
        pytest.param(Action.HOLD, 16, 16, False, id="a Hold"),
        pytest.param(Action.FREEZE, 16, 16, False, id="a Freeze"),
    ],
)
def test_one_rule_says_whether_a_decision_changed_the_mix(
    action: Action, previous: int, target: int, want: bool
) -> None:
    from controller.metrics import counted  # noqa: PLC0415 - the counter's rule, beside the rule

    decision = Decision(
        pool="a100",
        action=action,
        reason=Reason.STEADY,
        previous=previous,
        target=target,
        message="",
        inputs={},
        state=state(target),
    )
    assert decision.changed is want
    assert counted(decision) is want, "the decision counter follows the same rule"


def test_the_status_schema_names_every_action_and_reason() -> None:
    """The CRD's description of lastDecision names exactly what the decisions write."""
    from dataclasses import fields  # noqa: PLC0415

    from controller.api.fields import META_KEY  # noqa: PLC0415
    from controller.api.types import Decision as StatusDecision  # noqa: PLC0415

    described = {f.name: f.metadata[META_KEY].description for f in fields(StatusDecision)}
    for name, values in (("action", Action), ("reason", Reason)):
        words = {
            w.strip(" .,")
            for w in described[name].split(":", 1)[1].replace(" or ", ", ").split(",")
        }
        assert words == {v.value for v in values}, name


def test_the_status_schema_bounds_flaps_where_the_decision_does() -> None:
    """The CRD's maximum for `flaps` is the decision's cap: a count the decision can write is
    one the API server accepts, and no larger one is stored."""
    from dataclasses import fields  # noqa: PLC0415

    from controller.api.fields import META_KEY  # noqa: PLC0415
    from controller.api.types import PoolStatus  # noqa: PLC0415

    flaps = next(f for f in fields(PoolStatus) if f.name == "flaps")
    assert flaps.metadata[META_KEY].maximum == MAX_FLAPS
