"""Kueue v1beta2 Workloads as the risk model sees them.

The Workloads are written out as the API server returns them (checked against the pinned
upstream CRD below), then changed one field at a time.

Cases marked `KNOWN_BUG` assert the behaviour we want but do not have yet; they are strict
xfails, so fixing the bug makes them fail until the mark is removed.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from controller import names
from controller.risk.workloads import WorkloadView, workload_view
from tests import upstream
from tests.builders import set_path

Doc = dict[str, Any]

GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
GPUS = frozenset({GPU})


def KNOWN_BUG(  # noqa: N802 - reads as a marker
    reason: str, raises: type[BaseException] = AssertionError
) -> pytest.MarkDecorator:
    """A case asserting the right behaviour that the code does not have yet (see reason)."""
    return pytest.mark.xfail(reason=reason, strict=True, raises=raises)


LABEL_VALUE = re.compile(r"[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?")
"""The API server's rule for a label value (at most 63 characters, checked apart)."""

FIXED_DAY = datetime(2026, 11, 21, tzinfo=UTC)
"""The day every time below falls on: parsing is the subject, the clock is never read."""


def at(hour: int, minute: int = 0) -> str:
    """An RFC 3339 time on FIXED_DAY, as the API server writes it."""
    return (FIXED_DAY + timedelta(hours=hour, minutes=minute)).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(hour: int, minute: int = 0) -> float:
    return (FIXED_DAY + timedelta(hours=hour, minutes=minute)).timestamp()


def container(
    name: str = "trainer", *, requests: Doc | None = None, limits: Doc | None = None
) -> Doc:
    resources: Doc = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "registry.example.com/train:1.4", "resources": resources}


def pod_set(*containers: Doc, name: str = "main", count: int | None = 1) -> Doc:
    out: Doc = {
        "name": name,
        "template": {"spec": {"restartPolicy": "Never", "containers": list(containers)}},
    }
    if count is not None:
        out["count"] = count
    return out


def condition(type_: str, when: str, status: str = "True", reason: str | None = None) -> Doc:
    return {
        "type": type_,
        "status": status,
        "reason": reason or type_,
        "message": f"{type_} is {status}",
        "lastTransitionTime": when,
        "observedGeneration": 1,
    }


def assignment(name: str, flavors: dict[str, str], count: int = 1) -> Doc:
    return {"name": name, "count": count, "flavors": flavors, "resourceUsage": {}}


def admission(*assignments: Doc) -> Doc:
    return {"clusterQueue": "vision-a100", "podSetAssignments": list(assignments)}


LAUNCHER = pod_set(container("launcher", requests={"cpu": "1", "memory": "2Gi"}), name="launcher")
WORKERS = pod_set(
    container("trainer", requests={"cpu": "32", "memory": "256Gi", GPU: "8"}, limits={GPU: "8"}),
    name="workers",
    count=2,
)
"""An MPI-style job: a CPU launcher and 2 workers of 8 GPUs each, 16 GPUs in all."""


def workload(
    *,
    pod_sets: list[Doc] | None = None,
    status: Doc | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> Doc:
    """A Workload as Kueue creates it for a Job, with the given parts."""
    doc: Doc = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "job-train-llm-3f2a1",
            "namespace": "vision",
            "uid": "7c1d0e8e-1b7a-4f7e-9d7e-2f3c1b6a9e01",
            "resourceVersion": "48213",
            "generation": 1,
            "creationTimestamp": at(10),
            "labels": {"kueue.x-k8s.io/job-uid": "9a1b", **(labels or {})},
            "annotations": annotations or {},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "train-llm",
                    "uid": "9a1b2c3d-0000-4000-8000-000000000001",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "active": True,
            "queueName": "vision",
            "priority": 1000,
            "priorityClassRef": {
                "group": "kueue.x-k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": "production",
            },
            "podSets": pod_sets if pod_sets is not None else [LAUNCHER, WORKERS],
        },
    }
    if status is not None:
        doc["status"] = status
    return doc


