"""`quartermaster sweep` end to end on a day of the Alibaba trace: the local executor and a
local Ray write the same sweep.json byte for byte; a killed sweep goes on where it stopped; a
failing cell does not stop the others; a grid whose settings make an invalid policy is refused
naming them.

The grid is two raise thresholds x two seeds on Alibaba's day 120 (199 jobs, a sized pool of
16 GPUs), against the static mixes 0 and 1, plus the same on days 1-3, which hold no job: those
four cells fail. Each cell replays in well under a second. Ray is started once for the module
(2 CPUs, a small object store, no dashboard) and shut down after it.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray

from controller.cli import EXIT_INVALID, EXIT_OK, EXIT_USAGE, main
from controller.sim import plots
from controller.sim.sweep import CELLS_DIR, SWEEP_JSON, SWEEP_MD
from controller.sim.sweep_progress import PlainProgress, RichProgress, progress_for

REPO_ROOT = Path(__file__).resolve().parents[3]
GRID = """\
traces:
  - {trace: alibaba_openb_2023.csv.gz, window: "120d:121d"}
  - {trace: alibaba_openb_2023.csv.gz, window: "1d:3d"}
seeds: [0, 1]
baselines: static:0,static:1
overrides:
  risk.raiseThreshold: [0.1, 0.3]
"""
CELLS = 8
FAILED = 4
NO_JOB = "ValueError: alibaba_openb_2023.csv.gz: no usable job in the window 1d:3d"
KILL_WAIT_SECONDS = 120.0
"""A bound on waiting for the killed sweep's first cell, not a timing: it is met in seconds."""


