"""The watch-fed cache against the real API server: a first list in pages, events applied in
the order the server sends them, a relist on 410, a watch that breaks on a malformed line seen
(logged, resumed, readiness false until it is back), bookmarks moving a store's version on,
passes that read no list once the cache has synced, and steady churn costing passes (and
status writes) bounded by the minimum interval between passes.

What is real: the API server and etcd, the watch streams they send (bookmarks included), and every
request the reflectors make, logged with its query by the `ControlledProxy` of
testenv/faultproxy.py. The proxy also injects what the server will not send on demand: a
410 (as a status and as an ERROR event) and a line that is not a watch event. Stand-ins: Lease is a
custom resource on this server (testenv/standins), the simplest kind it stores, used here
as any collection would be.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, NamedTuple

import pytest
from structlog.testing import capture_logs

from controller.kube import kinds
from controller.kube.cache import Reflector, Source, Store
from controller.kube.client import KubeClient, WatchEvent
from testenv.controlplane import ControlPlane
from testenv.faultproxy import ControlledProxy, client_for, list_of, watch_of
from testenv.rbac import attributes
from tests.integration.conftest import ensure_namespaces
from tests.integration.test_capacity_loop import deadline_workload
from tests.integration.test_controller_faults import RunningController, options
from tests.integration.test_fault_convergence import example_policy, wait_until
from tests.integration.test_reconcile import apply_doc, example_documents

NAMESPACE = "cache-test"
ELSEWHERE = "cache-elsewhere"
FIELD_MANAGER = "test-cache"
LEASES = Source(kinds.LEASE, namespace=NAMESPACE)
LEASE_PATH = kinds.LEASE.path(namespace=NAMESPACE)


def lease(name: str, *, step: int = 0, namespace: str = NAMESPACE) -> dict[str, Any]:
    return {
        "apiVersion": kinds.LEASE.api_version,
        "kind": kinds.LEASE.kind,
        "metadata": {"name": name, "namespace": namespace, "labels": {"step": str(step)}},
        "spec": {"holderIdentity": "a"},
    }


def names_in(store: Store) -> list[str]:
    return [o["metadata"]["name"] for o in store.items()]


@pytest.fixture
def kube(kube: KubeClient) -> KubeClient:
    """The conftest's client, with the two namespaces these tests write Leases into made first:
    a server refuses a create in a namespace that does not exist (the test server too)."""
    ensure_namespaces(kube, NAMESPACE, ELSEWHERE)
    return kube


@pytest.fixture
def proxy(control_plane: ControlPlane, kube: KubeClient) -> Iterator[ControlledProxy]:
    """A proxy in front of the shared server; `kube` deletes what the test wrote after it."""
    running = ControlledProxy(control_plane).start()
    try:
        yield running
    finally:
        running.close()


class Reflecting(NamedTuple):
    reflector: Reflector
    changes: list[str]
    """The kind, once for every notification the reflector sent (each would wake the loop)."""


@contextmanager
def reflecting(client: KubeClient, store: Store, **settings: Any) -> Iterator[Reflecting]:
    """A reflector filling `store` for the block; its thread must have ended after it."""
    stop = threading.Event()
    changes: list[str] = []
    reflector = Reflector(client, store, notify=changes.append, stop=stop, **settings)
    reflector.start()
    try:
        yield Reflecting(reflector, changes)
    finally:
        stop.set()
        client.abort_watches()
        reflector.join(10)
        client.close()
    assert not reflector.is_alive()


# ------------------------------------------------------------------ the first list
def test_the_first_list_comes_in_pages_and_the_watch_starts_from_its_version(
    kube: KubeClient, proxy: ControlledProxy
) -> None:
    for i in range(12):
        kube.apply(kinds.LEASE, lease(f"lease-{i:02d}"), field_manager=FIELD_MANAGER)
    store = Store(LEASES)
    with reflecting(client_for(proxy), store, page_size=5) as (reflector, _):
        wait_until(lambda: bool(proxy.log("GET", LEASE_PATH, watch=True)), "the watch opens")
        lists = proxy.log("GET", LEASE_PATH, watch=False)
        watches = proxy.log("GET", LEASE_PATH, watch=True)
        version = store.resource_version
    # 12 objects in pages of 5: three requests, the later two continuing the first.
    assert [(r.query.get("limit"), "continue" in r.query) for r in lists] == [
        ("5", False),
        ("5", True),
        ("5", True),
    ]
    assert names_in(store) == [f"lease-{i:02d}" for i in range(12)]
    assert {(o["apiVersion"], o["kind"]) for o in store.items()} == {
        (kinds.LEASE.api_version, kinds.LEASE.kind)
    }
    assert watches[0].query["resourceVersion"] == version
    assert watches[0].query["allowWatchBookmarks"] == "true"
    assert (reflector.relists, reflector.failures) == (0, 0)


def test_an_expired_continue_token_lists_again_from_the_start(
    kube: KubeClient, proxy: ControlledProxy
) -> None:
    """A paged list that takes longer than the server keeps its snapshot gets 410 on a
    `continue`: the pages read so far are dropped and the list starts again."""
    for i in range(7):
        kube.apply(kinds.LEASE, lease(f"lease-{i}"), field_manager=FIELD_MANAGER)
    expired = proxy.inject_query(
        lambda method, path, query: (
            list_of(kinds.LEASE, NAMESPACE)(method, path, query) and "continue" in query
        ),
        status=410,
        times=1,
    )
    store = Store(LEASES)
    with reflecting(client_for(proxy), store, page_size=5):
        wait_until(lambda: bool(proxy.log("GET", LEASE_PATH, watch=True)), "the watch opens")
    lists = proxy.log("GET", LEASE_PATH, watch=False)
    assert expired.hits == 1
    assert ["continue" in r.query for r in lists] == [False, True, False, True]
    assert names_in(store) == [f"lease-{i}" for i in range(7)]


# ------------------------------------------------------------------ events
class RecordingStore(Store):
    """The real store, also keeping every event it was given, in order."""

    def __init__(self, source: Source) -> None:
        super().__init__(source)
        self.applied: list[tuple[str, str, str, int]] = []

    def apply(self, event: WatchEvent) -> bool:
        changed = super().apply(event)
        meta = event.object.get("metadata") or {}
        self.applied.append(
            (
                event.type,
                str(meta.get("name", "")),
                str((meta.get("labels") or {}).get("step", "")),
                int(meta.get("resourceVersion", 0)),
            )
        )
        return changed


def test_watch_events_are_applied_in_the_order_the_server_sends_them(
    kube: KubeClient, control_plane: ControlPlane
) -> None:
    """Five updates, a delete and a re-create of one object, a create and delete of another:
    any event applied out of order would leave another state or another sequence."""
    store = RecordingStore(LEASES)
    client = KubeClient.from_kubeconfig(str(control_plane.kubeconfig))
    with reflecting(client, store) as (_, notified):
        wait_until(lambda: store.listed, "the store is listed")
        for step in range(6):
            kube.apply(kinds.LEASE, lease("a", step=step), field_manager=FIELD_MANAGER)
        kube.delete(kinds.LEASE, "a", NAMESPACE)
        kube.apply(kinds.LEASE, lease("a", step=6), field_manager=FIELD_MANAGER)
        kube.apply(kinds.LEASE, lease("b"), field_manager=FIELD_MANAGER)
        kube.delete(kinds.LEASE, "b", NAMESPACE)
        wait_until(
            lambda: len([e for e in store.applied if e[0] != "BOOKMARK"]) >= 10,
            "ten events",
            explain=lambda: store.applied,
        )
        changes = [e for e in store.applied if e[0] != "BOOKMARK"]
    assert [(t, name, step) for t, name, step, _ in changes] == [
        ("ADDED", "a", "0"),
        *[("MODIFIED", "a", str(step)) for step in range(1, 6)],
        ("DELETED", "a", "5"),
        ("ADDED", "a", "6"),
        ("ADDED", "b", "0"),
        ("DELETED", "b", "0"),
    ]
    versions = [v for *_, v in changes]
    assert versions == sorted(set(versions))
    assert [(o["metadata"]["name"], o["metadata"]["labels"]["step"]) for o in store.items()] == [
        ("a", "6")
    ]
    # The first list, then each change: every one woke the loop.
    assert notified == [kinds.LEASE.kind] * 11


# ------------------------------------------------------------------ 410
@pytest.mark.parametrize(
    "watch_error",
    [
        pytest.param(False, id="410 Gone answering the watch request"),
        pytest.param(True, id="an ERROR event with code 410 in the watch stream"),
    ],
)
def test_a_watch_that_expires_relists_once_and_sees_what_changed_meanwhile(
    kube: KubeClient, proxy: ControlledProxy, watch_error: bool
) -> None:
    kube.apply(kinds.LEASE, lease("before"), field_manager=FIELD_MANAGER)
    store = Store(LEASES)
    with reflecting(client_for(proxy), store, watch_seconds=2) as (reflector, _):
        wait_until(lambda: bool(proxy.log("GET", LEASE_PATH, watch=True)), "the watch opens")
        gate = threading.Event()
        expired = proxy.inject_query(
            watch_of(kinds.LEASE, NAMESPACE),
            status=410,
            times=1,
            watch_error=watch_error,
            hold=gate,
        )
        # The watch ends on its own within 2 s; the next one is held, then answered 410.
        wait_until(expired.arrived.is_set, "the next watch is requested (and held)")
        kube.apply(kinds.LEASE, lease("meanwhile"), field_manager=FIELD_MANAGER)
        released = time.monotonic()
        gate.set()
        wait_until(lambda: "meanwhile" in names_in(store), "the relist brings the change in")
        wait_until(lambda: store.synced, "the store is synced again")
        relists = proxy.log("GET", LEASE_PATH, watch=False)
    assert expired.hits == 1
    assert (reflector.relists, reflector.failures) == (1, 0)
    assert [r for r in relists if r.time > released] != []
    assert len(relists) == 2  # the first list and the one relist
    assert names_in(store) == ["before", "meanwhile"]


# ------------------------------------------------------------------ a watch that breaks
MALFORMED = b'{"type": "MODIFIED", "object": {"metadata": {"name": "cut-sh'
"""A watch event cut short, as a proxy dropping bytes would leave it."""


def reflector_of(running: RunningController, kind: kinds.Kind) -> Reflector:
    return next(r for r in running.controller.cache.reflectors if r.kind == kind)


def test_a_malformed_watch_line_is_logged_the_watch_resumes_and_readiness_is_false_meanwhile(
    kube: KubeClient, proxy: ControlledProxy
) -> None:
    """A line that is not JSON used to raise ValueError in the watch thread, which died while
    readiness stayed true. Now: logged, the store not synced (so neither is the controller)
    until the watch is back, resumed from the store's version without a relist."""
    running = RunningController(
        client_for(proxy), options(leader_election=False, watch_seconds=2)
    ).start()
    projects = kinds.TRAINING_PROJECT.path()
    try:
        wait_until(
            lambda: running.controller.ready() == (True, "leading; synced"), "the controller syncs"
        )
        reflector = reflector_of(running, kinds.TRAINING_PROJECT)
        gate = threading.Event()
        with capture_logs() as logs:
            garbage = proxy.inject_query(
                watch_of(kinds.TRAINING_PROJECT), times=1, lines=(MALFORMED,)
            )
            held = proxy.inject_query(
                watch_of(kinds.TRAINING_PROJECT), times=1, hold=gate, forward=True
            )
            wait_until(held.arrived.is_set, "the watch after the malformed line (held)")
        assert running.controller.ready() == (False, "leading; watches not synced: TrainingProject")
        assert reflector.is_alive()
        failed = [e for e in logs if e["event"] == "watch_failed"]
        assert [e["kind"] for e in failed] == ["TrainingProject"]
        assert "malformed" in failed[0]["error"]
        assert failed[0]["log_level"] == "warning"
        gate.set()
        wait_until(lambda: running.controller.ready() == (True, "leading; synced"), "ready again")
        # The cache works on: a project created now reaches the snapshot.
        apply_doc(kube, next(d for d in example_documents() if d["kind"] == "TrainingProject"))
        wait_until(lambda: bool(running.controller.cache.snapshot().projects), "a new project")
    finally:
        running.stop()
    assert running.stopped_cleanly()
    assert (garbage.hits, held.hits) == (1, 1)
    assert (reflector.failures, reflector.relists) == (1, 0)
    # Resumed from the version the broken watch started at: no relist, no events lost.
    watches = proxy.log("GET", projects, watch=True)
    broken = next(r for r in watches if r.time == garbage.answered[0][1])
    resumed = next(r for r in watches if r.time == held.answered[0][1])
    assert resumed.query["resourceVersion"] == broken.query["resourceVersion"]
    assert [r for r in proxy.log("GET", projects, watch=False) if r.time > broken.time] == []


