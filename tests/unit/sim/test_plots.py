"""The plots, read from their figure objects rather than their pixels: axis ranges on the data,
legends clear of every panel, and the timeline's panels per run and pool.

Runs are built by hand: two runs of 100 jobs with deadlines, meeting 95 to 98 % of them, with
waits from nothing to days, and hourly timelines over two pools.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from controller.sim import plots
from controller.sim.calibration import calibrate
from controller.sim.model import FlavorGpus, JobOutcome, RiskRecord, RunResult, Sample
from controller.sim.plots import (
    FrontierPoint,
    TimelineWindow,
    WaitAxis,
    frontier_points,
    hit_rate_limits,
    pareto_frontier,
    timeline_window,
    wait_axis,
)
from controller.sim.report import RunFigures, figures_for_runs

DAY, HOUR = 86400.0, 3600.0
TIERS = ("production", "research")


def outcome(i: int, *, met: bool, wait: float) -> JobOutcome:
    submit = 600.0 * i
    start = submit + wait
    return JobOutcome(
        job_id=f"j{i}",
        project="p",
        tier=TIERS[i % 2],
        gpus=1,
        submit=submit,
        first_start=start,
        finish=start + 100.0,
        deadline=start + (200.0 if met else 50.0),
        work_gpu_seconds=100.0,
        used_gpu_seconds=100.0,
        lost_gpu_seconds=0.0,
        interruptions=0,
        preemptions=0,
    )


def sample(
    time: float, *, pending: int, a100: FlavorGpus, h100: FlavorGpus | None = None
) -> Sample:
    flavors = {("a100", "spot"): a100}
    if h100 is not None:
        flavors[("h100", "on-demand")] = h100
    return Sample(
        time=time,
        gpus_in_use={"spot": a100.in_use, "on-demand": h100.in_use if h100 else 0.0},
        gpus_provisioned={
            "spot": a100.in_use + a100.idle + a100.launching,
            "on-demand": (h100.in_use + h100.idle + h100.launching) if h100 else 0.0,
        },
        on_demand_target=16.0,
        pending_jobs=pending,
        by_flavor=flavors,
        on_demand_target_by_pool={"a100": 8.0, "h100": 8.0},
    )


def timeline(
    hours: int, *, queue_until: int, tail_from: int, queued: int = 5, left: int = 0
) -> list[Sample]:
    """Hourly: 40 GPUs in use on a100 and `queued` jobs queued until `queue_until`, then
    `left`; 20 h100 GPUs; from `tail_from` on, one 8-GPU node of a long job (a tenth of the
    peak)."""
    samples = []
    for h in range(hours):
        busy = h < tail_from
        samples.append(
            sample(
                h * HOUR,
                pending=queued if h < queue_until else left,
                a100=FlavorGpus(
                    in_use=40.0 if busy else 8.0, idle=4.0 if busy else 0.0, launching=0.0
                ),
                h100=FlavorGpus(in_use=20.0, idle=0.0, launching=8.0) if busy else None,
            )
        )
    return samples


def run(
    name: str,
    *,
    misses: int,
    wait: float,
    hours: int = 48,
    queue_until: int = 24,
    tail_from: int = 30,
    queued: int = 5,
    left: int = 0,
) -> RunResult:
    """100 jobs submitted over the first 16.5 h, `misses` of them late."""
    return RunResult(
        name=name,
        outcomes=[outcome(i, met=i >= misses, wait=wait * (i % 10) / 9) for i in range(100)],
        timeline=timeline(
            hours, queue_until=queue_until, tail_from=tail_from, queued=queued, left=left
        ),
        cost_by_capacity_type={"spot": 100.0, "on-demand": 300.0},
        gpu_hours_by_capacity_type={"spot": 80.0, "on-demand": 70.0},
    )


RESULTS = [run("policy", misses=2, wait=2 * DAY), run("on-demand-only", misses=5, wait=HOUR)]


def figures(results: Sequence[RunResult] = RESULTS) -> list[RunFigures]:
    return figures_for_runs(results, tiers=TIERS)


def overlaps(a: Any, b: Any) -> bool:
    """Whether two drawn artists' window extents share any area (touching edges do not)."""
    first, second = a.get_window_extent(), b.get_window_extent()
    return bool(
        first.x0 < second.x1 - 1
        and second.x0 < first.x1 - 1
        and first.y0 < second.y1 - 1
        and second.y0 < first.y1 - 1
    )


