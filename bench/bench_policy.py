"""Validation and rendering at scale: 1,000 projects x 4 pools (goal: under 1 s together).

Prints wall time (best and median of several runs) for each stage, the objects produced, and
peak memory: Python allocations during one validate+render (tracemalloc) and the process's
maximum resident set size.
"""

from __future__ import annotations

import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from controller.api.loader import load_policy_set
from controller.examples.synthetic import synthetic_documents
from controller.render.desired import Rendered, render
from controller.yamlio import dump_documents

PROJECTS = 1000
POOLS = 4
RUNS = 7


def timed(fn: Callable[[], Any]) -> tuple[list[float], Any]:
    times, result = [], None
    for _ in range(RUNS):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times, result


def report(label: str, times: list[float]) -> None:
    print(f"  {label:<28} best {min(times):7.3f} s   median {statistics.median(times):7.3f} s")


def main() -> None:
    documents = [
        (f"doc#{i}", d) for i, d in enumerate(synthetic_documents(projects=PROJECTS, pools=POOLS))
    ]
    print(f"policy: {PROJECTS} projects x {POOLS} pools, {len(documents)} documents, {RUNS} runs")
    validate_times, policy_set = timed(lambda: load_policy_set(documents))
    render_times, rendered = timed(lambda: render(policy_set))
    assert isinstance(rendered, Rendered)
    both_times, _ = timed(lambda: render(load_policy_set(documents)))
    dump_times, text = timed(lambda: dump_documents(rendered.objects))
    report("validate", validate_times)
    report("render", render_times)
    report("validate + render", both_times)
    report("YAML output", dump_times)
    print(f"  objects rendered             {len(rendered.objects)} ({len(text) / 1e6:.1f} MB YAML)")

    tracemalloc.start()
    render(load_policy_set(documents))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    max_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"  peak Python allocations      {peak / 2**20:.1f} MiB (validate + render)")
    print(f"  process max RSS              {max_rss_kib / 1024:.1f} MiB")
    goal = "met" if statistics.median(both_times) < 1.0 else "NOT met"
    print(f"goal validate + render < 1 s: {goal}")


if __name__ == "__main__":
    main()
