"""The Kueue model decides as Kueue 0.19 does, case by case, each from the function that decides it.

Each case is one that a side-by-side run of a real Kueue and the model once told apart: the
same ClusterQueues (two flavors, spot listed first, labelled `karpenter.sh/capacity-type`),
the same submissions, different admissions. Each table row states what Kueue does and the
function of `kubernetes-sigs/kueue` that does it.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from controller.api.loader import load_path
from controller.examples import EXAMPLE_DIR
from controller.render.desired import render
from controller.sim.kueue import (
    ANY,
    LOWER_PRIORITY,
    MAY_STOP_SEARCH,
    NEVER,
    TRY_NEXT_FLAVOR,
    CohortSpec,
    FlavorQuota,
    Kueue,
    NodeSelectorTerm,
    QueueSpec,
    Workload,
    flavor_matches,
    specs_from_objects,
)

SPOT, ON_DEMAND = "a100-spot", "a100-on-demand"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
LABELS = {
    SPOT: {CAPACITY_TYPE: "spot", "pool": "a100"},
    ON_DEMAND: {CAPACITY_TYPE: "on-demand", "pool": "a100"},
}
ON_DEMAND_ONLY = {CAPACITY_TYPE: "on-demand"}


def queue(
    name: str,
    *,
    spot: FlavorQuota,
    on_demand: FlavorQuota,
    cohort: str | None = "team",
    borrow_within_cohort: str = NEVER,
    when_can_preempt: str = TRY_NEXT_FLAVOR,
) -> QueueSpec:
    return QueueSpec(
        name=name,
        cohort=cohort,
        flavors=(SPOT, ON_DEMAND),
        quotas={SPOT: spot, ON_DEMAND: on_demand},
        within_cluster_queue=LOWER_PRIORITY,
        reclaim_within_cohort=ANY,
        borrow_within_cohort=borrow_within_cohort,
        when_can_borrow=TRY_NEXT_FLAVOR,
        when_can_preempt=when_can_preempt,
        node_labels=LABELS,
    )


def submit(
    kueue: Kueue,
    key: int,
    queue_name: str,
    gpus: int,
    *,
    priority: int,
    at: float,
    selector: Mapping[str, str] | None = None,
) -> None:
    kueue.submit(
        Workload(
            key=key,
            queue=queue_name,
            gpus=gpus,
            priority=priority,
            created=at,
            queued_at=at,
            node_selector=dict(selector or {}),
        )
    )


# --------------------------------------------------------------------------- 1. node selectors


@pytest.mark.parametrize(
    ("labels", "selector", "affinity", "matches"),
    [
        # The selector's keys that the flavor labels must match.
        (LABELS[ON_DEMAND], ON_DEMAND_ONLY, (), True),
        (LABELS[SPOT], ON_DEMAND_ONLY, (), False),
        # A key no node of the flavor carries is left to the kube-scheduler among its nodes.
        (LABELS[SPOT], {"topology.kubernetes.io/zone": "us-east-1a"}, (), True),
        # Required affinity: terms ORed, requirements ANDed.
        (LABELS[SPOT], {}, (((CAPACITY_TYPE, "NotIn", ("spot",)),),), False),
        (LABELS[ON_DEMAND], {}, (((CAPACITY_TYPE, "NotIn", ("spot",)),),), True),
        (
            LABELS[SPOT],
            {},
            (((CAPACITY_TYPE, "In", ("on-demand",)),), (("pool", "In", ("a100",)),)),
            True,
        ),
        (LABELS[SPOT], {}, (((CAPACITY_TYPE, "DoesNotExist", ()),),), False),
        # A term left with no requirement on the flavor's keys matches it, whatever else.
        (
            LABELS[SPOT],
            {},
            (((CAPACITY_TYPE, "In", ("on-demand",)),), (("zone", "In", ("b",)),)),
            True,
        ),
        # ... but the node selector still counts.
        (LABELS[SPOT], ON_DEMAND_ONLY, ((("zone", "In", ("b",)),),), False),
    ],
)
def test_a_flavor_matches_as_the_flavor_selector_decides(
    labels: Mapping[str, str],
    selector: Mapping[str, str],
    affinity: tuple[NodeSelectorTerm, ...],
    matches: bool,
) -> None:
    """`checkFlavorForPodSets` with `flavorSelector`: only the flavor's own label keys
    count, then the kube-scheduler's required node affinity is matched against its labels."""
    assert flavor_matches(labels, selector, affinity) is matches


