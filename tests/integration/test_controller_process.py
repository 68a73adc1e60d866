"""The controller as real OS processes (`python -m controller.cli run`) against a real API server.

What is real: the processes, their signal handling, their /healthz and /readyz endpoints, their
JSON logs, the API server and etcd (serving the real Kueue, Karpenter and KEDA CRDs), and the
HTTP each replica sends. Stand-ins: on the CRD-only test server these tests normally run on,
`coordination.k8s.io/v1` Lease and `events.k8s.io/v1` Event are custom resources
(testenv/standins), so leader election is checked against our own Lease bodies, not
the built-in schema; apps/v1 is not served, so warm-pool Deployments are left out, as the
controller leaves them out.

Each replica of the two-replica test talks to the server through its own fault proxy
(testenv/faultproxy.py, no faults injected), so every request a replica made is on
record: that is how the standby is shown to write nothing. Timings are short (lease 3 s, so renew
deadline 2 s and retry period 0.4 s) and the failover and hand-over times are measured and printed
(`pytest -s`), and appended to FAILOVER_LOG.
"""

from __future__ import annotations

import copy
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from controller import names
from controller.api.loader import load_path
from controller.examples import EXAMPLE_DIR
from controller.kube import kinds
from controller.kube.client import WRITE_VERBS, KubeClient
from controller.render.desired import render
from testenv.controller_process import RunOptions, get_status, start_controller
from testenv.controlplane import ControlPlane, free_ports
from testenv.faultproxy import FaultProxy, ProxiedRequest, kubeconfig_for
from testenv.logtail import writes_in
from tests.integration.test_reconcile import apply_doc, example_documents, project

REPO_ROOT = Path(__file__).parents[2]
NAMESPACE = names.DEFAULT_NAMESPACE
LEASE_DURATION = 3.0
RETRY_PERIOD = max(LEASE_DURATION / 7.5, 0.2)
"""What `quartermaster run` derives from --lease-duration (renew deadline: two thirds of it)."""
RESYNC_SECONDS = 5.0
FAILOVER_LOG = Path("/tmp/quartermaster-failover-times.txt")


# ------------------------------------------------------------------ helpers
def wait_for(
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    *,
    explain: Callable[[], str] = str,
    poll: float = 0.02,
) -> float:
    """Seconds until `predicate()` held; fails the test after `timeout`, with `explain()`."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            pytest.fail(f"not within {timeout} s: {what}\n{explain()}")
        time.sleep(poll)
    return time.monotonic() - start


@dataclass
class Replica:
    """One `quartermaster run` process, its log files and its health port."""

    identity: str
    process: subprocess.Popen[bytes]
    port: int
    stdout: Path
    stderr: Path
    proxy: FaultProxy | None = None
    probes: list[tuple[float, int, str]] = field(default_factory=list)

    def probe(self, path: str) -> tuple[int, str]:
        status, body = get_status(f"http://127.0.0.1:{self.port}{path}")
        if path == "/readyz":
            self.probes.append((time.monotonic(), status, body))
        return status, body

    def ready_as(self, body: str) -> bool:
        return self.probe("/readyz") == (200, body)

    def log_lines(self) -> list[str]:
        return [line for line in self.stderr.read_text().splitlines() if line.strip()]

    def events(self) -> list[dict[str, Any]]:
        """The structured log, one JSON object a line (a line that is not JSON fails the test)."""
        parsed = []
        for line in self.log_lines():
            try:
                parsed.append(json.loads(line))
            except json.JSONDecodeError:
                pytest.fail(f"{self.identity}: a log line that is not JSON: {line!r}")
        return parsed

    def named(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events() if e.get("event") == event]

    def requests(self) -> list[ProxiedRequest]:
        """Every request the replica sent, from its proxy's log."""
        assert self.proxy is not None, f"{self.identity} does not go through a proxy"
        return self.proxy.requests

    def writes(self) -> list[ProxiedRequest]:
        return [r for r in self.requests() if r.method in WRITE_VERBS]

    def describe(self) -> str:
        tail = "\n".join(self.log_lines()[-15:])
        return f"--- {self.identity} (exit {self.process.poll()}) stderr tail:\n{tail}"


