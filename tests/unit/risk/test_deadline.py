"""The deadline risk model against answers known without it.

Exact runtimes (sigma 0) on certain capacity (on-demand, or spot always delivered and never
interrupted) make the fluid queue a hand calculation, so risk is exactly 0 one second after the
computed finish and exactly 1 one second before it. Two cases have a closed form the Monte Carlo
estimate must match within 0.03: one log-normal job on ample on-demand capacity, and exact jobs
on spot capacity whose delivered fraction is Beta-distributed. The rest are properties of the
model: monotone sweeps over the same samples (common random numbers), reproducibility,
batching, precision at real epoch magnitudes, and termination.

Cases marked `KNOWN_BUG` assert the behaviour we want but do not have yet; they are strict
xfails, so fixing the bug makes them fail until the mark is removed.
"""

from __future__ import annotations

import itertools
import math
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from math import erf, exp, lgamma, log, sqrt
from types import FrameType

import numpy as np
import pytest

from controller.risk.deadline import (
    BANDED_COUNTS,
    HORIZON_SECONDS,
    SORT_NETWORK_ROWS,
    Capacity,
    Job,
    Problem,
    _interruptions,
    drain_times,
    estimate,
    estimate_many,
    interruption_band,
)


def _poisson_inverse(rate: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """`_interruptions` as an array of counts of `rate`'s shape."""
    counts = np.zeros(rate.shape, dtype=rate.dtype)
    todo, found = _interruptions(rate, uniform)
    counts.reshape(-1)[todo] = found
    return counts


FIXED_NOW = 1_800_000_000.0
"""Epoch seconds in January 2027: the magnitude the controller really works at."""
HOUR = 3600.0
INF = float("inf")


def KNOWN_BUG(  # noqa: N802 - reads as a marker
    reason: str, raises: type[BaseException] = AssertionError
) -> pytest.MarkDecorator:
    """A case asserting the right behaviour that the code does not have yet (see reason)."""
    return pytest.mark.xfail(reason=reason, strict=True, raises=raises)


def exact(gpus: int, hours: float, *, running: bool = False, counts: bool = True) -> Job:
    """A job whose runtime is exactly `hours`."""
    return Job(gpus=gpus, mean_seconds=hours * HOUR, sigma=0.0, running=running, counts=counts)


def on_demand(gpus: float, *, latency: float = 0.0) -> Capacity:
    """Only on-demand GPUs: no spot, so no availability draw and no interruptions."""
    return Capacity(on_demand_gpus=gpus, spot_gpus=0, provisioning_latency_seconds=latency)


def with_checkpoint(jobs: Sequence[Job], seconds: float) -> tuple[Job, ...]:
    return tuple(j._replace(checkpoint_seconds=seconds) for j in jobs)


MIXED = (
    Job(16, 6 * HOUR, sigma=0.4, running=True),
    Job(8, 4 * HOUR, sigma=0.3, running=True),
    Job(32, 8 * HOUR, sigma=0.5),
    Job(8, 3 * HOUR, sigma=0.3),
    Job(16, 5 * HOUR, sigma=0.4),
)
"""Two running and three pending jobs with uncertain runtimes: 80 GPUs, 488 GPU-hours."""


def normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + erf(x / sqrt(2.0)))


def beta_cdf(x: float, a: float, b: float) -> float:
    """P(X <= x) for X ~ Beta(a, b), a >= 1, by the trapezoid rule on 100,000 intervals."""
    grid = np.linspace(0.0, x, 100_001)
    density = grid ** (a - 1) * (1 - grid) ** (b - 1) / exp(lgamma(a) + lgamma(b) - lgamma(a + b))
    return float(np.trapezoid(density, grid))


# ----------------------------------------------------------------- exact runtimes, by hand