def drawn(figure: Any) -> Any:
    """The figure, laid out and drawn, so extents are where the PNG has them."""
    figure.canvas.draw()
    return figure


# --------------------------------------------------------------------------- axis choices


@pytest.mark.parametrize(
    ("rates", "want_bottom"),
    [
        pytest.param([95.1, 98.0, 97.2], 90.0, id="rates of 95-98 % get an axis from 90 %"),
        pytest.param([23.4, 100.0], 20.0, id="a low rate takes the axis down with it"),
        pytest.param([100.0, 100.0], 95.0, id="all met: the axis still shows a bar"),
        pytest.param([95.5], 90.0, id="a point below the lowest rate at least"),
        pytest.param([0.5, 50.0], 0.0, id="never below 0"),
        pytest.param([None, 97.0], 95.0, id="a tier with no deadline is left out"),
        pytest.param([None], 0.0, id="nothing to show: from 0"),
    ],
)
def test_hit_rate_axis_starts_just_below_the_lowest_rate(
    rates: list[float | None], want_bottom: float
) -> None:
    bottom, top = hit_rate_limits(rates)
    assert bottom == want_bottom
    assert 100.0 < top <= 100.0 + 0.1 * (100.0 - bottom)


@pytest.mark.parametrize(
    ("waits", "want"),
    [
        pytest.param(
            [[0.0, 0.0, 30.0, 600.0, 2 * DAY], [0.0, 120.0, 3600.0, 7200.0]],
            WaitAxis(log=True, left=60.0, right=2 * DAY * 1.3, bottom=0.2),
            id="waits from seconds to days: log from a minute; the lowest curve starts at 1/4",
        ),
        pytest.param(
            [[600.0, 1200.0, 5 * DAY]],
            WaitAxis(log=True, left=600.0, right=5 * DAY * 1.3, bottom=0.3),
            id="the left end is the shortest wait when it is over a minute",
        ),
        pytest.param(
            [[0.0, 300.0, 1800.0]],
            WaitAxis(log=False, left=0.0, right=1800.0 * 1.05, bottom=0.3),
            id="under two decades: linear from 0",
        ),
        pytest.param(
            [[0.0] * 9 + [DAY]],
            WaitAxis(log=False, left=0.0, right=DAY * 1.05, bottom=0.8),
            id="nine of ten started at once: linear, the share axis from 80 %",
        ),
        pytest.param(
            [[0.0, 0.0]],
            WaitAxis(log=False, left=0.0, right=63.0, bottom=0.9),
            id="no job waited",
        ),
        pytest.param(
            [[], []], WaitAxis(log=False, left=0.0, right=63.0, bottom=0.0), id="no started job"
        ),
    ],
)
def test_wait_axis(waits: list[list[float]], want: WaitAxis) -> None:
    assert wait_axis(waits) == want


