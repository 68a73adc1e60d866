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

Everything is batched: many deadlines and samples are evaluated in one pass of array arithmetic,
in two stages: a deadline its first samples agree on is answered from them (`SCREEN_SAMPLES`).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.floating[Any]]
SECONDS_PER_HOUR = 3600.0
HORIZON_SECONDS = 10 * 365 * 86400.0
"""Where a finish that never comes is put, so risk, slack and finish times stay finite."""


class Job(NamedTuple):
    """One unfinished workload as the model sees it. (A named tuple: a pass builds one per
    workload, and the estimate packs them into arrays as they are.)"""

    gpus: int
    mean_seconds: float
    """Expected remaining runtime."""
    sigma: float = 0.3
    """Log-normal shape: 0 makes the runtime exact."""
    running: bool = False
    checkpoint_seconds: float = 3600.0
    counts: bool = True
    """Whether it must finish for the deadline (others only take capacity ahead of it)."""


class Capacity(NamedTuple):
    """What one project can count on. (A named tuple: a pass at 1,000 projects makes and
    hashes some thousands, each a key of the estimates it has.)"""

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


class Problem(NamedTuple):
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
BANDED_COUNTS = 2
"""Counts up to this many are answered from each draw's bands (`interruption_band`): most draws
that see an interruption see one or two, and walking them was most of the counting's time."""
BAND_MARGINS = (3e-5, 1e-5)
"""How far inside a count's exact bounds its band is kept: relative, above the low bound and
below the high one (see `interruption_band`)."""
SORT_NETWORK_ROWS = 4
"""Running workloads up to this many are drained row by row, ordered by compare-exchange;
more, in arrays over all of them at once, ordered by `argsort`."""


@lru_cache(maxsize=64)
def _log_factorials(start: int, count: int) -> FloatArray:
    """log(k!) for k in [start, start + count)."""
    out: FloatArray = np.array([math.lgamma(k + 1) for k in range(start, start + count)])
    out.flags.writeable = False
    return out


def interruption_floor(uniform: FloatArray) -> FloatArray:
    """Per draw, a float32 rate below which it sees no interruption (`_interruptions`).

    A draw u sees one when u >= e^-rate, that is rate >= -log u. The bound is -log u less a
    relative 1e-5, far more than float32's rounding, so every draw it lets through is decided
    in float64, and a draw it stops is one float64 would stop too. At u = 0 the only rates
    that count are those whose e^-rate underflows float64 (past 745).
    """
    u = uniform.astype(np.float64)
    bound = -np.log(np.where(u > 0, u, 1.0)) * (1 - 1e-5)
    out: FloatArray = np.where(u > 0, bound, 745.0).astype(np.float32)
    return out


def _count_bound(x: FloatArray, count: int) -> FloatArray:
    """Per x > 0, the rate at which a draw u = e^-x starts to see more than `count`
    interruptions: r with P(N <= count) = u for N ~ Poisson(r), that is f(r) = r - log(sum of
    r^i / i! for i <= count) = x (float64).

    By Newton's method: f rises, and is convex (its slope, P(N = count) / P(N <= count),
    rises with r), so from any start every step after the first lands at or right of the
    root and the steps shrink to it. The start is where f's leading term near 0,
    r^(count + 1) / (count + 1)!, or f's bound r, reaches x: five or six steps from the root
    to a relative 1e-10, where f's rounding near 0 stops them (the bands' margins are 1e-5)."""
    r: FloatArray = np.maximum((math.factorial(count + 1) * x) ** (1 / (count + 1)), x)
    for _ in range(50):
        term = np.ones_like(r)
        tail = np.zeros_like(r)  # sum of r^i / i! for 1 <= i <= count
        for i in range(1, count + 1):
            term = term * r / i
            tail += term
        step = (r - np.log1p(tail) - x) * (1 + tail) / term
        r = r - step
        if np.all(np.abs(step) <= 1e-10 * r):
            break
    return r


