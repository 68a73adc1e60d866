"""Tests for how a pool's GPUs divide between spot and on-demand, and between projects.

Every expected number below is worked out by hand in the test's id or a comment next to it.
The default pool of `tests.builders` is `a100`: floor 8, ceiling 64, maxGpus 128, 8 GPUs a
node; the default project `vision` holds 16 GPUs of it in tier `production`.

The last section renders whole policies through `controller.render.desired` to pin the
promises that depend on the mix: the order of the objects and which objects a change of mix
touches.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from math import floor
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller import names
from controller.api.loader import load_policy_set
from controller.api.policy_set import PolicySet
from controller.api.types import PoolMix
from controller.capacity import (
    Clamp,
    FlavorQuota,
    PoolDemand,
    _largest_first,
    clamped_targets,
    pool_demands,
    resolve_mix,
    split_quotas,
    spot_allowed,
)
from controller.render import desired
from controller.render.objects import KubeObject
from tests.builders import policy_doc, pool_doc, project_doc

Doc = dict[str, Any]


def load(policy: Doc, *projects: Doc) -> PolicySet:
    """A validated PolicySet from a policy document and project documents."""
    return load_policy_set(
        [("policy.yaml", policy), *((f"project-{i}.yaml", p) for i, p in enumerate(projects))]
    )


def tiers(**production: Any) -> list[Doc]:
    """The builder's two tiers plus `secure`, a tier that forbids spot."""
    return [
        {"name": "production", "priority": 1000, **production},
        {"name": "research", "priority": 100, "preemption": "Never"},
        {"name": "secure", "priority": 500, "allowSpot": False},
    ]


def quota(nominal: int, pool: str = "a100", **limits: int) -> list[Doc]:
    return [{"pool": pool, "nominalGpus": nominal, **limits}]


H100 = pool_doc("h100", onDemand={"floorGpus": 0, "ceilingGpus": 32})
NO_FLOOR = pool_doc(onDemand={"floorGpus": 0, "ceilingGpus": 64})
ONE_GPU_NODES = policy_doc(pools=[pool_doc(gpusPerNode=1)])
"""Nodes of one GPU, where the split in whole nodes is the split by largest remainder."""


# --------------------------------------------------------------------------- pool_demands


@pytest.mark.parametrize(
    ("policy", "projects", "want_demands"),
    [
        pytest.param(
            policy_doc(pools=[pool_doc(), H100]),
            [],
            {"a100": PoolDemand("a100", 0, 0), "h100": PoolDemand("h100", 0, 0)},
            id="pools without projects or reservations demand nothing",
        ),
        pytest.param(
            policy_doc(tiers=tiers(reserved=[{"pool": "a100", "gpus": 6}])),
            [
                project_doc("vision", quotas=quota(10)),
                project_doc("nlp", quotas=quota(20), allowSpot=False),
                project_doc("vault", tier="secure", quotas=quota(5)),
            ],
            # total 6 + 10 + 20 + 5 = 41; on-demand only: reservation 6 + nlp 20 + vault 5 = 31
            {"a100": PoolDemand("a100", 41, 31)},
            id="reservations and quotas that cannot run on spot are the on-demand-only part",
        ),
        pytest.param(
            policy_doc(pools=[pool_doc(), H100]),
            [
                project_doc("vision", quotas=[*quota(16), *quota(4, "h100")], allowSpot=False),
                project_doc("nlp", quotas=quota(8, "h100")),
            ],
            {"a100": PoolDemand("a100", 16, 16), "h100": PoolDemand("h100", 12, 4)},
            id="each pool adds up only the quotas that name it",
        ),
    ],
)
def test_pool_demands(
    policy: Doc, projects: list[Doc], want_demands: dict[str, PoolDemand]
) -> None:
    assert pool_demands(load(policy, *projects)) == want_demands


@pytest.mark.parametrize(
    ("project", "want_spot"),
    [
        pytest.param(project_doc(), True, id="a project in a spot tier may use spot"),
        pytest.param(project_doc(allowSpot=False), False, id="a project that forbids spot may not"),
        pytest.param(
            project_doc(tier="secure"), False, id="a project in a tier that forbids spot may not"
        ),
    ],
)
def test_spot_allowed(project: Doc, want_spot: bool) -> None:
    policy_set = load(policy_doc(tiers=tiers()), project)
    assert spot_allowed(policy_set, policy_set.projects[0]) is want_spot


# --------------------------------------------------------------------------- resolve_mix


