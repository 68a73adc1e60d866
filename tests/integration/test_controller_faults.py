"""The controller against an API server that goes away or pushes back, in-process.

What is real: the API server and etcd (stopped and restarted as processes, serving the real Kueue,
Karpenter and KEDA CRDs), the HTTP the controller sends, and the `Controller` loop with its watches,
leader election and backoff running in a thread, or the `Reconciler` on its own where one pass is
the subject. The faults come from stopping the API server itself or from
testenv/faultproxy.py, a real HTTP proxy in front of it that answers chosen requests
itself (429 with Retry-After) and records every request, which is how request rates are counted.
Stand-ins: on the CRD-only test server these tests normally run on, `coordination.k8s.io/v1` Lease
and `events.k8s.io/v1` Event are custom resources (testenv/standins); apps/v1 is not
served, so warm-pool Deployments are left out of every comparison, as the controller leaves them out
(a kube-apiserver serves them, and they are compared like the rest). Prometheus is not running: the
controller reports its history as unavailable.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from itertools import pairwise
from typing import Any

import pytest

from controller import names
from controller.api.loader import load_policy_set
from controller.examples.synthetic import synthetic_documents
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from controller.kube.leader import utc_now
from controller.reconcile.diff import is_subset, ref, show_ref
from controller.reconcile.loop import Controller, LoopOptions
from controller.reconcile.reconciler import Reconciler, ReconcileResult
from controller.reconcile.stored import stored_form
from controller.render.desired import render
from testenv.controlplane import ControlPlane
from testenv.faultproxy import FaultProxy, client_for
from tests.integration.conftest import new_client
from tests.integration.test_reconcile import apply_doc, example_documents

NAMESPACE = names.DEFAULT_NAMESPACE


# ------------------------------------------------------------------ helpers
def wait_for(
    predicate: Callable[[], bool], timeout: float, what: str, *, poll: float = 0.05
) -> float:
    """Seconds until `predicate()` held; fails the test after `timeout`."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(poll)
    return time.monotonic() - start


