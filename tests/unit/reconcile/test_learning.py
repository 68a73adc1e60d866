"""The controller's learning between passes, on constructed Workloads and deadline reports:
finished work counted once, a deadline occurrence judged once its outcome is known (met when
its work finished by the cutoff, missed at the first pass after it), and the calibrated risk
from what was judged."""

from __future__ import annotations

import json

import pytest

from controller.api.loader import load_policy_set
from controller.api.policy_set import PolicySet
from controller.reconcile.learning import OutcomeLearning
from controller.risk.deadline import Estimate
from controller.risk.model import DeadlineReport
from controller.risk.recalibration import fit_judged
from controller.risk.workloads import WorkloadView
from tests.builders import policy_doc, pool_doc, project_doc

CUTOFF = 10_000.0
POLICY_SET: PolicySet = load_policy_set(
    [
        ("policy.yaml", policy_doc(pools=[pool_doc()])),
        (
            "vision.yaml",
            project_doc(
                "vision",
                quotas=[{"pool": "a100", "nominalGpus": 16}],
                deadlines=[{"name": "release", "at": "2027-03-01T00:00:00Z"}],
            ),
        ),
    ]
)


def workload(
    name: str,
    *,
    admitted_at: float | None = 0.0,
    finished_at: float | None = None,
    declared: float | None = 1000.0,
) -> WorkloadView:
    return WorkloadView(
        namespace="vision",
        name=name,
        queue="vision",
        priority=0,
        gpus=1,
        created=0.0,
        admitted_at=admitted_at,
        finished=finished_at is not None,
        finished_at=finished_at,
        expected_duration=declared,
        deadline="release",
    )


def report(risk: float, *, workloads: int = 1, cutoff: float = CUTOFF) -> DeadlineReport:
    estimate = Estimate(risk=risk, p50_finish=0.0, p90_finish=0.0, slack_seconds=0.0)
    return DeadlineReport("vision", "release", cutoff, estimate, workloads, target=0.05)


def test_a_finished_workload_is_learned_once_with_its_runtime_over_its_declaration() -> None:
    """Admitted at 0, finished at 2,000, declaring 1,000: a ratio of 2, counted once however
    many passes see it; an unfinished one teaches nothing."""
    learning = OutcomeLearning()
    done = workload("a", finished_at=2000.0)
    assert learning.learn(POLICY_SET, [done, workload("b")]) == 1
    assert learning.learn(POLICY_SET, [done]) == 0
    history = learning.runtimes.history("vision")
    assert history == {"declared": pytest.approx(1.0), "undeclared": 0.0}
    estimate = learning.runtimes.declared("vision", 1000.0, queue="vision", prior_sigma=0.25)
    assert estimate.source == "queue" and estimate.median_seconds > 1000.0


def test_met_once_its_workloads_finished_before_the_cutoff() -> None:
    """Estimated at 100 with a running; a finishes at 5,000 (before the cutoff): the pass at
    6,000 judges the estimate met, once."""
    learning = OutcomeLearning()
    running = [workload("a")]
    learning.judge(POLICY_SET, [report(0.3)], running, 100.0)
    assert learning.ledger.pending_count() == 1
    finished = [workload("a", finished_at=5000.0)]
    learning.judge(POLICY_SET, [report(0.0, workloads=0)], finished, 6000.0)
    assert [(j.risk, j.missed, j.resolved_at) for j in learning.ledger.judged] == [
        (0.3, False, 6000.0)
    ]
    learning.judge(POLICY_SET, [], finished, 20_000.0)
    assert len(learning.ledger.judged) == 1, "judged once"


@pytest.mark.parametrize(
    ("later", "missed"),
    [
        pytest.param(workload("a"), True, id="still running after the cutoff"),
        pytest.param(workload("a", finished_at=CUTOFF + 1), True, id="finished after it"),
        pytest.param(workload("a", finished_at=CUTOFF), False, id="finished at it"),
    ],
)
def test_judged_at_the_first_pass_after_the_cutoff(later: WorkloadView, missed: bool) -> None:
    learning = OutcomeLearning()
    learning.judge(POLICY_SET, [report(0.4)], [workload("a")], 100.0)
    learning.judge(POLICY_SET, [report(0.5)], [workload("a")], 2000.0)
    learning.judge(POLICY_SET, [report(0.6)], [workload("a")], CUTOFF)
    assert not learning.ledger.judged, "not before the cutoff has passed"
    assert learning.ledger.pending_count() == 2, "none recorded at the cutoff itself"
    learning.judge(POLICY_SET, [], [later], CUTOFF + 5)
    assert [j.missed for j in learning.ledger.judged] == [missed, missed]


def test_a_workload_gone_before_it_was_seen_finished() -> None:
    """Deleted with its Job: late only if last seen unfinished after the cutoff."""
    learning = OutcomeLearning()
    learning.judge(POLICY_SET, [report(0.4)], [workload("a")], 100.0)
    learning.judge(POLICY_SET, [], [], 200.0)
    assert [j.missed for j in learning.ledger.judged] == [False]


def test_the_calibrated_risk_comes_from_what_was_judged() -> None:
    """One deadline judged missed at risk 0.2: the isotonic map is 1 everywhere, weighed
    1 / (1 + 20) against the identity (one deadline, strength 20), one map for every tier:
    a raw 0.2 becomes w * 1 + (1 - w) * 0.2 = 5/21."""
    learning = OutcomeLearning()
    first = learning.judge(POLICY_SET, [report(0.2)], [workload("a")], 100.0)
    assert first == {("vision", "release"): 0.2}, "nothing judged yet: the raw risk"
    running = [workload("a"), workload("b")]
    got = learning.judge(POLICY_SET, [report(0.2, cutoff=2 * CUTOFF)], running, CUTOFF + 1)
    w = 1 / 21
    assert got[("vision", "release")] == pytest.approx(w * 1 + (1 - w) * 0.2)
    assert learning.fits == 1


