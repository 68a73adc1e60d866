"""Deadline risk at scale: 1,000 deadlines x 500 samples in one batch (goal: under 1 s).

Each deadline has about 8 unfinished workloads of mixed sizes (1 to 64 GPUs), the first few
running, on a mix of on-demand and spot capacity with interruptions on. Prints wall time (best
and median of several runs after one warm-up) of `estimate_many`, and peak memory: Python
allocations during one run (tracemalloc, which sees NumPy's arrays) and the process's maximum
resident set size.
"""

from __future__ import annotations

import random
import resource
import statistics
import time
import tracemalloc

from controller.risk.deadline import Capacity, Estimate, Job, Problem, estimate_many

DEADLINES = 1000
SAMPLES = 500
RUNS = 5
GOAL_SECONDS = 1.0
FIXED_NOW = 1_800_000_000.0
HOUR = 3600.0
SIZES = (1, 2, 4, 8, 8, 16, 32, 64)


def problems(seed: int = 7) -> list[Problem]:
    """`DEADLINES` deadlines, each with 6 to 10 jobs, a capacity mix and a deadline 4-72 h out."""
    pick = random.Random(seed)
    out = []
    for _ in range(DEADLINES):
        running = pick.randint(1, 3)
        jobs = tuple(
            Job(
                gpus=pick.choice(SIZES),
                mean_seconds=pick.uniform(0.5, 12.0) * HOUR,
                sigma=pick.uniform(0.1, 0.6),
                running=j < running,
                checkpoint_seconds=pick.choice((600.0, 1800.0, 3600.0, 7200.0)),
                counts=pick.random() < 0.8,
            )
            for j in range(pick.randint(6, 10))
        )
        quota = pick.choice((64, 96, 128, 192, 256))
        on_demand = pick.randint(0, quota // 8) * 8
        capacity = Capacity(
            on_demand_gpus=on_demand,
            spot_gpus=quota - on_demand,
            spot_availability=pick.uniform(0.6, 0.98),
            interruptions_per_node_hour=pick.uniform(0.0, 0.1),
        )
        out.append(Problem(jobs, capacity, FIXED_NOW + pick.uniform(4.0, 72.0) * HOUR))
    return out


def run(batch: list[Problem]) -> list[Estimate]:
    return estimate_many(batch, now=FIXED_NOW, samples=SAMPLES, seed=0)


def main() -> None:
    batch = problems()
    jobs = sum(len(p.jobs) for p in batch)
    print(
        f"risk: {DEADLINES} deadlines x {SAMPLES} samples, {jobs} jobs "
        f"({jobs / DEADLINES:.1f} a deadline), {RUNS} runs after one warm-up"
    )
    estimates = run(batch)  # warm-up
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        run(batch)
        times.append(time.perf_counter() - start)
    best, median = min(times), statistics.median(times)
    print(f"  estimate_many                best {best:7.3f} s   median {median:7.3f} s")
    risks = sorted(e.risk for e in estimates)
    at_risk = sum(r > 0.1 for r in risks)
    print(
        f"  risk over the deadlines      median {statistics.median(risks):.3f}, "
        f"{at_risk} above 0.1, {sum(r == 1.0 for r in risks)} certain misses"
    )

    tracemalloc.start()
    run(batch)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    max_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"  peak Python allocations      {peak / 2**20:.1f} MiB (one estimate_many)")
    print(f"  process max RSS              {max_rss_kib / 1024:.1f} MiB")
    goal = "met" if median < GOAL_SECONDS else "NOT met"
    print(f"goal median < {GOAL_SECONDS:.0f} s: {goal}")


if __name__ == "__main__":
    main()
