"""Faults injected into a synced cluster while the controller loop runs: nothing lost, and then
convergence on a change made during or right after the fault.

Every test starts from a cluster the in-process `Controller` (watches, leader election, backoff,
on a thread) has synced and settled, injects one fault while the loop is working or watching,
makes a policy change (a quota edit and a new project), and then proves two things:

1. nothing was lost: every object the pure renderer produces exists exactly once, as rendered,
   nothing else carries our label, nothing was pruned, a fresh `plan` against the cluster
   shows no change, and every CapacityPolicy and TrainingProject status is Ready for its
   current generation;
2. convergence: the change is applied once the fault clears, and a further pass (the stopped
   controller's own reconciler, allowed to write) writes nothing at all.

What is real: etcd and the API server (stopped, killed and restarted as processes), the upstream
Kueue, Karpenter and KEDA schemas, every request the controller sends. The other faults come from
the `ControlledProxy` of testenv/faultproxy.py, which sees the query string (a LIST and a
WATCH share a path), cuts one kind's open watch, holds a request until the test lets it go, and
answers a watch with an `ERROR` event (410 Expired) in a 200 stream, as the API server does when a
watch's resourceVersion has been compacted away. Prometheus is down in every test (the policy points
at a closed loopback port), as a dead Prometheus looks to the controller. Stand-ins: Lease and Event
are custom resources on the CRD-only test server; apps/v1 is not served there, so warm-pool
Deployments are left out of every comparison, as the controller leaves them out (a kube-apiserver
serves both kinds itself, and the comparisons are in the stored form it re-encodes them to).

Faults already covered elsewhere, in this form, and not repeated: a 429 with Retry-After on
PATCH (test_controller_faults.py); the API server killed during a first sync of 300 projects
(test_controller_faults.py: the variant here kills it during an update of a synced cluster and
adds a change right after); Prometheus going down after it was up, with a real Prometheus
(test_metrics_prometheus.py: the variant here checks that policy changes are still applied).
"""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from structlog.testing import capture_logs

from controller import names
from controller.api.loader import load_policy_set
from controller.api.policy_set import PolicySet
from controller.decide.mix import Action, Reason
from controller.examples.synthetic import synthetic_documents
from controller.kube import kinds
from controller.kube.cache import Reflector
from controller.kube.client import KubeClient, KubeError
from controller.kube.events import EventRecorder
from controller.reconcile.diff import is_subset, ref, show_ref
from controller.reconcile.reconciler import plan_against_cluster
from controller.reconcile.stored import stored_form
from controller.render.desired import render
from testenv.controlplane import ControlPlane, free_ports
from testenv.faultproxy import ControlledProxy, client_for, watch_of
from tests.integration.conftest import CLEANED_KINDS, new_client
from tests.integration.test_controller_faults import RunningController, live_managed, options
from tests.integration.test_metrics_prometheus import policy_documents, workload
from tests.integration.test_reconcile import apply_doc, example_documents

NAMESPACE = names.DEFAULT_NAMESPACE
DEADLINE = 60.0
"""Seconds any one convergence may take; generous, for a loaded 2-core machine."""
POLICY = "gpu-fleet"
GPU = "nvidia.com/gpu"

Documents = list[dict[str, Any]]


