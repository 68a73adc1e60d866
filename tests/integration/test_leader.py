"""Leader election against a real API server, with short timings (lease 3 s, renew 2 s, retry
0.5 s) so failover is measured, not assumed.

Lease is a stand-in CRD here (testenv/standins): the test API server serves
`coordination.k8s.io/v1` Lease as a custom resource without the built-in schema, so what is
checked is our own body, resourceVersion handling and timing, as a real cluster would see them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from controller import names
from controller.kube import kinds
from controller.kube.client import KubeClient
from controller.kube.leader import LeaderElector, LeaseRecord
from testenv.controlplane import ControlPlane
from tests.integration.conftest import new_client

NAMESPACE = names.DEFAULT_NAMESPACE
"""The controller's namespace, which the `kube` fixture creates where the server has them."""
LEASE_NAME = "quartermaster-leader"
LEASE_DURATION = 3.0
RENEW_DEADLINE = 2.0
RETRY_PERIOD = 0.5


class Callbacks:
    """When each callback ran, by the monotonic clock."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []
        self.lock = threading.Lock()

    def started(self) -> None:
        with self.lock:
            self.calls.append(("started", time.monotonic()))

    def stopped(self) -> None:
        with self.lock:
            self.calls.append(("stopped", time.monotonic()))

    @property
    def names(self) -> list[str]:
        with self.lock:
            return [name for name, _ in self.calls]


class RenewalSpy(KubeClient):
    """A client that notes when each successful Lease PUT started."""

    def __init__(self, plane: ControlPlane) -> None:
        base = new_client(plane, max_delay_seconds=2.0)
        super().__init__(base.api_client, retry=base.retry)
        self.successes: list[float] = []

    def replace(self, kind: kinds.Kind, obj: dict[str, Any]) -> dict[str, Any]:
        started = time.monotonic()
        result = super().replace(kind, obj)
        self.successes.append(started)
        return result


class Candidates:
    """Electors on one Lease, each with its own client, and a sampler that fails the test if
    two of them ever claim leadership at once."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.clients: list[KubeClient] = []
        self.electors: dict[str, LeaderElector] = {}
        self.callbacks: dict[str, Callbacks] = {}
        self.overlaps: list[list[str]] = []
        self._sampling = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def add(self, identity: str, client: KubeClient | None = None) -> LeaderElector:
        if client is None:
            client = new_client(self.plane, max_delay_seconds=2.0)
        self.clients.append(client)
        callbacks = Callbacks()
        elector = LeaderElector(
            client,
            namespace=NAMESPACE,
            name=LEASE_NAME,
            identity=identity,
            lease_duration=LEASE_DURATION,
            renew_deadline=RENEW_DEADLINE,
            retry_period=RETRY_PERIOD,
            on_started_leading=callbacks.started,
            on_stopped_leading=callbacks.stopped,
        )
        self.electors[identity] = elector
        self.callbacks[identity] = callbacks
        return elector

    def leaders(self) -> list[str]:
        return [identity for identity, e in self.electors.items() if e.is_leader()]

    def _sample(self) -> None:
        while not self._sampling.wait(0.005):
            leaders = self.leaders()
            if len(leaders) > 1:
                self.overlaps.append(leaders)

    def close(self) -> None:
        self._sampling.set()
        self._sampler.join()
        for elector in self.electors.values():
            elector.stop(release=False)
        for client in self.clients:
            client.close()


@pytest.fixture
def candidates(kube: KubeClient, control_plane: ControlPlane) -> Iterator[Candidates]:
    group = Candidates(control_plane)
    try:
        yield group
    finally:
        group.close()
    assert not group.overlaps, f"two leaders at once: {group.overlaps[:3]}"


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until `predicate()` held; fails the test after `timeout`."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(0.005)
    return time.monotonic() - start


def lease_record(kube: KubeClient) -> LeaseRecord:
    lease = kube.get(kinds.LEASE, LEASE_NAME, NAMESPACE)
    assert lease is not None
    return LeaseRecord.from_spec(lease["spec"])


