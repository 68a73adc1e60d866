"""PNG plots of a replay's runs, side by side: deadline hits, waits, cost, GPUs over time, the
cost-versus-misses frontier, and the calibration of the policy's risks.

Each plot answers one question, named in its title, and is drawn so the answer is seen at a
glance: axes span the data (hit rates that all sit between 95 and 98 % get an axis from 90 %,
not from 0), values are written on bars, and legends sit outside the axes, below or beside
them, where they hide nothing. The choices that need numbers (axis ranges, where the timeline
stops) are pure functions here, tested on their own.

matplotlib is imported only when plots are drawn: the other commands do not pay for importing
it, and an environment installed before it became a dependency still replays and writes the
summaries (`available()` says whether plots can be drawn). Figures are drawn on
matplotlib's Agg canvas directly, never through pyplot: no global figure registry to leak
figures into, no GUI backend chosen from the environment, and the same output on a laptop and
in CI.

Waits are drawn as CDFs rather than box plots: a CDF shows every percentile of a skewed
distribution at once, and `Axes.step` has kept its signature across matplotlib releases where
`boxplot` renamed its arguments.
"""

from __future__ import annotations

import importlib.util
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.render.karpenter import CONSOLIDATE_AFTER as RENDERED_CONSOLIDATE_AFTER
from controller.sim.calibration import MIN_ESTIMATES, Calibration
from controller.sim.karpenter import duration_seconds
from controller.sim.model import FlavorGpus, RunResult, Sample
from controller.sim.report import (
    ALL_TIERS,
    CAPACITY_TYPES,
    ON_DEMAND,
    SPOT,
    RunFigures,
    format_seconds,
)
from controller.sim.tables import started_waits, submit_times

if TYPE_CHECKING:
    from matplotlib.artist import Artist  # type: ignore[import-not-found, unused-ignore]
    from matplotlib.axes import Axes  # type: ignore[import-not-found, unused-ignore]
    from matplotlib.figure import Figure  # type: ignore[import-not-found, unused-ignore]

HIT_RATE = "hit_rate_by_tier.png"
WAITS = "wait_cdf_by_tier.png"
COST = "cost_by_capacity_type.png"
TIMELINE = "gpus_over_time.png"
FRONTIER = "frontier.png"
CALIBRATION = "calibration.png"
PLOT_FILES = (HIT_RATE, WAITS, COST, TIMELINE, FRONTIER, CALIBRATION)
"""Every plot a replay may draw; the last two only when there is something to show."""
POLICY_RUN = "policy"
"""The run the frontier plot sets apart from the baselines (`engine.POLICY`'s name)."""
CALIBRATION_BAND = 0.05
"""The calibration goal's tolerance, drawn around the diagonal."""
DPI = 100
DAY = 86400.0
HOUR = 3600.0
CDF_POINTS = 2000
"""A CDF of more waits than this is drawn through this many quantiles: the same curve to the
eye, and a plot of 100,000 jobs stays quick to draw."""
CAPACITY_COLORS = {SPOT: "tab:orange", ON_DEMAND: "tab:blue"}
HIT_RATE_STEP = 5.0
"""The hit-rate axis starts at a multiple of this many percent, below the lowest rate."""
LOG_WAITS_FROM = 100.0
"""Waits are drawn on a log axis when the longest is this many times the axis's left end."""
SHORTEST_WAIT = 60.0
"""Seconds: the left end of a log wait axis is at least this; shorter waits (a job placed at
once on a node already up waits 0 s) are the height the curve starts at."""
WAIT_TICKS = (
    ("1 min", 60.0),
    ("10 min", 600.0),
    ("1 h", HOUR),
    ("6 h", 6 * HOUR),
    ("1 d", DAY),
    ("1 w", 7 * DAY),
    ("4 w", 28 * DAY),
    ("12 w", 84 * DAY),
)
"""Log wait axis ticks, in steps of 3 to 10 so their labels never crowd."""
SHARE_STEP = 0.1
"""The wait CDF's share axis starts at a multiple of this below the lowest curve."""
DRAIN_IN_USE = 0.25
"""After the last submit, a timeline is drawn until its GPUs in use are at most this share of
the run's peak and its queue at most `DRAIN_QUEUED` of its longest; what follows is the
drain's tail, the last long jobs finishing."""
DRAIN_QUEUED = 0.01
"""A hundredth: a few stragglers left of a long queue do not hold the drain open."""