class RunningController:
    """A `Controller` on a thread, with every pass's result and error noted with its time.

    `wall_clock` is the controller's decision clock (see `Controller`): a test that also runs
    passes of its own on an injected clock hands the loop that same clock.
    """

    def __init__(
        self,
        client: KubeClient,
        options: LoopOptions,
        *,
        wall_clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.client = client
        self.results: list[tuple[float, ReconcileResult]] = []
        self.errors: list[tuple[float, Exception]] = []
        self.crashed: list[BaseException] = []
        self.controller = Controller(
            client,
            options,
            on_result=lambda r: self.results.append((time.monotonic(), r)),
            on_error=lambda e: self.errors.append((time.monotonic(), e)),
            wall_clock=wall_clock,
        )
        self.thread = threading.Thread(target=self._run, name="controller", daemon=True)

    def _run(self) -> None:
        try:
            self.controller.run()
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.crashed.append(exc)

    def start(self) -> RunningController:
        self.thread.start()
        return self

    def stop(self, timeout: float = 45.0) -> None:
        """Stop and join every thread (see `stopped_cleanly`), then close the client.

        A request in flight may first run out its client's retry deadline. Watches must end
        too: left open, they would outlive the test and make a later graceful API-server stop
        wait out its whole grace period.
        """
        self.controller.stop()
        if self.thread.is_alive():
            self.thread.join(timeout)
        self.client.close()
        self.controller.cache.join(10)

    def stopped_cleanly(self) -> bool:
        alive = [t.name for t in (self.thread, *self.controller.cache.threads()) if t.is_alive()]
        return alive == [] and self.crashed == []

    def results_since(self, moment: float) -> list[ReconcileResult]:
        return [r for t, r in list(self.results) if t >= moment]


def options(**overrides: Any) -> LoopOptions:
    defaults: dict[str, Any] = {"namespace": NAMESPACE, "identity": "in-process"}
    return LoopOptions(**{**defaults, **overrides})


def served_rendered(kube: KubeClient, documents: list[dict[str, Any]]) -> dict[str, Any]:
    """What the policy renders to, served kinds only, by ref."""
    policy_set = load_policy_set((f"doc#{i}", d) for i, d in enumerate(documents))
    served = kube.served_group_versions()
    return {
        show_ref(ref(o)): o
        for o in render(policy_set, namespace=NAMESPACE).objects
        if kinds.kind_of(o).group_version in served
    }


def live_managed(kube: KubeClient) -> list[dict[str, Any]]:
    served = kube.served_group_versions()
    items: list[dict[str, Any]] = []
    for kind in kinds.MANAGED_KINDS:
        if kind.group_version in served:
            listed, _ = kube.list(kind, label_selector=names.MANAGED_SELECTOR)
            items.extend(listed)
    return items


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


@pytest.fixture
def proxy(control_plane: ControlPlane) -> Iterator[FaultProxy]:
    with FaultProxy.for_control_plane(control_plane) as running:
        yield running


# ------------------------------------------------------------------ the API server restarts
def test_an_api_server_restart_in_the_middle_of_a_large_reconcile_converges(
    kube: KubeClient, control_plane: ControlPlane
) -> None:
    documents = synthetic_documents(projects=300, pools=4)
    for doc in documents:
        apply_doc(kube, doc)
    expected = served_rendered(kube, documents)
    # A one-second request deadline: the outage outlasts it, so the pass in flight fails and
    # the loop, not the client, has to retry and finish the job.
    client = new_client(control_plane, max_delay_seconds=1.0)
    running = RunningController(client, options(resync_seconds=3.0)).start()
    try:
        wait_for(lambda: client.stats.by_verb["PATCH"] >= 150, 60, "the first pass is under way")
        assert running.results == [], "the first pass must still be running"
        stopping_at = time.monotonic()
        patches_before = client.stats.by_verb["PATCH"]
        # SIGKILL, as a crash would: a SIGTERMed server with watches open lingers for the
        # control plane's whole 15 s grace period, though it stops answering at once.
        control_plane.kill_apiserver()
        stopped_at = time.monotonic()
        time.sleep(2.0)
        control_plane.start_apiserver()
        back_at = time.monotonic()
        print(
            f"\nAPI server killed after {patches_before} PATCHes, "
            f"back {back_at - stopped_at:.1f} s later"
        )

        def converged() -> bool:
            return any(r.writes == 0 for r in running.results_since(back_at))

        took = wait_for(converged, 90, "a pass after the restart that finds nothing to do")
        print(f"converged {took:.1f} s after the API server was back")
    finally:
        running.stop()

    assert running.stopped_cleanly()
    # The pass the outage hit failed, and the loop tried again after a backoff.
    assert running.errors, "the pass in flight should have failed"
    # (A later pass may also fail on a 404: the server answers /readyz a moment before the
    # CRDs' endpoints are back.)
    first_error_at, first_error = running.errors[0]
    assert stopping_at <= first_error_at
    assert isinstance(first_error, KubeError) and first_error.status == 0, first_error
    assert all(isinstance(e, KubeError) for _, e in running.errors)
    results = [r for _, r in running.results]
    print(
        "passes after the outage (created, status writes, kinds unserved): "
        f"{[(r.created, r.status_writes, len(r.unserved)) for r in results]}"
    )
    # The pass the outage cut short had created part of it; later passes created the rest.
    assert 0 < sum(r.created for r in results) < len(expected)
    assert client.stats.retries > 0

    # Every rendered object exists exactly once, as rendered; nothing else carries our label.
    live = live_managed(kube)
    counts = Counter(show_ref(ref(o)) for o in live)
    assert [k for k, n in counts.items() if n > 1] == []
    assert sorted(counts) == sorted(expected)
    by_ref = {show_ref(ref(o)): o for o in live}
    # In the stored form: a kube-apiserver re-encodes the built-in kinds it serves.
    assert [
        k for k, o in expected.items() if not is_subset(stored_form(o), stored_form(by_ref[k]))
    ] == []
    # Statuses no longer report the failed apply.
    policy = kube.get(kinds.CAPACITY_POLICY, "synthetic")
    assert policy is not None
    assert condition(policy, "Ready")["status"] == "True"
    projects, _ = kube.list(kinds.TRAINING_PROJECT)
    assert len(projects) == 300
    assert [
        p["metadata"]["name"] for p in projects if condition(p, "Ready")["status"] != "True"
    ] == []

    # A following pass writes nothing. It is the stopped controller's own reconciler (set up
    # as the controller sets it up), on a fresh client and allowed to write, so a write would
    # be counted rather than refused for want of the Lease.
    reconciler = running.controller.reconciler
    reconciler.client = kube
    reconciler.may_write = lambda: True
    before = kube.stats.writes
    again = reconciler.reconcile()
    assert kube.stats.writes - before == 0
    assert (again.created, again.updated, again.pruned, again.status_writes) == (0, 0, 0, 0)


# ------------------------------------------------------------------ throttling
def test_429_with_retry_after_on_the_first_patches_is_waited_out_and_the_pass_succeeds(
    kube: KubeClient, proxy: FaultProxy
) -> None:
    documents = example_documents()
    for doc in documents:
        apply_doc(kube, doc)
    expected = served_rendered(kube, documents)
    client = client_for(proxy)
    throttled = 3
    fault = proxy.inject(
        lambda method, _path: method == "PATCH", status=429, times=throttled, retry_after=1
    )
    try:
        started = time.monotonic()
        result = Reconciler(client, namespace=NAMESPACE).reconcile()
        elapsed = time.monotonic() - started
    finally:
        client.close()

    assert result.created == len(expected)
    assert fault.hits == throttled
    patches = [r for r in proxy.requests if r.method == "PATCH"]
    assert [r.status for r in patches[:throttled]] == [429] * throttled, patches[: throttled + 2]
    assert all(200 <= r.status < 300 for r in patches[throttled:])
    # The same object was sent again after each 429, a full Retry-After later.
    assert len({r.path for r in patches[: throttled + 1]}) == 1
    gaps = [later.time - earlier.time for earlier, later in pairwise(patches[: throttled + 1])]
    assert all(gap >= 1.0 for gap in gaps), gaps
    assert elapsed >= throttled * 1.0
    assert client.stats.retries == throttled
    # Every write of the pass but a prune (a DELETE) is a server-side apply, a PATCH: creates,
    # status writes, boosts and, where apps/v1 is served, the hand-over that follows each warm
    # pool's create. Counted from what the pass reports, so it holds on either server.
    assert result.pruned == 0
    assert len(patches) == throttled + result.writes
    assert sorted(show_ref(ref(o)) for o in live_managed(kube)) == sorted(expected)


# ------------------------------------------------------------------ down at start
def test_a_controller_started_while_the_api_server_is_down_backs_off_then_converges(
    kube: KubeClient, control_plane: ControlPlane, proxy: FaultProxy
) -> None:
    documents = example_documents()
    for doc in documents:
        apply_doc(kube, doc)
    expected = served_rendered(kube, documents)
    control_plane.stop_apiserver()
    running = RunningController(
        client_for(proxy),
        options(lease_duration_seconds=3.0, renew_deadline_seconds=2.0, retry_period_seconds=0.4),
    )
    readiness: list[tuple[float, bool, str]] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.02):
            ok, detail = running.controller.ready()
            readiness.append((time.monotonic(), ok, detail))

    sampler = threading.Thread(target=sample, name="readiness-sampler", daemon=True)
    outage = 5.0
    try:
        started = time.monotonic()
        running.start()
        sampler.start()
        time.sleep(outage)
        during = [r for r in proxy.requests if r.time - started <= outage]
        # The server answers before start_apiserver has seen it ready: "down" ends here.
        restarting = time.monotonic()
        control_plane.start_apiserver()
        back_at = time.monotonic()
        wait_for(
            lambda: running.controller.ready() == (True, "leading; synced"),
            30,
            "ready once the API server is back",
        )
        ready_at = time.monotonic()
    finally:
        sampling.set()
        if sampler.is_alive():
            sampler.join()
        running.stop()

    assert running.stopped_cleanly()
    # Retried, but at the pace of the backoff: a hot loop would make thousands of requests.
    times = [r.time - started for r in during]
    print(
        f"\n{len(during)} requests in {outage:g} s of outage, at "
        f"{', '.join(f'{t:.2f}' for t in times)} s; ready {ready_at - back_at:.2f} s "
        "after the API server was back"
    )
    assert all(r.status == 0 for r in during), "every connection was dropped unanswered"
    assert 3 <= len(during) <= 10
    gaps = [later - earlier for earlier, later in pairwise(times)]
    assert gaps[-1] >= 1.0, gaps
    assert running.results, "no pass completed"
    first_result_at = running.results[0][0]
    assert first_result_at > restarting

    # Not ready while the server was away, nor as leader before the first pass had returned
    # (give or take the instant between the loop marking itself synced and `on_result`).
    while_down = [(ok, detail) for t, ok, detail in readiness if t < restarting]
    assert len(while_down) > outage / 0.1, "the sampler kept sampling"
    assert {detail for ok, detail in while_down if ok} == set()
    assert [
        detail
        for t, ok, detail in readiness
        if ok and detail.startswith("leading") and t < first_result_at - 0.05
    ] == []
    assert running.controller.healthy()[0]
    assert sorted(show_ref(ref(o)) for o in live_managed(kube)) == sorted(expected)