def restarted(learning: OutcomeLearning) -> OutcomeLearning:
    """The learning a new controller reads back from what this one kept (through JSON)."""
    return OutcomeLearning.from_summary(json.loads(json.dumps(learning.summary())))


def test_a_deadline_estimated_before_a_restart_is_judged_after_it() -> None:
    """Estimated at 100 with a running; the controller restarts; a is still running after the
    cutoff: the estimate made before the restart is judged missed, once."""
    learning = restarted(_estimated())
    learning.judge(POLICY_SET, [], [workload("a")], CUTOFF + 5)
    assert [(j.risk, j.missed) for j in learning.ledger.judged] == [(0.4, True)]
    learning.judge(POLICY_SET, [], [workload("a")], CUTOFF + 50)
    assert len(learning.ledger.judged) == 1


def _estimated() -> OutcomeLearning:
    learning = OutcomeLearning()
    learning.judge(POLICY_SET, [report(0.4)], [workload("a")], 100.0)
    return learning


def test_a_restart_fits_the_same_recalibration_even_between_refits() -> None:
    """Forty deadlines judged one by one, the last too few to refit for (5 % of the 39 fitted
    on is 1.95): the restored learning maps risks as the running one does, not as a fit on
    all forty would, and both refit at the next judgement."""
    learning = OutcomeLearning()
    for i in range(40):
        cutoff = 1000.0 * (i + 1)
        learning.judge(
            POLICY_SET, [report(0.1 + 0.02 * i, cutoff=cutoff)], [workload("a")], cutoff - 500
        )
        learning.judge(POLICY_SET, [], [workload("a")] if i % 3 else [], cutoff + 1)
    assert learning.summary()["sinceFit"] == 1
    on_all = fit_judged(list(learning.ledger.judged))
    assert on_all("research", 0.9) != learning.recalibration("research", 0.9)
    restored = restarted(learning)
    grid = [i / 10 for i in range(11)]
    assert [restored.recalibration("research", r) for r in grid] == [
        learning.recalibration("research", r) for r in grid
    ]
    fits = learning.fits
    for each in (learning, restored):
        each.judge(POLICY_SET, [report(0.5, cutoff=60_000.0)], [workload("a")], 59_000.0)
        each.judge(POLICY_SET, [], [], 60_001.0)
    assert learning.fits == fits + 1
    assert [restored.recalibration("research", r) for r in grid] == [
        learning.recalibration("research", r) for r in grid
    ]


def test_the_revision_moves_with_what_a_summary_would_show() -> None:
    learning = OutcomeLearning()
    assert learning.revision == 0
    learning.judge(POLICY_SET, [report(0.4)], [workload("a")], 100.0)
    opened = learning.revision
    assert opened > 0
    learning.judge(POLICY_SET, [report(0.4)], [workload("a")], 200.0)
    assert learning.revision == opened, "a second sighting within the interval: nothing new"
    learning.learn(POLICY_SET, [workload("a", finished_at=300.0)])
    assert learning.revision == opened + 1
    learning.judge(POLICY_SET, [], [workload("a", finished_at=300.0)], 400.0)
    assert learning.revision > opened + 1
    assert [j.missed for j in learning.judged_last] == [False]
    learning.judge(POLICY_SET, [], [], 500.0)
    assert learning.judged_last == ()


def test_a_deadline_keeps_only_the_work_that_can_still_decide_it() -> None:
    """Far from its cutoff, a deadline lets go of the Workloads whose part is settled: a,
    finished at 500, is kept (as finished) only while it is listed, and not counted again;
    c, gone unfinished at 600, is taken as finished then; b, still running, is what is left.
    The outcome is the one keeping them all gives: met once b finishes by the cutoff."""
    learning = OutcomeLearning()
    learning.judge(POLICY_SET, [report(0.4, workloads=3)], [workload(n) for n in "abc"], 100.0)
    listed = [workload("a", finished_at=500.0), workload("b")]
    learning.judge(POLICY_SET, [report(0.4, workloads=2)], listed, 600.0)
    (opened,) = learning.summary()["open"].values()
    assert opened["members"] == [["vision", "b", 600.0]]
    assert opened["finished"] == [["vision", "a", 500.0]]
    revision = learning.revision
    learning.judge(POLICY_SET, [report(0.4, workloads=2)], listed, 700.0)
    assert learning.revision == revision, "a, finished and still listed, is not counted again"
    learning.judge(POLICY_SET, [report(0.4, workloads=1)], [workload("b")], 800.0)
    (opened,) = learning.summary()["open"].values()
    assert opened["finished"] == [], "a is no longer listed"
    assert opened["members"] == [["vision", "b", 800.0]]
    assert not learning.ledger.judged
    learning.judge(POLICY_SET, [], [workload("b", finished_at=CUTOFF - 1)], CUTOFF - 1)
    assert [j.missed for j in learning.ledger.judged] == [False]
    assert learning.summary()["open"] == {}


def test_a_settled_member_does_not_hide_a_late_one() -> None:
    """a finished by the cutoff and let go; b still running after it: missed."""
    learning = OutcomeLearning()
    learning.judge(POLICY_SET, [report(0.4, workloads=2)], [workload("a"), workload("b")], 100.0)
    learning.judge(POLICY_SET, [], [workload("a", finished_at=300.0), workload("b")], 400.0)
    learning.judge(POLICY_SET, [], [workload("b")], CUTOFF + 1)
    assert [j.missed for j in learning.ledger.judged] == [True]
