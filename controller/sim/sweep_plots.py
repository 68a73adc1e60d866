"""A sweep's plots: the policy's cost-against-misses cloud beside the baselines' frontier, and a
heat map per pair of swept settings.

The cloud answers "which settings beat the static mixes, and by how much": every cell's policy
run is a point, each baseline (averaged over the trace input's cells) a grey point on the step
line of the baselines' Pareto frontier, one panel per trace input since traces differ in scale.
A heat map answers "where in these two settings is the policy best": each square the mean over
the cells with those values, misses on the left and cost on the right.

What is drawn comes from `sweep_report` (`cloud_panels`, `heat_maps`), pure functions of
sweep.json; here it is only drawn, with matplotlib imported when drawing starts (`plots`
explains why; `plots.available()` says whether it can).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.sim import plots
from controller.sim.sweep_report import CloudPanel, HeatMap

if TYPE_CHECKING:
    from matplotlib.axes import Axes  # type: ignore[import-not-found, unused-ignore]
    from matplotlib.figure import Figure  # type: ignore[import-not-found, unused-ignore]

CLOUD = "sweep-frontier.png"
HEAT_MAP_PREFIX = "sweep-heatmap-"
_SLUG = re.compile(r"[^A-Za-z0-9.]+")


def heat_map_file(x_path: str, y_path: str) -> str:
    """The heat map's file name for a pair of settings' paths."""

    def slug(text: str) -> str:
        return _SLUG.sub("_", text).strip("_")

    return f"{HEAT_MAP_PREFIX}{slug(x_path)}--{slug(y_path)}.png"


def write_plots(panels: Sequence[CloudPanel], maps: Sequence[HeatMap], out: Path) -> list[Path]:
    """Draw the cloud (when a cell finished) and each pair's heat map into `out`; remove the
    sweep plots an earlier run left that this one does not draw. Raises ModuleNotFoundError
    without matplotlib (check `plots.available()` first)."""
    out.mkdir(parents=True, exist_ok=True)
    drawn: list[tuple[str, Figure]] = []
    if panels:
        drawn.append((CLOUD, cloud_figure(panels)))
    pairs: dict[str, list[HeatMap]] = {}
    for heat_map in maps:
        pairs.setdefault(heat_map_file(heat_map.x_path, heat_map.y_path), []).append(heat_map)
    drawn += [(name, heat_map_figure(group)) for name, group in pairs.items()]
    paths = []
    for name, figure in drawn:
        path = out / name
        figure.savefig(path, dpi=plots.DPI)
        paths.append(path)
    remove_stale(out, keep={name for name, _ in drawn})
    return paths


def remove_stale(out: Path, keep: AbstractSet[str] = frozenset()) -> None:
    """Remove sweep plots not in `keep`: they would show another sweep's figures."""
    for path in [out / CLOUD, *out.glob(f"{HEAT_MAP_PREFIX}*.png")]:
        if path.name not in keep:
            path.unlink(missing_ok=True)


def _cost_label(relative: bool) -> str:
    return "cost (% of on-demand-only)" if relative else "cost ($)"