@pytest.mark.parametrize(
    ("results", "want"),
    [
        pytest.param(
            [run("a", misses=0, wait=0.0, hours=400, queue_until=10, tail_from=20)],
            TimelineWindow(20 * HOUR * 1.05, 399 * HOUR, 0),
            id="the drain stops being drawn once nothing queues and under a quarter is in use",
        ),
        pytest.param(
            [
                run("a", misses=0, wait=0.0, hours=400, queue_until=10, tail_from=20),
                run("b", misses=0, wait=0.0, hours=400, queue_until=100, tail_from=20),
            ],
            TimelineWindow(100 * HOUR * 1.05, 399 * HOUR, 0),
            id="the longest queue of any run is drawn whole",
        ),
        pytest.param(
            [
                run(
                    "a",
                    misses=0,
                    wait=0.0,
                    hours=400,
                    queue_until=10,
                    tail_from=20,
                    queued=500,
                    left=2,
                )
            ],
            TimelineWindow(20 * HOUR * 1.05, 399 * HOUR, 2),
            id="two stragglers left of a queue of 500 do not hold the drain open, and are told",
        ),
        pytest.param(
            [run("a", misses=0, wait=0.0, hours=48, queue_until=48, tail_from=48)],
            TimelineWindow(47 * HOUR, 47 * HOUR, 0),
            id="a queue that never clears: the whole timeline, never past it",
        ),
        pytest.param(
            [run("a", misses=0, wait=0.0, hours=400, queue_until=0, tail_from=5)],
            TimelineWindow(17 * HOUR * 1.05, 399 * HOUR, 0),
            id="the submit period (to 16.5 h) is always drawn, to the first sample after it",
        ),
    ],
)
def test_timeline_window(results: list[RunResult], want: TimelineWindow) -> None:
    got = timeline_window(results)
    assert (got.shown_end, got.last_sample, got.queued_after) == pytest.approx(
        (want.shown_end, want.last_sample, want.queued_after)
    )


# --------------------------------------------------------------------------- the figures


def test_hit_rates_sit_on_an_axis_near_them_with_the_legend_off_the_bars() -> None:
    figure = drawn(plots.hit_rate_figure(figures()))
    (ax,) = figure.axes
    bottom, top = ax.get_ylim()
    assert (bottom, round(top, 6)) == (90.0, 100.8)
    assert max(ax.get_yticks()) == 100.0
    labels = [t.get_text() for t in ax.texts]
    assert "98.0" in labels and "95.0" in labels
    (legend,) = figure.legends
    assert [t.get_text() for t in legend.get_texts()] == ["policy", "on-demand-only"]
    assert not overlaps(legend, ax)


def test_wait_cdfs_go_log_over_decades_with_a_legend_clear_of_every_panel() -> None:
    figure = drawn(plots.wait_figure(RESULTS, figures()))
    panels = figure.axes
    assert [ax.get_title() for ax in panels] == ["production", "research", "all tiers"]
    # The shortest positive waits: 800 s in production (even jobs), 400 s in research.
    for ax, shortest in zip(panels, (800.0, 400.0, 400.0), strict=True):
        assert ax.get_xscale() == "log"
        assert ax.get_xlim()[0] == pytest.approx(shortest / HOUR)
        assert ax.get_legend() is None
    # The share axes start below the lowest curve's start: in production a fifth of the
    # policy's jobs waited no longer than 800 s; in research none of them waited under 400 s.
    assert [ax.get_ylim()[0] for ax in panels] == pytest.approx([0.1, 0.0, 0.0])
    (legend,) = figure.legends
    assert all(not overlaps(legend, ax) for ax in panels)


def test_cost_legend_is_clear_of_the_bars_and_each_bar_says_its_share() -> None:
    results = [run("policy", misses=0, wait=0.0), run("on-demand-only", misses=0, wait=0.0)]
    figure = drawn(plots.cost_figure(figures(results)))
    (ax,) = figure.axes
    assert [t.get_text() for t in ax.texts] == ["$400\n100 %", "$400\n100 %"]
    (legend,) = figure.legends
    assert not overlaps(legend, ax)


