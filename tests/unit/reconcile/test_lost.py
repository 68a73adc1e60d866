"""Telling a team a deadline is lost: the project status, the DeadlineLost Event (once per
Workload) and the metric, on plans and on the in-memory stand-in for the API server (a fake,
said so). That a real server takes all three is tests/integration/test_lost.py's part.

By hand, as in test_lane_writes: vision-research's cvpr-submission cutoff is 43,140 s after
FIXED_NOW. A one-node Workload declared at 86,400 s (spread 0.25) started now, after the a100's
420 s launch, finishes in time with chance
Phi((ln 42,720 - ln 86,400 + 0.25^2 / 2) / 0.25) = Phi(-2.69) = 0.36 %: lost (under 5 %).
One declared at 3,600 s is savable.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any, Literal, cast

import pytest

from controller.api.introspect import to_json
from controller.api.types import MAX_LOST_LISTED, DeadlineState, Tier, TrainingProjectStatus
from controller.api.types import LostWorkload as LostEntry
from controller.decide.plan import CapacityPlan
from controller.kube.client import KubeClient
from controller.metrics import Metrics
from controller.reconcile.lost import lost_note, to_tell, told_before
from controller.reconcile.reconciler import Reconciler
from controller.reconcile.status import project_capacity_status, status_changed
from controller.risk.model import LostWorkload
from testenv.memoryserver import MemoryServer
from tests.unit.reconcile.test_lane_writes import FIXED_NOW, store, workload
from tests.unit.reconcile.test_status import BASE_PLAN
from tests.unit.reconcile.test_status import FIXED_NOW as STATUS_NOW

__all__ = ["store"]  # the fixture, shared with test_lane_writes

Key = tuple[str, str]
CUTOFF = 1_800_000_000.0 + 86_400  # any time: only echoed


def lost(project: str, deadline: str, chance: float) -> LostWorkload:
    return LostWorkload(chance, project, deadline, CUTOFF)


def plan_losing(judged: dict[Key, LostWorkload]) -> CapacityPlan:
    """The status test's plan (vision has the deadline `release`) with these lost."""
    return replace(BASE_PLAN, lost={k: v.chance for k, v in judged.items()}, lost_deadlines=judged)


# ------------------------------------------------------------------------------- status


@pytest.mark.parametrize(
    ("judged", "want_state", "want_count", "want_listed"),
    [
        pytest.param({}, DeadlineState.SAVABLE, 0, [], id="none lost: Savable, 0"),
        pytest.param(
            {
                ("v2", "b"): lost("vision", "release", 0.0123),
                ("v1", "z"): lost("vision", "release", 0.04),
                ("n", "other"): lost("nlp", "nightly", 0.0),
            },
            DeadlineState.LOST,
            2,
            [("v1", "z", 0.04), ("v2", "b", 0.012)],
            id="two of its own lost: Lost, 2, by namespace and name, chance to 0.1 %",
        ),
        pytest.param(
            {("v", f"w{i:02d}"): lost("vision", "release", 0.01) for i in range(25)},
            DeadlineState.LOST,
            25,
            [("v", f"w{i:02d}", 0.01) for i in range(MAX_LOST_LISTED)],
            id="more than the status names: all counted, the first 20 named",
        ),
    ],
)
def test_the_status_says_which_deadline_is_lost_and_names_the_workloads(
    judged: dict[Key, LostWorkload],
    want_state: DeadlineState,
    want_count: int,
    want_listed: list[tuple[str, str, float]],
) -> None:
    status = project_capacity_status(plan_losing(judged), "vision", {}, now=STATUS_NOW)

    (release,) = status.deadlines
    assert (release.name, release.state, release.lost_workloads) == (
        "release",
        want_state,
        want_count,
    )
    assert status.lost_workloads == want_count
    assert [(w.namespace, w.name, w.chance) for w in status.lost] == want_listed
    assert {w.deadline for w in status.lost} <= {"release"}
    assert to_json(release)["state"] == want_state.value