def test_of_two_candidates_exactly_one_leads_and_failover_waits_for_the_lease(
    kube: KubeClient, candidates: Candidates
) -> None:
    a, b = candidates.add("replica-a"), candidates.add("replica-b")
    a.start()
    b.start()
    wait_for(lambda: len(candidates.leaders()) == 1, 5.0, "one leader")
    time.sleep(LEASE_DURATION)  # several renewals: the lead must not flap
    leaders = candidates.leaders()
    assert len(leaders) == 1
    leader, standby = (a, b) if leaders == ["replica-a"] else (b, a)
    assert candidates.callbacks[leader.identity].names == ["started"]
    assert candidates.callbacks[standby.identity].names == []
    record = lease_record(kube)
    assert record.holder_identity == leader.identity
    assert record.lease_duration_seconds == 3
    assert record.lease_transitions == 0

    leader.stop(release=False)  # as if the pod were killed: nobody releases the lease
    failover = wait_for(standby.is_leader, LEASE_DURATION + 3.0, "the standby takes over")
    print(f"\nfailover without release: {failover:.3f} s")
    assert failover <= LEASE_DURATION + 2 * RETRY_PERIOD
    # The standby must not have cut the lease short: the last renewal was at most one retry
    # period (plus a request) before the stop.
    assert failover >= LEASE_DURATION - RETRY_PERIOD - 0.25
    record = lease_record(kube)
    assert record.holder_identity == standby.identity
    assert record.lease_transitions == 1
    wait_for(lambda: candidates.callbacks[standby.identity].names == ["started"], 1.0, "callback")


def test_a_released_lease_is_taken_over_within_a_retry_period(
    kube: KubeClient, candidates: Candidates
) -> None:
    a = candidates.add("replica-a")
    a.start()
    wait_for(a.is_leader, 5.0, "a leads")
    b = candidates.add("replica-b")
    b.start()
    time.sleep(2 * RETRY_PERIOD)  # b has seen the lease held
    assert not b.is_leader()

    a.stop(release=True)
    assert not a.is_leader()
    assert candidates.callbacks["replica-a"].names == ["started", "stopped"]
    takeover = wait_for(b.is_leader, 2.0, "b takes the released lease")
    print(f"\ntakeover after release: {takeover:.3f} s")
    assert takeover <= RETRY_PERIOD + 0.25
    record = lease_record(kube)
    assert record.holder_identity == "replica-b"
    assert record.lease_transitions == 1


def test_lease_transitions_count_each_change_of_holder(
    kube: KubeClient, candidates: Candidates
) -> None:
    holders = []
    for term, identity in enumerate(["replica-a", "replica-b", "replica-a", "replica-c"]):
        elector = candidates.add(identity)
        elector.start()
        wait_for(elector.is_leader, 3 * RETRY_PERIOD, f"{identity} leads")
        record = lease_record(kube)
        holders.append(record.holder_identity)
        assert record.lease_transitions == term
        elector.stop(release=True)
        del candidates.electors[identity]
    assert holders == ["replica-a", "replica-b", "replica-a", "replica-c"]


def test_a_leader_that_cannot_renew_steps_down_within_the_renew_deadline(
    kube: KubeClient, candidates: Candidates, control_plane: ControlPlane
) -> None:
    spy = RenewalSpy(control_plane)
    a = candidates.add("replica-a", client=spy)
    a.start()
    wait_for(a.is_leader, 5.0, "a leads")
    wait_for(lambda: len(spy.successes) >= 2, 3.0, "a renews")

    control_plane.stop_apiserver()
    stopped_at = time.monotonic()
    time.sleep(0.05)  # let a PUT that completed just before the stop be noted
    last_renewal = spy.successes[-1]
    wait_for(lambda: not a.is_leader(), RENEW_DEADLINE + 1.0, "a stops calling itself leader")
    print(
        f"\nlast renewal {stopped_at - last_renewal:.3f} s before the API server was down; "
        f"is_leader() seen False {time.monotonic() - last_renewal:.3f} s after it"
    )
    # is_leader() is computed from the clock, so this holds exactly, however late we look.
    time.sleep(max(0.0, last_renewal + RENEW_DEADLINE - time.monotonic()))
    assert not a.is_leader()
    wait_for(lambda: "stopped" in candidates.callbacks["replica-a"].names, 1.0, "callback")
    callback_at = candidates.callbacks["replica-a"].calls[-1][1]
    assert callback_at - last_renewal <= RENEW_DEADLINE + 0.5

    control_plane.start_apiserver()
    # Nobody else took the lease: a takes its own lease back without waiting for it to expire.
    wait_for(a.is_leader, 5.0, "a leads again once the API server is back")
    wait_for(
        lambda: candidates.callbacks["replica-a"].names == ["started", "stopped", "started"],
        1.0,
        "a new term is announced",  # is_leader() turns True just before the callback runs
    )
    assert lease_record(kube).lease_transitions == 0
