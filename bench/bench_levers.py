"""The per-workload levers judged at equal cost: the policy against the static frontier, reactive,
on-demand-only and its own ablations (no deadline order, no lanes).

Per trace and seed it replays, through `controller.sim.run.simulate` (what `quartermaster
simulate` runs), the policy, `policy-fifo`, `policy-no-lanes`, `policy-pods-ready` (the policy
on a Kueue that reports PodsReady, where its lanes can move work stranded on spot),
`reactive` and the static mixes `static:F` for F = 0, 0.1, ..., 1 (static:1 is
on-demand-only), and prints a line per goal of the levers issue, met or NOT MET, with the
figures behind it, for the policy and for `policy-pods-ready`:

- below the frontier: the policy misses at least 20 % fewer deadlines than the static mixes
  interpolated linearly at the policy's cost, and fewer than reactive at no more than its cost;
- spot made safe: the policy's misses from waiting for a node and from interruptions are at
  most 1.1 x on-demand-only's, at no more than 40 % of its cost;
- never worse than FIFO: no more misses than `policy-fifo`;
- production: no production miss caused by a lever (waited for a node, interruptions,
  preempted);
- no more mix changes than reactive; lane writes per hour of the window.

Reported, not asserted (exit 0 whatever they say). Usage: bench/bench_levers.py [NAME ...]
[--seeds 0,1,2] [--jobs N], NAME from philly-busiest14d (with a 3-day lead-in), alibaba,
philly; traces from $QUARTERMASTER_TRACES, else the repository's third_party/traces.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.sim.run import simulate, traces_dir
from controller.sim.tables import submit_times

OUT = Path("sim-out/levers")
STATICS = tuple(f"static:{f / 10:g}" for f in range(11))
RUNS = ("policy-fifo", "policy-no-lanes", "policy-pods-ready", "reactive", *STATICS)
JUDGED = ("policy", "policy-pods-ready")
"""The runs the goals are judged for: the policy on Kueue's default, and on a Kueue that
reports PodsReady (where its lanes can move work stranded on spot)."""
LEVER_CAUSES = ("waited for a node", "work lost to interruptions", "preempted")
SPOT_CAUSES = ("waited for a node", "work lost to interruptions")


@dataclass(frozen=True)
class Case:
    name: str
    trace: str
    window: str | None
    lead_in: float = 0.0


CASES = (
    Case("philly-busiest14d", "philly.csv.gz", "busiest14d", lead_in=3 * 86400.0),
    Case("alibaba", "alibaba_openb_2023.csv.gz", None),
    Case("philly", "philly.csv.gz", None),
)


def misses(run: dict[str, Any], causes: tuple[str, ...] | None = None, tier: str = "all") -> int:
    by_cause = run["misses_by_cause"].get(tier, {})
    if causes is None:
        return int(run["deadlines"][tier]["missed"]) if tier in run["deadlines"] else 0
    return sum(int(by_cause.get(c, 0)) for c in causes)


def cost(run: dict[str, Any]) -> float:
    return float(run["cost"]["total"])


def frontier_at(runs: dict[str, dict[str, Any]], at_cost: float) -> float | None:
    """The static mixes' misses interpolated linearly at `at_cost` (None outside their span)."""
    points = sorted((cost(runs[s]), misses(runs[s])) for s in STATICS if s in runs)
    for (c0, m0), (c1, m1) in itertools.pairwise(points):
        if c0 <= at_cost <= c1:
            return m0 if c1 == c0 else m0 + (m1 - m0) * (at_cost - c0) / (c1 - c0)
    return None


