"""The draws a process keeps: one array per seed and sample count, whatever the queue lengths.

A controller meets queues of every length over its life. Draws kept per queue length grew with
each new length (the soak's RSS climbed for its first 20 minutes as queues of new lengths came
and went); drawn job by job, a shorter queue's draws are the first rows of a longer one's, so
what is kept stays within twice the longest queue seen, and an estimate does not depend on which
queues were estimated before it.
"""

from __future__ import annotations

import numpy as np
import pytest

from controller.risk import deadline as deadline_module
from controller.risk import wait as wait_module
from controller.risk.deadline import Capacity, Job, Problem, draw_rows, estimate
from controller.risk.wait import WaitProblem, estimate_waits

FIXED_NOW = 1_800_000_000.0
HOUR = 3600.0
SPOT = Capacity(on_demand_gpus=8, spot_gpus=16, interruptions_per_node_hour=0.2)


def queue(length: int) -> tuple[Job, ...]:
    return tuple(Job(8, (1 + i % 5) * HOUR, sigma=0.4, running=i == 0) for i in range(length))


def problem(length: int) -> Problem:
    return Problem(queue(length), SPOT, FIXED_NOW + 2 * length * HOUR)


@pytest.fixture(autouse=True)
def fresh_caches() -> None:
    deadline_module._job_rows.cache_clear()
    wait_module._normal_rows.cache_clear()


@pytest.mark.parametrize(
    ("width", "rows"),
    [(0, 64), (1, 64), (64, 64), (65, 128), (128, 128), (129, 256), (1000, 1024)],
)
def test_rows_are_a_power_of_two_of_at_least_64(width: int, rows: int) -> None:
    assert draw_rows(width) == rows


def test_a_shorter_queue_reads_the_first_rows_of_a_longer_ones_draws() -> None:
    short = deadline_module._job_draws(0, 500, 3)
    deadline_module._job_rows.cache_clear()
    long = deadline_module._job_draws(0, 500, 300)
    for narrow, wide in zip(short, long, strict=True):
        assert narrow.shape[:2] == (3, 500)
        assert np.array_equal(narrow, wide[:3])
        assert not narrow.flags.writeable


def test_an_estimate_does_not_depend_on_the_queues_estimated_before_it() -> None:
    alone = estimate(problem(7), now=FIXED_NOW)
    for length in (1, 90, 300, 40):
        estimate(problem(length), now=FIXED_NOW)
    assert estimate(problem(7), now=FIXED_NOW) == alone


def test_queues_of_every_length_keep_draws_for_the_longest_only() -> None:
    for length in range(1, 301):
        estimate(problem(length), now=FIXED_NOW)
    kept = deadline_module._job_rows.cache_info().currsize
    # One array set per power of two up to 512 rows (64, 128, 256, 512): within twice the
    # longest; a cache per length would have kept 300.
    assert kept == 4
    held = sum(
        array.nbytes
        for rows in (64, 128, 256, 512)
        for array in deadline_module._job_rows(0, 500, rows)
    )
    widest = sum(array.nbytes for array in deadline_module._job_draws(0, 500, 300))
    assert held < 2 * draw_rows(300) / 300 * widest


def test_waits_share_one_array_of_draws_across_queue_lengths() -> None:
    problems = [
        WaitProblem(jobs=tuple(Job(8, HOUR) for _ in range(n)), capacity_gpus=8, new_gpus=8)
        for n in range(1, 120)
    ]
    waits = estimate_waits(problems, samples=500, seed=0)
    assert all(0 < w.p50_seconds <= w.p90_seconds for w in waits)
    # 64 and 128 rows: one array per power of two, not one per queue length (119).
    assert wait_module._normal_rows.cache_info().currsize == 2
