"""The policy against one of its ablations in several draws per run, judged on the means.

One replay is one draw: moving the decision interval by a second (899 s or 901 s for 900 s),
which changes no rule, moves the policy's misses on Philly's busiest days by up to 200, since
which short, tight job finds a GPU free on a running node depends on where every earlier job
landed. A goal such as "never worse than FIFO" compares two such draws; where the two stand a
few dozen apart, one pairing says nothing. This replays the policy and the ablation at the
decision intervals 900 - k, ..., 900 + k seconds (k = `--offsets`, 1 by default: three draws),
each pair on the same jobs and seed, and per trace and seed prints each draw's misses and
cost, the means, how many pairings the policy wins, and the verdict on the means.

Reported, not asserted (exit 0 whatever it says). Usage: bench/bench_draws.py [NAME ...]
[--seeds 0,1,2] [--jobs N] [--against policy-fifo] [--offsets 1], NAME from
philly-busiest14d, alibaba, philly (the first two when none is given, as `bench_sim.py`
replays them: no lead-in); traces from $QUARTERMASTER_TRACES, else third_party/traces.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

import bench_sim

from controller.sim.engine import ABLATIONS, POLICY, RunSpec
from controller.sim.goals import DrawVerdict, judge_draws
from controller.sim.run import peak_rss_any_mib, prepare, run_replays, traces_dir

INTERVAL = 900.0
"""The replay's decision interval (`RunSpec.decision_interval`), the middle draw."""
CASES = {case.name: case for case in bench_sim.CASES}
DEFAULT_CASES = ("philly-busiest14d", "alibaba")


def intervals(offsets: int) -> tuple[float, ...]:
    """900 - k, ..., 900 + k seconds."""
    return tuple(INTERVAL + d for d in range(-offsets, offsets + 1))


def draws(base: RunSpec, at: Sequence[float]) -> list[RunSpec]:
    return [replace(base, name=f"{base.name}@{d:g}", decision_interval=d) for d in at]


def replay_case(
    name: str, seed: int, *, against: RunSpec, at: Sequence[float], jobs: int | None
) -> DrawVerdict:
    case = CASES[name]
    inputs = prepare(traces_dir() / case.trace, seed=seed, window=case.window)
    specs = [*draws(POLICY, at), *draws(against, at)]
    replayed = run_replays(inputs, specs, seed=seed, err=sys.stderr, jobs=jobs)
    missed = [f.overall.missed for f in replayed.figures]
    cost = [f.total_cost for f in replayed.figures]
    n = len(at)
    judged = judge_draws(missed[:n], missed[n:])
    print(f"\n== {name}, seed {seed}: {POLICY.name} against {against.name}")
    print(f"  {'decision interval':>18} {POLICY.name:>18} {against.name:>18}")
    for i, d in enumerate(at):
        print(
            f"  {d:>16g} s {missed[i]:>9,} ${cost[i] / 1000:>6,.1f}k"
            f" {missed[n + i]:>9,} ${cost[n + i] / 1000:>6,.1f}k"
        )
    print(
        f"  {'mean':>18} {judged.policy_mean:>9,.1f} ${statistics.fmean(cost[:n]) / 1000:>6,.1f}k"
        f" {judged.other_mean:>9,.1f} ${statistics.fmean(cost[n:]) / 1000:>6,.1f}k"
    )
    print(
        f"  no more misses than {against.name}: {judged.wins} of {judged.pairs} pairings; "
        + ("on the means met" if judged.met else f"on the means NOT MET (+{judged.excess:.1%})")
    )
    sys.stdout.flush()
    return judged


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("names", nargs="*", help=", ".join(CASES))
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated (default %(default)s)")
    parser.add_argument("--jobs", type=int, default=None, help="worker processes (default: cores)")
    parser.add_argument(
        "--against",
        default="policy-fifo",
        help=f"one of {', '.join(ABLATIONS)} (default %(default)s)",
    )
    parser.add_argument(
        "--offsets", type=int, default=1, help="k: intervals 900-k..900+k s (default %(default)s)"
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(CASES))
    if unknown:
        parser.error(f"unknown trace(s) {', '.join(unknown)}: expected {', '.join(CASES)}")
    if args.against not in ABLATIONS:
        parser.error(f"unknown ablation {args.against!r}: expected one of {', '.join(ABLATIONS)}")
    if not 0 <= args.offsets <= 60:
        parser.error(f"invalid offsets {args.offsets}: expected 0 to 60")
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"invalid jobs {args.jobs}: expected an integer >= 1")
    try:
        seeds = bench_sim.parse_seeds(args.seeds)
    except ValueError as exc:
        parser.error(str(exc))
    at = intervals(args.offsets)
    started = time.perf_counter()
    judged = {
        (name, seed): replay_case(
            name, seed, against=ABLATIONS[args.against], at=at, jobs=args.jobs
        )
        for name in (args.names or DEFAULT_CASES)
        for seed in seeds
    }
    met = sum(v.met for v in judged.values())
    print(
        f"\n== on the means of {len(at)} draw{'s' if len(at) != 1 else ''}: "
        f"no more misses than {args.against} on {met} of {len(judged)} runs; "
        f"{sum(v.wins for v in judged.values())} of {sum(v.pairs for v in judged.values())} "
        f"pairings; {sum(v.policy_mean for v in judged.values()):,.0f} misses a draw against "
        f"{sum(v.other_mean for v in judged.values()):,.0f}"
    )
    print(
        f"bench-draws: {len(judged) * 2 * len(at)} replays in "
        f"{time.perf_counter() - started:,.1f} s, peak RSS {peak_rss_any_mib():,.0f} MiB"
    )


if __name__ == "__main__":
    main()