def judge(
    runs: dict[str, dict[str, Any]], hours: float, name: str = "policy"
) -> list[tuple[str, bool | None, str]]:
    policy, fifo, reactive = runs[name], runs["policy-fifo"], runs["reactive"]
    od = runs["static:1"]
    out: list[tuple[str, bool | None, str]] = []
    frontier = frontier_at(runs, cost(policy))
    if frontier is None:
        out.append(("below the frontier", None, "policy cost outside the static span"))
    else:
        out.append(
            (
                "below the frontier (<= 0.8 x static at equal cost)",
                misses(policy) <= 0.8 * frontier,
                f"policy {misses(policy):,} at ${cost(policy):,.0f}; static frontier there "
                f"{frontier:,.0f} (0.8 x = {0.8 * frontier:,.0f})",
            )
        )
    out.append(
        (
            "fewer misses than reactive at no more cost",
            misses(policy) < misses(reactive) and cost(policy) <= cost(reactive),
            f"policy {misses(policy):,} / ${cost(policy):,.0f}; reactive {misses(reactive):,} / "
            f"${cost(reactive):,.0f}",
        )
    )
    out.append(
        (
            "spot made safe (node + interruption misses <= 1.1 x on-demand-only, cost <= 40 %)",
            misses(policy, SPOT_CAUSES) <= 1.1 * misses(od, SPOT_CAUSES)
            and cost(policy) <= 0.4 * cost(od),
            f"policy {misses(policy, SPOT_CAUSES):,} vs on-demand-only "
            f"{misses(od, SPOT_CAUSES):,}; cost {100 * cost(policy) / cost(od):.1f} %",
        )
    )
    out.append(
        (
            "never worse than FIFO",
            misses(policy) <= misses(fifo),
            f"policy {misses(policy):,}, policy-fifo {misses(fifo):,}, "
            f"policy-no-lanes {misses(runs['policy-no-lanes']):,}",
        )
    )
    lever = misses(policy, LEVER_CAUSES, tier="production")
    out.append(
        (
            "no production miss caused by a lever",
            lever == 0,
            f"{lever:,} (quota waits {misses(policy, ('waited for quota',), tier='production'):,})",
        )
    )
    out.append(
        (
            "no more mix changes than reactive",
            policy["mix_changes"] <= reactive["mix_changes"],
            f"policy {policy['mix_changes']:,}, reactive {reactive['mix_changes']:,}; lane "
            f"writes {policy.get('lane_writes', 0):,} ({policy.get('lane_writes', 0) / hours:.2f}"
            f" per hour), of which moves off spot {policy.get('lane_moves', 0):,}",
        )
    )
    return out


def replay(case: Case, seed: int, jobs: int | None) -> list[tuple[str, bool | None, str]]:
    out_dir = OUT / case.name / f"seed-{seed}"
    started = time.perf_counter()
    simulation = simulate(
        traces_dir() / case.trace,
        out_dir=out_dir,
        seed=seed,
        window=case.window,
        lead_in=case.lead_in,
        baselines=RUNS,
        out=io.StringIO(),
        jobs=jobs,
    )
    summary = json.loads((out_dir / "summary.json").read_text())
    runs = summary["runs"]
    window = summary["inputs"].get("window") or {}
    if window.get("end_seconds") is not None:
        hours = (float(window["end_seconds"]) - float(window["start_seconds"])) / 3600.0
    else:
        hours = max(submit_times(simulation.results[0].outcomes)) / 3600.0
    hours = max(hours, 1.0)
    print(
        f"\n== {case.name} seed {seed} ({time.perf_counter() - started:,.0f} s, "
        f"{out_dir}/summary.md)"
    )
    print("  run               misses   cost          node+interr.  production lever")
    for name in ("policy", *RUNS):
        run = runs[name]
        print(
            f"  {name:<16} {misses(run):>7,}   ${cost(run):>11,.0f}   "
            f"{misses(run, SPOT_CAUSES):>10,}   {misses(run, LEVER_CAUSES, 'production'):>8,}"
        )
    verdicts = []
    for name in JUDGED:
        print(f"  -- {name}")
        for goal, met, detail in judge(runs, hours, name):
            word = "not checked" if met is None else ("met" if met else "NOT MET")
            print(f"  {word:<11} {goal}: {detail}")
            verdicts.append((f"{name}: {goal}", met, detail))
    sys.stdout.flush()
    return verdicts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("names", nargs="*", help=", ".join(c.name for c in CASES))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args(argv)
    chosen = [c for c in CASES if c.name in args.names] if args.names else list(CASES[:2])
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.perf_counter()
    tally: dict[str, list[bool]] = {}
    for case in chosen:
        for seed in seeds:
            for goal, met, _ in replay(case, seed, args.jobs):
                if met is not None:
                    tally.setdefault(goal, []).append(met)
    print("\n== goals")
    for goal, results in tally.items():
        print(f"  {sum(results)} of {len(results)} met: {goal}")
    print(f"\nbench-levers: {time.perf_counter() - started:,.0f} s")


if __name__ == "__main__":
    main()