INSTALL_HINT = "pip install 'quartermaster[sim]' (in a checkout, make setup installs it)"
"""How to get the plots: matplotlib comes with the `sim` extra, which the controller image
leaves out. Said wherever a missing plot could surprise: the command's help and output."""


def available() -> bool:
    """Whether matplotlib can be imported (only plots need it)."""
    return importlib.util.find_spec("matplotlib") is not None


def write_plots(
    results: Sequence[RunResult],
    figures: Sequence[RunFigures],
    out: Path,
    *,
    policy: str = POLICY_RUN,
) -> list[Path]:
    """Draw the plots into `out` and return their paths, in `PLOT_FILES` order.

    The frontier is drawn when the run named `policy` ran beside at least one baseline, the
    calibration when some run estimated risks; a plot not drawn is removed from `out`, so none
    is left from an earlier replay. `results` and `figures` are the same runs in the same
    order. Raises ModuleNotFoundError when matplotlib is missing (check `available()` first).
    """
    if [r.name for r in results] != [f.name for f in figures]:
        raise ValueError("results and figures must be the same runs in the same order")
    out.mkdir(parents=True, exist_ok=True)
    drawn = [
        (HIT_RATE, hit_rate_figure(figures)),
        (WAITS, wait_figure(results, figures)),
        (COST, cost_figure(figures)),
        (TIMELINE, timeline_figure(results)),
    ]
    points = frontier_points(figures, policy=policy)
    if points is not None:
        drawn.append((FRONTIER, frontier_figure(points)))
    calibrated = [(f.name, f.calibration) for f in figures if f.calibration is not None] + [
        (f"{f.name}, recalibrated", f.recalibrated) for f in figures if f.recalibrated is not None
    ]
    if any(c.count for _, c in calibrated):
        drawn.append((CALIBRATION, calibration_figure(calibrated)))
    paths = []
    for name, figure in drawn:
        path = out / name
        figure.savefig(path, dpi=DPI)
        paths.append(path)
    for name in set(PLOT_FILES) - {name for name, _ in drawn}:
        (out / name).unlink(missing_ok=True)
    return paths


# --------------------------------------------------------------------------- axis choices


def hit_rate_limits(rates: Sequence[float | None]) -> tuple[float, float]:
    """The hit-rate axis (percent): from a multiple of `HIT_RATE_STEP` at least a point below
    the lowest rate, to 100 plus room for the values written above the bars."""
    known = [r for r in rates if r is not None]
    lowest = min(known, default=0.0)
    bottom = max(0.0, math.floor((lowest - 1.0) / HIT_RATE_STEP) * HIT_RATE_STEP)
    return bottom, 100.0 + 0.08 * (100.0 - bottom)


@dataclass(frozen=True)
class WaitAxis:
    """How a tier's wait CDF is drawn: x in seconds, y the share of started jobs."""

    log: bool
    left: float
    right: float
    bottom: float
    """The share axis's lower end: just below the lowest share any run starts at."""


def wait_axis(waits: Sequence[Sequence[float]]) -> WaitAxis:
    """The axes for every run's waits (one sequence per run) of one tier.

    Log when the waits span two decades or more above `SHORTEST_WAIT`, else linear from 0. On
    a log axis the left end is the shortest positive wait (at least a minute), so each curve
    starts at the share of jobs that waited no longer; the right end is just past the longest.
    The share axis starts at a multiple of `SHARE_STEP` below the lowest of those starts: most
    jobs often start at once, and an axis from 0 would spend most of its height on them.
    """
    every = [w for run in waits for w in run]
    longest = max(every, default=0.0)
    positive = [w for w in every if w > 0]
    left = max(min(positive, default=SHORTEST_WAIT), SHORTEST_WAIT)
    log = longest >= LOG_WAITS_FROM * left
    if not log:
        left = 0.0
    starts = [sum(1 for w in run if w <= left) / len(run) for run in waits if run]
    lowest = min(starts, default=0.0)
    bottom = max(0.0, math.floor((lowest - 0.02) / SHARE_STEP) * SHARE_STEP)
    right = longest * 1.3 if log else max(longest, SHORTEST_WAIT) * 1.05
    return WaitAxis(log=log, left=left, right=right, bottom=round(bottom, 6))