@pytest.mark.parametrize(
    ("policy", "projects", "targets", "want_mix"),
    [
        pytest.param(
            policy_doc(),
            [project_doc()],
            None,
            (PoolMix("a100", on_demand_gpus=8, spot_gpus=8),),
            id="with no targets a pool runs its on-demand floor and the rest of its quota on spot",
        ),
        pytest.param(
            policy_doc(),
            [project_doc()],
            {"a100": 12},
            (PoolMix("a100", on_demand_gpus=12, spot_gpus=4),),
            id="a target between the bounds is used as given and spot is the total minus it",
        ),
        pytest.param(
            policy_doc(),
            [project_doc()],
            {"a100": 3},
            (PoolMix("a100", on_demand_gpus=8, spot_gpus=8),),
            id="a target below the floor is raised to the floor",
        ),
        pytest.param(
            policy_doc(),
            [project_doc()],
            {"a100": 40},
            (PoolMix("a100", on_demand_gpus=16, spot_gpus=0),),
            id="a target above the pool's 16 GPUs of quota is lowered to 16, leaving no spot",
        ),
        pytest.param(
            policy_doc(),
            [project_doc("vision", quotas=quota(60)), project_doc("nlp", quotas=quota(40))],
            {"a100": 90},
            (PoolMix("a100", on_demand_gpus=64, spot_gpus=36),),
            id="a target of 90 above the ceiling of 64 is lowered to 64 with 36 of 100 on spot",
        ),
        pytest.param(
            policy_doc(),
            [
                project_doc("vision", quotas=quota(24), allowSpot=False),
                project_doc("nlp", quotas=quota(16)),
            ],
            {"a100": 10},
            (PoolMix("a100", on_demand_gpus=24, spot_gpus=16),),
            id="a project's 24 GPUs that cannot run on spot raise the lower bound above the floor",
        ),
        pytest.param(
            policy_doc(tiers=tiers()),
            [
                project_doc("vault", tier="secure", quotas=quota(20)),
                project_doc("nlp", quotas=quota(16)),
            ],
            None,
            (PoolMix("a100", on_demand_gpus=20, spot_gpus=16),),
            id="quota in a tier that forbids spot raises the lower bound above the floor",
        ),
        pytest.param(
            policy_doc(tiers=tiers(reserved=[{"pool": "a100", "gpus": 12}])),
            [project_doc()],
            None,
            (PoolMix("a100", on_demand_gpus=12, spot_gpus=16),),
            id="a tier reservation of 12 is on-demand only and counts toward the 28 GPU total",
        ),
        pytest.param(
            policy_doc(),
            [],
            {"a100": 30},
            (PoolMix("a100", on_demand_gpus=8, spot_gpus=0),),
            id="a pool with no projects runs its floor whatever the target and no spot",
        ),
        pytest.param(
            policy_doc(pools=[NO_FLOOR]),
            [],
            None,
            (PoolMix("a100", on_demand_gpus=0, spot_gpus=0),),
            id="a pool with no projects and no floor runs nothing",
        ),
        pytest.param(
            policy_doc(),
            [project_doc(quotas=quota(4))],
            {"a100": 2},
            (PoolMix("a100", on_demand_gpus=8, spot_gpus=0),),
            id="a floor above the pool's quota is kept whatever, with no spot",
        ),
        pytest.param(
            policy_doc(override={"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": 24}]}),
            [project_doc(quotas=quota(32))],
            {"a100": 12},
            (PoolMix("a100", on_demand_gpus=24, spot_gpus=8),),
            id="a Manual override wins over the requested target",
        ),
        pytest.param(
            policy_doc(override={"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": 40}]}),
            [project_doc()],
            None,
            (PoolMix("a100", on_demand_gpus=16, spot_gpus=0),),
            id="a Manual override above the pool's quota is still lowered to the quota",
        ),
        pytest.param(
            policy_doc(
                pools=[pool_doc(), H100],
                override={"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": 20}]},
            ),
            [project_doc(quotas=[*quota(32), *quota(16, "h100")])],
            {"a100": 10, "h100": 6},
            (
                PoolMix("a100", on_demand_gpus=24, spot_gpus=8),
                PoolMix("h100", on_demand_gpus=6, spot_gpus=10),
            ),
            id="a Manual override leaves a pool it does not name to the requested target "
            "(and its own 20 is 24 in whole 8-GPU nodes)",
        ),
        pytest.param(
            policy_doc(override={"mode": "Freeze"}),
            [project_doc()],
            {"a100": 12},
            (PoolMix("a100", on_demand_gpus=12, spot_gpus=4),),
            id="Freeze renders the requested target, the mix in force",
        ),
        pytest.param(
            policy_doc(override={"mode": "Auto"}),
            [project_doc()],
            {"a100": 12},
            (PoolMix("a100", on_demand_gpus=12, spot_gpus=4),),
            id="Auto renders the requested target",
        ),
        pytest.param(
            policy_doc(pools=[pool_doc(), H100]),
            [project_doc(quotas=[*quota(32), *quota(16, "h100")])],
            {"h100": 5},
            (
                PoolMix("a100", on_demand_gpus=8, spot_gpus=24),
                PoolMix("h100", on_demand_gpus=5, spot_gpus=11),
            ),
            id="a pool missing from the targets keeps its floor while another follows its target",
        ),
        pytest.param(
            policy_doc(),
            [project_doc()],
            {"v100": 12},
            (PoolMix("a100", on_demand_gpus=8, spot_gpus=8),),
            id="targets for unknown pools are ignored",
        ),
    ],
)
def test_resolve_mix(
    policy: Doc,
    projects: list[Doc],
    targets: Mapping[str, int] | None,
    want_mix: tuple[PoolMix, ...],
) -> None:
    assert resolve_mix(load(policy, *projects), targets) == want_mix