def interruption_band(uniform: FloatArray) -> FloatArray:
    """Per draw, for each count k up to `BANDED_COUNTS`, float32 rates [low, high) at which it
    sees exactly k interruptions for certain, on a last axis of 2 x `BANDED_COUNTS`: what
    `_interruptions` answers without a walk.

    A draw u (x = -log u) sees at least one when e^-rate <= u, rate >= x, and more than k when
    P(N <= k) < u (`_count_bound`). Each band keeps a relative 3e-5 above its low bound and
    1e-5 below its high one (`BAND_MARGINS`): float32's rounding of a bound is 6e-8, and the
    float64 steps the walk takes err by 1e-13 at most at the rates a draw can meet before
    e^-rate underflows, so a rate in a band is one the walk counts the same. A draw at u = 0
    (or 1, which float32 draws never are) has no bands.
    """
    u = uniform.astype(np.float64)
    positive = (u > 0) & (u < 1)
    x = -np.log(np.where(positive, u, 0.5))
    above, below = BAND_MARGINS
    bounds = [x] + [_count_bound(x, k) for k in range(1, BANDED_COUNTS + 1)]
    bands = []
    for k in range(BANDED_COUNTS):
        bands.append(np.where(positive, bounds[k] * (1 + above), np.inf))
        bands.append(np.where(positive, bounds[k + 1] * (1 - below), 0.0))
    out: FloatArray = np.stack(bands, axis=-1).astype(np.float32)
    return out


def _draw_positions(
    draws: tuple[int, ...], shape: tuple[int, ...], flat: npt.NDArray[np.intp]
) -> npt.NDArray[np.intp]:
    """Where each of `flat` (indices into an array of `shape`) reads its draw in draws of
    shape `draws` broadcast to it, as an index into the draws flattened: without making the
    broadcast copy (draws of the same shape, or repeated along a leading axis, as the job
    draws are, are a single operation)."""
    if draws == shape:
        return flat
    size = math.prod(draws)
    if draws == (1, *shape[1:]):
        out: npt.NDArray[np.intp] = flat % size
        return out
    at = np.unravel_index(flat, shape)
    offset = len(shape) - len(draws)
    return np.ravel_multi_index(
        tuple(np.zeros_like(flat) if n == 1 else at[offset + i] for i, n in enumerate(draws)),
        draws,
    )


def _interruptions(
    rate: FloatArray,
    uniform: FloatArray,
    floor: FloatArray | None = None,
    band: FloatArray | None = None,
) -> tuple[npt.NDArray[np.intp], FloatArray]:
    """Poisson counts by inverse transform, so a larger rate never gives a smaller count: the
    flat indices into `rate` of the draws that may see an interruption, and their counts (a
    few of them 0). Every other draw sees none.

    `uniform`, and `floor` and `band` (its `interruption_floor` and `interruption_band`, which
    the caller may keep with the draws) broadcast to `rate`'s shape. The floor rules out most
    draws in one float32 comparison; of the rest, a draw in one of its bands sees that band's
    count; only the others are decided and walked up the CDF in float64 (`_walk`). Answered
    sparse, so that a pass adds the interruptions' cost to a runtime where there are any, not
    over every draw.
    """
    if floor is None:
        floor = interruption_floor(uniform)
    if band is None:
        band = interruption_band(uniform)
    todo = np.flatnonzero(rate >= floor)
    counts: FloatArray
    if todo.size == 0:
        return todo, np.zeros(0, dtype=rate.dtype)
    r = rate.reshape(-1)[todo]
    at = _draw_positions(uniform.shape, rate.shape, todo)
    bounds = np.take(band.reshape(-1, 2 * BANDED_COUNTS), at, axis=0)
    counts = np.zeros(todo.size, dtype=rate.dtype)
    for k in range(BANDED_COUNTS):
        inside = (r >= bounds[:, 2 * k]) & (r < bounds[:, 2 * k + 1])
        counts += inside if k == 0 else inside * np.float32(k + 1)
    walk = np.flatnonzero(counts == 0)
    if walk.size:
        counts[walk] = _walk(
            r[walk].astype(np.float64), uniform.reshape(-1)[at[walk]].astype(np.float64)
        )
    return todo, counts