class Replicas:
    """Starts replicas; kills whatever still runs on exit, so no test leaves a process behind."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[Replica] = []

    def start(self, identity: str, kubeconfig: Path, proxy: FaultProxy | None = None) -> Replica:
        (port,) = free_ports(1)
        stdout = self.directory / f"{identity}.stdout"
        stderr = self.directory / f"{identity}.stderr"
        options = RunOptions(
            kubeconfig=kubeconfig,
            identity=identity,
            health_port=port,
            namespace=NAMESPACE,
            lease_duration=LEASE_DURATION,
            resync_seconds=RESYNC_SECONDS,
        )
        process = start_controller(options, log=stdout, stderr=stderr, root=REPO_ROOT).process
        replica = Replica(identity, process, port, stdout, stderr, proxy)
        self.started.append(replica)
        return replica

    def kill_all(self) -> None:
        for replica in self.started:
            if replica.process.poll() is None:
                replica.process.kill()
            replica.process.wait()

    def describe(self) -> str:
        return "\n".join(r.describe() for r in self.started)

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> float:
        """`wait_for`, failing with the tail of every replica's log."""
        return wait_for(predicate, timeout, what, explain=self.describe)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Replicas]:
    group = Replicas(tmp_path)
    try:
        yield group
    finally:
        group.kill_all()
        print(f"\nreplica logs: {tmp_path}")


def lease_spec(kube: KubeClient) -> dict[str, Any]:
    lease = kube.get(kinds.LEASE, names.LEASE_NAME, NAMESPACE)
    return dict((lease or {}).get("spec") or {})


def holder(kube: KubeClient) -> str | None:
    holder_identity = lease_spec(kube).get("holderIdentity")
    return None if holder_identity is None else str(holder_identity)


def rendered_cluster_queues() -> set[str]:
    return {
        o["metadata"]["name"]
        for o in render(load_path(EXAMPLE_DIR), namespace=NAMESPACE).objects
        if o["kind"] == "ClusterQueue"
    }


def live_cluster_queues(kube: KubeClient) -> set[str]:
    items, _ = kube.list(kinds.CLUSTER_QUEUE, label_selector=names.MANAGED_SELECTOR)
    return {item["metadata"]["name"] for item in items}


def served_rendered_count(kube: KubeClient) -> int:
    served = kube.served_group_versions()
    rendered = render(load_path(EXAMPLE_DIR), namespace=NAMESPACE).objects
    return sum(1 for o in rendered if kinds.kind_of(o).group_version in served)


def at(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(event["timestamp"]))


def record_timing(line: str) -> None:
    print(f"\n{line}")
    with FAILOVER_LOG.open("a") as handle:
        handle.write(f"{datetime.now().isoformat(timespec='seconds')} {line}\n")


# ------------------------------------------------------------------ one replica
def test_a_single_replica_syncs_reports_ready_and_stops_cleanly_on_sigterm(
    kube: KubeClient, control_plane: ControlPlane, replicas: Replicas
) -> None:
    for doc in example_documents():
        apply_doc(kube, doc)
    solo = replicas.start("solo", control_plane.kubeconfig)

    replicas.wait_for(lambda: solo.probe("/healthz")[0] == 200, 30, "/healthz answers 200")
    assert solo.probe("/healthz")[1].startswith("loop last ran")
    replicas.wait_for(lambda: solo.ready_as("leading; synced"), 30, "/readyz: leading and synced")
    # Readiness comes only after the first pass returned, so its objects are all there now.
    assert live_cluster_queues(kube) == rendered_cluster_queues()
    allowed = {
        (503, "standby; watches not synced"),
        (200, "standby; watches synced"),  # watches up, the Lease not yet taken
        (503, "leading; first sync not done"),
        (200, "leading; synced"),
    }
    answered = [(status, body) for _, status, body in solo.probes if status != 0]
    assert set(answered) <= allowed, answered
    print(f"\n/readyz answers in order: {list(dict.fromkeys(answered))}")
    assert holder(kube) == "solo"

    sent = time.monotonic()
    solo.process.send_signal(signal.SIGTERM)
    code = solo.process.wait(timeout=15)
    stopped_in = time.monotonic() - sent
    print(f"\nSIGTERM to exit: {stopped_in:.2f} s")
    assert code == 0
    assert stopped_in < 5.0

    events = solo.events()
    assert all({"event", "level", "timestamp"} <= e.keys() for e in events)
    order = [e["event"] for e in events]
    for expected in (
        "controller_starting",
        "leader_acquired",
        "reconciled",
        "leader_released",
        "controller_stopped",
    ):
        assert expected in order, (expected, order)
    assert order.index("controller_starting") < order.index("leader_acquired")
    assert order.index("leader_acquired") < order.index("reconciled")
    assert order.index("leader_released") < order.index("controller_stopped")
    first = solo.named("reconciled")[0]
    assert first["policy"] == "gpu-fleet"
    assert first["created"] == served_rendered_count(kube)
    assert first["invalid"] == []
    assert solo.stdout.read_text() == ""
    # Released: nobody holds it, and a standby could take it at its next poll.
    spec = lease_spec(kube)
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1


