"""What /metrics says after a plan, and after this replica stops leading.

Alerts and dashboards take the max over the two replicas; a standby that went on exporting the
last plan it computed would keep a risk alert firing on figures nobody updates.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.api.loader import load_policy_set
from controller.api.policy_set import PolicySet
from controller.decide.observation import History, Observation
from controller.decide.plan import CapacityPlan, plan_capacity
from controller.metrics import Metrics
from controller.risk.model import LostWorkload
from controller.risk.recalibration import Judged
from tests.builders import policy_doc, pool_doc, project_doc

FIXED_NOW = 1_800_000_000.0


def policy_set(deadline: str) -> PolicySet:
    """One project, vision, with one deadline of this name."""
    return load_policy_set(
        [
            ("policy.yaml", policy_doc(pools=[pool_doc(warmPool={"minGpus": 8, "maxGpus": 16})])),
            (
                "vision.yaml",
                project_doc(
                    "vision",
                    quotas=[{"pool": "a100", "nominalGpus": 32}],
                    deadlines=[{"name": deadline, "at": "2027-03-01T00:00:00Z"}],
                ),
            ),
        ]
    )


def plan_for(policies: PolicySet, now: float = FIXED_NOW) -> CapacityPlan:
    return plan_capacity(
        Observation(policies, states={}, workloads=[], node_claims=[], history=History(), now=now)
    )


POLICY_SET = policy_set("release")
PLAN = plan_for(POLICY_SET)


def series(metrics: Metrics) -> dict[str, list[dict[str, str]]]:
    _, _, body = metrics.render()
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(dict(sample.labels))
    return out


def test_a_plan_exports_risk_targets_warm_pool_and_idle_gpus() -> None:
    metrics = Metrics()
    metrics.update(POLICY_SET, PLAN)

    got = series(metrics)

    assert got["quartermaster_deadline_risk_ratio"] == [
        {"project": "vision", "deadline": "release", "tier": "production"}
    ]
    assert got["quartermaster_warm_pool_target_gpus"] == [{"pool": "a100"}]
    assert got["quartermaster_pool_idle_gpus"] == [{"pool": "a100"}]
    assert {s["capacity_type"] for s in got["quartermaster_capacity_target_gpus"]} == {
        "on-demand",
        "spot",
    }


def test_forgetting_the_plan_drops_its_series_and_keeps_the_process_metrics() -> None:
    metrics = Metrics()
    metrics.update(POLICY_SET, PLAN)

    metrics.forget_plan()
    got = series(metrics)

    for name in (
        "quartermaster_deadline_risk_ratio",
        "quartermaster_deadline_slack_seconds",
        "quartermaster_capacity_target_gpus",
        "quartermaster_spot_ratio",
        "quartermaster_warm_pool_target_gpus",
        "quartermaster_pool_idle_gpus",
        "quartermaster_queue_pending_workloads",
    ):
        assert name not in got, name
    assert got["quartermaster_build_info"]


def test_a_plan_after_forgetting_exports_again() -> None:
    metrics = Metrics()
    metrics.update(POLICY_SET, PLAN)
    metrics.forget_plan()

    metrics.update(POLICY_SET, PLAN)

    assert series(metrics)["quartermaster_deadline_risk_ratio"]


def test_a_new_replica_says_it_does_not_lead_until_the_loop_says_so() -> None:
    metrics = Metrics()

    assert series(metrics)["quartermaster_leader"] == [{}]
    _, _, body = metrics.render()
    assert b"quartermaster_leader 0.0" in body


def by_deadline(metrics: Metrics, name: str) -> dict[str, float]:
    """The series of `name`, by their deadline label."""
    _, _, body = metrics.render()
    return {
        sample.labels["deadline"]: sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name == name
    }


SLACK = "quartermaster_deadline_slack_seconds"
RENAMED = policy_set("launch")


def test_a_series_the_next_plan_drops_is_removed_and_comes_back_when_reported_again() -> None:
    metrics = Metrics()
    metrics.update(POLICY_SET, PLAN)
    renamed = plan_for(RENAMED)

    metrics.update(RENAMED, renamed)
    assert list(by_deadline(metrics, SLACK)) == ["launch"]

    metrics.update(POLICY_SET, PLAN)
    assert by_deadline(metrics, SLACK) == {"release": PLAN.deadlines[0].estimate.slack_seconds}


def test_a_series_set_again_reads_its_new_value() -> None:
    metrics = Metrics()
    metrics.update(POLICY_SET, PLAN)
    later = plan_for(POLICY_SET, FIXED_NOW + 3600)

    metrics.update(POLICY_SET, later)

    assert by_deadline(metrics, SLACK) == {"release": later.deadlines[0].estimate.slack_seconds}
    assert later.deadlines[0].estimate.slack_seconds != PLAN.deadlines[0].estimate.slack_seconds


def test_each_pools_spot_shortage_wait_is_exported_zero_when_none_is_known() -> None:
    metrics = Metrics()
    metrics.update(POLICY_SET, PLAN)
    assert (
        metrics.registry.get_sample_value(
            "quartermaster_spot_shortage_expected_wait_seconds", {"pool": "a100"}
        )
        == 0.0
    )
    short = plan_capacity(
        Observation(
            POLICY_SET,
            states={},
            workloads=[],
            node_claims=[],
            history=History(),
            now=FIXED_NOW,
            spot_shortages={"a100": 900.0},
        )
    )
    metrics.update(POLICY_SET, short)
    assert (
        metrics.registry.get_sample_value(
            "quartermaster_spot_shortage_expected_wait_seconds", {"pool": "a100"}
        )
        == 900.0
    )


def test_lost_workloads_are_counted_per_project_with_deadlines_zero_included() -> None:
    """vision has a deadline: it reports 0, then 2; a project without deadlines reports none."""
    metrics = Metrics()
    metrics.update(POLICY_SET, PLAN)
    sample = metrics.registry.get_sample_value
    assert sample("quartermaster_lost_workloads", {"project": "vision"}) == 0

    judged = {
        ("v", name): LostWorkload(0.01, "vision", "release", FIXED_NOW + 86_400)
        for name in ("a", "b")
    }
    lost_plan = replace(PLAN, lost={k: 0.01 for k in judged}, lost_deadlines=judged)
    metrics.update(POLICY_SET, lost_plan)
    assert sample("quartermaster_lost_workloads", {"project": "vision"}) == 2

    no_deadlines = load_policy_set(
        [
            ("policy.yaml", policy_doc(pools=[pool_doc()])),
            ("nlp.yaml", project_doc("nlp", quotas=[{"pool": "a100", "nominalGpus": 8}])),
        ]
    )
    metrics.update(no_deadlines, plan_for(no_deadlines))
    assert "quartermaster_lost_workloads" not in series(metrics)


def test_judged_estimates_are_exported_once_each_as_the_reliability_and_brier_series() -> None:
    """Three estimates of one research deadline missed (0.05, 0.15, 0.95) and one of a
    production deadline met (0.2): bucketed by raw risk per tier and outcome, the squared
    error per tier (the Brier numerator), and one deadline judged per tier and outcome."""
    metrics = Metrics()
    metrics.observe_judged(
        [
            Judged("vision/release@1", "research", 0.05, 1.0, True, 9.0),
            Judged("vision/release@1", "research", 0.15, 2.0, True, 9.0),
            Judged("vision/release@1", "research", 0.95, 3.0, True, 9.0),
            Judged("llm/weekly@1", "production", 0.2, 1.0, False, 9.0),
        ]
    )
    sample = metrics.registry.get_sample_value
    missed = {"tier": "research", "outcome": "missed"}
    bucket = "quartermaster_deadline_risk_judged_ratio_bucket"
    assert [
        sample(bucket, {**missed, "le": le}) for le in ("0.1", "0.2", "0.9", "1.0", "+Inf")
    ] == [
        1.0,
        2.0,
        2.0,
        3.0,
        3.0,
    ]
    assert sample(bucket, {"tier": "production", "outcome": "met", "le": "0.2"}) == 1.0
    assert sample(bucket, {"tier": "production", "outcome": "met", "le": "0.1"}) == 0.0
    assert sample("quartermaster_deadline_risk_judged_ratio_sum", missed) == pytest.approx(1.15)
    squared = "quartermaster_deadline_risk_judged_squared_error_total"
    assert sample(squared, {"tier": "research"}) == pytest.approx(0.95**2 + 0.85**2 + 0.05**2)
    assert sample(squared, {"tier": "production"}) == pytest.approx(0.04)
    judged = "quartermaster_deadlines_judged_total"
    assert sample(judged, missed) == 1.0
    assert sample(judged, {"tier": "production", "outcome": "met"}) == 1.0
    assert sample(judged, {"tier": "research", "outcome": "met"}) is None
    metrics.forget_plan()
    assert sample(judged, missed) == 1.0, "counters outlive the plan series"
