"""Runtimes learned from finished work (controller.risk.learning), with hand-computed answers.

The decay is per finished workload of a key: after j newer observations one weighs 2^(-j/H),
so after N identical ones the evidence is sum_{j<N} 2^(-j/H) = (1 - 2^(-N/H)) / (1 - 2^(-1/H)).
The sketch holds float32, so answers are compared to a relative 1e-4.
"""

from __future__ import annotations

import json
import math

import pytest

from controller.risk.learning import (
    BINS,
    MAX_KEYS,
    FinishedRun,
    LogStats,
    RuntimeLearner,
    finished_run,
    keys_of,
    shrink,
    weighted_quantile,
)
from controller.risk.model import PRIOR_RUNTIME_SECONDS, SIGMA_ANNOTATED, SIGMA_PRIOR
from controller.risk.workloads import WorkloadView

HOUR = 3600.0


def evidence_after(count: int, half_life: float) -> float:
    return (1 - 2 ** (-count / half_life)) / (1 - 2 ** (-1 / half_life))


def run(
    index: int,
    actual: float,
    declared: float | None = HOUR,
    *,
    project: str = "vision",
    queue: str | None = None,
    user: str | None = None,
) -> FinishedRun:
    return FinishedRun(
        uid=f"{project}/job-{index}",
        project=project,
        finished_at=float(index),
        actual_seconds=actual,
        declared_seconds=declared,
        queue=queue,
        user=user,
    )


def feed(learner: RuntimeLearner, runs: list[FinishedRun]) -> None:
    for r in runs:
        assert learner.observe(r)


# -- cold start ----------------------------------------------------------------------------------


def test_cold_start_gives_the_declared_runtime_and_todays_spread_exactly() -> None:
    estimate = RuntimeLearner().declared("vision", 5400.0, prior_sigma=SIGMA_ANNOTATED)
    assert (estimate.mean_seconds, estimate.sigma) == (5400.0, SIGMA_ANNOTATED)
    assert (estimate.evidence, estimate.source) == (0.0, "prior")


def test_cold_start_undeclared_gives_the_prior_exactly() -> None:
    estimate = RuntimeLearner().undeclared(
        "vision", prior_mean_seconds=PRIOR_RUNTIME_SECONDS, prior_sigma=SIGMA_PRIOR
    )
    assert (estimate.mean_seconds, estimate.sigma) == (PRIOR_RUNTIME_SECONDS, SIGMA_PRIOR)


def test_history_of_another_project_leaves_the_prior_exact() -> None:
    learner = RuntimeLearner()
    feed(learner, [run(i, 2 * HOUR, project="nlp") for i in range(50)])
    estimate = learner.declared("vision", HOUR, prior_sigma=SIGMA_ANNOTATED)
    assert (estimate.mean_seconds, estimate.sigma, estimate.source) == (HOUR, 0.25, "prior")


def test_undeclared_history_does_not_touch_declared_estimates() -> None:
    learner = RuntimeLearner()
    feed(learner, [run(i, 2 * HOUR, declared=None) for i in range(50)])
    assert learner.declared("vision", HOUR, prior_sigma=0.25).source == "prior"


# -- what is learned -----------------------------------------------------------------------------


def test_a_project_that_always_runs_twice_its_declaration_is_learned_as_twice() -> None:
    """200 runs of exactly 2x: the log-ratio median is ln 2, the spread 0; shrunk toward the
    prior (centre -0.25^2/2, sigma 0.25) with k = 10 against n = evidence_after(200, 100)."""
    learner = RuntimeLearner()
    feed(learner, [run(i, 2 * HOUR) for i in range(200)])
    n, k = evidence_after(200, 100.0), 10.0
    mu = (n * math.log(2) + k * (-(0.25**2) / 2)) / (n + k)
    sigma = math.sqrt(k * 0.25**2 / (n + k))
    estimate = learner.declared("vision", 3 * HOUR, prior_sigma=0.25)
    assert estimate.evidence == pytest.approx(n, rel=1e-4)
    assert estimate.sigma == pytest.approx(sigma, rel=1e-4)
    assert estimate.median_seconds == pytest.approx(3 * HOUR * math.exp(mu), rel=1e-4)
    assert estimate.median_seconds / (3 * HOUR) == pytest.approx(1.88, abs=0.01)  # ~2x
    assert estimate.sigma < 0.08  # a small spread: a third of the declared one
    assert estimate.source == "project"