A100_ADMISSION: Doc = admission(
    assignment("launcher", {"cpu": "default", "memory": "default"}),
    assignment("workers", {"cpu": "default", "memory": "default", GPU: "a100-spot"}, count=2),
)
ADMITTED: Doc = {
    "conditions": [
        condition("QuotaReserved", at(10, 5)),
        condition("Admitted", at(10, 5)),
        condition("PodsReady", at(10, 7)),
    ],
    "admission": A100_ADMISSION,
}
EVICTED: Doc = {
    "conditions": [
        condition("QuotaReserved", at(10, 30), "False", "Pending"),
        condition("Admitted", at(10, 30), "False", "NoReservation"),
        condition("Evicted", at(10, 30), "True", "Preempted"),
    ],
    "accumulatedPastExecutionTimeSeconds": 1500,
}
READMITTED: Doc = {
    "conditions": [
        condition("QuotaReserved", at(11)),
        condition("Admitted", at(11)),
        condition("Evicted", at(11), "False", "QuotaReserved"),
    ],
    "admission": A100_ADMISSION,
    "requeueState": {"count": 1},
    "accumulatedPastExecutionTimeSeconds": 1500,
}
ADMITTED_UNREPORTED: Doc = {**ADMITTED, "conditions": ADMITTED["conditions"][:2]}
"""Admitted, without the PodsReady condition Kueue keeps only with waitForPodsReady on."""
ADMITTED_WAITING: Doc = {
    **ADMITTED,
    "conditions": [
        *ADMITTED["conditions"][:2],
        condition("PodsReady", at(10, 5), "False", "WaitForStart"),
    ],
}
"""Admitted at 10:05, its pods not ready (waiting for a node)."""
EVICTED_WAITING: Doc = {
    **EVICTED,
    "conditions": [*EVICTED["conditions"], condition("PodsReady", at(10, 31), "False")],
}
"""Evicted, with Kueue's PodsReady still False from the admission it lost."""
FINISHED: Doc = {
    "conditions": [
        condition("QuotaReserved", at(10, 5)),
        condition("Admitted", at(10, 5)),
        condition("Finished", at(12), reason="Succeeded"),
    ],
    "admission": A100_ADMISSION,
}


# ----------------------------------------------------------------- the documents are real


def examples() -> list[Any]:
    """Every well-formed Workload the tests below parse, by name."""
    return [
        pytest.param(workload(), id="pending"),
        pytest.param(workload(status=ADMITTED), id="admitted"),
        pytest.param(workload(status=EVICTED), id="evicted"),
        pytest.param(workload(status=READMITTED), id="readmitted"),
        pytest.param(workload(status=FINISHED), id="finished"),
        *(pytest.param(workload(pod_sets=cast(list[Doc], p.values[0])), id=p.id) for p in POD_SETS),
    ]


# ----------------------------------------------------------------- what it is and where it waits


def test_identity_queue_priority_creation_and_labels() -> None:
    labels = {names.LABEL_DEADLINE: "neurips-2027", "team": "vision"}
    got = workload_view(workload(labels=labels), GPUS)
    assert (got.namespace, got.name, got.queue, got.priority) == (
        "vision",
        "job-train-llm-3f2a1",
        "vision",
        1000,
    )
    assert got.created == epoch(10)
    assert got.deadline == "neurips-2027"
    assert got.labels == {"kueue.x-k8s.io/job-uid": "9a1b", **labels}


def test_no_deadline_label_means_no_deadline() -> None:
    assert workload_view(workload(labels={"team": "vision"}), GPUS).deadline is None


# ----------------------------------------------------------------- GPUs

