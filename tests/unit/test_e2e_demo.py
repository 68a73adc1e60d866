"""The demo's own documents: the example policy as `make demo` applies it (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from controller import names
from e2e.demo import (
    ONE_OFF_DEADLINE,
    ONE_OFF_PROJECT,
    demo_documents,
    example_documents,
    example_workloads,
    one_off_deadline,
    with_one_off_deadline,
)

FIXED_NOW = datetime(2031, 2, 3, 10, 45, 12, tzinfo=UTC)


def project(documents: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(
        d for d in documents if d["kind"] == "TrainingProject" and d["metadata"]["name"] == name
    )


def test_the_one_off_deadline_is_72_hours_ahead_on_the_hour() -> None:
    assert one_off_deadline(FIXED_NOW) == {
        "name": ONE_OFF_DEADLINE,
        "at": "2031-02-06T10:00:00Z",
        "matchLabels": {"example.com/paper": "cvpr"},
        "targetConfidence": 0.95,
    }


def test_the_demo_documents_carry_its_prometheus_and_the_one_off_deadline() -> None:
    documents = demo_documents(now=FIXED_NOW, prometheus_url="http://127.0.0.1:9999")
    policy = next(d for d in documents if d["kind"] == "CapacityPolicy")
    assert policy["spec"]["prometheus"]["url"] == "http://127.0.0.1:9999"
    deadlines = project(documents, ONE_OFF_PROJECT)["spec"]["deadlines"]
    assert [d for d in deadlines if d["name"] == ONE_OFF_DEADLINE] == [one_off_deadline(FIXED_NOW)]

    # Only those two changes: the other projects are the bundled example's, untouched.
    def others(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            d
            for d in docs
            if d["kind"] == "TrainingProject" and d["metadata"]["name"] != ONE_OFF_PROJECT
        ]

    assert others(documents) == others(example_documents())


@pytest.mark.parametrize(
    ("existing", "want"),
    [
        pytest.param([], ["new"], id="added to a project without deadlines"),
        pytest.param(
            [{"name": "weekly", "schedule": "0 18 * * FRI", "timeZone": "UTC"}],
            ["weekly", "new"],
            id="added after a recurring deadline, which is kept",
        ),
        pytest.param(
            [{"name": "new", "at": "2020-01-01T00:00:00Z"}, {"name": "other", "at": "x"}],
            ["other", "new"],
            id="one of the same name is replaced",
        ),
    ],
)
def test_with_one_off_deadline(existing: list[dict[str, Any]], want: list[str]) -> None:
    documents: list[dict[str, Any]] = [
        {"kind": "TrainingProject", "metadata": {"name": "p"}, "spec": {"deadlines": existing}}
    ]
    deadline: dict[str, Any] = {"name": "new", "at": "2031-02-06T10:00:00Z"}
    out = with_one_off_deadline(documents, project="p", deadline=deadline)
    assert [d["name"] for d in out[0]["spec"]["deadlines"]] == want
    assert out[0]["spec"]["deadlines"][-1] == deadline
    assert documents[0]["spec"]["deadlines"] == existing, "the input is not changed"


def test_workloads_label_only_deadlines_their_project_has() -> None:
    labelled = {
        w["metadata"]["name"]: w["metadata"]["labels"].get(names.LABEL_DEADLINE)
        for w in example_workloads({"vision-research": {"cvpr-submission"}})
    }
    assert labelled["detector-cvpr"] == "cvpr-submission"
    assert labelled["llm-7b-pretrain"] is None, "llm-pretrain has no such deadline here"
    unfiltered = example_workloads()
    assert unfiltered[0]["metadata"]["labels"][names.LABEL_DEADLINE] == "weekly-checkpoint"