FLOOR = "below the pool's on-demand floor (onDemand.floorGpus: 8)"
CEILING = "above the pool's on-demand ceiling (onDemand.ceilingGpus: 64)"


def above_quota(total: int) -> str:
    return (
        f"above the pool's quota ({total} GPUs: projects' nominal quotas plus tier "
        "reservations); on-demand GPUs beyond it would have no quota to use them"
    )


@pytest.mark.parametrize(
    ("policy", "projects", "targets", "want"),
    [
        pytest.param(
            policy_doc(),
            [project_doc()],
            {"a100": 12},
            [],
            id="a target between the bounds is not clamped",
        ),
        pytest.param(
            policy_doc(),
            [project_doc()],
            {"a100": 2},
            [Clamp("a100", 2, 8, FLOOR)],
            id="below the floor: raised to the floor",
        ),
        pytest.param(
            policy_doc(),
            [project_doc(quotas=quota(100))],
            {"a100": 90},
            [Clamp("a100", 90, 64, CEILING)],
            id="above the ceiling, within the quota: lowered to the ceiling",
        ),
        pytest.param(
            policy_doc(),
            [project_doc()],
            {"a100": 999},
            [Clamp("a100", 999, 16, above_quota(16))],
            id="above the quota, which is below the ceiling: lowered to the quota",
        ),
        pytest.param(
            policy_doc(tiers=tiers()),
            [project_doc(tier="secure", quotas=quota(24))],
            {"a100": 10},
            [
                Clamp(
                    "a100",
                    10,
                    24,
                    "below the 24 GPUs of quota that cannot run on spot (tier reservations, "
                    "and projects or tiers that do not allow spot)",
                )
            ],
            id="below what cannot run on spot, which is above the floor: raised to it",
        ),
        pytest.param(
            policy_doc(pools=[pool_doc(onDemand={"floorGpus": 32, "ceilingGpus": 64})]),
            [project_doc()],
            {"a100": 40},
            [
                Clamp(
                    "a100",
                    40,
                    32,
                    "the pool's quota (16 GPUs) is below its lower bound (32: the on-demand "
                    "floor, or quota that cannot run on spot), which wins",
                )
            ],
            id="a floor above the quota wins over the quota",
        ),
        pytest.param(
            policy_doc(override={"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": 16}]}),
            [project_doc()],
            {"a100": 8},
            [
                Clamp(
                    "a100",
                    8,
                    16,
                    "the policy's override is Manual and sets 16 for this pool "
                    "(spec.override.onDemandGpus)",
                )
            ],
            id="a Manual override wins over the target",
        ),
        pytest.param(
            policy_doc(override={"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": 12}]}),
            [project_doc()],
            {"a100": 8},
            [
                Clamp(
                    "a100",
                    8,
                    16,
                    "the policy's override is Manual and sets 12 for this pool "
                    "(spec.override.onDemandGpus), 16 in whole nodes of 8",
                )
            ],
            id="a Manual override off whole nodes is rendered in whole nodes, and says so",
        ),
        pytest.param(
            policy_doc(override={"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": 16}]}),
            [project_doc()],
            {"a100": 16},
            [],
            id="a target equal to the Manual override is no clamp",
        ),
    ],
)
def test_clamped_targets_say_which_bound_moved_them(
    policy: Doc, projects: list[Doc], targets: dict[str, int], want: list[Clamp]
) -> None:
    policy_set = load(policy, *projects)
    assert clamped_targets(policy_set, targets) == want
    # The explanation agrees with the mix actually rendered.
    mix = {m.pool: m.on_demand_gpus for m in resolve_mix(policy_set, targets)}
    assert all(mix[c.pool] == c.used for c in want)


# --------------------------------------------------------------------------- split_quotas