@dataclass(frozen=True)
class TimelineWindow:
    """How much of the replay the timeline draws, in seconds from its start."""

    shown_end: float
    last_sample: float
    queued_after: int
    """The most jobs any run had queued after `shown_end`: what the cut leaves out."""

    @property
    def cut(self) -> bool:
        return self.last_sample > self.shown_end * 1.001


def timeline_window(results: Sequence[RunResult]) -> TimelineWindow:
    """The part of the replay the timeline draws.

    The submit period always. After it, each run until its GPUs in use are at most
    `DRAIN_IN_USE` of its peak and its queue at most `DRAIN_QUEUED` of its longest (nothing, for
    a queue under a hundred): past that only the last long jobs run (weeks, in Philly) and a
    few stragglers queue. GPUs in use, not up: nodes a few small jobs keep up can stay for
    weeks, and what they cost is the cost plot's. The end drawn is the latest of the runs',
    plus a twentieth so the last step is seen, never past the data.
    """
    last_submit = max((t for r in results for t in submit_times(r.outcomes)), default=0.0)
    last_sample = max((r.timeline[-1].time for r in results if r.timeline), default=0.0)
    end = last_submit
    for result in results:
        peak_in_use = max((_in_use(s) for s in result.timeline), default=0.0)
        peak_queued = max((s.pending_jobs for s in result.timeline), default=0)
        settled = next(
            (
                s.time
                for s in result.timeline
                if s.time >= last_submit
                and s.pending_jobs <= DRAIN_QUEUED * peak_queued
                and _in_use(s) <= DRAIN_IN_USE * peak_in_use
            ),
            result.timeline[-1].time if result.timeline else last_submit,
        )
        end = max(end, settled)
    shown_end = min(end * 1.05, max(last_sample, end))
    queued_after = max(
        (s.pending_jobs for r in results for s in r.timeline if s.time > shown_end), default=0
    )
    return TimelineWindow(shown_end, last_sample, queued_after)


def _in_use(sample: Sample) -> float:
    return sum(sample.gpus_in_use.values())


@dataclass(frozen=True)
class FrontierPoint:
    name: str
    cost: float
    """Percent of on-demand-only's cost when every run has it, else dollars."""
    misses: int


@dataclass(frozen=True)
class FrontierPoints:
    """What the frontier plot draws: the baselines, the policy, and the cost's unit."""

    baselines: tuple[FrontierPoint, ...]
    policy: FrontierPoint
    relative: bool
    """Whether cost is a percentage of on-demand-only's (else dollars)."""


def frontier_points(figures: Sequence[RunFigures], *, policy: str) -> FrontierPoints | None:
    """The runs as (cost, overall misses); None without the policy run or any baseline.

    Cost is the share of on-demand-only's when that baseline ran, so the axis reads the same
    across traces; dollars otherwise.
    """
    found = next((f for f in figures if f.name == policy), None)
    others = [f for f in figures if f.name != policy]
    if found is None or not others:
        return None
    relative = all(f.cost_vs_on_demand_only is not None for f in figures)

    def point(run: RunFigures) -> FrontierPoint:
        cost = run.cost_vs_on_demand_only if relative else None
        return FrontierPoint(run.name, run.total_cost if cost is None else cost, run.overall.missed)

    return FrontierPoints(tuple(point(f) for f in others), point(found), relative)


def pareto_frontier(points: Sequence[tuple[float, float]]) -> list[int]:
    """The indices of the points no other point beats on both cost (x) and misses (y), by
    cost: each costs more than the one before and misses fewer. Of equal points, the first."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1], i))
    frontier: list[int] = []
    for i in order:
        if not frontier or points[i][1] < points[frontier[-1]][1]:
            frontier.append(i)
    return frontier


# --------------------------------------------------------------------------- drawing


def _figure(width: float, height: float) -> Figure:
    """A figure on its own Agg canvas: the Agg backend, explicitly, whatever MPLBACKEND says."""
    # Imported here, not at the top: see the module docstring.
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415
    from matplotlib.figure import Figure  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _color(index: int) -> str:
    """The run's color, the same in every plot."""
    return f"C{index % 10}"


def _tier_groups(figures: Sequence[RunFigures]) -> list[str]:
    groups: list[str] = []
    for run in figures:
        for tier in run.tiers:
            if tier.tier not in groups:
                groups.append(tier.tier)
    return [*groups, ALL_TIERS]