# ------------------------------------------------------------------ waiting
def wait_until(
    predicate: Callable[[], bool],
    what: str,
    *,
    timeout: float = DEADLINE,
    explain: Callable[[], object] = lambda: "",
    poll: float = 0.2,
) -> None:
    """Poll until `predicate()` holds; fail with `explain()` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:g} s: {what}\n{explain()}")
        time.sleep(poll)


def is_list(method: str, path: str, query: Mapping[str, str]) -> bool:
    """A LIST of a cluster-wide collection of ours or a managed kind (not a Lease or Event)."""
    collections = {k.path() for k in (kinds.CAPACITY_POLICY, kinds.TRAINING_PROJECT)} | {
        k.path() for k in kinds.MANAGED_KINDS
    }
    return method == "GET" and path in collections and query.get("watch") != "true"


@pytest.fixture
def proxy(control_plane: ControlPlane, kube: KubeClient) -> Iterator[ControlledProxy]:
    """A proxy in front of the shared server; `kube` deletes what the test wrote after it."""
    running = ControlledProxy(control_plane).start()
    try:
        yield running
    finally:
        running.close()


# ------------------------------------------------------------------ policies and changes
def dead_prometheus_url() -> str:
    """A loopback port nothing listens on: Prometheus down, refused at once."""
    (port,) = free_ports(1)
    return f"http://127.0.0.1:{port}"


def with_dead_prometheus(documents: Documents) -> Documents:
    out = copy.deepcopy(documents)
    url = dead_prometheus_url()
    for doc in out:
        if doc["kind"] == "CapacityPolicy":
            doc["spec"].setdefault("prometheus", {})["url"] = url
    return out


def example_policy() -> Documents:
    """The example policy: 7 projects over 2 pools, 3 tiers."""
    return with_dead_prometheus(example_documents())


def new_project(name: str, *, pool: str = "a100", gpus: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "quartermaster.dev/v1alpha1",
        "kind": "TrainingProject",
        "metadata": {"name": name},
        "spec": {
            "tier": "research",
            "namespaces": [name],
            "quotas": [{"pool": pool, "nominalGpus": gpus}],
        },
    }


def named(documents: Documents, kind: str, name: str) -> dict[str, Any]:
    return next(d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name)


def with_quota(documents: Documents, project: str, pool: str, gpus: int) -> Documents:
    out = copy.deepcopy(documents)
    quotas = named(out, "TrainingProject", project)["spec"]["quotas"]
    next(q for q in quotas if q["pool"] == pool)["nominalGpus"] = gpus
    return out


@dataclass(frozen=True)
class Change:
    """A quota edit and a new project: an update and creations, as gitops would push them."""

    documents: Documents
    edited: dict[str, Any]
    added: dict[str, Any]

    def push(self, kube: KubeClient) -> None:
        apply_doc(kube, self.edited)
        apply_doc(kube, self.added)


def quota_edit_and_new_project(
    documents: Documents, *, project: str, pool: str, gpus: int, new: str
) -> Change:
    changed = with_quota(documents, project, pool, gpus)
    added = new_project(new, pool=pool)
    changed.append(added)
    return Change(changed, named(changed, "TrainingProject", project), added)


def policy_set_of(documents: Documents) -> PolicySet:
    return load_policy_set((f"doc#{i}", d) for i, d in enumerate(documents))


# ------------------------------------------------------------------ what the cluster holds
def condition_of(obj: Mapping[str, Any], type_: str) -> tuple[str, str]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return str(c.get("status")), str(c.get("reason"))
    return "", ""


def status_problems(kube: KubeClient, documents: Documents) -> list[str]:
    """Every policy and project status Ready and Valid for its current generation."""
    problems: list[str] = []
    policy_doc = next(d for d in documents if d["kind"] == "CapacityPolicy")
    project_docs = {d["metadata"]["name"]: d for d in documents if d["kind"] == "TrainingProject"}
    policy = kube.get(kinds.CAPACITY_POLICY, policy_doc["metadata"]["name"])
    if policy is None:
        return ["the CapacityPolicy is gone"]
    projects, _ = kube.list(kinds.TRAINING_PROJECT)
    live = {p["metadata"]["name"]: p for p in projects}
    if sorted(live) != sorted(project_docs):
        problems.append(f"projects {sorted(live)} != {sorted(project_docs)}")
    status = policy.get("status") or {}
    if status.get("observedGeneration") != policy["metadata"]["generation"]:
        problems.append("policy: status is for an older generation")
    if status.get("projects") != len(project_docs):
        problems.append(f"policy: status.projects {status.get('projects')}")
    for type_ in ("Valid", "Ready"):
        if condition_of(policy, type_)[0] != "True":
            problems.append(f"policy: {type_} is {condition_of(policy, type_)}")
    for name, obj in live.items():
        status = obj.get("status") or {}
        if status.get("observedGeneration") != obj["metadata"]["generation"]:
            problems.append(f"{name}: status is for an older generation")
        for type_ in ("Valid", "Ready"):
            if condition_of(obj, type_)[0] != "True":
                problems.append(f"{name}: {type_} is {condition_of(obj, type_)}")
        if name in project_docs:
            nominal = sum(q["nominalGpus"] for q in project_docs[name]["spec"]["quotas"])
            if status.get("nominalGpus") != nominal:
                problems.append(f"{name}: nominalGpus {status.get('nominalGpus')} != {nominal}")
    return problems


def differences(kube: KubeClient, documents: Documents, *, pure_render: bool = True) -> list[str]:
    """What stands between the cluster and `documents` fully applied; [] when converged.

    With `pure_render`, the live objects are compared with the renderer's output at the floor
    mix (no workloads, so the controller has no reason to move it): every rendered object
    exists once, as rendered, and no other object carries our label. Always: a fresh plan
    against the cluster (rendered at the mix the controller last decided) is empty, and
    every status is Ready for its current generation.
    """
    try:
        problems: list[str] = []
        policy_set = policy_set_of(documents)
        if pure_render:
            served = kube.served_group_versions()
            expected = {
                show_ref(ref(o)): o
                for o in render(policy_set, namespace=NAMESPACE).objects
                if kinds.kind_of(o).group_version in served
            }
            live = live_managed(kube)
            live_refs = sorted(show_ref(ref(o)) for o in live)
            if live_refs != sorted(expected):
                counts = Counter(live_refs)
                problems.append(
                    f"missing {sorted(set(expected) - set(counts))}, "
                    f"extra {sorted(set(counts) - set(expected))}, "
                    f"twice {sorted(r for r, n in counts.items() if n > 1)}"
                )
            by_ref = {show_ref(ref(o)): o for o in live}
            problems += [
                f"{r} differs from the rendered object"
                for r, o in expected.items()
                # In the stored form: a kube-apiserver re-encodes the built-in kinds.
                if r in by_ref and not is_subset(stored_form(o), stored_form(by_ref[r]))
            ]
        plan, _ = plan_against_cluster(kube, policy_set, namespace=NAMESPACE)
        if not plan.empty or plan.kept:
            problems.append(f"plan: {plan.summary()}")
        return problems + status_problems(kube, documents)
    except KubeError as exc:  # the server is still coming back: not converged yet
        return [f"cannot read the cluster: {exc}"]


def assert_converged(kube: KubeClient, documents: Documents, *, pure_render: bool = True) -> None:
    wait_until(
        lambda: not differences(kube, documents, pure_render=pure_render),
        "the cluster matches the policy",
        explain=lambda: differences(kube, documents, pure_render=pure_render),
    )
    assert differences(kube, documents, pure_render=pure_render) == []


def wait_for_crds(kube: KubeClient) -> None:
    """After an API server restart: until every kind we touch is listed without an error.

    The restarted CRD server answers 404 until it has loaded the CRDs, then 429 while each
    kind's storage initialises.
    """

    def serving() -> bool:
        try:
            served = kube.served_group_versions()
            for kind in CLEANED_KINDS:
                if kind.group_version in served:
                    kube.list(kind)
        except KubeError:
            return False
        return True

    wait_until(serving, "the restarted API server serves every kind")


# ------------------------------------------------------------------ the controller
@contextmanager
def controller(client: KubeClient, **overrides: Any) -> Iterator[RunningController]:
    """The loop on a thread for the block; stopped (every thread joined) whatever happens."""
    running = RunningController(client, options(**overrides)).start()
    try:
        yield running
    finally:
        running.stop()


def settle(
    running: RunningController,
    kube: KubeClient,
    documents: Documents,
    *,
    since: float | None = None,
    pure_render: bool = True,
) -> None:
    """Until the cluster matches `documents` and the latest pass (one that ended after
    `since`, when given) wrote nothing: the controller is idle on a converged cluster."""
    assert_converged(kube, documents, pure_render=pure_render)

    def idle() -> bool:
        if not running.results:
            return False
        ended, last = running.results[-1]
        return last.writes == 0 and (since is None or ended >= since)

    # The watch events of the last pass's own writes wake one more, which finds nothing to do.
    wait_until(
        lambda: idle() or bool(running.crashed),
        "a pass that writes nothing",
        explain=lambda: [(r.created, r.updated, r.status_writes) for _, r in running.results],
    )
    assert running.crashed == []


def assert_a_further_pass_writes_nothing(running: RunningController, kube: KubeClient) -> None:
    """The stopped controller's own reconciler (its history, its decision state), on a fresh
    client and allowed to write, so any write it wants is sent and counted."""
    assert not running.thread.is_alive()
    reconciler = running.controller.reconciler
    reconciler.client = kube
    reconciler.may_write = lambda: True
    reconciler.events = EventRecorder(kube, reporting_instance="further-pass")
    before = kube.stats.writes
    result = reconciler.reconcile()
    assert kube.stats.writes - before == 0, result
    assert (result.created, result.updated, result.pruned, result.status_writes) == (0, 0, 0, 0)
    assert result.boosts_written == 0
    assert result.failed == ()


def reflector_of(running: RunningController, kind: kinds.Kind) -> Reflector:
    return next(r for r in running.controller.cache.reflectors if r.kind == kind)


def pruned(running: RunningController) -> int:
    return sum(r.pruned for _, r in running.results)


def object_path(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return kinds.kind_of(dict(obj)).path(meta["name"], meta.get("namespace"))


def is_object_apply(method: str, path: str) -> bool:
    """A server-side apply of a managed object (not a status, not an Event)."""
    return method == "PATCH" and not path.endswith("/status") and "/events.k8s.io/" not in path


def is_status_apply(method: str, path: str) -> bool:
    return method == "PATCH" and path.endswith("/status")


# ------------------------------------------------------------------ etcd restarts
def test_an_etcd_restart_while_the_loop_applies_a_burst_loses_nothing_and_watches_recover(
    kube: KubeClient, control_plane: ControlPlane
) -> None:
    """etcd going away stalls every request, the Lease renewals too: the pass under way may
    lose its leadership half-way. Afterwards the burst must be complete, and a later change
    must still arrive through the watches, which have to outlive the outage."""
    documents = example_policy()
    for doc in documents:
        apply_doc(kube, doc)
    burst = [
        new_project(f"burst-{i:02d}", pool="h100" if i % 2 else "a100", gpus=4) for i in range(20)
    ]
    during = documents + burst
    change = quota_edit_and_new_project(
        during, project="vision-research", pool="a100", gpus=40, new="after-etcd"
    )
    client = new_client(control_plane)
    with controller(client) as running:
        settle(running, kube, documents)
        patches = client.stats.by_verb["PATCH"]
        for doc in burst:
            apply_doc(kube, doc)
        wait_until(
            lambda: client.stats.by_verb["PATCH"] > patches,
            "the loop starts applying the burst",
            poll=0.01,
        )
        # Requests hang from the moment etcd is told to stop until it is back (stop_etcd
        # takes seconds: etcd drains its clients), so the pass under way stalls mid-apply,
        # and so do the Lease renewals.
        down_at = time.monotonic()
        try:
            control_plane.stop_etcd()
        finally:
            control_plane.start_etcd()
        back_at = time.monotonic()
        settle(running, kube, during, since=back_at)
        # The burst is in; now a change that only a watch can report (the resync is 5 minutes
        # away), and no failed pass left to retry.
        errors_before = len(running.errors)
        changed_at = time.monotonic()
        change.push(kube)
        settle(running, kube, change.documents, since=changed_at)
        assert len(running.errors) == errors_before
        assert running.thread.is_alive()
        reflectors = running.controller.cache.reflectors
        assert [r.kind.kind for r in reflectors if not r.is_alive()] == []
    print(
        f"\netcd down for {back_at - down_at:.1f} s; {len(running.errors)} failed pass(es); "
        f"{client.stats.retries} request retries; {len(running.results)} passes; relists "
        f"{sum(r.relists for r in running.controller.cache.reflectors)} for "
        f"{len(running.controller.cache.reflectors)} watches"
    )
    assert running.stopped_cleanly()
    assert pruned(running) == 0
    assert client.stats.by_verb["DELETE"] == 0
    assert_a_further_pass_writes_nothing(running, kube)


# ------------------------------------------------------------------ the API server dies
PROJECTS = 50
"""Synthetic projects: an update of every ClusterQueue is a pass of 50 PATCHes."""


def test_an_api_server_killed_during_an_update_of_a_synced_cluster_converges_with_a_later_change(
    kube: KubeClient, control_plane: ControlPlane
) -> None:
    """A crash of the API server with PATCHes in flight must leave no half-applied policy
    behind once it is back, with the client `quartermaster run` uses (30 s of retries), and
    a change pushed as soon as the server answers again must be applied too."""
    documents = with_dead_prometheus(synthetic_documents(projects=PROJECTS, pools=2))
    for doc in documents:
        apply_doc(kube, doc)
    updated = copy.deepcopy(documents)
    for pool in named(updated, "CapacityPolicy", "synthetic")["spec"]["pools"]:
        pool["cpusPerGpu"] = 20  # every ClusterQueue's CPU quota changes
    change = quota_edit_and_new_project(
        updated, project="project-00001", pool="pool-1", gpus=12, new="after-restart"
    )
    # The client as `quartermaster run` builds it: requests retried for up to 30 s.
    client = new_client(control_plane)
    with controller(client) as running:
        settle(running, kube, documents)
        plan, _ = plan_against_cluster(kube, policy_set_of(updated), namespace=NAMESPACE)
        assert len(plan.updates) == PROJECTS and not plan.creates and not plan.prunes
        before = client.stats.by_verb["PATCH"]
        apply_doc(kube, named(updated, "CapacityPolicy", "synthetic"))
        wait_until(
            lambda: client.stats.by_verb["PATCH"] >= before + 10,
            "the update is under way",
            poll=0.005,
        )
        control_plane.kill_apiserver()  # SIGKILL: PATCHes in flight get no answer
        sent = client.stats.by_verb["PATCH"] - before
        control_plane.start_apiserver()
        wait_for_crds(kube)
        changed_at = time.monotonic()
        change.push(kube)  # right after the restart
        settle(running, kube, change.documents, since=changed_at)
    print(
        f"\nAPI server killed after {sent} of {len(plan.updates)} updates; "
        f"{len(running.errors)} failed pass(es), {client.stats.retries} request retries, "
        f"refused objects per pass: {[len(r.failed) for _, r in running.results]}"
    )
    assert sent < len(plan.updates), "killed in the middle of the update"
    assert running.stopped_cleanly()
    assert pruned(running) == 0
    assert client.stats.by_verb["DELETE"] == 0
    assert_a_further_pass_writes_nothing(running, kube)


# ------------------------------------------------------------------ conflicts
def test_conflicts_on_applies_and_status_writes_are_retried_with_no_write_lost_or_doubled(
    kube: KubeClient, proxy: ControlledProxy
) -> None:
    """A conflict is retried by the client; server-side apply being idempotent, a retry can
    neither lose a write nor make one twice. Shown from the proxy's log of every PATCH."""
    documents = example_policy()
    for doc in documents:
        apply_doc(kube, doc)
    change = quota_edit_and_new_project(
        documents, project="vision-research", pool="a100", gpus=40, new="conflicted-team"
    )
    with controller(client_for(proxy)) as running:
        settle(running, kube, documents)
        plan, _ = plan_against_cluster(kube, policy_set_of(change.documents), namespace=NAMESPACE)
        wanted = sorted(object_path(o) for o in (*plan.creates, *(u.desired for u in plan.updates)))
        applies = proxy.inject(is_object_apply, status=409, times=3)
        statuses = proxy.inject(is_status_apply, status=409, times=3)
        changed_at = time.monotonic()
        change.push(kube)
        settle(running, kube, change.documents, since=changed_at)
    assert running.stopped_cleanly()
    assert (applies.hits, statuses.hits) == (3, 3)
    patches = [r for r in proxy.requests if r.method == "PATCH" and r.time >= changed_at]
    conflicted = [r for r in patches if r.status == 409]
    print(f"\nconflicts: {[r.path for r in conflicted]}")
    # Retried: every conflicted write went through later; none was dropped.
    for r in conflicted:
        assert any(
            later.path == r.path and later.time > r.time and 200 <= later.status < 300
            for later in patches
        ), r
    # No write lost, none doubled: each object the plan named applied exactly once, no other.
    applied = Counter(
        r.path for r in patches if is_object_apply(r.method, r.path) and 200 <= r.status < 300
    )
    assert sorted(applied) == wanted
    assert set(applied.values()) == {1}
    # A status may be written again by a later pass with new content (the change can arrive
    # over two passes, and the second moves the first project's split): never twice the same.
    written = Counter(
        (r.path, r.body)
        for r in patches
        if is_status_apply(r.method, r.path) and 200 <= r.status < 300
    )
    assert set(written.values()) == {1}, written
    written_paths = {path for path, _ in written}
    for name in ("vision-research", "conflicted-team"):
        assert f"{kinds.TRAINING_PROJECT.path(name)}/status" in written_paths
    assert f"{kinds.CAPACITY_POLICY.path(POLICY)}/status" in written_paths
    assert pruned(running) == 0
    assert [r for r in proxy.requests if r.method == "DELETE"] == []
    assert_a_further_pass_writes_nothing(running, kube)


