"""Reconciling at scale against a real API server: 500 projects x 4 pools.

On a fresh control plane (etcd and the CRD API server on loopback; see testenv),
with every CRD loaded and each kind listed once (the server answers 429 for a moment after a CRD
is established; that is not the controller's cost), the synthetic 500-project policy is applied
and then measured:
- the initial sync: one Reconciler pass creating every object (objects, writes, seconds);
- the steady state: the Controller loop (watches, leader election, resync every 10 s) running
  for 60 s with nothing changing: API writes per minute (goal 0 apart from the Lease renewals
  leader election needs), reads per minute, and pass durations;
- memory: this process's peak RSS (rendering, the reconciler and the controller), and the API
  server's and etcd's.

Prints figures only: timings depend on the machine and are not asserted.
"""

from __future__ import annotations

import resource
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from controller import names
from controller.examples.synthetic import synthetic_documents
from controller.kube import kinds
from controller.kube.client import WRITE_VERBS, KubeClient
from controller.reconcile.diff import ref
from controller.reconcile.loop import Controller, LoopOptions
from controller.reconcile.reconciler import Reconciler, ReconcileResult
from testenv.controlplane import ControlPlane, find_binaries
from testenv.counting import resource_of
from testenv.crds import crd_sources, load_crds, read_crd_set
from testenv.logconfig import QUIET, configure_logging
from testenv.namespaces import ensure_namespaces, policy_namespaces
from testenv.procstat import child_peak_rss_mib

PROJECTS = 500
POOLS = 4
RESYNC_SECONDS = 10.0
STEADY_SECONDS = 60.0
GITOPS = "bench-gitops"


class CountingClient(KubeClient):
    """Counts every request it sends (retries included) by verb and resource."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests: Counter[tuple[str, str]] = Counter()
        self._count_lock = threading.Lock()

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        key = (("WATCH" if kwargs.get("stream") else method), resource_of(path))
        with self._count_lock:
            self.requests[key] += 1
        return super()._send(method, path, **kwargs)

    def snapshot(self) -> Counter[tuple[str, str]]:
        with self._count_lock:
            return Counter(self.requests)


def new_client(plane: ControlPlane) -> CountingClient:
    client = CountingClient.from_kubeconfig(str(plane.kubeconfig))
    assert isinstance(client, CountingClient)
    return client


def line(label: str, value: str) -> None:
    print(f"  {label:<44} {value}", flush=True)


@contextmanager
def timed() -> Iterator[list[float]]:
    """`with timed() as took:` then `took[0]` is the block's seconds."""
    took: list[float] = []
    started = time.perf_counter()
    try:
        yield took
    finally:
        took.append(time.perf_counter() - started)


def by_kind(objects: tuple[dict[str, Any], ...]) -> str:
    counts = Counter(ref(o)[0] for o in objects)
    return ", ".join(f"{kind} {n}" for kind, n in counts.most_common())


def initial_sync(plane: ControlPlane) -> None:
    client = new_client(plane)
    try:
        reconciler = Reconciler(client, namespace=names.DEFAULT_NAMESPACE)
        result = reconciler.reconcile()
        requests = client.snapshot()
    finally:
        client.close()
    writes = sum(n for (verb, _), n in requests.items() if verb in WRITE_VERBS)
    reads = sum(n for (verb, _), n in requests.items() if verb not in WRITE_VERBS)
    print("initial sync (one Reconciler pass, nothing there yet)")
    line("objects created", f"{result.created}")
    if result.plan is not None:
        line("  by kind", by_kind(result.plan.creates))
    line("skipped: kinds the server does not serve", ", ".join(result.unserved) or "none")
    line(
        "API writes",
        f"{writes} ({result.created} applies, {result.status_writes} status writes, "
        f"{result.updated} updates, {result.pruned} deletions)",
    )
    line("API reads", f"{reads}")
    line("time", f"{result.seconds:.1f} s ({writes / result.seconds:.0f} writes/s)")


@dataclass(frozen=True)
class Window:
    """What the controller did while nothing changed."""

    ready_seconds: float
    first: ReconcileResult
    passes: list[ReconcileResult]
    requests: Counter[tuple[str, str]]
    seconds: float

    def per_minute(self, verbs: set[str], resources: set[str], *, exclude: bool = False) -> str:
        """Requests a minute with a verb in `verbs` to (`exclude`: not to) `resources`."""
        count = sum(
            n
            for (verb, res), n in self.requests.items()
            if verb in verbs and (res in resources) != exclude
        )
        return f"{count * 60 / self.seconds:.1f}"


