"""Whether the policy's deadline risks mean what they say: reliability by decile, Brier score.

A controller that says "risk 0.3" should see three deadlines in ten missed among the times it
said so. The replay records every risk the policy estimated with the outcome of that deadline
(`RunResult.risk_log`), and this module scores the records:

- **Reliability table**: the records binned by predicted risk into deciles [0, 0.1), [0.1,
  0.2), ..., [0.9, 1.0] (the last one closed, so a risk of exactly 1 has a bin). Per decile:
  how many estimates, their mean predicted risk, the observed frequency of misses, and the
  deviation, observed minus mean predicted (positive: the risk was understated).
- **Brier score**: the mean of (risk - outcome)^2 with outcome 1 for a miss, 0 for a hit; 0 is
  perfect, and always saying 0.5 scores 0.25.
- **Largest deviation**: the largest |deviation| over the deciles holding at least
  `MIN_ESTIMATES` estimates, the goal's measure. A decile with fewer has an observed
  frequency too noisy to judge (with 100 estimates one standard error at a true rate of 0.5
  is 0.05), so it is shown but not judged.

Each pass re-estimates every open deadline, so one deadline contributes many records, and its
records share one outcome: the table weighs deadlines by how long they stayed open, and its
counts overstate the independent evidence. This is the measure the issue asks for; read a
decile's count with that in mind.

Pure: records in, figures out; no I/O.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from controller.sim.model import RiskRecord

DECILES = 10
MIN_ESTIMATES = 100
"""A decile is judged (counts toward `Calibration.max_deviation`) from this many estimates."""
_EDGES = tuple(k / DECILES for k in range(1, DECILES))
"""The inner bin edges 0.1 ... 0.9, each the float nearest k/10."""


@dataclass(frozen=True)
class Decile:
    """One bin of predicted risk, [low, high) (the last one [0.9, 1.0])."""

    low: float
    high: float
    count: int
    mean_predicted: float | None
    """None when the bin is empty."""
    observed: float | None
    """The share of its estimates whose deadline was missed; None when empty."""

    @property
    def deviation(self) -> float | None:
        """observed - mean predicted: positive when the risk was understated."""
        if self.mean_predicted is None or self.observed is None:
            return None
        return self.observed - self.mean_predicted

    @property
    def label(self) -> str:
        closing = "]" if self.high >= 1.0 else ")"
        return f"[{self.low:.1f}, {self.high:.1f}{closing}"


@dataclass(frozen=True)
class Calibration:
    """The reliability table and Brier score of one run's risk records."""

    count: int
    missed: int
    """Estimates whose deadline was missed."""
    brier: float | None
    """None when there are no estimates."""
    deciles: tuple[Decile, ...]

    def judged(self, min_count: int = MIN_ESTIMATES) -> tuple[Decile, ...]:
        """The deciles holding at least `min_count` estimates."""
        return tuple(d for d in self.deciles if d.count >= min_count)

    def max_deviation(self, min_count: int = MIN_ESTIMATES) -> float | None:
        """The largest |observed - predicted| over the judged deciles; None when none is."""
        deviations = [abs(d.deviation) for d in self.judged(min_count) if d.deviation is not None]
        return max(deviations, default=None)


def decile_of(risk: float) -> int:
    """The index (0-9) of the decile `risk` falls in: [k/10, (k+1)/10), and 1.0 in the last.

    Raises ValueError for a risk outside [0, 1] or not a number.
    """
    if not 0.0 <= risk <= 1.0:  # NaN fails this too
        raise ValueError(f"a risk is a probability in [0, 1], got {risk!r}")
    return bisect_right(_EDGES, risk)


def calibrate(records: Iterable[RiskRecord]) -> Calibration:
    """The reliability table and Brier score of `records`.

    Raises ValueError naming the record when a risk is outside [0, 1].
    """
    counts = [0] * DECILES
    predicted = [0.0] * DECILES
    misses = [0] * DECILES
    squared = 0.0
    total = missed = 0
    for record in records:
        try:
            index = decile_of(record.risk)
        except ValueError as exc:
            raise ValueError(
                f"risk record of {record.project}/{record.deadline} at {record.time:g} s: {exc}"
            ) from None
        outcome = 1.0 if record.missed else 0.0
        counts[index] += 1
        predicted[index] += record.risk
        misses[index] += record.missed
        squared += (record.risk - outcome) ** 2
        total += 1
        missed += record.missed
    deciles = tuple(
        Decile(
            low=k / DECILES,
            high=(k + 1) / DECILES,
            count=counts[k],
            mean_predicted=predicted[k] / counts[k] if counts[k] else None,
            observed=misses[k] / counts[k] if counts[k] else None,
        )
        for k in range(DECILES)
    )
    return Calibration(
        count=total,
        missed=missed,
        brier=squared / total if total else None,
        deciles=deciles,
    )


def calibration_document(calibration: Calibration) -> dict[str, Any]:
    """summary.json's view: the table, the Brier score and the goal's measure."""
    return {
        "estimates": calibration.count,
        "missed": calibration.missed,
        "brier_score": calibration.brier,
        "min_estimates_judged": MIN_ESTIMATES,
        "max_abs_deviation_judged": calibration.max_deviation(),
        "deciles": [
            {
                "range": d.label,
                "count": d.count,
                "mean_predicted": d.mean_predicted,
                "observed": d.observed,
                "deviation": d.deviation,
            }
            for d in calibration.deciles
        ],
    }


def _fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def reliability_rows(calibration: Calibration) -> list[list[str]]:
    """The reliability table's cells: decile, count, mean predicted, observed, deviation, and
    whether the decile is judged (enough estimates)."""
    return [
        [
            d.label,
            f"{d.count:,}",
            _fraction(d.mean_predicted),
            _fraction(d.observed),
            _signed(d.deviation),
            "yes" if d.count >= MIN_ESTIMATES else "no",
        ]
        for d in calibration.deciles
    ]


RELIABILITY_HEADER = ("predicted risk", "estimates", "mean predicted", "observed", "deviation")
JUDGED_HEADER = f">= {MIN_ESTIMATES} estimates"


def describe(calibration: Calibration) -> str:
    """One line: estimates, Brier score, largest judged deviation."""
    if calibration.count == 0:
        return "no risk estimates"
    worst = calibration.max_deviation()
    judged = len(calibration.judged())
    worst_text = (
        f"no decile holds {MIN_ESTIMATES} estimates"
        if worst is None
        else f"largest |observed - predicted| {worst:.3f} over the {judged} deciles with "
        f">= {MIN_ESTIMATES} estimates"
    )
    return (
        f"{calibration.count:,} estimates ({calibration.missed:,} for deadlines then missed), "
        f"Brier score {_brier(calibration.brier)}, {worst_text}"
    )


def _brier(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.4f}"
