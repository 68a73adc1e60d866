"""The calibration arithmetic on constructed risk logs, every answer worked out by hand.

`LOG` holds eight estimates in three deciles:

- [0.0, 0.1): risks 0.02, 0.04, 0.06, 0.08, the last one's deadline missed: mean 0.05,
  observed 1/4, deviation +0.2;
- [0.3, 0.4): risks 0.3 (missed) and 0.35: mean 0.325, observed 0.5, deviation +0.175;
- [0.9, 1.0]: risks 0.9 and 1.0, both missed: mean 0.95, observed 1, deviation +0.05.

Brier score: (0.02^2 + 0.04^2 + 0.06^2 + 0.92^2 + 0.7^2 + 0.35^2 + 0.1^2 + 0^2) / 8
= (0.0004 + 0.0016 + 0.0036 + 0.8464 + 0.49 + 0.1225 + 0.01 + 0) / 8 = 1.4745 / 8 = 0.1843125.
"""

from __future__ import annotations

import math

import pytest

from controller.sim.calibration import (
    MIN_ESTIMATES,
    calibrate,
    calibrate_recalibrated,
    calibration_document,
    decile_of,
    describe,
    reliability_rows,
)
from controller.sim.model import RiskRecord


def record(risk: float, missed: bool, *, time: float = 0.0) -> RiskRecord:
    return RiskRecord(time=time, project="vision", deadline="d4", risk=risk, missed=missed)


LOG = [
    record(0.02, False),
    record(0.04, False),
    record(0.06, False),
    record(0.08, True),
    record(0.3, True),
    record(0.35, False),
    record(0.9, True),
    record(1.0, True),
]


@pytest.mark.parametrize(
    ("risk", "decile"),
    [
        pytest.param(0.0, 0, id="no risk is the first decile"),
        pytest.param(0.0999, 0, id="just under 0.1 is still the first"),
        pytest.param(0.1, 1, id="0.1 opens the second decile"),
        pytest.param(0.3, 3, id="0.3 opens [0.3, 0.4), though 0.3 * 10 is not exactly 3"),
        pytest.param(0.7, 7, id="0.7 opens [0.7, 0.8)"),
        pytest.param(0.95, 9, id="0.95 is in the last decile"),
        pytest.param(1.0, 9, id="certainty closes the last decile"),
    ],
)
def test_decile_of(risk: float, decile: int) -> None:
    assert decile_of(risk) == decile


@pytest.mark.parametrize("risk", [-0.01, 1.01, math.nan], ids=["negative", "over 1", "NaN"])
def test_a_risk_outside_0_to_1_is_refused(risk: float) -> None:
    with pytest.raises(ValueError, match="probability in"):
        decile_of(risk)
    with pytest.raises(ValueError, match="risk record of vision/d4 at 7 s"):
        calibrate([record(0.5, False), record(risk, True, time=7.0)])


def test_the_reliability_table_by_hand() -> None:
    got = calibrate(LOG)
    assert (got.count, got.missed) == (8, 4)
    filled = {i: d for i, d in enumerate(got.deciles) if d.count}
    assert sorted(filled) == [0, 3, 9]
    expected = {0: (4, 0.05, 0.25, 0.2), 3: (2, 0.325, 0.5, 0.175), 9: (2, 0.95, 1.0, 0.05)}
    for index, (count, predicted, observed, deviation) in expected.items():
        decile = filled[index]
        assert decile.count == count
        assert decile.mean_predicted == pytest.approx(predicted)
        assert decile.observed == pytest.approx(observed)
        assert decile.deviation == pytest.approx(deviation)
        # Every estimate is of one deadline (vision/d4): one draw a decile, so the deviation's
        # standard error counted by deadline is its whole size.
        assert decile.deadlines == 1
        assert decile.standard_error == pytest.approx(abs(deviation))
    empty = got.deciles[5]
    assert (empty.count, empty.mean_predicted, empty.observed, empty.deviation) == (
        0,
        None,
        None,
        None,
    )
    assert [d.label for d in got.deciles][::3] == [
        "[0.0, 0.1)",
        "[0.3, 0.4)",
        "[0.6, 0.7)",
        "[0.9, 1.0]",
    ]


