"""A pass where nothing changed decides nothing again and writes nothing.

The example policy and a handful of Workloads, reconciled on snapshots of an in-memory store.
The store is `testenv.memoryserver`'s stand-in for the API server (a fake, said
so), which is all a pass needs from a server to show what it derives again and what it keeps.
The clock is fixed and moved by hand.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any, cast

from controller import names
from controller.api.loader import read_documents
from controller.examples import EXAMPLE_DIR
from controller.kube.client import KubeClient
from controller.reconcile.reconciler import Reconciler
from controller.risk.recalibration import Recalibration, RecalibrationMap
from testenv.kueue_standin import workload_body
from testenv.memoryserver import MemoryServer

FIXED_NOW = datetime(2026, 11, 27, 20, 0, tzinfo=UTC).timestamp()
Doc = dict[str, Any]


def workload(name: str, gpus: int) -> Doc:
    body = workload_body(
        name=name,
        namespace="vision",
        queue="vision-research",
        priority=0,
        pods=1,
        gpus_per_pod=gpus,
        labels={"example.com/paper": "cvpr"},
        annotations={names.ANNOTATION_EXPECTED_DURATION: "13500"},
    )
    body["metadata"]["creationTimestamp"] = "2026-11-27T18:00:00Z"
    return body


def world() -> tuple[MemoryServer, Reconciler, list[float]]:
    store = MemoryServer()
    documents, errors = read_documents(EXAMPLE_DIR)
    assert not errors
    for _, doc in documents:
        store.put(copy.deepcopy(doc))
    for i in range(4):
        store.put(workload(f"cvpr-{i}", 8))
    clock = [FIXED_NOW]
    reconciler = Reconciler(
        cast(KubeClient, store), wall_clock=lambda: datetime.fromtimestamp(clock[0], UTC)
    )
    return store, reconciler, clock


def settle(store: MemoryServer, reconciler: Reconciler, clock: list[float]) -> None:
    """Passes 5 s apart until one writes nothing."""
    for _ in range(5):
        before = len(store.writes)
        reconciler.reconcile(store.snapshot())
        clock[0] += 5
        if len(store.writes) == before:
            return
    raise AssertionError(f"still writing after 5 passes: {store.writes[-5:]}")


def test_a_pass_over_an_unchanged_cluster_keeps_the_plan_and_writes_nothing() -> None:
    store, reconciler, clock = world()
    settle(store, reconciler, clock)
    plan = reconciler._plan
    writes = len(store.writes)

    result = reconciler.reconcile(store.snapshot())

    assert reconciler._plan is plan  # the decision stood: not made again
    assert result.capacity is plan
    assert len(store.writes) == writes
    assert result.writes == 0


def test_a_changed_workload_makes_the_next_pass_decide_again() -> None:
    store, reconciler, clock = world()
    settle(store, reconciler, clock)
    plan = reconciler._plan
    assert plan is not None
    store.put(workload("cvpr-late", 8))

    reconciler.reconcile(store.snapshot())

    again = reconciler._plan
    assert again is not None and again is not plan
    assert again.pending_gpus["vision-research"] == plan.pending_gpus["vision-research"] + 8


def test_the_plan_is_made_again_once_it_is_a_minute_old() -> None:
    store, reconciler, clock = world()
    settle(store, reconciler, clock)
    plan = reconciler._plan
    clock[0] += 60

    reconciler.reconcile(store.snapshot())

    assert reconciler._plan is not plan


def test_a_live_object_edited_by_someone_else_is_put_back() -> None:
    """The remembered "no change needed" belongs to the live object's version, not its name."""
    store, reconciler, clock = world()
    settle(store, reconciler, clock)
    key = next(k for k in store.objects if k[0] == "ClusterQueue")
    edited = copy.deepcopy(store.objects[key])
    edited["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 999
    store.put(edited)

    result = reconciler.reconcile(store.snapshot())

    assert result.updated == 1
    assert store.writes[-1] == ("ClusterQueue", key[2])


def test_a_pass_names_the_seconds_of_its_phases() -> None:
    """The `reconciled` line says where a pass went: every phase, in the order it ran."""
    store, reconciler, _ = world()
    result = reconciler.reconcile(store.snapshot())
    assert list(result.phases) == ["decide", "converge", "lanes", "boosts", "statuses"]
    assert all(seconds >= 0 for seconds in result.phases.values())
    assert result.boosts_written == 4
    assert result.writes >= result.boosts_written + result.status_writes


def test_a_new_recalibration_is_what_the_next_pass_decides_on() -> None:
    """The mix is decided on the calibrated risk: a map refitted from judged deadlines is part
    of what a pass decides on, so the plan is made again with it (and not kept from before)."""
    store, reconciler, clock = world()
    settle(store, reconciler, clock)
    plan = reconciler._plan
    assert plan is not None and plan.observation is not None
    assert plan.observation.recalibration == reconciler.learning.recalibration
    learned = Recalibration(pooled=RecalibrationMap(xs=(0.0, 1.0), ys=(0.0, 0.5), weight=1.0))
    reconciler.learning.recalibration = learned

    reconciler.reconcile(store.snapshot())

    again = reconciler._plan
    assert again is not None and again is not plan
    assert again.observation is not None and again.observation.recalibration is learned
