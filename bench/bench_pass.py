"""A whole reconcile pass at 1,000 projects x 10,000 Workloads, as the controller runs it.

`bench_decide.py` times the decision alone; a pass also validates the policy, builds the
observation from the cache's snapshot, compares 3,000 rendered objects with the live ones,
writes statuses and priority boosts. This times `Reconciler.reconcile` on snapshots, CPU only:
- the first pass, which creates every object and writes every status;
- the passes that follow while nothing changes: the first of them sees the objects and statuses
  the last pass wrote (their new resourceVersions), later ones see nothing new; the goal is a
  pass where nothing changed under 50 ms.

The API server is a stand-in here (a mock, said so: `testenv.memoryserver`), because
what is measured is the controller's own CPU per pass, not the server's (bench_scale.py measures the
controller against the real test API server). The policy and Workloads are `bench_decide`'s
(synthetic, 1,000 projects over 4 pools, 10 pending and 2 running Workloads each), made into
Kueue Workload objects; the clock is fixed and moves 5 s a pass.

Run: `.venv/bin/python bench/bench_pass.py` (part of `make bench`).
"""

from __future__ import annotations

import copy
import logging
import statistics
import time
from datetime import UTC, datetime
from typing import Any

import structlog
from bench_decide import FIXED_NOW, POOLS, PROJECTS, workloads

from controller import names
from controller.api.loader import load_policy_set
from controller.examples.synthetic import synthetic_documents
from controller.reconcile.reconciler import Reconciler, ReconcileResult
from controller.risk.workloads import WorkloadView
from testenv.kueue_standin import admission, admitted_status, workload_body
from testenv.memoryserver import MemoryServer

GOAL_UNCHANGED_SECONDS = 0.05
QUIET_PASSES = 6
Object = dict[str, Any]


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def workload_object(view: WorkloadView) -> Object:
    """The Kueue Workload a view was read from (pending, or admitted to a flavor)."""
    annotations = {}
    if view.expected_duration is not None:
        annotations[names.ANNOTATION_EXPECTED_DURATION] = str(int(view.expected_duration))
    body = workload_body(
        name=view.name,
        namespace=view.namespace,
        queue=view.queue,
        priority=view.priority,
        pods=1,
        gpus_per_pod=view.gpus,
        labels=view.labels,
        annotations=annotations,
    )
    body["metadata"]["creationTimestamp"] = stamp(view.created)
    if view.admitted_at is not None and view.flavors and view.cluster_queue:
        assigned = admission(
            cluster_queue=view.cluster_queue, pods=1, gpus_per_pod=view.gpus, flavor=view.flavors[0]
        )
        body["status"] = admitted_status(assigned, stamp(view.admitted_at))
    return body


def timed(reconciler: Reconciler, server: MemoryServer) -> tuple[float, ReconcileResult]:
    snapshot = server.snapshot()
    start = time.process_time()
    result = reconciler.reconcile(snapshot)
    return time.process_time() - start, result


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    documents = synthetic_documents(projects=PROJECTS, pools=POOLS)
    policy_set = load_policy_set([(f"doc#{i}", d) for i, d in enumerate(documents)])
    server = MemoryServer()
    for document in documents:
        server.put(copy.deepcopy(document))
    views = workloads(policy_set)
    for view in views:
        server.put(workload_object(view))
    clock = [FIXED_NOW]
    reconciler = Reconciler(
        # The stand-in answers the calls a pass makes (apply, create, delete).
        server,  # type: ignore[arg-type]
        wall_clock=lambda: datetime.fromtimestamp(clock[0], UTC),
    )
    print(
        f"pass: {PROJECTS} projects x {POOLS} pools, {len(views)} Workloads, "
        f"on an in-memory stand-in for the API server (CPU of Reconciler.reconcile)"
    )
    quiet: list[float] = []
    for i in range(QUIET_PASSES + 2):
        seconds, result = timed(reconciler, server)
        writes = result.writes
        label = (
            "first pass"
            if i == 0
            else "after the first pass's writes"
            if i == 1
            else f"nothing changed #{i - 1}"
        )
        print(
            f"  {label:<32} {seconds * 1000:8.1f} ms CPU  writes {writes:5d} "
            f"(created {result.created}, status {result.status_writes}, "
            f"boosts {result.boosts_written})"
        )
        if i >= 2:
            quiet.append(seconds)
            if writes:
                raise SystemExit("a pass where nothing changed wrote to the server")
        clock[0] += 5
    median = statistics.median(quiet)
    met = median < GOAL_UNCHANGED_SECONDS
    print(
        f"goal a pass where nothing changed < {GOAL_UNCHANGED_SECONDS * 1000:g} ms CPU: "
        f"{'met' if met else 'NOT met'} (median {median * 1000:.1f} ms)"
    )


if __name__ == "__main__":
    main()
