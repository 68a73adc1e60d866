"""The replay's online judging and recalibration, on constructed groups worked out by hand,
and on a replay: judged only once the outcome could be seen, with the outcome the replay gives
after the run, and runtimes learned only from what finished."""

from __future__ import annotations

import math

import pytest

from controller.risk.recalibration import deadline_id
from controller.sim.engine import POLICY, Replay
from controller.sim.judging import OnlineCalibration
from controller.sim.model import SimJob
from tests.unit.sim.test_engine import random_scenario

GROUP = ("p", "d1")


def finishes(**done: float) -> dict[int, float]:
    """job index -> finish, from keyword names j0, j1, ..."""
    return {int(name[1:]): at for name, at in done.items()}


def judge(online: OnlineCalibration, now: float, done: dict[int, float]) -> int:
    return online.judge(now, done.get)


def online_of(
    *submits: float, strength: float = 20.0, refit_min_new: int = 50, refit_growth: float = 0.05
) -> OnlineCalibration:
    return OnlineCalibration(
        {GROUP: [(s, i) for i, s in enumerate(submits)]},
        strength=strength,
        refit_min_new=refit_min_new,
        refit_growth=refit_growth,
    )


def test_met_once_its_members_finished_and_missed_only_after_the_cutoff() -> None:
    """Job 0 from 0, job 1 from 100; cutoff 1000. The estimate at 50 counts job 0 only: met
    at the pass at 500 (job 0 done at 400). The one at 150 counts job 1 too, still running:
    open at 500, open at the cutoff itself (a finish at 1000 would still meet it), missed at
    the first pass after it."""
    online = online_of(0.0, 100.0)
    online.estimate(50.0, *GROUP, cutoff=1000.0, tier="production", risk=0.2)
    online.estimate(150.0, *GROUP, cutoff=1000.0, tier="production", risk=0.7)
    assert judge(online, 300.0, {}) == 0
    assert judge(online, 500.0, finishes(j0=400.0)) == 1
    assert judge(online, 1000.0, finishes(j0=400.0)) == 0
    assert judge(online, 1001.0, finishes(j0=400.0)) == 1
    got = [(j.risk, j.missed, j.resolved_at, j.deadline_id) for j in online.judged]
    assert got == [(0.2, False, 500.0, "p/d1@1000"), (0.7, True, 1001.0, "p/d1@1000")]
    assert online.open_count() == 0


@pytest.mark.parametrize(
    ("finish_of_1", "missed"),
    [
        pytest.param(1100.0, True, id="finished after the cutoff, before the pass: missed"),
        pytest.param(1000.0, False, id="finished at the cutoff: met"),
    ],
)
def test_after_the_cutoff_a_member_finished_late_misses_it(
    finish_of_1: float, missed: bool
) -> None:
    """No pass before the cutoff: at 1200 both are judged. The estimate at 50 counts only job
    0 (done at 400, met) whatever job 1 did: job 1 came after it."""
    online = online_of(0.0, 100.0)
    online.estimate(50.0, *GROUP, cutoff=1000.0, tier="t", risk=0.1)
    online.estimate(150.0, *GROUP, cutoff=1000.0, tier="t", risk=0.5)
    assert judge(online, 1200.0, finishes(j0=400.0, j1=finish_of_1)) == 2
    assert [(j.at, j.missed) for j in online.judged] == [(50.0, False), (150.0, missed)]


def test_a_job_not_yet_submitted_neither_holds_an_estimate_open_nor_misses_it() -> None:
    """Job 1 arrives at 600, after the estimate at 50: the estimate is met at 500 once job 0
    finished, though job 1 (unknown then) will run past the cutoff."""
    online = online_of(0.0, 600.0)
    online.estimate(50.0, *GROUP, cutoff=1000.0, tier="t", risk=0.3)
    assert judge(online, 500.0, finishes(j0=400.0)) == 1
    assert [j.missed for j in online.judged] == [False]


