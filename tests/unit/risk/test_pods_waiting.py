"""An admitted workload whose pods are not ready yet (Kueue's PodsReady condition False).

Kueue keeps PodsReady only with `waitForPodsReady` on. When it says the pods wait, the
workload holds its GPUs but has not started: the model adds what is left of a node's launch
(a whole launch once one has passed) to its runtime, and counts no progress since its
admission. When it says the pods are ready, progress counts from then. Without the condition
nothing changes: an admitted workload runs from its admission.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from controller.api.types import Deadline
from controller.risk.deadline import Job
from controller.risk.model import RiskModel, Snapshot, _project_jobs, project_capacity
from controller.risk.pools import pool_stats
from controller.risk.workloads import WorkloadView
from tests.unit.decide.test_plan import EXAMPLE, FIXED_NOW, HOUR, workload

PROJECT = "vision-research"
LATENCY = max(
    EXAMPLE.policy.pool(q.pool).provisioning_latency_seconds  # type: ignore[union-attr]
    for q in EXAMPLE.project(PROJECT).spec.quotas  # type: ignore[union-attr]
)
"""The launch of the pools the project has quota in, as the policy sets it (no NodeClaims
observed, so the model takes the setting)."""


def snapshot(*workloads: WorkloadView, deadline_in: float = 2.2 * HOUR) -> Snapshot:
    """The example policy with the project's one deadline `deadline_in` from now."""
    project = EXAMPLE.project(PROJECT)
    assert project is not None
    due = Deadline(
        name="d", at=datetime.fromtimestamp(FIXED_NOW + deadline_in, UTC), target_confidence=0.9
    )
    policy_set = replace(
        EXAMPLE,
        projects=tuple(
            replace(p, spec=replace(p.spec, deadlines=(due,))) if p.name == PROJECT else p
            for p in EXAMPLE.projects
        ),
    )
    return Snapshot(
        policy_set=policy_set,
        quotas={},
        workloads=list(workloads),
        pools=pool_stats(EXAMPLE.policy.spec.pools, [], now=FIXED_NOW),
        now=FIXED_NOW,
        seed=7,
    )


def _as_jobs(
    workload: WorkloadView, snapshot: Snapshot, project: str, latency: float
) -> tuple[Job, Job]:
    """The workload as the model sees it, not counting toward a deadline and counting."""
    return _project_jobs((workload,), snapshot, project, latency)[id(workload)]


def train(**pods: float | bool | None) -> WorkloadView:
    """8 GPUs, declared 2 hours, admitted an hour ago on spot, counting toward "d"."""
    view = workload(PROJECT, "train", 8, running_on="a100-spot", hours=2.0, deadline="d")
    return replace(view, **pods)  # type: ignore[arg-type]


def test_the_launch_latency_is_the_projects_pools() -> None:
    assert LATENCY == 420
    project = EXAMPLE.project(PROJECT)
    assert project is not None
    assert project_capacity(snapshot(), project).provisioning_latency_seconds == LATENCY


@pytest.mark.parametrize(
    ("pods", "admitted_ago", "want_mean"),
    [
        pytest.param({}, HOUR, 2 * HOUR - HOUR, id="not reported: an hour done of two"),
        pytest.param(
            {"pods_ready_at": FIXED_NOW - 0.5 * HOUR},
            HOUR,
            1.5 * HOUR,
            id="pods ready half an hour ago: half an hour done",
        ),
        pytest.param(
            {"pods_waiting": True},
            HOUR,
            2 * HOUR + LATENCY,
            id="waiting an hour, past a launch: the runtime and a whole launch more",
        ),
        pytest.param(
            {"pods_waiting": True},
            100.0,
            2 * HOUR + LATENCY - 100,
            id="waiting 100 s: the runtime and the rest of the launch",
        ),
    ],
)
def test_what_is_left_of_an_admitted_workload(
    pods: dict[str, float | bool], admitted_ago: float, want_mean: float
) -> None:
    view = replace(train(**pods), admitted_at=FIXED_NOW - admitted_ago)
    not_counting, counting = _as_jobs(view, snapshot(view), PROJECT, float(LATENCY))
    assert not_counting.mean_seconds == counting.mean_seconds == pytest.approx(want_mean)
    # It holds its GPUs either way: the queue behind it waits for them.
    assert not_counting.running and counting.running


def test_a_deadline_whose_work_waits_for_its_pods_is_at_more_risk() -> None:
    """Due in 2.2 h: an hour left of the running workload is safe; 2 h 7 min left of the
    waiting one may not be; half an hour done lies between."""

    def risk(view: WorkloadView) -> float:
        reports = RiskModel(snapshot(view)).deadlines()
        return next(r.estimate.risk for r in reports if r.project == PROJECT)

    unreported = risk(train())
    ready = risk(train(pods_ready_at=FIXED_NOW - 0.5 * HOUR))
    waiting = risk(train(pods_waiting=True))
    assert unreported < 0.01
    assert unreported <= ready < waiting
    assert waiting > 0.2


def test_learned_runtimes_with_no_history_change_nothing() -> None:
    """An empty learner gives the declared runtime and spread back exactly."""
    from controller.risk.learning import RuntimeLearner  # noqa: PLC0415

    view = train()
    plain = _as_jobs(view, snapshot(view), PROJECT, float(LATENCY))
    learned = _as_jobs(
        view, replace(snapshot(view), runtimes=RuntimeLearner()), PROJECT, float(LATENCY)
    )
    assert learned == plain


def test_a_project_that_runs_twice_its_declaration_is_modelled_so() -> None:
    """Its finished work ran 2x (no shrinkage, no spread): two hours declared become four, of
    which one has run: three left, at spread 0."""
    from controller.risk.learning import FinishedRun, RuntimeLearner  # noqa: PLC0415

    learner = RuntimeLearner(pseudo_count_declared=0.0)
    for i in range(20):
        learner.observe(
            FinishedRun(f"ns/w{i}", PROJECT, float(i), 4 * HOUR, declared_seconds=2 * HOUR)
        )
    view = train()
    _, counting = _as_jobs(view, replace(snapshot(view), runtimes=learner), PROJECT, float(LATENCY))
    assert counting.mean_seconds == pytest.approx(3 * HOUR, rel=1e-5)
    assert counting.sigma == 0.0
