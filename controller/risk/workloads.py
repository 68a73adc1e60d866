"""Kueue Workloads as the risk model sees them: plain values, parsed once.

A Workload (kueue.x-k8s.io/v1beta2) says which queue it waits in, its priority, what each pod
set requests and, through its conditions, when it reserved quota, was admitted, finished or was
evicted. Our annotations add what Kueue does not know: how long the job is expected to run and
how often it checkpoints (the work lost to a spot interruption). Both are read from our
annotations or, failing a valid one, from labels of the same keys: Kueue makes the Workload of a
Job (JobSet, PyTorchJob, RayJob) and copies none of its annotations, only the labels its
`integrations.labelKeysToCopy` lists. Parsing is total: a malformed field gives a default,
never an exception, because one bad Workload must not stop the risk estimate for everyone else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller import names
from controller.timestamps import epoch


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
    pods_ready_at: float | None = None
    """When its pods were last all ready, from Kueue's PodsReady condition; None when they are
    not, or when Kueue does not say (it keeps the condition only with `waitForPodsReady` on)."""
    pods_waiting: bool = False
    """Admitted, and Kueue says its pods are not all ready yet (PodsReady False): they wait,
    most often for a node being launched, and the workload makes no progress meanwhile.
    Without the condition an admitted workload is taken to run from its admission."""
    capacity_type: str | None = None
    """The capacity type its pod sets select (`karpenter.sh/capacity-type` in a node
    selector, or a required node affinity `In` one value), if any."""
    lane: str | None = None
    """The lane this controller put it in (our annotation); None when we did not."""
    running: bool = field(init=False, repr=False, compare=False)
    """Admitted and not finished. Set from those once (a pass over 10,000 Workloads asks
    this and `pending` over 100,000 times)."""
    pending: bool = field(init=False, repr=False, compare=False)
    """Not admitted and not finished."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "running", self.admitted_at is not None and not self.finished)
        object.__setattr__(self, "pending", self.admitted_at is None and not self.finished)

    @property
    def owner_chose_capacity(self) -> bool:
        """Its owner selected a capacity type itself: no lane of ours may change it."""
        return self.capacity_type is not None and self.lane is None

    def elapsed(self, now: float) -> float:
        """Seconds of useful execution so far (this admission plus earlier ones): from its pods'
        readiness when Kueue reports it, none while they wait, else from its admission."""
        if self.admitted_at is None or self.pods_waiting:
            current = 0.0
        elif self.pods_ready_at is not None:
            # A readiness older than this admission is an earlier admission's.
            current = now - max(self.pods_ready_at, self.admitted_at)
        else:
            current = now - self.admitted_at
        return max(current, 0.0) + self.past_execution_seconds