def test_sigterm_while_the_api_server_is_down_exits_within_a_few_seconds(
    kube: KubeClient, control_plane: ControlPlane, replicas: Replicas, tmp_path: Path
) -> None:
    for doc in example_documents():
        apply_doc(kube, doc)
    with FaultProxy.for_control_plane(control_plane) as proxy:
        solo = replicas.start("solo", kubeconfig_for(proxy, tmp_path), proxy)
        replicas.wait_for(
            lambda: solo.ready_as("leading; synced"), 30, "/readyz: leading and synced"
        )
        # Down, as the replica sees it: every connection cut, new ones refused.
        proxy.close()
        time.sleep(2.0)  # its watches broke and are relisting, with retries

        sent = time.monotonic()
        solo.process.send_signal(signal.SIGTERM)
        while solo.process.poll() is None and time.monotonic() - sent < 5.0:
            time.sleep(0.05)
        print(
            f"\nSIGTERM with the API server unreachable: exit code {solo.process.poll()} after "
            f"{time.monotonic() - sent:.1f} s"
        )
        assert solo.process.poll() == 0, "still running 5 s after SIGTERM"


# ------------------------------------------------------------------ two replicas
def test_two_replicas_one_leads_the_standby_never_writes_and_takes_over(
    kube: KubeClient, control_plane: ControlPlane, replicas: Replicas, tmp_path: Path
) -> None:
    for doc in example_documents():
        apply_doc(kube, doc)
    with ExitStack() as stack:
        proxies = [stack.enter_context(FaultProxy.for_control_plane(control_plane)) for _ in "abc"]
        stack.callback(replicas.kill_all)  # before the proxies close
        a, b = (
            replicas.start(f"replica-{name}", kubeconfig_for(proxy, tmp_path), proxy)
            for name, proxy in zip("ab", proxies[:2], strict=True)
        )

        # -------------------------------------------------- exactly one leads
        def both_ready() -> bool:
            bodies = sorted(r.probe("/readyz")[1] for r in (a, b))
            return bodies == ["leading; synced", "standby; watches synced"]

        replicas.wait_for(
            both_ready, 30, "one replica leading and synced, the other a synced standby"
        )
        leader, standby = (a, b) if a.ready_as("leading; synced") else (b, a)
        assert holder(kube) == leader.identity
        assert leader.named("reconciled")
        assert any(writes_in(e) > 0 for e in leader.named("reconciled"))

        # A change while both run: only the leader writes it.
        standby_requests_before = len(standby.requests())
        changed = project("vision-research")
        changed["spec"]["quotas"][0]["nominalGpus"] = 32
        apply_doc(kube, changed)

        def quota_applied() -> bool:
            cq = kube.get(kinds.CLUSTER_QUEUE, "vision-research")
            return (
                cq is not None
                and sum(
                    r["nominalQuota"]
                    for f in cq["spec"]["resourceGroups"][0]["flavors"]
                    for r in f["resources"]
                    if r["name"] == "nvidia.com/gpu"
                )
                == 32
            )

        replicas.wait_for(quota_applied, 15, "the leader applies the quota change")
        time.sleep(1.0)  # the standby's watches saw the change too; give it time to misbehave
        assert len(standby.requests()) > standby_requests_before, "the standby kept watching"
        assert any(e["updated"] > 0 for e in leader.named("reconciled"))
        assert standby.named("reconciled") == []
        # The only write a standby may ever have sent is losing the race to create the Lease.
        lost_race = [
            r for r in standby.writes() if r.method == "POST" and r.path.endswith("/leases")
        ]
        assert [r.status for r in lost_race] in ([], [409])
        assert [r for r in standby.writes() if r not in lost_race] == []
        assert any(r.method == "PATCH" and r.status < 300 for r in leader.writes())
        assert holder(kube) == leader.identity
        print(
            f"\nleader {leader.identity}: {len(leader.writes())} writes; "
            f"standby {standby.identity}: {len(standby.writes())} writes "
            f"({len(standby.requests())} requests)"
        )

        # -------------------------------------------------- kill -9 the leader
        leader.process.kill()
        killed = time.monotonic()
        leader.process.wait()
        newcomer = copy.deepcopy(project("nlp-eval"))
        newcomer["metadata"]["name"] = "failover-team"
        newcomer["spec"]["namespaces"] = ["failover-team"]
        apply_doc(kube, newcomer)
        replicas.wait_for(lambda: holder(kube) == standby.identity, 15, "the standby leads")
        lease_taken = time.monotonic() - killed
        replicas.wait_for(
            lambda: kube.get(kinds.CLUSTER_QUEUE, "failover-team") is not None,
            15,
            "the new leader reconciles the project added after the kill",
        )
        reconciled = time.monotonic() - killed
        record_timing(
            f"failover after kill -9 (lease {LEASE_DURATION:g} s): Lease taken after "
            f"{lease_taken:.2f} s, change made after the kill reconciled after {reconciled:.2f} s"
        )
        # The standby waited for the lease to expire (the last renewal was at most a retry
        # period before the kill), and then took over within a retry period and one pass.
        assert lease_taken >= LEASE_DURATION - RETRY_PERIOD - 0.3
        assert reconciled < LEASE_DURATION + 3.0
        assert lease_spec(kube)["leaseTransitions"] == 1
        # Its first pass as leader may still be writing statuses: ready once it returns.
        replicas.wait_for(
            lambda: standby.ready_as("leading; synced"), 15, "the new leader is ready"
        )

        # -------------------------------------------------- SIGTERM hand-over
        successor = replicas.start("replica-c", kubeconfig_for(proxies[2], tmp_path), proxies[2])
        replicas.wait_for(
            lambda: (
                successor.ready_as("standby; watches synced")
                and bool(successor.named("lease_held"))
            ),
            30,
            "the new replica is a synced standby that has seen the Lease held",
        )
        assert successor.named("lease_held")[-1]["holder"] == standby.identity
        sent = time.monotonic()
        standby.process.send_signal(signal.SIGTERM)
        taken_over = replicas.wait_for(lambda: holder(kube) == successor.identity, 10, "hand-over")
        code = standby.process.wait(timeout=15)
        exited = time.monotonic() - sent
        assert code == 0
        # The Lease can show the new holder a moment before its log line is written.
        replicas.wait_for(lambda: bool(successor.named("leader_acquired")), 5, "logged")
        released = standby.named("leader_released")
        acquired = successor.named("leader_acquired")
        assert len(released) == 1 and len(acquired) == 1
        gap = (at(acquired[0]) - at(released[0])).total_seconds()
        record_timing(
            f"graceful hand-over (retry period {RETRY_PERIOD:g} s): Lease released -> taken "
            f"{gap:.2f} s; SIGTERM -> successor holds the Lease {taken_over:.2f} s; "
            f"old leader exited after {exited:.2f} s"
        )
        assert 0 <= gap <= RETRY_PERIOD + 0.6
        assert taken_over < LEASE_DURATION - 1.0, "taken before the lease could have expired"
        assert lease_spec(kube)["leaseTransitions"] == 2
        replicas.wait_for(lambda: successor.ready_as("leading; synced"), 15, "the successor syncs")
        assert successor.writes(), "the successor writes once it leads"
        assert [r for r in successor.writes() if r.time < sent] == []
