"""Trace replays at full size against the simulator's goals: Philly's busiest 14 days, all of
Philly, all of Alibaba openb 2023, each on seeds 0, 1 and 2.

Each trace and seed is replayed the way `quartermaster simulate` does it (the same
`controller.sim.run.simulate`, runs in parallel worker processes), with the sized replay
policy and the four named baselines, and its summary written to sim-out/<trace>/seed-<n>/.
Per trace and seed it prints the goal table: misses and cost (% of on-demand-only) per run,
the production tier's hit rate, mix changes, the calibration's largest deviation (deciles with
at least 100 estimates), peak provisioned GPUs against the ceiling, and each replay's wall
time and peak RSS. At the end, a line per goal (`controller.sim.goals`): met, NOT MET or not
checked, and a line per case with the numbers.

The goals are reported, not asserted: the exit status is 0 whatever they say, since this
measures the policy and the simulator rather than testing them. Progress goes to standard
error as it runs: the whole benchmark takes tens of minutes on 2 cores.

Usage: bench/bench_sim.py [NAME ...] [--seeds 0,1,2] [--jobs N] [--baselines LIST], NAME from
philly-busiest14d, philly, alibaba (all when none are given); traces are read from
$QUARTERMASTER_TRACES, else third_party/traces.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from controller.sim.goals import CaseNumbers, case_numbers, case_table, check_goals
from controller.sim.run import parse_baselines, peak_rss_any_mib, simulate, traces_dir

OUT = Path("sim-out")
DEFAULT_SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class Case:
    name: str
    """Also the output directory under sim-out/ (and the name `goals.SPEED_CASE` looks for)."""
    trace: str
    window: str | None


CASES = (
    Case("philly-busiest14d", "philly.csv.gz", "busiest14d"),
    Case("philly", "philly.csv.gz", None),
    Case("alibaba", "alibaba_openb_2023.csv.gz", None),
)


def parse_seeds(text: str) -> tuple[int, ...]:
    """A comma-separated list of seeds >= 0, repeats dropped. Raises ValueError."""
    words = [w.strip() for w in text.split(",")]
    if not words or any(not w.isdigit() for w in words):
        raise ValueError(f"invalid seeds {text!r}: expected integers >= 0, comma-separated")
    return tuple(dict.fromkeys(int(w) for w in words))


def replay_case(
    case: Case, seed: int, *, baselines: tuple[str, ...], jobs: int | None
) -> CaseNumbers:
    """Replay one trace on one seed; its tables go to summary.md, not the terminal."""
    path = traces_dir() / case.trace
    out_dir = OUT / case.name / f"seed-{seed}"
    print(
        f"\n== {case.name}, seed {seed}: {path}"
        + (f", window {case.window}" if case.window else "")
        + f" -> {out_dir}/summary.md"
    )
    sys.stdout.flush()
    simulation = simulate(
        path,
        out_dir=out_dir,
        seed=seed,
        window=case.window,
        baselines=baselines,
        out=io.StringIO(),
        jobs=jobs,
    )
    numbers = case_numbers(
        case.name,
        seed,
        simulation.figures,
        measurements=simulation.measurements,
        wall_seconds=simulation.wall_seconds,
        peak_rss_mib=simulation.peak_rss_mib,
    )
    for line in case_table(numbers):
        print("  " + line)
    print(
        f"  {case.name} seed {seed} in all: {numbers.wall_seconds:,.1f} s, "
        f"peak RSS {numbers.peak_rss_mib:,.0f} MiB (largest process)"
    )
    for warning in simulation.inputs.warnings:
        print(f"  warning: {warning}")
    sys.stdout.flush()
    return numbers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("names", nargs="*", help=", ".join(c.name for c in CASES))
    parser.add_argument(
        "--seeds", default="0,1,2", help="comma-separated seeds (default %(default)s)"
    )
    parser.add_argument(
        "--jobs", type=int, default=None, help="worker processes per replay (default: cores)"
    )
    parser.add_argument(
        "--baselines",
        default="all",
        help="as quartermaster simulate --baselines (default all: the four named)",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - {c.name for c in CASES})
    if unknown:
        parser.error(f"unknown trace(s) {', '.join(unknown)}")
    try:
        seeds = parse_seeds(args.seeds)
        baselines = parse_baselines(args.baselines)
    except ValueError as exc:
        parser.error(str(exc))
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"invalid jobs {args.jobs}: expected an integer >= 1")
    chosen = [c for c in CASES if not args.names or c.name in args.names]
    started = time.perf_counter()
    cases = [
        replay_case(case, seed, baselines=baselines, jobs=args.jobs)
        for case in chosen
        for seed in seeds
    ]
    replays = f"{len(cases)} replay{'s' if len(cases) != 1 else ''}"
    print(f"\n== goals over {replays} ({', '.join(c.label for c in cases)})")
    for goal in check_goals(cases):
        for line in goal.lines():
            print(line)
    print(
        f"\nbench-sim: {replays} in {time.perf_counter() - started:,.1f} s, "
        f"peak RSS {peak_rss_any_mib():,.0f} MiB (largest process)"
    )


if __name__ == "__main__":
    main()