# ------------------------------------------------------------------ throttling
def test_429s_with_retry_after_on_a_watch_and_its_relist_are_waited_out_and_the_change_converges(
    kube: KubeClient, proxy: ControlledProxy
) -> None:
    """An API server under load throttles reads. Passes read the cache, so the reads it can
    throttle are a watch and, after the watch expires, its relist: both must wait as told and
    go on, and the change made while the watch was refused must be applied."""
    documents = example_policy()
    for doc in documents:
        apply_doc(kube, doc)
    change = quota_edit_and_new_project(
        documents, project="vision-research", pool="a100", gpus=40, new="throttled-team"
    )
    projects = kinds.TRAINING_PROJECT.path()
    with controller(client_for(proxy)) as running:
        settle(running, kube, documents)
        relists = reflector_of(running, kinds.TRAINING_PROJECT).relists
        watch_throttled = proxy.inject_query(
            watch_of(kinds.TRAINING_PROJECT), status=429, times=2, retry_after=1
        )
        expired = proxy.inject_query(watch_of(kinds.TRAINING_PROJECT), status=410, times=1)
        lists_throttled = proxy.inject_query(is_list, status=429, times=4, retry_after=1)
        with capture_logs() as logs:
            assert proxy.cut_watches(projects) == 1
            wait_until(lambda: watch_throttled.hits >= 1, "the project watch is throttled")
            wait_until(
                lambda: any(e["event"] == "watch_throttled" for e in logs),
                "the throttled watch is logged",
            )
        # The server's own request to wait is news, not a warning (client-go logs it so too).
        throttled = next(e for e in logs if e["event"] == "watch_throttled")
        assert (throttled["kind"], throttled["log_level"]) == ("TrainingProject", "info")
        # Made while the project watch is refused: only the relist can report it.
        changed_at = time.monotonic()
        change.push(kube)
        settle(running, kube, change.documents, since=changed_at)
        relisted = reflector_of(running, kinds.TRAINING_PROJECT).relists
    assert running.stopped_cleanly()
    assert (watch_throttled.hits, expired.hits, lists_throttled.hits) == (2, 1, 4)
    assert relisted == relists + 1
    # Each throttled request was sent again no sooner than the server's Retry-After.
    watches = proxy.arrivals("GET", projects, watch=True)
    for _, at in watch_throttled.answered:
        assert next(t for t in watches if t > at) - at >= 1.0
    for path, at in lists_throttled.answered:
        retried = [t for t in proxy.arrivals("GET", path, watch=False) if t > at]
        assert retried, (path, at)
        assert retried[0] - at >= 1.0, (path, retried[0] - at)
    assert pruned(running) == 0
    assert_a_further_pass_writes_nothing(running, kube)


