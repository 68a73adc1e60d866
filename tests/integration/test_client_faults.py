"""KubeClient against a real API server that misbehaves: retries, giving up, and watches.

The faults come from testenv/faultproxy.py, a real HTTP proxy in front of the real
server, so every answer the client sees went through urllib3 and the official client exactly as in a
cluster: a 429 with Retry-After, 5xx, conflicts, dropped connections, an API server that restarts,
and a watch whose resourceVersion the server no longer has.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import pytest

from controller.kube.client import KubeClient, KubeError, RetryPolicy, WatchEvent
from controller.kube.kinds import LEASE
from testenv.controlplane import ControlPlane
from testenv.faultproxy import FaultProxy, client_for, kubeconfig_for, status_body
from tests.integration.conftest import CLEANED_KINDS, ensure_namespaces

NAMESPACE = "client-faults"
FIELD_MANAGER = "test-client-faults"


def lease(name: str, holder: str = "a") -> dict[str, Any]:
    """Leases: the simplest kind the test server stores (a stand-in CRD without a schema)."""
    return {
        "apiVersion": LEASE.api_version,
        "kind": LEASE.kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"holderIdentity": holder},
    }


def method_is(method: str) -> Callable[[str, str], bool]:
    return lambda m, _path: m == method


class Connect(Protocol):
    def __call__(self, *, max_delay_seconds: float = 30.0) -> KubeClient: ...


@pytest.fixture(autouse=True)
def namespace(kube: KubeClient) -> str:
    """The Leases' namespace, created where the server has namespaces (before any proxy
    records a request)."""
    ensure_namespaces(kube, NAMESPACE)
    return NAMESPACE


@pytest.fixture
def proxy(control_plane: ControlPlane, kube: KubeClient) -> Iterator[FaultProxy]:
    """A proxy in front of the shared server; `kube` deletes what the test wrote after it."""
    with FaultProxy.for_control_plane(control_plane) as running:
        yield running


@pytest.fixture
def connect(proxy: FaultProxy) -> Iterator[Connect]:
    """Clients through the proxy, closed after the test."""
    clients: list[KubeClient] = []

    def make(*, max_delay_seconds: float = 30.0) -> KubeClient:
        clients.append(client_for(proxy, max_delay_seconds=max_delay_seconds))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


def statuses(proxy: FaultProxy, method: str) -> list[int]:
    return [r.status for r in proxy.requests if r.method == method]


# ------------------------------------------------------------------ retried, then success
def test_a_429_is_retried_after_the_servers_retry_after(
    proxy: FaultProxy, connect: Connect
) -> None:
    client = connect()
    proxy.inject(method_is("PATCH"), status=429, times=2, retry_after=1)

    started = time.monotonic()
    applied = client.apply(LEASE, lease("throttled"), field_manager=FIELD_MANAGER)
    elapsed = time.monotonic() - started

    assert applied["spec"] == {"holderIdentity": "a"}
    assert statuses(proxy, "PATCH") == [429, 429, 201]
    assert client.stats.retries == 2
    assert client.stats.by_verb["PATCH"] == 3
    assert elapsed >= 2.0, "each Retry-After: 1 is a full second's wait"
    patches = [r.time for r in proxy.requests if r.method == "PATCH"]
    assert all(later - earlier >= 1.0 for earlier, later in itertools.pairwise(patches))


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        pytest.param(500, "InternalError", id="a 500 is retried with backoff"),
        pytest.param(502, "BadGateway", id="a 502 from a load balancer is retried"),
        pytest.param(503, "ServiceUnavailable", id="a 503 is retried with backoff"),
        pytest.param(504, "Timeout", id="a 504 is retried with backoff"),
        pytest.param(409, "Conflict", id="a 409 Conflict on a PATCH is retried"),
    ],
)
def test_a_transient_error_is_retried_with_exponential_backoff(
    proxy: FaultProxy, connect: Connect, status: int, reason: str
) -> None:
    client = connect()
    fault = proxy.inject(method_is("PATCH"), status=status, times=2)

    applied = client.apply(LEASE, lease(f"flaky-{status}"), field_manager=FIELD_MANAGER)

    assert applied["metadata"]["name"] == f"flaky-{status}"
    assert fault.hits == 2
    assert statuses(proxy, "PATCH") == [status, status, 201]
    assert client.stats.retries == 2
    first, second, third = (r.time for r in proxy.requests if r.method == "PATCH")
    # RetryPolicy: 0.2 s, then 0.4 s, each plus up to 0.2 s of jitter.
    assert second - first >= 0.2
    assert third - second >= 0.4
    assert status_body(status)["reason"] == reason


# ------------------------------------------------------------------ not retried
@pytest.mark.parametrize(
    ("method", "operation", "status", "body"),
    [
        pytest.param(
            "PATCH",
            lambda c: c.apply(LEASE, lease("missing"), field_manager=FIELD_MANAGER),
            404,
            None,
            id="a 404 on an apply is not retried",
        ),
        pytest.param(
            "PATCH",
            lambda c: c.apply(LEASE, lease("invalid"), field_manager=FIELD_MANAGER),
            422,
            None,
            id="a 422 Invalid is not retried",
        ),
        pytest.param(
            "GET",
            lambda c: c.list(LEASE, namespace=NAMESPACE),
            403,
            None,
            id="a 403 Forbidden is not retried",
        ),
        pytest.param(
            "POST",
            lambda c: c.create(LEASE, lease("taken")),
            409,
            status_body(409, "AlreadyExists"),
            id="a 409 AlreadyExists on a create is not retried",
        ),
    ],
)
def test_a_permanent_error_is_raised_after_one_request(
    proxy: FaultProxy,
    connect: Connect,
    *,
    method: str,
    operation: Callable[[KubeClient], object],
    status: int,
    body: dict[str, Any] | None,
) -> None:
    client = connect()
    fault = proxy.inject(method_is(method), status=status, times=3, body=body)

    with pytest.raises(KubeError) as raised:
        operation(client)

    assert raised.value.status == status
    assert raised.value.reason == (body or status_body(status))["reason"]
    assert not raised.value.retryable
    assert fault.hits == 1
    assert [(r.method, r.status) for r in proxy.requests] == [(method, status)]
    assert client.stats.retries == 0


def test_creating_an_existing_object_raises_already_exists_after_one_request(
    proxy: FaultProxy, connect: Connect, kube: KubeClient
) -> None:
    kube.apply(LEASE, lease("taken"), field_manager=FIELD_MANAGER)
    client = connect()

    with pytest.raises(KubeError) as raised:
        client.create(LEASE, lease("taken"))

    assert (raised.value.status, raised.value.reason) == (409, "AlreadyExists")
    assert not raised.value.retryable
    assert statuses(proxy, "POST") == [409]


# ------------------------------------------------------------------ connection failures
def test_requests_during_a_short_outage_succeed_when_connections_return(
    proxy: FaultProxy, connect: Connect, kube: KubeClient
) -> None:
    kube.apply(LEASE, lease("survivor"), field_manager=FIELD_MANAGER)
    client = connect()
    proxy.refuse_connections(1.5)

    started = time.monotonic()
    items, _ = client.list(LEASE, namespace=NAMESPACE)
    elapsed = time.monotonic() - started

    assert [item["metadata"]["name"] for item in items] == ["survivor"]
    seen = statuses(proxy, "GET")
    assert seen[-1] == 200
    assert len(seen) >= 2
    assert set(seen[:-1]) == {0}, "connections closed unanswered until the outage ended"
    assert client.stats.retries == len(seen) - 1
    assert 1.4 <= elapsed < 10


@pytest.mark.parametrize(
    ("start_outage", "status"),
    [
        pytest.param(
            lambda p: p.refuse_connections(30),
            0,
            id="closed connections past the deadline raise a retryable connection error",
        ),
        pytest.param(
            lambda p: p.inject(None, status=503, times=1000),
            503,
            id="503s past the deadline raise a retryable 503",
        ),
    ],
)
def test_an_outage_longer_than_the_retry_deadline_raises_a_retryable_error(
    proxy: FaultProxy,
    connect: Connect,
    start_outage: Callable[[FaultProxy], object],
    status: int,
) -> None:
    client = connect(max_delay_seconds=1.0)
    start_outage(proxy)

    started = time.monotonic()
    with pytest.raises(KubeError) as raised:
        client.list(LEASE, namespace=NAMESPACE)
    elapsed = time.monotonic() - started

    assert raised.value.status == status
    assert raised.value.retryable
    assert client.stats.retries >= 2
    # At least the first two waits (0.2 s, 0.4 s); at most the deadline plus one backoff
    # (max_backoff_seconds + jitter), since the deadline is checked before each wait.
    assert 0.6 <= elapsed < 1.0 + 5.2


def test_a_retry_after_longer_than_the_deadline_is_not_waited_out(
    proxy: FaultProxy, connect: Connect
) -> None:
    client = connect(max_delay_seconds=0.5)
    proxy.inject(None, status=429, times=1000, retry_after=2)

    started = time.monotonic()
    with pytest.raises(KubeError) as raised:
        client.list(LEASE, namespace=NAMESPACE)
    elapsed = time.monotonic() - started

    assert raised.value.status == 429
    assert raised.value.retryable, "the caller may still retry later"
    assert elapsed < 1.5


def restart_during_a_long_backoff(
    plane: ControlPlane, client: KubeClient, *, retries: int, failures: list[BaseException]
) -> None:
    """Start the API server as `client` begins its `retries`-th wait.

    The CRD test server accepts connections about 0.4 s after it starts and answers 404 for
    every custom resource until it has loaded the CRDs, 1 to 2 s later (kube-apiserver answers
    503 there, kubernetes#81244). A retry landing in that gap fails on a 404 that says nothing
    about the client, so the server is started when the client has just begun a wait longer
    than the server's start-up: its next attempt finds the server ready.
    """
    try:
        deadline = time.monotonic() + 30
        while client.stats.retries < retries and time.monotonic() < deadline:
            time.sleep(0.005)
        plane.start_apiserver()
    except BaseException as exc:  # reported by the test, not lost in the thread
        failures.append(exc)


def warm_up(client: KubeClient) -> None:
    """List every kind `kube` cleans, at once, to pay the restart's 429s in parallel.

    A restarted server answers the first list of each custom resource with 429 "storage is
    (re)initializing" and Retry-After: 1; one after the other in `kube`'s clean-up that is a
    second per kind.
    """
    served = client.served_group_versions()
    kinds = [kind for kind in CLEANED_KINDS if kind.group_version in served]
    with ThreadPoolExecutor(max_workers=len(kinds)) as pool:
        list(pool.map(client.list, kinds))


def test_a_list_while_the_api_server_restarts_succeeds(
    control_plane: ControlPlane, kube: KubeClient
) -> None:
    """A direct client (no proxy): the real server's port refuses connections, then serves."""
    kube.apply(LEASE, lease("persisted"), field_manager=FIELD_MANAGER)
    # Waits of 1, 2, then 4 s: the server restarts at the third, ~3 s into the outage, and
    # has 4 s to become ready (it needs about 2).
    client = KubeClient.from_kubeconfig(
        str(control_plane.kubeconfig),
        retry=RetryPolicy(max_delay_seconds=30, initial_seconds=1.0, jitter_seconds=0.1),
    )
    failures: list[BaseException] = []
    restarter = threading.Thread(
        target=restart_during_a_long_backoff,
        args=(control_plane, client),
        kwargs={"retries": 3, "failures": failures},
        name="restart-apiserver",
    )
    control_plane.stop_apiserver()
    try:
        restarter.start()
        started = time.monotonic()
        items, _ = client.list(LEASE, namespace=NAMESPACE)
        elapsed = time.monotonic() - started
    finally:
        if restarter.is_alive():
            restarter.join()
        if not control_plane.apiserver_running:
            control_plane.start_apiserver()
        client.close()
        warm_up(kube)

    assert failures == []
    assert [item["metadata"]["name"] for item in items] == ["persisted"]
    assert elapsed >= 3.0, "three refused attempts, 1 s and 2 s apart"
    assert client.stats.retries >= 3


# ------------------------------------------------------------------ watches
def next_event(events: Iterator[WatchEvent]) -> WatchEvent:
    """The next event that is not a bookmark."""
    return next(event for event in events if event.type != "BOOKMARK")


def test_a_watch_through_the_proxy_streams_events_as_they_happen(
    proxy: FaultProxy, connect: Connect, kube: KubeClient
) -> None:
    client = connect()
    _, version = client.list(LEASE, namespace=NAMESPACE)
    kube.apply(LEASE, lease("watched", holder="a"), field_manager=FIELD_MANAGER)

    started = time.monotonic()
    events = client.watch(LEASE, resource_version=version, timeout_seconds=20)
    try:
        added = next_event(events)
        kube.apply(LEASE, lease("watched", holder="b"), field_manager=FIELD_MANAGER)
        modified = next_event(events)
    finally:
        if isinstance(events, Generator):  # watch() is typed as a plain Iterator
            events.close()
    elapsed = time.monotonic() - started

    assert (added.type, added.object["spec"]) == ("ADDED", {"holderIdentity": "a"})
    assert (modified.type, modified.object["spec"]) == ("MODIFIED", {"holderIdentity": "b"})
    assert elapsed < 10, "events arrived while the watch was open, not when it ended"
    # The abandoned watch's connection is not reused for the next request.
    fetched = client.get(LEASE, "watched", NAMESPACE)
    assert fetched is not None
    assert fetched["spec"] == {"holderIdentity": "b"}
    assert client.stats.retries == 0
    assert statuses(proxy, "GET") == [200, 200, 200]


@pytest.mark.parametrize(
    "through_proxy",
    [
        pytest.param(False, id="a watch from a version older than the server keeps raises gone"),
        pytest.param(True, id="a 410 in a watch stream reaches the client through the proxy"),
    ],
)
def test_a_watch_from_a_version_the_server_no_longer_has_raises_gone(
    proxy: FaultProxy, connect: Connect, kube: KubeClient, through_proxy: bool
) -> None:
    for index in range(3):
        kube.apply(LEASE, lease(f"old-{index}"), field_manager=FIELD_MANAGER)
    client = connect() if through_proxy else kube

    with pytest.raises(KubeError) as raised:
        for _ in client.watch(LEASE, resource_version="1", timeout_seconds=5):
            pass

    assert raised.value.gone
    assert raised.value.status == 410
    assert not raised.value.retryable
    if through_proxy:  # the 410 is an ERROR event in a stream that began 200 OK
        assert statuses(proxy, "GET") == [200]


def test_closing_the_proxy_cuts_an_open_watch_and_ends_its_threads(
    control_plane: ControlPlane, kube: KubeClient
) -> None:
    threads_before = set(threading.enumerate())
    with FaultProxy.for_control_plane(control_plane) as own_proxy:
        client = client_for(own_proxy)
        _, version = client.list(LEASE, namespace=NAMESPACE)
        kube.apply(LEASE, lease("cut"), field_manager=FIELD_MANAGER)
        events = client.watch(LEASE, resource_version=version, timeout_seconds=60)
        assert next_event(events).type == "ADDED"
    try:
        assert set(threading.enumerate()) <= threads_before
        with pytest.raises(KubeError) as raised:
            next_event(events)
        assert raised.value.retryable, "a cut stream is a connection failure, not an end"
    finally:
        client.close()


# ------------------------------------------------------------------ discovery
@pytest.mark.parametrize(
    "via_kubeconfig",
    [
        pytest.param(False, id="discovery works through the proxy"),
        pytest.param(True, id="discovery works through a kubeconfig for the proxy"),
    ],
)
def test_served_group_versions_through_the_proxy(
    proxy: FaultProxy,
    connect: Connect,
    kube: KubeClient,
    tmp_path: Path,
    via_kubeconfig: bool,
) -> None:
    if via_kubeconfig:
        client = KubeClient.from_kubeconfig(str(kubeconfig_for(proxy, tmp_path)))
    else:
        client = connect()
    try:
        served = client.served_group_versions()
    finally:
        client.close()

    assert served == kube.served_group_versions()
    assert LEASE.group_version in served
    assert [(r.method, r.path, r.status) for r in proxy.requests] == [
        ("GET", "/api", 200),
        ("GET", "/apis", 200),
    ]