def _group_label(group: str) -> str:
    return "all tiers" if group == ALL_TIERS else group


def _rate(run: RunFigures, group: str) -> float | None:
    try:
        rate = run.tier(group).hit_rate
    except KeyError:
        return None
    return None if rate is None else 100.0 * rate


def hit_rate_figure(figures: Sequence[RunFigures]) -> Figure:
    """Which run met the most deadlines, tier by tier."""
    groups = _tier_groups(figures)
    figure = _figure(max(6.0, len(groups) * (0.9 + 0.45 * len(figures))), 4.8)
    ax: Axes = figure.add_subplot(1, 1, 1)
    positions = np.arange(len(groups), dtype=float)
    width = 0.8 / max(len(figures), 1)
    rates = [[_rate(run, group) for group in groups] for run in figures]
    bottom, top = hit_rate_limits([r for row in rates for r in row])
    for i, (run, row) in enumerate(zip(figures, rates, strict=True)):
        offsets = positions - 0.4 + width * (i + 0.5)
        heights = [math.nan if rate is None else rate for rate in row]
        bars = ax.bar(offsets, heights, width, label=run.name, color=_color(i))
        ax.bar_label(
            bars,
            labels=["" if rate is None else f"{rate:.1f}" for rate in row],
            fontsize="x-small",
            padding=1,
        )
        for offset, rate in zip(offsets, row, strict=True):
            if rate is None:
                ax.text(offset, bottom, " no deadlines", rotation=90, ha="center", va="bottom")
    ax.set_xticks(positions, [_group_label(g) for g in groups])
    ax.set_ylim(bottom, top)
    ax.set_yticks([t for t in ax.get_yticks() if bottom <= t <= 100.0])
    ax.set_ylabel(f"deadlines met (%, axis from {bottom:g} %)")
    ax.grid(axis="y", linewidth=0.5, alpha=0.5)
    ax.set_axisbelow(True)
    ax.set_title("Share of deadlines met, by tier (unfinished jobs count as missed)")
    if figures:
        figure.legend(loc="outside lower center", ncols=min(len(figures), 5), fontsize="small")
    return figure