def test_a_workload_that_selects_on_demand_is_admitted_on_on_demand() -> None:
    """Spot has room and is listed first, but the pod set selects on-demand: Kueue tries
    only the flavors its selector matches (`findFlavorForPodSets` skips a flavor
    `checkFlavorForPodSets` refuses). Three such low-priority workloads fill the on-demand
    quota; a high-priority one selecting on-demand then evicts all three, where a model that
    put them on spot evicted none."""
    kueue = Kueue([queue("mine", spot=FlavorQuota(8), on_demand=FlavorQuota(6), cohort=None)], [])
    for key in range(3):
        submit(kueue, key, "mine", 2, priority=0, at=float(key), selector=ON_DEMAND_ONLY)
    admitted = kueue.schedule(now=3.0)
    assert [(a.key, a.flavor) for a in admitted] == [(0, ON_DEMAND), (1, ON_DEMAND), (2, ON_DEMAND)]

    submit(kueue, 9, "mine", 6, priority=10, at=4.0, selector=ON_DEMAND_ONLY)
    (admission,) = kueue.schedule(now=4.0)

    assert (admission.key, admission.flavor) == (9, ON_DEMAND)
    assert sorted(admission.victims) == [0, 1, 2]


def test_a_workload_no_flavor_matches_stays_pending() -> None:
    kueue = Kueue([queue("mine", spot=FlavorQuota(8), on_demand=FlavorQuota(0), cohort=None)], [])
    submit(kueue, 0, "mine", 2, priority=0, at=0.0, selector={CAPACITY_TYPE: "reserved"})
    kueue.workloads[0].affinity = (((CAPACITY_TYPE, "In", ("reserved",)),),)

    assert kueue.schedule(now=0.0) == []
    assert [w.key for w in kueue.pending()] == [0]


def test_the_rendered_flavors_carry_their_node_labels() -> None:
    """`specs_from_objects` reads each ResourceFlavor's `nodeLabels` into the queues that
    list it, and `flavorFungibility.whenCanPreempt` (TryNextFlavor as rendered)."""
    objects = render(load_path(EXAMPLE_DIR)).objects
    flavors = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ResourceFlavor"}
    queues, _ = specs_from_objects(objects, {"nvidia.com/gpu"})

    assert queues
    for spec in queues:
        assert spec.when_can_preempt == TRY_NEXT_FLAVOR
        assert set(spec.node_labels) == set(spec.flavors)
        for flavor in spec.flavors:
            assert spec.node_labels[flavor] == flavors[flavor]["spec"]["nodeLabels"]
            assert spec.node_labels[flavor][CAPACITY_TYPE] in ("spot", "on-demand")


# --------------------------------------------------------------------------- 2. queue order


def test_a_preempted_workload_keeps_its_place_in_the_queue() -> None:
    """`workload.Ordering.GetQueueOrderTimestamp` is the creation time unless the eviction
    was for pods not ready or by an admission check: a preempted workload goes back ahead of
    a newer one of its priority. A (created at 0) runs; B (created at 5) waits; C (priority
    10) preempts A at 10; when C finishes, Kueue admits A, the older, not B."""
    kueue = Kueue([queue("mine", spot=FlavorQuota(8), on_demand=FlavorQuota(0), cohort=None)], [])
    submit(kueue, 0, "mine", 8, priority=0, at=0.0)
    assert [a.key for a in kueue.schedule(now=0.0)] == [0]
    submit(kueue, 1, "mine", 8, priority=0, at=5.0)
    assert kueue.schedule(now=5.0) == []
    submit(kueue, 2, "mine", 8, priority=10, at=10.0)
    (preemption,) = kueue.schedule(now=10.0)
    assert (preemption.key, preemption.victims) == (2, (0,))

    kueue.finish(2)
    (admission,) = kueue.schedule(now=20.0)

    assert admission.key == 0
    assert kueue.workloads[0].queued_at == 0.0