def test_with_no_shrinkage_twice_is_exactly_twice() -> None:
    learner = RuntimeLearner(pseudo_count_declared=0.0)
    feed(learner, [run(i, 2 * HOUR) for i in range(20)])
    estimate = learner.declared("vision", HOUR, prior_sigma=0.25)
    assert estimate.median_seconds == pytest.approx(2 * HOUR, rel=1e-5)
    assert estimate.sigma == 0.0


def test_few_runs_move_the_estimate_part_of_the_way() -> None:
    """One run of 2x: n = 1 against k = 10, so mu is a eleventh of the way to ln 2."""
    learner = RuntimeLearner()
    feed(learner, [run(0, 2 * HOUR)])
    estimate = learner.declared("vision", HOUR, prior_sigma=0.25)
    mu = (math.log(2) + 10 * (-(0.25**2) / 2)) / 11
    assert estimate.median_seconds == pytest.approx(HOUR * math.exp(mu), rel=1e-6)
    assert estimate.sigma == pytest.approx(math.sqrt(10 * 0.0625 / 11), rel=1e-6)


def test_spread_of_two_equal_habits_is_half_their_distance() -> None:
    """Half the runs at 1x, half at 4x (alternating): the log-ratio centroids sit at 0 and
    ln 4 with equal weight (near enough: the decay favours the later by 2^(1/H) a pair), so
    q84 and q16 land on them and the spread is ln 4 / 2 = ln 2."""
    learner = RuntimeLearner(pseudo_count_declared=0.0, half_life=1e9)
    feed(learner, [run(i, HOUR * (4 if i % 2 else 1)) for i in range(100)])
    estimate = learner.declared("vision", HOUR, prior_sigma=0.25)
    assert estimate.sigma == pytest.approx(math.log(2), rel=1e-3)
    assert estimate.median_seconds == pytest.approx(2 * HOUR, rel=1e-3)


def test_undeclared_runtimes_are_learned_per_project() -> None:
    learner = RuntimeLearner(pseudo_count_undeclared=0.0)
    feed(learner, [run(i, 5 * HOUR, declared=None) for i in range(30)])
    estimate = learner.undeclared("vision", prior_mean_seconds=HOUR, prior_sigma=1.0)
    assert estimate.median_seconds == pytest.approx(5 * HOUR, rel=1e-5)
    assert estimate.mean_seconds == pytest.approx(5 * HOUR, rel=1e-5)  # sigma 0


def test_undeclared_shrinks_toward_the_given_prior() -> None:
    """Three runs of 4 h against k = 3 and a prior mean of 1 h, sigma 1: mu is half-way
    between ln(4 h) and ln(1 h) - 1/2."""
    learner = RuntimeLearner(half_life=1e12)
    feed(learner, [run(i, 4 * HOUR, declared=None) for i in range(3)])
    estimate = learner.undeclared("vision", prior_mean_seconds=HOUR, prior_sigma=1.0)
    mu = (math.log(4 * HOUR) + math.log(HOUR) - 0.5) / 2
    sigma = math.sqrt(0.5)
    assert estimate.sigma == pytest.approx(sigma, rel=1e-6)
    assert estimate.median_seconds == pytest.approx(math.exp(mu), rel=1e-6)


def test_a_queue_with_its_own_habit_is_learned_apart_from_its_project() -> None:
    learner = RuntimeLearner(pseudo_count_declared=0.0)
    feed(learner, [run(i, 3 * HOUR, queue="fast") for i in range(40)])
    feed(learner, [run(100 + i, HOUR, queue="slow") for i in range(60)])
    fast = learner.declared("vision", HOUR, queue="fast", prior_sigma=0.25)
    slow = learner.declared("vision", HOUR, queue="slow", prior_sigma=0.25)
    other = learner.declared("vision", HOUR, queue="new", prior_sigma=0.25)
    assert fast.median_seconds == pytest.approx(3 * HOUR, rel=1e-5)
    assert slow.median_seconds == pytest.approx(HOUR, rel=1e-5)
    assert (fast.source, slow.source, other.source) == ("queue", "queue", "project")


