"""The cache's store rules, without a server: events in order, our own writes recorded only when
the watch is behind them, snapshots that do not move, and collections composed as a pass reads
them. The reflectors' I/O is tested against the real API server (tests/integration/
test_cache.py); discovery is answered by a stub client (a fake, for a server still starting)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from controller import names
from controller.kube import kinds
from controller.kube.cache import (
    Cache,
    Source,
    Store,
    controller_sources,
    discover,
    observed_from,
)
from controller.kube.client import KubeClient, KubeError, WatchEvent
from controller.reconcile.diff import CREATE_ONLY

NS = "team-a"
WORKLOADS = Source(kinds.WORKLOAD)


def workload(name: str, version: int, *, namespace: str = NS, step: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": kinds.WORKLOAD.api_version,
        "kind": kinds.WORKLOAD.kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": str(version),
            "labels": {"step": str(step)},
        },
    }


def bookmark(version: int) -> WatchEvent:
    return WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": str(version)}})


def listed(*objects: dict[str, Any], version: int = 10) -> Store:
    store = Store(WORKLOADS)
    store.replace(list(objects), str(version))
    return store


def state(store: Store) -> list[tuple[str, str, str]]:
    return [
        (o["metadata"]["namespace"], o["metadata"]["name"], o["metadata"]["labels"]["step"])
        for o in store.items()
    ]


@pytest.mark.parametrize(
    ("events", "want", "want_version", "want_changed"),
    [
        pytest.param(
            [WatchEvent("ADDED", workload("b", 11)), WatchEvent("ADDED", workload("a", 12))],
            [(NS, "a", "0"), (NS, "b", "0")],
            "12",
            [True, True],
            id="added objects come out in namespace and name order, as a LIST returns them",
        ),
        pytest.param(
            [
                WatchEvent("MODIFIED", workload("a", 11, step=1)),
                WatchEvent("MODIFIED", workload("a", 12, step=2)),
            ],
            [(NS, "a", "2")],
            "12",
            [True, True],
            id="the last of two updates wins",
        ),
        pytest.param(
            [
                WatchEvent("DELETED", workload("a", 11)),
                WatchEvent("ADDED", workload("a", 12, step=5)),
            ],
            [(NS, "a", "5")],
            "12",
            [True, True],
            id="a delete then a re-create leaves the new object",
        ),
        pytest.param(
            [WatchEvent("DELETED", workload("gone", 11))],
            [(NS, "a", "0")],
            "11",
            [False],
            id="deleting what the store does not hold changes nothing but the version",
        ),
        pytest.param(
            [bookmark(40)],
            [(NS, "a", "0")],
            "40",
            [False],
            id="a bookmark moves the version on and changes nothing",
        ),
    ],
)
def test_watch_events_apply_in_order(
    events: list[WatchEvent],
    want: list[tuple[str, str, str]],
    want_version: str,
    want_changed: list[bool],
) -> None:
    store = listed(workload("a", 5))
    changed = [store.apply(e) for e in events]
    assert (state(store), store.resource_version, changed) == (want, want_version, want_changed)


def test_an_unknown_event_type_is_refused_with_the_kind_named() -> None:
    store = listed()
    with pytest.raises(ValueError, match="Workload: unknown watch event type 'SURPRISE'"):
        store.apply(WatchEvent("SURPRISE", workload("a", 11)))


def test_an_event_without_a_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"without metadata\.name"):
        listed().apply(WatchEvent("ADDED", {"metadata": {"resourceVersion": "11"}}))


def test_objects_from_a_watch_and_a_list_carry_their_api_version_and_kind() -> None:
    store = Store(WORKLOADS)
    store.replace([{"metadata": {"name": "a", "namespace": NS, "resourceVersion": "3"}}], "3")
    store.apply(WatchEvent("ADDED", {"metadata": {"name": "b", "namespace": NS}}))
    assert {(o["apiVersion"], o["kind"]) for o in store.items()} == {
        (kinds.WORKLOAD.api_version, kinds.WORKLOAD.kind)
    }


MANAGED_FIELDS = [
    {
        "manager": "kueue",
        "operation": "Update",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:admission": {}}},
    }
]


def with_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "managedFields": list(MANAGED_FIELDS)}}


@pytest.mark.parametrize(
    ("kind", "want_kept"),
    [
        pytest.param(kinds.WORKLOAD, False, id="a Workload, read for its queue and state only"),
        pytest.param(kinds.CLUSTER_QUEUE, False, id="a managed kind without a hand-over"),
        pytest.param(kinds.DEPLOYMENT, True, id="the warm pool, whose replicas are handed over"),
    ],
)
@pytest.mark.parametrize("way", ["list", "watch", "write"])
def test_managed_fields_are_kept_only_for_the_kinds_whose_ownership_a_pass_reads(
    kind: kinds.Kind, want_kept: bool, way: str
) -> None:
    store = Store(Source(kind))
    held = {"metadata": {"name": "a", "namespace": NS, "resourceVersion": "5"}}
    store.replace([with_managed_fields(held)] if way == "list" else [held], "5")
    changed = with_managed_fields(
        {"metadata": {"name": "a", "namespace": NS, "resourceVersion": "9"}}
    )
    if way == "watch":
        assert store.apply(WatchEvent("MODIFIED", changed)) is True
    elif way == "write":
        assert store.record(changed) is True
        # The write's answer is its caller's: recording it does not change it.
        assert changed["metadata"]["managedFields"] == MANAGED_FIELDS
    (kept,) = store.items()
    assert ("managedFields" in kept["metadata"]) is want_kept
    assert kept["metadata"]["name"] == "a"


def test_the_kinds_that_keep_managed_fields_are_those_with_a_create_only_hand_over() -> None:
    assert {k for k in kinds.MANAGED_KINDS if k.kind in CREATE_ONLY} == kinds.OWNERSHIP_READ_KINDS


@pytest.mark.parametrize(
    ("held_version", "written", "want_recorded", "want_step"),
    [
        pytest.param(10, workload("a", 20, step=1), True, "1", id="a write the watch is behind"),
        pytest.param(
            25, workload("a", 20, step=1), False, "0", id="a write the watch has passed already"
        ),
        pytest.param(
            10,
            {**workload("a", 20, step=1), "metadata": {"name": "a", "namespace": NS}},
            False,
            "0",
            id="a write without a version is not compared",
        ),
    ],
)
def test_our_own_writes_are_recorded_only_while_the_watch_is_behind_them(
    held_version: int, written: dict[str, Any], want_recorded: bool, want_step: str
) -> None:
    store = listed(workload("a", 5), version=held_version)
    assert store.record(written) is want_recorded
    assert state(store) == [(NS, "a", want_step)]


def test_a_recorded_write_is_not_undone_by_the_older_event_that_follows() -> None:
    store = listed(workload("a", 5))
    store.record(workload("a", 20, step=2))
    assert store.apply(WatchEvent("MODIFIED", workload("a", 15, step=1))) is False
    assert state(store) == [(NS, "a", "2")]
    held = store.items()[0]
    # The write's own event: nothing new, and the copy recorded stays.
    assert store.apply(WatchEvent("MODIFIED", workload("a", 20, step=2))) is False
    assert store.items()[0] is held
    assert store.resource_version == "20"
    assert store.apply(WatchEvent("DELETED", workload("a", 21, step=2))) is True
    assert state(store) == []


def test_a_deletion_at_the_version_held_still_deletes() -> None:
    store = listed(workload("a", 5))
    store.record(workload("a", 20, step=2))
    assert store.apply(WatchEvent("DELETED", workload("a", 20, step=2))) is True
    assert state(store) == []


def test_a_deleted_object_is_not_brought_back_by_recording_an_older_write() -> None:
    store = listed(workload("a", 5))
    store.apply(WatchEvent("DELETED", workload("a", 21)))
    assert store.record(workload("a", 20, step=1)) is False
    assert state(store) == []


def test_nothing_is_recorded_before_the_first_list() -> None:
    store = Store(WORKLOADS)
    assert store.record(workload("a", 20)) is False
    assert store.items() == ()


def test_a_snapshot_stays_as_it_was_taken_while_events_arrive() -> None:
    store = listed(workload("a", 5), workload("b", 6))
    taken = store.items()
    first = taken[0]
    store.apply(WatchEvent("MODIFIED", workload("a", 11, step=1)))
    store.apply(WatchEvent("DELETED", workload("b", 12)))
    assert [o["metadata"]["name"] for o in taken] == ["a", "b"]
    assert first["metadata"]["labels"]["step"] == "0"
    assert state(store) == [(NS, "a", "1")]


def test_synced_follows_the_list_and_the_watch() -> None:
    store = Store(WORKLOADS)
    store.mark_synced()  # a watch cannot make an unlisted store current
    assert (store.listed, store.synced) == (False, False)
    store.replace([], "1")
    assert (store.listed, store.synced) == (True, True)
    store.mark_unsynced()
    assert (store.listed, store.synced) == (True, False)
    store.mark_synced()
    assert store.synced


@pytest.mark.parametrize(
    ("source", "obj", "want"),
    [
        pytest.param(
            Source(kinds.CLUSTER_QUEUE, label_selector=names.MANAGED_SELECTOR),
            {"metadata": {"name": "q", "labels": {names.LABEL_MANAGED_BY: names.MANAGED_BY_VALUE}}},
            True,
            id="an object carrying our label",
        ),
        pytest.param(
            Source(kinds.CLUSTER_QUEUE, label_selector=names.MANAGED_SELECTOR),
            {"metadata": {"name": "q", "labels": {}}},
            False,
            id="an object without it",
        ),
        pytest.param(
            Source(kinds.SCALED_OBJECT, namespace="quartermaster-system"),
            {"metadata": {"name": "w", "namespace": "elsewhere"}},
            False,
            id="an object outside the collection's namespace",
        ),
        pytest.param(
            Source(kinds.WORKLOAD),
            {"metadata": {"name": "w", "namespace": "anywhere"}},
            True,
            id="any object of a collection with no namespace or selector",
        ),
        pytest.param(
            Source(
                kinds.EVENT,
                field_selector="reason=InsufficientCapacityError,regarding.kind=NodeClaim",
            ),
            {
                "metadata": {"name": "e"},
                "reason": "InsufficientCapacityError",
                "regarding": {"kind": "NodeClaim"},
            },
            True,
            id="an Event whose fields match the field selector",
        ),
        pytest.param(
            Source(
                kinds.EVENT,
                field_selector="reason=InsufficientCapacityError,regarding.kind=NodeClaim",
            ),
            {
                "metadata": {"name": "e"},
                "reason": "InsufficientCapacityError",
                "regarding": {"kind": "Pod"},
            },
            False,
            id="an Event about another kind",
        ),
        pytest.param(
            Source(kinds.EVENT, field_selector="reason=InsufficientCapacityError"),
            {"metadata": {"name": "e"}},
            False,
            id="an Event without the field",
        ),
    ],
)
def test_a_source_admits_what_its_list_would_return(
    source: Source, obj: dict[str, Any], want: bool
) -> None:
    assert source.admits(obj) is want


def test_a_snapshot_groups_the_collections_as_a_pass_reads_them() -> None:
    sources = controller_sources("quartermaster-system")
    by_kind = {s.kind: s for s in sources}

    def obj(kind: kinds.Kind, name: str) -> dict[str, Any]:
        return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": name}}

    items = {
        by_kind[kinds.NODE_POOL]: (obj(kinds.NODE_POOL, "a100-spot"),),
        by_kind[kinds.RESOURCE_FLAVOR]: (obj(kinds.RESOURCE_FLAVOR, "a100-spot"),),
        by_kind[kinds.WORKLOAD]: (obj(kinds.WORKLOAD, "w"),),
        by_kind[kinds.CAPACITY_POLICY]: (obj(kinds.CAPACITY_POLICY, "p"),),
        by_kind[kinds.NODE_CLAIM]: (obj(kinds.NODE_CLAIM, "c"),),
        by_kind[kinds.EVENT]: (obj(kinds.EVENT, "e1"),),
        by_kind[kinds.CORE_EVENT]: (obj(kinds.CORE_EVENT, "e2"),),
    }
    deleted = {by_kind[kinds.NODE_CLAIM]: (obj(kinds.NODE_CLAIM, "gone"),)}
    observed = observed_from({"karpenter.sh/v1"}, items, deleted)
    assert observed.served == frozenset({"karpenter.sh/v1"})
    assert [o["metadata"]["name"] for o in observed.policies] == ["p"]
    assert observed.projects == ()
    # The managed kinds in the order they are applied, whatever order the stores came in.
    assert [o["kind"] for o in observed.managed] == ["ResourceFlavor", "NodePool"]
    assert [o["metadata"]["name"] for o in observed.workloads] == ["w"]
    assert [o["metadata"]["name"] for o in observed.node_claims] == ["c"]
    assert [o["metadata"]["name"] for o in observed.deleted_node_claims] == ["gone"]
    # Both Event APIs' capacity errors, together (a pass counts an Event seen in both once).
    assert [o["metadata"]["name"] for o in observed.capacity_errors] == ["e1", "e2"]


def test_the_controller_reads_every_kind_it_decides_on_and_the_warm_pools_in_its_namespace() -> (
    None
):
    sources = controller_sources("qm")
    assert [s.kind for s in sources] == [
        kinds.CAPACITY_POLICY,
        kinds.TRAINING_PROJECT,
        *kinds.MANAGED_KINDS,
        kinds.WORKLOAD,
        kinds.NODE_CLAIM,
        kinds.EVENT,
        kinds.CORE_EVENT,
    ]
    assert {s.kind for s in sources if s.namespace == "qm"} == kinds.CONTROLLER_NAMESPACE_KINDS
    # Of the Events, only Karpenter's capacity errors on NodeClaims, selected on the server.
    assert {s.kind: s.field_selector for s in sources if s.field_selector} == {
        kinds.EVENT: "reason=InsufficientCapacityError,regarding.kind=NodeClaim",
        kinds.CORE_EVENT: "reason=InsufficientCapacityError,involvedObject.kind=NodeClaim",
    }
    assert {s.kind for s in sources if s.tombstones} == {kinds.NODE_CLAIM}
    assert {s.kind for s in sources if s.label_selector == names.MANAGED_SELECTOR} == set(
        kinds.MANAGED_KINDS
    )


def claim(name: str, version: int) -> dict[str, Any]:
    return {
        "apiVersion": kinds.NODE_CLAIM.api_version,
        "kind": kinds.NODE_CLAIM.kind,
        "metadata": {"name": name, "resourceVersion": str(version), "labels": {"step": "0"}},
    }


def test_a_store_with_tombstones_keeps_the_newest_deleted_objects_as_last_seen() -> None:
    store = Store(Source(kinds.NODE_CLAIM, tombstones=2))
    store.replace([claim("a", 1), claim("b", 2), claim("c", 3)], "3")
    last_a = {**claim("a", 4), "status": {"phase": "failed"}}
    for event in (
        WatchEvent("DELETED", last_a),
        WatchEvent("DELETED", claim("b", 5)),
        WatchEvent("DELETED", claim("c", 6)),
    ):
        store.apply(event)
    assert store.items() == ()
    # The two newest deletions, oldest first, as the DELETED events carried them.
    assert [o["metadata"]["name"] for o in store.deleted()] == ["b", "c"]
    # One deleted and made again is live, not deleted.
    store.apply(WatchEvent("ADDED", claim("c", 7)))
    assert [o["metadata"]["name"] for o in store.deleted()] == ["b"]
    assert store.deleted()[0]["apiVersion"] == kinds.NODE_CLAIM.api_version


def test_a_store_without_tombstones_forgets_what_is_deleted() -> None:
    store = listed(workload("a", 1))
    store.apply(WatchEvent("DELETED", workload("a", 11)))
    assert store.deleted() == ()


class _Discovery:
    """A client that answers discovery only, with the group/versions given."""

    def __init__(self, served: set[str]) -> None:
        self.served = served

    def served_group_versions(self) -> set[str]:
        return set(self.served)


@pytest.mark.parametrize(
    ("served", "starting"),
    [
        pytest.param(set(), True, id="nothing listed: still starting"),
        pytest.param({"apiregistration.k8s.io/v1"}, True, id="none of ours: still starting"),
        pytest.param({"karpenter.sh/v1", "apps/v1"}, False, id="one of ours: the truth"),
    ],
)
def test_discovery_that_serves_nothing_the_controller_reads_is_retried(
    served: set[str], starting: bool
) -> None:
    """A kube-apiserver a second after its restart listed none of the groups the controller
    reads, built-in ones included: refused (retryable), not taken as the truth."""
    client = cast(KubeClient, _Discovery(served))
    wanted = {"karpenter.sh/v1", "kueue.x-k8s.io/v1beta2"}
    if starting:
        with pytest.raises(KubeError, match="still starting") as raised:
            discover(client, wanted)
        assert raised.value.retryable
    else:
        assert discover(client, wanted) == frozenset(served)


def test_a_cache_does_not_start_on_a_server_still_starting() -> None:
    cache = Cache(cast(KubeClient, _Discovery(set())), controller_sources("quartermaster-system"))

    with pytest.raises(KubeError, match="still starting"):
        cache.start()

    assert not cache.synced()
    assert cache.reflectors == []
