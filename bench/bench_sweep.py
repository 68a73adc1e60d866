"""`quartermaster sweep` on both executors: the `bench-sim` grid as a sweep, locally and on a
local Ray, with each one's wall time and peak memory; then Ray's overhead per cell.

1. The grid of `make bench-sim` (Philly's busiest 14 days, all of Philly, all of Alibaba, each
   on seeds 0, 1 and 2, with the four named baselines: 9 cells) runs as `quartermaster sweep`,
   once with the local executor (a worker process per core) and once with `--ray auto` (a
   local Ray started by the command, a CPU per core). Each is a process of its own, and its
   memory is read from /proc while it runs: the peak of its process tree's summed RSS
   (workers, and Ray's raylet, GCS and object store, included; shared pages count once per
   process, so it overstates) and of its largest process. Both sweep.json files must be the
   same byte for byte, and the bench says whether they are.
2. Ray's cost per cell: a grid of many tiny cells (a quarter day of Alibaba, the policy alone)
   runs in this process on both executors, Ray started beforehand (its start-up, paid once per
   sweep, is printed apart): (Ray's wall time - the local one's) / cells, against the goal of
   under 1 s.

The full grid takes 20 to 25 minutes per executor on 2 cores; `--quick` runs the same shape on
small slices (half a day of Philly twice, a day of Alibaba; seeds 0-2) in a minute or two.
Results go to sim-out/sweep-bench/. Reported, not asserted: the exit status is 0 whatever the
figures say. Linux only (memory is read from /proc).

Usage: bench/bench_sweep.py [--quick] [--tiny-cells N]
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from controller.sim.sweep import SWEEP_JSON, LocalExecutor, run_sweep
from controller.sim.sweep_progress import PlainProgress

OUT = Path("sim-out/sweep-bench")
FULL = [
    {"trace": "philly.csv.gz", "window": "busiest14d"},
    {"trace": "philly.csv.gz"},
    {"trace": "alibaba_openb_2023.csv.gz"},
]
QUICK = [
    {"trace": "philly.csv.gz", "window": "61d:61.5d"},
    {"trace": "philly.csv.gz", "window": "62d:62.5d"},
    {"trace": "alibaba_openb_2023.csv.gz", "window": "120d:121d"},
]
TINY = {"trace": "alibaba_openb_2023.csv.gz", "window": "120d:120.25d"}
SEEDS = [0, 1, 2]
SAMPLE_SECONDS = 0.2
OVERHEAD_GOAL_SECONDS = 1.0
_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") / 1024


def write_grid(path: Path, traces: list[dict[str, str]], seeds: list[int], baselines: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    grid = {"traces": traces, "seeds": seeds, "baselines": baselines}
    path.write_text(yaml.safe_dump(grid, sort_keys=False), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- memory from /proc


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc/*/stat (the parent is the fourth field, after the
    command in parentheses, which may hold spaces)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    return children


def _rss_mib(pid: int) -> float:
    try:
        resident = int((Path("/proc") / str(pid) / "statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    return resident * _PAGE_KIB / 1024


@dataclass
class TreeMemory:
    """The peak summed RSS of a process and its descendants, and of its largest process."""

    root: int
    total_mib: float = 0.0
    largest_mib: float = 0.0

    def sample(self) -> None:
        children = _children()
        tree, todo = [], [self.root]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, ()))
        sizes = [_rss_mib(pid) for pid in tree]
        self.total_mib = max(self.total_mib, sum(sizes))
        self.largest_mib = max(self.largest_mib, max(sizes, default=0.0))


@dataclass(frozen=True)
class Measured:
    executor: str
    wall_seconds: float
    memory: TreeMemory
    code: int
    summary: str
    """The command's last line: cells run, failed, its own wall time and peak."""