def test_a_user_with_little_history_is_pulled_toward_the_project() -> None:
    """The project runs at 1x (n large, spread 0 so its sigma is the prior's shrunk away);
    one user has one run at 2x: its centre is (1 * ln 2 + 10 * project's) / 11."""
    learner = RuntimeLearner(half_life=1e12)
    feed(learner, [run(i, HOUR) for i in range(1000)])
    feed(learner, [run(2000, 2 * HOUR, user="ana")])
    project = learner.declared("vision", HOUR, prior_sigma=0.25)
    ana = learner.declared("vision", HOUR, user="ana", prior_sigma=0.25)
    project_mu = math.log(project.median_seconds / HOUR)
    assert math.log(ana.median_seconds / HOUR) == pytest.approx(
        (math.log(2) + 10 * project_mu) / 11, rel=1e-4
    )
    assert ana.source == "user"


def test_keys_from_least_to_most_specific() -> None:
    assert keys_of("p", None, None) == (("project", ("p",)),)
    assert keys_of("p", "q", None) == (("project", ("p",)), ("queue", ("p", "q")))
    assert keys_of("p", "q", "u")[-1] == ("user", ("p", "q", "u"))
    assert keys_of("p", None, "u") == (("project", ("p",)), ("user", ("p", "", "u")))


def test_out_of_range_ratios_are_clamped_to_the_end_bins() -> None:
    learner = RuntimeLearner(pseudo_count_declared=0.0)
    feed(learner, [run(i, HOUR * 1e6) for i in range(5)])
    estimate = learner.declared("vision", HOUR, prior_sigma=0.25)
    assert estimate.median_seconds == pytest.approx(HOUR * math.exp(4.0), rel=1e-5)


# -- forgetting ----------------------------------------------------------------------------------


def median_of_two(low: float, high: float, value: float) -> float:
    """The median of masses `low` at 0 and `high` at `value`, each at the middle of its share
    of the weight, linear between (`weighted_quantile`)."""
    mid_low, mid_high = low / 2, low + high / 2
    share = ((low + high) / 2 - mid_low) / (mid_high - mid_low)
    return share * value


def test_forgetting_follows_a_change_of_habit() -> None:
    """300 runs at 1x, then 100 at 3x. With a half-life of 100 the old habit weighs
    evidence_after(300) / 2 against the new evidence_after(100): the median goes 53% of the
    way to ln 3 (a ratio of 1.80); without forgetting, 300 against 100: a quarter (1.32)."""
    forgetful = RuntimeLearner(pseudo_count_declared=0.0)
    stubborn = RuntimeLearner(pseudo_count_declared=0.0, half_life=1e12)
    history = [run(i, HOUR) for i in range(300)] + [run(300 + i, 3 * HOUR) for i in range(100)]
    feed(forgetful, history)
    feed(stubborn, history)
    moved = median_of_two(evidence_after(300, 100) / 2, evidence_after(100, 100), math.log(3))
    kept = median_of_two(300, 100, math.log(3))
    assert kept == pytest.approx(math.log(3) / 4)
    forgot = forgetful.declared("vision", HOUR, prior_sigma=0.25).median_seconds
    remembered = stubborn.declared("vision", HOUR, prior_sigma=0.25).median_seconds
    assert forgot == pytest.approx(HOUR * math.exp(moved), rel=1e-4)
    assert remembered == pytest.approx(HOUR * math.exp(kept), rel=1e-4)
    assert forgot / HOUR == pytest.approx(1.80, abs=0.01)

    # 300 more at 3x: the old habit is down to 2^-4 of its weight; the median is past 2.8x.
    feed(forgetful, [run(400 + i, 3 * HOUR) for i in range(300)])
    later = median_of_two(evidence_after(300, 100) / 16, evidence_after(400, 100), math.log(3))
    assert forgetful.declared("vision", HOUR, prior_sigma=0.25).median_seconds == pytest.approx(
        HOUR * math.exp(later), rel=1e-4
    )
    assert math.exp(later) > 2.8


def test_evidence_saturates_at_the_half_life_over_ln_2() -> None:
    learner = RuntimeLearner(half_life=50.0)
    feed(learner, [run(i, HOUR) for i in range(3000)])  # renormalises along the way
    assert learner.history("vision")["declared"] == pytest.approx(
        1 / (1 - 2 ** (-1 / 50)), rel=1e-3
    )


# -- counted once --------------------------------------------------------------------------------


def test_a_finished_workload_is_counted_once() -> None:
    learner = RuntimeLearner()
    first = run(10, 2 * HOUR)
    assert learner.observe(first)
    assert not learner.observe(first)  # the next pass sees it again
    assert learner.observe_all([first, run(11, 2 * HOUR)]) == 1
    assert learner.observed == 2
    assert learner.history("vision")["declared"] == pytest.approx(1 + 2 ** (-1 / 100), rel=1e-6)


