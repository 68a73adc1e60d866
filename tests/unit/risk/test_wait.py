"""Predicted waits in a ClusterQueue, hand-computed with exact runtimes (sigma 0).

Cases marked `KNOWN_BUG` assert the behaviour we want but do not have yet; they are strict
xfails, so fixing the bug makes them fail until the mark is removed.
"""

from __future__ import annotations

import numpy as np
import pytest

from controller.risk.deadline import HORIZON_SECONDS, Job
from controller.risk.wait import (
    WaitEstimate,
    WaitProblem,
    _wait_samples,
    estimate_wait,
    estimate_waits,
)

HOUR = 3600.0
INF = float("inf")
NEVER = HORIZON_SECONDS
"""What a wait that cannot end reads as: the model's horizon, never +Inf."""


def KNOWN_BUG(  # noqa: N802 - reads as a marker
    reason: str, raises: type[BaseException] = AssertionError
) -> pytest.MarkDecorator:
    """A case asserting the right behaviour that the code does not have yet (see reason)."""
    return pytest.mark.xfail(reason=reason, strict=True, raises=raises)


def running(gpus: int, hours: float, sigma: float = 0.0) -> Job:
    """A running job with `hours` of runtime left."""
    return Job(gpus=gpus, mean_seconds=hours * HOUR, sigma=sigma, running=True)


def pending(gpus: int, hours: float, sigma: float = 0.0) -> Job:
    return Job(gpus=gpus, mean_seconds=hours * HOUR, sigma=sigma)


@pytest.mark.parametrize(
    ("jobs", "capacity", "new_gpus", "want_seconds"),
    [
        pytest.param([], 8, 8, 0.0, id="an empty queue with room starts the job at once"),
        pytest.param(
            [running(4, 5)], 8, 4, 0.0, id="4 GPUs free beside a running job fit a 4-GPU job"
        ),
        pytest.param(
            [running(4, 1), running(4, 2)],
            8,
            4,
            1 * HOUR,
            id="a full queue: a 4-GPU job waits for the 4-GPU job ending in 1 h",
        ),
        pytest.param(
            [running(4, 1), running(4, 2)],
            8,
            8,
            2 * HOUR,
            id="a full queue: an 8-GPU job waits for both running jobs, the last ending in 2 h",
        ),
        pytest.param(
            [running(2, 3), running(4, 2), running(2, 1)],
            8,
            4,
            2 * HOUR,
            id="2 GPUs free at 1 h are not enough for 4 GPUs; 6 free at 2 h are",
        ),
        pytest.param(
            [running(2, 3), running(4, 2), running(2, 1)],
            8,
            2,
            1 * HOUR,
            id="2 GPUs free at 1 h are enough for a 2-GPU job",
        ),
        pytest.param(
            [running(4, 1), running(2, 3)],
            8,
            6,
            1 * HOUR,
            id="2 GPUs already free, 4 more at 1 h: a 6-GPU job waits 1 h",
        ),
        pytest.param(
            [running(8, 1), running(4, 2)],
            8,
            8,
            2 * HOUR,
            id="12 GPUs running on 8 (capacity shrank): 8 GPUs are free only when both end",
        ),
        pytest.param(
            [running(8, 1), pending(8, 2)],
            8,
            8,
            3 * HOUR,
            id="pending work: 8 GPU-h running and 16 GPU-h pending drain through 8 GPUs in 3 h",
        ),
        pytest.param(
            [pending(4, 1), pending(4, 1)],
            4,
            2,
            2 * HOUR,
            id="nothing running: 8 GPU-h pending drain through 4 GPUs in 2 h",
        ),
        pytest.param(
            [running(16, 1), pending(32, 0.5)],
            32,
            8,
            1 * HOUR,
            id="16 GPU-h running and 16 GPU-h pending drain through 32 GPUs in 1 h",
        ),
        pytest.param(
            [running(1, 1000), pending(1, 1)],
            8,
            1,
            HOUR / 7,
            id="a 1000 h 1-GPU job leaves 7 GPUs: 1 GPU-h pending drains through them in 1/7 h",
        ),
        pytest.param(
            [running(8, 1), running(8, 2), pending(8, 1)],
            8,
            8,
            3 * HOUR,
            id="16 GPUs running on 8 (borrowed): nothing drains until 2 h, then 8 GPU-h in 1 h",
        ),
        pytest.param([], 8, 16, NEVER, id="a 16-GPU job never fits 8 GPUs"),
        pytest.param([running(4, 1), pending(4, 1)], 8, 16, NEVER, id="nor behind pending work"),
        pytest.param([], 0, 1, NEVER, id="a queue without capacity never admits anything"),
    ],
)
def test_exact_waits(jobs: list[Job], capacity: float, new_gpus: int, want_seconds: float) -> None:
    got = estimate_wait(jobs, capacity_gpus=capacity, new_gpus=new_gpus)
    assert (got.p50_seconds, got.p90_seconds) == pytest.approx((want_seconds, want_seconds))