def run_command(executor: str, grid: Path, out_dir: Path, *extra: str) -> Measured:
    """`quartermaster sweep` in a process of its own, its memory sampled while it runs."""
    shutil.rmtree(out_dir, ignore_errors=True)
    command = [sys.executable, "-m", "controller.cli", "sweep", "--grid", str(grid)]
    log = out_dir.with_suffix(".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"\n== {executor}: {' '.join(command[1:])} --out {out_dir} {' '.join(extra)}")
    sys.stdout.flush()
    started = time.perf_counter()
    with log.open("w") as output:
        child = subprocess.Popen(
            [*command, "--out", str(out_dir), *extra], stdout=output, stderr=subprocess.STDOUT
        )
        memory = TreeMemory(child.pid)
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(SAMPLE_SECONDS):
                memory.sample()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        code = child.wait()
        stop.set()
        watcher.join()
    wall = time.perf_counter() - started
    lines = [line for line in log.read_text().splitlines() if re.match(r"^\d+ cells: ", line)]
    summary = lines[-1] if lines else f"(no summary line: see {log})"
    print(f"  {summary}")
    return Measured(executor, wall, memory, code, summary)


# --------------------------------------------------------------------------- overhead per cell


def overhead_per_cell(cells: int, directory: Path) -> None:
    """Many tiny cells on both executors in this process, Ray started before either."""
    import ray  # noqa: PLC0415 - only this part needs Ray

    from controller.sim.sweep_ray import RayExecutor  # noqa: PLC0415

    grid = write_grid(directory / "tiny.yaml", [TINY], list(range(cells)), "none")
    print(
        f"\n== Ray's overhead per cell: {cells} cells of {TINY['window']} of Alibaba, no baseline"
    )
    started = time.perf_counter()
    ray.init(include_dashboard=False, logging_level=logging.WARNING)
    startup = time.perf_counter() - started
    try:
        walls = {}
        for name, executor in (("local", LocalExecutor()), ("ray", RayExecutor())):
            out_dir = directory / f"tiny-{name}"
            shutil.rmtree(out_dir, ignore_errors=True)
            started = time.perf_counter()
            run_sweep(
                grid,
                out_dir=out_dir,
                executor=executor,
                progress=PlainProgress(io.StringIO()),
                out=io.StringIO(),
            )
            walls[name] = time.perf_counter() - started
            each = walls[name] / cells
            print(f"  {name:5} {walls[name]:7.2f} s for {cells} cells ({each:.3f} s a cell)")
    finally:
        ray.shutdown()
    overhead = (walls["ray"] - walls["local"]) / cells
    verdict = "met" if overhead < OVERHEAD_GOAL_SECONDS else "NOT MET"
    print(f"  Ray's start-up, once per sweep: {startup:.2f} s")
    print(
        f"  Ray's overhead per cell: ({walls['ray']:.2f} - {walls['local']:.2f}) s / {cells} = "
        f"{overhead:+.3f} s (goal under {OVERHEAD_GOAL_SECONDS:g} s: {verdict})"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="small slices of the traces: a minute or two"
    )
    parser.add_argument(
        "--tiny-cells", type=int, default=40, help="cells of the overhead grid (default 40)"
    )
    args = parser.parse_args(argv)
    directory = OUT / ("quick" if args.quick else "full")
    grid = write_grid(directory / "grid.yaml", QUICK if args.quick else FULL, SEEDS, "all")
    cells = len(SEEDS) * len(QUICK if args.quick else FULL)
    shape = "--quick slices" if args.quick else "the bench-sim grid"
    print(f"bench-sweep: {cells} cells ({shape}), {grid}")
    runs = [
        run_command("local", grid, directory / "local"),
        run_command("ray", grid, directory / "ray", "--ray", "auto"),
    ]
    print("\n  executor  wall time  peak RSS, process tree (sum)  largest process  exit")
    for m in runs:
        print(
            f"  {m.executor:8}  {m.wall_seconds:8.1f} s  {m.memory.total_mib:24,.0f} MiB  "
            f"{m.memory.largest_mib:11,.0f} MiB  {m.code:4}"
        )
    same = (directory / "local" / SWEEP_JSON).read_bytes() == (
        directory / "ray" / SWEEP_JSON
    ).read_bytes()
    print(f"  sweep.json the same byte for byte on both executors: {'yes' if same else 'NO'}")
    overhead_per_cell(args.tiny_cells, directory)


if __name__ == "__main__":
    main()
