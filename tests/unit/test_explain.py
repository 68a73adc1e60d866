"""`quartermaster explain PROJECT`: the text an operator reads to learn why the mix moved.

The objects are written as the controller leaves them: the project's status (deadlines, split,
cost, last decision), the policy's status.pools and events.k8s.io/v1 Events. Expected output is
written out in full, column padding included.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.explain import MAX_EVENTS, format_explanation, relevant_events
from controller.risk.shortage import CapacityError, Shortages, fold
from tests.builders import set_path

Doc = dict[str, Any]
FIXED_SHORTAGE_START = 1795435200.0
"""2026-11-23T12:00:00Z, when the spot shortage below began."""

PROJECT: Doc = {
    "metadata": {"name": "vision"},
    "spec": {
        "tier": "research",
        "quotas": [{"pool": "a100", "nominalGpus": 24}],
        "deadlines": [
            {"name": "cvpr", "at": "2026-11-28T07:59:00Z", "targetConfidence": 0.95},
            {"name": "demo", "at": "2026-12-01T00:00:00Z", "targetConfidence": 0.9},
        ],
    },
    "status": {
        "conditions": [
            {
                "type": "Valid",
                "status": "True",
                "reason": "Valid",
                "message": "",
                "lastTransitionTime": "2026-11-20T09:00:00Z",
            },
            {
                "type": "Ready",
                "status": "True",
                "reason": "Applied",
                "message": "queues and quotas are in place",
                "lastTransitionTime": "2026-11-20T09:00:00Z",
            },
        ],
        "deadlines": [
            {
                "name": "cvpr",
                "risk": 0.314,
                "slackSeconds": -1800,
                "cutoff": "2026-11-28T07:59:00Z",
                "projectedFinish": "2026-11-28T08:29:00Z",
            },
            {
                "name": "demo",
                "risk": 0.0,
                "slackSeconds": 90000,
                "cutoff": "2026-12-01T00:00:00Z",
            },
        ],
        "pendingGpus": 72,
        "estimatedCostDollarsPerHour": 30.96,
        "budgetExceeded": False,
        "mix": [{"pool": "a100", "onDemandGpus": 16, "spotGpus": 8}],
        "lastDecision": {
            "time": "2026-11-27T20:10:00Z",
            "action": "Raise",
            "reason": "RiskAboveThreshold",
            "message": "risk 0.79 above 0.2: 16 -> 32 on-demand",
        },
    },
}

POLICY: Doc = {
    "metadata": {"name": "gpu-fleet"},
    "status": {
        "pools": [
            {
                "pool": "a100",
                "onDemandGpus": 32,
                "spotGpus": 92,
                "assignments": [
                    {"project": "llm-pretrain", "gpus": 4},
                    {"project": "vision", "gpus": 16},
                ],
                "deferredTiers": ["exploratory"],
                "warmPoolTargetGpus": 16,
                "raiseSince": "2026-11-27T20:00:00Z",
                "lastChange": "2026-11-27T20:10:00Z",
                "lastLower": "2026-11-27T19:30:00Z",
                "flaps": 2,
                "lastDecision": {
                    "time": "2026-11-27T20:10:00Z",
                    "action": "Raise",
                    "reason": "CeilingBinds",
                    "message": "16 -> 32 on-demand; ceiling binds",
                },
            },
            {"pool": "h100", "onDemandGpus": 16, "spotGpus": 56, "assignments": []},
        ]
    },
}


def event(time: str, reason: str, note: str, *, kind: str = "CapacityPolicy", **extra: Any) -> Doc:
    name = "gpu-fleet" if kind == "CapacityPolicy" else "vision"
    return {
        "type": "Normal",
        "reason": reason,
        "note": note,
        "regarding": {"kind": kind, "name": name},
        "eventTime": time,
        **extra,
    }


EVENTS = [
    event(
        "2026-11-27T20:10:00.000000Z",
        "RiskAboveThreshold",
        "pool a100: 16 -> 32",
        kind="TrainingProject",
    ),
    event(
        "2026-11-27T19:00:00.000000Z",
        "RiskCleared",
        "pool a100: 24 -> 16",
        series={"count": 3, "lastObservedTime": "2026-11-27T19:30:00.000000Z"},
    ),
    {
        "type": "Warning",
        "reason": "CeilingBinds",
        "note": "pool a100: ceiling binds",
        "regarding": {"kind": "CapacityPolicy", "name": "gpu-fleet"},
        "metadata": {"creationTimestamp": "2026-11-27T20:05:00Z"},
    },
]

WANT = """\
TrainingProject vision (tier research)
  Valid=True (Valid)
  Ready=True (Applied): queues and quotas are in place

