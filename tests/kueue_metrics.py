"""The metrics Kueue exports, so dashboard queries on them can be checked like our own.

Quartermaster's dashboards put Kueue's view of the queues beside ours. Kueue is not in this
repository, so the names cannot be read from a registry as ours are; they are copied here from
Kueue's single metrics file, kubernetes-sigs/kueue `pkg/metrics/metrics.go`, as of the
v1beta2-era release line the controller targets (Kueue v0.19: the file imports
`sigs.k8s.io/kueue/apis/kueue/v1beta2`, builds its vectors in `InitMetricVectors`, and gives
every queue metric a `replica_role` label of `leader`, `follower` or `standalone`). Each
variable there sets `Subsystem: constants.KueueName` ("kueue") and a `Name`, so the exposed
name is `kueue_<Name>`; histograms are exposed as `_bucket`, `_sum` and `_count` series.

Kueue's TAS metrics (`pkg/metrics/tas_metrics.go`) are left out: the dashboards do not use them.
When Kueue is upgraded, compare this list with that file again.
"""

from __future__ import annotations

SUBSYSTEM = "kueue"

COUNTERS = (
    "admission_attempts_total",
    "quota_reserved_workloads_total",
    "local_queue_quota_reserved_workloads_total",
    "finished_workloads_total",
    "local_queue_finished_workloads_total",
    "admitted_workloads_total",
    "local_queue_admitted_workloads_total",
    "evicted_workloads_total",
    "replaced_workload_slices_total",
    "local_queue_evicted_workloads_total",
    "evicted_workloads_once_total",
    "preempted_workloads_total",
    "cohort_subtree_admitted_workloads_total",
)
"""Kueue names its counters with the `_total` suffix already; they are exposed as written."""

GAUGES = (
    "admission_cycle_preemption_skips",
    "build_info",
    "pending_workloads",
    "local_queue_pending_workloads",
    "finished_workloads",
    "local_queue_finished_workloads",
    "reserving_active_workloads",
    "local_queue_reserving_active_workloads",
    "admitted_active_workloads",
    "local_queue_admitted_active_workloads",
    "cluster_queue_status",
    "local_queue_status",
    # Exported only with `metrics.enableClusterQueueResources` in Kueue's configuration.
    "cluster_queue_resource_reservation",
    "cluster_queue_resource_usage",
    "local_queue_resource_reservation",
    "local_queue_resource_usage",
    "cluster_queue_nominal_quota",
    "cluster_queue_borrowing_limit",
    "cluster_queue_lending_limit",
    "cluster_queue_weighted_share",
    "cohort_weighted_share",
    "cohort_subtree_quota",
    "cohort_subtree_resource_reservations",
    "cohort_subtree_admitted_active_workloads",
)

HISTOGRAMS = (
    "admission_attempt_duration_seconds",
    "quota_reserved_wait_time_seconds",
    "pods_ready_to_evicted_time_seconds",
    "local_queue_quota_reserved_wait_time_seconds",
    "admission_wait_time_seconds",
    "ready_wait_time_seconds",
    "admitted_until_ready_wait_time_seconds",
    "local_queue_admission_wait_time_seconds",
    "admission_checks_wait_time_seconds",
    "local_queue_admission_checks_wait_time_seconds",
    "local_queue_ready_wait_time_seconds",
    "local_queue_admitted_until_ready_wait_time_seconds",
)

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def _exposed() -> frozenset[str]:
    names = {f"{SUBSYSTEM}_{name}" for name in (*COUNTERS, *GAUGES)}
    names.update(
        f"{SUBSYSTEM}_{name}{suffix}" for name in HISTOGRAMS for suffix in HISTOGRAM_SUFFIXES
    )
    return frozenset(names)


KUEUE_METRICS: frozenset[str] = _exposed()
"""Every series name a Kueue controller exposes, as a PromQL query would name it."""
