"""A sweep's records, sweep.json, its tables and the plots' data, on hand-built results."""

from __future__ import annotations

from typing import Any

import pytest

from controller.sim.model import JobOutcome, RunResult
from controller.sim.report import figures_for_runs
from controller.sim.sweep_grid import Cell, TraceInput, parse_grid
from controller.sim.sweep_report import (
    CloudPoint,
    cell_file_text,
    cell_table,
    cloud_panels,
    failed_record,
    failures,
    heat_maps,
    ok_record,
    pending_record,
    record_of,
    sweep_document,
    time_left,
)

GRID = parse_grid(
    {
        "traces": ["t.csv"],
        "seeds": [0, 1],
        "baselines": "static:0,static:1",
        "overrides": {
            "risk.raiseThreshold": [0.1, 0.3],
            "tiers[production].demoteLost": [False, True],
        },
    }
)


def outcome(i: int, *, tier: str, met: bool) -> JobOutcome:
    return JobOutcome(
        job_id=f"j{i}",
        project="p",
        tier=tier,
        gpus=1,
        submit=0.0,
        first_start=0.0,
        finish=10.0,
        deadline=20.0 if met else 5.0,
        work_gpu_seconds=10.0,
        used_gpu_seconds=10.0,
        lost_gpu_seconds=0.0,
        interruptions=0,
        preemptions=0,
    )


def test_a_finished_cell_keeps_each_runs_misses_cost_production_and_changes() -> None:
    outcomes = [
        outcome(0, tier="production", met=True),
        outcome(1, tier="production", met=False),
        outcome(2, tier="research", met=False),
    ]
    figures = figures_for_runs(
        [
            RunResult("policy", outcomes, cost_by_capacity_type={"spot": 30.0}, mix_changes=2),
            RunResult("on-demand-only", outcomes, cost_by_capacity_type={"on-demand": 120.0}),
        ],
        tiers=["production", "research"],
    )
    cell = Cell(3, TraceInput("t.csv", "1d:2d"), 1, (("risk.raiseThreshold", 0.3),))

    record = ok_record(cell, "k", figures, jobs=3, warnings=["small"])

    assert record == {
        "key": "k",
        "index": 3,
        "trace": "t.csv",
        "window": "1d:2d",
        "lead_in": None,
        "seed": 1,
        "settings": {"risk.raiseThreshold": 0.3},
        "status": "ok",
        "error": None,
        "jobs": 3,
        "warnings": ["small"],
        "run_order": ["policy", "on-demand-only"],
        "runs": {
            "policy": {
                "misses": 2,
                "with_deadline": 3,
                "unfinished": 0,
                "cost": 30.0,
                "cost_percent_of_on_demand_only": 25.0,
                "production": {"hit_rate": 0.5, "missed": 1, "with_deadline": 2},
                "calibration": None,
                "mix_changes": 2,
            },
            "on-demand-only": {
                "misses": 2,
                "with_deadline": 3,
                "unfinished": 0,
                "cost": 120.0,
                "cost_percent_of_on_demand_only": 100.0,
                "production": {"hit_rate": 0.5, "missed": 1, "with_deadline": 2},
                "calibration": None,
                "mix_changes": 0,
            },
        },
    }


def run(misses: int, cost: float, percent: float | None = None) -> dict[str, Any]:
    return {
        "misses": misses,
        "with_deadline": 50,
        "unfinished": 0,
        "cost": cost,
        "cost_percent_of_on_demand_only": percent,
        "production": {"hit_rate": 0.9, "missed": 2, "with_deadline": 20},
        "calibration": {
            "estimates": 900,
            "judged_deciles": 2,
            "max_deviation": 0.0412,
            "brier": 0.1,
        },
        "mix_changes": 4,
    }


def records(policy: dict[tuple[float, bool, int], tuple[int, float]]) -> list[dict[str, Any]]:
    """The grid's cells, each with the policy's (misses, cost) given, two baselines, and
    the cell (0.3, true, seed 1) failed."""
    out = []
    for index, (raise_at, demote, seed) in enumerate(
        (r, d, s) for r in (0.1, 0.3) for d in (False, True) for s in (0, 1)
    ):
        cell = Cell(
            index,
            TraceInput("t.csv"),
            seed,
            (("risk.raiseThreshold", raise_at), ("tiers[production].demoteLost", demote)),
        )
        if (raise_at, demote, seed) == (0.3, True, 1):
            out.append(failed_record(cell, f"k{index}", "ValueError: no usable job"))
            continue
        misses, cost = policy[raise_at, demote, seed]
        out.append(
            {
                **failed_record(cell, f"k{index}", ""),
                "status": "ok",
                "error": None,
                "jobs": 50,
                "run_order": ["policy", "static:0", "static:1"],
                "runs": {
                    "policy": run(misses, cost),
                    "static:0": run(20 + seed, 100.0),
                    "static:1": run(4 - seed, 400.0),
                },
            }
        )
    return out