EXACT = [
    pytest.param(
        (exact(8, 2, running=True),),
        on_demand(8),
        2 * HOUR,
        id="one running job on exactly its 8 GPUs finishes after its 2 h runtime",
    ),
    pytest.param(
        (exact(2, 1, running=True),),
        on_demand(64),
        1 * HOUR,
        id="a 2-GPU job on 64 GPUs takes its own 1 h, not its 2 GPU-h over 64 GPUs",
    ),
    pytest.param(
        (exact(8, 1, running=True), exact(8, 1), exact(8, 1)),
        on_demand(8),
        3 * HOUR,
        id="three 8-GPU 1 h jobs on 8 GPUs run one after another: 3 h",
    ),
    pytest.param(
        (exact(4, 1, running=True), exact(4, 1, running=True), exact(8, 0.5)),
        on_demand(8),
        1.5 * HOUR,
        id="two 4-GPU 1 h jobs share 8 GPUs, then an 8-GPU 30 min job: 1.5 h",
    ),
    pytest.param(
        (exact(8, 1, running=True), exact(8, 1, running=True), exact(8, 1)),
        on_demand(16),
        1.5 * HOUR,
        id="24 GPU-h on 16 GPUs drain as a fluid: the last job is done at 1.5 h",
    ),
    pytest.param(
        (exact(8, 1),),
        on_demand(64, latency=600),
        HOUR + 600,
        id="a pending job starts after the 10 min provisioning latency: 1 h 10 min",
    ),
    pytest.param(
        (exact(8, 2, running=True, counts=False), exact(8, 1)),
        on_demand(8),
        3 * HOUR,
        id="a 2 h job that does not count still runs ahead of the 1 h job that does: 3 h",
    ),
    pytest.param(
        (exact(8, 1, running=True), exact(8, 5, counts=False)),
        on_demand(8),
        1 * HOUR,
        id="a 5 h job that does not count, queued behind the one that does, is ignored: 1 h",
    ),
    pytest.param(
        (exact(1, 720, running=True, counts=False), exact(1, 1)),
        on_demand(8),
        1 * HOUR,
        id="a month-long 1-GPU job beside a pending 1 h job on 8 GPUs holds one GPU: 1 h",
    ),
    pytest.param(
        (exact(1, 100, running=True, counts=False), exact(1, 1, running=True)),
        on_demand(2),
        1 * HOUR,
        id="a running 1 h job does not queue behind the 100 h job running beside it: 1 h",
    ),
    pytest.param(
        (
            exact(8, 2, running=True, counts=False),
            exact(8, 1, running=True, counts=False),
            exact(8, 1),
        ),
        on_demand(8),
        3 * HOUR,
        id="16 GPUs running on 8 (borrowed) leave none free until 2 h, then 8 GPU-h: 3 h",
    ),
    pytest.param(
        (exact(4, 2, running=True, counts=False), exact(4, 1), exact(8, 1)),
        on_demand(8),
        2.5 * HOUR,
        id="4 GPUs free for 2 h drain 8 GPU-h, the other 4 through 8 GPUs: 2.5 h (a fluid)",
    ),
    pytest.param(
        (exact(16, 1, running=True), exact(16, 1)),
        Capacity(
            8,
            8,
            spot_availability=1.0,
            interruptions_per_node_hour=0.0,
            provisioning_latency_seconds=0.0,
        ),
        2 * HOUR,
        id="8 on-demand plus 8 spot GPUs always delivered and never interrupted run 16 GPUs",
    ),
]


@pytest.mark.parametrize(("jobs", "capacity", "want_finish"), EXACT)
def test_exact_runtimes_give_risk_0_after_the_fluid_finish_and_1_before_it(
    jobs: tuple[Job, ...], capacity: Capacity, want_finish: float
) -> None:
    met = estimate(Problem(jobs, capacity, FIXED_NOW + want_finish + 1), now=FIXED_NOW)
    missed = estimate(Problem(jobs, capacity, FIXED_NOW + want_finish - 1), now=FIXED_NOW)
    assert (met.risk, missed.risk) == (0.0, 1.0)
    assert met.p50_finish == pytest.approx(FIXED_NOW + want_finish, abs=0.01)
    assert met.p90_finish == met.p50_finish
    assert met.slack_seconds == pytest.approx(1.0, abs=0.01)
    assert missed.slack_seconds == pytest.approx(-1.0, abs=0.01)


