"""PNG plots of a replay's runs, side by side: deadline hits, waits, cost and GPUs over time.

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
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.sim.model import RunResult
from controller.sim.report import ALL_TIERS, CAPACITY_TYPES, ON_DEMAND, SPOT, RunFigures

if TYPE_CHECKING:
    from matplotlib.artist import Artist  # type: ignore[import-not-found, unused-ignore]
    from matplotlib.axes import Axes  # type: ignore[import-not-found, unused-ignore]
    from matplotlib.figure import Figure  # type: ignore[import-not-found, unused-ignore]

HIT_RATE = "hit_rate_by_tier.png"
WAITS = "wait_cdf_by_tier.png"
COST = "cost_by_capacity_type.png"
TIMELINE = "gpus_over_time.png"
PLOT_FILES = (HIT_RATE, WAITS, COST, TIMELINE)
DPI = 100
CDF_POINTS = 2000
"""A CDF of more waits than this is drawn through this many quantiles: the same curve to the
eye, and a plot of 100,000 jobs stays quick to draw."""
CAPACITY_COLORS = {SPOT: "tab:orange", ON_DEMAND: "tab:blue"}


def available() -> bool:
    """Whether matplotlib can be imported (only plots need it)."""
    return importlib.util.find_spec("matplotlib") is not None


def write_plots(
    results: Sequence[RunResult], figures: Sequence[RunFigures], out: Path
) -> list[Path]:
    """Draw the four plots into `out` and return their paths, in `PLOT_FILES` order.

    `results` and `figures` are the same runs in the same order. Raises ModuleNotFoundError
    when matplotlib is missing (check `available()` first).
    """
    if [r.name for r in results] != [f.name for f in figures]:
        raise ValueError("results and figures must be the same runs in the same order")
    out.mkdir(parents=True, exist_ok=True)
    drawn = [
        (HIT_RATE, _hit_rates(figures)),
        (WAITS, _waits(results, figures)),
        (COST, _costs(figures)),
        (TIMELINE, _timelines(results)),
    ]
    paths = []
    for name, figure in drawn:
        path = out / name
        figure.savefig(path, dpi=DPI)
        paths.append(path)
    return paths


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


def _hit_rates(figures: Sequence[RunFigures]) -> Figure:
    groups = _tier_groups(figures)
    figure = _figure(max(6.0, 1.6 * len(groups) + 0.4 * len(figures)), 4.5)
    ax: Axes = figure.add_subplot(1, 1, 1)
    positions = np.arange(len(groups), dtype=float)
    width = 0.8 / max(len(figures), 1)
    for i, run in enumerate(figures):
        rates: list[float | None] = []
        for group in groups:
            try:
                rates.append(run.tier(group).hit_rate)
            except KeyError:
                rates.append(None)
        heights = [0.0 if rate is None else 100.0 * rate for rate in rates]
        offsets = positions - 0.4 + width * (i + 0.5)
        bars = ax.bar(offsets, heights, width, label=run.name, color=_color(i))
        # The values, since runs often differ by a point or two on a 0-100 axis.
        labels = ["-" if rate is None else f"{100.0 * rate:.1f}" for rate in rates]
        ax.bar_label(bars, labels=labels, fontsize="xx-small", padding=1)
    ax.set_xticks(positions, ["overall" if g == ALL_TIERS else g for g in groups])
    ax.set_ylim(0, 105)
    ax.set_ylabel("deadlines met (%)")
    ax.set_title("Deadline hit rate by tier (unfinished jobs count as missed)")
    if figures:
        ax.legend(loc="lower right", fontsize="small")
    return figure


def _cdf(waits: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """(wait hours, fraction of started jobs) along the empirical CDF."""
    values = np.sort(np.asarray(waits, dtype=float)) / 3600.0
    fractions = np.arange(1, len(values) + 1, dtype=float) / len(values)
    if len(values) > CDF_POINTS:
        fractions = np.linspace(0.0, 1.0, CDF_POINTS + 1)
        values = np.quantile(values, fractions)
    return values, fractions


def _waits(results: Sequence[RunResult], figures: Sequence[RunFigures]) -> Figure:
    groups = _tier_groups(figures)
    columns = min(len(groups), 2)
    rows = -(-len(groups) // columns)
    figure = _figure(6.0 * columns, 3.6 * rows)
    for g, group in enumerate(groups):
        ax: Axes = figure.add_subplot(rows, columns, g + 1)
        drawn = False
        longest = 0.0
        for i, result in enumerate(results):
            waits = [
                o.wait
                for o in result.outcomes
                if o.wait is not None and group in (ALL_TIERS, o.tier)
            ]
            if not waits:
                continue
            hours, fractions = _cdf(waits)
            ax.step(hours, fractions, where="post", label=result.name, color=_color(i))
            drawn = True
            longest = max(longest, float(hours[-1]))
        ax.set_title("all tiers" if group == ALL_TIERS else group)
        ax.set_xlabel("wait (hours, linear below 0.1 h, log above)")
        ax.set_ylabel("share of started jobs")
        ax.set_ylim(0, 1.02)
        if drawn:
            ax.set_xscale("symlog", linthresh=0.1)
            ax.set_xlim(left=0.0, right=max(longest, 0.1) * 1.5)
            ax.legend(loc="lower right", fontsize="small")
        else:
            ax.text(0.5, 0.5, "no started jobs", ha="center", va="center", transform=ax.transAxes)
    figure.suptitle("Wait from submit to first start, by tier")
    return figure


def _costs(figures: Sequence[RunFigures]) -> Figure:
    figure = _figure(max(6.0, 1.3 * len(figures) + 2.0), 4.5)
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
    for position, run in zip(positions, figures, strict=True):
        ax.text(
            float(position), run.total_cost, f"${run.total_cost:,.0f}", ha="center", va="bottom"
        )
    ax.set_xticks(positions, [run.name for run in figures])
    ax.set_ylabel("cost of provisioned GPU-hours ($)")
    ax.set_ylim(0, max([*(run.total_cost for run in figures), 1.0]) * 1.12)
    ax.set_title("Cost by capacity type")
    ax.legend(loc="upper right", fontsize="small")
    return figure


def _timelines(results: Sequence[RunResult]) -> Figure:
    count = max(len(results), 1)
    figure = _figure(10.0, 2.4 * count + 0.6)
    first: Axes | None = None
    legend: tuple[list[Artist], list[Any]] | None = None
    for i, result in enumerate(results):
        ax: Axes = (
            figure.add_subplot(count, 1, i + 1)
            if first is None
            else figure.add_subplot(count, 1, i + 1, sharex=first)
        )
        first = first or ax
        ax.set_title(result.name, loc="left", fontsize="medium")
        ax.set_ylabel("GPUs")
        if not result.timeline:
            ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
            continue
        days = np.array([s.time / 86400.0 for s in result.timeline])
        for capacity_type in CAPACITY_TYPES:
            color = CAPACITY_COLORS[capacity_type]
            in_use = [s.gpus_in_use.get(capacity_type, 0.0) for s in result.timeline]
            provisioned = [s.gpus_provisioned.get(capacity_type, 0.0) for s in result.timeline]
            ax.step(days, in_use, where="post", color=color, label=f"{capacity_type} in use")
            ax.step(
                days,
                provisioned,
                where="post",
                color=color,
                linestyle="--",
                linewidth=0.8,
                label=f"{capacity_type} provisioned",
            )
        target = [s.on_demand_target for s in result.timeline]
        ax.step(days, target, where="post", color="black", linestyle=":", label="on-demand target")
        if legend is None:
            legend = ax.get_legend_handles_labels()
    if first is not None:
        # On the bottom panel (the x axis is shared): the legend goes below the figure.
        figure.axes[-1].set_xlabel("days from the start of the replay")
    if legend is not None:
        # One legend for every panel, below them, where it hides no line.
        handles, labels = legend
        figure.legend(handles, labels, loc="outside lower center", ncols=5, fontsize="small")
    figure.suptitle("GPUs in use and provisioned, and the on-demand target, over time")
    return figure