def stored_status(judged: dict[Key, LostWorkload]) -> dict[str, Any]:
    status = project_capacity_status(plan_losing(judged), "vision", {}, now=STATUS_NOW)
    return cast(dict[str, Any], to_json(status))


A, B = ("v", "a"), ("v", "b")


@pytest.mark.parametrize(
    ("before", "after", "want_changed"),
    [
        pytest.param(
            {A: lost("vision", "release", 0.01)},
            {A: lost("vision", "release", 0.03)},
            False,
            id="a lost workload's chance moving is noise",
        ),
        pytest.param(
            {A: lost("vision", "release", 0.01)},
            {A: lost("vision", "release", 0.01), B: lost("vision", "release", 0.02)},
            True,
            id="one more lost is news",
        ),
        pytest.param({}, {A: lost("vision", "release", 0.01)}, True, id="turning Lost is news"),
        pytest.param({A: lost("vision", "release", 0.01)}, {}, True, id="turning Savable is news"),
    ],
)
def test_only_news_of_lost_work_rewrites_the_status(
    before: dict[Key, LostWorkload], after: dict[Key, LostWorkload], want_changed: bool
) -> None:
    live = {"status": stored_status(before)}
    assert status_changed(live, stored_status(after)) is want_changed


# ------------------------------------------------------------------------------- Events


DEMOTING = Tier(name="research", priority=1000, demote_lost=True)
KEEPING = Tier(name="production", priority=100000)


@pytest.mark.parametrize(
    ("tier", "want"),
    [
        pytest.param(
            DEMOTING,
            "deadline cvpr (2027-01-16T08:00:00Z) of project vision is lost for this workload: "
            "even started now it has a 0.4% chance to finish in time (under risk.lostBelow 5%); "
            "it is still admitted, after the savable work of its queue for at most 1d0h since "
            "it was created",
            id="a demoting tier says it waits behind savable work, for how long",
        ),
        pytest.param(
            KEEPING,
            "deadline cvpr (2027-01-16T08:00:00Z) of project vision is lost for this workload: "
            "even started now it has a 0.4% chance to finish in time (under risk.lostBelow 5%); "
            "it is still admitted in its deadline order (its tier does not demote lost work)",
            id="a tier that keeps the order says so",
        ),
    ],
)
def test_the_event_note_names_the_deadline_the_chance_and_the_order(tier: Tier, want: str) -> None:
    judged = LostWorkload(0.0036, "vision", "cvpr", 1_800_000_000.0 + 86_400)
    note = lost_note(judged, lost_below=0.05, tier=tier, max_wait_seconds=86_400)
    assert note == want


@pytest.mark.parametrize(
    ("lost_now", "told", "unfinished", "want_tell", "want_kept"),
    [
        pytest.param({A}, set(), {A}, [A], set(), id="newly lost: told"),
        pytest.param({A}, {A}, {A}, [], {A}, id="told before: not again"),
        pytest.param({A, B}, {A}, {A, B}, [B], {A}, id="only the new one"),
        pytest.param(set(), {A}, {A}, [], {A}, id="savable again: still remembered"),
        pytest.param({A}, {A}, set(), [], set(), id="finished or deleted: forgotten"),
        pytest.param({A}, set(), set(), [], set(), id="not among the live Workloads: not told"),
    ],
)
def test_each_lost_workload_is_told_once_while_it_exists(
    lost_now: set[Key],
    told: set[Key],
    unfinished: set[Key],
    want_tell: list[Key],
    want_kept: set[Key],
) -> None:
    judged = {key: lost("vision", "release", 0.0) for key in lost_now}
    assert to_tell(judged, told, unfinished) == (want_tell, want_kept)


def test_a_restart_starts_from_the_workloads_the_statuses_name() -> None:
    status = TrainingProjectStatus(lost_workloads=1, lost=stored_lost())
    projects = [
        {"metadata": {"name": "vision"}, "status": to_json(status)},
        {"metadata": {"name": "nlp"}},
        {"metadata": {"name": "odd"}, "status": {"lost": [{"namespace": "x"}]}},
    ]
    assert told_before(projects) == {("vision", "cvpr-hopeless")}