def test_a_late_arrival_within_the_window_counts_an_older_one_does_not() -> None:
    learner = RuntimeLearner()
    assert learner.observe(run(10_000, HOUR))
    assert learner.observe(run(9_500, HOUR))  # 500 s late: within RECENT_SECONDS
    assert not learner.observe(run(9_000, HOUR))  # older: taken as counted before


def test_unusable_runs_are_refused() -> None:
    learner = RuntimeLearner()
    assert not learner.observe(run(1, 0.0))
    assert not learner.observe(run(2, math.nan))
    weird = learner.observe(run(3, HOUR, declared=-5.0))  # a bad declaration: undeclared
    assert weird
    assert learner.history("vision") == {"declared": 0.0, "undeclared": pytest.approx(1.0)}


# -- memory ----------------------------------------------------------------------------------------


def test_memory_is_bounded_after_100_000_finished_workloads() -> None:
    """100,000 runs over 20,000 projects x 2 queues x 3 users: keys stay at max_keys, each key
    at most two sketches of 2 x BINS float32, the recent ids within their window."""
    learner = RuntimeLearner(max_keys=1000)
    for i in range(100_000):
        learner.observe(
            FinishedRun(
                uid=f"w{i}",
                project=f"p{i % 20_000}",
                finished_at=float(i),
                actual_seconds=HOUR * (1 + i % 7),
                declared_seconds=HOUR if i % 3 else None,
                queue=f"q{i % 2}",
                user=f"u{i % 3}",
            )
        )
    assert len(learner) == 1000
    assert learner.nbytes() <= 1000 * 2 * 2 * BINS * 4
    assert len(learner.to_dict()["recent"]) <= 601  # finishes 1 s apart, a 600 s window
    assert learner.observed == 100_000


def test_least_recently_updated_key_is_evicted() -> None:
    learner = RuntimeLearner(max_keys=2)
    feed(learner, [run(0, 2 * HOUR, project="a"), run(1, 2 * HOUR, project="b")])
    feed(learner, [run(2, 2 * HOUR, project="a"), run(3, 2 * HOUR, project="c")])
    assert learner.history("b")["declared"] == 0.0
    assert learner.history("a")["declared"] > 0
    assert learner.history("c")["declared"] > 0


def test_default_bound_holds_a_thousand_projects_with_queues() -> None:
    assert MAX_KEYS >= 3000


# -- restart -------------------------------------------------------------------------------------


def test_a_restart_keeps_what_was_learned() -> None:
    learner = RuntimeLearner()
    feed(learner, [run(i, 2 * HOUR, queue="q", user="u") for i in range(150)])
    feed(learner, [run(200 + i, 5 * HOUR, declared=None) for i in range(20)])
    summary = json.loads(json.dumps(learner.to_dict()))  # through JSON, as a ConfigMap keeps it
    restored = RuntimeLearner.from_dict(summary)
    for before, after in (
        (
            learner.declared("vision", HOUR, queue="q", user="u", prior_sigma=0.25),
            restored.declared("vision", HOUR, queue="q", user="u", prior_sigma=0.25),
        ),
        (
            learner.undeclared("vision", prior_mean_seconds=HOUR, prior_sigma=1.0),
            restored.undeclared("vision", prior_mean_seconds=HOUR, prior_sigma=1.0),
        ),
    ):
        assert after.mean_seconds == pytest.approx(before.mean_seconds, rel=1e-4)
        assert after.sigma == pytest.approx(before.sigma, rel=1e-3, abs=1e-6)
        assert after.evidence == pytest.approx(before.evidence, rel=1e-4)
        assert after.source == before.source
    assert len(restored) == len(learner)
    assert restored.observed == 170


def test_a_restart_does_not_count_again_what_the_cluster_still_shows() -> None:
    learner = RuntimeLearner()
    runs = [run(i, 2 * HOUR) for i in range(10)]
    feed(learner, runs)
    restored = RuntimeLearner.from_dict(json.loads(json.dumps(learner.to_dict())))
    assert restored.observe_all(runs) == 0
    assert restored.observe(run(10, 2 * HOUR))