def test_the_timeline_has_a_queue_panel_then_a_panel_per_run_and_pool() -> None:
    figure = drawn(plots.timeline_figure(RESULTS))
    axes = figure.axes
    queue, *panels, key = axes
    assert [ax.get_title(loc="left") for ax in panels] == [
        "policy, pool a100",
        "on-demand-only, pool a100",
        "policy, pool h100",
        "on-demand-only, pool h100",
    ]
    assert [line.get_label() for line in queue.get_lines()] == ["policy", "on-demand-only"]
    shown_end = timeline_window(RESULTS).shown_end
    for ax in [queue, *panels]:
        assert ax.get_xlim() == pytest.approx((0.0, shown_end / DAY))
    # One scale per pool, fitted to what is shown: a100 peaks at 44 GPUs, h100 at 28.
    assert [ax.get_ylim()[1] for ax in panels] == pytest.approx([44 * 1.08] * 2 + [28 * 1.08] * 2)
    labels = [t.get_text() for t in key.get_legend().get_texts()]
    assert labels == [
        "on-demand in use",
        "spot in use",
        "on-demand up, unused",
        "spot up, unused",
        "on-demand launching",
        "spot launching",
        "on-demand target",
    ]
    caption = " ".join(t.get_text() for t in key.texts).replace("\n", " ")
    assert "Launching: nodes not ready yet" in caption
    assert "Not drawn: days 1 to 2, the drain's tail (nothing queued" in caption
    assert all(not overlaps(key.get_legend(), ax) for ax in [queue, *panels])


def test_a_timeline_of_totals_only_is_drawn_as_one_pool() -> None:
    """Samples without per-pool figures (an engine that fills only the totals) still plot."""
    legacy = RunResult(
        name="policy",
        outcomes=RESULTS[0].outcomes,
        timeline=[
            Sample(
                time=h * HOUR,
                gpus_in_use={"spot": 8.0, "on-demand": 0.0},
                gpus_provisioned={"spot": 16.0, "on-demand": 0.0},
                on_demand_target=0.0,
                pending_jobs=0,
            )
            for h in range(24)
        ],
    )
    figure = drawn(plots.timeline_figure([legacy]))
    _, panel, _ = figure.axes
    assert panel.get_title(loc="left") == "policy"
    assert panel.get_ylim()[1] == pytest.approx(16 * 1.08)


# --------------------------------------------------------------------------- the frontier


@pytest.mark.parametrize(
    ("points", "frontier"),
    [
        pytest.param(
            [(100.0, 30.0), (30.0, 40.0), (50.0, 12.0), (47.5, 25.0)],
            [1, 3, 2],
            id="on-demand-only costs more and misses more than fixed-80-20: off the frontier",
        ),
        pytest.param(
            [(30.0, 40.0), (30.0, 35.0)],
            [1],
            id="at one cost, the fewer misses",
        ),
        pytest.param([(10.0, 5.0), (10.0, 5.0)], [0], id="of equal points, the first"),
        pytest.param(
            [(20.0, 5.0), (10.0, 5.0)],
            [1],
            id="as many misses for more cost is beaten",
        ),
        pytest.param(
            [(0.0, 50.0), (20.0, 30.0), (40.0, 20.0), (60.0, 10.0), (80.0, 5.0), (100.0, 4.0)],
            [0, 1, 2, 3, 4, 5],
            id="a static sweep that buys fewer misses at each step is all frontier",
        ),
        pytest.param([], [], id="no points"),
    ],
)
def test_pareto_frontier(points: list[tuple[float, float]], frontier: list[int]) -> None:
    assert pareto_frontier(points) == frontier


def frontier_run(name: str, *, misses: int, cost: float) -> RunResult:
    result = run(name, misses=misses, wait=0.0)
    return replace(result, cost_by_capacity_type={"on-demand": cost})


FRONTIER_RUNS = [
    frontier_run("policy", misses=3, cost=45.0),
    frontier_run("on-demand-only", misses=30, cost=100.0),
    frontier_run("all-spot", misses=40, cost=30.0),
    frontier_run("fixed-80-20", misses=12, cost=50.0),
    frontier_run("reactive", misses=25, cost=47.5),
]


