"""The probability of missing a deadline, by Monte Carlo over a fluid model of the queue.

For one deadline of one project: the project's unfinished workloads, in the order Kueue would
run them (running first, then pending by priority and age), each with a log-normal runtime,
share the capacity the project can count on: its on-demand GPUs plus the part of its spot GPUs
the market delivers (a Beta-distributed fraction). Work on spot is interrupted at the pool's
rate, per node, and each interruption costs half a checkpoint interval of lost work plus a
node's provisioning latency. Pending work starts no earlier than that latency. A running
workload holds its GPUs until its own runtime is done; pending work drains as a fluid through
what the running ones leave free: the k-th pending workload is done when the pending work
ahead of it, and its own, has passed through that, and no earlier than its own runtime after
its start (`drain_times`).

A pod set is indivisible: Kueue admits it whole onto one flavor, so what decides whether a
pending workload can start at all is the widest flavor the project can admit into (with what it
may borrow), not the fluid total: an 8-GPU job on an 8-GPU quota of spot at 90 % availability
starts, slowed, rather than never. A workload wider than that never starts; its finish, and so
the deadline's, is then reported at the horizon (ten years on), so every figure stays finite.

Every random draw (runtimes, spot availability, interruption counts by inverse transform) is
fixed by the seed and independent of the capacity, so two candidate mixes are compared on the
same samples: risk is monotone in capacity and the decision search does not flap on noise.

Everything is batched: many deadlines and samples are evaluated in one pass of array arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.floating[Any]]
SECONDS_PER_HOUR = 3600.0
HORIZON_SECONDS = 10 * 365 * 86400.0
"""Where a finish that never comes is put, so risk, slack and finish times stay finite."""


@dataclass(frozen=True)
class Job:
    """One unfinished workload as the model sees it."""

    gpus: int
    mean_seconds: float
    """Expected remaining runtime."""
    sigma: float = 0.3
    """Log-normal shape: 0 makes the runtime exact."""
    running: bool = False
    checkpoint_seconds: float = 3600.0
    counts: bool = True
    """Whether it must finish for the deadline (others only take capacity ahead of it)."""


@dataclass(frozen=True)
class Capacity:
    """What one project can count on."""

    on_demand_gpus: float
    spot_gpus: float
    spot_availability: float = 0.9
    """Mean fraction of the spot quota the market delivers."""
    spot_availability_concentration: float = 20.0
    """Beta concentration: higher is more certain."""
    interruptions_per_node_hour: float = 0.05
    gpus_per_node: int = 8
    provisioning_latency_seconds: float = 300.0
    widest_gpus: float = float("inf")
    """The widest pod set the project can admit: its widest flavor plus what it may borrow."""


@dataclass(frozen=True)
class Problem:
    jobs: tuple[Job, ...]
    capacity: Capacity
    deadline: float
    """Epoch seconds."""


@dataclass(frozen=True)
class Estimate:
    risk: float
    """Share of samples finishing after the deadline."""
    p50_finish: float
    p90_finish: float
    slack_seconds: float
    """Deadline minus the median finish (negative when late; at most ten years late)."""
    startable: bool = True
    """False when some workload counting toward it can never start (too wide for any flavor)."""


POISSON_STEPS = 4
"""CDF steps walked one at a time before the walk goes in blocks: most walks end here."""
POISSON_BLOCKS = (8, 16, 32, 64, 128)
"""Then this many steps at once, block after block (the last size repeating): one array
operation over (draws, steps) for walks a long job on spot makes, a hundred steps or more."""


@lru_cache(maxsize=64)
def _log_factorials(start: int, count: int) -> FloatArray:
    """log(k!) for k in [start, start + count)."""
    out: FloatArray = np.array([math.lgamma(k + 1) for k in range(start, start + count)])
    out.flags.writeable = False
    return out


def _poisson_inverse(rate: FloatArray, uniform: FloatArray) -> FloatArray:
    """Poisson counts by inverse transform, so a larger rate never gives a smaller count.

    Most draws see no interruption (uniform < e^-rate); only the rest are walked up the CDF,
    in float64 and in log space (e^-rate underflows for large rates), and the walk always ends:
    it stops far in the tail even if rounding keeps the CDF below the draw. The first
    `POISSON_STEPS` steps go one at a time over the draws still walking; the rest in blocks
    of `POISSON_BLOCKS`, each step's probability from its closed form (k log r - r - log k!):
    one array operation per step had made long walks half the time of a replay.
    """
    counts = np.zeros(rate.shape, dtype=rate.dtype)
    flat_rate = rate.ravel()
    flat_uniform = uniform.ravel()
    # Which draws see an interruption at all is decided in float64 (u >= e^-rate), but only
    # for the few that float32 cannot rule out: its e^-rate is within a few units in the last
    # place, far inside the 1e-5 margin, so the answer is the float64 one for every draw.
    maybe = np.flatnonzero(
        flat_uniform >= np.exp(-flat_rate.astype(np.float32)) * np.float32(1 - 1e-5)
    )
    r = flat_rate[maybe].astype(np.float64)
    u = flat_uniform[maybe].astype(np.float64)
    log_p = -r
    keep = u >= np.exp(log_p)
    todo, r, u, log_p = maybe[keep], r[keep], u[keep], log_p[keep]
    if todo.size == 0:
        return counts
    log_r = np.log(np.maximum(r, 1e-300))
    cdf = np.exp(log_p)
    limit = r + 40 * np.sqrt(r) + 40
    flat_counts = counts.reshape(-1)
    k = 0
    while todo.size and k < POISSON_STEPS:
        k += 1
        flat_counts[todo] = k
        log_p = log_p + log_r - np.log(k)
        cdf = cdf + np.exp(log_p)
        keep = (cdf < u) & (k < limit)
        todo, r, u, log_r, cdf, limit = (
            todo[keep],
            r[keep],
            u[keep],
            log_r[keep],
            cdf[keep],
            limit[keep],
        )
        log_p = log_p[keep]
    start, blocks = k + 1, 0
    while todo.size:
        block = POISSON_BLOCKS[min(blocks, len(POISSON_BLOCKS) - 1)]
        blocks += 1
        ks = np.arange(start, start + block, dtype=np.float64)
        closed = ks * log_r[:, None] - r[:, None] - _log_factorials(start, block)
        # Summed in the walk's order, the CDF so far first: near 1 another order could
        # leave it a rounding below the draw all the way to the tail limit.
        steps = np.cumsum(np.concatenate([cdf[:, None], np.exp(closed)], axis=1), axis=1)[:, 1:]
        # The first step whose CDF reaches the draw, or the tail limit.
        reached = ~((steps < u[:, None]) & (ks < limit[:, None]))
        done = reached.any(axis=1)
        flat_counts[todo[done]] = ks[np.argmax(reached[done], axis=1)]
        more = ~done
        todo, r, u, log_r, limit = todo[more], r[more], u[more], log_r[more], limit[more]
        cdf = steps[more, -1]
        start += block
    return counts


def drain_times(
    held_until: FloatArray,
    held_gpus: FloatArray,
    queued_work: FloatArray,
    capacity: FloatArray,
    *,
    columns: int,
) -> FloatArray:
    """When each amount of queued work has passed through what running work leaves free.

    Running workloads hold their GPUs until they finish and do not queue behind each other:
    a month-long 1-GPU job slows the queue by one GPU for a month, it does not stand ahead of
    it with a month of GPU-hours (which had made the model sure of misses the replay met). So
    queued work drains through the capacity the running ones leave, `max(capacity - held, 0)`,
    which rises as each of them finishes, and all of it once they have.

    `held_until` and `held_gpus` (..., n): each running workload's finish (seconds from now)
    and GPUs, zero for a column that is not running; running columns come first, `columns`
    of them at most. `queued_work` (..., n): cumulative GPU-seconds queued, nondecreasing.
    `capacity` (...,) without the last axis. Returns (..., n) seconds from now; work that no
    capacity ever drains is put at the horizon.
    """
    cap = capacity[..., None]
    if columns == 0:
        out0: FloatArray = np.where(
            cap > 0,
            np.minimum(queued_work / np.where(cap > 0, cap, 1), HORIZON_SECONDS),
            HORIZON_SECONDS,
        )
        return np.where(queued_work > 0, out0, 0).astype(queued_work.dtype)
    order = np.argsort(held_until[..., :columns], axis=-1)
    ends = np.take_along_axis(held_until[..., :columns], order, axis=-1)
    gpus = np.broadcast_to(held_gpus[..., :columns], ends.shape)
    freed = np.cumsum(np.take_along_axis(gpus, order, axis=-1), axis=-1)
    held = freed[..., -1:]
    # Segment m runs from starts[m] to ends[m] (the last one forever) with free[m] GPUs free.
    starts = np.concatenate([np.zeros_like(ends[..., :1]), ends], axis=-1)
    free = np.maximum(cap - np.concatenate([held, held - freed], axis=-1), 0.0)
    lengths = np.diff(starts, axis=-1)
    drained_by = np.concatenate(
        [np.zeros_like(ends[..., :1]), np.cumsum(free[..., :-1] * lengths, axis=-1)], axis=-1
    )
    # The segment the work ends in is the last whose start has drained no more than it (a
    # segment with nothing free drains nothing, so the next one, same start, is later still).
    dtype = queued_work.dtype
    rate = np.broadcast_to(free[..., :1].astype(dtype), queued_work.shape)
    begin = np.zeros((), dtype=dtype)
    before = np.zeros((), dtype=dtype)
    for m in range(1, columns + 1):
        reached = drained_by[..., m : m + 1].astype(dtype) <= queued_work
        rate = np.where(reached, free[..., m : m + 1].astype(dtype), rate)
        begin = np.where(reached, starts[..., m : m + 1].astype(dtype), begin)
        before = np.where(reached, drained_by[..., m : m + 1].astype(dtype), before)
    at = begin + (queued_work - before) / np.where(rate > 0, rate, 1)
    out = np.where(rate > 0, np.minimum(at, HORIZON_SECONDS), HORIZON_SECONDS)
    return np.where(queued_work > 0, out, 0).astype(dtype)


@dataclass(frozen=True)
class _Batch:
    """Problems packed into (problem, job) arrays; padding rows have valid=False."""

    gpus: FloatArray
    mean: FloatArray
    sigma: FloatArray
    running: npt.NDArray[np.bool_]
    checkpoint: FloatArray
    counts: npt.NDArray[np.bool_]
    valid: npt.NDArray[np.bool_]


def _pack(problems: Sequence[Problem], width: int) -> _Batch:
    """Problems padded to `width` jobs: padding (and a problem with no jobs) is valid=False."""
    # The decision search asks about the same jobs at several capacities: each distinct
    # tuple of jobs is read once, and its rows repeated by index.
    index: dict[int, int] = {}
    distinct: list[tuple[Job, ...]] = []
    for problem in problems:
        if id(problem.jobs) not in index:
            index[id(problem.jobs)] = len(distinct)
            distinct.append(tuple(problem.jobs))
    padding = (0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    rows = np.array([index[id(p.jobs)] for p in problems])
    fields = np.array(
        [
            [
                (
                    job.gpus,
                    max(job.mean_seconds, 1.0),
                    max(job.sigma, 0.0),
                    job.running,
                    max(job.checkpoint_seconds, 0.0),
                    job.counts,
                    1.0,
                )
                for job in jobs
            ]
            + [padding] * (width - len(jobs))
            for jobs in distinct
        ],
        dtype=np.float64,
    )[rows]
    return _Batch(
        gpus=fields[:, :, 0],
        mean=fields[:, :, 1],
        sigma=fields[:, :, 2],
        running=fields[:, :, 3] != 0,
        checkpoint=fields[:, :, 4],
        counts=fields[:, :, 5] != 0,
        valid=fields[:, :, 6] != 0,
    )


def _delivered_spot(
    rng: np.random.Generator, availability: FloatArray, concentration: FloatArray, samples: int
) -> FloatArray:
    """The fraction of spot quota the market delivers, per problem and sample."""
    batch = len(availability)
    alpha = np.clip(availability * concentration, 1e-6, None)[:, None]
    beta = np.clip((1.0 - availability) * concentration, 1e-6, None)[:, None]
    delivered = rng.beta(
        np.broadcast_to(alpha, (batch, samples)), np.broadcast_to(beta, (batch, samples))
    )
    delivered = np.where((availability >= 1.0)[:, None], 1.0, delivered)
    return np.where((availability <= 0.0)[:, None], 0.0, delivered)


@lru_cache(maxsize=1024)
def _job_draws(seed: int, samples: int, width: int) -> tuple[FloatArray, FloatArray]:
    """Runtime and interruption draws; alike for every problem of the same width, so cached."""
    rng = np.random.default_rng(seed)
    normal = rng.standard_normal((samples, width), dtype=np.float32)
    uniform = rng.random((samples, width), dtype=np.float32)
    normal.flags.writeable = False
    uniform.flags.writeable = False
    return normal, uniform


@lru_cache(maxsize=4096)
def _spot_draws(seed: int, samples: int, availability: float, concentration: float) -> FloatArray:
    """The delivered share of spot per sample, from its own stream so any width shares it."""
    rng = np.random.default_rng([seed, 1])
    spot: FloatArray = _delivered_spot(
        rng, np.array([availability]), np.array([concentration]), samples
    )[0]
    spot.flags.writeable = False
    return spot


def _deadline_finish(
    jobs: _Batch,
    effective: FloatArray,
    capacity: FloatArray,
    latency: FloatArray,
    stuck: npt.NDArray[np.bool_],
) -> FloatArray:
    """When the last workload counting toward each deadline is done, per problem and sample
    (seconds from now: float32 cannot hold epoch seconds to the second; 0 with none left)."""
    width = jobs.valid.shape[1]
    running = jobs.running & jobs.valid
    queued = ~jobs.running & jobs.valid & ~stuck
    counted = jobs.counts & jobs.valid
    # Each counted workload is done no earlier than its own runtime after its start (now when
    # it runs, the provisioning latency when it waits) ...
    start = np.where(jobs.running, 0.0, latency[:, None]).astype(np.float32)
    own = np.where(stuck, HORIZON_SECONDS, start)[:, None, :] + effective
    finish = np.max(np.where(counted[:, None, :], own, -np.inf), axis=2)
    # ... and the waiting ones no earlier than the queued work up to the last of them has
    # drained (drain times rise with the work, so the last one's is the latest).
    last = np.where(queued & counted, np.arange(width), -1).max(axis=1)
    ahead = queued & (np.arange(width) <= last[:, None])
    work = np.sum(np.where(ahead[:, None, :], jobs.gpus[:, None, :] * effective, 0.0), axis=2)
    drained = drain_times(
        np.where(running[:, None, :], effective, 0.0),
        np.where(running, jobs.gpus, 0.0)[:, None, :],
        work[:, :, None],
        capacity,
        columns=int(running.sum(axis=1).max(initial=0)),
    )[:, :, 0]
    finish = np.where((last >= 0)[:, None], np.maximum(finish, drained), finish)
    finish = np.minimum(finish, HORIZON_SECONDS)
    out: FloatArray = np.where(np.isneginf(finish), 0.0, finish)
    return out


def estimate_many(
    problems: Sequence[Problem], *, now: float, samples: int = 500, seed: int = 0
) -> list[Estimate]:
    """Estimates for many deadlines at once, with common random numbers per seed.

    Problems are sampled in groups of similar job count (up to twice the fewest, padded to
    the widest of the group): a group of one width shares one set of job draws instead of a
    copy per problem, and a replay's many small batches are not split into one per width.
    A problem's estimate does not depend on the others in its batch or on the padding (each
    takes the draws of its own job count), so the grouping changes no answer.
    """
    groups: dict[int, list[int]] = {}
    for i, problem in enumerate(problems):
        groups.setdefault(len(problem.jobs).bit_length(), []).append(i)
    out: list[Estimate | None] = [None] * len(problems)
    for members in groups.values():
        found = _estimate_batch([problems[i] for i in members], now=now, samples=samples, seed=seed)
        for i, estimate in zip(members, found, strict=True):
            out[i] = estimate
    return [e for e in out if e is not None]


def _estimate_batch(
    problems: Sequence[Problem], *, now: float, samples: int, seed: int
) -> list[Estimate]:
    """`estimate_many` for one group, padded to its widest problem."""
    counts = [len(p.jobs) for p in problems]
    width = max(1, *counts)
    jobs = _pack(problems, width)
    batch = len(problems)

    def per_problem(attr: str) -> FloatArray:
        return np.array([float(getattr(p.capacity, attr)) for p in problems])

    on_demand = per_problem("on_demand_gpus").astype(np.float32)
    spot = per_problem("spot_gpus")
    rate = per_problem("interruptions_per_node_hour") / SECONDS_PER_HOUR
    per_node = np.maximum(per_problem("gpus_per_node"), 1.0)
    latency = per_problem("provisioning_latency_seconds")
    deadline = np.array([p.deadline for p in problems])

    # Each problem draws from its own generator seeded alike, so its samples do not depend on
    # which other problems share the batch: the risk reported for a deadline and the risk the
    # decision search sees for it alone come from the same samples.
    z: FloatArray
    v: FloatArray
    if all(n == width for n in counts):
        normal, uniform = _job_draws(seed, samples, width)
        z = normal[None, :, :]
        v = np.broadcast_to(uniform, (batch, samples, width))
    else:
        z = np.zeros((batch, samples, width), dtype=np.float32)
        v = np.zeros((batch, samples, width), dtype=np.float32)
        for b, n in enumerate(counts):
            z[b, :, :n], v[b, :, :n] = _job_draws(seed, samples, n)
    delivered = np.zeros((batch, samples))
    availability = np.clip(per_problem("spot_availability"), 0.0, 1.0)
    concentration = np.maximum(per_problem("spot_availability_concentration"), 1e-6)
    for b in range(batch):
        delivered[b] = _spot_draws(seed, samples, float(availability[b]), float(concentration[b]))

    mu = (np.log(jobs.mean) - jobs.sigma**2 / 2).astype(np.float32)
    duration = np.exp(mu[:, None, :] + jobs.sigma.astype(np.float32)[:, None, :] * z)
    spot_capacity = (delivered * spot[:, None]).astype(np.float32)
    capacity = on_demand[:, None] + spot_capacity  # (problem, sample)
    spot_share = np.divide(spot_capacity, capacity, out=np.zeros_like(capacity), where=capacity > 0)
    nodes = np.ceil(jobs.gpus / per_node[:, None])
    interruption_rate = (rate[:, None] * nodes).astype(np.float32)[:, None, :] * spot_share[
        :, :, None
    ]
    interruptions = _poisson_inverse(interruption_rate * duration, v)
    loss = (jobs.checkpoint / 2 + latency[:, None]).astype(np.float32)
    effective = duration + interruptions * loss[:, None, :]
    # A pending workload wider than any flavor it can use never starts, and (BestEffortFIFO)
    # holds up nothing behind it; a running one has its nodes. One that fits a flavor but not
    # the fluid capacity just drains slowly.
    widest = per_problem("widest_gpus")
    stuck = (~jobs.running) & (jobs.gpus > widest[:, None]) & jobs.valid
    deadline_finish = _deadline_finish(jobs, effective, capacity, latency, stuck)
    counted = (jobs.counts & jobs.valid)[:, None, :]
    # Nothing left to finish is never late, even once the cutoff has passed.
    late = (deadline_finish > (deadline - now)[:, None]) & counted.any(axis=2)
    risk = late.mean(axis=1)
    # Order statistics (no interpolation), both in one call.
    p50, p90 = np.quantile(deadline_finish, [0.5, 0.9], axis=1, method="inverted_cdf").astype(
        np.float64
    )
    never: npt.NDArray[np.bool_] = np.asarray((stuck & jobs.counts).any(axis=1))
    return [
        Estimate(
            risk=float(risk[b]),
            p50_finish=now + float(p50[b]),
            p90_finish=now + float(p90[b]),
            slack_seconds=float(deadline[b] - now - p50[b]),
            startable=not bool(never[b]),
        )
        for b in range(batch)
    ]


def estimate(problem: Problem, *, now: float, samples: int = 500, seed: int = 0) -> Estimate:
    return estimate_many([problem], now=now, samples=samples, seed=seed)[0]
