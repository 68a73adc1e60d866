"""What the e2e scenario submits, checked without a cluster (pure).

On kind it submits batch/v1 Jobs and Kueue makes their Workloads; Kueue's part is modelled
here by the one rule that matters to us (only the labels `labelKeysToCopy` lists are copied,
no annotations), so what the risk model would read from such a Workload can be checked.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller import names
from controller.risk.workloads import workload_view
from e2e.scenario import (
    CHECKPOINT_SECONDS,
    DEADLINE,
    EXPECTED_SECONDS,
    PROJECT,
    QUEUE_NAME_LABEL,
    job,
    workload,
)
from tests import upstream

GPUS = frozenset({"nvidia.com/gpu"})


def as_kueue_makes_it(
    job_doc: dict[str, Any], label_keys_to_copy: tuple[str, ...]
) -> dict[str, Any]:
    """The Workload Kueue makes of a Job: its queue, its pod set, and of its labels only those
    whose keys the configuration lists; never its annotations."""
    labels = job_doc["metadata"]["labels"]
    spec = job_doc["spec"]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"job-{job_doc['metadata']['name']}-1a2b3",
            "namespace": job_doc["metadata"]["namespace"],
            "labels": {k: v for k, v in labels.items() if k in label_keys_to_copy},
        },
        "spec": {
            "queueName": labels[QUEUE_NAME_LABEL],
            "podSets": [
                {"name": "main", "count": spec["parallelism"], "template": spec["template"]}
            ],
        },
    }


def test_the_job_is_a_valid_batch_v1_job_for_kueue() -> None:
    doc = job(3)
    assert upstream.validate_any_builtin(doc) == []
    assert doc["metadata"]["labels"][QUEUE_NAME_LABEL] == PROJECT
    assert doc["spec"]["suspend"] is True
    assert "annotations" not in doc["metadata"], "Kueue would not copy them"


@pytest.mark.parametrize(
    ("copied", "want"),
    [
        pytest.param(
            names.LABEL_KEYS_TO_COPY,
            (DEADLINE, float(EXPECTED_SECONDS), float(CHECKPOINT_SECONDS)),
            id="Kueue configured as e2e/kind.sh configures it: everything reaches the model",
        ),
        pytest.param(
            (),
            (None, None, None),
            id="Kueue's default configuration: the Workload counts toward nothing",
        ),
        pytest.param(
            (names.LABEL_DEADLINE,),
            (DEADLINE, None, None),
            id="only the deadline key listed: the duration falls back to history or a prior",
        ),
    ],
)
def test_what_the_risk_model_reads_from_the_workload_kueue_makes(
    copied: tuple[str, ...], want: tuple[str | None, float | None, float | None]
) -> None:
    view = workload_view(as_kueue_makes_it(job(0), copied), GPUS)
    assert (view.deadline, view.expected_duration, view.checkpoint_interval) == want
    assert (view.queue, view.gpus) == (PROJECT, 16)


def test_the_local_workload_and_the_job_say_the_same_to_the_model() -> None:
    """The local path writes the Workload itself (no Kueue), with annotations."""
    local = workload_view(workload(0), GPUS)
    from_job = workload_view(as_kueue_makes_it(job(0), names.LABEL_KEYS_TO_COPY), GPUS)
    assert (local.deadline, local.expected_duration, local.checkpoint_interval, local.gpus) == (
        from_job.deadline,
        from_job.expected_duration,
        from_job.checkpoint_interval,
        from_job.gpus,
    )