Deadlines (risk = estimated probability of missing it):
  NAME  CUTOFF                RISK  TARGET  SLACK   PROJECTED FINISH
  cvpr  2026-11-28T07:59:00Z  0.31  0.05    -0.5h   2026-11-28T08:29:00Z
  demo  2026-12-01T00:00:00Z  0.00  0.10    +25.0h  never

Pending GPUs: 72   cost now: $30.96/h
Quota split:
  POOL  ON-DEMAND  SPOT
  a100  16         8
Last decision: 2026-11-27T20:10:00Z Raise (RiskAboveThreshold): risk 0.79 above 0.2: 16 -> 32 \
on-demand

Pool a100: 32 on-demand, 92 spot; held for vision: 16; warm pool target 16 GPUs
  the pool's worst deadline risk (any project's) above the raise threshold since \
2026-11-27T20:00:00Z
  mix last changed 2026-11-27T20:10:00Z
  raised again soon after a lower 2x: the cooldown before the next step back is doubled 2x
  deferred tiers (no borrowing): exploratory
  last decision 2026-11-27T20:10:00Z Raise (CeilingBinds): 16 -> 32 on-demand; ceiling binds

Recent events:
  2026-11-27T19:30:00.000000Z  Normal  RiskCleared  CapacityPolicy/gpu-fleet: pool a100: 24 -> 16 \
(x3)
  2026-11-27T20:05:00Z  Warning  CeilingBinds  CapacityPolicy/gpu-fleet: pool a100: ceiling binds
  2026-11-27T20:10:00.000000Z  Normal  RiskAboveThreshold  TrainingProject/vision: pool a100: \