@pytest.mark.parametrize(
    ("jobs", "capacity", "want_startable"),
    [
        pytest.param(
            (exact(16, 1),),
            on_demand(8)._replace(widest_gpus=8),
            False,
            id="a pending 16-GPU job on 8 on-demand GPUs that cannot borrow",
        ),
        pytest.param(
            (exact(4, 1, running=True), exact(16, 1)),
            on_demand(8)._replace(widest_gpus=8),
            False,
            id="a 16-GPU job queued behind a 4-GPU job on 8 GPUs that cannot borrow",
        ),
        pytest.param(
            (exact(8, 1),),
            Capacity(0, 64, spot_availability=0.0, interruptions_per_node_hour=0.0),
            True,
            id="a pending 8-GPU job on 64 spot GPUs the market never delivers",
        ),
    ],
)
def test_work_that_never_finishes_is_reported_at_the_horizon_finite(
    jobs: tuple[Job, ...], capacity: Capacity, want_startable: bool
) -> None:
    got = estimate(Problem(jobs, capacity, FIXED_NOW + 1000 * HOUR), now=FIXED_NOW)
    assert got.risk == 1.0
    assert got.p50_finish == got.p90_finish == FIXED_NOW + HORIZON_SECONDS
    assert got.slack_seconds == 1000 * HOUR - HORIZON_SECONDS
    assert math.isfinite(got.slack_seconds)
    assert got.startable is want_startable


@pytest.mark.parametrize(
    ("availability", "widest"),
    [
        pytest.param(0.9, 8, id="90 % spot availability, the quota is one 8-GPU node"),
        pytest.param(0.5, 8, id="50 % spot availability"),
    ],
)
def test_a_pod_set_as_wide_as_its_flavor_starts_whatever_spot_delivers(
    availability: float, widest: int
) -> None:
    """The 8-GPU job on an 8-GPU spot quota: the fluid capacity is under 8 GPUs on most
    samples, but Kueue admits the pod set whole onto the flavor, so it starts and finishes."""
    capacity = Capacity(
        0, 8, spot_availability=availability, interruptions_per_node_hour=0.0, widest_gpus=widest
    )
    got = estimate(Problem((exact(8, 1),), capacity, FIXED_NOW + 100 * HOUR), now=FIXED_NOW)
    assert got.startable
    assert got.risk == 0.0
    assert got.p90_finish < FIXED_NOW + 100 * HOUR
    assert math.isfinite(got.slack_seconds) and got.slack_seconds > 0


@pytest.mark.parametrize(
    ("jobs", "deadline"),
    [
        pytest.param((), FIXED_NOW + HOUR, id="no jobs at all, deadline in an hour"),
        pytest.param(
            (exact(8, 5, running=True, counts=False), exact(64, 1, counts=False)),
            FIXED_NOW + HOUR,
            id="only jobs that do not count, one of them too wide, deadline in an hour",
        ),
        pytest.param(
            (),
            FIXED_NOW - HOUR,
            id="no jobs at all, deadline passed an hour ago",
        ),
        pytest.param(
            (exact(8, 5, running=True, counts=False),),
            FIXED_NOW - HOUR,
            id="only a job that does not count, deadline passed an hour ago",
        ),
    ],
)
def test_a_deadline_with_no_counted_jobs_has_no_risk(
    jobs: tuple[Job, ...], deadline: float
) -> None:
    assert estimate(Problem(jobs, on_demand(8), deadline), now=FIXED_NOW).risk == 0.0


# ----------------------------------------------------------------- analytical probabilities


@pytest.mark.parametrize(
    ("sigma", "deadline_hours"),
    [
        pytest.param(0.2, 8, id="sigma 0.2, deadline at 8 h: P = 0.845"),
        pytest.param(0.2, 10, id="sigma 0.2, deadline at the 10 h mean: P = 0.460"),
        pytest.param(0.2, 12, id="sigma 0.2, deadline at 12 h: P = 0.156"),
        pytest.param(0.5, 6, id="sigma 0.5, deadline at 6 h: P = 0.780"),
        pytest.param(0.5, 10, id="sigma 0.5, deadline at the 10 h mean: P = 0.401"),
        pytest.param(0.5, 15, id="sigma 0.5, deadline at 15 h: P = 0.144"),
        pytest.param(1.0, 3, id="sigma 1.0, deadline at 3 h: P = 0.759"),
        pytest.param(1.0, 10, id="sigma 1.0, deadline at the 10 h mean: P = 0.309"),
        pytest.param(1.0, 30, id="sigma 1.0, deadline at 30 h: P = 0.055"),
    ],
)
def test_one_log_normal_job_misses_with_the_analytical_probability(
    sigma: float, deadline_hours: float
) -> None:
    """P(D > t) = 1 - Phi((ln t - mu) / sigma), mu = ln(mean) - sigma^2 / 2, mean 10 h."""
    mean = 10 * HOUR
    mu = log(mean) - sigma**2 / 2
    want_risk = 1 - normal_cdf((log(deadline_hours * HOUR) - mu) / sigma)
    job = Job(8, mean, sigma=sigma, running=True)
    problem = Problem((job,), on_demand(64), FIXED_NOW + deadline_hours * HOUR)
    assert estimate(problem, now=FIXED_NOW, samples=20_000).risk == pytest.approx(
        want_risk, abs=0.03
    )