@dataclass(frozen=True)
class Sweep:
    code: int
    out: str
    err: str
    directory: Path

    def json(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads((self.directory / SWEEP_JSON).read_text())
        return loaded


def sweep(grid: Path, out_dir: Path, *args: str) -> Sweep:
    out, err = io.StringIO(), io.StringIO()
    code = main(["sweep", "--grid", str(grid), "--out", str(out_dir), *args], out=out, err=err)
    return Sweep(code, out.getvalue(), err.getvalue(), out_dir)


def write_grid(directory: Path, text: str = GRID) -> Path:
    path = directory / "grid.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_grid(tmp_path_factory.mktemp("grid"))


@pytest.fixture(scope="module")
def local(grid: Path, tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    """The grid on two local worker processes."""
    return sweep(grid, tmp_path_factory.mktemp("local"), "--jobs", "2")


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=80 * 1024 * 1024,
        logging_level=logging.WARNING,
    )
    yield
    ray.shutdown()


@dataclass(frozen=True)
class RaySweep:
    result: Sweep
    puts: int
    """Objects the sweep put in Ray's object store."""


@pytest.fixture(scope="module")
def on_ray(ray_cluster: None, grid: Path, tmp_path_factory: pytest.TempPathFactory) -> RaySweep:
    puts: list[object] = []
    put = ray.put

    def counted(value: object, **kwargs: Any) -> Any:
        puts.append(value)
        return put(value, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ray, "put", counted)
        result = sweep(grid, tmp_path_factory.mktemp("ray"), "--ray", "auto")
    return RaySweep(result, len(puts))


def records(directory: Path) -> dict[str, dict[str, Any]]:
    """Each cell file's record, what it measured aside."""
    out = {}
    for path in sorted((directory / CELLS_DIR).glob("*.json")):
        loaded = json.loads(path.read_text())
        loaded.pop("measured")
        out[path.name] = loaded
    return out


def test_local_and_ray_write_the_same_sweep_json_byte_for_byte(
    local: Sweep, on_ray: RaySweep
) -> None:
    ray_sweep = on_ray.result

    assert (local.code, ray_sweep.code) == (EXIT_INVALID, EXIT_INVALID), "four cells failed"
    assert (local.directory / SWEEP_JSON).read_bytes() == (
        ray_sweep.directory / SWEEP_JSON
    ).read_bytes()
    assert records(local.directory) == records(ray_sweep.directory)
    assert len(records(local.directory)) == CELLS
    assert "local executor: 2 worker processes" in local.err
    assert "Ray executor: 2 CPUs in the cluster" in ray_sweep.err


def test_ray_gets_each_trace_input_once_not_once_per_cell(on_ray: RaySweep) -> None:
    assert on_ray.puts == 2, "two trace inputs (days 120 and 1-3) for eight cells"


def test_a_failing_cell_does_not_stop_the_others(local: Sweep) -> None:
    document = local.json()

    assert document["counts"] == {
        "cells": CELLS,
        "ok": CELLS - FAILED,
        "failed": FAILED,
        "pending": 0,
    }
    by_window = {(c["window"], c["status"], c["error"]) for c in document["cells"]}
    assert by_window == {("120d:121d", "ok", None), ("1d:3d", "failed", NO_JOB)}
    ok = [c for c in document["cells"] if c["status"] == "ok"]
    assert all(c["runs"]["policy"]["with_deadline"] == 199 for c in ok)
    assert [list(c["runs"]) for c in ok] == [["policy", "static:0", "static:1"]] * 4
    assert local.err.count(f"FAILED: {NO_JOB}") == FAILED, "each failure as it happens"
    assert local.out.count(f": {NO_JOB}") == FAILED, "and each again at the end"
    assert "## Failed cells" in (local.directory / SWEEP_MD).read_text()
    assert f"{CELLS} cells: {CELLS} run now, 0 finished earlier, {FAILED} failed" in local.out


def test_the_plots_are_drawn_when_matplotlib_is_there(local: Sweep) -> None:
    assert plots.available()
    assert (local.directory / "sweep-frontier.png").is_file()
    assert not list(local.directory.glob("sweep-heatmap-*.png")), "one swept setting: no pair"


CHILD = """\
import sys, time
from pathlib import Path
from controller.sim.sweep import LocalExecutor, run_sweep
from controller.sim.sweep_progress import PlainProgress


class StopsAfterTheFirstCell(PlainProgress):
    def finished(self, label, record, wall):
        super().finished(label, record, wall)
        time.sleep(600)  # the test kills the process here, its first cell written


grid, out = (Path(a) for a in sys.argv[1:3])
run_sweep(
    grid,
    out_dir=out,
    executor=LocalExecutor(jobs=1),
    progress=StopsAfterTheFirstCell(sys.stderr),
    out=sys.stdout,
)
"""


def test_a_killed_sweep_goes_on_where_it_stopped_and_ends_as_an_uninterrupted_one(
    grid: Path, local: Sweep, tmp_path: Path
) -> None:
    out_dir = tmp_path / "out"
    cells = out_dir / CELLS_DIR
    log = (tmp_path / "child.log").open("w")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(grid), str(out_dir)],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + KILL_WAIT_SECONDS
        while not list(cells.glob("*.json")):
            assert child.poll() is None, (tmp_path / "child.log").read_text()
            assert time.monotonic() < deadline, "no cell written"
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
        log.close()
    (first,) = cells.glob("*.json")
    written, stamp = first.read_bytes(), first.stat().st_mtime_ns
    assert not (out_dir / SWEEP_JSON).exists()

    again = sweep(grid, out_dir, "--jobs", "1")

    assert again.code == EXIT_INVALID
    assert f"{CELLS} cells: {CELLS - 1} run now, 1 finished earlier" in again.out
    assert (first.read_bytes(), first.stat().st_mtime_ns) == (written, stamp), "not run again"
    assert (out_dir / SWEEP_JSON).read_bytes() == (local.directory / SWEEP_JSON).read_bytes()
    assert sorted(p.name for p in cells.iterdir()) == sorted(records(local.directory))

    third = sweep(grid, out_dir, "--jobs", "1")

    assert f"{CELLS} cells: {FAILED} run now, {CELLS - FAILED} finished earlier" in third.out, (
        "the failed cells run again, the finished ones do not"
    )
    assert (out_dir / SWEEP_JSON).read_bytes() == (local.directory / SWEEP_JSON).read_bytes()


