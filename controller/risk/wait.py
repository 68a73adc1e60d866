"""How long the next workload submitted to a ClusterQueue will wait, as p50 and p90.

The same fluid queue as the deadline model: the pending work ahead drains through the GPUs the
running work leaves free, more as each running workload finishes (`deadline.drain_times`). A
queue with nothing pending and enough free GPUs for the new workload admits it at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from controller.risk.deadline import HORIZON_SECONDS, Job, drain_times, draw_rows, job_fields


class WaitEstimate(NamedTuple):
    p50_seconds: float
    p90_seconds: float


class WaitProblem(NamedTuple):
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
    """Waits of many queues: those behind pending work sampled together, a batch per queue
    length (each queue still draws its own samples, alike whatever else is in the batch),
    their quantiles taken in one call."""
    out: list[WaitEstimate | None] = [None] * len(problems)
    sampled: list[tuple[int, np.ndarray]] = []
    behind: dict[int, list[int]] = {}
    for i, problem in enumerate(problems):
        found = _without_sampling(problem)
        if found is not None:
            out[i] = found
        elif any(not j.running for j in problem.jobs):
            behind.setdefault(len(problem.jobs), []).append(i)
        else:
            sampled.append((i, _until_freed(problem, samples=samples, seed=seed)))
    for members in behind.values():
        waits = _behind_pending([problems[i] for i in members], samples=samples, seed=seed)
        sampled.extend(zip(members, waits, strict=True))
    if sampled:
        stacked = np.minimum(np.stack([waits for _, waits in sampled]), HORIZON_SECONDS)
        p50, p90 = np.quantile(stacked, [0.5, 0.9], axis=1)
        for row, (i, _) in enumerate(sampled):
            out[i] = WaitEstimate(float(p50[row]), float(p90[row]))
    return [e for e in out if e is not None]


def _normal_draws(seed: int, samples: int, width: int) -> np.ndarray:
    """Standard normal draws (job, sample), alike for every queue of `width` jobs: the first
    rows of one array per seed and sample count (see `deadline._job_draws`)."""
    return _normal_rows(seed, samples, draw_rows(width))[:width]


@lru_cache(maxsize=8)
def _normal_rows(seed: int, samples: int, rows: int) -> np.ndarray:
    draws = np.random.default_rng(seed).standard_normal((rows, samples))
    draws.flags.writeable = False
    return draws


def _without_sampling(problem: WaitProblem) -> WaitEstimate | None:
    """The answer when it needs no sampling: none, or never."""
    jobs, capacity_gpus, new_gpus = problem.jobs, problem.capacity_gpus, problem.new_gpus
    running_gpus = sum(j.gpus for j in jobs if j.running)
    if all(j.running for j in jobs) and running_gpus + new_gpus <= capacity_gpus:
        return WaitEstimate(0.0, 0.0)
    if capacity_gpus <= 0 or new_gpus > capacity_gpus:
        # It cannot start under this capacity: reported as the model's horizon, so no metric,
        # status field or alert ever reads +Inf.
        return WaitEstimate(HORIZON_SECONDS, HORIZON_SECONDS)
    return None


_GPUS, _MEAN, _SIGMA, _RUNNING = (
    Job._fields.index(f) for f in ("gpus", "mean_seconds", "sigma", "running")
)
"""Columns of `_fields`."""


def _fields(queues: Sequence[Sequence[Job]]) -> np.ndarray:
    """Queues of one length as (queue, job, field) in `Job`'s field order, running jobs first
    (each side in its queue order): one conversion instead of a loop per field."""
    fields = job_fields(queues, len(queues[0]))
    order = np.argsort(fields[:, :, _RUNNING] == 0, axis=1, kind="stable")
    out: np.ndarray = np.take_along_axis(fields, order[:, :, None], axis=1)
    return out


def _durations(fields: np.ndarray, *, samples: int, seed: int) -> np.ndarray:
    """Sampled runtimes (queue, job, sample) of queues of one length (`_fields`)."""
    mean = np.maximum(fields[:, :, _MEAN], 1.0)
    sigma = np.maximum(fields[:, :, _SIGMA], 0.0)
    z = _normal_draws(seed, samples, fields.shape[1])
    # In place: a new array of this size costs fresh pages, more than the arithmetic.
    out: np.ndarray = sigma[:, :, None] * z
    out += (np.log(mean) - sigma**2 / 2)[:, :, None]
    np.exp(out, out=out)
    return out


def _behind_pending(problems: Sequence[WaitProblem], *, samples: int, seed: int) -> np.ndarray:
    """Sampled waits (queue, sample) of queues of one length with work pending: the new
    workload waits behind the pending work, which drains through what the running work
    leaves free."""
    fields = _fields([p.jobs for p in problems])
    durations = _durations(fields, samples=samples, seed=seed)
    gpus = fields[:, :, _GPUS]
    running = fields[:, :, _RUNNING] != 0
    columns = int(running.sum(axis=1).max())
    queued = np.matmul(np.where(running, 0.0, gpus)[:, None, :], durations)[:, 0, :]
    capacity = np.array([float(p.capacity_gpus) for p in problems])
    waits: np.ndarray = drain_times(
        np.where(running[:, :columns, None], durations[:, :columns, :], 0.0),
        np.where(running, gpus, 0.0)[:, :columns, None],
        queued,
        np.broadcast_to(capacity[:, None], queued.shape),
        columns=columns,
    )
    return waits


def _until_freed(problem: WaitProblem, *, samples: int, seed: int) -> np.ndarray:
    """Sampled waits of a queue with nothing pending but too little free: until enough
    running workloads finish to free the GPUs the new one needs."""
    jobs = problem.jobs
    needed = problem.new_gpus - (problem.capacity_gpus - sum(j.gpus for j in jobs))
    fields = job_fields([jobs], len(jobs))
    durations = _durations(fields, samples=samples, seed=seed)[0].T
    gpus = fields[0, :, _GPUS]
    order = np.argsort(durations, axis=1)
    freed = np.cumsum(gpus[order], axis=1)
    first = np.argmax(freed >= needed, axis=1)
    picked: np.ndarray = np.take_along_axis(durations, order, axis=1)[np.arange(samples), first]
    return picked


def _wait_samples(problem: WaitProblem, *, samples: int, seed: int) -> WaitEstimate | np.ndarray:
    """One queue's sampled waits, or the answer when it needs no sampling."""
    found = _without_sampling(problem)
    if found is not None:
        return found
    if any(not j.running for j in problem.jobs):
        waits: np.ndarray = _behind_pending([problem], samples=samples, seed=seed)[0]
        return waits
    return _until_freed(problem, samples=samples, seed=seed)