def _walk(r: FloatArray, u: FloatArray) -> FloatArray:
    """Each draw's count, in float64 and in log space (e^-rate underflows for large rates),
    up the CDF from 0; the walk always ends: it stops far in the tail even if rounding keeps
    the CDF below the draw. The first `POISSON_STEPS` steps go one at a time over the draws
    still walking; the rest in blocks of `POISSON_BLOCKS`, each step's probability from its
    closed form (k log r - r - log k!): one array operation per step had made long walks half
    the time of a replay."""
    # Nearly all of the draws see an interruption: counting them 1 from the start leaves only
    # the few that do not, and those that see more, to write.
    counts = np.ones(r.size)
    log_p = -r
    cdf = np.exp(log_p)
    interrupted = u >= cdf
    counts[~interrupted] = 0
    log_r = np.log(np.maximum(r, 1e-300))
    # The first steps, one at a time (the CDF only rises, so counting the steps still below
    # the draw is where each walk stops). After the first step only the walks past one
    # interruption go on (each at two so far), and none is dropped between the steps after
    # it. The tail limit, r + 40 sqrt(r) + 40, lies past all of them.
    log_p = log_p + log_r
    cdf += np.exp(log_p)
    on = np.flatnonzero(interrupted & (cdf < u))
    r, u, log_r, log_p, cdf = r[on], u[on], log_r[on], log_p[on], cdf[on]
    count = np.full(on.size, 2.0)
    for k in range(2, POISSON_STEPS + 1):
        log_p += log_r
        log_p -= np.log(k)
        cdf += np.exp(log_p)
        if k < POISSON_STEPS:
            count += cdf < u
    counts[on] = count
    going = cdf < u
    _walk_blocks(
        counts,
        on[going],
        r=r[going],
        u=u[going],
        log_r=log_r[going],
        cdf=cdf[going],
    )
    return counts


def _walk_blocks(
    flat_counts: FloatArray,
    todo: npt.NDArray[np.intp],
    *,
    r: FloatArray,
    u: FloatArray,
    log_r: FloatArray,
    cdf: FloatArray,
) -> None:
    """The walks `_walk` leaves after its first steps, `POISSON_BLOCKS` steps at a
    time: each draw's count written to `flat_counts` at its index in `todo` (rates `r`, their
    logs, the draws `u` and the CDF so far, in float64)."""
    # The tail limit as the first step at or past it (steps are whole numbers).
    stop = np.ceil(r + 40 * np.sqrt(r) + 40)
    start, blocks = POISSON_STEPS + 1, 0
    while todo.size:
        block = POISSON_BLOCKS[min(blocks, len(POISSON_BLOCKS) - 1)]
        blocks += 1
        ks = np.arange(start, start + block, dtype=np.float64)
        # The CDF so far, then each step's probability, summed in the walk's order in place:
        # near 1 another order could leave it a rounding below the draw all the way to the
        # tail limit.
        steps = np.empty((todo.size, block + 1))
        steps[:, 0] = cdf
        walk = steps[:, 1:]
        np.multiply(log_r[:, None], ks, out=walk)
        walk -= r[:, None]
        walk -= _log_factorials(start, block)
        np.exp(walk, out=walk)
        np.cumsum(steps, axis=1, out=steps)
        # The first step whose CDF reaches the draw, or the tail limit.
        hit = walk >= u[:, None]
        first = np.argmax(hit, axis=1)
        first = np.where(hit[np.arange(todo.size), first], first, block)
        first = np.minimum(first, np.maximum(stop - start, 0))
        done = first < block
        flat_counts[todo[done]] = start + first[done]
        more = ~done
        todo, r, u, log_r, stop = todo[more], r[more], u[more], log_r[more], stop[more]
        cdf = walk[more, -1]
        start += block


def _sorted_rows(ends: FloatArray, gpus: FloatArray) -> tuple[list[FloatArray], list[FloatArray]]:
    """The rows of `ends` (along axis -2) in ascending order, elementwise, by compare-exchange,
    and `gpus` carried with them: for a few rows, fewer operations than a sort that costs a
    call per row of samples."""
    rows = ends.shape[-2]
    e = [ends[..., i, :] for i in range(rows)]
    g = [gpus[..., i, :] for i in range(rows)]
    for top in range(rows - 1, 0, -1):
        for i in range(top):
            swap = e[i + 1] < e[i]
            e[i], e[i + 1] = np.minimum(e[i], e[i + 1]), np.maximum(e[i], e[i + 1])
            g[i], g[i + 1] = np.where(swap, g[i + 1], g[i]), np.where(swap, g[i], g[i + 1])
    return e, g


