"""What the controller writes to status between passes, and when a write is worth making.

`pool_states` must read back exactly what `pool_status_entries` wrote, because that is the only
memory the decision has between passes (and across a restart or a new leader). `status_changed`
must ignore the noise of the Monte Carlo estimate (risk within 0.05, slack within 15 minutes)
and see everything else.

The policy: pools a100 (floor 8, ceiling 64) and h100 (floor 8, ceiling 32); `vision` holds 32
GPUs of a100, `nlp` 16 of a100 and 8 of h100, so a100 has 48 GPUs under the mix and h100 8.
FIXED_NOW is 2027-01-15T08:00:00Z.

Cases marked `KNOWN_BUG` assert the behaviour we want but do not have yet; they are strict
xfails, so fixing the bug makes them fail until the mark is removed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller import names
from controller.api.introspect import to_json
from controller.api.loader import load_policy_set
from controller.api.policy_set import PolicyError
from controller.api.schema import object_schema
from controller.api.types import (
    CapacityPolicyStatus,
    Condition,
    ConditionStatus,
    Deadline,
    TrainingProjectStatus,
)
from controller.capacity import PoolTarget
from controller.decide.mix import Action, Decision, PoolState, Reason
from controller.decide.observation import History, Observation
from controller.decide.plan import CapacityPlan, plan_capacity
from controller.kube import kinds
from controller.reconcile.reconciler import projects_with_objects, unserved_kinds
from controller.reconcile.status import (
    DeadlineTracking,
    PolicyOutcome,
    ProjectOutcome,
    capacity_policy_status,
    invalid_spec_message,
    policy_status,
    pool_states,
    pool_status_entries,
    project_capacity_status,
    read_status,
    status_changed,
    training_project_status,
)
from controller.reconcile.status import project_status as make_project_status
from controller.render.desired import render
from controller.risk.deadline import Estimate
from controller.risk.model import DeadlineReport
from controller.risk.workloads import WorkloadView
from controller.timestamps import format_duration
from tests.builders import policy_doc, pool_doc, project_doc

Doc = dict[str, Any]
FIXED_NOW = 1_800_000_000.0
STAMP = "2027-01-15T08:00:00Z"

POLICY_SET = load_policy_set(
    [
        (
            "policy.yaml",
            policy_doc(
                pools=[
                    pool_doc(
                        onDemand={"floorGpus": 8, "ceilingGpus": 64},
                        warmPool={"minGpus": 0, "maxGpus": 16},
                    ),
                    pool_doc("h100", onDemand={"floorGpus": 8, "ceilingGpus": 32}),
                ]
            ),
        ),
        (
            "vision.yaml",
            project_doc(
                "vision",
                quotas=[{"pool": "a100", "nominalGpus": 32}],
                deadlines=[{"name": "release", "at": "2027-03-01T00:00:00Z"}],
            ),
        ),
        (
            "nlp.yaml",
            project_doc(
                "nlp",
                tier="research",
                quotas=[{"pool": "a100", "nominalGpus": 16}, {"pool": "h100", "nominalGpus": 8}],
            ),
        ),
    ]
)
BASE_PLAN = plan_capacity(
    Observation(
        POLICY_SET, states={}, workloads=[], node_claims=[], history=History(), now=FIXED_NOW
    )
)


def KNOWN_BUG(reason: str) -> pytest.MarkDecorator:  # noqa: N802 - reads as a marker
    """A case asserting the right behaviour that the code does not have yet (see reason)."""
    return pytest.mark.xfail(reason=reason, strict=True, raises=AssertionError)


def decision(
    state: PoolState,
    action: Action = Action.HOLD,
    reason: Reason = Reason.STEADY,
    *,
    previous: int | None = None,
    message: str = "risk within thresholds",
) -> Decision:
    return Decision(
        pool=state.pool,
        action=action,
        reason=reason,
        previous=state.on_demand_gpus if previous is None else previous,
        target=state.on_demand_gpus,
        message=message,
        inputs={},
        state=state,
    )


def plan_of(*decisions: Decision, warm: dict[str, int] | None = None) -> CapacityPlan:
    """A plan that made these decisions, rendered as the controller would render it."""
    targets = {
        d.pool: PoolTarget(
            d.state.on_demand_gpus, dict(d.state.assignments), d.state.deferred_tiers
        )
        for d in decisions
    }
    return replace(
        BASE_PLAN,
        decisions=tuple(decisions),
        targets=targets,
        rendered=render(POLICY_SET, targets=targets),
        warm_targets=warm or {"a100": 0, "h100": 0},
    )


def as_stored(pools: Sequence[Any]) -> list[Doc]:
    """status.pools as the API server stores them: typed entries serialised, dicts as given."""
    return [to_json(p) for p in pools]


def live(pools: Sequence[Any]) -> Doc:
    return {"metadata": {"name": "fleet"}, "status": {"pools": as_stored(pools)}}


RAISED = PoolState(
    "a100",
    24,
    {"vision": 16, "nlp": 4},
    raise_since=FIXED_NOW - 600,
    last_change=FIXED_NOW,
    deferred_tiers=("research",),
)
COOLING = PoolState("h100", 8, lower_since=FIXED_NOW - 120)


# ------------------------------------------------------------------ pool state round trip


@pytest.mark.parametrize(
    "decisions",
    [
        pytest.param(
            (decision(PoolState("a100", 8)), decision(PoolState("h100", 8))),
            id="a first pass at the floors with nothing held",
        ),
        pytest.param(
            (
                decision(RAISED, Action.RAISE, Reason.CEILING_BINDS, previous=8),
                decision(COOLING, Action.HOLD, Reason.EVALUATION_WINDOW),
            ),
            id="a raise with assignments, a deferred tier and both windows",
        ),
        pytest.param(
            (
                decision(
                    PoolState(
                        "a100",
                        40,
                        {"vision": 32},
                        lower_since=FIXED_NOW - 3600,
                        last_change=FIXED_NOW,
                        last_lower=FIXED_NOW,
                    ),
                    Action.LOWER,
                    Reason.RISK_CLEARED,
                    previous=48,
                ),
            ),
            id="a step down",
        ),
        pytest.param(
            (
                decision(
                    PoolState(
                        "a100",
                        24,
                        {"vision": 16},
                        raise_since=FIXED_NOW,
                        last_change=FIXED_NOW,
                        last_lower=FIXED_NOW - 3600,
                        flaps=2,
                    ),
                    Action.RAISE,
                    Reason.RISK_ABOVE_THRESHOLD,
                    previous=8,
                ),
            ),
            id="a raise that flapped: the last lower and the count",
        ),
    ],
)
def test_pool_states_read_back_what_was_written(decisions: tuple[Decision, ...]) -> None:
    entries = pool_status_entries(plan_of(*decisions), live([]), now=FIXED_NOW)

    assert pool_states(live(entries)) == {d.pool: d.state for d in decisions}


def test_pool_status_entry_fields() -> None:
    plan = plan_of(
        decision(RAISED, Action.RAISE, Reason.CEILING_BINDS, previous=8, message="8 -> 24"),
        decision(COOLING, Action.HOLD, Reason.EVALUATION_WINDOW),
        warm={"a100": 6, "h100": 0},
    )

    a100, h100 = as_stored(pool_status_entries(plan, live([]), now=FIXED_NOW))

    assert a100 == {
        "pool": "a100",
        "onDemandGpus": 24,
        "spotGpus": 24,  # 48 under the mix
        "targetOnDemandGpus": 24,
        "assignments": [{"project": "nlp", "gpus": 4}, {"project": "vision", "gpus": 16}],
        "deferredTiers": ["research"],
        "warmPoolTargetGpus": 6,
        "raiseSince": "2027-01-15T07:50:00Z",
        "lastChange": STAMP,
        "lastDecision": {
            "time": STAMP,
            "action": "Raise",
            "reason": "CeilingBinds",
            "message": "8 -> 24",
        },
    }
    assert h100 == {
        "pool": "h100",
        "onDemandGpus": 8,
        "spotGpus": 0,
        "targetOnDemandGpus": 8,
        "assignments": [],
        "deferredTiers": [],
        "warmPoolTargetGpus": 0,
        "lowerSince": "2027-01-15T07:58:00Z",
    }


FIXED_RAISE_SINCE = datetime(2027, 1, 15, 6, tzinfo=UTC)
"""A raiseSince as status stores it: 2027-01-15T06:00:00Z."""


@pytest.mark.parametrize(
    ("entries", "want_states"),
    [
        pytest.param([], {}, id="no status yet: no states"),
        pytest.param(
            [{"pool": "a100", "targetOnDemandGpus": 24}],
            {},
            id="an entry without the required onDemandGpus is left out",
        ),
        pytest.param(
            [
                {
                    "pool": "a100",
                    "onDemandGpus": 16,
                    "targetOnDemandGpus": 24,
                    "assignments": [{"project": "v", "gpus": 8}],
                    "raiseSince": "2027-01-15T06:00:00Z",
                    "deferredTiers": ["research"],
                }
            ],
            {
                "a100": PoolState(
                    "a100",
                    24,
                    {"v": 8},
                    raise_since=FIXED_RAISE_SINCE.timestamp(),
                    deferred_tiers=("research",),
                )
            },
            id="a shift under way: the state is the decided target, not what is rendered yet",
        ),
        pytest.param(
            ["a100", {"onDemandGpus": 8}, {"pool": ""}],
            {},
            id="entries that are not objects or name no pool are skipped",
        ),
        pytest.param(
            [{"pool": "a100", "onDemandGpus": 8, "raiseSince": "yesterday", "lastChange": 5}],
            {},
            id="an entry the CRD schema refuses (times that are not times) is left out: the "
            "pool starts afresh rather than from a misread state",
        ),
        pytest.param(
            [
                {
                    "pool": "a100",
                    "onDemandGpus": 16,
                    "assignments": [{"gpus": 4}, "x", {"project": "v"}],
                }
            ],
            {},
            id="so is one with assignments that name no project",
        ),
    ],
)
def test_pool_states_tolerate_odd_status(
    entries: list[Any], want_states: dict[str, PoolState]
) -> None:
    assert pool_states(live(entries)) == want_states


# -------------------------------------------------------------------------- lastDecision

EARLIER = {"time": "2027-01-15T06:00:00Z", "action": "Raise", "reason": "X", "message": "m"}


@pytest.mark.parametrize(
    ("made", "previous", "want_last"),
    [
        pytest.param(
            decision(PoolState("a100", 24)),
            EARLIER,
            EARLIER,
            id="a steady hold keeps the last real decision",
        ),
        pytest.param(
            decision(PoolState("a100", 24, raise_since=FIXED_NOW), reason=Reason.EVALUATION_WINDOW),
            EARLIER,
            EARLIER,
            id="a hold inside the evaluation window keeps it too",
        ),
        pytest.param(
            decision(PoolState("a100", 24)), None, None, id="a steady hold with no history has none"
        ),
        pytest.param(
            decision(PoolState("a100", 24), Action.LOWER, Reason.RISK_CLEARED, previous=40),
            EARLIER,
            {
                "time": STAMP,
                "action": "Lower",
                "reason": "RiskCleared",
                "message": "risk within thresholds",
            },
            id="a change replaces it, stamped now",
        ),
        pytest.param(
            decision(
                PoolState("a100", 24), reason=Reason.PROMETHEUS_UNAVAILABLE, message="no Prometheus"
            ),
            EARLIER,
            {
                "time": STAMP,
                "action": "Hold",
                "reason": "PrometheusUnavailable",
                "message": "no Prometheus",
            },
            id="a hold for a reason worth showing replaces it",
        ),
    ],
)
def test_last_decision(made: Decision, previous: Doc | None, want_last: Doc | None) -> None:
    before = live([{"pool": "a100", **({"lastDecision": previous} if previous else {})}])

    (entry,) = pool_status_entries(plan_of(made), before, now=FIXED_NOW)

    assert to_json(entry).get("lastDecision") == want_last


def test_a_steady_hold_writes_no_new_policy_status() -> None:
    held = decision(
        PoolState("a100", 24, lower_since=FIXED_NOW - 7200, last_change=FIXED_NOW - 9000)
    )
    first = pool_status_entries(
        plan_of(held), live([{"pool": "a100", "lastDecision": EARLIER}]), now=FIXED_NOW
    )

    again = pool_status_entries(plan_of(held), live(first), now=FIXED_NOW + 60)

    assert again == first
    assert not status_changed(live(first), {"pools": as_stored(again)})


@pytest.mark.parametrize(
    "made",
    [
        pytest.param(
            decision(
                PoolState("a100", 24),
                Action.FREEZE,
                Reason.OVERRIDE,
                message="override mode Freeze keeps the mix",
            ),
            id="a frozen pool writes its status once, not every pass",
        ),
        pytest.param(
            decision(
                PoolState("a100", 24),
                reason=Reason.PROMETHEUS_UNAVAILABLE,
                message="Prometheus unreachable",
            ),
            id="a pool holding on missing history writes its status once, not every pass",
        ),
    ],
)
def test_an_unchanging_hold_writes_status_once(made: Decision) -> None:
    first = pool_status_entries(plan_of(made), live([]), now=FIXED_NOW)

    again = pool_status_entries(plan_of(made), live(first), now=FIXED_NOW + 60)

    assert not status_changed(live(first), {"pools": as_stored(again)})


def test_runtime_history_in_status_to_a_tenth() -> None:
    """The learner's decayed counts go into status rounded to tenths (a change in the fifth
    digit is no status write); none given, none written."""
    made = decision(RAISED)
    history = {"declared": 12.3456, "undeclared": 0.04}
    got = to_json(project_capacity_status(plan_of(made), "vision", {}, now=FIXED_NOW))
    assert "runtimeHistory" not in got
    got = to_json(
        project_capacity_status(plan_of(made), "vision", {}, now=FIXED_NOW, runtime_history=history)
    )
    assert got["runtimeHistory"] == {"declared": 12.3, "undeclared": 0.0}


def test_project_last_decision() -> None:
    raised = decision(RAISED, Action.RAISE, Reason.RISK_ABOVE_THRESHOLD, previous=8, message="up")
    steady = decision(RAISED)
    before = {"status": {"lastDecision": EARLIER}}

    def status(made: Decision, live: dict[str, Any]) -> dict[str, Any]:
        return dict(to_json(project_capacity_status(plan_of(made), "vision", live, now=FIXED_NOW)))

    assert status(raised, before)["lastDecision"] == {
        "time": STAMP,
        "action": "Raise",
        "reason": "RiskAboveThreshold",
        "message": "up",
    }
    assert status(steady, before)["lastDecision"] == EARLIER
    assert "lastDecision" not in status(steady, {})


# -------------------------------------------------------------------------- format_duration


@pytest.mark.parametrize(
    ("seconds", "want"),
    [
        pytest.param(0.0, "0m", id="nothing is 0m"),
        pytest.param(59.9, "0m", id="under a minute rounds down"),
        pytest.param(45 * 60.0, "45m", id="minutes alone"),
        pytest.param(3 * 3600 + 20 * 60.0, "3h20m", id="hours and minutes"),
        pytest.param(3 * 3600 + 5 * 60.0, "3h05m", id="minutes are two digits after hours"),
        pytest.param(2 * 3600.0, "2h00m", id="whole hours keep the minutes"),
        pytest.param(-(3600 + 5 * 60.0), "-1h05m", id="late by an hour and five minutes"),
        pytest.param(-30.0, "-0m", id="late by seconds keeps the sign"),
        pytest.param(86400.0, "1d0h", id="a day"),
        pytest.param(2 * 86400 + 3 * 3600 + 59 * 60.0, "2d3h", id="days drop the minutes"),
        pytest.param(-(86400 + 3600.0), "-1d1h", id="late by more than a day"),
        pytest.param(float("inf"), "inf", id="infinite slack"),
        pytest.param(float("-inf"), "-inf", id="a deadline that cannot be met"),
    ],
)
def test_format_duration(seconds: float, want: str) -> None:
    assert format_duration(seconds) == want


# ---------------------------------------------------------------------------- status_changed


def project_status(**changes: Any) -> Doc:
    status: Doc = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Applied",
                "message": "queues and quotas are in place",
                "lastTransitionTime": "2027-01-15T06:00:00Z",
            }
        ],
        "pendingGpus": 16,
        "estimatedCostDollarsPerHour": 40.0,
        "budgetExceeded": False,
        "worstDeadlineRisk": 0.3,
        "slack": "2h00m",
        "deadlines": [
            {
                "name": "release",
                "risk": 0.3,
                "slackSeconds": 7200,
                "cutoff": "2027-01-15T12:00:00Z",
                "projectedFinish": "2027-01-15T10:00:00Z",
            }
        ],
    }
    for path, value in changes.items():
        target = status
        *parents, last = path.split("__")
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if value is REMOVE:
            del target[last]
        else:
            target[last] = value
    return status


REMOVE: Any = object()


def with_deadline(extra: Doc) -> Doc:
    status = project_status()
    status["deadlines"] = [*status["deadlines"], extra]
    return status


def late_deadline(slack_seconds: int) -> Doc:
    """A second deadline that is already the tightest: its slack drives the `slack` text."""
    status = with_deadline({"name": "demo", "risk": 0.9, "slackSeconds": -7200, "cutoff": "x"})
    status["slack"] = "-2h00m"
    status["deadlines"][0]["slackSeconds"] = slack_seconds
    return status


@pytest.mark.parametrize(
    ("new", "want_changed"),
    [
        pytest.param(project_status(), False, id="the same status is no change"),
        pytest.param(project_status(worstDeadlineRisk=0.34), False, id="worst risk +0.04 is noise"),
        pytest.param(project_status(worstDeadlineRisk=0.26), False, id="worst risk -0.04 is noise"),
        pytest.param(project_status(worstDeadlineRisk=0.36), True, id="worst risk +0.06 is news"),
        pytest.param(
            project_status(deadlines__0__risk=0.33), False, id="a deadline's risk +0.03 is noise"
        ),
        pytest.param(
            project_status(deadlines__0__risk=0.4), True, id="a deadline's risk +0.1 is news"
        ),
        pytest.param(
            project_status(deadlines__0__slackSeconds=7200 + 14 * 60),
            False,
            id="slack 14 minutes longer is noise",
        ),
        pytest.param(
            project_status(deadlines__0__slackSeconds=7200 - 16 * 60),
            True,
            id="slack 16 minutes shorter is news",
        ),
        pytest.param(
            project_status(slack="2h10m", deadlines__0__slackSeconds=7800),
            False,
            id="the slack text moving within its hour is noise",
        ),
        pytest.param(
            project_status(slack="1h55m", deadlines__0__slackSeconds=6900),
            True,
            id="the slack text crossing an hour is news",
        ),
        pytest.param(
            project_status(
                deadlines__0__projectedFinish="2027-01-15T10:10:00Z",
            ),
            False,
            id="a projected finish 10 minutes later is noise",
        ),
        pytest.param(
            project_status(deadlines__0__projectedFinish="2027-01-15T10:20:00Z"),
            True,
            id="a projected finish 20 minutes later is news",
        ),
        pytest.param(
            project_status(estimatedCostDollarsPerHour=40.9), False, id="cost +$0.90/h is noise"
        ),
        pytest.param(
            project_status(estimatedCostDollarsPerHour=41.5), True, id="cost +$1.50/h is news"
        ),
        pytest.param(project_status(pendingGpus=17), True, id="one more pending GPU is news"),
        pytest.param(
            project_status(conditions__0__status="False", conditions__0__reason="ApplyFailed"),
            True,
            id="a condition changing status is news",
        ),
        pytest.param(
            project_status(conditions__0__message="quotas applied"),
            True,
            id="a condition's message changing is news",
        ),
        pytest.param(
            with_deadline({"name": "demo", "risk": 0.0, "slackSeconds": 90000, "cutoff": "x"}),
            True,
            id="a new deadline is news",
        ),
        pytest.param(
            project_status(budgetExceeded=REMOVE), True, id="a field that disappears is news"
        ),
        pytest.param(project_status(lastDecision=EARLIER), True, id="a field that appears is news"),
    ],
)
def test_status_changed(new: Doc, want_changed: bool) -> None:
    assert status_changed({"status": project_status()}, new) is want_changed


def slack(text: str, seconds: int) -> Doc:
    return project_status(slack=text, deadlines__0__slackSeconds=seconds)


@pytest.mark.parametrize(
    ("old", "new", "want_changed"),
    [
        pytest.param(slack("5m", 300), slack("-5m", -300), True, id="5m to -5m: turning late"),
        pytest.param(slack("-5m", -300), slack("5m", 300), True, id="-5m to 5m: back on time"),
        pytest.param(
            slack("2h00m", 7200), slack("5m", 300), True, id="2 hours to 5 minutes of slack"
        ),
        pytest.param(
            slack("3h50m", 13800), slack("3h40m", 13200), False, id="3h50m to 3h40m is noise"
        ),
        pytest.param(
            slack("45m", 2700),
            slack("40m", 2400),
            False,
            id="45m to 40m is noise, like 3h50m to 3h40m",
        ),
    ],
)
def test_status_changed_on_slack(old: Doc, new: Doc, want_changed: bool) -> None:
    assert status_changed({"status": old}, new) is want_changed


@pytest.mark.parametrize(
    ("old_slack", "new_slack", "want_changed"),
    [
        pytest.param(
            300,
            -300,
            True,
            id="a second deadline turning late is news though 10 minutes apart",
        ),
        pytest.param(1200, 600, False, id="a second deadline's slack moving 10 minutes is noise"),
        pytest.param(-300, -900, False, id="a late deadline 10 minutes later is noise"),
    ],
)
def test_status_changed_sees_each_deadlines_sign(
    old_slack: int, new_slack: int, want_changed: bool
) -> None:
    assert status_changed({"status": late_deadline(old_slack)}, late_deadline(new_slack)) is (
        want_changed
    )


def test_status_changed_on_an_object_without_status() -> None:
    assert status_changed({"metadata": {"name": "vision"}}, {"pendingGpus": 0})
    assert not status_changed({"status": {}}, {})
    status = project_status()
    assert not status_changed({"status": copy.deepcopy(status)}, status)


# ------------------------------------------------------------------------ conditions tell the truth

INVALID_TIER = PolicyError("cluster", "TrainingProject", "vision", "spec.tier", "unknown tier 'x'")
CREATED = "2027-01-15T06:00:00Z"


def conditions_of(status: Doc) -> dict[str, Doc]:
    return {c["type"]: c for c in status["conditions"]}


def new_project(**outcome: Any) -> dict[str, Doc]:
    """The conditions project_status writes on a project seen for the first time."""
    fields: dict[str, Any] = {"errors": (), "policy_valid": True, "quotas": ()} | outcome
    live: Doc = {"metadata": {"name": "vision", "generation": 1}}
    return conditions_of(make_project_status(live, ProjectOutcome(**fields), now=NOW_DT))


NOW_DT = datetime.fromtimestamp(FIXED_NOW, UTC)


@pytest.mark.parametrize(
    ("applied_before", "want_tail"),
    [
        pytest.param(True, "; the objects applied before are kept", id="a project with objects"),
        pytest.param(
            False, "; nothing has been applied for this project yet", id="a new invalid project"
        ),
    ],
)
def test_an_invalid_project_says_whether_anything_was_kept(
    applied_before: bool, want_tail: str
) -> None:
    valid = new_project(errors=(INVALID_TIER,), applied_before=applied_before)["Valid"]
    assert (valid["status"], valid["reason"]) == ("False", "Invalid")
    assert valid["message"] == "spec.tier: unknown tier 'x'" + want_tail
    assert (
        invalid_spec_message((INVALID_TIER,), applied_before=applied_before) == (valid["message"])
    )


def deadline_at(name: str, at: str) -> Deadline:
    return Deadline(name=name, at=datetime.fromisoformat(at))


@pytest.mark.parametrize(
    ("passed", "want"),
    [
        pytest.param(None, None, id="a spec that cannot be read: no condition"),
        pytest.param((), ("True", "NonePassed", ""), id="no one-off deadline has passed"),
        pytest.param(
            (deadline_at("launch", "2025-05-01T00:00:00+00:00"),),
            (
                "False",
                "DeadlinePassed",
                "one-off deadlines already passed: launch (2025-05-01T00:00:00Z); capacity "
                "bought now cannot help them, so they no longer drive decisions: move or "
                "remove them",
            ),
            id="one passed deadline, named with its time",
        ),
        pytest.param(
            (
                deadline_at("launch", "2025-05-01T00:00:00+00:00"),
                deadline_at("demo", "2026-12-24T10:00:00+02:00"),
            ),
            (
                "False",
                "DeadlinePassed",
                "one-off deadlines already passed: launch (2025-05-01T00:00:00Z), demo "
                "(2026-12-24T08:00:00Z); capacity bought now cannot help them, so they no "
                "longer drive decisions: move or remove them",
            ),
            id="two passed deadlines, in UTC",
        ),
    ],
)
def test_deadlines_current(
    passed: tuple[Deadline, ...] | None, want: tuple[str, str, str] | None
) -> None:
    got = new_project(passed_deadlines=passed).get("DeadlinesCurrent")
    assert (None if got is None else (got["status"], got["reason"], got["message"])) == want


def test_a_passed_deadline_writes_status_once_not_every_pass() -> None:
    """The message names the time, not how long ago, so a later pass computes the same status."""
    live: Doc = {"metadata": {"name": "vision", "generation": 1}}
    outcome = ProjectOutcome(
        errors=(),
        policy_valid=True,
        quotas=(),
        passed_deadlines=(deadline_at("launch", "2025-05-01T00:00:00+00:00"),),
    )
    first = make_project_status(live, outcome, now=NOW_DT)
    later = make_project_status({**live, "status": first}, outcome, now=NOW_DT + timedelta(hours=5))
    assert not status_changed({"status": first}, later)


# ------------------------------------------------------------------ do the Workloads reach them

NEURIPS = Deadline(name="neurips", at=NOW_DT + timedelta(days=100))
"""A one-off deadline ahead of the fixed clock (its date is in no message)."""
WEEKLY = Deadline(
    name="weekly", schedule="0 9 * * 1", match_labels={"team": "vision", "stage": "eval"}
)
JOB_LABELS_HINT = (
    "; their risk reads 0. This usually happens when Kueue made the Workloads from Jobs: Kueue "
    "copies a Job's labels to its Workload only for keys listed in its configuration's "
    "integrations.labelKeysToCopy, and copies no annotations; add {keys} there, and put them "
    "on the Jobs (JobSets, PyTorchJobs, RayJobs) as labels"
)
DURATION_KEYS = (
    "quartermaster.dev/expected-duration-seconds, quartermaster.dev/checkpoint-interval-seconds"
)


@pytest.mark.parametrize(
    ("tracking", "want"),
    [
        pytest.param(None, None, id="no risk estimated (spec or policy invalid): no condition"),
        pytest.param(
            DeadlineTracking(deadlines=(), queued=5, counted={}),
            ("True", "NoDeadlines", ""),
            id="a project without deadlines has nothing to track",
        ),
        pytest.param(
            DeadlineTracking(deadlines=(NEURIPS,), queued=0, counted={"neurips": 0}),
            ("True", "NoWorkloads", "no unfinished Workload in the project's queues yet"),
            id="no Workloads at all is not this problem",
        ),
        pytest.param(
            DeadlineTracking(deadlines=(NEURIPS,), queued=3, counted={"neurips": 1}),
            ("True", "Tracked", ""),
            id="one Workload of three counts: tracked",
        ),
        pytest.param(
            DeadlineTracking(
                deadlines=(NEURIPS, WEEKLY), queued=3, counted={"neurips": 0, "weekly": 2}
            ),
            ("True", "Tracked", ""),
            id="one deadline of two has Workloads: tracked",
        ),
        pytest.param(
            DeadlineTracking(deadlines=(NEURIPS,), queued=3, counted={"neurips": 0}),
            (
                "False",
                "NoMatchingWorkloads",
                "no unfinished Workload in the project's queues counts toward its deadlines: "
                "neurips (label quartermaster.dev/deadline=neurips)"
                + JOB_LABELS_HINT.format(keys=f"quartermaster.dev/deadline, {DURATION_KEYS}"),
            ),
            id="Workloads queued, none labelled for the deadline: the label keys to copy",
        ),
        pytest.param(
            DeadlineTracking(deadlines=(WEEKLY,), queued=1, counted={}),
            (
                "False",
                "NoMatchingWorkloads",
                "no unfinished Workload in the project's queues counts toward its deadlines: "
                "weekly (matchLabels stage=eval, team=vision)"
                + JOB_LABELS_HINT.format(keys=f"stage, team, {DURATION_KEYS}"),
            ),
            id="a matchLabels deadline names its own keys, not the deadline label",
        ),
        pytest.param(
            DeadlineTracking(
                deadlines=(NEURIPS, WEEKLY), queued=4, counted={"neurips": 0, "weekly": 0}
            ),
            (
                "False",
                "NoMatchingWorkloads",
                "no unfinished Workload in the project's queues counts toward its deadlines: "
                "neurips (label quartermaster.dev/deadline=neurips), weekly (matchLabels "
                "stage=eval, team=vision)"
                + JOB_LABELS_HINT.format(
                    keys=f"quartermaster.dev/deadline, stage, team, {DURATION_KEYS}"
                ),
            ),
            id="two deadlines, neither reached: every key each needs, once",
        ),
    ],
)
def test_deadlines_tracked(
    tracking: DeadlineTracking | None, want: tuple[str, str, str] | None
) -> None:
    got = new_project(tracking=tracking).get("DeadlinesTracked")
    assert (None if got is None else (got["status"], got["reason"], got["message"])) == want


def test_an_untracked_deadline_writes_status_once_not_every_pass() -> None:
    """The message names no counts, so more unlabelled Workloads arriving write nothing."""
    live: Doc = {"metadata": {"name": "vision", "generation": 1}}

    def outcome(queued: int) -> ProjectOutcome:
        tracking = DeadlineTracking(deadlines=(NEURIPS,), queued=queued, counted={})
        return ProjectOutcome(errors=(), policy_valid=True, quotas=(), tracking=tracking)

    first = make_project_status(live, outcome(2), now=NOW_DT)
    later = make_project_status(
        {**live, "status": first}, outcome(7), now=NOW_DT + timedelta(hours=1)
    )
    assert not status_changed({"status": first}, later)


def queued_workload(name: str, labels: dict[str, str]) -> WorkloadView:
    """A pending 8-GPU Workload in vision's LocalQueue, as Kueue made it from a Job."""
    return WorkloadView(
        namespace="vision",
        name=name,
        queue="vision",
        priority=1000,
        gpus=8,
        created=FIXED_NOW - 600,
        labels=labels,
        deadline=labels.get(names.LABEL_DEADLINE),
    )