def _cdf(waits: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """(wait seconds, fraction of started jobs) along the empirical CDF."""
    values = np.sort(np.asarray(waits, dtype=float))
    fractions = np.arange(1, len(values) + 1, dtype=float) / len(values)
    if len(values) > CDF_POINTS:
        fractions = np.linspace(0.0, 1.0, CDF_POINTS + 1)
        values = np.quantile(values, fractions)
    return values, fractions


def _wait_unit(right: float) -> tuple[str, float]:
    if right >= 2 * DAY:
        return "days", DAY
    if right >= 2 * HOUR:
        return "hours", HOUR
    return "minutes", 60.0


def wait_figure(results: Sequence[RunResult], figures: Sequence[RunFigures]) -> Figure:
    """How long jobs waited to start, tier by tier: each curve is the share of a run's started
    jobs that waited at most x."""
    groups = _tier_groups(figures)
    columns = min(len(groups), 2)
    rows = -(-len(groups) // columns)
    figure = _figure(6.0 * columns, 3.4 * rows + 0.6)
    started = [started_waits(r.outcomes) for r in results]
    for g, group in enumerate(groups):
        ax: Axes = figure.add_subplot(rows, columns, g + 1)
        by_run = [[wait for tier, wait in run if group in (ALL_TIERS, tier)] for run in started]
        scale = wait_axis(by_run)
        ax.set_title(_group_label(group))
        ax.set_ylabel("share of started jobs")
        ax.grid(linewidth=0.5, alpha=0.5)
        if not any(by_run):
            ax.text(0.5, 0.5, "no started jobs", ha="center", va="center", transform=ax.transAxes)
            continue
        unit, seconds = ("hours", HOUR) if scale.log else _wait_unit(scale.right)
        for i, (result, waits) in enumerate(zip(results, by_run, strict=True)):
            if waits:
                x, fractions = _cdf(waits)
                ax.step(x / seconds, fractions, where="post", label=result.name, color=_color(i))
        if scale.log:
            ax.set_xscale("log", nonpositive="clip")
            ticks = [(label, at) for label, at in WAIT_TICKS if scale.left <= at <= scale.right]
            ax.set_xticks([at / HOUR for _, at in ticks], [label for label, _ in ticks])
            ax.minorticks_off()
            shortest = format_seconds(scale.left).replace(".0 ", " ")
            ax.set_xlabel(f"wait (log scale; curves start at the share waiting {shortest} or less)")
        else:
            ax.set_xlabel(f"wait ({unit})")
        ax.set_xlim(scale.left / seconds, scale.right / seconds)
        ax.set_ylim(scale.bottom, 1.01)
    figure.suptitle("How long jobs waited from submit to first start, by tier")
    if results:
        figure.legend(
            *figure.axes[0].get_legend_handles_labels(),
            loc="outside lower center",
            ncols=min(len(results), 5),
            fontsize="small",
        )
    return figure


def cost_figure(figures: Sequence[RunFigures]) -> Figure:
    """What each run paid for its nodes, spot and on-demand, and how that compares with
    running on-demand only."""
    from matplotlib.ticker import FuncFormatter  # type: ignore[import-not-found, unused-ignore]  # noqa: PLC0415

    figure = _figure(max(6.5, 1.4 * len(figures) + 2.0), 4.8)
    ax: Axes = figure.add_subplot(1, 1, 1)
    positions = np.arange(len(figures), dtype=float)
    bottom = np.zeros(len(figures))
    for capacity_type in CAPACITY_TYPES:
        heights = np.array([run.cost[capacity_type] for run in figures], dtype=float)
        ax.bar(
            positions,
            heights,
            0.6,
            bottom=bottom,
            label=capacity_type,
            color=CAPACITY_COLORS[capacity_type],
        )
        bottom = bottom + heights
    compared = any(run.cost_vs_on_demand_only is not None for run in figures)
    for position, run in zip(positions, figures, strict=True):
        share = (
            "" if run.cost_vs_on_demand_only is None else f"\n{run.cost_vs_on_demand_only:.0f} %"
        )
        ax.text(
            float(position),
            run.total_cost,
            f"${run.total_cost:,.0f}{share}",
            ha="center",
            va="bottom",
            fontsize="small",
        )
    ax.set_xticks(positions, [run.name for run in figures])
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"${value:,.0f}"))
    ax.set_ylabel("cost of provisioned GPU-hours")
    ax.set_ylim(0, max([*(run.total_cost for run in figures), 1.0]) * 1.2)
    ax.grid(axis="y", linewidth=0.5, alpha=0.5)
    ax.set_axisbelow(True)
    ax.set_title(
        "What each run paid for its nodes, by capacity type"
        + ("\n(above each bar: the total, and as a share of on-demand-only's)" if compared else ""),
        fontsize="medium",
    )
    # Listed top down, as the bands are stacked.
    handles, labels = ax.get_legend_handles_labels()
    figure.legend(
        handles[::-1], labels[::-1], loc="outside lower center", ncols=2, fontsize="small"
    )
    return figure


TARGET_LABEL = "on-demand target"
PANEL_INCHES = 2.2
"""The height of one run's panels in the timeline."""
CAPTION_WIDTH = 160
"""Characters a line of the timeline's caption holds (small type across a 10-inch figure)."""
ALL_POOLS = "all pools"
"""The one panel of a timeline whose samples carry no per-pool figures."""
_NO_GPUS = FlavorGpus(in_use=0.0, idle=0.0, launching=0.0)


def timeline_pools(results: Sequence[RunResult]) -> list[str]:
    """The pools the timelines hold, by name; [ALL_POOLS] when the samples have only totals."""
    pools = {
        pool
        for r in results
        for s in r.timeline
        for pool in [*s.on_demand_target_by_pool, *(p for p, _ in s.by_flavor)]
    }
    return sorted(pools) or [ALL_POOLS]


def _flavor(sample: Sample, pool: str, capacity_type: str) -> FlavorGpus:
    if pool == ALL_POOLS:
        # Totals only: what is up but not in use cannot be told idle from launching.
        used = sample.gpus_in_use.get(capacity_type, 0.0)
        up = sample.gpus_provisioned.get(capacity_type, 0.0)
        return FlavorGpus(in_use=used, idle=up - used, launching=0.0)
    return sample.by_flavor.get((pool, capacity_type), _NO_GPUS)


def _target(sample: Sample, pool: str) -> float:
    if pool == ALL_POOLS:
        return sample.on_demand_target
    return sample.on_demand_target_by_pool.get(pool, 0.0)


