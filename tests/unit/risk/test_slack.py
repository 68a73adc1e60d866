"""A pending workload's slack: over the open deadlines it counts toward (by its deadline label,
or a deadline's matchLabels), the least of the cutoff less now less its expected remaining
runtime; none when it counts toward none. The queue order and the priority boosts read it.

Hand-computed: deadline "d" (by label) is due in 3 h, "team-a" (matchLabels team=a) in 2 h;
the runtimes are declared, so the model expects them as declared (no history).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from controller.api.types import Deadline
from controller.risk.model import RiskModel, Snapshot
from controller.risk.pools import pool_stats
from tests.unit.decide.test_plan import EXAMPLE, FIXED_NOW, HOUR, NAMESPACES, workload

PROJECT = "vision-research"


def due(name: str, hours: float, **match: str) -> Deadline:
    return Deadline(
        name=name,
        at=datetime.fromtimestamp(FIXED_NOW + hours * HOUR, UTC),
        target_confidence=0.9,
        match_labels=match,
    )


def slacks() -> dict[tuple[str, str], float | None]:
    policy_set = replace(
        EXAMPLE,
        projects=tuple(
            replace(p, spec=replace(p.spec, deadlines=(due("d", 3), due("team-a", 2, team="a"))))
            if p.name == PROJECT
            else p
            for p in EXAMPLE.projects
        ),
    )
    views = [
        workload(PROJECT, "both", 8, hours=1, deadline="d", labels={"team": "a"}),
        workload(PROJECT, "label", 8, hours=0.5, deadline="d"),
        workload(PROJECT, "team", 8, hours=2, labels={"team": "a"}),
        workload(PROJECT, "neither", 8, hours=1),
        workload(PROJECT, "late", 8, hours=4, deadline="d"),
        workload(PROJECT, "running", 8, hours=1, deadline="d", running_on="a100-spot"),
    ]
    model = RiskModel(
        Snapshot(
            policy_set=policy_set,
            quotas={},
            workloads=views,
            pools=pool_stats(EXAMPLE.policy.spec.pools, [], now=FIXED_NOW),
            now=FIXED_NOW,
            seed=7,
        )
    )
    return model.pending_slack()


@pytest.mark.parametrize(
    ("name", "want_hours"),
    [
        pytest.param("both", 1.0, id="both deadlines: 3 h - 1 h and 2 h - 1 h, the least"),
        pytest.param("label", 2.5, id="its label's deadline only: 3 h - 0.5 h"),
        pytest.param("team", 0.0, id="matchLabels only: 2 h - 2 h"),
        pytest.param("late", -1.0, id="a negative slack stays negative: 3 h - 4 h"),
    ],
)
def test_least_slack_over_the_deadlines_it_counts_toward(name: str, want_hours: float) -> None:
    found = slacks()[(NAMESPACES[PROJECT], name)]
    assert found == pytest.approx(want_hours * HOUR)


def test_counting_toward_none_is_no_slack_and_running_work_has_none_listed() -> None:
    found = slacks()
    assert found[(NAMESPACES[PROJECT], "neither")] is None
    assert (NAMESPACES[PROJECT], "running") not in found