POD_SETS = [
    pytest.param([LAUNCHER, WORKERS], GPUS, 16, id="a CPU launcher and 2 workers of 8 GPUs: 16"),
    pytest.param(
        [pod_set(container(requests={GPU: 2}), count=4)], GPUS, 8, id="4 pods x 2 GPUs: 8"
    ),
    pytest.param(
        [pod_set(container(requests={GPU: "2000m"}), count=2)],
        GPUS,
        4,
        id="2000m is 2 GPUs, x 2 pods: 4",
    ),
    pytest.param(
        [pod_set(container(requests={GPU: "500m"}))], GPUS, 1, id="500m rounds up to 1 GPU"
    ),
    pytest.param(
        [pod_set(container(requests={GPU: "1500m"}), count=3)],
        GPUS,
        6,
        id="1500m rounds up to 2 GPUs a pod, x 3 pods: 6",
    ),
    pytest.param(
        [pod_set(container(limits={GPU: "4"}), count=2)],
        GPUS,
        8,
        id="limits alone count (requests default to limits): 4 x 2 pods",
    ),
    pytest.param(
        [pod_set(container(requests={GPU: "2"}, limits={GPU: "2"}))],
        GPUS,
        2,
        id="requests and limits together count once",
    ),
    pytest.param(
        [
            pod_set(
                container("trainer", requests={GPU: "2"}),
                container("evaluator", limits={GPU: "1"}),
                count=3,
            )
        ],
        GPUS,
        9,
        id="two GPU containers a pod, 2 + 1, x 3 pods: 9",
    ),
    pytest.param(
        [pod_set(container(requests={GPU: "8"}), count=None)],
        GPUS,
        8,
        id="count left out is Kueue's default of 1 pod",
    ),
    pytest.param(
        [pod_set(container(requests={"cpu": "64", "memory": "512Gi"}), count=8)],
        GPUS,
        0,
        id="CPU and memory only: no GPUs",
    ),
    pytest.param(
        [pod_set(container(requests={AMD_GPU: "4"}), count=2)],
        GPUS,
        0,
        id="a GPU resource not configured as one does not count",
    ),
    pytest.param(
        [
            pod_set(container(requests={GPU: "8"}), name="nvidia", count=2),
            pod_set(container(requests={AMD_GPU: "4"}), name="amd", count=2),
        ],
        frozenset({GPU, AMD_GPU}),
        24,
        id="two configured GPU resources add up: 16 + 8",
    ),
    pytest.param(
        [LAUNCHER, pod_set(container(requests={GPU: "8"}), name="workers", count=0)],
        GPUS,
        0,
        id="a pod set scaled to 0 pods holds no GPUs",
    ),
]


@pytest.mark.parametrize(("pod_sets", "gpu_resources", "want_gpus"), POD_SETS)
def test_gpus_over_pod_sets_and_pods(
    pod_sets: list[Doc], gpu_resources: frozenset[str], want_gpus: int
) -> None:
    assert workload_view(workload(pod_sets=pod_sets), gpu_resources).gpus == want_gpus


# ----------------------------------------------------------------- conditions and their times


@pytest.mark.parametrize(
    ("status", "want"),
    [
        pytest.param(
            None,
            {"admitted_at": None, "finished": False, "evictions": 0, "cluster_queue": None},
            id="no status yet: pending",
        ),
        pytest.param(
            {
                "conditions": [condition("QuotaReserved", at(10, 5))],
                "admission": A100_ADMISSION,
            },
            {"admitted_at": None, "finished": False, "evictions": 0, "cluster_queue": None},
            id="quota reserved but admission checks not passed: still pending",
        ),
        pytest.param(
            ADMITTED,
            {
                "admitted_at": epoch(10, 5),
                "finished": False,
                "evictions": 0,
                "cluster_queue": "vision-a100",
            },
            id="admitted at 10:05 in its ClusterQueue: running",
        ),
        pytest.param(
            EVICTED,
            {"admitted_at": None, "finished": False, "evictions": 1, "cluster_queue": None},
            id="evicted and not readmitted: pending again, evicted once",
        ),
        pytest.param(
            {**EVICTED, "requeueState": {"count": 3, "requeueAt": at(11)}},
            {"admitted_at": None, "finished": False, "evictions": 3, "cluster_queue": None},
            id="requeueState counts 3 evictions",
        ),
        pytest.param(
            READMITTED,
            {
                "admitted_at": epoch(11),
                "finished": False,
                "evictions": 1,
                "cluster_queue": "vision-a100",
            },
            id="readmitted at 11:00 (Evicted now False): running, the eviction still counted",
        ),
        pytest.param(
            FINISHED,
            {
                "admitted_at": epoch(10, 5),
                "finished": True,
                "evictions": 0,
                "cluster_queue": "vision-a100",
            },
            id="finished at 12:00: neither running nor pending",
        ),
        pytest.param(
            {
                **ADMITTED,
                "conditions": [
                    *ADMITTED["conditions"],
                    condition("Finished", at(12), "False", "Pending"),
                ],
            },
            {
                "admitted_at": epoch(10, 5),
                "finished": False,
                "evictions": 0,
                "cluster_queue": "vision-a100",
            },
            id="a Finished condition that is False: still running",
        ),
    ],
)
def test_conditions(status: Doc | None, want: dict[str, Any]) -> None:
    got = workload_view(workload(status=status), GPUS)
    assert {k: getattr(got, k) for k in want} == want
    assert got.running == (want["admitted_at"] is not None and not want["finished"])
    assert got.pending == (want["admitted_at"] is None and not want["finished"])