@pytest.mark.parametrize(
    ("availability", "concentration", "deadline_hours"),
    [
        pytest.param(0.5, 4, 1.25, id="Beta(2, 2), deadline 1.25 h: miss iff X < 0.4, P = 0.352"),
        pytest.param(0.5, 4, 2.0, id="Beta(2, 2), deadline 2 h: miss iff X < 0.25, P = 0.156"),
        pytest.param(0.6, 5, 1.5, id="Beta(3, 2), deadline 1.5 h: miss iff X < 1/3, P = 0.111"),
        pytest.param(0.4, 10, 1.25, id="Beta(4, 6), deadline 1.25 h: miss iff X < 0.4, P = 0.517"),
        pytest.param(0.4, 10, 3.0, id="Beta(4, 6), deadline 3 h: miss iff X < 1/6, P = 0.048"),
        pytest.param(0.3, 6, 2.5, id="Beta(1.8, 4.2), deadline 2.5 h: miss iff X < 0.2, P = 0.332"),
        pytest.param(0.8, 10, 1.25, id="Beta(8, 2), deadline 1.25 h: miss iff X < 0.4, P = 0.004"),
    ],
)
def test_spot_delivery_misses_with_the_probability_of_the_beta_distribution(
    availability: float, concentration: float, deadline_hours: float
) -> None:
    """Four pending 2-GPU 1 h jobs (8 GPU-h) on 16 spot GPUs, none on demand, no interruptions
    and no provisioning latency.

    With X the delivered fraction, the last job is done at max(8 GPU-h / 16X, 1 h); for
    deadlines T in (1 h, 4 h]: a miss iff X < 8 / (16 T).
    """
    jobs = tuple(exact(2, 1) for _ in range(4))
    capacity = Capacity(
        on_demand_gpus=0,
        spot_gpus=16,
        spot_availability=availability,
        spot_availability_concentration=concentration,
        interruptions_per_node_hour=0.0,
        provisioning_latency_seconds=0.0,
    )
    threshold = 8 / (16 * deadline_hours)
    alpha, beta = availability * concentration, (1 - availability) * concentration
    want_risk = beta_cdf(threshold, alpha, beta)
    problem = Problem(jobs, capacity, FIXED_NOW + deadline_hours * HOUR)
    assert estimate(problem, now=FIXED_NOW, samples=20_000).risk == pytest.approx(
        want_risk, abs=0.03
    )


# ----------------------------------------------------------------- monotone over the same samples

CHECKPOINTS = [600.0, 1800.0, 3600.0, 2 * HOUR, 4 * HOUR, 8 * HOUR]

