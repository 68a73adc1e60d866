"""Trace replays at full size: Philly's busiest 14 days, all of Philly, all of Alibaba openb 2023.

Each trace is replayed the way `quartermaster simulate` does it (the same `controller.sim.run`
functions, in this process), with the policy and every baseline on seed 0, and its summary
written to sim-out/<trace>/. For each run it prints the deadline hit rate by tier, the cost
and its percentage of on-demand-only, waits p50/p90 and mix changes, then the wall time and
peak resident memory (ru_maxrss) of each replay and of the whole benchmark. Progress goes to
standard error as it runs: the full Philly replay takes minutes.

There is no goal and no assertion on time: this measures the simulator and the policy, for
the README's figures and for spotting a slowdown.

Usage: bench/bench_sim.py [NAME ...], NAME from philly-busiest14d, philly, alibaba (all when
none are given); traces are read from $QUARTERMASTER_TRACES, else ../shared/traces.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from controller.sim.report import ALL_TIERS, format_percent, format_seconds
from controller.sim.run import Simulation, peak_rss_mib, simulate, traces_dir

OUT = Path("sim-out")


@dataclass(frozen=True)
class Case:
    name: str
    """Also the output directory under sim-out/."""
    trace: str
    window: str | None


CASES = (
    Case("philly-busiest14d", "philly.csv.gz", "busiest14d"),
    Case("philly", "philly.csv.gz", None),
    Case("alibaba", "alibaba_openb_2023.csv.gz", None),
)


def report(case: Case, simulation: Simulation) -> None:
    """The per-run lines this benchmark exists for, after simulate's own tables."""
    print(f"\n== {case.name}: the figures per run")
    walls = {m.name: m for m in simulation.measurements}
    for figures in simulation.figures:
        hits = ", ".join(
            f"{t.tier} {format_percent(t.hit_rate)}" for t in (*figures.tiers, figures.overall)
        ).replace(f"{ALL_TIERS} ", "overall ")
        relative = (
            "-"
            if figures.cost_vs_on_demand_only is None
            else f"{figures.cost_vs_on_demand_only:.1f} % of on-demand-only"
        )
        measured = walls[figures.name]
        print(f"  {figures.name}")
        print(f"    deadline hit rate  {hits}")
        print(f"    cost               ${figures.total_cost:,.0f} ({relative})")
        print(
            "    waits p50/p90      "
            + ", ".join(
                f"{t.tier} {format_seconds(t.wait_p50)}/{format_seconds(t.wait_p90)}"
                for t in (*figures.tiers, figures.overall)
            ).replace(f"{ALL_TIERS} ", "overall ")
        )
        print(f"    mix changes        {figures.mix_changes}")
        print(
            f"    replay             {measured.wall_seconds:.1f} s, "
            f"peak RSS {measured.peak_rss_mib:,.0f} MiB"
        )
    print(
        f"  {case.name} in all: {simulation.wall_seconds:.1f} s, "
        f"peak RSS {simulation.peak_rss_mib:,.0f} MiB"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=", ".join(c.name for c in CASES))
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - {c.name for c in CASES})
    if unknown:
        parser.error(f"unknown trace(s) {', '.join(unknown)}")
    chosen = [c for c in CASES if not args.names or c.name in args.names]
    directory = traces_dir()
    started = time.perf_counter()
    for case in chosen:
        path = directory / case.trace
        print(f"\n== {case.name}: {path}" + (f", window {case.window}" if case.window else ""))
        sys.stdout.flush()
        simulation = simulate(path, out_dir=OUT / case.name, seed=0, window=case.window)
        report(case, simulation)
        sys.stdout.flush()
    print(
        f"\nbench-sim: {len(chosen)} traces in {time.perf_counter() - started:.1f} s, "
        f"peak RSS {peak_rss_mib():,.0f} MiB"
    )


if __name__ == "__main__":
    main()