def cloud_figure(panels: Sequence[CloudPanel]) -> Figure:
    """Cost against misses, a panel per trace input."""
    columns = min(len(panels), 2)
    rows = -(-len(panels) // columns)
    figure = plots._figure(7.0 * columns, 5.0 * rows + 0.6)
    for i, panel in enumerate(panels):
        ax: Axes = figure.add_subplot(rows, columns, i + 1)
        _cloud_axes(ax, panel)
    figure.suptitle(
        "The policy's settings against the baselines: cost and deadlines missed\n"
        "(below or left of the grey line: fewer misses than any baseline at that cost)",
        fontsize="medium",
    )
    return figure


def _cloud_axes(ax: Axes, panel: CloudPanel) -> None:
    baselines = panel.baselines
    costs = [p.cost for p in (*baselines, *panel.policy)]
    right = max([*costs, 1.0]) * 1.08
    if baselines:
        front = [
            baselines[i] for i in plots.pareto_frontier([(b.cost, b.misses) for b in baselines])
        ]
        ax.step(
            [p.cost for p in front] + [right],
            [p.misses for p in front] + [front[-1].misses],
            where="post",
            color="tab:gray",
            linewidth=1.5,
            label="baselines' frontier",
        )
        ax.scatter(
            [b.cost for b in baselines],
            [b.misses for b in baselines],
            color="tab:gray",
            edgecolors="black",
            zorder=3,
            label="baselines (mean over cells)",
        )
        # Baselines at the same point (a static mix and reactive that never moved) share a label.
        at: dict[tuple[float, float], list[str]] = {}
        for b in baselines:
            at.setdefault((b.cost, b.misses), []).append(b.name)
        for (cost, misses), names in at.items():
            ax.annotate(
                ", ".join(names),
                (cost, misses),
                textcoords="offset points",
                xytext=(5, 5),
                fontsize=7,
            )
    if panel.policy:
        ax.scatter(
            [p.cost for p in panel.policy],
            [p.misses for p in panel.policy],
            marker="*",
            s=90,
            color="tab:red",
            edgecolors="black",
            linewidths=0.5,
            alpha=0.8,
            zorder=4,
            label=f"policy ({len(panel.policy)} cells)",
        )
    top = max([*(p.misses for p in (*baselines, *panel.policy)), 1.0])
    ax.set_xlim(0, right)
    ax.set_ylim(0, top * 1.15)
    ax.set_xlabel(_cost_label(panel.relative))
    ax.set_ylabel("deadlines missed (all tiers)")
    ax.set_title(panel.label, fontsize="medium")
    ax.grid(linewidth=0.5, alpha=0.5)
    ax.set_axisbelow(True)
    ax.legend(loc="upper right", fontsize="small")


def _tick(value: Any) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return text if len(text) <= 14 else text[:13] + "..."


def heat_map_figure(maps: Sequence[HeatMap]) -> Figure:
    """One pair of settings: a row per trace input, misses and cost side by side."""
    first = maps[0]
    width = max(4.0, 1.0 + 0.9 * len(first.x_values))
    height = max(2.6, 1.2 + 0.5 * len(first.y_values))
    figure = plots._figure(2 * width + 1.0, height * len(maps) + 0.8)
    for row, heat_map in enumerate(maps):
        for column, (values, what) in enumerate(
            (
                (heat_map.misses, "mean deadlines missed"),
                (heat_map.cost, f"mean {_cost_label(heat_map.relative)}"),
            )
        ):
            ax: Axes = figure.add_subplot(len(maps), 2, 2 * row + column + 1)
            _heat_axes(ax, heat_map, values, f"{heat_map.label}: {what}")
    figure.suptitle(
        f"The policy over {first.x_path} and {first.y_path}\n"
        "(each square: the mean over its cells' seeds and other settings)",
        fontsize="medium",
    )
    return figure


def _heat_axes(
    ax: Axes, heat_map: HeatMap, values: Sequence[Sequence[float | None]], title: str
) -> None:
    grid = [[math.nan if v is None else v for v in row] for row in values]
    image = ax.imshow(grid, cmap="viridis_r", aspect="auto", origin="lower")
    known = [v for row in values for v in row if v is not None]
    middle = (min(known) + max(known)) / 2 if known else 0.0
    for y, row in enumerate(values):
        for x, value in enumerate(row):
            text = "-" if value is None else f"{value:,.1f}"
            color = "white" if value is not None and value > middle else "black"
            ax.text(x, y, text, ha="center", va="center", fontsize="small", color=color)
    ax.set_xticks(range(len(heat_map.x_values)), [_tick(v) for v in heat_map.x_values])
    ax.set_yticks(range(len(heat_map.y_values)), [_tick(v) for v in heat_map.y_values])
    ax.set_xlabel(heat_map.x_path)
    ax.set_ylabel(heat_map.y_path)
    ax.set_title(title, fontsize="small")
    ax.figure.colorbar(image, ax=ax, shrink=0.8)