SWEEPS = [
    pytest.param(
        [Problem(MIXED, Capacity(od, 32), FIXED_NOW + 14 * HOUR) for od in range(64, -1, -8)],
        id="risk rises as on-demand falls from 64 to 0 GPUs beside 32 spot GPUs",
    ),
    pytest.param(
        [
            Problem(
                MIXED, Capacity(64 - s, s, interruptions_per_node_hour=0.3), FIXED_NOW + 12 * HOUR
            )
            for s in range(0, 65, 8)
        ],
        id="risk rises as the spot share of a 64-GPU quota rises from 0 to all, interruptions on",
    ),
    pytest.param(
        [Problem(MIXED, Capacity(32, 32), FIXED_NOW + h * HOUR) for h in range(30, 0, -2)],
        id="risk rises as the deadline nears from 30 h to 2 h away",
    ),
    pytest.param(
        [
            Problem(
                with_checkpoint(MIXED, c),
                Capacity(16, 48, interruptions_per_node_hour=0.2),
                FIXED_NOW + 14 * HOUR,
            )
            for c in CHECKPOINTS
        ],
        id="risk rises as the checkpoint interval grows from 10 min to 8 h on spot",
    ),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("sweep", SWEEPS)
def test_risk_never_falls_along_a_sweep_with_the_same_seed(sweep: list[Problem], seed: int) -> None:
    risks = [estimate(p, now=FIXED_NOW, samples=1000, seed=seed).risk for p in sweep]
    assert all(a <= b for a, b in itertools.pairwise(risks)), risks
    assert risks[-1] - risks[0] > 0.3, risks  # the sweep spans a real change in risk


@pytest.mark.parametrize(
    "capacity",
    [
        pytest.param(
            Capacity(16, 48, interruptions_per_node_hour=0.0),
            id="spot that is never interrupted",
        ),
        pytest.param(
            Capacity(64, 0, interruptions_per_node_hour=0.5),
            id="a high interruption rate but no spot GPUs",
        ),
    ],
)
def test_without_interruptions_the_checkpoint_interval_does_not_matter(
    capacity: Capacity,
) -> None:
    got = {
        estimate(Problem(with_checkpoint(MIXED, c), capacity, FIXED_NOW + 14 * HOUR), now=FIXED_NOW)
        for c in CHECKPOINTS
    }
    assert len(got) == 1, got


# ----------------------------------------------------------------- reproducibility and shape

PROBLEMS = [
    pytest.param(Problem(MIXED, Capacity(32, 32), FIXED_NOW + 12 * HOUR), id="mixed jobs on a mix"),
    pytest.param(
        Problem((Job(8, 10 * HOUR, sigma=0.8, running=True),), on_demand(8), FIXED_NOW + 10 * HOUR),
        id="one very uncertain job on on-demand GPUs",
    ),
    pytest.param(
        Problem(MIXED, Capacity(0, 64, interruptions_per_node_hour=0.5), FIXED_NOW + 30 * HOUR),
        id="mixed jobs on spot only, often interrupted",
    ),
]


@pytest.mark.parametrize("problem", PROBLEMS)
def test_the_same_seed_gives_the_same_estimate_and_another_seed_another(
    problem: Problem,
) -> None:
    first = estimate(problem, now=FIXED_NOW, seed=11)
    assert estimate(problem, now=FIXED_NOW, seed=11) == first
    assert estimate(problem, now=FIXED_NOW, seed=12) != first


@pytest.mark.parametrize(
    "problem",
    [
        *PROBLEMS,
        pytest.param(
            Problem((exact(8, 3, running=True),), on_demand(8), FIXED_NOW + HOUR),
            id="an exact job that will be 2 h late",
        ),
    ],
)
def test_p50_is_before_p90_and_slack_is_the_deadline_minus_p50(problem: Problem) -> None:
    got = estimate(problem, now=FIXED_NOW)
    assert FIXED_NOW < got.p50_finish <= got.p90_finish < INF
    assert got.slack_seconds == pytest.approx(problem.deadline - got.p50_finish, abs=1e-3)


def test_p90_is_strictly_later_than_p50_when_runtimes_vary() -> None:
    got = estimate(Problem(MIXED, Capacity(32, 32), FIXED_NOW + 12 * HOUR), now=FIXED_NOW)
    assert got.p90_finish - got.p50_finish > 0.5 * HOUR


MIXED_BATCH_EXACT = [
    Problem((), on_demand(8), FIXED_NOW + HOUR),
    Problem((exact(8, 2, running=True),), on_demand(8), FIXED_NOW + 2 * HOUR + 1),
    Problem((exact(16, 1, running=True),), on_demand(8), FIXED_NOW + 5 * HOUR),
    Problem(
        tuple(exact(8, 1, running=j < 2, counts=j % 3 != 2) for j in range(8)),
        on_demand(16, latency=600),
        FIXED_NOW + 4 * HOUR + 599,
    ),
    Problem(
        (exact(1, 0.25, running=True), exact(2, 0.5)), on_demand(4), FIXED_NOW + 0.5 * HOUR - 1
    ),
    Problem(
        (exact(16, 1, running=True), exact(16, 1)),
        Capacity(8, 8, spot_availability=1.0, interruptions_per_node_hour=0.0),
        FIXED_NOW + 3 * HOUR,
    ),
]
MIXED_BATCH = [
    *MIXED_BATCH_EXACT,
    Problem(MIXED, Capacity(32, 32), FIXED_NOW + 12 * HOUR),
    Problem(MIXED[:2], Capacity(0, 48, interruptions_per_node_hour=0.3), FIXED_NOW + 6 * HOUR),
    Problem((Job(8, 10 * HOUR, sigma=0.8, running=True),), on_demand(8), FIXED_NOW + 10 * HOUR),
]


@pytest.mark.parametrize(
    "problems",
    [
        pytest.param(
            MIXED_BATCH_EXACT,
            id="exact runtimes: 0, 1, 2 and 8 jobs, a too-wide job, jobs that do not count",
        ),
        pytest.param(
            MIXED_BATCH,
            id="uncertain runtimes and spot beside exact ones: each problem its own samples",
        ),
    ],
)
def test_estimate_many_equals_estimate_of_each_problem(problems: list[Problem]) -> None:
    assert estimate_many(problems, now=FIXED_NOW) == [estimate(p, now=FIXED_NOW) for p in problems]


def test_estimate_many_of_nothing_is_nothing() -> None:
    assert estimate_many([], now=FIXED_NOW) == []


@pytest.mark.parametrize(
    "hours",
    [
        pytest.param(1, id="a 1 h job"),
        pytest.param(24, id="a 1 day job"),
        pytest.param(7 * 24, id="a 1 week job"),
        pytest.param(30 * 24, id="a 30 day job"),
    ],
)
def test_absolute_times_keep_second_precision_at_epoch_magnitudes(hours: float) -> None:
    """float32 holds 1.8e9 only to 128 s: absolute times must stay in float64."""
    now = FIXED_NOW + 0.25
    runtime = hours * HOUR
    jobs = (exact(8, hours, running=True),)
    met = estimate(Problem(jobs, on_demand(8), now + runtime + 1), now=now)
    missed = estimate(Problem(jobs, on_demand(8), now + runtime - 1), now=now)
    second_later = estimate(Problem(jobs, on_demand(8), now + 1 + runtime + 1), now=now + 1)
    assert (met.risk, missed.risk) == (0.0, 1.0)
    assert met.p50_finish == pytest.approx(now + runtime, abs=1.0)
    assert met.slack_seconds == pytest.approx(1.0, abs=1.0)
    assert second_later.p50_finish - met.p50_finish == pytest.approx(1.0, abs=1e-3)
    assert second_later.slack_seconds == met.slack_seconds


# ----------------------------------------------------------------- termination


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in the block after `seconds` of wall time (main thread, Unix)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


POISSON_HANG = (
    "bug: _poisson_inverse walks the Poisson CDF in float32 until it reaches the uniform "
    "draw; when the float32 sum stalls below it (e^-rate underflows for rates above ~103, or "
    "the sum settles 1-2 ulps below 1 while the draw is 1 - 2^-24), the loop never ends"
)


@pytest.mark.parametrize(
    ("problem", "seed", "want_p50_hours"),
    [
        pytest.param(
            Problem(
                (exact(128, 200, running=True),),
                Capacity(0, 128, spot_availability=1.0),
                FIXED_NOW + 400 * HOUR,
            ),
            0,
            (200, 400),
            id="a 16-node job running 200 h on spot: about 160 interruptions expected",
        ),
        pytest.param(
            Problem(
                (exact(8, 20, running=True),),
                Capacity(0, 8, spot_availability=1.0),
                FIXED_NOW + 40 * HOUR,
            ),
            6923,
            (20, 40),
            id="a 1-node 20 h spot job, default rate, a seed that draws 1 - 2^-24",
        ),
        pytest.param(
            Problem(
                (exact(8, 20, running=True),),
                Capacity(0, 8, spot_availability=1.0),
                FIXED_NOW + 40 * HOUR,
            ),
            0,
            (20, 40),
            id="the same 1-node 20 h spot job with an ordinary seed",
        ),
    ],
)
def test_estimates_with_many_expected_interruptions_finish(
    problem: Problem, seed: int, want_p50_hours: tuple[float, float]
) -> None:
    with time_limit(2.0):
        got = estimate(problem, now=FIXED_NOW, seed=seed)
    low, high = want_p50_hours
    assert FIXED_NOW + low * HOUR < got.p50_finish < FIXED_NOW + high * HOUR


@pytest.mark.parametrize(
    ("held_until", "held_gpus", "work", "capacity", "want"),
    [
        pytest.param([], [], [8, 16], 8, [1, 2], id="nothing running: work over capacity"),
        pytest.param([2], [4], [4, 8, 16], 8, [1, 2, 3], id="4 of 8 free until 2 h, then all"),
        pytest.param([1, 3], [4, 4], [8], 8, [3], id="none free until 1 h, then 4: 3 h"),
        pytest.param([1, 2], [8, 8], [0, 8], 8, [0, 3], id="borrowed: none free until 2 h"),
        pytest.param([5], [2], [2], 0, [HORIZON_SECONDS], id="no capacity: never drained"),
    ],
)
def test_drain_times_through_what_running_work_leaves_free(
    held_until: list[float],
    held_gpus: list[float],
    work: list[float],
    capacity: float,
    want: list[float],
) -> None:
    """Hours and GPU-hours (the function is unit-free): one row per running workload, the
    amounts of queued work along the sample axis (each drains alone)."""

    def rows(values: list[float]) -> np.ndarray:
        return np.array([[[v] for v in values]], dtype=np.float32).reshape(1, len(values), 1)

    queued = np.array([work], dtype=np.float32)
    got = drain_times(
        rows(held_until),
        rows(held_gpus),
        queued,
        np.full(queued.shape, capacity, dtype=np.float32),
        columns=len(held_until),
    )
    assert got[0].tolist() == pytest.approx(want)


@pytest.mark.parametrize("running", [3, SORT_NETWORK_ROWS + 2])
def test_drain_times_order_running_work_by_its_finish(running: int) -> None:
    """Rows in any order, few (compare-exchange) or many (argsort): the same drain as with
    the rows sorted by hand, sample by sample."""
    rng = np.random.default_rng(3)
    samples = 50
    ends = rng.random((2, running, samples)).astype(np.float32) * 10
    gpus = rng.integers(1, 4, (2, running, 1)).astype(np.float32)
    queued = rng.random((2, samples)).astype(np.float32) * 40
    capacity = np.full((2, samples), 6.0, dtype=np.float32)
    got = drain_times(ends, gpus, queued, capacity, columns=running)
    for b in range(2):
        for s in range(samples):
            order = np.argsort(ends[b, :, s])
            one = drain_times(
                ends[b, order, s].reshape(1, running, 1),
                gpus[b, order, 0].reshape(1, running, 1),
                queued[b, s].reshape(1, 1),
                capacity[b, s].reshape(1, 1),
                columns=running,
            )
            assert got[b, s] == pytest.approx(float(one[0, 0]), rel=1e-6)
            # By hand: step through the segments between finishes.
            t, left, held = 0.0, float(queued[b, s]), float(gpus[b, :, 0].sum())
            for i in order:
                free = max(6.0 - held, 0.0)
                span = float(ends[b, i, s]) - t
                if free * span >= left:
                    break
                left -= free * span
                t, held = float(ends[b, i, s]), held - float(gpus[b, i, 0])
            else:
                free = max(6.0 - held, 0.0)
            want = t + left / free if left > 0 else 0.0
            assert float(got[b, s]) == pytest.approx(want, rel=1e-4)


def test_a_running_job_wider_than_the_capacity_still_finishes() -> None:
    """It already holds its nodes: a shrunken quota slows what queues behind it, not it."""
    result = estimate(
        Problem((exact(16, 1, running=True),), on_demand(8), FIXED_NOW + 10 * 3600), now=FIXED_NOW
    )
    assert result.risk == 0.0
    assert result.p50_finish < FIXED_NOW + 10 * 3600


def _poisson_in_float64(rate: np.ndarray, uniform: np.ndarray) -> list[float]:
    """The inverse transform with every draw decided in float64 and walked one step at a time
    by the recurrence p(k) = p(k-1) r / k (numpy's exp and log): what the model's float32
    pre-check and its blocks of closed-form steps must give."""
    r = rate.astype(np.float64)
    u = uniform.astype(np.float64)
    counts = np.zeros(r.shape)
    log_p = -r
    cdf = np.exp(log_p)
    todo = np.flatnonzero(u >= cdf)
    limit = r + 40 * np.sqrt(r) + 40
    k = 0
    while todo.size:
        k += 1
        counts[todo] = k
        log_p[todo] = log_p[todo] + np.log(np.maximum(r[todo], 1e-300)) - np.log(k)
        cdf[todo] = cdf[todo] + np.exp(log_p[todo])
        todo = todo[(cdf[todo] < u[todo]) & (k < limit[todo])]
    return [float(c) for c in counts]


@pytest.mark.parametrize("scale", [1e-6, 1e-3, 0.1, 1.0, 30.0, 800.0])
def test_poisson_counts_are_the_float64_step_by_step_ones(scale: float) -> None:
    """Draws right at e^-rate are where float32 and float64 could disagree: include them. At
    rate 30 and 800 the walks run hundreds of steps, through every block size."""
    rng = np.random.default_rng(7)
    rate = (rng.random(400) * scale).astype(np.float32)
    uniform = rng.random(400).astype(np.float32)
    uniform[:100] = np.exp(-rate[:100].astype(np.float64)).astype(np.float32)
    uniform[100:150] = np.nextafter(uniform[:50], np.float32(0))
    counts = _poisson_inverse(rate, uniform)
    assert counts.tolist() == _poisson_in_float64(rate, uniform)


def test_a_draws_bands_are_the_rates_where_its_count_steps_up() -> None:
    """u = e^-1: one interruption from rate 1 (e^-r <= u), two from r - ln(1 + r) = 1 (r =
    2.1462), three from r - ln(1 + r + r^2 / 2) = 1 (r = 3.2585), each band a little inside."""
    low1, high1, low2, high2 = interruption_band(np.array([math.exp(-1)], np.float32))[0]
    assert BANDED_COUNTS == 2
    assert low1 == pytest.approx(1.0, abs=1e-4) and low1 > 1.0
    assert high1 == pytest.approx(2.1462, abs=1e-4)
    assert low2 == pytest.approx(2.1462, abs=1e-3) and low2 > high1
    assert high2 == pytest.approx(3.2585, abs=1e-3)
    # At u = 0 only rates whose e^-rate underflows see an interruption: no band.
    none = interruption_band(np.array([0.0], np.float32))[0]
    assert none[0] == INF and none[2] == INF


@pytest.mark.parametrize("scale", [1e-6, 1e-3, 0.1, 1.0, 30.0])
def test_poisson_counts_at_the_edges_of_the_bands_are_the_float64_ones(scale: float) -> None:
    """Rates right at a draw's bands' edges, and a few float32 steps either side: where a band
    too wide would answer a count the walk would not."""
    rng = np.random.default_rng(11)
    uniform = rng.random(200).astype(np.float32)
    uniform[:20] = (1 - rng.random(20) * scale).astype(np.float32)
    bands = interruption_band(uniform)
    rates = [bands[:, i] for i in range(bands.shape[1])]
    rates += [np.nextafter(r, np.float32(s)) for r in rates[:4] for s in (0, np.inf)]
    rates += [(bands[:, i] * (1 + d)).astype(np.float32) for i in range(4) for d in (-3e-5, 2e-5)]
    rate = np.concatenate(rates)
    rate[~(rate < 1e3)] = 0  # the bounds of draws without bands, and the float32 steps off them
    drawn = np.tile(uniform, len(rates))
    assert _poisson_inverse(rate, drawn).tolist() == _poisson_in_float64(rate, drawn)


@pytest.mark.parametrize("shape", [(3, 4, 5), (1, 4, 5), (4, 5), (1, 1, 5), (5,)])
def test_poisson_counts_read_broadcast_draws_as_their_copy(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(3)
    rate = (rng.random((3, 4, 5)) * 3).astype(np.float32)
    uniform = rng.random(shape).astype(np.float32)
    whole = np.broadcast_to(uniform, rate.shape).copy()
    assert _poisson_inverse(rate, uniform).tolist() == _poisson_inverse(rate, whole).tolist()