def test_the_recalibrated_table_counts_its_deadlines() -> None:
    """Calibrated 0.4 twice for p/a (missed: residuals 2 x 0.6 = 1.2) and twice for p/b (met:
    2 x -0.4 = -0.8): observed 0.5, deviation +0.1, 2 deadlines, standard error
    sqrt(1.2^2 + 0.8^2) / 4 = sqrt(2.08) / 4."""
    log = [
        RiskRecord(float(i), "p", name, 0.9, missed, calibrated=0.4)
        for name, missed in (("a", True), ("b", False))
        for i in range(2)
    ]
    got = calibrate_recalibrated(log)
    assert got is not None
    decile = got.deciles[4]
    assert (decile.count, decile.deadlines) == (4, 2)
    assert decile.deviation == pytest.approx(0.1)
    assert decile.standard_error == pytest.approx(2.08**0.5 / 4)


def test_the_brier_score_by_hand() -> None:
    assert calibrate(LOG).brier == pytest.approx(1.4745 / 8)


@pytest.mark.parametrize(
    ("min_count", "deviation"),
    [
        pytest.param(2, 0.2, id="every filled decile judged: the first is worst"),
        pytest.param(3, 0.2, id="only the first decile holds three"),
        pytest.param(5, None, id="no decile holds five: nothing judged"),
        pytest.param(MIN_ESTIMATES, None, id="the goal's 100: nothing judged"),
    ],
)
def test_the_largest_deviation_counts_only_deciles_with_enough_estimates(
    min_count: int, deviation: float | None
) -> None:
    got = calibrate(LOG).max_deviation(min_count)
    assert got == (None if deviation is None else pytest.approx(deviation))


def test_the_goal_measure_on_a_log_of_hundreds() -> None:
    """100 estimates of 0.3, 30 missed (deviation 0); 200 of 0.75, 140 missed (observed 0.7,
    deviation -0.05); 50 of 0.05, 25 missed (deviation +0.45, but only 50: not judged)."""
    log = (
        [record(0.3, i < 30) for i in range(100)]
        + [record(0.75, i < 140) for i in range(200)]
        + [record(0.05, i < 25) for i in range(50)]
    )
    got = calibrate(log)
    assert [d.count for d in got.judged()] == [100, 200]
    assert got.max_deviation() == pytest.approx(0.05)
    assert got.deciles[0].deviation == pytest.approx(0.45)
    # Brier: 30 x 0.7^2 + 70 x 0.3^2 + 140 x 0.25^2 + 60 x 0.75^2 + 25 x 0.95^2 + 25 x 0.05^2
    brier = (30 * 0.49 + 70 * 0.09 + 140 * 0.0625 + 60 * 0.5625 + 25 * 0.9025 + 25 * 0.0025) / 350
    assert got.brier == pytest.approx(brier)


def test_no_estimates_have_no_score() -> None:
    got = calibrate([])
    assert (got.count, got.missed, got.brier, got.max_deviation()) == (0, 0, None, None)
    assert len(got.deciles) == 10 and all(d.count == 0 for d in got.deciles)
    assert describe(got) == "no risk estimates"


def test_the_document_and_the_rows_carry_the_table() -> None:
    got = calibrate(LOG)
    document = calibration_document(got)
    assert document["estimates"] == 8 and document["missed"] == 4
    assert document["brier_score"] == pytest.approx(0.1843125)
    assert document["min_estimates_judged"] == MIN_ESTIMATES
    assert document["max_abs_deviation_judged"] is None
    assert document["deciles"][3] == {
        "range": "[0.3, 0.4)",
        "count": 2,
        "mean_predicted": pytest.approx(0.325),
        "observed": 0.5,
        "deviation": pytest.approx(0.175),
        "deadlines": 1,
        "standard_error": pytest.approx(0.175),
    }
    rows = reliability_rows(got)
    assert rows[0] == ["[0.0, 0.1)", "4", "0.050", "0.250", "+0.200", "1", "0.400", "no"]
    assert rows[5] == ["[0.5, 0.6)", "0", "-", "-", "-", "0", "-", "no"]
    assert "Brier score 0.1843" in describe(got)
    assert f"no decile holds {MIN_ESTIMATES} estimates" in describe(got)