ONE_CELL = """\
traces: [{trace: alibaba_openb_2023.csv.gz, window: "120d:121d"}]
baselines: none
overrides:
  OVERRIDES
"""


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        pytest.param(
            "risk.raiseThreshold: [0.01, 0.2]",
            "overrides (risk.raiseThreshold=0.01): scenario/policy: CapacityPolicy/replay: "
            "spec.risk.lowerThreshold: lowerThreshold must be below raiseThreshold",
            id="a rule between fields",
        ),
        pytest.param(
            "tiers[gold].demoteLost: [true]",
            "overrides.tiers[gold].demoteLost: the policy has no spec.tiers item with name "
            "'gold' (it has: production, research, exploratory)",
            id="an item the policy lacks",
        ),
        pytest.param(
            "pools[gpu].onDemand.floorGpus: [0, 100000]",
            "overrides.pools[gpu].onDemand.floorGpus[1]: scenario/policy: CapacityPolicy/replay: "
            "spec.pools[0].onDemand.floorGpus: floorGpus must not exceed ceilingGpus",
            id="a value the whole policy refuses",
        ),
    ],
)
def test_settings_that_make_an_invalid_policy_are_refused_before_any_cell_runs(
    tmp_path: Path, overrides: str, error: str
) -> None:
    got = sweep(write_grid(tmp_path, ONE_CELL.replace("OVERRIDES", overrides)), tmp_path / "o")

    assert got.code == EXIT_USAGE
    assert f"sweep: {tmp_path / 'grid.yaml'}: {error}" in got.err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("grid", "error"),
    [
        pytest.param(
            "traces: [nosuch.csv.gz]\n",
            "traces: trace 'nosuch.csv.gz': no such file",
            id="a trace that is not there",
        ),
        pytest.param(
            "traces: [alibaba_openb_2023.csv.gz]\nseeds: [0, x]\n",
            'seeds[1]: must be an integer >= 0, got "x"',
            id="a field of the grid",
        ),
        pytest.param(
            "traces: [alibaba_openb_2023.csv.gz]\ntraces: [philly.csv.gz]\n",
            "line 2, column 1: invalid YAML: duplicate key 'traces'",
            id="a key twice",
        ),
    ],
)
def test_a_bad_grid_file_is_refused_naming_the_field(tmp_path: Path, grid: str, error: str) -> None:
    got = sweep(write_grid(tmp_path, grid), tmp_path / "o")

    assert got.code == EXIT_USAGE
    assert error in got.err


def test_without_matplotlib_the_sweep_says_how_to_get_the_plots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plots, "available", lambda: False)
    grid = write_grid(tmp_path, ONE_CELL.replace("OVERRIDES", "{}"))

    got = sweep(grid, tmp_path / "o", "--jobs", "1")

    assert got.code == EXIT_OK
    assert f"no plots (matplotlib is not installed): {plots.INSTALL_HINT}" in got.out
    assert plots.INSTALL_HINT in (tmp_path / "o" / SWEEP_MD).read_text()
    assert not list((tmp_path / "o").glob("*.png"))
    assert "sweep: 1 cells, 0 finished earlier (kept), 1 to run" in got.err
    assert "[1/1] alibaba_openb_2023.csv.gz (120d:121d) seed 0: ok in" in got.err


def test_without_ray_the_sweep_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails, as where it is missing
    grid = write_grid(tmp_path, ONE_CELL.replace("OVERRIDES", "{}"))

    got = sweep(grid, tmp_path / "o", "--ray", "auto")

    assert got.code == EXIT_INVALID
    assert (
        "sweep: --ray needs Ray, which is not installed: pip install 'quartermaster[ray]' (in a "
        "checkout, make setup installs it)"
    ) in got.err


def test_a_terminal_gets_rich_progress_and_anything_else_plain_lines() -> None:
    assert isinstance(progress_for(io.StringIO()), PlainProgress)
    shown = io.StringIO()
    progress = progress_for(shown, tty=True)
    assert isinstance(progress, RichProgress)

    progress.start(total=2, earlier=1)
    progress.running(2)
    progress.finished("t.csv seed 0 [x=1]", {"status": "failed", "error": "boom"}, 1.0)
    progress.finished("t.csv seed 1", {"status": "ok"}, 1.0)
    progress.close()

    text = shown.getvalue()
    assert "sweep: 3 cells, 1 finished earlier (kept), 2 to run" in text
    assert "FAILED t.csv seed 0 [x=1]: boom" in text, "brackets kept, not read as markup"
    assert "2/2" in text