@pytest.mark.parametrize(
    ("status", "now", "want_elapsed"),
    [
        pytest.param(None, epoch(11), 0.0, id="never admitted: nothing done"),
        pytest.param(EVICTED, epoch(11), 1500.0, id="evicted: only the 1500 s done before"),
        pytest.param(
            ADMITTED, epoch(10, 15), 480.0, id="admitted at 10:05, pods ready at 10:07, now 10:15"
        ),
        pytest.param(
            ADMITTED_UNREPORTED,
            epoch(10, 15),
            600.0,
            id="no PodsReady condition (waitForPodsReady off): from the admission at 10:05",
        ),
        pytest.param(
            ADMITTED_WAITING, epoch(10, 15), 0.0, id="pods not ready yet: nothing done so far"
        ),
        pytest.param(
            EVICTED_WAITING,
            epoch(10, 40),
            1500.0,
            id="evicted, pods not ready: only the 1500 s done before",
        ),
        pytest.param(
            {
                **READMITTED,
                "conditions": [*READMITTED["conditions"], condition("PodsReady", at(10, 7))],
            },
            epoch(11, 10),
            2100.0,
            id="a readiness older than the readmission is the earlier admission's",
        ),
        pytest.param(
            READMITTED, epoch(11, 10), 2100.0, id="readmitted at 11:00 after 1500 s, now 11:10"
        ),
        pytest.param(
            READMITTED, epoch(10, 59), 1500.0, id="a clock behind the admission adds nothing"
        ),
    ],
)
def test_elapsed_counts_this_admission_and_earlier_ones(
    status: Doc | None, now: float, want_elapsed: float
) -> None:
    assert workload_view(workload(status=status), GPUS).elapsed(now) == want_elapsed


@pytest.mark.parametrize(
    ("assignments", "gpu_resources", "want_flavors"),
    [
        pytest.param(
            A100_ADMISSION["podSetAssignments"],
            GPUS,
            ("a100-spot",),
            id="the workers' GPU flavor, not the launcher's CPU flavor",
        ),
        pytest.param(
            [
                assignment("launcher", {"cpu": "default"}),
                assignment("workers-a", {"cpu": "default", GPU: "a100-spot"}),
                assignment("workers-b", {GPU: "a100-on-demand"}),
                assignment("workers-c", {GPU: "a100-spot"}),
            ],
            GPUS,
            ("a100-on-demand", "a100-spot"),
            id="flavors over pod sets, once each, sorted",
        ),
        pytest.param(
            [assignment("main", {"cpu": "default", "memory": "default"})],
            GPUS,
            (),
            id="CPU and memory flavors only: none",
        ),
        pytest.param(
            [assignment("main", {AMD_GPU: "mi300-spot"})],
            GPUS,
            (),
            id="a flavor for a GPU resource not configured as one: none",
        ),
        pytest.param(
            [assignment("main", {AMD_GPU: "mi300-spot", GPU: "h100-on-demand"})],
            frozenset({GPU, AMD_GPU}),
            ("h100-on-demand", "mi300-spot"),
            id="flavors of both configured GPU resources",
        ),
    ],
)
def test_flavors_assigned_to_gpus(
    assignments: list[Doc], gpu_resources: frozenset[str], want_flavors: tuple[str, ...]
) -> None:
    status = {**ADMITTED, "admission": {**A100_ADMISSION, "podSetAssignments": assignments}}
    assert workload_view(workload(status=status), gpu_resources).flavors == want_flavors


def test_a_pending_workload_has_no_flavors() -> None:
    assert workload_view(workload(), GPUS).flavors == ()


# ----------------------------------------------------------------- our annotations