def test_frontier_points_are_cost_shares_and_misses() -> None:
    points = frontier_points(figures(FRONTIER_RUNS), policy="policy")
    assert points is not None and points.relative
    assert points.policy == FrontierPoint("policy", 45.0, 3)
    assert [(p.name, p.cost, p.misses) for p in points.baselines] == [
        ("on-demand-only", 100.0, 30),
        ("all-spot", 30.0, 40),
        ("fixed-80-20", 50.0, 12),
        ("reactive", 47.5, 25),
    ]
    dollars = frontier_points(figures(FRONTIER_RUNS[2:]), policy="fixed-80-20")
    assert dollars is not None and not dollars.relative, "no on-demand-only: dollars"
    assert dollars.policy.cost == 50.0
    assert frontier_points(figures(FRONTIER_RUNS[:1]), policy="policy") is None
    assert frontier_points(figures(FRONTIER_RUNS[1:]), policy="policy") is None


def test_the_frontier_is_a_step_line_through_the_baselines_and_the_policy_a_star() -> None:
    points = frontier_points(figures(FRONTIER_RUNS), policy="policy")
    assert points is not None
    figure = drawn(plots.frontier_figure(points))
    (ax,) = figure.axes
    (step,) = [line for line in ax.get_lines() if line.get_label() == "baselines' frontier"]
    # all-spot (30, 40), reactive (47.5, 25), fixed-80-20 (50, 12), then on to the right edge.
    xs, ys = step.get_data()
    assert list(xs) == pytest.approx([30.0, 47.5, 50.0, 108.0])
    assert list(ys) == [40.0, 25.0, 12.0, 12.0]
    assert step.get_drawstyle() == "steps-post"
    labels = [t.get_text() for t in ax.texts]
    assert "policy: 3 misses at 45.0 %" in labels
    assert {"on-demand-only", "all-spot", "fixed-80-20", "reactive"} <= set(labels)
    assert ax.get_xlabel() == "cost (% of on-demand-only)"
    assert ax.get_xlim() == pytest.approx((0.0, 108.0))
    (legend,) = figure.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "baselines' frontier",
        "baselines",
        "policy",
    ]
    assert not overlaps(legend, ax)


# --------------------------------------------------------------------------- calibration


def test_the_reliability_diagram_puts_each_decile_at_predicted_against_observed() -> None:
    """150 estimates at 0.2 of which 30 missed (on the diagonal), 40 at 0.8 all missed (few:
    hollow), none elsewhere."""
    log = [RiskRecord(0.0, "p", "d", 0.2, i < 30) for i in range(150)] + [
        RiskRecord(0.0, "p", "d", 0.8, True) for _ in range(40)
    ]
    calibration = calibrate(log)
    figure = drawn(plots.calibration_figure([("policy", calibration)]))
    diagram, counts = figure.axes
    judged, sparse = diagram.collections[1:]
    assert judged.get_offsets().ravel().tolist() == pytest.approx([0.2, 0.2])
    assert sparse.get_offsets().ravel().tolist() == pytest.approx([0.8, 1.0])
    assert [t.get_text() for t in diagram.texts] == ["150", "40"]
    assert "policy: Brier score" in diagram.get_title()
    heights = [bar.get_height() for bar in counts.patches]
    assert heights == [0, 0, 150, 0, 0, 0, 0, 0, 40, 0]
    assert counts.get_yscale() == "log"


def test_write_plots_draws_the_frontier_and_calibration_only_with_something_to_show(
    tmp_path: Path,
) -> None:
    log = [RiskRecord(0.0, "p", "d", 0.5, False)]
    with_log = [replace(FRONTIER_RUNS[0], risk_log=log), *FRONTIER_RUNS[1:]]
    paths = plots.write_plots(with_log, figures(with_log), tmp_path)
    assert [p.name for p in paths] == list(plots.PLOT_FILES)
    alone = FRONTIER_RUNS[:1]
    paths = plots.write_plots(alone, figures(alone), tmp_path)
    assert [p.name for p in paths] == list(plots.PLOT_FILES[:4])
    assert not (tmp_path / plots.FRONTIER).exists(), "the earlier frontier is removed"
    assert not (tmp_path / plots.CALIBRATION).exists()