@pytest.mark.parametrize(
    ("policy", "projects", "mixes", "want_split"),
    [
        pytest.param(
            policy_doc(),
            [
                project_doc("alpha", quotas=quota(10)),
                project_doc("bravo", quotas=quota(20)),
                project_doc("charlie", quotas=quota(30)),
            ],
            (PoolMix("a100", on_demand_gpus=7, spot_gpus=53),),
            # exact shares 7/6=1.17, 14/6=2.33, 21/6=3.5; floors 1+2+3=6, the one left goes
            # to the largest remainder, charlie's .5
            {"alpha": (9, 1), "bravo": (18, 2), "charlie": (26, 4)},
            id="7 on-demand GPUs over quotas 10/20/30 give 1/2/4 by largest remainder",
        ),
        pytest.param(
            ONE_GPU_NODES,
            [
                project_doc("mango", quotas=quota(10)),
                project_doc("kiwi", quotas=quota(20)),
                project_doc("apple", quotas=quota(30)),
            ],
            (PoolMix("a100", on_demand_gpus=9, spot_gpus=51),),
            # exact 1.5/3/4.5: floors 1+3+4=8, remainders .5 tie between mango and apple
            {"mango": (9, 1), "kiwi": (17, 3), "apple": (25, 5)},
            id="a tie in remainders goes to the name first in order, here the largest quota",
        ),
        pytest.param(
            ONE_GPU_NODES,
            [
                project_doc("apple", quotas=quota(10)),
                project_doc("kiwi", quotas=quota(20)),
                project_doc("mango", quotas=quota(30)),
            ],
            (PoolMix("a100", on_demand_gpus=9, spot_gpus=51),),
            {"apple": (8, 2), "kiwi": (17, 3), "mango": (26, 4)},
            id="a tie in remainders goes to the name first in order, here the smallest quota",
        ),
        pytest.param(
            policy_doc(),
            [
                project_doc("mango", quotas=quota(10)),
                project_doc("kiwi", quotas=quota(20)),
                project_doc("apple", quotas=quota(30)),
            ],
            (PoolMix("a100", on_demand_gpus=9, spot_gpus=51),),
            # on 8-GPU nodes: 1 whole node by largest remainder of 1/6, 2/6, 3/6 goes to
            # apple; the 1 GPU left over what is left of the quotas (10/20/22) goes to apple too
            {"mango": (10, 0), "kiwi": (20, 0), "apple": (21, 9)},
            id="on 8-GPU nodes on-demand goes in whole nodes: one project moves, not three",
        ),
        pytest.param(
            policy_doc(),
            [
                project_doc("alpha", quotas=quota(4)),
                project_doc("bravo", quotas=quota(4)),
                project_doc("charlie", quotas=quota(24)),
            ],
            (PoolMix("a100", on_demand_gpus=16, spot_gpus=16),),
            # alpha and bravo hold no whole node, so both nodes go to charlie
            {"alpha": (4, 0), "bravo": (4, 0), "charlie": (8, 16)},
            id="whole nodes go only to quotas that hold a whole node",
        ),
        pytest.param(
            policy_doc(),
            [
                project_doc("bravo", quotas=quota(10)),
                project_doc("charlie", quotas=quota(10)),
                project_doc("alpha", quotas=quota(10)),
            ],
            (PoolMix("a100", on_demand_gpus=7, spot_gpus=23),),
            # 7/3 = 2.33 each; the one left over goes to alpha
            {"alpha": (7, 3), "bravo": (8, 2), "charlie": (8, 2)},
            id="equal quotas split 7 as 3/2/2 with the extra GPU to the first name",
        ),
        pytest.param(
            policy_doc(),
            [
                project_doc("alpha", quotas=quota(14)),
                project_doc("beta", quotas=quota(4)),
                project_doc("delta", quotas=quota(1)),
                project_doc("gamma", quotas=quota(1)),
            ],
            (PoolMix("a100", on_demand_gpus=2, spot_gpus=18),),
            # exact 1.4/0.4/0.1/0.1: floors 1+0+0+0=1, one left; alpha and beta tie at .4
            {"alpha": (12, 2), "beta": (4, 0), "delta": (1, 0), "gamma": (1, 0)},
            id="a tie at a remainder floats cannot represent exactly still goes to the first name",
        ),
        pytest.param(
            policy_doc(),
            [project_doc("alpha", quotas=quota(10)), project_doc("bravo", quotas=quota(6))],
            (PoolMix("a100", on_demand_gpus=0, spot_gpus=16),),
            {"alpha": (10, 0), "bravo": (6, 0)},
            id="no on-demand GPUs put every spot-capable quota on spot",
        ),
        pytest.param(
            policy_doc(),
            [project_doc("alpha", quotas=quota(10)), project_doc("bravo", quotas=quota(6))],
            (PoolMix("a100", on_demand_gpus=40, spot_gpus=0),),
            {"alpha": (0, 10), "bravo": (0, 6)},
            id="more on-demand GPUs than quota put every quota on on-demand and no more",
        ),
        pytest.param(
            ONE_GPU_NODES,
            [
                project_doc("nospot", quotas=quota(8), allowSpot=False),
                project_doc("alpha", quotas=quota(10)),
                project_doc("bravo", quotas=quota(30)),
            ],
            (PoolMix("a100", on_demand_gpus=18, spot_gpus=30),),
            # nospot takes 8 first; 10 left over 10/30 = 2.5/7.5, tie at .5 goes to alpha
            {"nospot": (0, 8), "alpha": (7, 3), "bravo": (23, 7)},
            id="a project that forbids spot gets all on-demand first and the rest is shared",
        ),
        pytest.param(
            policy_doc(tiers=tiers()),
            [
                project_doc("vault", tier="secure", quotas=quota(12)),
                project_doc("alpha", quotas=quota(10)),
                project_doc("bravo", quotas=quota(10)),
            ],
            (PoolMix("a100", on_demand_gpus=17, spot_gpus=15),),
            # vault takes 12; 5 left over 10/10 = 2.5 each, tie goes to alpha
            {"vault": (0, 12), "alpha": (7, 3), "bravo": (8, 2)},
            id="a project in a tier that forbids spot gets all on-demand first",
        ),
        pytest.param(
            policy_doc(tiers=tiers(reserved=[{"pool": "a100", "gpus": 6}])),
            [project_doc("alpha", quotas=quota(10)), project_doc("bravo", quotas=quota(20))],
            (PoolMix("a100", on_demand_gpus=12, spot_gpus=24),),
            # the reservation of 6 leaves 6 to share over 10/20 = 2/4
            {"alpha": (8, 2), "bravo": (16, 4)},
            id="tier reservations come off the on-demand share of the projects",
        ),
        pytest.param(
            policy_doc(tiers=tiers(reserved=[{"pool": "a100", "gpus": 6}])),
            [
                project_doc("nospot", quotas=quota(4), allowSpot=False),
                project_doc("alpha", quotas=quota(10)),
            ],
            (PoolMix("a100", on_demand_gpus=8, spot_gpus=12),),
            {"nospot": (0, 4), "alpha": (10, 0)},
            id="on-demand below reservations plus spot-less quotas leaves spot-capable ones none",
        ),
        pytest.param(
            policy_doc(),
            [project_doc("alpha", quotas=quota(0)), project_doc("bravo", quotas=quota(12))],
            (PoolMix("a100", on_demand_gpus=5, spot_gpus=7),),
            {"alpha": (0, 0), "bravo": (7, 5)},
            id="a quota of zero gets nothing of either type",
        ),
    ],
)
def test_split_quotas_one_pool(
    policy: Doc,
    projects: list[Doc],
    mixes: tuple[PoolMix, ...],
    want_split: dict[str, tuple[int, int]],
) -> None:
    """want_split maps each project to its (spot, on-demand) GPUs on pool a100."""
    quotas = split_quotas(load(policy, *projects), mixes)
    got = {project: (q.spot_gpus, q.on_demand_gpus) for (project, _), q in quotas.items()}
    assert got == want_split