def _bands(timeline: Sequence[Sample], pool: str) -> list[tuple[str, np.ndarray, dict[str, Any]]]:
    """The stacked bands, bottom up: what runs, then what is up unused, then what is coming;
    on-demand below spot in each."""
    bands: list[tuple[str, np.ndarray, dict[str, Any]]] = []
    for state in ("in use", "up, unused", "launching"):
        for c in (ON_DEMAND, SPOT):
            flavors = [_flavor(s, pool, c) for s in timeline]
            if state == "in use":
                values = [f.in_use for f in flavors]
                style: dict[str, Any] = {"color": CAPACITY_COLORS[c], "linewidth": 0}
            elif state == "up, unused":
                values = [f.idle for f in flavors]
                style = {"color": CAPACITY_COLORS[c], "alpha": 0.35, "linewidth": 0}
            else:
                values = [f.launching for f in flavors]
                style = {
                    "facecolor": "none",
                    "edgecolor": CAPACITY_COLORS[c],
                    "hatch": "////",
                    "linewidth": 0,
                }
            bands.append((f"{c} {state}", np.asarray(values, dtype=float), style))
    return bands


def timeline_figure(results: Sequence[RunResult]) -> Figure:
    """How many GPUs each run had up, of which type, how many ran jobs, and how many jobs
    queued meanwhile: a top panel of queued jobs, then one row per run and one column per
    pool, stacked bands of the nodes' GPUs with the on-demand target over them, then a key."""
    pools = timeline_pools(results)
    count = max(len(results), 1)
    window = timeline_window(results)
    shown_end = window.shown_end
    caption = textwrap.fill(timeline_caption(window), CAPTION_WIDTH)
    # Two legend rows and the caption's lines, in inches of small type with their spacing.
    key_inches = 0.55 + 0.17 * (caption.count("\n") + 1)
    figure = _figure(5.5 * len(pools) + 5.0, 1.9 + PANEL_INCHES * (count + 0.8) + key_inches)
    # Rows: the queue, one per run, and a key (legend and caption) that no panel shares.
    grid = figure.add_gridspec(
        count + 2,
        len(pools),
        height_ratios=[0.8] + [1.0] * count + [key_inches / PANEL_INCHES],
    )
    queue: Axes = figure.add_subplot(grid[0, :])
    _queue_panel(queue, results, shown_end)
    legend: dict[str, Artist] = {}
    for p, pool in enumerate(pools):
        column: list[Axes] = []
        high = 1.0
        for i, result in enumerate(results):
            ax: Axes = figure.add_subplot(grid[i + 1, p], sharex=queue)
            ax.set_title(
                result.name if len(pools) == 1 else f"{result.name}, pool {pool}",
                loc="left",
                fontsize="medium",
            )
            ax.set_ylabel("GPUs" if p == 0 else "")
            ax.tick_params(labelbottom=i == len(results) - 1)
            drawn, highest = _pool_panel(ax, result.timeline, pool, shown_end=shown_end)
            legend.update(drawn)
            column.append(ax)
            high = max(high, highest)
        # One scale down a column, so runs compare by height, fitted to what is shown.
        for ax in column:
            ax.set_ylim(0, high * 1.08)
        if column:
            column[-1].set_xlabel("days from the start of the replay")
    queue.tick_params(labelbottom=not results)
    key: Axes = figure.add_subplot(grid[-1, :])
    key.axis("off")
    if legend:
        key.legend(
            list(legend.values()),
            list(legend),
            loc="upper center",
            ncols=4,
            fontsize="small",
            frameon=False,
        )
    key.text(
        0.5,
        0.0,
        caption,
        ha="center",
        va="bottom",
        fontsize="small",
        transform=key.transAxes,
    )
    figure.suptitle("GPUs up, in use, and the on-demand target over time (hourly samples)")
    return figure


def timeline_caption(window: TimelineWindow) -> str:
    """What the timeline's bands mean, and what part of the replay it leaves out."""
    if not window.cut:
        return TIMELINE_CAPTION
    queued = (
        f"at most {window.queued_after:,} jobs queued" if window.queued_after else "nothing queued"
    )
    return (
        f"{TIMELINE_CAPTION} Not drawn: days {window.shown_end / DAY:.0f} to "
        f"{window.last_sample / DAY:.0f}, the drain's tail ({queued}, under "
        f"{DRAIN_IN_USE:.0%} of the peak GPUs in use: the last long jobs finishing)."
    )


