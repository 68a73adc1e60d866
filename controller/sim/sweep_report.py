"""A sweep's results: each cell's record, sweep.json, sweep.md, the terminal table, and what
the plots draw.

A cell's record holds only what its inputs and seed decide, so sweep.json, assembled from the
records in the grid's order, is the same byte for byte whichever executor ran the cells and in
whatever order they finished; what varies from run to run (wall time, memory, the host) is kept
beside the record in the cell's file and shown only in sweep.md and on the terminal. Every
function here is pure: the records in, text or plot data out.

Per run of a cell the record keeps the figures a sweep compares cells by: deadlines missed (all
tiers), cost (dollars, and percent of on-demand-only when that baseline ran), the production
tier's hit rate, the calibration of the risks (the policy's) and mix changes. A cell's full
figures are one `quartermaster simulate` away.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.sim.goals import PRODUCTION_TIER
from controller.sim.report import RunFigures, format_percent, render_json, table
from controller.sim.sweep_grid import Cell, Grid, value_text

POLICY = "policy"
"""The run the sweep's settings are about (`engine.POLICY`'s name)."""
OK, FAILED, PENDING = "ok", "failed", "pending"
MEASURED = "measured"
"""The part of a cell's file that varies run to run and stays out of sweep.json."""


# --------------------------------------------------------------------------- records


def run_row(run: RunFigures) -> dict[str, Any]:
    """What the sweep keeps of one run."""
    production = next((t for t in run.tiers if t.tier == PRODUCTION_TIER), None)
    calibration = run.calibration
    return {
        "misses": run.overall.missed,
        "with_deadline": run.overall.with_deadline,
        "unfinished": run.unfinished,
        "cost": run.total_cost,
        "cost_percent_of_on_demand_only": run.cost_vs_on_demand_only,
        "production": None
        if production is None
        else {
            "hit_rate": production.hit_rate,
            "missed": production.missed,
            "with_deadline": production.with_deadline,
        },
        "calibration": None
        if calibration is None
        else {
            "estimates": calibration.count,
            "judged_deciles": len(calibration.judged()),
            "max_deviation": calibration.max_deviation(),
            "brier": calibration.brier,
        },
        "mix_changes": run.mix_changes,
    }


def _cell_head(cell: Cell, key: str) -> dict[str, Any]:
    return {
        "key": key,
        "index": cell.index,
        **cell.input.document(),
        "seed": cell.seed,
        "settings": {path: value for path, value in cell.settings},
    }


def ok_record(
    cell: Cell,
    key: str,
    figures: Sequence[RunFigures],
    *,
    jobs: int,
    warnings: Sequence[str] = (),
) -> dict[str, Any]:
    """A finished cell: its runs' figures, the policy first."""
    return {
        **_cell_head(cell, key),
        "status": OK,
        "error": None,
        "jobs": jobs,
        "warnings": list(warnings),
        "run_order": [f.name for f in figures],
        "runs": {f.name: run_row(f) for f in figures},
    }


def failed_record(cell: Cell, key: str, error: str) -> dict[str, Any]:
    """A cell that raised: the error in words (no traceback, which names this machine's
    paths; the cell's file keeps it apart)."""
    return {
        **_cell_head(cell, key),
        "status": FAILED,
        "error": error,
        "jobs": None,
        "warnings": [],
        "run_order": [],
        "runs": {},
    }


def pending_record(cell: Cell, key: str) -> dict[str, Any]:
    """A cell with no result yet (the sweep was stopped before it ran)."""
    return {**failed_record(cell, key, ""), "status": PENDING, "error": None}


def cell_file_text(record: Mapping[str, Any], measured: Mapping[str, Any]) -> str:
    """A cell's file: the record, and apart from it what the run measured."""
    return render_json({**record, MEASURED: dict(measured)})


