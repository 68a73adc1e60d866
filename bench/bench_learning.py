"""Runtime learning at scale: 100,000 finished workloads over 1,000 projects (issue 33).

Feeds a `RuntimeLearner` 100,000 finished workloads (1,000 projects, 3 queues and 5 user labels
each, two in three declaring a runtime) and prints the time per update (best of several runs),
the time per estimate asked of it, and its memory: the sketches' arrays, the Python allocations
it holds (tracemalloc, which sees NumPy's arrays), and the size of its JSON summary (what a
ConfigMap would keep; a ConfigMap holds at most 1 MiB).
"""

from __future__ import annotations

import gc
import json
import random
import time
import tracemalloc

from controller.risk.learning import FinishedRun, RuntimeLearner

FINISHED = 100_000
PROJECTS = 1000
RUNS = 3
HOUR = 3600.0


def finished(seed: int = 7) -> list[FinishedRun]:
    """`FINISHED` runs, finishing 5 s apart; each project has its own habit (a ratio 0.5-3x)."""
    pick = random.Random(seed)
    habits = [pick.uniform(0.5, 3.0) for _ in range(PROJECTS)]
    out = []
    for i in range(FINISHED):
        project = pick.randrange(PROJECTS)
        declared = pick.choice((None, HOUR * pick.uniform(0.5, 12), HOUR * pick.uniform(0.5, 12)))
        base = declared if declared is not None else HOUR * 4
        out.append(
            FinishedRun(
                uid=f"ns-{project}/job-{i}",
                project=f"project-{project}",
                finished_at=5.0 * i,
                actual_seconds=base * habits[project] * pick.lognormvariate(0.0, 0.3),
                declared_seconds=declared,
                queue=f"queue-{pick.randrange(3)}",
                user=f"user-{pick.randrange(5)}",
            )
        )
    return out


def feed(runs: list[FinishedRun]) -> RuntimeLearner:
    learner = RuntimeLearner()
    for r in runs:
        learner.observe(r)
    return learner


def main() -> None:
    runs = finished()
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        learner = feed(runs)
        times.append(time.perf_counter() - start)
    best = min(times)
    print(
        f"learning: {FINISHED:,} finished workloads, {PROJECTS:,} projects: "
        f"{best / FINISHED * 1e6:.1f} us per update (best of {RUNS}, {best:.2f} s in all)"
    )

    def ask() -> tuple[int, float]:
        start = time.perf_counter()
        asked = 0
        for p in range(PROJECTS):
            for q in range(3):
                learner.declared(
                    f"project-{p}", HOUR, queue=f"queue-{q}", user="user-1", prior_sigma=0.25
                )
                asked += 1
        return asked, time.perf_counter() - start

    asked, first = ask()
    _, again = ask()
    print(
        f"  estimate: {first / asked * 1e6:.1f} us per key first asked after a finish, "
        f"{again / asked * 1e6:.2f} us asked again in a pass ({asked:,} keys)"
    )

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    held = feed(runs)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    summary = json.dumps(held.to_dict(), separators=(",", ":"))
    held_bytes = after - before
    print(
        f"  memory at {FINISHED:,}: {len(held):,} keys, "
        f"sketch arrays {held.nbytes() / 1e6:.2f} MB, "
        f"all held {held_bytes / 1e6:.2f} MB ({held_bytes / len(held):,.0f} B per key)"
    )
    print(f"  summary (JSON): {len(summary) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