def _queue_panel(ax: Axes, results: Sequence[RunResult], shown_end: float) -> None:
    for i, result in enumerate(results):
        ax.step(
            [s.time / DAY for s in result.timeline],
            [s.pending_jobs for s in result.timeline],
            where="post",
            color=_color(i),
            label=result.name,
        )
    ax.set_ylabel("jobs queued\n(Kueue pending)")
    ax.set_xlim(0, shown_end / DAY)
    ax.set_ylim(bottom=0)
    ax.grid(linewidth=0.5, alpha=0.5)
    if results:
        # A row above the panel: inside, it would hide some run's queue.
        ax.legend(
            loc="lower left",
            bbox_to_anchor=(0.0, 1.0),
            ncols=len(results),
            fontsize="small",
            frameon=False,
        )


def _pool_panel(
    ax: Axes, timeline: Sequence[Sample], pool: str, *, shown_end: float
) -> tuple[dict[str, Artist], float]:
    """One run's pool: the stacked bands and the on-demand target.

    Returns label -> artist for the legend, and the highest value drawn up to `shown_end`.
    """
    ax.grid(linewidth=0.5, alpha=0.5)
    ax.set_axisbelow(True)
    if not timeline:
        ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
        return {}, 0.0
    days = np.array([s.time / DAY for s in timeline])
    target = np.array([_target(s, pool) for s in timeline])
    drawn: dict[str, Artist] = {}
    base = np.zeros(len(days))
    for label, values, style in _bands(timeline, pool):
        top = base + values
        drawn[label] = ax.fill_between(days, base, top, step="post", label=label, **style)
        base = top
    (drawn[TARGET_LABEL],) = ax.step(
        days,
        target,
        where="post",
        color="black",
        linestyle=":",
        linewidth=1.2,
        label=TARGET_LABEL,
    )
    shown = days <= shown_end / DAY + 1e-9
    highest = max(base[shown].max(initial=0.0), target[shown].max(initial=0.0))
    return drawn, float(highest)


TIMELINE_CAPTION = (
    "Up, unused: GPUs of ready nodes no job holds (the rest of a part-used node, a node "
    "waiting for the others a wide job needs, or an empty node in the "
    f"{duration_seconds(RENDERED_CONSOLIDATE_AFTER) / 60:g} min before it is removed). "
    "Launching: nodes not ready yet "
    "(provisioning latency; an interrupted spot node is relaunched for its jobs). The "
    "on-demand target caps launches; nodes running jobs stay until they empty."
)


def frontier_figure(points: FrontierPoints) -> Figure:
    """Does the policy buy fewer misses for its cost than any baseline? Each baseline is a
    point (cost, misses); the step line is their frontier, the fewest misses a baseline
    reaches at each cost. The policy below or left of it beats every mix the baselines set."""
    figure = _figure(7.5, 5.2)
    ax: Axes = figure.add_subplot(1, 1, 1)
    baselines = points.baselines
    coordinates = [(b.cost, float(b.misses)) for b in baselines]
    front = [baselines[i] for i in pareto_frontier(coordinates)]
    costs = [b.cost for b in baselines] + [points.policy.cost]
    right = max([*costs, 1.0]) * 1.08
    xs = [p.cost for p in front] + [right]
    ys = [float(p.misses) for p in front] + [float(front[-1].misses)]
    ax.step(xs, ys, where="post", color="tab:gray", linewidth=1.5, label="baselines' frontier")
    ax.scatter(
        [b.cost for b in baselines],
        [b.misses for b in baselines],
        color="tab:gray",
        edgecolors="black",
        zorder=3,
        label="baselines",
    )
    for b in baselines:
        ax.annotate(
            b.name,
            (b.cost, b.misses),
            textcoords="offset points",
            xytext=(5, 5),
            fontsize="small",
        )
    unit = "% of on-demand-only" if points.relative else "$"
    policy_cost = (
        f"{points.policy.cost:.1f} %" if points.relative else f"${points.policy.cost:,.0f}"
    )
    ax.scatter(
        [points.policy.cost],
        [points.policy.misses],
        marker="*",
        s=260,
        color="tab:red",
        edgecolors="black",
        zorder=4,
        label=points.policy.name,
    )
    ax.annotate(
        f"{points.policy.name}: {points.policy.misses:,} misses at {policy_cost}",
        (points.policy.cost, points.policy.misses),
        textcoords="offset points",
        xytext=(8, -14),
        fontsize="small",
        color="tab:red",
        fontweight="bold",
    )
    top = max([*(p.misses for p in (*baselines, points.policy)), 1])
    ax.set_xlim(0, right)
    ax.set_ylim(0, top * 1.15)
    ax.set_xlabel(f"cost ({unit})")
    ax.set_ylabel("deadlines missed (all tiers)")
    ax.grid(linewidth=0.5, alpha=0.5)
    ax.set_axisbelow(True)
    ax.set_title(
        "Cost against missed deadlines: the baselines' frontier and the policy\n"
        "(below or left of the line: fewer misses than any baseline at that cost)",
        fontsize="medium",
    )
    figure.legend(loc="outside lower center", ncols=3, fontsize="small")
    return figure