@pytest.mark.parametrize(
    ("jobs", "new_gpus"),
    [
        pytest.param([running(4, 1, sigma=0.5), running(4, 2, sigma=0.5)], 4, id="a full queue"),
        pytest.param([running(4, 1, sigma=0.5), pending(8, 2, sigma=0.5)], 4, id="pending work"),
    ],
)
def test_uncertain_waits_spread_from_p50_to_p90_and_repeat_with_the_seed(
    jobs: list[Job], new_gpus: int
) -> None:
    first = estimate_wait(jobs, capacity_gpus=8, new_gpus=new_gpus, seed=3)
    assert 0 < first.p50_seconds < first.p90_seconds < INF
    assert estimate_wait(jobs, capacity_gpus=8, new_gpus=new_gpus, seed=3) == first
    assert estimate_wait(jobs, capacity_gpus=8, new_gpus=new_gpus, seed=4) != first


def test_the_median_wait_behind_pending_work_is_near_the_work_over_the_capacity() -> None:
    """Runtimes have the given means, so the mean wait is (4 x 1 h + 8 x 2 h) / 8 = 2.5 h."""
    jobs = [running(4, 1, sigma=0.2), pending(8, 2, sigma=0.2)]
    got = estimate_wait(jobs, capacity_gpus=8, new_gpus=4, samples=5000)
    assert got.p50_seconds == pytest.approx(2.5 * HOUR, rel=0.05)


def test_many_waits_at_once_equal_each_asked_alone() -> None:
    """Queues of every kind in one batch (nothing pending, behind pending work, too wide,
    no capacity): the quantiles taken together are each queue's own, to the bit."""
    running = Job(gpus=4, mean_seconds=3600.0, sigma=0.5, running=True)
    pending = Job(gpus=8, mean_seconds=7200.0, sigma=0.8, running=False)
    problems = [
        WaitProblem([running], capacity_gpus=16, new_gpus=4),
        WaitProblem([running, running], capacity_gpus=8, new_gpus=4),
        WaitProblem([running, pending, pending], capacity_gpus=16, new_gpus=8),
        WaitProblem([pending] * 5, capacity_gpus=7.2, new_gpus=4),
        WaitProblem([pending], capacity_gpus=4, new_gpus=8),
        WaitProblem([pending], capacity_gpus=0, new_gpus=1),
    ]
    together = estimate_waits(problems, samples=100, seed=5)
    alone = [
        estimate_wait(
            p.jobs, capacity_gpus=p.capacity_gpus, new_gpus=p.new_gpus, samples=100, seed=5
        )
        for p in problems
    ]
    assert together == alone
    for problem, wait in zip(problems[1:4], together[1:4], strict=True):
        waits = _wait_samples(problem, samples=100, seed=5)
        assert isinstance(waits, np.ndarray)
        p50, p90 = np.quantile(np.minimum(waits, HORIZON_SECONDS), [0.5, 0.9])  # one queue
        assert (wait.p50_seconds, wait.p90_seconds) == (float(p50), float(p90))
    assert together[0] == WaitEstimate(0.0, 0.0)
    assert together[4] == WaitEstimate(HORIZON_SECONDS, HORIZON_SECONDS)
    assert 0 < together[1].p50_seconds < together[1].p90_seconds