def stored_lost() -> tuple[LostEntry, ...]:
    return (
        LostEntry(namespace="vision", name="cvpr-hopeless", deadline="cvpr-submission", chance=0),
    )


class Recorder:
    """An EventSink that keeps what it is given."""

    def __init__(self) -> None:
        self.emitted: list[tuple[str, str, str, str]] = []

    def emit(
        self,
        regarding: Any,
        *,
        type: Literal["Normal", "Warning"],
        reason: str,
        action: str,
        note: str,
    ) -> str | None:
        self.emitted.append((regarding["metadata"]["name"], type, reason, note))
        return f"event-{len(self.emitted)}"


def passes(server: MemoryServer, events: Recorder, metrics: Metrics | None = None) -> Reconciler:
    return Reconciler(
        cast(KubeClient, server), wall_clock=lambda: FIXED_NOW, events=events, metrics=metrics
    )


def test_a_lost_workload_gets_one_event_a_status_and_a_metric(store: MemoryServer) -> None:
    store.put(workload("cvpr-hopeless", 86_400))
    events, metrics = Recorder(), Metrics()
    reconciler = passes(store, events, metrics)

    result = reconciler.reconcile(store.snapshot())

    assert result.capacity is not None
    assert set(result.capacity.lost) == {("vision", "cvpr-hopeless")}
    assert result.capacity.lost[("vision", "cvpr-hopeless")] == pytest.approx(0.0036, abs=2e-4)
    told = [e for e in events.emitted if e[2] == "DeadlineLost"]
    assert [(name, kind) for name, kind, _, _ in told] == [("cvpr-hopeless", "Warning")]
    assert "deadline cvpr-submission (2026-11-28T07:59:00Z)" in told[0][3]
    assert "0.4% chance" in told[0][3]
    assert result.lost_told == 1

    project = store.objects[("TrainingProject", "", "vision-research")]
    cvpr = next(d for d in project["status"]["deadlines"] if d["name"] == "cvpr-submission")
    assert (cvpr["state"], cvpr["lostWorkloads"]) == ("Lost", 1)
    assert project["status"]["lostWorkloads"] == 1
    assert [w["name"] for w in project["status"]["lost"]] == ["cvpr-hopeless"]
    sample = metrics.registry.get_sample_value
    assert sample("quartermaster_lost_workloads", {"project": "vision-research"}) == 1
    assert sample("quartermaster_lost_workloads", {"project": "recsys-prod"}) == 0

    # The next pass, and a restarted controller reading the status back, tell no one again.
    assert reconciler.reconcile(store.snapshot()).lost_told == 0
    restarted = Recorder()
    assert passes(store, restarted).reconcile(store.snapshot()).lost_told == 0
    assert [e[0] for e in events.emitted if e[2] == "DeadlineLost"] == ["cvpr-hopeless"]
    assert not [e for e in restarted.emitted if e[2] == "DeadlineLost"]


def test_a_new_workload_of_the_same_name_is_told_again(store: MemoryServer) -> None:
    """Told is remembered while the Workload exists: one deleted and made again is news."""
    store.put(workload("cvpr-hopeless", 86_400))
    events = Recorder()
    reconciler = passes(store, events)
    reconciler.reconcile(store.snapshot())
    gone = copy.deepcopy(store.objects.pop(("Workload", "vision", "cvpr-hopeless")))
    reconciler.reconcile(store.snapshot())
    store.put(gone)
    reconciler.reconcile(store.snapshot())
    assert [e[0] for e in events.emitted if e[2] == "DeadlineLost"] == ["cvpr-hopeless"] * 2


def test_without_an_event_sink_nothing_is_told_but_the_status_still_says_it(
    store: MemoryServer,
) -> None:
    store.put(workload("cvpr-hopeless", 86_400))
    result = Reconciler(cast(KubeClient, store), wall_clock=lambda: FIXED_NOW).reconcile(
        store.snapshot()
    )
    assert result.lost_told == 0
    project = store.objects[("TrainingProject", "", "vision-research")]
    assert project["status"]["lostWorkloads"] == 1
