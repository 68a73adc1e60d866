"""What the Kueue stand-in writes on a Workload: a pending body, an admission, then finished."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from controller.kube import kinds
from testenv.kueue_standin import (
    GPU,
    admission,
    admitted_status,
    finished_status,
    rfc3339,
    workload_body,
)

T1 = "2031-02-03T10:00:00Z"
T2 = "2031-02-03T10:05:00Z"
FIXED_IN_BERLIN = datetime(2031, 2, 3, 11, 0, 0, 999_999, tzinfo=timezone(timedelta(hours=1)))
"""T1 an hour east of UTC, with microseconds."""


def test_timestamps_are_utc_to_the_second() -> None:
    assert rfc3339(FIXED_IN_BERLIN) == T1


def test_a_workload_asks_its_gpus_per_pod_in_its_queue() -> None:
    body = workload_body(
        name="job-000001",
        namespace="team-a",
        queue="team-a",
        priority=1000,
        pods=2,
        gpus_per_pod=4,
        labels={"run": "1"},
        annotations={"expected": "3600"},
    )
    assert (body["apiVersion"], body["kind"]) == (kinds.WORKLOAD.api_version, "Workload")
    assert body["metadata"] == {
        "name": "job-000001",
        "namespace": "team-a",
        "labels": {"run": "1"},
        "annotations": {"expected": "3600"},
    }
    assert (body["spec"]["queueName"], body["spec"]["priority"]) == ("team-a", 1000)
    (pod_set,) = body["spec"]["podSets"]
    assert pod_set["count"] == 2
    (container,) = pod_set["template"]["spec"]["containers"]
    assert container["resources"] == {"requests": {GPU: "4"}, "limits": {GPU: "4"}}


def test_admitted_then_finished_keeps_the_admission_and_its_conditions() -> None:
    assigned = admission(cluster_queue="team-a", pods=2, gpus_per_pod=4, flavor="a100-spot")
    assert assigned["podSetAssignments"] == [
        {"name": "main", "count": 2, "flavors": {GPU: "a100-spot"}, "resourceUsage": {GPU: "8"}}
    ]
    admitted = admitted_status(assigned, T1)
    assert [(c["type"], c["status"], c["lastTransitionTime"]) for c in admitted["conditions"]] == [
        ("QuotaReserved", "True", T1),
        ("Admitted", "True", T1),
    ]
    finished = finished_status(admitted, T2)
    assert finished["admission"] == assigned
    assert finished["conditions"][:2] == admitted["conditions"]
    last = finished["conditions"][2]
    assert (last["type"], last["reason"], last["lastTransitionTime"]) == (
        "Finished",
        "Succeeded",
        T2,
    )