@pytest.mark.parametrize(
    ("labels", "want_counted"),
    [
        pytest.param({}, 0, id="the Job's labels were not copied: counted toward nothing"),
        pytest.param(
            {names.LABEL_DEADLINE: "release"}, 2, id="the deadline label copied: both count"
        ),
        pytest.param(
            {names.LABEL_DEADLINE: "other"}, 0, id="labelled for a deadline the project lacks"
        ),
    ],
)
def test_the_plan_counts_what_deadlines_tracked_reads(
    labels: dict[str, str], want_counted: int
) -> None:
    """The condition's counts are the risk model's own: a Workload counts in the status exactly
    when it counts in the risk."""
    workloads = [queued_workload("train-1", labels), queued_workload("train-2", labels)]
    plan = plan_capacity(
        Observation(
            POLICY_SET,
            states={},
            workloads=workloads,
            node_claims=[],
            history=History(),
            now=FIXED_NOW,
        )
    )
    (report,) = [d for d in plan.deadlines if d.project == "vision"]
    assert (report.deadline, report.workloads) == ("release", want_counted)
    assert plan.pending_workloads["vision"] == 2


def policy_conditions(
    *, errors: tuple[PolicyError, ...], unserved: tuple[str, ...]
) -> dict[str, Doc]:
    live: Doc = {"metadata": {"name": "fleet", "generation": 1}}
    outcome = PolicyOutcome(errors=errors, projects=1, mix=(), unserved=unserved, kept=())
    return conditions_of(policy_status(live, outcome, now=NOW_DT))