RETRY_AFTER = 5
"""Seconds: well above the watcher's own backoff after a failed watch (0.5 s, then 1 s, 2 s...),
so the watcher ignoring it shows however loaded the machine is."""


def test_a_throttled_watch_waits_the_servers_retry_after_before_watching_again(
    kube: KubeClient, proxy: ControlledProxy
) -> None:
    """API Priority and Fairness answers watches with 429 and Retry-After too; eleven watches
    coming back sooner than asked add to the load that made the server throttle (client-go
    waits the Retry-After on a watch as on any request)."""
    documents = example_policy()
    for doc in documents:
        apply_doc(kube, doc)
    change = quota_edit_and_new_project(
        documents, project="vision-research", pool="a100", gpus=40, new="patient-team"
    )
    projects = kinds.TRAINING_PROJECT.path()
    with controller(client_for(proxy)) as running:
        settle(running, kube, documents)
        throttled = proxy.inject_query(
            watch_of(kinds.TRAINING_PROJECT), status=429, times=2, retry_after=RETRY_AFTER
        )
        cut_at = time.monotonic()
        assert proxy.cut_watches(projects) == 1

        def attempts() -> list[float]:
            return [t for t in proxy.arrivals("GET", projects, watch=True) if t >= cut_at]

        wait_until(lambda: len(attempts()) >= 3, "two throttled watches, then one that streams")
        changed_at = time.monotonic()
        change.push(kube)
        settle(running, kube, change.documents, since=changed_at)
    assert running.stopped_cleanly()
    assert throttled.hits == 2
    first, second, third = attempts()[:3]
    print(
        f"\nwatch attempts after a 429 with Retry-After: {RETRY_AFTER} came "
        f"{second - first:.2f} s and {third - second:.2f} s apart"
    )
    assert second - first >= RETRY_AFTER
    assert third - second >= RETRY_AFTER