def run_controller(plane: ControlPlane) -> Window:
    client = new_client(plane)
    results: list[ReconcileResult] = []
    lock = threading.Lock()

    def on_result(result: ReconcileResult) -> None:
        with lock:
            results.append(result)

    controller = Controller(
        client,
        LoopOptions(identity="bench", leader_election=True, resync_seconds=RESYNC_SECONDS),
        on_result=on_result,
    )
    thread = threading.Thread(target=controller.run, name="controller", daemon=True)
    try:
        with timed() as took_ready:
            thread.start()
            while not (controller.ready()[0] and results):
                if not thread.is_alive():
                    raise RuntimeError("the controller stopped before its first sync")
                time.sleep(0.05)
        with lock:
            first, start_index = results[0], len(results)
        start_requests = client.snapshot()
        started = time.monotonic()
        time.sleep(STEADY_SECONDS)
        seconds = time.monotonic() - started
        requests = client.snapshot() - start_requests
        with lock:
            passes = results[start_index:]
    finally:
        controller.stop()
        if thread.ident is not None:
            thread.join(timeout=120)
        QUIET.set()  # the watches are cut next: their failures are expected
        controller.cache.stop()
        controller.cache.join(timeout=5)
        client.close()
    return Window(took_ready[0], first, passes, requests, seconds)


def steady_state(plane: ControlPlane) -> None:
    window = run_controller(plane)
    writes = set(WRITE_VERBS)
    bookkeeping = {kinds.LEASE.plural, kinds.EVENT.plural}
    reconcile_writes = window.per_minute(writes, bookkeeping, exclude=True)
    print(
        f"steady state (Controller loop: resync {RESYNC_SECONDS:.0f} s, leader election on, "
        f"{STEADY_SECONDS:.0f} s with no changes)"
    )
    first = window.first
    line(
        "start to leading and synced",
        f"{window.ready_seconds:.1f} s (first pass {first.seconds:.1f} s, {first.writes} writes)",
    )
    durations = [r.seconds for r in window.passes]
    median = f", median {statistics.median(durations):.2f} s" if durations else ""
    line("passes in the window", f"{len(window.passes)}{median}")
    line("writes/min: objects and status (goal 0)", reconcile_writes)
    line("writes/min: Lease renewals", window.per_minute(writes, {kinds.LEASE.plural}))
    line("writes/min: Events", window.per_minute(writes, {kinds.EVENT.plural}))
    line("reads/min: LIST and GET", window.per_minute({"GET"}, {"discovery"}, exclude=True))
    line("reads/min: discovery (/api, /apis)", window.per_minute({"GET"}, {"discovery"}))
    watches = window.per_minute({"WATCH"}, set(), exclude=True)
    line("watch requests/min (opened or reopened)", watches)
    goal = "met" if float(reconcile_writes) == 0 else "NOT met"
    print(f"goal no writes to objects or status in steady state: {goal}")


def main() -> None:
    configure_logging(verbose=False)
    print(
        f"reconcile at scale: {PROJECTS} projects x {POOLS} pools on a real API server "
        "(etcd + the CRD API server, loopback)"
    )
    sources = crd_sources()
    binaries = find_binaries()  # builds on the first run: about 4 minutes
    plane = ControlPlane(binaries)
    try:
        with timed() as took:
            plane.start()
        line("control plane start", f"{took[0]:.1f} s")
        admin = KubeClient.from_kubeconfig(str(plane.kubeconfig))
        try:
            with timed() as took:
                crds = read_crd_set(sources)
            line("CRDs read (YAML parsing)", f"{took[0]:.1f} s ({len(crds.documents)} CRDs)")
            with timed() as took:
                load_crds(admin, crds.documents)
            line("CRDs established and warmed", f"{took[0]:.1f} s")
            documents = synthetic_documents(projects=PROJECTS, pools=POOLS)
            ensure_namespaces(admin, [*policy_namespaces(documents), names.DEFAULT_NAMESPACE])
            with timed() as took:
                for doc in documents:
                    admin.apply(kinds.kind_of(doc), doc, field_manager=GITOPS)
            line("policy applied", f"{took[0]:.1f} s ({len(documents)} objects)")
        finally:
            admin.close()
        initial_sync(plane)
        steady_state(plane)
        print("memory")
        line(
            "bench process max RSS",
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB "
            "(rendering, reconciler and controller)",
        )
        for command, mib in sorted(child_peak_rss_mib().items()):
            line(f"{command} peak RSS", f"{mib:.0f} MiB")
    finally:
        QUIET.set()
        plane.stop()


if __name__ == "__main__":
    main()