INVALID_POLICY = PolicyError("cluster", "CapacityPolicy", "fleet", "spec.pools[0].maxGpus", "x")


@pytest.mark.parametrize(
    ("errors", "unserved", "want"),
    [
        pytest.param((), (), ("True", "AllServed", ""), id="a valid policy, every kind served"),
        pytest.param(
            (),
            ("apps/v1 Deployment",),
            ("False", "NotServed", "not served by this cluster, not applied: apps/v1 Deployment"),
            id="a valid policy renders a kind the cluster does not serve",
        ),
        pytest.param(
            (INVALID_POLICY,),
            ("apps/v1 Deployment",),
            (
                "False",
                "NotServed",
                "not served by this cluster: apps/v1 Deployment (the policy is invalid, so "
                "nothing is rendered; these are the kinds the controller writes that the "
                "cluster lacks)",
            ),
            id="an invalid policy does not claim AllServed when discovery lacks a kind",
        ),
        pytest.param(
            (INVALID_POLICY,),
            (),
            ("True", "AllServed", ""),
            id="an invalid policy on a cluster that serves every kind",
        ),
    ],
)
def test_kinds_served(
    errors: tuple[PolicyError, ...], unserved: tuple[str, ...], want: tuple[str, str, str]
) -> None:
    served = policy_conditions(errors=errors, unserved=unserved)["KindsServed"]
    assert (served["status"], served["reason"], served["message"]) == want