# ------------------------------------------------------------------ a watch expires
@pytest.mark.parametrize(
    "watch_error",
    [
        pytest.param(False, id="410 Gone answering the watch request"),
        pytest.param(True, id="an ERROR event with code 410 in the watch stream"),
    ],
)
def test_a_watch_that_expires_while_down_relists_and_applies_the_change_made_meanwhile(
    kube: KubeClient, proxy: ControlledProxy, watch_error: bool
) -> None:
    """A watch resumed from a compacted resourceVersion gets 410 and not the events it
    missed: only the relist can show the controller what changed while the watch was down.
    The watch is held down (its request parked in the proxy) while the change is made."""
    documents = example_policy()
    for doc in documents:
        apply_doc(kube, doc)
    change = quota_edit_and_new_project(
        documents, project="vision-research", pool="a100", gpus=40, new="relisted-team"
    )
    projects = kinds.TRAINING_PROJECT.path()
    with controller(client_for(proxy)) as running:
        settle(running, kube, documents)
        relists = {r.kind.kind: r.relists for r in running.controller.cache.reflectors}
        gate = threading.Event()
        expired = proxy.inject_query(
            watch_of(kinds.TRAINING_PROJECT),
            status=410,
            times=1,
            watch_error=watch_error,
            hold=gate,
        )
        assert proxy.cut_watches(projects) == 1
        wait_until(expired.arrived.is_set, "the project watch is requested again (and held)")
        change.push(kube)  # while the watch is down: no watch will ever report it
        released_at = time.monotonic()
        gate.set()
        settle(running, kube, change.documents, since=released_at)
        relisted = {r.kind.kind: r.relists for r in running.controller.cache.reflectors}
    assert running.stopped_cleanly()
    assert expired.hits == 1
    # Only the expired watch relisted, once; the others kept streaming.
    assert relisted == {**relists, "TrainingProject": relists["TrainingProject"] + 1}
    # Nothing told the controller of the change but the relist: the pass that applied it
    # came after the relist.
    relist_at = next(t for t in proxy.arrivals("GET", projects, watch=False) if t > released_at)
    queue = kinds.CLUSTER_QUEUE.path("relisted-team")
    created_at = next(r.time for r in proxy.requests if r.method == "PATCH" and r.path == queue)
    assert relist_at < created_at
    assert pruned(running) == 0
    assert_a_further_pass_writes_nothing(running, kube)


