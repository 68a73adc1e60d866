"""Kueue's part on Workloads, where no Kueue runs: what it writes, and the calls that write it.

The soak and the scale bench run the controller against the test API server, which runs no
Kueue: they play its part themselves. A Workload is created in a project's LocalQueue (as
Kueue's job integration creates one for a Job); admitted later, with `QuotaReserved` and
`Admitted` conditions and a flavor assignment written to its status under Kueue's field
manager; finished (`Finished`, reason Succeeded); then deleted. The documents are built by
pure functions over plain values; the three calls that write them are the thin layer, and
raise `KubeError` for the caller to count or stop on. When and to which Workload each step
happens is the caller's: the soak draws it at random on a clock, the scale bench in turns.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from controller.kube import kinds
from controller.kube.client import KubeClient

GPU = "nvidia.com/gpu"
KUEUE = "kueue"
"""The field manager of the Workloads' status, as Kueue writes it."""
IMAGE = "registry.example.com/trainer:1"

Document = dict[str, Any]


def rfc3339(moment: datetime) -> str:
    """A UTC timestamp to the second, as Kubernetes writes `lastTransitionTime`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(type_: str, when: str, reason: str | None = None) -> Document:
    """A condition Kueue sets on a Workload, true since `when`."""
    return {
        "type": type_,
        "status": "True",
        "reason": reason or type_,
        "message": f"{type_} by the Kueue stand-in",
        "lastTransitionTime": when,
        "observedGeneration": 1,
    }


def workload_body(
    *,
    name: str,
    namespace: str,
    queue: str,
    priority: int,
    pods: int,
    gpus_per_pod: int,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
) -> Document:
    """A pending Workload of one pod set of `pods` pods, each asking `gpus_per_pod` GPUs."""
    return {
        "apiVersion": kinds.WORKLOAD.api_version,
        "kind": kinds.WORKLOAD.kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels),
            "annotations": dict(annotations),
        },
        "spec": {
            "queueName": queue,
            "priority": priority,
            "podSets": [
                {
                    "name": "main",
                    "count": pods,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "train",
                                    "image": IMAGE,
                                    "resources": {
                                        "requests": {GPU: str(gpus_per_pod)},
                                        "limits": {GPU: str(gpus_per_pod)},
                                    },
                                }
                            ],
                            "restartPolicy": "Never",
                        }
                    },
                }
            ],
        },
    }


def admission(*, cluster_queue: str, pods: int, gpus_per_pod: int, flavor: str) -> Document:
    """The Workload's `status.admission`: all its pods on one GPU flavor of `cluster_queue`."""
    return {
        "clusterQueue": cluster_queue,
        "podSetAssignments": [
            {
                "name": "main",
                "count": pods,
                "flavors": {GPU: flavor},
                "resourceUsage": {GPU: str(pods * gpus_per_pod)},
            }
        ],
    }


def admitted_status(admitted: Document, when: str) -> Document:
    """The status of a Workload admitted at `when` with the `admitted` assignment."""
    return {
        "conditions": [condition("QuotaReserved", when), condition("Admitted", when)],
        "admission": admitted,
    }


def finished_status(admitted: Document, when: str) -> Document:
    """The status of an admitted Workload (`admitted`: its status) that finished at `when`."""
    return {
        "conditions": [
            *admitted["conditions"],
            condition("Finished", when, reason="Succeeded"),
        ],
        "admission": admitted["admission"],
    }


# --------------------------------------------------------------------------------- the writes
def create_workload(client: KubeClient, body: Document) -> None:
    client.create(kinds.WORKLOAD, body)


def write_status(client: KubeClient, namespace: str, name: str, status: Document) -> None:
    """Apply `status` to the Workload's status subresource, as Kueue (its field manager)."""
    body = {
        "apiVersion": kinds.WORKLOAD.api_version,
        "kind": kinds.WORKLOAD.kind,
        "metadata": {"name": name, "namespace": namespace},
        "status": status,
    }
    client.apply(kinds.WORKLOAD, body, field_manager=KUEUE, subresource="status")


def delete_workload(client: KubeClient, namespace: str, name: str) -> None:
    client.delete(kinds.WORKLOAD, name, namespace)
