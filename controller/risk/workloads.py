"""Kueue Workloads as the risk model sees them: plain values, parsed once.

A Workload (kueue.x-k8s.io/v1beta2) says which queue it waits in, its priority, what each pod
set requests and, through its conditions, when it reserved quota, was admitted, finished or was
evicted. Our annotations add what Kueue does not know: how long the job is expected to run and
how often it checkpoints (the work lost to a spot interruption). Parsing is total: a malformed
field gives a default, never an exception, because one bad Workload must not stop the risk
estimate for everyone else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from controller import names


@dataclass(frozen=True)
class WorkloadView:
    namespace: str
    name: str
    queue: str
    """The LocalQueue it was submitted to."""
    priority: int
    gpus: int
    """GPUs over all pods of all pod sets."""
    created: float
    """Epoch seconds."""
    admitted_at: float | None = None
    finished: bool = False
    finished_at: float | None = None
    evictions: int = 0
    cluster_queue: str | None = None
    """The ClusterQueue it was admitted to, once admitted."""
    flavors: tuple[str, ...] = ()
    """Flavors assigned to its GPUs on admission."""
    expected_duration: float | None = None
    checkpoint_interval: float | None = None
    deadline: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    past_execution_seconds: float = 0.0

    @property
    def running(self) -> bool:
        return self.admitted_at is not None and not self.finished

    @property
    def pending(self) -> bool:
        return self.admitted_at is None and not self.finished

    def elapsed(self, now: float) -> float:
        """Seconds of useful execution so far (this admission plus earlier ones)."""
        current = now - self.admitted_at if self.admitted_at is not None else 0.0
        return max(current, 0.0) + self.past_execution_seconds


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _quantity(value: Any) -> int:
    """A whole-GPU count from a resource quantity ("2", 2, "2000m"); fractions round up."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int | float):
        return max(int(-(-value // 1)), 0)
    if isinstance(value, str):
        text = value.strip()
        try:
            if text.endswith("m"):
                return max(-(-int(text[:-1]) // 1000), 0)
            return max(int(-(-float(text) // 1)), 0)
        except ValueError:
            return 0
    return 0


def _seconds(value: Any) -> float | None:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if seconds > 0 else None


def pod_set_gpus(pod_set: Mapping[str, Any], gpu_resources: frozenset[str]) -> int:
    spec = ((pod_set.get("template") or {}).get("spec")) or {}
    per_pod = 0
    for container in spec.get("containers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
        limits = (container.get("resources") or {}).get("limits") or {}
        for resource in gpu_resources:
            per_pod += _quantity(requests.get(resource, limits.get(resource, 0)))
    count = pod_set.get("count")
    return per_pod * (count if isinstance(count, int) and count > 0 else 1)


def workload_view(obj: Mapping[str, Any], gpu_resources: frozenset[str]) -> WorkloadView:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}

    def when(type_: str) -> float | None:
        c = conditions.get(type_)
        return _epoch(c.get("lastTransitionTime")) if c and c.get("status") == "True" else None

    admission = status.get("admission") or {}
    flavors = tuple(
        sorted(
            {
                flavor
                for assignment in admission.get("podSetAssignments") or []
                for resource, flavor in (assignment.get("flavors") or {}).items()
                if resource in gpu_resources
            }
        )
    )
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    evicted = conditions.get("Evicted")
    requeue = status.get("requeueState") or {}
    priority = spec.get("priority")
    return WorkloadView(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        queue=str(spec.get("queueName") or ""),
        priority=priority if isinstance(priority, int) else 0,
        gpus=sum(pod_set_gpus(p, gpu_resources) for p in spec.get("podSets") or []),
        created=_epoch(meta.get("creationTimestamp")) or 0.0,
        admitted_at=when("Admitted"),
        finished=when("Finished") is not None,
        finished_at=when("Finished"),
        evictions=int(requeue.get("count") or (1 if evicted else 0)),
        cluster_queue=admission.get("clusterQueue") if when("Admitted") else None,
        flavors=flavors,
        expected_duration=_seconds(annotations.get(names.ANNOTATION_EXPECTED_DURATION)),
        checkpoint_interval=_seconds(annotations.get(names.ANNOTATION_CHECKPOINT_INTERVAL)),
        deadline=labels.get(names.LABEL_DEADLINE),
        labels=dict(labels),
        past_execution_seconds=float(status.get("accumulatedPastExecutionTimeSeconds") or 0),
    )
