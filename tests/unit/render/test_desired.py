"""Tests for the renderer handing again the objects whose inputs did not change.

`render` keeps the last policy's objects (`controller.render.desired._Reuse`): the objects of
the policy alone, and each project's ClusterQueue with the splits it was rendered from. What
must hold: a render equals one built from nothing, whatever was rendered before it; an
unchanged object is the very same object (the reconciler's diffs are remembered by it); and a
changed split, a deferred tier or another policy is never answered from the memo.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from controller.api.loader import load_policy_set
from controller.api.policy_set import PolicySet
from controller.capacity import PoolTarget
from controller.render import desired
from controller.render.desired import Rendered, render
from controller.render.kueue import KUEUE_DEFAULT_WHEN_CAN_BORROW
from controller.render.objects import KubeObject
from tests.builders import policy_doc, pool_doc, project_doc

POOL = pool_doc(
    "a100", onDemand={"floorGpus": 0, "ceilingGpus": 64}, warmPool={"minGpus": 0, "maxGpus": 8}
)


def fleet() -> PolicySet:
    """Three projects of 16 GPUs in one pool with a warm pool (a Deployment in the
    controller's namespace): `vision` and `speech` in production, `search` in research."""
    return load_policy_set(
        [
            (
                "policy.yaml",
                policy_doc(
                    pools=[POOL],
                    tiers=[
                        {"name": "production", "priority": 1000},
                        {"name": "research", "priority": 100},
                    ],
                ),
            ),
            *(
                (
                    f"{name}.yaml",
                    project_doc(name, tier=tier, quotas=[{"pool": "a100", "nominalGpus": 16}]),
                )
                for name, tier in (
                    ("vision", "production"),
                    ("speech", "production"),
                    ("search", "research"),
                )
            ),
        ]
    )


def target(on_demand: int, **changes: Any) -> dict[str, PoolTarget]:
    return {"a100": PoolTarget(on_demand, **changes)}


def by_key(rendered: Rendered) -> dict[tuple[str, str, str], KubeObject]:
    return {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
        for o in rendered.objects
    }


def fresh(policy_set: PolicySet, targets: Mapping[str, PoolTarget], **kwargs: Any) -> Rendered:
    """The render with nothing kept: the memo emptied first."""
    desired._REUSE = desired._Reuse()
    return render(policy_set, targets=targets, **kwargs)


@pytest.fixture(autouse=True)
def empty_memo() -> None:
    desired._REUSE = desired._Reuse()


def test_the_same_render_hands_the_same_objects() -> None:
    """All but the NodePools, which are few and always built (their limits follow the mix)."""
    policy_set = fleet()
    first = render(policy_set, targets=target(8))
    again = render(policy_set, targets=target(8))
    assert len(first.objects) == len(again.objects)
    assert all(
        a is b for a, b in zip(first.objects, again.objects, strict=True) if a["kind"] != "NodePool"
    )


@pytest.mark.parametrize(
    ("before", "after", "rebuilt"),
    [
        # 8 on-demand GPUs over three 16-GPU projects go, a whole node, to `search`; 16 to
        # `search` and `speech`.
        pytest.param(target(8), target(16), {"speech"}, id="a raise moves one split"),
        pytest.param(target(8), target(8), set(), id="nothing changed"),
        pytest.param(
            target(8),
            target(8, assignments={"vision": 8}),
            {"vision", "search"},
            id="an assignment moves the share",
        ),
        pytest.param(
            target(8),
            target(8, deferred_tiers=("research",)),
            {"search"},
            id="a deferred tier stops its queues borrowing",
        ),
    ],
)
def test_only_the_queues_whose_inputs_changed_are_built_again(
    before: dict[str, PoolTarget], after: dict[str, PoolTarget], rebuilt: set[str]
) -> None:
    policy_set = fleet()
    first = by_key(render(policy_set, targets=before))
    second = by_key(render(policy_set, targets=after))
    assert second == by_key(fresh(policy_set, after))
    new = {key[2] for key, obj in second.items() if first[key] is not obj and key[0] != "NodePool"}
    assert new == rebuilt
    # What the policy alone decides is never built again for it.
    assert all(second[key] is first[key] for key in first if key[0] == "LocalQueue")


def test_another_policy_or_namespace_or_borrowing_rule_gets_its_own_objects() -> None:
    policy_set = fleet()
    first = by_key(render(policy_set, targets=target(8)))
    equal_policy = fleet()  # equal, not the same object: recognised by identity only
    other = by_key(render(equal_policy, targets=target(8)))
    assert other == first
    assert not any(other[key] is first[key] for key in first)

    elsewhere = by_key(render(equal_policy, targets=target(8), namespace="platform"))
    assert elsewhere == by_key(fresh(equal_policy, target(8), namespace="platform"))
    deployments = [key for key in elsewhere if key[0] == "Deployment"]
    assert deployments and all(key[1] == "platform" for key in deployments)

    kueue_default = by_key(
        render(equal_policy, targets=target(8), when_can_borrow=KUEUE_DEFAULT_WHEN_CAN_BORROW)
    )
    queues = [key for key in kueue_default if key[0] == "ClusterQueue"]
    assert all(
        kueue_default[key]["spec"]["flavorFungibility"]["whenCanBorrow"]
        == KUEUE_DEFAULT_WHEN_CAN_BORROW
        for key in queues
    )


def test_a_render_after_any_other_equals_a_fresh_one() -> None:
    """Renders in any order give what a render from nothing gives."""
    policy_set = fleet()
    sequence = [
        target(0),
        target(16),
        target(8, deferred_tiers=("research",)),
        target(8),
        target(24, assignments={"search": 16}),
        target(0),
    ]
    expected = [copy.deepcopy(fresh(policy_set, t).objects) for t in sequence]
    desired._REUSE = desired._Reuse()
    for targets, wanted in zip(sequence, expected, strict=True):
        assert render(policy_set, targets=targets).objects == wanted