def record_of(text: str, key: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The record and measurements a cell file holds, or None when it is not the finished
    result of cell `key` (unreadable, another cell's, or a failure to run again)."""
    try:
        loaded = json.loads(text)
    except ValueError:
        return None
    if not isinstance(loaded, dict) or loaded.get("key") != key or loaded.get("status") != OK:
        return None
    measured = loaded.pop(MEASURED, None)
    return loaded, measured if isinstance(measured, dict) else {}


def sweep_document(grid: Grid, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """sweep.json's content: the grid as understood, then every cell in the grid's order."""
    counts = {status: sum(1 for r in records if r["status"] == status) for status in (OK, FAILED)}
    return {
        "grid": grid.document(),
        "cells": [dict(r) for r in records],
        "counts": {
            "cells": len(records),
            "ok": counts[OK],
            "failed": counts[FAILED],
            "pending": len(records) - counts[OK] - counts[FAILED],
        },
    }


# --------------------------------------------------------------------------- tables


def _cost(row: Mapping[str, Any]) -> str:
    percent = row.get("cost_percent_of_on_demand_only")
    return f"{percent:.1f} %" if percent is not None else f"${row['cost']:,.0f}"


def _production(row: Mapping[str, Any]) -> str:
    production = row.get("production")
    if not production or production.get("hit_rate") is None:
        return "-"
    return f"{format_percent(production['hit_rate'])} ({production['missed']} missed)"


def _calibration(row: Mapping[str, Any]) -> str:
    calibration = row.get("calibration")
    if not calibration or calibration.get("max_deviation") is None:
        return "-"
    return f"{calibration['max_deviation']:.3f}"


def _input_label(record: Mapping[str, Any]) -> str:
    extra = [
        w
        for w in (record.get("window"), record.get("lead_in") and f"lead-in {record['lead_in']}")
        if w
    ]
    return str(record["trace"]) + (f" ({', '.join(extra)})" if extra else "")


def cell_table(document: Mapping[str, Any], *, markdown: bool) -> list[str]:
    """A row per cell: its trace, seed and settings, then its policy run's misses, cost,
    production hit rate, calibration (largest deviation of a judged decile) and mix changes."""
    paths = list(document["grid"]["overrides"])
    header = [
        "#",
        "trace",
        "seed",
        *paths,
        "misses",
        "cost",
        "production",
        "calibration",
        "mix changes",
        "status",
    ]
    rows = []
    for record in document["cells"]:
        settings = record["settings"]
        cells = [
            str(record["index"]),
            _input_label(record),
            str(record["seed"]),
            *(value_text(settings.get(p)) for p in paths),
        ]
        policy = record["runs"].get(POLICY)
        if policy is None:
            cells += ["-"] * 5
        else:
            cells += [
                str(policy["misses"]),
                _cost(policy),
                _production(policy),
                _calibration(policy),
                str(policy["mix_changes"]),
            ]
        cells.append(record["status"])
        rows.append(cells)
    return table(header, rows, markdown=markdown, left=2)


def baseline_table(document: Mapping[str, Any], *, markdown: bool) -> list[str]:
    """A row per cell and baseline: misses, cost, production hit rate, mix changes."""
    header = ["#", "run", "misses", "cost", "production", "mix changes"]
    rows = [
        [
            str(record["index"]),
            name,
            str(row["misses"]),
            _cost(row),
            _production(row),
            str(row["mix_changes"]),
        ]
        for record in document["cells"]
        for name in record["run_order"]
        if name != POLICY
        for row in (record["runs"][name],)
    ]
    return table(header, rows, markdown=markdown, left=2)


def failures(document: Mapping[str, Any]) -> list[str]:
    """`#index label: error` of each failed cell."""
    return [
        f"#{r['index']} {_input_label(r)} seed {r['seed']}"
        + (f" {value_text(r['settings'])}" if r["settings"] else "")
        + f": {r['error']}"
        for r in document["cells"]
        if r["status"] == FAILED
    ]


@dataclass(frozen=True)
class CellMeasure:
    """What running one cell took (never in sweep.json)."""

    index: int
    wall_seconds: float | None
    peak_rss_mib: float | None
    host: str | None
    ran_now: bool
    """Whether this invocation ran it (else an earlier one did, and its file was kept)."""


def measure_table(measures: Sequence[CellMeasure], *, markdown: bool) -> list[str]:
    def number(value: float | None, unit: str, fmt: str) -> str:
        return "-" if value is None else f"{value:{fmt}} {unit}"

    rows = [
        [
            str(m.index),
            number(m.wall_seconds, "s", ".1f"),
            number(m.peak_rss_mib, "MiB", ",.0f"),
            m.host or "-",
            "now" if m.ran_now else "earlier",
        ]
        for m in measures
    ]
    return table(["#", "wall time", "peak RSS", "host", "ran"], rows, markdown=markdown)


def render_markdown(
    document: Mapping[str, Any],
    *,
    title: str,
    about: Sequence[str],
    measures: Sequence[CellMeasure],
    plots: Sequence[str],
    plots_note: str | None = None,
) -> str:
    """sweep.md: the grid, the cells' table, the baselines, failures, what running took,
    and the plots."""
    counts = document["counts"]
    lines = [f"# {title}", ""]
    lines += [f"- {item}" for item in about]
    lines += [
        f"- cells: {counts['cells']} ({counts['ok']} ok, {counts['failed']} failed"
        + (f", {counts['pending']} not run" if counts["pending"] else "")
        + ")",
        "",
        "## Cells",
        "",
        "The policy run of each cell. Misses: deadlines missed over all tiers (unfinished jobs "
        "count as missed). Cost: percent of on-demand-only's when that baseline ran in the "
        "cell, else dollars. Production: the production tier's hit rate. Calibration: the "
        "largest |observed - predicted| over the deciles of the policy's risk estimates "
        "with enough estimates to judge. Mix changes: changes of the spot/on-demand mix.",
        "",
        *cell_table(document, markdown=True),
    ]
    if any(r["run_order"][1:] for r in document["cells"]):
        lines += ["", "## Baselines", "", *baseline_table(document, markdown=True)]
    failed = failures(document)
    if failed:
        lines += ["", "## Failed cells", ""]
        lines += [f"- {line}" for line in failed]
    if measures:
        lines += [
            "",
            "## Wall time and memory",
            "",
            "Not in sweep.json, which stays byte-identical for the same grid whichever "
            "executor ran it. Peak RSS is the process that ran the cell, so far.",
            "",
            *measure_table(measures, markdown=True),
        ]
    if plots or plots_note:
        lines += ["", "## Plots", ""]
        if plots_note:
            lines.append(plots_note)
        lines += [f"![{name}]({name})" for name in plots]
    return "\n".join(lines) + "\n"


def time_left(*, elapsed: float, finished: int, remaining: int) -> float | None:
    """Seconds until the sweep ends, from the pace so far (finished cells per second of wall
    time, which already counts the workers running side by side); None before the first."""
    if finished <= 0 or elapsed <= 0:
        return None
    return elapsed / finished * remaining


# --------------------------------------------------------------------------- plot data


@dataclass(frozen=True)
class CloudPoint:
    name: str
    cost: float
    misses: float


@dataclass(frozen=True)
class CloudPanel:
    """One trace input's cost-against-misses cloud: every cell's policy run, and each baseline
    averaged over the input's cells."""

    label: str
    policy: tuple[CloudPoint, ...]
    baselines: tuple[CloudPoint, ...]
    relative: bool
    """Cost in percent of on-demand-only (else dollars)."""


def _ok(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in document["cells"] if r["status"] == OK]


def _costvalue_text(row: Mapping[str, Any], relative: bool) -> float:
    return float(row["cost_percent_of_on_demand_only"] if relative else row["cost"])


def _settings_name(record: Mapping[str, Any]) -> str:
    settings = record["settings"]
    return ", ".join(f"{k}={value_text(v)}" for k, v in settings.items()) or "policy"


def cloud_panels(document: Mapping[str, Any]) -> list[CloudPanel]:
    """A panel per trace input with at least one finished cell, in the grid's order."""
    by_input: dict[str, list[Mapping[str, Any]]] = {}
    for record in _ok(document):
        by_input.setdefault(_input_label(record), []).append(record)
    panels = []
    for label, records in by_input.items():
        rows = [row for r in records for row in r["runs"].values()]
        relative = all(row["cost_percent_of_on_demand_only"] is not None for row in rows)
        policy = tuple(
            CloudPoint(
                f"{_settings_name(r)} seed {r['seed']}",
                _costvalue_text(r["runs"][POLICY], relative),
                float(r["runs"][POLICY]["misses"]),
            )
            for r in records
            if POLICY in r["runs"]
        )
        names = [n for n in records[0]["run_order"] if n != POLICY]
        baselines = []
        for name in names:
            found = [r["runs"][name] for r in records if name in r["runs"]]
            baselines.append(
                CloudPoint(
                    name,
                    sum(_costvalue_text(row, relative) for row in found) / len(found),
                    sum(float(row["misses"]) for row in found) / len(found),
                )
            )
        panels.append(CloudPanel(label, policy, tuple(baselines), relative))
    return panels


@dataclass(frozen=True)
class HeatMap:
    """The policy's mean misses and cost over one pair of swept settings, for one trace input:
    each square the mean over the cells with those two values (every seed and every value of
    the other settings); None where no such cell finished."""

    label: str
    x_path: str
    y_path: str
    x_values: tuple[Any, ...]
    y_values: tuple[Any, ...]
    misses: tuple[tuple[float | None, ...], ...]
    """Rows by y value, columns by x value."""
    cost: tuple[tuple[float | None, ...], ...]
    relative: bool


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def heat_maps(document: Mapping[str, Any]) -> list[HeatMap]:
    """A heat map per pair of swept settings (in the grid's order) and trace input."""
    grid = document["grid"]
    swept = list(grid["swept"])
    records = _ok(document)
    labels = list(dict.fromkeys(_input_label(r) for r in document["cells"]))
    out = []
    for x_path, y_path in itertools.combinations(swept, 2):
        x_values, y_values = grid["overrides"][x_path], grid["overrides"][y_path]
        for label in labels:
            mine = [r for r in records if _input_label(r) == label and POLICY in r["runs"]]
            relative = all(
                r["runs"][POLICY]["cost_percent_of_on_demand_only"] is not None for r in mine
            )
            misses: list[tuple[float | None, ...]] = []
            cost: list[tuple[float | None, ...]] = []
            for y in y_values:
                miss_row, cost_row = [], []
                for x in x_values:
                    runs = [
                        r["runs"][POLICY]
                        for r in mine
                        if value_text(r["settings"][x_path]) == value_text(x)
                        and value_text(r["settings"][y_path]) == value_text(y)
                    ]
                    miss_row.append(_mean([float(run["misses"]) for run in runs]))
                    cost_row.append(_mean([_costvalue_text(run, relative) for run in runs]))
                misses.append(tuple(miss_row))
                cost.append(tuple(cost_row))
            out.append(
                HeatMap(
                    label,
                    x_path,
                    y_path,
                    tuple(x_values),
                    tuple(y_values),
                    tuple(misses),
                    tuple(cost),
                    relative,
                )
            )
    return out