@pytest.mark.parametrize(
    ("served", "want"),
    [
        pytest.param(
            frozenset(k.group_version for k in kinds.MANAGED_KINDS), (), id="everything served"
        ),
        pytest.param(
            frozenset(k.group_version for k in kinds.MANAGED_KINDS) - {"apps/v1"},
            ("apps/v1 Deployment",),
            id="the CRD-only test server: no apps/v1",
        ),
        pytest.param(
            frozenset(),
            (
                "apps/v1 Deployment",
                "karpenter.sh/v1 NodePool",
                "keda.sh/v1alpha1 ScaledObject",
                "kueue.x-k8s.io/v1beta2 ClusterQueue",
                "kueue.x-k8s.io/v1beta2 Cohort",
                "kueue.x-k8s.io/v1beta2 LocalQueue",
                "kueue.x-k8s.io/v1beta2 ResourceFlavor",
                "kueue.x-k8s.io/v1beta2 WorkloadPriorityClass",
                "scheduling.k8s.io/v1 PriorityClass",
            ),
            id="a bare cluster",
        ),
    ],
)
def test_unserved_kinds_from_discovery(served: frozenset[str], want: tuple[str, ...]) -> None:
    assert unserved_kinds(served) == want


def test_projects_with_objects_are_read_from_the_project_label() -> None:
    def obj(kind: str, name: str, project: str | None) -> Doc:
        labels = {names.LABEL_PROJECT: project} if project else {}
        return {"kind": kind, "metadata": {"name": name, "labels": labels}}

    managed = [
        obj("ClusterQueue", "vision", "vision"),
        obj("LocalQueue", "vision", "vision"),
        obj("NodePool", "a100-spot", None),
        obj("ClusterQueue", "nlp", "nlp"),
    ]
    assert projects_with_objects(managed) == frozenset({"vision", "nlp"})