def _drain_segment_rows(
    ends_array: FloatArray, gpus_array: FloatArray, queued_work: FloatArray, cap: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """`_drain_segment_array` one row at a time: for a few running workloads, over many
    samples, fewer and cheaper operations."""
    zero = np.zeros((), dtype=queued_work.dtype)
    ends, gpus = _sorted_rows(ends_array, gpus_array)
    # Segment m runs from ends[m - 1] (0 for the first) to ends[m] (the last one forever)
    # with free[m] GPUs free; drained[m] is what has drained by its start.
    freed = list(itertools.accumulate(gpus))
    held = freed[-1]
    free = [np.maximum(cap - held, 0.0)] + [np.maximum(cap - (held - f), 0.0) for f in freed]
    starts = [zero, *ends]
    drained = [zero]
    for m in range(1, len(ends) + 1):
        drained.append(drained[-1] + free[m - 1] * (starts[m] - starts[m - 1]))
    # The segment the work ends in is the last whose start has drained no more than it (a
    # segment with nothing free drains nothing, so the next one, same start, is later).
    rate, begin, before = free[0], zero, zero
    for m in range(1, len(ends) + 1):
        reached = drained[m] <= queued_work
        rate = np.where(reached, free[m], rate)
        begin = np.where(reached, starts[m], begin)
        before = np.where(reached, drained[m], before)
    return rate, begin, before


def _drain_segment_array(
    ends_array: FloatArray, gpus_array: FloatArray, queued_work: FloatArray, cap: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The segment of the running work's finishes in which the queued work has drained: its
    free GPUs, its start, and what had drained by then (rows along axis -2)."""
    order = np.argsort(ends_array, axis=-2)
    ends = np.take_along_axis(ends_array, order, axis=-2)
    freed = np.cumsum(np.take_along_axis(gpus_array, order, axis=-2), axis=-2)
    held = freed[..., -1:, :]
    zero = np.zeros_like(ends[..., :1, :])
    # Segment m runs from starts[m] to starts[m + 1] (the last one forever) with free[m] GPUs
    # free; drained[m] is what has drained by its start, which never falls as m rises.
    free = np.maximum(cap[..., None, :] - np.concatenate([held, held - freed], axis=-2), 0.0)
    starts = np.concatenate([zero, ends], axis=-2)
    drained = np.concatenate(
        [zero, np.cumsum(free[..., :-1, :] * np.diff(starts, axis=-2), axis=-2)], axis=-2
    )
    # The last segment whose start has drained no more than the work (a segment with nothing
    # free drains nothing, so the next one, same start, is later still).
    last = (drained <= queued_work[..., None, :]).sum(axis=-2, keepdims=True) - 1
    return (
        np.take_along_axis(free, last, axis=-2)[..., 0, :],
        np.take_along_axis(starts, last, axis=-2)[..., 0, :],
        np.take_along_axis(drained, last, axis=-2)[..., 0, :],
    )


def drain_times(
    held_until: FloatArray,
    held_gpus: FloatArray,
    queued_work: FloatArray,
    capacity: FloatArray,
    *,
    columns: int,
) -> FloatArray:
    """When queued work has passed through what running work leaves free.

    Running workloads hold their GPUs until they finish and do not queue behind each other:
    a month-long 1-GPU job slows the queue by one GPU for a month, it does not stand ahead of
    it with a month of GPU-hours (which had made the model sure of misses the replay met). So
    queued work drains through the capacity the running ones leave, `max(capacity - held, 0)`,
    which rises as each of them finishes, and all of it once they have.

    Rows are workloads, the last axis samples (so each step is one operation over contiguous
    samples). `held_until` (..., n, s) and `held_gpus` (broadcast to it): each running
    workload's finish (seconds from now) and GPUs, zero in a row that is not running; running
    rows come first, `columns` of them at most (later rows are not read). `queued_work` and
    `capacity` (..., s): GPU-seconds queued, and the capacity, per sample. Returns (..., s)
    seconds from now; work that no capacity ever drains is put at the horizon.
    """
    dtype = queued_work.dtype
    cap = capacity.astype(dtype)
    zero = np.zeros((), dtype=dtype)
    if columns == 0:
        rate, begin, before = cap, zero, zero
    else:
        ends_array = held_until[..., :columns, :].astype(dtype)
        gpus_array = np.broadcast_to(held_gpus[..., :columns, :].astype(dtype), ends_array.shape)
        if columns <= SORT_NETWORK_ROWS:
            rate, begin, before = _drain_segment_rows(ends_array, gpus_array, queued_work, cap)
        else:
            rate, begin, before = _drain_segment_array(ends_array, gpus_array, queued_work, cap)
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

    def take(self, rows: npt.NDArray[np.intp] | slice) -> _Batch:
        """Some problems' rows of every field."""
        return _Batch(*(getattr(self, f.name)[rows] for f in fields(self)))


_PADDING = Job(
    gpus=0, mean_seconds=1.0, sigma=0.0, running=False, checkpoint_seconds=0.0, counts=False
)


def job_fields(queues: Sequence[Iterable[Job]], width: int) -> FloatArray:
    """Queues of `width` jobs each as (queue, job, field) in `Job`'s field order: one flat
    conversion, not one per field or per nested sequence."""
    size = len(Job._fields)
    flat = itertools.chain.from_iterable(itertools.chain.from_iterable(queues))
    out: FloatArray = np.fromiter(flat, dtype=np.float64, count=len(queues) * width * size)
    return out.reshape(len(queues), width, size)


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
    rows = np.array([index[id(p.jobs)] for p in problems])
    # Job's fields in order: gpus, mean_seconds, sigma, running, checkpoint_seconds, counts.
    fields = job_fields(
        [itertools.chain(jobs, itertools.repeat(_PADDING, width - len(jobs))) for jobs in distinct],
        width,
    )[rows]
    lengths = np.array([len(jobs) for jobs in distinct])[rows]
    return _Batch(
        gpus=fields[:, :, 0],
        mean=np.maximum(fields[:, :, 1], 1.0),
        sigma=np.maximum(fields[:, :, 2], 0.0),
        running=fields[:, :, 3] != 0,
        checkpoint=np.maximum(fields[:, :, 4], 0.0),
        counts=fields[:, :, 5] != 0,
        valid=np.arange(width) < lengths[:, None],
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


def draw_rows(width: int) -> int:
    """How many jobs' rows of draws to make for a problem of `width` jobs: a power of two, at
    least 64, so the arrays held stay within twice the widest problem seen."""
    return max(64, 1 << max(width - 1, 0).bit_length())


def _job_draws(
    seed: int, samples: int, width: int
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Runtime and interruption draws, and the interruption draws' `interruption_floor` and
    `interruption_band`, each (job, sample), alike for every problem of the same width.

    Drawn job by job, so a problem reads the first `width` rows of one array per seed and
    sample count. A cache per width held an array for every queue length a process ever met:
    up to 3 GB once queues of 1 to 1,000 jobs had been seen, growing with the cluster.
    """
    normal, uniform, floor, band = _job_rows(seed, samples, draw_rows(width))
    return normal[:width], uniform[:width], floor[:width], band[:width]


@lru_cache(maxsize=8)
def _job_rows(
    seed: int, samples: int, rows: int
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    normal = np.random.default_rng([seed, 2]).standard_normal((rows, samples), dtype=np.float32)
    uniform = np.random.default_rng([seed, 3]).random((rows, samples), dtype=np.float32)
    floor = interruption_floor(uniform)
    band = interruption_band(uniform)
    for array in (normal, uniform, floor, band):
        array.flags.writeable = False
    return normal, uniform, floor, band


@lru_cache(maxsize=1024)
def _spot_draws(seed: int, samples: int, availability: float, concentration: float) -> FloatArray:
    """The delivered share of spot per sample, from its own stream so any width shares it.
    (A project's availability is its pools' weighted by its spot GPUs, so it moves with the
    mix: at most 1,024 are kept, 4 MiB at 500 samples.)"""
    rng = np.random.default_rng([seed, 1])
    spot: FloatArray = _delivered_spot(
        rng, np.array([availability]), np.array([concentration]), samples
    )[0]
    spot.flags.writeable = False
    return spot


def _waiting_ahead(
    jobs: _Batch, stuck: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
    """Per problem, its last counted workload that waits (-1 for none), and the waiting
    workloads up to it: the queued work its deadline waits for."""
    width = jobs.valid.shape[1]
    queued = ~jobs.running & jobs.valid & ~stuck
    last = np.where(queued & jobs.counts, np.arange(width), -1).max(axis=1)
    ahead = queued & (np.arange(width) <= last[:, None])
    return last, ahead


def _deadline_finish(
    jobs: _Batch,
    effective: FloatArray,
    capacity: FloatArray,
    latency: FloatArray,
    stuck: npt.NDArray[np.bool_],
    *,
    waiting: tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]],
) -> FloatArray:
    """When the last workload counting toward each deadline is done, per problem and sample
    (seconds from now: float32 cannot hold epoch seconds to the second; 0 with none left).

    `effective` is (problem, job, sample): reductions over a problem's jobs are then one
    operation per job over contiguous samples, and the queued work one matrix product.
    `waiting` is `_waiting_ahead(jobs, stuck)`."""
    running = jobs.running & jobs.valid
    counted = jobs.counts & jobs.valid
    # Each counted workload is done no earlier than its own runtime after its start (now when
    # it runs, the provisioning latency when it waits) ...
    start = np.where(jobs.running, 0.0, latency[:, None])
    offset = np.where(counted, np.where(stuck, HORIZON_SECONDS, start), -np.inf).astype(np.float32)
    # Job by job into one (problem, sample) array: no (problem, job, sample) sum to reduce.
    finish = effective[:, 0, :] + offset[:, 0, None]
    done = np.empty_like(finish)
    for j in range(1, effective.shape[1]):
        np.add(effective[:, j, :], offset[:, j, None], out=done)
        np.maximum(finish, done, out=finish)
    # ... and the waiting ones no earlier than the queued work up to the last of them has
    # drained (drain times rise with the work, so the last one's is the latest).
    last, ahead = waiting
    drains = np.flatnonzero(last >= 0)
    if drains.size:
        # Only deadlines with counted work waiting need the drain (picked out only when some
        # are left out: picking copies).
        rows: npt.NDArray[np.intp] | slice = drains if drains.size < len(last) else slice(None)
        on = running[rows]
        work = np.matmul(
            np.where(ahead[rows], jobs.gpus[rows], 0.0).astype(np.float32)[:, None, :],
            effective[rows],
        )[:, 0, :]
        columns = int(on.sum(axis=1).max(initial=0))
        drained = drain_times(
            np.where(on[:, :columns, None], effective[rows, :columns, :], 0.0),
            np.where(on, jobs.gpus[rows], 0.0)[:, :columns, None],
            work,
            capacity[rows],
            columns=columns,
        )
        finish[rows] = np.maximum(finish[rows], drained)
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


SCREEN_SAMPLES = 100
"""A batch of more samples than this first samples this many for every problem; a problem
whose first samples all agree (every one on time, or every one late) is answered from them,
and only the others are sampled on. Most deadlines a pass estimates are safe by far (or lost
for certain), and sampling them 500 times said nothing 100 did not. The odds of a deadline
being read as safe from a sample of 100 that happens to have no late one are (1 - risk)^100:
0.6 % at a risk of 5 %, 0.003 % at 10 %. A problem that goes on gets the very estimate a
single stage gives: each sample is computed on its own, and the later ones are the same
draws."""


@dataclass(frozen=True)
class _Inputs:
    """One group's problems as arrays: the jobs (problem, job), the per-problem capacity and
    deadline (problem,), and the draws: job draws (problem or 1, job, sample) and the spot
    share delivered (problem, sample)."""

    jobs: _Batch
    on_demand: FloatArray
    spot: FloatArray
    rate: FloatArray
    per_node: FloatArray
    latency: FloatArray
    widest: FloatArray
    until: FloatArray
    """Seconds from now to each deadline."""
    z: FloatArray
    v: FloatArray
    f: FloatArray
    b: FloatArray
    """`interruption_band` of `v` (its bands on a last axis)."""
    delivered: FloatArray

    def part(self, rows: npt.NDArray[np.intp] | slice, columns: slice) -> _Inputs:
        """Some problems' inputs over some samples (the job draws shared by the whole group,
        leading axis 1, stay shared)."""
        draws = slice(None) if self.z.shape[0] == 1 else rows
        return _Inputs(
            jobs=self.jobs.take(rows),
            on_demand=self.on_demand[rows],
            spot=self.spot[rows],
            rate=self.rate[rows],
            per_node=self.per_node[rows],
            latency=self.latency[rows],
            widest=self.widest[rows],
            until=self.until[rows],
            z=self.z[draws, :, columns],
            v=self.v[draws, :, columns],
            f=self.f[draws, :, columns],
            b=self.b[draws, :, columns],
            delivered=self.delivered[rows, columns],
        )


def _finishes(given: _Inputs) -> FloatArray:
    """When each problem's deadline work is done, per problem and sample (seconds from now)."""
    jobs = given.jobs
    # (problem, job, sample) from here on, worked on in place: each new array of that size
    # costs fresh pages from the system, which had taken more time than the arithmetic.
    mu = (np.log(jobs.mean) - jobs.sigma**2 / 2).astype(np.float32)
    duration = jobs.sigma.astype(np.float32)[:, :, None] * given.z
    duration += mu[:, :, None]
    np.exp(duration, out=duration)
    spot_capacity = (given.delivered * given.spot[:, None]).astype(np.float32)
    capacity = given.on_demand[:, None] + spot_capacity  # (problem, sample)
    spot_share = np.divide(spot_capacity, capacity, out=np.zeros_like(capacity), where=capacity > 0)
    # A pending workload wider than any flavor it can use never starts, and (BestEffortFIFO)
    # holds up nothing behind it; a running one has its nodes. One that fits a flavor but not
    # the fluid capacity just drains slowly.
    stuck = _stuck(jobs, given.widest)
    # Interruptions are drawn only for the workloads a finish reads: running ones (they hold
    # GPUs), counted ones, and those queued ahead of the last counted one that waits. The
    # rest queue behind the deadline's work and never touch it.
    waiting = _waiting_ahead(jobs, stuck)
    read = jobs.valid & ~stuck & (jobs.running | jobs.counts | waiting[1])
    nodes = np.ceil(jobs.gpus / given.per_node[:, None]) * read
    expected = (given.rate[:, None] * nodes).astype(np.float32)[:, :, None] * spot_share[:, None, :]
    expected *= duration  # interruptions expected over each runtime
    hit, counts = _interruptions(expected, given.v, given.f, given.b)
    loss = (jobs.checkpoint / 2 + given.latency[:, None]).astype(np.float32)
    counts *= loss.reshape(-1)[hit // duration.shape[2]]
    # The runtime plus the work each interruption loses, added where there are any (in place:
    # the runtimes are this call's own).
    effective = duration
    flat = effective.view()
    flat.shape = (-1,)  # a view, or an error: never a copy the sum would be lost in
    flat[hit] += counts
    return _deadline_finish(jobs, effective, capacity, given.latency, stuck, waiting=waiting)


def _stuck(jobs: _Batch, widest: FloatArray) -> npt.NDArray[np.bool_]:
    out: npt.NDArray[np.bool_] = (~jobs.running) & (jobs.gpus > widest[:, None]) & jobs.valid
    return out


def _late(jobs: _Batch, until: FloatArray, finish: FloatArray) -> npt.NDArray[np.bool_]:
    # Nothing left to finish is never late, even once the cutoff has passed.
    anything_left = np.asarray((jobs.counts & jobs.valid).any(axis=1))
    out: npt.NDArray[np.bool_] = (finish > until[:, None]) & anything_left[:, None]
    return out


def _p50_p90(finish: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The median and 90th percentile of each row, as order statistics (numpy's
    `inverted_cdf`: the ceil(q n)-th smallest, in integers): one partition finds both, where
    `np.quantile` costs several times as much on a pass's many small batches."""
    n = finish.shape[1]
    median, tail = (n + 1) // 2 - 1, (9 * n + 9) // 10 - 1
    parted = np.partition(finish, [median, tail], axis=1)
    return parted[:, median].astype(np.float64), parted[:, tail].astype(np.float64)


def _estimate_batch(
    problems: Sequence[Problem], *, now: float, samples: int, seed: int
) -> list[Estimate]:
    """`estimate_many` for one group, padded to its widest problem, in two stages when it
    has more than `SCREEN_SAMPLES` samples."""
    given = _inputs(problems, now=now, samples=samples, seed=seed)
    batch = len(problems)
    risk = np.zeros(batch)
    p50 = np.zeros(batch)
    p90 = np.zeros(batch)
    screen = min(samples, SCREEN_SAMPLES)
    first = _finishes(given.part(slice(None), slice(0, screen)) if screen < samples else given)
    late = _late(given.jobs, given.until, first)
    settled = (
        ~late.any(axis=1) | late.all(axis=1) if screen < samples else np.ones(batch, dtype=bool)
    )
    done = np.flatnonzero(settled)
    if done.size:
        risk[done] = late[done].mean(axis=1)
        p50[done], p90[done] = _p50_p90(first[done])
    more = np.flatnonzero(~settled)
    if more.size:
        rest = given.part(more, slice(screen, samples))
        whole = np.concatenate([first[more], _finishes(rest)], axis=1)
        risk[more] = _late(rest.jobs, rest.until, whole).mean(axis=1)
        p50[more], p90[more] = _p50_p90(whole)
    never: npt.NDArray[np.bool_] = np.asarray(
        (_stuck(given.jobs, given.widest) & given.jobs.counts).any(axis=1)
    )
    return [
        Estimate(
            risk=float(risk[b]),
            p50_finish=now + float(p50[b]),
            p90_finish=now + float(p90[b]),
            slack_seconds=float(given.until[b] - p50[b]),
            startable=not bool(never[b]),
        )
        for b in range(batch)
    ]


_CAPACITY = operator.attrgetter(
    "on_demand_gpus",
    "spot_gpus",
    "spot_availability",
    "spot_availability_concentration",
    "interruptions_per_node_hour",
    "gpus_per_node",
    "provisioning_latency_seconds",
    "widest_gpus",
)
"""The `Capacity` fields a batch reads, in its table's column order."""


def _inputs(problems: Sequence[Problem], *, now: float, samples: int, seed: int) -> _Inputs:
    """The group's problems as arrays, with every draw its samples take."""
    counts = [len(p.jobs) for p in problems]
    width = max(1, *counts)
    batch = len(problems)
    # Problems of one project share its capacity: each distinct one is read once.
    index: dict[int, int] = {}
    distinct: list[tuple[float, ...]] = []
    for problem in problems:
        if id(problem.capacity) not in index:
            index[id(problem.capacity)] = len(distinct)
            distinct.append(_CAPACITY(problem.capacity))
    table = np.array(distinct, dtype=np.float64)[[index[id(p.capacity)] for p in problems]]
    (on_demand, spot, availability, concentration, rate, per_node, latency, widest) = table.T

    # Each problem draws from its own generator seeded alike, so its samples do not depend on
    # which other problems share the batch: the risk reported for a deadline and the risk the
    # decision search sees for it alone come from the same samples.
    z: FloatArray
    v: FloatArray
    f: FloatArray
    bands: FloatArray
    if all(n == width for n in counts):
        normal, uniform, floor, band = _job_draws(seed, samples, width)
        z, v, f, bands = normal[None], uniform[None], floor[None], band[None]
    else:
        z = np.zeros((batch, width, samples), dtype=np.float32)
        v = np.zeros((batch, width, samples), dtype=np.float32)
        f = np.full((batch, width, samples), np.inf, dtype=np.float32)
        bands = np.zeros((batch, width, samples, 2 * BANDED_COUNTS), dtype=np.float32)
        for b, n in enumerate(counts):
            z[b, :n], v[b, :n], f[b, :n], bands[b, :n] = _job_draws(seed, samples, n)
    markets: dict[tuple[float, float], int] = {}
    rows = [
        markets.setdefault((float(a), float(c)), len(markets))
        for a, c in zip(
            np.clip(availability, 0.0, 1.0), np.maximum(concentration, 1e-6), strict=True
        )
    ]
    delivered = np.stack([_spot_draws(seed, samples, a, c) for a, c in markets])[rows]
    return _Inputs(
        jobs=_pack(problems, width),
        on_demand=on_demand.astype(np.float32),
        spot=spot,
        rate=rate / SECONDS_PER_HOUR,
        per_node=np.maximum(per_node, 1.0),
        latency=latency,
        widest=widest,
        until=np.array([p.deadline for p in problems]) - now,
        z=z,
        v=v,
        f=f,
        b=bands,
        delivered=delivered,
    )


def estimate(problem: Problem, *, now: float, samples: int = 500, seed: int = 0) -> Estimate:
    return estimate_many([problem], now=now, samples=samples, seed=seed)[0]