def test_learning_continues_the_same_after_a_restart() -> None:
    straight = RuntimeLearner()
    interrupted = RuntimeLearner()
    first = [run(i, HOUR * (1 + i % 3)) for i in range(100)]
    second = [run(100 + i, 2 * HOUR) for i in range(100)]
    feed(straight, first + second)
    feed(interrupted, first)
    interrupted = RuntimeLearner.from_dict(interrupted.to_dict())
    feed(interrupted, second)
    a = straight.declared("vision", HOUR, prior_sigma=0.25)
    b = interrupted.declared("vision", HOUR, prior_sigma=0.25)
    assert b.mean_seconds == pytest.approx(a.mean_seconds, rel=1e-4)
    assert b.sigma == pytest.approx(a.sigma, rel=1e-3)


@pytest.mark.parametrize(
    "summary",
    [
        {},
        {"version": 2},
        {"version": 1, "halfLife": 100},
        {"version": 1, "halfLife": 1, "keys": [{"key": ["p"], "declared": [[BINS, 1.0, 0.0]]}]},
    ],
)
def test_an_unreadable_summary_is_refused(summary: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RuntimeLearner.from_dict(summary)


# -- the pure parts --------------------------------------------------------------------------------


def test_weighted_quantile_by_hand() -> None:
    """Masses at 0 (weight 1) and 10 (weight 3): their mids are at 0.5 and 2.5 of 4, i.e.
    q = 0.125 and 0.625; q = 0.375 is half-way, 5; beyond the end mids, the end values."""
    assert weighted_quantile([0.0, 10.0], [1.0, 3.0], 0.375) == pytest.approx(5.0)
    assert weighted_quantile([0.0, 10.0], [1.0, 3.0], 0.1) == 0.0
    assert weighted_quantile([0.0, 10.0], [1.0, 3.0], 0.9) == 10.0
    with pytest.raises(ValueError):
        weighted_quantile([], [], 0.5)


def test_shrink_by_hand() -> None:
    assert shrink(None, 1.0, 0.5, 10.0) == (1.0, 0.5)
    mu, sigma = shrink(LogStats(centre=3.0, spread=0.0, evidence=10.0), 1.0, 0.5, 10.0)
    assert mu == pytest.approx(2.0)
    assert sigma == pytest.approx(math.sqrt(0.125))


def test_finished_run_from_a_workload_view() -> None:
    """Pods ready 100 s after admission, finished 3,600 s after that, 500 s of an earlier
    admission: 4,100 s of runtime."""
    view = WorkloadView(
        namespace="team",
        name="train-1",
        queue="vision",
        priority=0,
        gpus=8,
        created=0.0,
        admitted_at=1000.0,
        pods_ready_at=1100.0,
        finished=True,
        finished_at=4700.0,
        expected_duration=3000.0,
        past_execution_seconds=500.0,
        labels={"team.example/user": "ana"},
    )
    got = finished_run(view, "vision", user_label="team.example/user")
    assert got == FinishedRun(
        uid="team/train-1",
        project="vision",
        finished_at=4700.0,
        actual_seconds=4100.0,
        declared_seconds=3000.0,
        queue="vision",
        user="ana",
    )
    running = WorkloadView("team", "x", "vision", 0, 8, 0.0, admitted_at=1000.0)
    assert finished_run(running, "vision") is None
    never_admitted = WorkloadView("team", "y", "vision", 0, 8, 0.0, finished=True, finished_at=5.0)
    assert finished_run(never_admitted, "vision") is None


def test_an_estimate_asked_before_a_finish_is_not_served_after_it() -> None:
    learner = RuntimeLearner(pseudo_count_declared=0.0)
    feed(learner, [run(0, 2 * HOUR)])
    assert learner.declared("vision", HOUR, prior_sigma=0.25).median_seconds == pytest.approx(
        2 * HOUR, rel=1e-5
    )
    feed(learner, [run(1, 2 * HOUR, project="other")])  # another project: still 2x
    assert learner.declared("vision", HOUR, prior_sigma=0.25).median_seconds == pytest.approx(
        2 * HOUR, rel=1e-5
    )
    later = [run(2 + i, 4 * HOUR) for i in range(50)]
    feed(learner, later)
    fresh = RuntimeLearner(pseudo_count_declared=0.0)
    feed(fresh, [run(0, 2 * HOUR), *later])  # never asked before: nothing to serve stale
    answer = learner.declared("vision", HOUR, prior_sigma=0.25)
    assert answer == fresh.declared("vision", HOUR, prior_sigma=0.25)
    assert answer.median_seconds > 3.9 * HOUR