# ------------------------------------------------------------------ Prometheus down
AT_RISK_WORKLOADS = 8
"""Pending llm-pretrain Workloads (16 GPUs, 30 hours each) that put its deadline, 60 hours
away, at risk until the a100 on-demand limit is one 16-GPU step above its floor of 16."""
RAISED = 32


def at_risk_policy() -> Documents:
    """The example policy on the wall clock (no window, no cooldown), Prometheus down."""
    return policy_documents(dead_prometheus_url())


def on_demand_limit(kube: KubeClient, pool: str = "a100") -> int:
    nodepool = kube.get(kinds.NODE_POOL, names.nodepool_name(pool, names.ON_DEMAND))
    return int(nodepool["spec"]["limits"][GPU]) if nodepool else -1


def last_decision(kube: KubeClient, pool: str = "a100") -> dict[str, Any]:
    policy = kube.get(kinds.CAPACITY_POLICY, POLICY) or {}
    for entry in (policy.get("status") or {}).get("pools") or []:
        if entry["pool"] == pool:
            return dict(entry.get("lastDecision") or {})
    return {}


def quota_gpus(kube: KubeClient, project: str) -> int:
    """A ClusterQueue's GPU nominal quota over all its flavors."""
    queue = kube.get(kinds.CLUSTER_QUEUE, project)
    assert queue is not None
    return sum(
        int(resource["nominalQuota"])
        for group in queue["spec"]["resourceGroups"]
        for flavor in group["flavors"]
        for resource in flavor["resources"]
        if resource["name"] == GPU
    )