# ------------------------------------------------------------------ bookmarks
def test_bookmarks_move_the_version_on_without_an_event_of_the_collection(
    kube: KubeClient, proxy: ControlledProxy
) -> None:
    """The server sends a bookmark before it ends a watch: the store's version moves past
    writes it does not hold (Leases elsewhere), and the next watch starts from there instead
    of from an old version the server may have compacted away."""
    store = Store(LEASES)
    with reflecting(client_for(proxy), store, watch_seconds=4) as (reflector, notified):
        wait_until(lambda: store.listed, "the store is listed")
        listed_at = int(store.resource_version)
        for i in range(3):
            kube.apply(
                kinds.LEASE, lease(f"other-{i}", namespace=ELSEWHERE), field_manager=FIELD_MANAGER
            )
        written = kube.get(kinds.LEASE, "other-2", ELSEWHERE)
        assert written is not None
        later = int(written["metadata"]["resourceVersion"])
        assert later > listed_at
        wait_until(
            lambda: int(store.resource_version) >= later,
            "a bookmark moves the store past the writes elsewhere",
        )
        wait_until(
            lambda: any(
                int(r.query["resourceVersion"]) >= later
                for r in proxy.log("GET", LEASE_PATH, watch=True)
            ),
            "a watch starts from the bookmark's version",
        )
    assert store.items() == ()
    assert notified == [kinds.LEASE.kind]  # the list's; a bookmark changes nothing
    assert len(proxy.log("GET", LEASE_PATH, watch=False)) == 1
    assert (reflector.relists, reflector.failures) == (0, 0)


