"""A pass where nothing changed decides nothing again and writes nothing.

The example policy and a handful of Workloads, reconciled on snapshots of an in-memory store.
The store is a stand-in for the API server (a fake, said so): it keeps each object as applied
under a new resourceVersion, and a status apart, which is all a pass needs from a server to
show what it derives again and what it keeps. The clock is fixed and moved by hand.
"""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime
from typing import Any, cast

from controller import names
from controller.api.loader import read_documents
from controller.examples import EXAMPLE_DIR
from controller.kube import kinds
from controller.kube.cache import Observed
from controller.kube.client import KubeClient
from controller.reconcile.reconciler import Reconciler

FIXED_NOW = datetime(2026, 11, 27, 20, 0, tzinfo=UTC).timestamp()
Doc = dict[str, Any]


class Store:
    """Stands in for the API server (see the module docstring)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Doc] = {}
        self.writes: list[tuple[str, str]] = []
        self._versions = itertools.count(1)

    def put(self, obj: Doc) -> Doc:
        meta = obj["metadata"]
        meta["resourceVersion"] = str(next(self._versions))
        self.objects[(obj["kind"], meta.get("namespace") or "", meta["name"])] = obj
        return obj

    def apply(self, kind: kinds.Kind, obj: Doc, *, subresource: str | None = None, **_: Any) -> Doc:
        meta = obj["metadata"]
        self.writes.append((kind.kind, meta["name"]))
        current = self.objects.get((kind.kind, meta.get("namespace") or "", meta["name"]))
        new = copy.deepcopy(current if subresource or kind == kinds.WORKLOAD else obj) or {}
        if subresource:
            new["status"] = copy.deepcopy(obj["status"])
        elif kind == kinds.WORKLOAD:
            new["metadata"].setdefault("annotations", {}).update(obj["metadata"]["annotations"])
        elif current is not None and "status" in current:
            new["status"] = current["status"]
        return self.put(new)

    def create(self, kind: kinds.Kind, obj: Doc) -> Doc:
        return obj

    def delete(self, kind: kinds.Kind, name: str, namespace: str | None = None) -> bool:
        return self.objects.pop((kind.kind, namespace or "", name), None) is not None

    def snapshot(self) -> Observed:
        def of(kind: kinds.Kind) -> tuple[Doc, ...]:
            return tuple(o for (k, _, _), o in sorted(self.objects.items()) if k == kind.kind)

        return Observed(
            served=frozenset(k.group_version for k in (*kinds.MANAGED_KINDS, kinds.WORKLOAD))
            | {kinds.CAPACITY_POLICY.group_version},
            policies=of(kinds.CAPACITY_POLICY),
            projects=of(kinds.TRAINING_PROJECT),
            managed=tuple(o for kind in kinds.MANAGED_KINDS for o in of(kind)),
            workloads=of(kinds.WORKLOAD),
        )


def workload(name: str, gpus: int) -> Doc:
    return {
        "apiVersion": kinds.WORKLOAD.api_version,
        "kind": kinds.WORKLOAD.kind,
        "metadata": {
            "name": name,
            "namespace": "vision",
            "creationTimestamp": "2026-11-27T18:00:00Z",
            "labels": {"example.com/paper": "cvpr"},
            "annotations": {names.ANNOTATION_EXPECTED_DURATION: "13500"},
        },
        "spec": {
            "queueName": "vision-research",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "c", "resources": {"requests": {"nvidia.com/gpu": gpus}}}
                            ]
                        }
                    },
                }
            ],
        },
    }


def world() -> tuple[Store, Reconciler, list[float]]:
    store = Store()
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


def settle(store: Store, reconciler: Reconciler, clock: list[float]) -> None:
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