# ------------------------------------------------------ the writers and the typed classes agree

PREVIOUS: Doc = {
    "metadata": {"name": "vision", "generation": 4},
    "status": {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Applied",
                "message": "queues and quotas are in place",
                "lastTransitionTime": CREATED,
                "observedGeneration": 3,
            }
        ],
        "lastDecision": EARLIER,
    },
}
"""A project the controller has written before, with a lastDecision to carry over."""

ESTIMATED = replace(
    plan_of(decision(RAISED)),
    deadlines=(
        DeadlineReport(
            project="vision",
            deadline="release",
            cutoff=FIXED_NOW + 86400,
            estimate=Estimate(
                risk=0.31416,
                p50_finish=FIXED_NOW + 3600.7,
                p90_finish=FIXED_NOW + 7200,
                slack_seconds=82799.3,
            ),
            workloads=2,
            target=0.05,
        ),
        DeadlineReport(
            project="vision",
            deadline="stuck",
            cutoff=FIXED_NOW + 3600,
            estimate=Estimate(
                risk=1.0,
                p50_finish=float("inf"),
                p90_finish=float("inf"),
                slack_seconds=float("-inf"),
                startable=False,
            ),
            workloads=1,
            target=0.05,
        ),
    ),
    pending_gpus={"vision": 16},
    project_cost_per_hour={"vision": 12.3456},
    budget_exceeded=frozenset({"vision"}),
)
"""A steady pass that estimated two deadlines for vision, one whose work can never start."""