16 -> 32
"""


def test_full_explanation() -> None:
    """Deadlines with targets from the spec, the split, the pool vision uses (h100 it does not
    use is left out) with what it holds for vision, and events oldest first."""
    assert format_explanation(PROJECT, POLICY, EVENTS) == WANT


def without(doc: Doc, *paths: str) -> Doc:
    out = copy.deepcopy(doc)
    for path in paths:
        *parents, last = path.split(".")
        target = out
        for part in parents:
            target = target[part]
        del target[last]
    return out


@pytest.mark.parametrize(
    ("project", "policy", "want_lines", "unwanted"),
    [
        pytest.param(
            without(PROJECT, "status.deadlines"),
            POLICY,
            ["Deadlines: none declared, or no risk estimated yet."],
            ["Deadlines (risk"],
            id="without estimates the deadline table says so",
        ),
        pytest.param(
            PROJECT,
            None,
            ["Pending GPUs: 72   cost now: $30.96/h"],
            ["Pool a100"],
            id="without the policy there is no pool section",
        ),
        pytest.param(
            {**PROJECT, "status": {**PROJECT["status"], "budgetExceeded": True}},
            POLICY,
            ["Pending GPUs: 72   cost now: $30.96/h   BUDGET EXCEEDED"],
            [],
            id="an exceeded budget is shouted",
        ),
        pytest.param(
            without(PROJECT, "spec.deadlines"),
            POLICY,
            [
                "  cvpr  2026-11-28T07:59:00Z  0.31  0.05    -0.5h   2026-11-28T08:29:00Z",
                "  demo  2026-12-01T00:00:00Z  0.00  0.05    +25.0h  never",
            ],
            [],
            id="a deadline missing from the spec has the default target 0.05",
        ),
        pytest.param(
            PROJECT,
            {
                "status": {
                    "pools": [
                        {"pool": "a100", "onDemandGpus": 16, "spotGpus": 108, "assignments": []}
                    ]
                }
            },
            ["Pool a100: 16 on-demand, 108 spot; held for vision: 0; warm pool target 0 GPUs"],
            ["since", "mix last changed", "deferred tiers", "last decision"],
            id="a quiet pool holds nothing for the project and shows no windows",
        ),
        pytest.param(
            without(PROJECT, "status.lastDecision", "status.mix"),
            POLICY,
            [],
            ["Last decision:", "Quota split:"],
            id="no split and no decision yet: neither is shown",
        ),
        pytest.param(
            set_path(PROJECT, "status.runtimeHistory", {"declared": 12.5, "undeclared": 0.0}),
            POLICY,
            [
                "Runtime estimates rest on: 12.5 finished workloads (actual over declared "
                "runtime); none without one (project median or an hour assumed) (decayed "
                "counts of the finished work the controller learned from)"
            ],
            [],
            id="the history the runtime estimates rest on",
        ),
        pytest.param(
            PROJECT,
            POLICY,
            [],
            ["Runtime estimates rest on"],
            id="no runtime history recorded: no line",
        ),
    ],
)
def test_explanation_lines(
    project: Doc, policy: Doc | None, want_lines: list[str], unwanted: list[str]
) -> None:
    text = format_explanation(project, policy, EVENTS)
    lines = text.splitlines()

    for line in want_lines:
        assert line in lines
    for fragment in unwanted:
        assert fragment not in text


def test_only_the_latest_events_are_shown() -> None:
    events = [
        event(f"2026-11-27T{h:02d}:00:00Z", "RiskCleared", f"pass {h}") for h in range(20, -1, -1)
    ]

    lines = format_explanation(PROJECT, POLICY, events).splitlines()

    shown = lines[lines.index("Recent events:") + 1 :]
    assert len(shown) == MAX_EVENTS == 15
    assert shown[0].startswith("  2026-11-27T06:00:00Z  Normal  RiskCleared")
    assert shown[-1].endswith("CapacityPolicy/gpu-fleet: pass 20")


def test_no_events_no_section() -> None:
    assert "Recent events:" not in format_explanation(PROJECT, POLICY, [])


def test_relevant_events() -> None:
    other = event("2026-11-27T20:00:00Z", "X", "y", kind="TrainingProject")
    other["regarding"]["name"] = "speech"
    events = [*EVENTS, other, {"reason": "no regarding"}]

    assert relevant_events(events, "vision", "gpu-fleet") == EVENTS
    assert relevant_events(events, "vision", None) == [EVENTS[0]]


# ---------------------------------------------------------------- statuses it cannot fully read


def edited(doc: Doc, edit: Any) -> Doc:
    out = copy.deepcopy(doc)
    edit(out)
    return out


def older_status(project: Doc) -> None:
    """A status as another controller version might leave it: a field this one does not
    declare, a condition without its reason, a deadline whose risk is out of range."""
    status = project["status"]
    status["retired"] = 1
    del status["conditions"][1]["reason"]
    status["deadlines"][0]["risk"] = 2


@pytest.mark.parametrize(
    ("project", "policy", "want_lines", "unwanted"),
    [
        pytest.param(
            edited(PROJECT, older_status),
            POLICY,
            [
                "Note: part of the status could not be read and is left out: status.retired: "
                "unknown field; status.conditions[1].reason: required field is missing; "
                "status.deadlines[0].risk: must be less than or equal to 1, got 2",
                "  Valid=True (Valid)",
                "  demo  2026-12-01T00:00:00Z  0.00  0.10    +25.0h  never",
                "Pending GPUs: 72   cost now: $30.96/h",
                "Pool a100: 32 on-demand, 92 spot; held for vision: 16; warm pool target 16 GPUs",
            ],
            ["Ready=", "cvpr"],
            id="an older status: what cannot be read is named and left out, the rest is shown",
        ),
        pytest.param(
            {**PROJECT, "status": "broken"},
            POLICY,
            [
                "Note: the status could not be read: status: must be an object, got string "
                '"broken"',
                "Deadlines: none declared, or no risk estimated yet.",
                "Pending GPUs: 0   cost now: $0.00/h",
                "Pool a100: 32 on-demand, 92 spot; held for vision: 16; warm pool target 16 GPUs",
            ],
            ["Quota split:", "Last decision:"],
            id="a status that is not an object: a note, and the spec and pools still shown",
        ),
        pytest.param(
            without(PROJECT, "status"),
            None,
            [
                "Deadlines: none declared, or no risk estimated yet.",
                "Pending GPUs: 0   cost now: $0.00/h",
            ],
            ["Note:"],
            id="a project the controller has not seen yet has no status and needs no note",
        ),
        pytest.param(
            PROJECT,
            edited(POLICY, lambda p: p["status"]["pools"][0].pop("onDemandGpus")),
            [
                "Note: part of CapacityPolicy gpu-fleet's status could not be read and is left "
                "out: status.pools[0].onDemandGpus: required field is missing",
            ],
            ["Pool a100"],
            id="a pool entry the schema refuses is left out with a note",
        ),
        pytest.param(
            edited(
                PROJECT,
                lambda p: p["status"].update({f"old{i}": i for i in range(5)}),
            ),
            None,
            [
                "Note: part of the status could not be read and is left out: status.old0: "
                "unknown field; status.old1: unknown field; status.old2: unknown field "
                "(and 2 more)",
            ],
            [],
            id="a note names three fields and counts the rest, so it stays one line",
        ),
        pytest.param(
            PROJECT,
            {**POLICY, "status": {"pools": [{"pool": "a100", "onDemandGpus": 8}]}},
            ["Pool a100: 8 on-demand, 0 spot; held for vision: 0; warm pool target 0 GPUs"],
            ["None", "Note:"],
            id="a pool entry without its optional fields shows their defaults, never None",
        ),
    ],
)
def test_a_status_it_cannot_fully_read(
    project: Doc, policy: Doc | None, want_lines: list[str], unwanted: list[str]
) -> None:
    text = format_explanation(project, policy, [])
    lines = text.splitlines()

    for line in want_lines:
        assert line in lines
    for fragment in unwanted:
        assert fragment not in text


def lane_workload(
    name: str,
    *,
    queue: str = "vision",
    lane: str | None = "on-demand",
    reason: str = "spot needs 44340s, on-demand 39900s",
    conditions: tuple[str, ...] = (),
    moving: bool = False,
) -> Doc:
    annotations = {"quartermaster.dev/expected-duration-seconds": "27000"}
    if lane is not None:
        annotations |= {"quartermaster.dev/lane": lane, "quartermaster.dev/lane-reason": reason}
    if moving:
        annotations["quartermaster.dev/moving-to"] = "on-demand"
    return {
        "metadata": {"namespace": "vision", "name": name, "annotations": annotations},
        "spec": {"queueName": queue},
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }


LANE_CASES = {
    "a waiting workload in a lane, with its reason": (
        [lane_workload("cvpr-2")],
        [
            "Lanes (1 workload(s) put on a capacity type by the controller):",
            "  WORKLOAD       LANE       STATE    WHY",
            "  vision/cvpr-2  on-demand  waiting  spot needs 44340s, on-demand 39900s",
        ],
    ),
    "admitted ones too, sorted; finished, unlaned and other queues' left out": (
        [
            lane_workload("cvpr-9", conditions=("QuotaReserved", "Admitted")),
            lane_workload("cvpr-1", reason="r"),
            lane_workload("done", conditions=("Admitted", "Finished")),
            lane_workload("plain", lane=None),
            lane_workload("other", queue="nlp-eval"),
        ],
        [
            "Lanes (2 workload(s) put on a capacity type by the controller):",
            "  WORKLOAD       LANE       STATE     WHY",
            "  vision/cvpr-1  on-demand  waiting   r",
            "  vision/cvpr-9  on-demand  admitted  spot needs 44340s, on-demand 39900s",
        ],
    ),
    "one being moved (deactivated, not yet activated again): moving, admitted or not": (
        [
            lane_workload("cvpr-3", moving=True),
            lane_workload("cvpr-4", moving=True, conditions=("QuotaReserved", "Admitted")),
        ],
        [
            "Lanes (2 workload(s) put on a capacity type by the controller):",
            "  WORKLOAD       LANE       STATE   WHY",
            "  vision/cvpr-3  on-demand  moving  spot needs 44340s, on-demand 39900s",
            "  vision/cvpr-4  on-demand  moving  spot needs 44340s, on-demand 39900s",
        ],
    ),
    "none: no section": ([lane_workload("plain", lane=None)], []),
}


@pytest.mark.parametrize(("workloads", "want"), LANE_CASES.values(), ids=LANE_CASES.keys())
def test_lanes_of_the_project(workloads: list[Doc], want: list[str]) -> None:
    text = format_explanation(PROJECT, POLICY, EVENTS, workloads)
    lines = text.splitlines()
    if want:
        start = lines.index(want[0])
        assert lines[start : start + len(want)] == want
        assert lines[start - 1] == "", "a section of its own"
    else:
        assert "Lanes (" not in text
        assert text == format_explanation(PROJECT, POLICY, EVENTS)


def test_a_pool_of_the_project_in_a_spot_shortage_is_shown_since_when_and_for_how_long() -> None:
    started = FIXED_SHORTAGE_START
    shortages = fold(
        Shortages(),
        [
            CapacityError("a100", started, "e1"),
            CapacityError("h100", started, "e2"),  # not a pool of this project
        ],
        [],
        now=started + 120,
    )
    text = format_explanation(PROJECT, None, [], shortages=(shortages, started + 120))
    assert (
        "Spot shortage in pool a100: Karpenter's launches failing for capacity since "
        "2026-11-23T12:00:00Z; a spot launch is expected to wait 15m more (the lanes count it)"
    ) in text
    assert "h100" not in text
    # Ten quiet minutes after the last error it is over, and not shown.
    quiet = format_explanation(PROJECT, None, [], shortages=(shortages, started + 601))
    assert "Spot shortage" not in quiet


@pytest.mark.parametrize(
    ("errors", "want"),
    [
        pytest.param(
            [CapacityError("a100", FIXED_SHORTAGE_START, "e1")],
            "Spot shortage in pool a100: Karpenter's launches failing for capacity since "
            "2026-11-23T12:00:00Z in every zone it launches in (us-a, us-b); a spot launch is "
            "expected to wait 7m more (the lanes count it)",
            id="every zone short: which, and the first back expected in 900 / 2 s",
        ),
        pytest.param(
            [CapacityError("a100", FIXED_SHORTAGE_START, "e1", frozenset({"us-b"}))],
            "Spot shortage in pool a100 in zone(s) us-b only: Karpenter launches spot in us-a, "
            "so no wait is counted",
            id="one zone of two short: shown, no wait",
        ),
    ],
)
def test_the_zones_of_a_pool_in_a_spot_shortage_are_shown(
    errors: list[CapacityError], want: str
) -> None:
    now = FIXED_SHORTAGE_START + 120
    shortages = fold(Shortages(), errors, [], now=now, zones={"a100": ["us-a", "us-b"]})
    text = format_explanation(PROJECT, None, [], shortages=(shortages, now))
    assert want in text.splitlines()


def with_lost(count: int, listed: list[Doc]) -> Doc:
    project = copy.deepcopy(PROJECT)
    project["status"]["lostWorkloads"] = count
    project["status"]["lost"] = listed
    project["status"]["deadlines"][0]["state"] = "Lost" if count else "Savable"
    project["status"]["deadlines"][0]["lostWorkloads"] = count
    return project


HOPELESS = {"namespace": "vision", "name": "big-run", "deadline": "cvpr", "chance": 0.0036}
SLIM = {"namespace": "vision", "name": "long-eval", "deadline": "cvpr", "chance": 0.041}
LOST_TITLE = (
    "Lost: {} waiting workload(s) cannot make their deadline even if started now (still "
    "admitted; chance = of finishing in time):"
)


@pytest.mark.parametrize(
    ("project", "want"),
    [
        pytest.param(with_lost(0, []), [], id="none lost: no section"),
        pytest.param(
            with_lost(2, [HOPELESS, SLIM]),
            [
                LOST_TITLE.format(2),
                "  WORKLOAD          DEADLINE  CHANCE",
                "  vision/big-run    cvpr      0.4%",
                "  vision/long-eval  cvpr      4.1%",
            ],
            id="each lost workload with its deadline and chance",
        ),
        pytest.param(
            with_lost(25, [HOPELESS]),
            [
                LOST_TITLE.format(25),
                "  WORKLOAD        DEADLINE  CHANCE",
                "  vision/big-run  cvpr      0.4%",
                "  and 24 more",
            ],
            id="more lost than the status names: the rest counted",
        ),
    ],
)
def test_the_lost_workloads_of_the_project_are_listed_after_its_deadlines(
    project: Doc, want: list[str]
) -> None:
    lines = format_explanation(project, None, []).splitlines()
    shown = lines[lines.index("  demo  2026-12-01T00:00:00Z  0.00  0.10    +25.0h  never") + 1 :]
    section = shown[1 : shown.index("", 1)] if want else []
    assert section == want