@pytest.mark.parametrize(
    ("value", "want_seconds"),
    [
        pytest.param("7200", 7200.0, id="whole seconds"),
        pytest.param("5400.5", 5400.5, id="fractional seconds"),
        pytest.param(None, None, id="absent"),
        pytest.param("", None, id="empty"),
        pytest.param("2h", None, id="a duration with a unit is not seconds"),
        pytest.param("0", None, id="zero"),
        pytest.param("-60", None, id="negative"),
        pytest.param("nan", None, id="not a number"),
        pytest.param(
            "inf",
            None,
            id="infinite",
        ),
    ],
)
@pytest.mark.parametrize(
    "annotation",
    [
        pytest.param(names.ANNOTATION_EXPECTED_DURATION, id="expected duration"),
        pytest.param(names.ANNOTATION_CHECKPOINT_INTERVAL, id="checkpoint interval"),
    ],
)
def test_annotations_in_seconds(
    annotation: str, value: str | None, want_seconds: float | None
) -> None:
    annotations = {annotation: value} if value is not None else {}
    other = (
        names.ANNOTATION_CHECKPOINT_INTERVAL
        if annotation == names.ANNOTATION_EXPECTED_DURATION
        else names.ANNOTATION_EXPECTED_DURATION
    )
    got = workload_view(workload(annotations={**annotations, other: "900"}), GPUS)
    by_name = {
        names.ANNOTATION_EXPECTED_DURATION: got.expected_duration,
        names.ANNOTATION_CHECKPOINT_INTERVAL: got.checkpoint_interval,
    }
    assert (by_name[annotation], by_name[other]) == (want_seconds, 900.0)


# ----------------------------------------------------------------- the same keys as labels

DURATION_KEYS = [
    pytest.param(
        (names.ANNOTATION_EXPECTED_DURATION, names.LABEL_EXPECTED_DURATION, "expected_duration"),
        id="expected duration",
    ),
    pytest.param(
        (
            names.ANNOTATION_CHECKPOINT_INTERVAL,
            names.LABEL_CHECKPOINT_INTERVAL,
            "checkpoint_interval",
        ),
        id="checkpoint interval",
    ),
]
"""(annotation key, label key, WorkloadView attribute)."""


@pytest.mark.parametrize("keys", DURATION_KEYS)
@pytest.mark.parametrize(
    ("annotation_value", "label_value", "want_seconds"),
    [
        pytest.param(None, "14400", 14400.0, id="a label alone counts (a Job's, copied by Kueue)"),
        pytest.param("7200", None, 7200.0, id="an annotation alone counts"),
        pytest.param("7200", "14400", 7200.0, id="both: the annotation wins"),
        pytest.param("2h", "14400", 14400.0, id="a malformed annotation is ignored: the label"),
        pytest.param("0", "14400", 14400.0, id="a zero annotation is ignored: the label"),
        pytest.param("7200", "4h", 7200.0, id="a malformed label beside a valid annotation"),
        pytest.param(None, "4h", None, id="a label with a unit is not seconds"),
        pytest.param(None, "0", None, id="a zero label"),
        pytest.param(None, "", None, id="an empty label"),
        pytest.param(None, "-60", None, id="a negative label"),
        pytest.param(None, "5400.5", 5400.5, id="a label with fractional seconds"),
        pytest.param(None, None, None, id="neither"),
    ],
)
def test_labels_carry_the_same_seconds_as_annotations(
    keys: tuple[str, str, str],
    annotation_value: str | None,
    label_value: str | None,
    want_seconds: float | None,
) -> None:
    annotation, label, attribute = keys
    annotations = {annotation: annotation_value} if annotation_value is not None else {}
    labels = {label: label_value} if label_value is not None else {}
    got = workload_view(workload(annotations=annotations, labels=labels), GPUS)
    assert getattr(got, attribute) == want_seconds


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("14400", id="hours in whole seconds"),
        pytest.param("1209600", id="two weeks in whole seconds"),
        pytest.param("5400.5", id="fractional seconds"),
    ],
)
def test_seconds_fit_in_a_label_value(value: str) -> None:
    """What users are told to put on their Jobs must be a label value the API server takes."""
    assert LABEL_VALUE.fullmatch(value) and len(value) <= 63


def test_the_label_keys_kueue_must_copy() -> None:
    assert names.LABEL_KEYS_TO_COPY == (
        "quartermaster.dev/deadline",
        "quartermaster.dev/expected-duration-seconds",
        "quartermaster.dev/checkpoint-interval-seconds",
    )


# ----------------------------------------------------------------- malformed, never raising

CONTAINER = "spec.podSets[1].template.spec.containers[0]"
NOT_TOTAL = "bug: workload_view is not total: {} raises instead of giving the default"