VISION_QUOTAS = tuple(q for (p, _), q in BASE_PLAN.rendered.quotas.items() if p == "vision")


def estimated(plan: CapacityPlan, live: Doc) -> TrainingProjectStatus:
    return project_capacity_status(plan, "vision", live, now=FIXED_NOW)


PROJECT_CASES = [
    pytest.param(
        {"metadata": {"name": "vision", "generation": 1}},
        ProjectOutcome(errors=(), policy_valid=True, quotas=VISION_QUOTAS),
        {"nominalGpus": 32, "observedGeneration": 1},
        {"deadlines", "lastDecision", "pendingGpus"},
        id="a valid project with its split and nothing estimated yet",
    ),
    pytest.param(
        PREVIOUS,
        ProjectOutcome(errors=(INVALID_TIER,), policy_valid=True, quotas=(), applied_before=True),
        {},
        {"mix", "nominalGpus", "deadlines", "lastDecision"},
        id="an invalid spec: conditions only",
    ),
    pytest.param(
        {"metadata": {"name": "vision"}},
        ProjectOutcome(
            errors=(), policy_valid=False, quotas=(), passed_deadlines=(), apply_error="x"
        ),
        {},
        {"observedGeneration", "mix"},
        id="the policy invalid: Ready false, no split",
    ),
    pytest.param(
        {"metadata": {"name": "vision", "generation": 2}},
        ProjectOutcome(
            errors=(),
            policy_valid=True,
            quotas=VISION_QUOTAS,
            capacity=estimated(ESTIMATED, {}),
            passed_deadlines=(deadline_at("launch", "2025-05-01T00:00:00+00:00"),),
            tracking=DeadlineTracking(deadlines=(NEURIPS,), queued=3, counted={}),
        ),
        {
            "worstDeadlineRisk": 1.0,
            "slack": "-inf",
            "estimatedCostDollarsPerHour": 12.35,
            "deadlines": [
                {
                    "name": "release",
                    "risk": 0.31,
                    "slackSeconds": 82799,
                    "cutoff": "2027-01-16T08:00:00Z",
                    "projectedFinish": "2027-01-15T09:00:00Z",
                    "state": "Savable",
                    "lostWorkloads": 0,
                },
                {
                    "name": "stuck",
                    "risk": 1.0,
                    "slackSeconds": -10 * 365 * 86400,
                    "cutoff": "2027-01-15T09:00:00Z",
                    "state": "Savable",
                    "lostWorkloads": 0,
                },
            ],
            "lostWorkloads": 0,
        },
        {"lastDecision"},
        id="deadlines estimated, one never finishing: its projectedFinish is left out",
    ),
    pytest.param(
        PREVIOUS,
        ProjectOutcome(
            errors=(),
            policy_valid=True,
            quotas=VISION_QUOTAS,
            capacity=estimated(plan_of(decision(RAISED)), PREVIOUS),
            applied_before=True,
        ),
        {"lastDecision": EARLIER, "observedGeneration": 4},
        set(),
        id="a steady pass carries the stored lastDecision over",
    ),
]


