"""The model queues a project's waiting work in the order Kueue will admit it.

With priority boosts on, the controller lowers waiting work by urgency (least slack), so Kueue
admits a queue's tightest deadline first whatever came first; the model must queue it first too,
or it predicts misses that the boosts prevent (and raises on-demand for them).

Hand-computed: one project, 8 on-demand GPUs, no latency. `early` (8 GPUs, 2 h expected) was
submitted first and counts toward `loose` (due in 10 h); `late` (8 GPUs, 1 h) came a minute
later and counts toward `tight` (due in 2.2 h). In submit order `late` is done at about 3 h and
misses; deadline first it is done at about 1 h and `early` at 3 h, both in time. (Annotated
runtimes are log-normal with sigma 0.25 in the model: the medians are these, the risks near 0
or 1, not exactly.)
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from controller.api.loader import load_policy_set
from controller.api.policy_set import PolicySet
from controller.risk.model import RiskModel, Snapshot
from controller.risk.pools import PoolStats
from controller.risk.workloads import WorkloadView
from tests.builders import policy_doc, pool_doc, project_doc

FIXED_NOW = 1_800_000_000.0
HOUR = 3600.0


def at(hours: float) -> str:
    return datetime.fromtimestamp(FIXED_NOW + hours * HOUR, UTC).isoformat()


def world(
    deadlines: Sequence[tuple[str, float]] = (("tight", 2.2), ("loose", 10)),
    *,
    demote: bool | None = None,
) -> PolicySet:
    """One project with 8 on-demand GPUs and the named deadlines (hours from now); `demote`
    sets `demoteLost` on its tier (production) when given."""
    project = project_doc(
        quotas=[{"pool": "a100", "nominalGpus": 8}],
        deadlines=[{"name": name, "at": at(hours)} for name, hours in deadlines],
    )
    pool = pool_doc(onDemand={"floorGpus": 8, "ceilingGpus": 8}, maxGpus=8)
    spec: dict[str, Any] = {"pools": [pool]}
    if demote is not None:
        spec["tiers"] = [
            {"name": "production", "priority": 1000, "demoteLost": demote},
            {"name": "research", "priority": 100, "preemption": "Never"},
        ]
    return load_policy_set([("policy", policy_doc(**spec)), ("project", project)])


def model(
    policy_set: PolicySet, workloads: Sequence[WorkloadView], *, deadline_first: bool
) -> RiskModel:
    return RiskModel(
        Snapshot(
            policy_set=policy_set,
            quotas={},
            workloads=workloads,
            pools={"a100": PoolStats("a100", 0.0, 0.0, 1.0, 0)},
            now=FIXED_NOW,
            deadline_first=deadline_first,
        )
    )


def pending(name: str, hours: float, deadline: str, created: float) -> WorkloadView:
    return WorkloadView(
        namespace="vision",
        name=name,
        queue="vision",
        priority=100000,
        gpus=8,
        created=created,
        expected_duration=hours * HOUR,
        deadline=deadline,
    )


WORKLOADS = [
    pending("early", 2, "loose", FIXED_NOW - 120),
    pending("late", 1, "tight", FIXED_NOW - 60),
]


@pytest.mark.parametrize(
    ("deadline_first", "tight_missed", "want_hours"),
    [
        pytest.param(False, True, {"tight": 3.0, "loose": 2.0}, id="submit order: late misses"),
        pytest.param(True, False, {"tight": 1.0, "loose": 3.0}, id="deadline first: in time"),
    ],
)
def test_waiting_work_is_queued_tightest_deadline_first_when_boosts_are_on(
    deadline_first: bool, tight_missed: bool, want_hours: dict[str, float]
) -> None:
    reports = {
        r.deadline: r.estimate
        for r in model(world(), WORKLOADS, deadline_first=deadline_first).deadlines()
    }
    assert (reports["tight"].risk > 0.9) is tight_missed
    assert (reports["tight"].risk < 0.02) is not tight_missed
    assert reports["loose"].risk < 0.02
    finish = {name: (e.p50_finish - FIXED_NOW) / HOUR for name, e in reports.items()}
    assert finish == pytest.approx(want_hours, rel=0.1)


@pytest.mark.parametrize(
    ("demote", "tight_missed", "want_hours"),
    [
        pytest.param(False, True, {"tight": 3.0, "gone": 2.0}, id="lost first: tight misses"),
        pytest.param(True, False, {"tight": 1.0, "gone": 3.0}, id="lost demoted: tight in time"),
    ],
)
def test_demoted_lost_work_is_queued_after_savable_work(
    demote: bool, tight_missed: bool, want_hours: dict[str, float]
) -> None:
    """`hopeless` (8 GPUs, 2 h, submitted first) counts toward `gone`, due in 30 minutes: even
    started now it has next to no chance (lost). Its slack is negative, the most urgent level,
    so undemoted it goes first and `late` (1 h, due in 2.2 h) finishes at about 3 h and misses.
    Where the tier demotes lost work the boosts put `hopeless` behind `late`, and the model
    must queue it there too: `late` done at about 1 h, `hopeless` at 3 h."""
    workloads = [
        pending("hopeless", 2, "gone", FIXED_NOW - 120),
        pending("late", 1, "tight", FIXED_NOW - 60),
    ]
    # `gone`, due in half an hour, in a tier that demotes lost work or does not.
    policy_set = world((("tight", 2.2), ("gone", 0.5)), demote=demote)
    judged = model(policy_set, workloads, deadline_first=True)
    assert set(judged.lost_workloads(0.05)) == {("vision", "hopeless")}
    assert judged.demoted() == ({("vision", "hopeless")} if demote else frozenset())
    reports = {r.deadline: r.estimate for r in judged.deadlines()}
    assert (reports["tight"].risk > 0.9) is tight_missed
    assert (reports["tight"].risk < 0.02) is not tight_missed
    finish = {name: (e.p50_finish - FIXED_NOW) / HOUR for name, e in reports.items()}
    assert finish == pytest.approx(want_hours, rel=0.1)