@pytest.mark.parametrize(
    ("path", "value", "want"),
    [
        pytest.param(
            "metadata.creationTimestamp",
            "last Tuesday",
            {"created": 0.0, "gpus": 16},
            id="creation not a time",
        ),
        pytest.param(
            "spec.priority", "high", {"priority": 0, "gpus": 16}, id="priority not a number"
        ),
        pytest.param("spec.podSets[1].count", "two", {"gpus": 8}, id="count not a number: 1 pod"),
        pytest.param(
            f"{CONTAINER}.resources.requests", {GPU: "lots"}, {"gpus": 0}, id="GPUs not a number"
        ),
        pytest.param("spec.podSets", None, {"gpus": 0}, id="podSets null"),
        pytest.param(
            "status.conditions",
            "Admitted",
            {"admitted_at": None, "gpus": 16},
            id="conditions not a list: not admitted",
        ),
        pytest.param(
            "status.conditions[1].lastTransitionTime",
            1_800_000_000,
            {"gpus": 16, "flavors": ("a100-spot",)},
            id="a condition's time not a string",
        ),
        pytest.param(
            "status.admission.podSetAssignments",
            None,
            {"flavors": (), "gpus": 16},
            id="assignments null: no flavors",
        ),
        pytest.param(
            "metadata",
            "job-train-llm-3f2a1",
            {"name": "", "gpus": 16},
            id="metadata not a mapping",
        ),
        pytest.param(
            "spec.podSets[0]",
            None,
            {"gpus": 16},
            id="a pod set null",
        ),
        pytest.param(
            f"{CONTAINER}.resources.requests",
            "8",
            {"gpus": 16},
            id="requests not a mapping: the limits of 8 count",
        ),
        pytest.param(
            f"{CONTAINER}.resources.requests",
            {GPU: float("inf")},
            {"gpus": 0},
            id="an infinite GPU quantity, as YAML's .inf",
        ),
        pytest.param(
            "status.admission.podSetAssignments[1].flavors",
            "a100-spot",
            {"flavors": (), "gpus": 16},
            id="flavors not a mapping",
        ),
        pytest.param(
            "status.requeueState",
            {"count": "twice"},
            {"evictions": 0, "gpus": 16},
            id="requeue count not a number",
        ),
        pytest.param(
            "status.accumulatedPastExecutionTimeSeconds",
            "a while",
            {"past_execution_seconds": 0.0, "gpus": 16},
            id="past execution time not a number",
        ),
    ],
)
def test_a_malformed_field_gives_a_default_and_the_rest_still_parses(
    path: str, value: Any, want: dict[str, Any]
) -> None:
    got = workload_view(set_path(workload(status=ADMITTED), path, value), GPUS)
    assert {k: getattr(got, k) for k in want} == want
    assert got.queue == "vision"


@pytest.mark.parametrize("doc", [{}, {"metadata": None, "spec": None, "status": None}])
def test_an_empty_workload_gives_every_default(doc: Doc) -> None:
    assert workload_view(doc, GPUS) == WorkloadView(
        namespace="", name="", queue="", priority=0, gpus=0, created=0.0
    )


@pytest.mark.parametrize("doc", examples())
def test_the_example_workloads_are_valid_kueue_v1beta2(doc: Doc) -> None:
    assert upstream.validate_against_crd(doc) == []
    assert upstream.evaluate_cel_rules(doc).errors == []


@pytest.mark.parametrize(
    ("status", "want_ready_at", "want_waiting"),
    [
        pytest.param(ADMITTED, epoch(10, 7), False, id="pods ready at 10:07"),
        pytest.param(ADMITTED_UNREPORTED, None, False, id="not reported: neither"),
        pytest.param(ADMITTED_WAITING, None, True, id="admitted, pods not ready: waiting"),
        pytest.param(
            {
                **FINISHED,
                "conditions": [*FINISHED["conditions"], condition("PodsReady", at(12), "False")],
            },
            None,
            False,
            id="finished: no longer waiting, whatever PodsReady says",
        ),
        pytest.param(
            EVICTED_WAITING,
            None,
            False,
            id="not admitted: pending, not waiting for pods",
        ),
    ],
)
def test_pods_ready_from_kueues_condition(
    status: Doc, want_ready_at: float | None, want_waiting: bool
) -> None:
    got = workload_view(workload(status=status), GPUS)
    assert (got.pods_ready_at, got.pods_waiting) == (want_ready_at, want_waiting)