# --------------------------------------------------------------------------- 3. preemption gate


@pytest.mark.parametrize(
    ("borrow_within_cohort", "tier_cohort", "victims"),
    [
        # 8 > nominal 6, the queue's cohort is the root, borrowWithinCohort Never:
        # `fitsResourceQuota` gives NoFit without looking for victims. It waits.
        (NEVER, False, None),
        # borrowWithinCohort allows preempting while borrowing (`canPreemptWhileBorrowing`).
        (LOWER_PRIORITY, False, (0,)),
        # Under a tier cohort that holds the 8, the queue has a claim below the root
        # (`FindHeightOfLowestSubtreeThatFits` says mayReclaimInHierarchy).
        (NEVER, True, (0,)),
    ],
)
def test_preemption_that_would_end_in_borrowing_needs_a_right_to_it(
    borrow_within_cohort: str, tier_cohort: bool, victims: tuple[int, ...] | None
) -> None:
    """A queue of nominal 6 (borrowing limit 4) runs an 8-GPU mid-priority workload on spot,
    borrowing 2 of its neighbour's 10; an 8-GPU high-priority one arrives in the same queue.
    Kueue looks for victims on a flavor only when the request fits the queue's nominal
    quota, a hierarchical reclaim is possible, or `borrowWithinCohort` allows it."""
    cohort = "tier" if tier_cohort else "team"
    queues = [
        queue(
            "mine",
            spot=FlavorQuota(6, borrowing_limit=4),
            on_demand=FlavorQuota(0, borrowing_limit=0),
            cohort=cohort,
            borrow_within_cohort=borrow_within_cohort,
        ),
        queue("neighbour", spot=FlavorQuota(10), on_demand=FlavorQuota(0), cohort=cohort),
    ]
    cohorts = (
        [
            CohortSpec(name="tier", parent="root", quotas={}),
            CohortSpec(name="root", parent=None, quotas={}),
        ]
        if tier_cohort
        else [CohortSpec(name="team", parent=None, quotas={})]
    )
    kueue = Kueue(queues, cohorts)
    submit(kueue, 0, "mine", 8, priority=5, at=0.0)
    (first,) = kueue.schedule(now=0.0)
    assert (first.flavor, first.borrowed) == (SPOT, True)

    submit(kueue, 1, "mine", 8, priority=10, at=1.0)
    admitted = kueue.schedule(now=1.0)

    if victims is None:
        assert admitted == []
        assert kueue.workloads[0].admitted_at == 0.0
    else:
        assert [(a.key, a.flavor, a.victims) for a in admitted] == [(1, SPOT, victims)]


# --------------------------------------------------------------------------- 4. flavor choice


