"""The replay's figures on hand-built results, where every number can be checked by eye.

`RESULT` has five jobs: three production jobs with deadlines (one met, one finished late, one
still running at the end), a research job without a deadline and a research job with one that
never started. Waits are 10, 30 and 20 s in production and 0 s in research.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import numpy as np
import pytest

from controller.sim.model import (
    CAUSES,
    INFEASIBLE,
    INTERRUPTED,
    PREEMPTED,
    WAITED_FOR_NODE,
    WAITED_FOR_QUOTA,
    JobOutcome,
    RiskRecord,
    RunResult,
    Sample,
)
from controller.sim.report import (
    ALL_TIERS,
    EXCEEDS_CEILING,
    Measurement,
    RunFigures,
    figures_for_runs,
    format_seconds,
    miss_cause,
    percentile,
    render_json,
    render_markdown,
    round_significant,
    run_figures,
    summary_document,
    terminal_summary,
)


def outcome(
    job_id: str,
    tier: str,
    *,
    gpus: int = 1,
    submit: float = 0.0,
    first_start: float | None = None,
    finish: float | None = None,
    deadline: float | None = None,
    work: float = 100.0,
    used: float = 100.0,
    lost: float = 0.0,
    interruptions: int = 0,
    preemptions: int = 0,
    cause: str | None = None,
    delays: dict[str, float] | None = None,
) -> JobOutcome:
    return JobOutcome(
        job_id=job_id,
        project=f"{tier}-1",
        tier=tier,
        gpus=gpus,
        submit=submit,
        first_start=first_start,
        finish=finish,
        deadline=deadline,
        work_gpu_seconds=work,
        used_gpu_seconds=used,
        lost_gpu_seconds=lost,
        interruptions=interruptions,
        preemptions=preemptions,
        cause=cause,
        delays=delays or {},
    )


OUTCOMES = [
    outcome(
        "met",
        "production",
        gpus=2,
        first_start=10,
        finish=90,
        deadline=100,
        work=160,
        used=200,
        lost=40,
        interruptions=1,
    ),
    outcome(
        "late", "production", first_start=30, finish=150, deadline=100, used=100.5, preemptions=1
    ),
    outcome("running", "production", first_start=20, deadline=50, used=10),
    outcome("free", "research", first_start=0, finish=50),
    outcome("never", "research", deadline=500, used=0),
]
RESULT = RunResult(
    name="policy",
    outcomes=OUTCOMES,
    timeline=[Sample(0.0, {"spot": 1.0, "on-demand": 2.0}, {"spot": 8.0, "on-demand": 8.0}, 8, 1)],
    cost_by_capacity_type={"spot": 10.0, "on-demand": 30.0},
    gpu_hours_by_capacity_type={"spot": 10.0, "on-demand": 7.5},
    mix_changes=3,
    decisions=12,
    wall_seconds=1.5,
    unfinished=2,
)
REFERENCE = RunResult(
    name="on-demand-only",
    outcomes=OUTCOMES,
    cost_by_capacity_type={"on-demand": 80.0},
    gpu_hours_by_capacity_type={"on-demand": 20.0},
    unfinished=2,
)


def figures() -> RunFigures:
    return run_figures(RESULT, tiers=["production", "research", "batch"], on_demand_only_cost=80)


# --------------------------------------------------------------------------- percentiles


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        pytest.param([], 50, None, id="no values have no percentile"),
        pytest.param([7.0], 99, 7.0, id="one value is every percentile"),
        pytest.param([10.0, 20.0, 30.0], 50, 20.0, id="the median of three is the middle one"),
        pytest.param([10.0, 20.0, 30.0], 90, 28.0, id="p90 interpolates 80 % of the last step"),
        pytest.param([30.0, 10.0, 20.0], 0, 10.0, id="p0 is the minimum, whatever the order"),
        pytest.param([30.0, 10.0, 20.0], 100, 30.0, id="p100 is the maximum"),
        pytest.param([0.0, 10.0, 20.0, 30.0], 50, 15.0, id="an even count's median is a mean"),
    ],
)
def test_percentile_by_hand(values: list[float], q: float, expected: float | None) -> None:
    assert percentile(values, q) == (None if expected is None else pytest.approx(expected))


def test_percentile_matches_numpy_default_interpolation() -> None:
    pick = random.Random(3)
    values = [pick.expovariate(1 / 600) for _ in range(501)]
    for q in (1, 50, 90, 99, 99.9):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_outside_0_to_100_is_an_error() -> None:
    with pytest.raises(ValueError, match="percentile"):
        percentile([1.0], 101)


# --------------------------------------------------------------------------- tiers


@pytest.mark.parametrize(
    ("tier", "expected"),
    [
        pytest.param(
            "production",
            (3, 3, 1, 2, 1, 1 / 3, 3, (20.0, 28.0, 29.8)),
            id="production: one met, one late, one unfinished counted as missed",
        ),
        pytest.param(
            "research",
            (2, 1, 0, 1, 1, 0.0, 1, (0.0, 0.0, 0.0)),
            id="research: the job never started misses; only the started one has a wait",
        ),
        pytest.param(
            "batch",
            (0, 0, 0, 0, 0, None, 0, (None, None, None)),
            id="a tier asked for with no jobs has no hit rate and no waits",
        ),
        pytest.param(
            ALL_TIERS,
            (5, 4, 1, 3, 2, 0.25, 4, (15.0, 27.0, 29.7)),
            id="overall: every job with a deadline, every started job",
        ),
    ],
)
def test_deadlines_and_waits_by_tier(
    tier: str,
    expected: tuple[int, int, int, int, int, float | None, int, tuple[float | None, ...]],
) -> None:
    jobs, with_deadline, met, missed, unfinished, hit_rate, started, waits = expected
    got = figures().tier(tier)
    assert (got.jobs, got.with_deadline, got.met, got.missed) == (
        jobs,
        with_deadline,
        met,
        missed,
    )
    assert got.unfinished_with_deadline == unfinished
    assert got.hit_rate == (None if hit_rate is None else pytest.approx(hit_rate))
    assert got.started == started
    assert (got.wait_p50, got.wait_p90, got.wait_p99) == pytest.approx(waits)


def test_tiers_keep_the_order_asked_for_and_add_unexpected_ones_after() -> None:
    got = run_figures(RESULT, tiers=["research"])
    assert [t.tier for t in got.tiers] == ["research", "production"]
    assert [t.tier for t in run_figures(RESULT).tiers] == ["production", "research"]


# --------------------------------------------------------------------------- cost and capacity


def test_cost_capacity_and_accounting_figures() -> None:
    got = figures()
    assert dict(got.cost) == {"spot": 10.0, "on-demand": 30.0}
    assert got.total_cost == 40.0
    assert got.cost_vs_on_demand_only == pytest.approx(50.0)
    assert dict(got.gpu_hours) == {"spot": 10.0, "on-demand": 7.5}
    used = 200 + 100.5 + 10 + 100 + 0
    assert got.used_gpu_hours == pytest.approx(used / 3600)
    assert got.utilization == pytest.approx(used / (17.5 * 3600))
    assert got.lost_gpu_hours == pytest.approx(40 / 3600)
    assert (got.interruptions, got.preemptions, got.mix_changes, got.decisions) == (1, 1, 3, 12)
    assert got.unfinished == 2


def test_conservation_over_finished_jobs_reports_the_worst_one() -> None:
    """met: 200 = 160 + 40; late: 100.5 against 100 + 0 (0.5 off); free: exact. The running
    job and the one never started are left out."""
    got = figures().conservation
    assert got.finished == 3
    assert got.max_abs_deviation == pytest.approx(0.5)
    assert got.total_deviation == pytest.approx(0.5)
    assert (got.used_gpu_seconds, got.work_gpu_seconds, got.lost_gpu_seconds) == (
        400.5,
        360.0,
        40.0,
    )


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        pytest.param(
            [RESULT, REFERENCE], [50.0, 100.0], id="relative to on-demand-only when it ran"
        ),
        pytest.param([RESULT], [None], id="no relative cost without on-demand-only"),
    ],
)
def test_cost_relative_to_on_demand_only(
    results: list[RunResult], expected: list[float | None]
) -> None:
    got = [f.cost_vs_on_demand_only for f in figures_for_runs(results)]
    assert got == [None if e is None else pytest.approx(e) for e in expected]


def test_nothing_provisioned_has_no_utilization() -> None:
    empty = replace(RESULT, gpu_hours_by_capacity_type={}, cost_by_capacity_type={})
    got = run_figures(empty)
    assert got.utilization is None
    assert got.total_cost == 0.0


# --------------------------------------------------------------------------- summary.json


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(1 / 3, 0.333333, id="a third to six significant digits"),
        pytest.param(123456789.0, 123457000.0, id="large numbers keep six digits"),
        pytest.param(-0.0, 0.0, id="minus zero prints as zero"),
        pytest.param(float("nan"), None, id="NaN, which JSON lacks, becomes null"),
        pytest.param(float("inf"), None, id="infinity becomes null"),
    ],
)
def test_round_significant(value: float, expected: float | None) -> None:
    got = round_significant(value)
    assert got == expected
    if got is not None:
        assert str(got) == str(expected)


def test_summary_json_is_stable_sorted_and_rounded() -> None:
    document = summary_document(
        figures_for_runs([RESULT, REFERENCE]), context={"inputs": {"seed": 1}}
    )
    text = render_json(document)
    assert text == render_json(
        summary_document(figures_for_runs([RESULT, REFERENCE]), context={"inputs": {"seed": 1}})
    )
    assert text.endswith("}\n")
    parsed = json.loads(text)
    assert parsed["run_order"] == ["policy", "on-demand-only"]
    policy = parsed["runs"]["policy"]
    assert policy["deadlines"]["production"]["hit_rate"] == 0.333333
    assert policy["deadlines"]["all"]["wait_seconds"] == {"p50": 15.0, "p90": 27.0, "p99": 29.7}
    assert policy["cost"] == {"on-demand": 30.0, "spot": 10.0, "total": 40.0}
    assert policy["cost_percent_of_on_demand_only"] == 50.0
    assert policy["conservation"]["max_abs_deviation_gpu_seconds"] == 0.5
    assert "wall" not in text
    # Keys sorted at every level: re-dumping with sorted keys changes nothing.
    assert json.dumps(parsed, sort_keys=True, indent=2) + "\n" == text


# --------------------------------------------------------------------------- text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(None, "-", id="no value"),
        pytest.param(0.0, "0 s", id="zero seconds"),
        pytest.param(45.0, "45 s", id="under a minute in seconds"),
        pytest.param(750.0, "12.5 min", id="under an hour in minutes"),
        pytest.param(3 * 3600.0, "3.0 h", id="under a day in hours"),
        pytest.param(2.5 * 86400, "2.5 d", id="days beyond"),
    ],
)
def test_format_seconds(seconds: float | None, text: str) -> None:
    assert format_seconds(seconds) == text


def test_markdown_summary_has_a_table_per_figure_and_says_how_jobs_were_assigned() -> None:
    runs = figures_for_runs([RESULT, REFERENCE], tiers=["production", "research"])
    text = render_markdown(
        runs,
        title="Replay of t.csv",
        inputs=["trace: t.csv"],
        assignment="Rule: AssignmentRule(seed=1).",
        policy="CapacityPolicy fleet.",
        measurements=[Measurement("policy", 1.25, 80.0)],
        plots=["cost_by_capacity_type.png"],
    )
    assert text.startswith("# Replay of t.csv\n")
    for heading in (
        "## Deadline hit rate by tier",
        "## Wait by tier",
        "## Cost and capacity",
        "## Replay wall time and memory",
        "## How jobs were assigned",
        "## Policy",
    ):
        assert heading in text
    assert "| policy         | 33.3 % (1/3) | 0.0 % (0/1) | 25.0 % (1/4) |" in text
    assert "Rule: AssignmentRule(seed=1)." in text
    assert "1.2 s" in text and "80 MiB" in text
    assert "![cost_by_capacity_type.png](cost_by_capacity_type.png)" in text
    table_rows = [line for line in text.splitlines() if line.startswith("| on-demand-only")]
    assert len(table_rows) == 8, (
        "a row in the hits, waits and cost tables, the three cause tables (all tiers, "
        "production, research), the tighter-than-a-launch table and the ceiling table; none "
        "in wall time"
    )
    for heading in (
        "## Why deadlines were missed",
        "### all tiers",
        "### production",
        "### Deadlines tighter than a node launch",
        "## Peak GPUs against the pool ceiling",
    ):
        assert heading in text
    assert "## Risk calibration" not in text, "neither run estimated a risk"


def test_terminal_summary_shows_hits_waits_cost_and_run_times() -> None:
    text = terminal_summary(
        figures_for_runs([RESULT, REFERENCE]), [Measurement("policy", 2.0, 100.0)]
    )
    lines = text.splitlines()
    assert lines[0].startswith("Deadline hit rate by tier")
    assert any(line.startswith("policy") and "25.0 % (1/4)" in line for line in lines)
    assert "50.0 %" in text and "$40" in text
    assert "2.0 s" in text
    assert "|" not in text, "plain columns on a terminal, not Markdown"


# --------------------------------------------------------------------------- misses by cause

CAUSED = RunResult(
    name="policy",
    outcomes=[
        outcome("p-met", "production", first_start=0, finish=50, deadline=100),
        outcome("p-quota", "production", finish=150, deadline=100, cause=WAITED_FOR_QUOTA),
        outcome("p-node", "production", finish=150, deadline=100, cause=WAITED_FOR_NODE),
        outcome("p-quota-2", "production", deadline=100, cause=WAITED_FOR_QUOTA),
        outcome("r-spot", "research", finish=900, deadline=500, cause=INTERRUPTED),
        outcome("r-preempted", "research", finish=900, deadline=500, cause=PREEMPTED),
        outcome("r-infeasible", "research", submit=450, finish=600, deadline=500, cause=INFEASIBLE),
        outcome("r-free", "research", finish=900),
        # Met, with a cause left on it: not a miss, so not counted.
        outcome("r-met", "research", finish=400, deadline=500, cause=PREEMPTED),
        # Missed with no cause (a result saved before causes): attributed from its delays.
        outcome("r-old", "research", finish=900, deadline=500, delays={WAITED_FOR_NODE: 300.0}),
    ],
)


@pytest.mark.parametrize(
    ("tier", "expected"),
    [
        pytest.param(
            "production",
            {WAITED_FOR_QUOTA: 2, WAITED_FOR_NODE: 1},
            id="production: two waited for quota (one never finished), one for a node",
        ),
        pytest.param(
            "research",
            {INFEASIBLE: 1, WAITED_FOR_NODE: 1, INTERRUPTED: 1, PREEMPTED: 1},
            id="research: one of each; the met job's stale cause is not a miss",
        ),
        pytest.param(
            ALL_TIERS,
            {INFEASIBLE: 1, WAITED_FOR_QUOTA: 2, WAITED_FOR_NODE: 2, INTERRUPTED: 1, PREEMPTED: 1},
            id="overall: the tiers' causes summed",
        ),
    ],
)
def test_misses_by_cause_per_tier_add_up_to_the_misses(tier: str, expected: dict[str, int]) -> None:
    got = run_figures(CAUSED).tier(tier)
    assert list(got.misses_by_cause) == list(CAUSES), "every cause, in CAUSES order"
    assert dict(got.misses_by_cause) == {c: expected.get(c, 0) for c in CAUSES}
    assert sum(got.misses_by_cause.values()) == got.missed


@pytest.mark.parametrize(
    ("job", "cause"),
    [
        pytest.param(
            outcome("met", "p", finish=10, deadline=20, cause=PREEMPTED),
            None,
            id="a met deadline has no cause, whatever the outcome says",
        ),
        pytest.param(outcome("none", "p", finish=10), None, id="no deadline, no cause"),
        pytest.param(
            outcome("given", "p", finish=30, deadline=20, cause=INTERRUPTED, delays={}),
            INTERRUPTED,
            id="the engine's cause is kept",
        ),
        pytest.param(
            outcome("long", "p", gpus=2, work=100.0, finish=80, deadline=40),
            INFEASIBLE,
            id="without one: runtime (work 100 over 2 GPUs = 50 s) alone ends after it",
        ),
        pytest.param(
            outcome(
                "delayed",
                "p",
                finish=300,
                deadline=200,
                delays={WAITED_FOR_QUOTA: 50.0, PREEMPTED: 80.0},
            ),
            PREEMPTED,
            id="without one: the largest delay",
        ),
        pytest.param(
            outcome("nothing", "p", deadline=200),
            WAITED_FOR_QUOTA,
            id="without one and with no delay recorded: the first delay cause",
        ),
    ],
)
def test_the_cause_of_a_miss(job: JobOutcome, cause: str | None) -> None:
    assert miss_cause(job) == cause


LAUNCH = 300.0


@pytest.mark.parametrize(
    ("job", "slack", "tight"),
    [
        pytest.param(
            outcome("t", "p", work=100.0, deadline=100.0 + 299.0), 299.0, True, id="299 s < 300"
        ),
        pytest.param(outcome("z", "p", work=100.0, deadline=100.0), 0.0, True, id="no slack"),
        pytest.param(
            outcome("l", "p", work=100.0, deadline=100.0 + LAUNCH), LAUNCH, False, id="a launch"
        ),
        pytest.param(
            outcome("i", "p", work=100.0, deadline=99.0), -1.0, False, id="infeasible: not tight"
        ),
        pytest.param(
            outcome("g", "p", gpus=2, work=200.0, deadline=200.0),
            100.0,
            True,
            id="runtime is work over GPUs: 100 s, leaving 100 s",
        ),
        pytest.param(outcome("n", "p"), None, False, id="no deadline"),
    ],
)
def test_a_deadline_tighter_than_a_node_launch(
    job: JobOutcome, slack: float | None, tight: bool
) -> None:
    timed = replace(job, launch_seconds=LAUNCH)
    assert (timed.slack, timed.tighter_than_launch) == (slack, tight)
    assert not job.tighter_than_launch, "a result saved without the launch time says nothing"


def test_tight_deadlines_counted_per_tier_and_in_summary_json_and_markdown() -> None:
    jobs = [
        outcome("tight-met", "production", work=100.0, finish=150.0, deadline=200.0),
        outcome("tight-missed", "production", work=100.0, finish=500.0, deadline=200.0),
        outcome("loose-missed", "research", work=100.0, finish=900.0, deadline=800.0),
        outcome("no-deadline", "research", work=100.0, finish=900.0),
    ]
    result = RunResult(name="policy", outcomes=[replace(j, launch_seconds=LAUNCH) for j in jobs])
    runs = figures_for_runs([result], tiers=["production", "research"])
    got = {t.tier: (t.tight, t.tight_missed) for t in (*runs[0].tiers, runs[0].overall)}
    assert got == {"production": (2, 1), "research": (0, 0), ALL_TIERS: (2, 1)}
    parsed = json.loads(render_json(summary_document(runs, context={})))
    deadlines = parsed["runs"]["policy"]["deadlines"]
    assert deadlines["production"]["tighter_than_a_node_launch"] == {
        "with_deadline": 2,
        "missed": 1,
    }
    text = render_markdown(
        runs, title="t", inputs=[], assignment="", policy="", measurements=[], plots=[]
    )
    assert "| policy |        1/2 |      0/0 | 1/2 |          50.0 % |" in text


def test_the_hand_built_result_with_no_causes_still_adds_up() -> None:
    for tier in ("production", "research", ALL_TIERS):
        got = figures().tier(tier)
        assert sum(got.misses_by_cause.values()) == got.missed, tier


def test_misses_by_cause_in_summary_json_markdown_and_terminal() -> None:
    runs = figures_for_runs([CAUSED], tiers=["production", "research"])
    parsed = json.loads(render_json(summary_document(runs, context={})))
    by_cause = parsed["runs"]["policy"]["misses_by_cause"]
    assert set(by_cause) == {"production", "research", ALL_TIERS}
    assert by_cause["production"] == {
        INFEASIBLE: 0,
        WAITED_FOR_QUOTA: 2,
        WAITED_FOR_NODE: 1,
        INTERRUPTED: 0,
        PREEMPTED: 0,
    }
    markdown = render_markdown(runs, title="t", inputs=[], assignment="a", policy="p")
    header = (
        "| run    | misses | infeasible at submit | waited for quota | waited for a node "
        "| work lost to interruptions | preempted |"
    )
    assert header in markdown
    assert "| policy |      7 |                    1 |                2 |                 2 |" in (
        markdown
    )
    terminal = terminal_summary(runs).splitlines()
    start = terminal.index(
        "Missed deadlines by cause (each miss has one cause; they add up to misses)"
    )
    assert terminal[start + 1].split() == [
        "run",
        "tier",
        "misses",
        "infeasible",
        "quota",
        "node",
        "interrupted",
        "preempted",
    ]
    assert terminal[start + 3].split() == ["policy", "production", "3", "0", "2", "1", "0", "0"]
    assert terminal[start + 5].split() == ["policy", "all", "7", "1", "2", "2", "1", "1"]


# --------------------------------------------------------------------------- ceiling


@pytest.mark.parametrize(
    ("peak", "ceilings", "over"),
    [
        pytest.param({"a100": 48.0}, {"a100": 48}, [], id="a peak at the ceiling is within it"),
        pytest.param({"a100": 56.0}, {"a100": 48}, ["a100"], id="a node over it exceeds it"),
        pytest.param(
            {"a100": 8.0, "h100": 72.0},
            {"a100": 16, "h100": 64},
            ["h100"],
            id="each pool against its own ceiling",
        ),
        pytest.param({"a100": 99.0}, {}, [], id="a pool with no ceiling is not judged"),
    ],
)
def test_peak_provisioned_against_the_ceiling(
    peak: dict[str, float], ceilings: dict[str, int], over: list[str]
) -> None:
    got = run_figures(replace(RESULT, peak_provisioned=peak, ceilings=ceilings))
    assert got.over_ceiling == over
    document = json.loads(render_json(summary_document([got], context={})))
    ceiling = document["runs"]["policy"]["ceiling"]
    assert {pool for pool, c in ceiling.items() if c["exceeds_ceiling"]} == set(over)
    for pool, gpus in peak.items():
        assert ceiling[pool]["peak_provisioned_gpus"] == gpus


def test_a_run_over_its_ceiling_says_so_in_the_table() -> None:
    over = replace(RESULT, peak_provisioned={"a100": 56.0}, ceilings={"a100": 48})
    within = replace(REFERENCE, peak_provisioned={"a100": 48.0}, ceilings={"a100": 48})
    runs = figures_for_runs([over, within])
    markdown = render_markdown(runs, title="t", inputs=[], assignment="a", policy="p")
    rows = {
        line.split("|")[1].strip(): line
        for line in markdown.split("## Peak GPUs against the pool ceiling")[1].splitlines()
        if line.startswith("| ")
    }
    assert "56 / 48" in rows["policy"] and f"{EXCEEDS_CEILING} (a100)" in rows["policy"]
    assert "48 / 48" in rows["on-demand-only"] and "within" in rows["on-demand-only"]
    assert f"{EXCEEDS_CEILING} (a100)" in terminal_summary(runs)


# --------------------------------------------------------------------------- calibration


def test_the_policy_run_carries_its_calibration_and_a_baseline_none() -> None:
    log = [
        RiskRecord(time=0.0, project="p", deadline="d", risk=0.05, missed=False),
        RiskRecord(time=900.0, project="p", deadline="d", risk=0.95, missed=True),
    ]
    runs = figures_for_runs([replace(RESULT, risk_log=log), REFERENCE])
    assert runs[0].calibration is not None and runs[0].calibration.count == 2
    assert runs[1].calibration is None
    parsed = json.loads(render_json(summary_document(runs, context={})))
    assert parsed["runs"]["on-demand-only"]["calibration"] is None
    calibration = parsed["runs"]["policy"]["calibration"]
    assert calibration["estimates"] == 2
    assert calibration["brier_score"] == pytest.approx(0.0025)
    assert calibration["deciles"][9]["observed"] == 1.0
    markdown = render_markdown(runs, title="t", inputs=[], assignment="a", policy="p")
    assert "## Risk calibration (policy)" in markdown
    assert "| [0.9, 1.0]     |         1 |          0.950 |    1.000 |    +0.050 |" in markdown
    assert "Risk calibration of policy: 2 estimates" in terminal_summary(runs)