def test_with_prometheus_down_policy_changes_still_apply_and_raised_capacity_is_kept(
    kube: KubeClient, control_plane: ControlPlane
) -> None:
    """Without history the controller must never lower on-demand capacity, but the rest of
    the policy (quotas, projects) must keep being applied: an outage of Prometheus is no
    reason to freeze the cluster."""
    documents = at_risk_policy()
    for doc in documents:
        apply_doc(kube, doc)
    for index in range(AT_RISK_WORKLOADS):
        kube.apply(kinds.WORKLOAD, workload(index), field_manager="kueue")
    change = quota_edit_and_new_project(
        documents, project="vision-research", pool="a100", gpus=32, new="dark-team"
    )
    client = new_client(control_plane)
    with controller(client) as running:
        wait_until(
            lambda: on_demand_limit(kube) == RAISED,
            "the controller raises the a100 on-demand limit a step, without history",
        )
        raised_at = time.monotonic()
        settle(running, kube, documents, pure_render=False)
        # The risk clears (a lower would be due at once: no window, no cooldown) and the
        # policy changes, while Prometheus stays unreachable.
        cleared_at = time.monotonic()
        for index in range(AT_RISK_WORKLOADS):
            kube.delete(kinds.WORKLOAD, f"pretrain-job-{index}", "llm")
        change.push(kube)
        wait_until(
            lambda: last_decision(kube).get("reason") == Reason.PROMETHEUS_UNAVAILABLE,
            "a hold for want of history",
            explain=lambda: last_decision(kube),
        )
        settle(running, kube, change.documents, since=cleared_at, pure_render=False)
    assert running.stopped_cleanly()
    assert on_demand_limit(kube) == RAISED
    decisions = [
        (t, d)
        for t, r in running.results
        if r.capacity is not None
        for d in r.capacity.decisions
        if d.pool == "a100"
    ]
    assert any(d.action == Action.RAISE for _, d in decisions)
    decisions = [(t, d) for t, d in decisions if t >= raised_at]
    assert decisions and all(d.action != Action.LOWER for _, d in decisions)
    assert decisions[-1][1].reason == Reason.PROMETHEUS_UNAVAILABLE
    policy = kube.get(kinds.CAPACITY_POLICY, POLICY)
    assert policy is not None
    assert condition_of(policy, "HistoryAvailable") == ("False", "PrometheusUnreachable")
    # The quota edit and the new project are in place as the policy says.
    queue = kube.get(kinds.CLUSTER_QUEUE, "dark-team")
    assert queue is not None
    assert quota_gpus(kube, "vision-research") == 32
    assert pruned(running) == 0
    assert_a_further_pass_writes_nothing(running, kube)