@pytest.mark.parametrize(
    ("when_can_preempt", "admissions"),
    [
        # Spot means preempting in its own queue (Preempt), on-demand reclaiming what another
        # queue borrowed (Reclaim): TryNextFlavor goes on past spot and `isPreferred` ranks
        # Reclaim above Preempt. The queue's own work keeps running on spot.
        (TRY_NEXT_FLAVOR, [(9, ON_DEMAND, (2,))]),
        # MayStopSearch stops at the first flavor preemption can make room on: its own
        # workload on spot goes; that one, queued again, then reclaims on-demand from the
        # borrower (its queue's nominal quota, `reclaimWithinCohort: Any`), so two evictions
        # where one did.
        (MAY_STOP_SEARCH, [(9, SPOT, (0,)), (0, ON_DEMAND, (2,))]),
    ],
)
def test_among_preemption_options_reclaiming_borrowed_work_is_preferred(
    when_can_preempt: str, admissions: list[tuple[int, str, tuple[int, ...]]]
) -> None:
    """Spot is full with the queue's own low-priority work; on-demand, its own quota, is full
    with another queue's borrowed work. A high-priority workload arrives: Kueue's preemption
    oracle (`SimulatePreemption`) gives spot Preempt and on-demand Reclaim, and
    `findFlavorForPodSets` keeps the preferred one."""
    kueue = Kueue(
        [
            queue(
                "mine",
                spot=FlavorQuota(8),
                on_demand=FlavorQuota(8),
                when_can_preempt=when_can_preempt,
            ),
            queue("other", spot=FlavorQuota(0), on_demand=FlavorQuota(0)),
        ],
        [CohortSpec(name="team", parent=None, quotas={})],
    )
    submit(kueue, 0, "mine", 8, priority=0, at=0.0)
    submit(kueue, 2, "other", 8, priority=0, at=0.0, selector=ON_DEMAND_ONLY)
    assert sorted((a.key, a.flavor, a.borrowed) for a in kueue.schedule(now=0.0)) == [
        (0, SPOT, False),
        (2, ON_DEMAND, True),
    ]

    submit(kueue, 9, "mine", 8, priority=10, at=1.0)

    assert [(a.key, a.flavor, a.victims) for a in kueue.schedule(now=1.0)] == admissions
    assert [w.key for w in kueue.pending()] == [2]


def test_among_fits_that_borrow_the_lowest_cohort_is_preferred() -> None:
    """Under `whenCanBorrow: TryNextFlavor` with every flavor borrowing, Kueue keeps the one
    whose quota comes from the lowest cohort (`isPreferred` on the borrowing level, from
    `FindHeightOfLowestSubtreeThatFits`): spot would borrow from the root, on-demand from the
    queue's own tier."""
    kueue = Kueue(
        [
            queue("mine", spot=FlavorQuota(0), on_demand=FlavorQuota(0), cohort="tier"),
            queue("tier-mate", spot=FlavorQuota(0), on_demand=FlavorQuota(8), cohort="tier"),
            queue("far", spot=FlavorQuota(8), on_demand=FlavorQuota(0), cohort="other-tier"),
        ],
        [
            CohortSpec(name="tier", parent="root", quotas={}),
            CohortSpec(name="other-tier", parent="root", quotas={}),
            CohortSpec(name="root", parent=None, quotas={}),
        ],
    )
    submit(kueue, 0, "mine", 4, priority=0, at=0.0)

    (admission,) = kueue.schedule(now=0.0)

    assert (admission.flavor, admission.borrowed) == (ON_DEMAND, True)


def test_a_lane_written_to_a_set_aside_workload_puts_it_back_in_line() -> None:
    """Spot is full and its head set aside; the controller's lane makes its pod sets select
    on-demand, where there is room: Kueue admits it there at once. An admitted workload's
    pod sets are not changed (Kueue refuses it once quota is reserved)."""
    kueue = Kueue([queue("mine", spot=FlavorQuota(8), on_demand=FlavorQuota(8), cohort=None)], [])
    submit(kueue, 0, "mine", 8, priority=0, at=0.0)
    submit(kueue, 1, "mine", 8, priority=0, at=1.0, selector={CAPACITY_TYPE: "spot"})
    assert [(a.key, a.flavor) for a in kueue.schedule(now=1.0)] == [(0, SPOT)]
    assert [w.key for w in kueue.pending()] == [1]

    kueue.set_node_selector(1, ON_DEMAND_ONLY)
    kueue.set_node_selector(0, ON_DEMAND_ONLY)

    assert [(a.key, a.flavor) for a in kueue.schedule(now=2.0)] == [(1, ON_DEMAND)]
    assert kueue.workloads[0].node_selector == {}
