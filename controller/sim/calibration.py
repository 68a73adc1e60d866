"""Whether the policy's deadline risks mean what they say: reliability by decile, Brier score.

A controller that says "risk 0.3" should see three deadlines in ten missed among the times it
said so. The replay records every risk the policy estimated with the outcome of that deadline
(`RunResult.risk_log`), raw and as the online recalibration made it (`controller.sim.judging`),
and this module scores the records with the controller's own arithmetic
(`controller.risk.recalibration`), so the replay and `quartermaster calibration` print the same
table:

- **Reliability table**: the records binned by predicted risk into deciles [0, 0.1), [0.1,
  0.2), ..., [0.9, 1.0] (the last one closed, so a risk of exactly 1 has a bin). Per decile:
  how many estimates, their mean predicted risk, the observed frequency of misses, and the
  deviation, observed minus mean predicted (positive: the risk was understated); the distinct
  deadlines behind it and twice the deviation's standard error counted by deadline.
- **Brier score**: the mean of (risk - outcome)^2 with outcome 1 for a miss, 0 for a hit; 0 is
  perfect, and always saying 0.5 scores 0.25.
- **Largest deviation**: the largest |deviation| over the deciles holding at least
  `MIN_ESTIMATES` estimates, the goal's measure. A decile with fewer has an observed
  frequency too noisy to judge (with 100 estimates one standard error at a true rate of 0.5
  is 0.05), so it is shown but not judged.

Each pass re-estimates every open deadline, so one deadline contributes many records, and its
records share one outcome: the table weighs deadlines by how long they stayed open, and its
counts overstate the independent evidence. This is the measure the issue asks for; the
table's deadlines and standard errors say how much evidence a decile's count holds.

Pure: records in, figures out; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from controller.risk import recalibration
from controller.risk.recalibration import (
    DECILES,
    JUDGED_HEADER,
    MIN_ESTIMATES,
    RELIABILITY_HEADER,
    Calibration,
    Decile,
    calibration_document,
    decile_of,
    describe,
    reliability_rows,
)
from controller.sim.model import RiskRecord

__all__ = [
    "DECILES",
    "JUDGED_HEADER",
    "MIN_ESTIMATES",
    "RELIABILITY_HEADER",
    "Calibration",
    "Decile",
    "calibrate",
    "calibrate_recalibrated",
    "calibration_document",
    "decile_of",
    "describe",
    "reliability_rows",
]


def calibrate(records: Iterable[RiskRecord]) -> Calibration:
    """The reliability table and Brier score of `records`' raw risks.

    Raises ValueError naming the record when a risk is outside [0, 1].
    """
    records = list(records)
    try:
        return recalibration.calibrate(records, deadline=_deadline)
    except ValueError as exc:
        bad = next(r for r in records if not 0.0 <= r.risk <= 1.0)
        raise ValueError(
            f"risk record of {bad.project}/{bad.deadline} at {bad.time:g} s: "
            f"{str(exc).split(': ', 1)[-1]}"
        ) from None


@dataclass(frozen=True)
class _Recalibrated:
    """A record scored by its calibrated risk."""

    risk: float
    missed: bool
    deadline: tuple[str, str]


def _deadline(record: RiskRecord) -> tuple[str, str]:
    """The deadline a record is an estimate of: the replay names each deadline of a project
    once (one cutoff), so (project, name) is one outcome."""
    return (record.project, record.deadline)


def _recalibrated_deadline(record: _Recalibrated) -> tuple[str, str]:
    return record.deadline


def calibrate_recalibrated(records: Sequence[RiskRecord]) -> Calibration | None:
    """The same table over the calibrated risks; None when some record has none (a run that
    did not recalibrate)."""
    if not records or any(r.calibrated is None for r in records):
        return None
    return recalibration.calibrate(
        (
            _Recalibrated(r.calibrated, r.missed, (r.project, r.deadline))
            for r in records
            if r.calibrated is not None
        ),
        deadline=_recalibrated_deadline,
    )