# ------------------------------------------------------------------ passes read the cache
def node_claim(name: str) -> dict[str, Any]:
    """A spot node of the a100 pool being launched, as Karpenter creates its NodeClaim."""
    return {
        "apiVersion": kinds.NODE_CLAIM.api_version,
        "kind": kinds.NODE_CLAIM.kind,
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "a100-spot"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
            ],
        },
    }


def test_passes_read_no_list_once_synced_and_a_node_claim_wakes_the_loop(
    kube: KubeClient, proxy: ControlledProxy
) -> None:
    documents = example_policy()
    for doc in documents:
        apply_doc(kube, doc)
    project = next(d for d in documents if d["kind"] == "TrainingProject")
    running = RunningController(
        client_for(proxy), options(leader_election=False, min_pass_interval_seconds=0.5)
    ).start()

    def passes_since(moment: float) -> int:
        return len(running.results_since(moment))

    def updated_since(moment: float) -> bool:
        return any(r.updated for r in running.results_since(moment))

    try:
        wait_until(
            lambda: any(r.writes == 0 for _, r in running.results), "a pass that writes nothing"
        )
        synced_at = time.monotonic()
        for gpus in (40, 48):
            project["spec"]["quotas"][0]["nominalGpus"] = gpus
            changed_at = time.monotonic()
            apply_doc(kube, project)
            wait_until(partial(updated_since, changed_at), "the quota edit is applied")
        claimed_at = time.monotonic()
        kube.create(kinds.NODE_CLAIM, node_claim("a100-spot-x1"))
        # The resync is 5 minutes away, and nothing else changes: only its watch wakes the loop.
        wait_until(lambda: passes_since(claimed_at) >= 1, "a pass after the NodeClaim")
        claims = running.controller.cache.snapshot().node_claims
    finally:
        running.stop()
    assert running.stopped_cleanly()
    assert [c["metadata"]["name"] for c in claims] == ["a100-spot-x1"]
    assert passes_since(synced_at) >= 3
    reads = [
        (r.method, r.path)
        for r in proxy.logged()
        if r.time > synced_at
        and not r.watch
        and (found := attributes(r.method, r.path)) is not None
        and found.verb == "list"
    ]
    assert reads == []
    watched = {r.path for r in proxy.logged() if r.watch}
    assert kinds.NODE_CLAIM.path() in watched


