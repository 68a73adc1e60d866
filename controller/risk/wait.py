"""How long the next workload submitted to a ClusterQueue will wait, as p50 and p90.

The same fluid queue as the deadline model: the pending work ahead drains through the GPUs the
running work leaves free, more as each running workload finishes (`deadline.drain_times`). A
queue with nothing pending and enough free GPUs for the new workload admits it at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from controller.risk.deadline import HORIZON_SECONDS, Job, drain_times


@dataclass(frozen=True)
class WaitEstimate:
    p50_seconds: float
    p90_seconds: float


@dataclass(frozen=True)
class WaitProblem:
    """The next workload of one queue: `jobs` are its running and pending workloads."""

    jobs: Sequence[Job]
    capacity_gpus: float
    new_gpus: int


def estimate_wait(
    jobs: Sequence[Job],
    *,
    capacity_gpus: float,
    new_gpus: int,
    samples: int = 500,
    seed: int = 0,
) -> WaitEstimate:
    """`jobs` are the queue's running and pending workloads; `new_gpus` the next one's size."""
    return estimate_waits([WaitProblem(jobs, capacity_gpus, new_gpus)], samples=samples, seed=seed)[
        0
    ]


def estimate_waits(
    problems: Sequence[WaitProblem], *, samples: int = 500, seed: int = 0
) -> list[WaitEstimate]:
    """Waits of many queues: each sampled alone, their quantiles taken in one call."""
    out: list[WaitEstimate | None] = []
    sampled: list[tuple[int, np.ndarray]] = []
    for problem in problems:
        found = _wait_samples(problem, samples=samples, seed=seed)
        if isinstance(found, WaitEstimate):
            out.append(found)
        else:
            sampled.append((len(out), found))
            out.append(None)
    if sampled:
        stacked = np.minimum(np.stack([waits for _, waits in sampled]), HORIZON_SECONDS)
        p50, p90 = np.quantile(stacked, [0.5, 0.9], axis=1)
        for row, (i, _) in enumerate(sampled):
            out[i] = WaitEstimate(float(p50[row]), float(p90[row]))
    return [e for e in out if e is not None]


@lru_cache(maxsize=1024)
def _normal_draws(seed: int, samples: int, width: int) -> np.ndarray:
    """What a fresh generator of `seed` draws first: alike for every queue of `width` jobs."""
    draws = np.random.default_rng(seed).standard_normal((samples, width))
    draws.flags.writeable = False
    return draws


def _wait_samples(problem: WaitProblem, *, samples: int, seed: int) -> WaitEstimate | np.ndarray:
    """The sampled waits, or the answer when it needs no sampling."""
    jobs, capacity_gpus, new_gpus = problem.jobs, problem.capacity_gpus, problem.new_gpus
    running_gpus = sum(j.gpus for j in jobs if j.running)
    pending = [j for j in jobs if not j.running]
    if not pending and running_gpus + new_gpus <= capacity_gpus:
        return WaitEstimate(0.0, 0.0)
    if capacity_gpus <= 0 or new_gpus > capacity_gpus:
        # It cannot start under this capacity: reported as the model's horizon, so no metric,
        # status field or alert ever reads +Inf.
        return WaitEstimate(HORIZON_SECONDS, HORIZON_SECONDS)

    def sample(chosen: Sequence[Job]) -> tuple[np.ndarray, np.ndarray]:
        gpus = np.array([j.gpus for j in chosen], dtype=np.float64)
        mean = np.array([max(j.mean_seconds, 1.0) for j in chosen])
        sigma = np.array([max(j.sigma, 0.0) for j in chosen])
        z = _normal_draws(seed, samples, len(chosen))
        return gpus, np.exp(np.log(mean) - sigma**2 / 2 + sigma * z)

    if pending:
        # Behind the pending work, which drains through what the running work leaves free.
        ordered = [j for j in jobs if j.running] + pending
        gpus, durations = sample(ordered)
        is_running = np.array([j.running for j in ordered])
        waits: np.ndarray = drain_times(
            np.where(is_running, durations, 0.0),
            np.where(is_running, gpus, 0.0)[None, :],
            np.where(is_running, 0.0, durations * gpus).sum(axis=1, keepdims=True),
            np.full(samples, float(capacity_gpus)),
            columns=int(is_running.sum()),
        )[:, 0]
        return waits
    # Nothing pending: wait until enough running workloads finish to free the GPUs needed.
    running = [j for j in jobs if j.running]
    needed = new_gpus - (capacity_gpus - running_gpus)
    gpus, durations = sample(running)
    order = np.argsort(durations, axis=1)
    freed = np.cumsum(gpus[order], axis=1)
    first = np.argmax(freed >= needed, axis=1)
    picked: np.ndarray = np.take_along_axis(durations, order, axis=1)[np.arange(samples), first]
    return picked