def test_split_quotas_splits_each_pool_on_its_own() -> None:
    policy_set = load(
        policy_doc(pools=[pool_doc(), H100]),
        project_doc("alpha", quotas=[*quota(10), *quota(9, "h100")]),
        project_doc("bravo", quotas=quota(30)),
        project_doc("charlie", quotas=quota(3, "h100")),
    )
    mixes = (
        PoolMix("a100", on_demand_gpus=8, spot_gpus=32),
        PoolMix("h100", on_demand_gpus=5, spot_gpus=7),
    )
    got = {
        key: (q.spot_gpus, q.on_demand_gpus) for key, q in split_quotas(policy_set, mixes).items()
    }
    # a100 (8-GPU nodes): one whole node over 10/30 goes to bravo; h100: 5 over 9/3 =
    # 3.75/1.25, floors 3+1, the one left to .75
    assert got == {
        ("alpha", "a100"): (10, 0),
        ("bravo", "a100"): (22, 8),
        ("alpha", "h100"): (5, 4),
        ("charlie", "h100"): (2, 1),
    }


@pytest.mark.parametrize(
    ("project", "on_demand", "want_quota"),
    [
        pytest.param(
            project_doc("alpha", quotas=quota(16)),
            6,
            FlavorQuota("alpha", "a100", 10, 6, None, None, None, None),
            id="limits absent stay None on both flavors",
        ),
        pytest.param(
            project_doc("alpha", quotas=quota(16, borrowingLimitGpus=10)),
            6,
            # on-demand part round(10 * 6 / 16 = 3.75) = 4, spot the other 6
            FlavorQuota("alpha", "a100", 10, 6, 6, 4, None, None),
            id="a borrowing limit of 10 splits 6/4 like a 10/6 nominal quota",
        ),
        pytest.param(
            project_doc("alpha", quotas=quota(16, borrowingLimitGpus=40)),
            4,
            # round(40 * 4 / 16) = 10
            FlavorQuota("alpha", "a100", 12, 4, 30, 10, None, None),
            id="a borrowing limit above the nominal quota splits in the same proportion",
        ),
        pytest.param(
            project_doc("alpha", quotas=quota(16, lendingLimitGpus=5)),
            6,
            # round(5 * 6 / 16 = 1.875) = 2, spot 3
            FlavorQuota("alpha", "a100", 10, 6, None, None, 3, 2),
            id="a lending limit of 5 splits 3/2 like a 10/6 nominal quota",
        ),
        pytest.param(
            project_doc("alpha", quotas=quota(16, lendingLimitGpus=16)),
            6,
            FlavorQuota("alpha", "a100", 10, 6, None, None, 10, 6),
            id="a lending limit equal to the nominal quota lends each flavor's whole quota",
        ),
        pytest.param(
            project_doc("alpha", quotas=quota(16, borrowingLimitGpus=0, lendingLimitGpus=0)),
            6,
            FlavorQuota("alpha", "a100", 10, 6, 0, 0, 0, 0),
            id="limits of zero are zero on both flavors, not None",
        ),
        pytest.param(
            project_doc("alpha", quotas=quota(16, borrowingLimitGpus=8, lendingLimitGpus=6)),
            0,
            FlavorQuota("alpha", "a100", 16, 0, 8, 0, 6, 0),
            id="with the whole quota on spot both limits are all on the spot flavor",
        ),
        pytest.param(
            project_doc("alpha", quotas=quota(16, borrowingLimitGpus=8, lendingLimitGpus=6)),
            16,
            FlavorQuota("alpha", "a100", 0, 16, 0, 8, 0, 6),
            id="with the whole quota on on-demand both limits are all on the on-demand flavor",
        ),
        pytest.param(
            project_doc(
                "alpha",
                quotas=quota(16, borrowingLimitGpus=10, lendingLimitGpus=4),
                allowSpot=False,
            ),
            16,
            FlavorQuota("alpha", "a100", 0, 16, None, 10, None, 4),
            id="a project that cannot use spot keeps its whole limits on on-demand, spot ones None",
        ),
        pytest.param(
            project_doc("alpha", quotas=quota(0, borrowingLimitGpus=8)),
            0,
            FlavorQuota("alpha", "a100", 0, 0, 8, 0, None, None),
            id="a zero quota's borrowing limit goes to the spot flavor",
        ),
    ],
)
def test_split_quotas_limits(project: Doc, on_demand: int, want_quota: FlavorQuota) -> None:
    policy_set = load(policy_doc(), project)
    total = sum(q["nominalGpus"] for q in project["spec"]["quotas"])
    mix = PoolMix("a100", on_demand_gpus=on_demand, spot_gpus=total - on_demand)
    assert split_quotas(policy_set, (mix,)) == {("alpha", "a100"): want_quota}