def calibration_figure(calibrated: Sequence[tuple[str, Calibration]]) -> Figure:
    """Does a risk of 0.3 come true three times in ten? Per decile of predicted risk, the
    observed share of missed deadlines against the mean predicted risk; on the diagonal is
    right. Below, how many estimates each decile holds."""
    figure = _figure(7.0, 7.5)
    grid = figure.add_gridspec(2, 1, height_ratios=[3, 1.2])
    ax: Axes = figure.add_subplot(grid[0])
    counts: Axes = figure.add_subplot(grid[1])
    ax.plot([0, 1], [0, 1], color="black", linestyle="--", linewidth=1, label="perfect")
    ax.fill_between(
        [0, 1],
        [-CALIBRATION_BAND, 1 - CALIBRATION_BAND],
        [CALIBRATION_BAND, 1 + CALIBRATION_BAND],
        color="tab:green",
        alpha=0.12,
        linewidth=0,
        label=f"within +/-{CALIBRATION_BAND:g}",
    )
    width = 0.08 / max(len(calibrated), 1)
    briers = []
    for i, (name, calibration) in enumerate(calibrated):
        color = _color(i)
        shown = [
            (d.mean_predicted, d.observed, d.count)
            for d in calibration.deciles
            if d.mean_predicted is not None and d.observed is not None
        ]
        judged = [(x, y) for x, y, n in shown if n >= MIN_ESTIMATES]
        sparse = [(x, y) for x, y, n in shown if n < MIN_ESTIMATES]
        ax.plot([x for x, _, _ in shown], [y for _, y, _ in shown], color=color, linewidth=1)
        ax.scatter(
            [x for x, _ in judged],
            [y for _, y in judged],
            color=color,
            zorder=3,
            label=f"{name} (>= {MIN_ESTIMATES} estimates)",
        )
        ax.scatter(
            [x for x, _ in sparse],
            [y for _, y in sparse],
            facecolors="none",
            edgecolors=color,
            zorder=3,
            label=f"{name} (fewer: not judged)",
        )
        for x, y, n in shown:
            ax.annotate(
                f"{n:,}",
                (x, y),
                textcoords="offset points",
                xytext=(4, 6) if y < 0.9 else (4, -12),
                fontsize="x-small",
                color=color,
            )
        offsets = [d.low + 0.05 - 0.04 + width * (i + 0.5) for d in calibration.deciles]
        counts.bar(offsets, [d.count for d in calibration.deciles], width, color=color)
        brier = "-" if calibration.brier is None else f"{calibration.brier:.4f}"
        briers.append(f"{name}: Brier score {brier}, {calibration.count:,} estimates")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("mean predicted risk in the decile")
    ax.set_ylabel("observed share of deadlines missed")
    ax.set_aspect("equal", adjustable="box")
    ax.grid(linewidth=0.5, alpha=0.5)
    ax.legend(loc="upper left", fontsize="small")
    ax.set_title(
        "Calibration of the estimated deadline risks (numbers: estimates per decile)\n"
        + "; ".join(briers),
        fontsize="medium",
    )
    counts.set_xlim(0, 1)
    counts.set_xticks([k / 10 for k in range(11)])
    if any(d.count for _, c in calibrated for d in c.deciles):
        counts.set_yscale("log")
    counts.axhline(MIN_ESTIMATES, color="black", linestyle=":", linewidth=1)
    counts.set_xlabel("predicted risk (deciles)")
    counts.set_ylabel("estimates (log)")
    counts.grid(axis="y", linewidth=0.5, alpha=0.5)
    return figure