def undeclared(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Where `value` holds a key the schema declares no property for, or a null (which the API
    server prunes, so the stored status would differ from the written one every pass)."""
    if value is None:
        return [f"{path}: null"]
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        return [
            miss
            for key, item in value.items()
            for miss in (
                undeclared(item, properties[key], f"{path}.{key}")
                if key in properties
                else [f"{path}.{key}: not declared"]
            )
        ]
    if isinstance(value, list):
        return [
            miss
            for i, item in enumerate(value)
            for miss in undeclared(item, schema["items"], f"{path}[{i}]")
        ]
    return []


@pytest.mark.parametrize(("live_project", "outcome", "want", "absent"), PROJECT_CASES)
def test_the_project_status_written_is_its_typed_class(
    live_project: Doc, outcome: ProjectOutcome, want: Doc, absent: set[str]
) -> None:
    """Every key written is a field of TrainingProjectStatus's JSON form (its CRD schema), and
    the written status parses back to the very value it was written from."""
    typed = training_project_status(live_project, outcome, now=NOW_DT)

    written = make_project_status(live_project, outcome, now=NOW_DT)

    assert undeclared(written, object_schema(TrainingProjectStatus), "status") == []
    assert read_status(TrainingProjectStatus, {"status": json.loads(json.dumps(written))}) == (
        typed,
        (),
    )
    assert {k: written.get(k) for k in want} == want
    assert absent.isdisjoint(written)


EARLY_POOL: Doc = {"pool": "h100", "onDemandGpus": 8, "lastDecision": EARLIER}
"""h100 as an earlier pass left it: a hold in the evaluation window keeps its lastDecision."""

POLICY_CASES = [
    pytest.param(
        {"metadata": {"name": "fleet", "generation": 2}, "status": {"pools": [EARLY_POOL]}},
        PolicyOutcome(
            errors=(),
            projects=2,
            mix=ESTIMATED.rendered.mix,
            unserved=(),
            kept=(),
            pools=pool_status_entries(
                plan_of(
                    decision(RAISED, Action.RAISE, Reason.CEILING_BINDS, previous=8),
                    decision(COOLING, Action.HOLD, Reason.EVALUATION_WINDOW),
                ),
                {"status": {"pools": [EARLY_POOL]}},
                now=FIXED_NOW,
            ),
            binding=("a100: CeilingBinds",),
        ),
        {"projects": 2, "observedGeneration": 2},
        set(),
        id="a valid policy with each pool's state: a raise, and a hold keeping its decision",
    ),
    pytest.param(
        {"metadata": {"name": "fleet"}},
        PolicyOutcome(
            errors=(INVALID_POLICY,), projects=0, mix=(), unserved=("apps/v1 Deployment",), kept=()
        ),
        {"projects": 0},
        {"mix", "pools", "observedGeneration"},
        id="an invalid policy: nothing rendered, no pools",
    ),
    pytest.param(
        {"metadata": {"name": "fleet", "generation": 1}},
        PolicyOutcome(
            errors=(),
            projects=1,
            mix=ESTIMATED.rendered.mix,
            unserved=(),
            kept=("ClusterQueue old",),
            apply_error="conflict",
            history_error="Prometheus down",
        ),
        {},
        {"pools"},
        id="apply failed and Prometheus down, objects kept for their workloads",
    ),
]


@pytest.mark.parametrize(("live_policy", "outcome", "want", "absent"), POLICY_CASES)
def test_the_policy_status_written_is_its_typed_class(
    live_policy: Doc, outcome: PolicyOutcome, want: Doc, absent: set[str]
) -> None:
    typed = capacity_policy_status(live_policy, outcome, now=NOW_DT)

    written = policy_status(live_policy, outcome, now=NOW_DT)

    assert undeclared(written, object_schema(CapacityPolicyStatus), "status") == []
    assert read_status(CapacityPolicyStatus, {"status": json.loads(json.dumps(written))}) == (
        typed,
        (),
    )
    assert {k: written.get(k) for k in want} == want
    assert absent.isdisjoint(written)


READY: Doc = PREVIOUS["status"]["conditions"][0]
READY_READ = Condition(
    type="Ready",
    status=ConditionStatus.TRUE,
    reason="Applied",
    message="queues and quotas are in place",
    last_transition_time=datetime.fromisoformat(CREATED),
    observed_generation=3,
)


@pytest.mark.parametrize(
    ("stored", "want", "want_paths"),
    [
        pytest.param(None, TrainingProjectStatus(), [], id="no status yet reads as the empty one"),
        pytest.param(
            {"pendingGpus": 8, "conditions": [READY, {**READY, "status": "False"}]},
            TrainingProjectStatus(pending_gpus=8, conditions=(READY_READ,)),
            ["status.conditions[1].type"],
            id="a second condition of one type is left out on its own",
        ),
        pytest.param(
            {"pendingGpus": 8, "old.field[0]": 1, "slack": 5},
            TrainingProjectStatus(pending_gpus=8),
            ["status.old.field[0]", "status.slack"],
            id="an unknown field, even one named with dots, and a mistyped one are left out",
        ),
        pytest.param(
            ["pendingGpus"],
            TrainingProjectStatus(),
            ["status"],
            id="a status that is not an object reads as the empty one",
        ),
    ],
)
def test_read_status_leaves_out_only_what_it_cannot_read(
    stored: Any, want: TrainingProjectStatus, want_paths: list[str]
) -> None:
    got, errors = read_status(TrainingProjectStatus, {"status": stored})

    assert got == want
    assert [e.path for e in errors] == want_paths