# ------------------------------------------------------------------ passes under churn
CHURNED_PROJECT = "llm-pretrain"
"""The example project whose namespace (`llm`) the churned Workloads are created in."""


def test_steady_churn_costs_passes_bounded_by_the_interval_and_one_status_write_a_pass(
    kube: KubeClient, proxy: ControlledProxy
) -> None:
    """Forty Workloads created 0.1 s apart, each changing the project's pending GPUs: with a
    minimum of 1 s between pass starts, the churn costs at most one pass a second, and the
    project's status, which each Workload changes, is written at most once a pass: the
    changes between two passes are coalesced into one write."""
    interval = 1.0
    documents = example_policy()
    for doc in documents:
        apply_doc(kube, doc)
    running = RunningController(
        client_for(proxy), options(leader_election=False, min_pass_interval_seconds=interval)
    ).start()
    status_path = kinds.TRAINING_PROJECT.path(CHURNED_PROJECT) + "/status"

    def pending_gpus() -> int:
        project = kube.get(kinds.TRAINING_PROJECT, CHURNED_PROJECT)
        return int(((project or {}).get("status") or {}).get("pendingGpus") or 0)

    try:
        wait_until(
            lambda: any(r.writes == 0 for _, r in running.results), "a pass that writes nothing"
        )
        churn_started = time.monotonic()
        for index in range(40):
            kube.create(kinds.WORKLOAD, deadline_workload(index, deadline=None, prefix="churn"))
            time.sleep(0.1)  # the load's pace, not a wait for a condition
        wait_until(lambda: pending_gpus() == 40 * 16, "every churned Workload in the status")
        settled = time.monotonic()
        passes = [(t, r) for t, r in list(running.results) if churn_started <= t <= settled]
    finally:
        running.stop()
    assert running.stopped_cleanly()
    # Passes that ended in the window started no earlier than the longest of them before it,
    # and pass starts are at least `interval` apart.
    longest = max(r.seconds for _, r in passes)
    assert 1 <= len(passes) <= (settled - churn_started + longest) / interval + 1
    writes = [
        r
        for r in proxy.logged()
        if (r.method, r.path) == ("PATCH", status_path) and churn_started <= r.time <= settled
    ]
    assert 1 <= len(writes) <= len(passes) < 40