def test_the_map_is_refitted_from_what_was_judged_and_applies_to_later_estimates() -> None:
    """Strength 0 gives the isotonic map full weight. Judged: 0.2 missed, 0.6 met: they violate
    the order, so PAV pools them into one block at x 0.4, y 0.5, a constant 0.5. The estimate
    made before the refit got the identity (0.9); one made after gets 0.5."""
    online = online_of(0.0, 0.0, 0.0, strength=0.0, refit_min_new=2, refit_growth=0.0)
    assert online.estimate(10.0, *GROUP, cutoff=100.0, tier="t", risk=0.2) == 0.2
    assert online.estimate(20.0, *GROUP, cutoff=200.0, tier="t", risk=0.6) == 0.6
    judge(online, 150.0, finishes(j0=50.0, j2=120.0))
    assert online.fits == 0, "one judged (job 1 runs past 100): fewer than refit_min_new"
    judge(online, 250.0, finishes(j0=50.0, j1=150.0, j2=120.0))
    assert online.fits == 1
    assert [(j.risk, j.missed) for j in online.judged] == [(0.2, True), (0.6, False)]
    assert online.estimate(300.0, *GROUP, cutoff=900.0, tier="t", risk=0.9) == pytest.approx(0.5)
    assert online.estimate(300.0, *GROUP, cutoff=900.0, tier="other", risk=0.1) == pytest.approx(
        0.5
    ), "a tier never judged takes the pooled map"


def test_no_refit_until_the_judged_grew_by_the_share() -> None:
    """With 100 judged and growth 0.05, the next fit waits for 5 more (refit_min_new 1)."""
    submits = [0.0] * 200
    online = OnlineCalibration(
        {GROUP: [(s, i) for i, s in enumerate(submits)]}, refit_min_new=1, refit_growth=0.05
    )
    for k in range(100):
        online.estimate(float(k), *GROUP, cutoff=1000.0, tier="t", risk=0.5)
    done = {i: 10.0 for i in range(200)}
    judge(online, 2000.0, done)
    assert (online.judged_count, online.fits) == (100, 1)
    for k in range(4):
        online.estimate(2000.0 + k, *GROUP, cutoff=3000.0, tier="t", risk=0.5)
    judge(online, 3001.0, done)
    assert (online.judged_count, online.fits) == (104, 1)
    online.estimate(3002.0, *GROUP, cutoff=3500.0, tier="t", risk=0.5)
    judge(online, 3501.0, done)
    assert (online.judged_count, online.fits) == (105, 2)


def test_a_replay_judges_each_estimate_as_the_run_does_and_learns_what_finished() -> None:
    """Every estimate judged during the replay has the outcome the replay gives it after the
    run, every recorded one has a calibrated risk, and the learner counted each finished job
    once with its true runtime over its declared one."""
    ps, jobs = random_scenario(count=120)
    run = Replay(ps, jobs, POLICY, seed=2)
    result = run.run()
    assert run.online is not None and run.runtimes is not None
    outcome = {
        (at, deadline_id(project, deadline, cutoff)): record.missed
        for (at, project, deadline, cutoff, _, _), record in zip(
            run.risk_log, result.risk_log, strict=True
        )
    }
    assert run.online.judged_count > 50
    for judged in run.online.judged:
        assert judged.resolved_at > judged.at
        assert outcome[(judged.at, judged.deadline_id)] == judged.missed
    assert all(r.calibrated is not None and 0 <= r.calibrated <= 1 for r in result.risk_log)
    finished = [o for o in result.outcomes if o.finish is not None]
    assert run.runtimes.observed == len(finished)


def test_a_project_that_always_runs_twice_its_declaration_is_learned_by_the_replay() -> None:
    """Ten jobs of vision, each declaring 1,000 s and running 2,000 s, one after another: the
    learner's estimate for an eleventh declaring 1,000 s has a median of 2,000 s, shrunk toward
    the prior by the pseudo-count (ten jobs pull it halfway: log-ratio ln 2 / 2 + the prior's
    -sigma^2/2 / 2)."""
    ps, _ = random_scenario(count=1)
    jobs = [
        SimJob(
            job_id=f"j{i}",
            submit=3000.0 * i,
            duration=2000.0,
            gpus=1,
            project="vision",
            tier="production",
            priority=1000,
            deadline=None,
            expected_duration=1000.0,
            checkpoint_seconds=600.0,
        )
        for i in range(10)
    ]
    run = Replay(ps, jobs, POLICY, seed=0)
    run.run()
    assert run.runtimes is not None and run.runtimes.observed == 10
    learned = run.runtimes.declared("vision", 1000.0, queue="vision", prior_sigma=0.25)
    assert learned.evidence == pytest.approx(sum(2 ** (-k / 100) for k in range(10)), rel=1e-5)
    assert learned.source == "queue"
    # Project level: n = evidence, k = 10; prior mu = -0.03125; then the queue level again.
    n = learned.evidence
    mu = (n * math.log(2) + 10 * -0.03125) / (n + 10)
    mu = (n * math.log(2) + 10 * mu) / (n + 10)
    assert learned.median_seconds == pytest.approx(1000.0 * math.exp(mu), rel=1e-4)