def test_split_quotas_of_a_pool_without_projects_is_empty() -> None:
    policy_set = load(policy_doc(pools=[pool_doc(), H100]), project_doc())
    assert set(split_quotas(policy_set, resolve_mix(policy_set))) == {("vision", "a100")}


# --------------------------------------------------------------------------- properties

POOLS = ("a100", "h100")


@st.composite
def policy_sets(draw: st.DrawFn) -> tuple[PolicySet, dict[str, int]]:
    """A valid policy over two large pools, its projects, and requested on-demand targets."""
    reserved = {pool: draw(st.integers(0, 40)) for pool in POOLS}
    production_spot = draw(st.booleans())
    projects: list[Doc] = []
    on_demand_only = dict(reserved)
    for i in range(draw(st.integers(0, 7))):
        tier = draw(st.sampled_from(["production", "research"]))
        allow_spot = draw(st.booleans())
        spot_ok = allow_spot and (tier == "research" or production_spot)
        quotas = []
        for pool in draw(st.lists(st.sampled_from(POOLS), min_size=1, max_size=2, unique=True)):
            nominal = draw(st.integers(0, 300))
            entry: Doc = {"pool": pool, "nominalGpus": nominal}
            if draw(st.booleans()):
                entry["borrowingLimitGpus"] = draw(st.integers(0, 500))
            if draw(st.booleans()):
                entry["lendingLimitGpus"] = draw(st.integers(0, nominal))
            quotas.append(entry)
            if not spot_ok:
                on_demand_only[pool] += nominal
        projects.append(project_doc(f"p{i}", tier=tier, allowSpot=allow_spot, quotas=quotas))
    pools = []
    for pool in POOLS:
        ceiling = on_demand_only[pool] + draw(st.integers(0, 400))
        floor_gpus = draw(st.integers(0, ceiling))
        pools.append(
            pool_doc(
                pool, maxGpus=100000, onDemand={"floorGpus": floor_gpus, "ceilingGpus": ceiling}
            )
        )
    production: Doc = {"name": "production", "priority": 1000, "allowSpot": production_spot}
    production["reserved"] = [{"pool": p, "gpus": g} for p, g in reserved.items() if g > 0]
    policy = policy_doc(pools=pools, tiers=[production, {"name": "research", "priority": 100}])
    targets = {pool: draw(st.integers(0, 1000)) for pool in POOLS if draw(st.booleans())}
    return load(policy, *projects), targets


@settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(case=policy_sets())
def test_split_quotas_properties(case: tuple[PolicySet, dict[str, int]]) -> None:
    """Whatever the policy and targets, the parts add up and stay within their bounds."""
    policy_set, targets = case
    demands = pool_demands(policy_set)
    mixes = resolve_mix(policy_set, targets)
    quotas = split_quotas(policy_set, mixes)
    reserved = {
        pool: sum(
            r.gpus for t in policy_set.policy.spec.tiers for r in t.reserved if r.pool == pool
        )
        for pool in POOLS
    }
    for mix in mixes:
        demand = demands[mix.pool]
        pool = policy_set.policy.pool(mix.pool)
        assert pool is not None
        assert mix.on_demand_gpus >= max(pool.on_demand.floor_gpus, demand.on_demand_only_gpus)
        assert mix.on_demand_gpus <= max(pool.on_demand.floor_gpus, pool.on_demand.ceiling_gpus)
        assert mix.spot_gpus == max(demand.total_gpus - mix.on_demand_gpus, 0)
        on_pool = [q for (_, p), q in quotas.items() if p == mix.pool]
        # Every on-demand GPU under the mix belongs to a reservation or a project's quota.
        assert reserved[mix.pool] + sum(q.on_demand_gpus for q in on_pool) == min(
            mix.on_demand_gpus, demand.total_gpus
        )
        assert sum(q.spot_gpus for q in on_pool) == mix.spot_gpus
    for project in policy_set.projects:
        spot_ok = spot_allowed(policy_set, project)
        for pool_quota in project.spec.quotas:
            q = quotas[(project.name, pool_quota.pool)]
            assert q.spot_gpus >= 0 and q.on_demand_gpus >= 0
            assert q.spot_gpus + q.on_demand_gpus == pool_quota.nominal_gpus
            if not spot_ok:
                assert q.spot_gpus == 0
                assert q.spot_borrowing_limit is None and q.spot_lending_limit is None
                assert q.on_demand_borrowing_limit == pool_quota.borrowing_limit_gpus
                assert q.on_demand_lending_limit == pool_quota.lending_limit_gpus
                continue
            for limit, spot_part, on_demand_part in (
                (
                    pool_quota.borrowing_limit_gpus,
                    q.spot_borrowing_limit,
                    q.on_demand_borrowing_limit,
                ),
                (pool_quota.lending_limit_gpus, q.spot_lending_limit, q.on_demand_lending_limit),
            ):
                if limit is None:
                    assert spot_part is None and on_demand_part is None
                else:
                    assert spot_part is not None and on_demand_part is not None
                    assert spot_part >= 0 and on_demand_part >= 0
                    assert spot_part + on_demand_part == limit
            if q.spot_lending_limit is not None and q.on_demand_lending_limit is not None:
                assert q.spot_lending_limit <= q.spot_gpus
                assert q.on_demand_lending_limit <= q.on_demand_gpus


@pytest.mark.parametrize(
    ("weights", "total"),
    [
        pytest.param([10, 20, 30], 7, id="quotas 10/20/30 sharing 7"),
        pytest.param([14, 4, 1, 1], 2, id="quotas 14/4/1/1 sharing 2"),
        pytest.param([3, 3, 3, 3, 3, 3, 3], 10, id="seven equal quotas sharing 10"),
        pytest.param([97, 1, 1, 1], 3, id="one large and three tiny quotas sharing 3"),
    ],
)
def test_every_on_demand_share_is_within_one_gpu_of_its_exact_proportion(
    weights: list[int], total: int
) -> None:
    projects = [project_doc(f"p{i}", quotas=quota(w)) for i, w in enumerate(weights)]
    mix = PoolMix("a100", on_demand_gpus=total, spot_gpus=sum(weights) - total)
    quotas = split_quotas(load(policy_doc(), *projects), (mix,))
    for i, w in enumerate(weights):
        exact = Fraction(total * w, sum(weights))
        assert quotas[(f"p{i}", "a100")].on_demand_gpus in (floor(exact), floor(exact) + 1)


# --------------------------------------------------------------------------- desired.render


def key(obj: KubeObject) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


RENDER_POLICY = policy_doc(
    pools=[pool_doc(warmPool={"minGpus": 0, "maxGpus": 16}), H100],
)
RENDER_PROJECTS = (
    project_doc("alpha", namespaces=["zz-alpha"], quotas=[*quota(16), *quota(8, "h100")]),
    project_doc("beta", namespaces=["aa-beta", "mm-beta"], quotas=quota(16)),
    project_doc("gamma", tier="research", quotas=quota(4, "h100")),
)


