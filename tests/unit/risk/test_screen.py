"""The two-stage estimate: a deadline its first samples agree on is answered from them.

Swept over deadlines from sure to hopeless, on spot (so interruptions and the delivered share
vary by sample): every estimate either equals the single-stage one exactly (the problem went on
to the rest of its samples) or is a certain 0 or 1 that the full sample puts within a few
points of it (the screen settled it). Both happen in the sweep, so neither branch is vacuous.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.risk import deadline as deadline_module
from controller.risk.deadline import SCREEN_SAMPLES, Capacity, Estimate, Job, Problem, estimate

FIXED_NOW = 1_800_000_000.0
HOUR = 3600.0

JOBS = (
    Job(8, 5 * HOUR, sigma=0.4, running=True, checkpoint_seconds=1800.0),
    Job(8, 3 * HOUR, sigma=0.5, checkpoint_seconds=1800.0),
    Job(16, 4 * HOUR, sigma=0.4, checkpoint_seconds=1800.0),
)
SPOT = Capacity(on_demand_gpus=8, spot_gpus=16, interruptions_per_node_hour=0.2)
SWEEP = [FIXED_NOW + hours * HOUR for hours in range(2, 40)]


def single_stage(problem: Problem, samples: int, monkeypatch: pytest.MonkeyPatch) -> Estimate:
    with monkeypatch.context() as patch:
        patch.setattr(deadline_module, "SCREEN_SAMPLES", 10**9)
        return estimate(problem, now=FIXED_NOW, samples=samples)


def sweep(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Estimate, Estimate]]:
    for deadline in SWEEP:
        problem = Problem(JOBS, SPOT, deadline)
        yield estimate(problem, now=FIXED_NOW, samples=500), single_stage(problem, 500, monkeypatch)


def test_a_problem_the_first_samples_disagree_on_gets_the_single_stage_estimate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    went_on = [(two, one) for two, one in sweep(monkeypatch) if 0.0 < two.risk < 1.0]
    assert len(went_on) >= 5
    assert all(two == one for two, one in went_on)


def test_a_problem_the_first_samples_agree_on_is_answered_from_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settled = [(two, one) for two, one in sweep(monkeypatch) if two != one]
    assert settled, (
        "the sweep should hold a deadline the screen settles and the full sample does not"
    )
    for two, one in settled:
        assert two.risk in (0.0, 1.0)
        assert abs(two.risk - one.risk) <= 0.05
        assert two.startable == one.startable


def test_the_risk_stays_monotone_in_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    risks = [two.risk for two, _ in sweep(monkeypatch)]
    assert risks == sorted(risks, reverse=True)
    assert risks[0] == 1.0 and risks[-1] == 0.0


def test_the_risk_stays_monotone_in_on_demand_capacity() -> None:
    risks = [
        estimate(
            Problem(JOBS, Capacity(on_demand_gpus=gpus, spot_gpus=24 - gpus), FIXED_NOW + 9 * HOUR),
            now=FIXED_NOW,
        ).risk
        for gpus in range(0, 25, 2)
    ]
    assert risks == sorted(risks, reverse=True)
    assert risks[0] > risks[-1]


def test_a_sample_no_larger_than_the_screen_is_one_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    for deadline in SWEEP:
        problem = Problem(JOBS, SPOT, deadline)
        assert estimate(problem, now=FIXED_NOW, samples=SCREEN_SAMPLES) == single_stage(
            problem, SCREEN_SAMPLES, monkeypatch
        )