POLICY_RUNS = {
    (0.1, False, 0): (10, 200.0),
    (0.1, False, 1): (12, 220.0),
    (0.1, True, 0): (8, 210.0),
    (0.1, True, 1): (10, 230.0),
    (0.3, False, 0): (14, 150.0),
    (0.3, False, 1): (16, 170.0),
    (0.3, True, 0): (12, 160.0),
}


def document() -> dict[str, Any]:
    return sweep_document(GRID, records(POLICY_RUNS))


def test_sweep_json_holds_the_grid_and_every_cell_in_order_with_counts() -> None:
    cells = records(POLICY_RUNS)
    cells[0] = pending_record(Cell(0, TraceInput("t.csv"), 0, ()), "k0")
    got = sweep_document(GRID, cells)

    assert got["grid"]["overrides"] == {
        "risk.raiseThreshold": [0.1, 0.3],
        "tiers[production].demoteLost": [False, True],
    }
    assert got["grid"]["swept"] == ["risk.raiseThreshold", "tiers[production].demoteLost"]
    assert [c["index"] for c in got["cells"]] == list(range(8))
    assert got["counts"] == {"cells": 8, "ok": 6, "failed": 1, "pending": 1}


def test_the_terminal_table_has_a_row_per_cell_with_the_policys_figures() -> None:
    lines = cell_table(document(), markdown=False)

    assert lines[0].split() == [
        "#", "trace", "seed", "risk.raiseThreshold", "tiers[production].demoteLost", "misses",
        "cost", "production", "calibration", "mix", "changes", "status",
    ]  # fmt: skip
    assert lines[2].split() == [
        "0", "t.csv", "0", "0.1", "false", "10", "$200", "90.0", "%", "(2", "missed)", "0.041",
        "4", "ok",
    ]  # fmt: skip
    assert lines[-1].split() == [
        "7", "t.csv", "1", "0.3", "true", "-", "-", "-", "-", "-", "failed",
    ]  # fmt: skip


def test_failures_name_the_cell_and_its_error() -> None:
    assert failures(document()) == [
        '#7 t.csv seed 1 {"risk.raiseThreshold": 0.3, "tiers[production].demoteLost": true}: '
        "ValueError: no usable job"
    ]


def test_a_cells_file_is_its_record_and_apart_what_was_measured() -> None:
    record = records(POLICY_RUNS)[0]
    text = cell_file_text(record, {"wall_seconds": 1.5, "host": "a"})

    assert record_of(text, "k0") == (record, {"wall_seconds": 1.5, "host": "a"})
    assert record_of(text, "k1") is None, "another cell's file"
    assert record_of(text[:-20], "k0") is None, "half a file"
    failed = records(POLICY_RUNS)[7]
    assert record_of(cell_file_text(failed, {}), "k7") is None, "a failure runs again"


@pytest.mark.parametrize(
    ("elapsed", "finished", "remaining", "want"),
    [
        (0.0, 0, 10, None),
        (30.0, 0, 10, None),
        (30.0, 3, 7, 70.0),
        (30.0, 10, 0, 0.0),
    ],
)
def test_time_left_goes_by_the_pace_so_far(
    elapsed: float, finished: int, remaining: int, want: float | None
) -> None:
    assert time_left(elapsed=elapsed, finished=finished, remaining=remaining) == want


def test_the_cloud_has_every_finished_cells_policy_and_each_baselines_mean() -> None:
    (panel,) = cloud_panels(document())

    assert panel.label == "t.csv"
    assert not panel.relative
    assert len(panel.policy) == 7
    assert panel.policy[0] == CloudPoint(
        "risk.raiseThreshold=0.1, tiers[production].demoteLost=false seed 0", 200.0, 10.0
    )
    # static:0 misses 20 on seed 0 and 21 on seed 1, over 4 and 3 finished cells.
    assert panel.baselines == (
        CloudPoint("static:0", 100.0, (4 * 20 + 3 * 21) / 7),
        CloudPoint("static:1", 400.0, (4 * 4 + 3 * 3) / 7),
    )


def test_a_heat_map_averages_the_policy_over_seeds_per_pair_of_settings() -> None:
    (heat_map,) = heat_maps(document())

    assert (heat_map.x_path, heat_map.y_path) == (
        "risk.raiseThreshold",
        "tiers[production].demoteLost",
    )
    assert heat_map.x_values == (0.1, 0.3)
    assert heat_map.y_values == (False, True)
    # Rows by demoteLost, columns by raiseThreshold; (0.3, true) has seed 0 alone.
    assert heat_map.misses == ((11.0, 15.0), (9.0, 12.0))
    assert heat_map.cost == ((210.0, 160.0), (220.0, 160.0))


def test_no_heat_map_without_two_swept_settings() -> None:
    one = parse_grid({"traces": ["t.csv"], "overrides": {"risk.raiseThreshold": [0.1, 0.3]}})

    assert heat_maps(sweep_document(one, [])) == []