def test_render_orders_objects_by_kind_then_namespace_then_name() -> None:
    rendered = desired.render(load(RENDER_POLICY, *RENDER_PROJECTS))
    ns = names.DEFAULT_NAMESPACE
    assert [key(o) for o in rendered.objects] == [
        ("PriorityClass", "", "quartermaster-warm-pool"),
        ("WorkloadPriorityClass", "", "production"),
        ("WorkloadPriorityClass", "", "research"),
        ("ResourceFlavor", "", "a100-on-demand"),
        ("ResourceFlavor", "", "a100-spot"),
        ("ResourceFlavor", "", "h100-on-demand"),
        ("ResourceFlavor", "", "h100-spot"),
        ("Cohort", "", "fleet"),
        ("Cohort", "", "fleet-tier-production"),
        ("Cohort", "", "fleet-tier-research"),
        ("ClusterQueue", "", "alpha"),
        ("ClusterQueue", "", "beta"),
        ("ClusterQueue", "", "gamma"),
        ("LocalQueue", "aa-beta", "beta"),
        ("LocalQueue", "gamma", "gamma"),
        ("LocalQueue", "mm-beta", "beta"),
        ("LocalQueue", "zz-alpha", "alpha"),
        ("NodePool", "", "a100-on-demand"),
        ("NodePool", "", "a100-spot"),
        ("NodePool", "", "h100-on-demand"),
        ("NodePool", "", "h100-spot"),
        ("Deployment", ns, "warm-a100"),
        ("ScaledObject", ns, "warm-a100"),
    ]
    kinds = [o["kind"] for o in rendered.objects]
    assert kinds == sorted(kinds, key=desired.KIND_ORDER.index)


def test_render_puts_namespaced_warm_pool_objects_in_the_given_namespace() -> None:
    rendered = desired.render(load(RENDER_POLICY, *RENDER_PROJECTS), namespace="gpu-ops")
    assert [key(o) for o in rendered.objects if o["kind"] in ("Deployment", "ScaledObject")] == [
        ("Deployment", "gpu-ops", "warm-a100"),
        ("ScaledObject", "gpu-ops", "warm-a100"),
    ]


@pytest.mark.parametrize(
    ("before", "after", "want_mix", "want_changed"),
    [
        pytest.param(
            None,
            {"a100": 20},
            (
                PoolMix("a100", on_demand_gpus=20, spot_gpus=12),
                PoolMix("h100", on_demand_gpus=0, spot_gpus=12),
            ),
            {
                ("NodePool", "", "a100-on-demand"),
                ("NodePool", "", "a100-spot"),
                ("ClusterQueue", "", "alpha"),
                ("ClusterQueue", "", "beta"),
            },
            id="more on-demand in a100 changes a100's NodePools and the queues of its projects",
        ),
        pytest.param(
            {"a100": 20},
            {"a100": 20, "h100": 6},
            (
                PoolMix("a100", on_demand_gpus=20, spot_gpus=12),
                PoolMix("h100", on_demand_gpus=6, spot_gpus=6),
            ),
            {
                ("NodePool", "", "h100-on-demand"),
                ("NodePool", "", "h100-spot"),
                ("ClusterQueue", "", "alpha"),
                ("ClusterQueue", "", "gamma"),
            },
            id="more on-demand in h100 changes h100's NodePools and the queues of its projects",
        ),
        pytest.param(
            {"a100": 20},
            {"a100": 20},
            (
                PoolMix("a100", on_demand_gpus=20, spot_gpus=12),
                PoolMix("h100", on_demand_gpus=0, spot_gpus=12),
            ),
            set(),
            id="the same mix renders the same objects",
        ),
    ],
)
def test_a_change_of_mix_changes_only_node_pools_and_cluster_queues(
    before: dict[str, int] | None,
    after: dict[str, int],
    want_mix: tuple[PoolMix, ...],
    want_changed: set[tuple[str, str, str]],
) -> None:
    policy_set = load(RENDER_POLICY, *RENDER_PROJECTS)
    old = {key(o): o for o in desired.render(policy_set, on_demand_gpus=before).objects}
    new_render = desired.render(policy_set, on_demand_gpus=after)
    new = {key(o): o for o in new_render.objects}
    assert new_render.mix == want_mix
    assert set(old) == set(new)
    assert {k for k in new if new[k] != old[k]} == want_changed


@settings(max_examples=300, deadline=None)
@given(shares=st.dictionaries(st.sampled_from([f"p{i}" for i in range(12)]), st.integers(0, 24)))
def test_keeping_gangs_whole_takes_from_the_largest_shares_as_a_full_sort_would(
    shares: dict[str, int],
) -> None:
    assert list(_largest_first(shares)) == sorted(shares, key=lambda n: (-shares[n], n))
