"""Flavor fungibility in the Kueue model: where work lands when its own spot quota is full.

A cohort of two ClusterQueues over one pool's two flavors, spot listed first as we render
them. `lender` has 16 spot GPUs it does not use. `raised` has 8 spot and 8 on-demand GPUs
(the policy raised its on-demand share) and an 8-GPU workload already on its spot quota. A
second 8-GPU workload of `raised` fits its own on-demand quota, or the cohort's spot by
borrowing from `lender`:

- `whenCanBorrow: MayStopSearch` stops at the first flavor it fits, borrowing or not: spot,
  borrowed. The raised on-demand share goes unused while the cohort has spot to lend.
- `whenCanBorrow: TryNextFlavor` (what we render) goes on to a flavor it fits without
  borrowing: its own on-demand quota. It borrows only when no flavor has room of its own.

This is Kueue's flavor assigner (`shouldTryNextFlavor`, `isPreferred`: a fit without
borrowing beats one with it); the model leaves out the depth of the borrowing (a tier's
cohort before the root), which Kueue also prefers lower.
"""

from __future__ import annotations

import pytest

from controller.api.loader import load_path
from controller.examples import EXAMPLE_DIR
from controller.render.desired import render
from controller.sim.kueue import (
    MAY_STOP_SEARCH,
    TRY_NEXT_FLAVOR,
    CohortSpec,
    FlavorQuota,
    Kueue,
    QueueSpec,
    Workload,
    specs_from_objects,
)

SPOT, ON_DEMAND = "a100-spot", "a100-on-demand"


def cohort(when_can_borrow: str, *, raised_on_demand: int = 8) -> Kueue:
    queues = [
        QueueSpec(
            name="lender",
            cohort="team",
            flavors=(SPOT, ON_DEMAND),
            quotas={SPOT: FlavorQuota(nominal=16), ON_DEMAND: FlavorQuota(nominal=0)},
            when_can_borrow=when_can_borrow,
        ),
        QueueSpec(
            name="raised",
            cohort="team",
            flavors=(SPOT, ON_DEMAND),
            quotas={
                SPOT: FlavorQuota(nominal=8),
                ON_DEMAND: FlavorQuota(nominal=raised_on_demand),
            },
            when_can_borrow=when_can_borrow,
        ),
    ]
    kueue = Kueue(queues, [CohortSpec(name="team", parent=None, quotas={})])
    kueue.submit(Workload(key=0, queue="raised", gpus=8, priority=0, created=0.0))
    (first,) = kueue.schedule(now=0.0)
    assert (first.flavor, first.borrowed) == (SPOT, False)
    return kueue


def second(kueue: Kueue) -> tuple[str, bool]:
    kueue.submit(Workload(key=1, queue="raised", gpus=8, priority=0, created=1.0, queued_at=1.0))
    (admission,) = kueue.schedule(now=1.0)
    return admission.flavor, admission.borrowed


@pytest.mark.parametrize(
    ("when_can_borrow", "raised_on_demand", "lands"),
    [
        # The raised share is used only if the search goes past a borrowing fit.
        (MAY_STOP_SEARCH, 8, (SPOT, True)),
        (TRY_NEXT_FLAVOR, 8, (ON_DEMAND, False)),
        # No on-demand room of its own: both borrow the cohort's spot.
        (MAY_STOP_SEARCH, 0, (SPOT, True)),
        (TRY_NEXT_FLAVOR, 0, (SPOT, True)),
        # On-demand room, but not for a whole 8-GPU pod set: it borrows rather than split.
        (TRY_NEXT_FLAVOR, 4, (SPOT, True)),
    ],
)
def test_where_the_second_workload_lands(
    when_can_borrow: str, raised_on_demand: int, lands: tuple[str, bool]
) -> None:
    assert second(cohort(when_can_borrow, raised_on_demand=raised_on_demand)) == lands


def test_nothing_borrowed_lands_in_the_first_flavor_either_way() -> None:
    for when_can_borrow in (MAY_STOP_SEARCH, TRY_NEXT_FLAVOR):
        kueue = cohort(when_can_borrow)
        kueue.finish(0)
        assert second(kueue) == (SPOT, False)


def test_the_rendered_queue_tries_the_next_flavor_before_borrowing() -> None:
    """What the renderer writes is what the model reads back."""
    objects = render(load_path(EXAMPLE_DIR)).objects
    rendered = [o for o in objects if o["kind"] == "ClusterQueue"]
    assert rendered
    for queue in rendered:
        assert queue["spec"]["flavorFungibility"]["whenCanBorrow"] == TRY_NEXT_FLAVOR
    queues, _ = specs_from_objects(rendered, {"nvidia.com/gpu"})
    assert {q.when_can_borrow for q in queues} == {TRY_NEXT_FLAVOR}


@pytest.mark.parametrize(
    ("fungibility", "read"),
    [
        ({}, MAY_STOP_SEARCH),  # Kueue's default
        ({"whenCanBorrow": "Borrow"}, MAY_STOP_SEARCH),  # MayStopSearch's deprecated name
        ({"whenCanBorrow": "MayStopSearch"}, MAY_STOP_SEARCH),
        ({"whenCanBorrow": "TryNextFlavor"}, TRY_NEXT_FLAVOR),
    ],
)
def test_the_model_reads_when_can_borrow_from_a_cluster_queue(
    fungibility: dict[str, str], read: str
) -> None:
    spec = {"resourceGroups": [], **({"flavorFungibility": fungibility} if fungibility else {})}
    obj = {"kind": "ClusterQueue", "metadata": {"name": "q"}, "spec": spec}
    (queue,), _ = specs_from_objects([obj], {"nvidia.com/gpu"})
    assert queue.when_can_borrow == read