def _map(value: Any) -> Mapping[str, Any]:
    if type(value) is dict:  # what JSON decodes to: skips the slower ABC check
        return value
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _number(value: Any, default: float = 0.0) -> float:
    """A finite number, or `default` for anything else."""
    if isinstance(value, bool):
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def _quantity(value: Any) -> int:
    """A whole-GPU count from a resource quantity ("2", 2, "2000m"); fractions round up."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("m"):
            return max(math.ceil(_number(text[:-1]) / 1000), 0)
        return max(math.ceil(_number(text)), 0)
    return max(math.ceil(_number(value)), 0)


def _seconds(value: Any) -> float | None:
    seconds = _number(value, default=0.0)
    return seconds if seconds > 0 else None


def _declared_seconds(
    annotations: Mapping[str, Any], labels: Mapping[str, str], *, annotation: str, label: str
) -> float | None:
    """The annotation's seconds when valid, else the label's: a malformed one is ignored."""
    from_annotation = _seconds(annotations.get(annotation))
    return from_annotation if from_annotation is not None else _seconds(labels.get(label))


def pod_set_gpus(pod_set: Any, gpu_resources: frozenset[str]) -> int:
    pod_set = _map(pod_set)
    spec = _map(_map(pod_set.get("template")).get("spec"))
    per_pod = 0
    for container in _list(spec.get("containers")):
        resources = _map(_map(container).get("resources"))
        requests, limits = _map(resources.get("requests")), _map(resources.get("limits"))
        for resource in gpu_resources:
            per_pod += _quantity(requests.get(resource, limits.get(resource, 0)))
    count = pod_set.get("count")
    return per_pod * (count if isinstance(count, int) and count >= 0 else 1)


def selected_capacity_type(pod_sets: list[Any]) -> str | None:
    """The capacity type a Workload's pod sets select: a node selector's
    `karpenter.sh/capacity-type`, else a required node affinity whose every term asks for
    one value of it with `In`. Kueue and the kube-scheduler honour either."""
    for pod_set in pod_sets:
        spec = _map(_map(_map(pod_set).get("template")).get("spec"))
        selected = _map(spec.get("nodeSelector")).get(names.CAPACITY_TYPE_LABEL)
        if isinstance(selected, str) and selected:
            return selected
        required = _map(
            _map(_map(spec.get("affinity")).get("nodeAffinity")).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
        )
        values: set[str] = set()
        terms = _list(required.get("nodeSelectorTerms"))
        for term in terms:
            asked = [
                e
                for e in _list(_map(term).get("matchExpressions"))
                if _map(e).get("key") == names.CAPACITY_TYPE_LABEL
                and _map(e).get("operator") == "In"
                and len(_list(_map(e).get("values"))) == 1
            ]
            if not asked:
                values.clear()
                break
            values.add(str(_list(_map(asked[0]).get("values"))[0]))
        if terms and len(values) == 1:
            return values.pop()
    return None


def workload_view(obj: Mapping[str, Any], gpu_resources: frozenset[str]) -> WorkloadView:
    meta = _map(obj.get("metadata"))
    spec = _map(obj.get("spec"))
    status = _map(obj.get("status"))
    conditions = {
        c.get("type"): c for c in _list(status.get("conditions")) if isinstance(c, Mapping)
    }

    def when(type_: str) -> float | None:
        c = conditions.get(type_)
        return epoch(c.get("lastTransitionTime")) if c and c.get("status") == "True" else None

    admission = _map(status.get("admission"))
    flavors = tuple(
        sorted(
            {
                str(flavor)
                for assignment in _list(admission.get("podSetAssignments"))
                for resource, flavor in _map(_map(assignment).get("flavors")).items()
                if resource in gpu_resources
            }
        )
    )
    annotations = _map(meta.get("annotations"))
    labels = {str(k): str(v) for k, v in _map(meta.get("labels")).items()}
    evicted = conditions.get("Evicted")
    pods_ready = conditions.get("PodsReady")
    requeue = _map(status.get("requeueState"))
    priority = spec.get("priority")
    cluster_queue = admission.get("clusterQueue")
    return WorkloadView(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        queue=str(spec.get("queueName") or ""),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        gpus=sum(pod_set_gpus(p, gpu_resources) for p in _list(spec.get("podSets"))),
        created=epoch(meta.get("creationTimestamp")) or 0.0,
        admitted_at=when("Admitted"),
        finished=when("Finished") is not None,
        finished_at=when("Finished"),
        evictions=int(_number(requeue.get("count"), default=1.0 if evicted else 0.0)),
        cluster_queue=str(cluster_queue) if when("Admitted") and cluster_queue else None,
        flavors=flavors,
        expected_duration=_declared_seconds(
            annotations,
            labels,
            annotation=names.ANNOTATION_EXPECTED_DURATION,
            label=names.LABEL_EXPECTED_DURATION,
        ),
        checkpoint_interval=_declared_seconds(
            annotations,
            labels,
            annotation=names.ANNOTATION_CHECKPOINT_INTERVAL,
            label=names.LABEL_CHECKPOINT_INTERVAL,
        ),
        deadline=labels.get(names.LABEL_DEADLINE),
        labels=labels,
        past_execution_seconds=max(_number(status.get("accumulatedPastExecutionTimeSeconds")), 0),
        pods_ready_at=when("PodsReady"),
        pods_waiting=bool(
            pods_ready is not None
            and pods_ready.get("status") == "False"
            and when("Admitted")
            and not when("Finished")
        ),
        capacity_type=selected_capacity_type(_list(spec.get("podSets"))),
        lane=_lane(annotations.get(names.ANNOTATION_LANE)),
    )


def _lane(value: Any) -> str | None:
    return value if value in names.CAPACITY_TYPES else None
