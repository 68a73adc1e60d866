"""Outcomes judged once, the reliability table and a monotone recalibration
(controller.risk.recalibration), with hand-computed answers."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

import pytest

from controller.risk.recalibration import (
    IDENTITY,
    STRENGTH,
    Block,
    Judged,
    OutcomeLedger,
    RiskEstimate,
    by_tier,
    calibrate,
    calibration_document,
    deadline_id,
    decile_of,
    fit_judged,
    fit_recalibration,
    judged_document,
    outcome_blocks,
    pool_adjacent_violators,
    read_judged,
    reliability_rows,
    resolved_since,
)
from controller.sim.model import RiskRecord

HOUR = 3600.0


@dataclass(frozen=True)
class Pair:
    risk: float
    missed: bool


def table(*rows: tuple[float, int, int]) -> list[Pair]:
    """Pairs forming a reliability table: (risk, estimates, of them missed) per row."""
    return [Pair(risk, i < missed) for risk, count, missed in rows for i in range(count)]


def judged(deadline: str, tier: str, risk: float, missed: bool, at: float = 0.0) -> Judged:
    return Judged(deadline, tier, risk, at, missed, at + HOUR)


# -- reliability and Brier -----------------------------------------------------------------------


def test_brier_on_a_tiny_set() -> None:
    """(0.1 - 0)^2 + (0.8 - 1)^2 + (0.5 - 0)^2 + (0.3 - 1)^2 = 0.01 + 0.04 + 0.25 + 0.49 = 0.79,
    over 4: 0.1975."""
    pairs = [Pair(0.1, False), Pair(0.8, True), Pair(0.5, False), Pair(0.3, True)]
    result = calibrate(pairs)
    assert result.brier == pytest.approx(0.1975)
    assert (result.count, result.missed) == (4, 2)


def test_reliability_table_and_largest_judged_deviation() -> None:
    """100 estimates at 0.25 with 40 missed: deviation +0.15; 100 at 0.75 with 70 missed:
    -0.05; 10 at 0.05 all missed: +0.95 but under MIN_ESTIMATES, so not judged."""
    result = calibrate(table((0.25, 100, 40), (0.75, 100, 70), (0.05, 10, 10)))
    second, eighth, first = result.deciles[2], result.deciles[7], result.deciles[0]
    assert (second.count, second.mean_predicted, second.observed) == (100, 0.25, 0.4)
    assert eighth.deviation == pytest.approx(-0.05)
    assert first.deviation == pytest.approx(0.95)
    assert result.max_deviation() == pytest.approx(0.15)
    assert result.max_deviation(min_count=10) == pytest.approx(0.95)
    assert reliability_rows(result)[2] == [
        "[0.2, 0.3)", "100", "0.250", "0.400", "+0.150", "-", "-", "yes"
    ]  # fmt: skip
    assert calibration_document(result)["max_abs_deviation_judged"] == pytest.approx(0.15)


def test_a_deciles_evidence_is_counted_by_deadline() -> None:
    """[0.2, 0.3): deadline a estimated 4 times at 0.25 and missed (residuals 4 x 0.75 = 3),
    deadline b 4 times at 0.25 and met (4 x -0.25 = -1): 8 estimates, observed 0.5, deviation
    +0.25; two deadlines, standard error sqrt(3^2 + 1^2) / 8 = sqrt(10) / 8 = 0.395 (counted
    as 8 independent estimates it would be sqrt(0.25 / 8) = 0.177). [0.7, 0.8): one deadline
    c, 0.75 and missed: residual 0.25, standard error 0.25."""
    items = [judged("a", "gold", 0.25, True) for _ in range(4)]
    items += [judged("b", "gold", 0.25, False) for _ in range(4)]
    items.append(judged("c", "gold", 0.75, True))
    result = calibrate(items, deadline=lambda j: j.deadline_id)
    second, seventh = result.deciles[2], result.deciles[7]
    assert (second.count, second.deadlines) == (8, 2)
    assert second.deviation == pytest.approx(0.25)
    assert second.standard_error == pytest.approx(10**0.5 / 8)
    assert (seventh.count, seventh.deadlines) == (1, 1)
    assert seventh.standard_error == pytest.approx(0.25)
    empty = result.deciles[0]
    assert (empty.deadlines, empty.standard_error) == (0, None)
    assert reliability_rows(result)[2] == [
        "[0.2, 0.3)", "8", "0.250", "0.500", "+0.250", "2", "0.791", "no"
    ]  # fmt: skip
    row = calibration_document(result)["deciles"][2]
    assert (row["deadlines"], row["standard_error"]) == (2, pytest.approx(0.3953, abs=1e-4))
    # Without knowing the deadlines, none is claimed.
    assert calibrate(items).deciles[2].deadlines is None


def test_the_replay_records_are_scored_by_the_same_function() -> None:
    records = [
        RiskRecord(time=0.0, project="p", deadline="d", risk=0.2, missed=False),
        RiskRecord(time=1.0, project="p", deadline="d", risk=0.6, missed=True),
    ]
    assert calibrate(records).brier == pytest.approx((0.04 + 0.16) / 2)


def test_deciles_close_on_the_left_and_the_last_holds_one() -> None:
    assert [decile_of(r) for r in (0.0, 0.1, 0.0999, 0.9, 1.0)] == [0, 1, 0, 9, 9]
    with pytest.raises(ValueError):
        calibrate([Pair(1.5, True)])


# -- judged once ---------------------------------------------------------------------------------


def test_an_outcome_is_judged_once() -> None:
    ledger = OutcomeLedger(min_interval=0.0)
    d = deadline_id("vision", "release", 1_000_000.0)
    assert ledger.record(RiskEstimate(d, "gold", 0.3, 10.0))
    assert ledger.record(RiskEstimate(d, "gold", 0.5, 20.0))
    first = ledger.resolve(d, missed=True, at=100.0)
    assert [(j.risk, j.missed) for j in first] == [(0.3, True), (0.5, True)]
    assert ledger.resolve(d, missed=True, at=200.0) == ()  # resolved again: nothing more
    assert ledger.resolve(d, missed=False, at=300.0) == ()  # nor with another verdict
    assert not ledger.record(RiskEstimate(d, "gold", 0.9, 400.0))  # too late to count
    assert len(ledger.judged) == 2


def test_each_cutoff_of_a_schedule_is_its_own_deadline() -> None:
    ledger = OutcomeLedger()
    monday, tuesday = deadline_id("p", "daily", 86_400.0), deadline_id("p", "daily", 172_800.0)
    assert monday != tuesday
    ledger.record(RiskEstimate(monday, "t", 0.2, 0.0))
    ledger.resolve(monday, missed=False, at=86_400.0)
    assert ledger.record(RiskEstimate(tuesday, "t", 0.2, 90_000.0))


def test_a_deadline_never_estimated_judges_nothing() -> None:
    ledger = OutcomeLedger()
    assert ledger.resolve("p/d@1", missed=True, at=1.0) == ()
    assert not ledger.judged


def test_estimates_are_thinned_to_one_per_interval() -> None:
    """A pass every 60 s for 2 h with a 15 min interval: kept at 0, 900, ..., 6300 s: 8."""
    ledger = OutcomeLedger(min_interval=900.0)
    kept = sum(ledger.record(RiskEstimate("p/d@1", "t", 0.4, 60.0 * i)) for i in range(120))
    assert kept == 8
    assert ledger.pending_count() == 8


def test_a_long_open_deadline_keeps_a_bounded_even_record() -> None:
    """Every 900 s with 4 kept at most: the fifth halves them (0, 1800) and doubles the
    interval to 1800 s."""
    ledger = OutcomeLedger(min_interval=900.0, max_per_deadline=4)
    for i in range(5):
        ledger.record(RiskEstimate("p/d@1", "t", 0.1, 900.0 * i))
    assert [e.at for e in ledger._pending["p/d@1"].estimates] == [0.0, 1800.0, 3600.0]
    assert not ledger.record(RiskEstimate("p/d@1", "t", 0.1, 4500.0))  # 900 s: under 1800
    assert ledger.record(RiskEstimate("p/d@1", "t", 0.1, 5400.0))


def test_a_risk_outside_a_probability_is_not_recorded() -> None:
    ledger = OutcomeLedger()
    assert not ledger.record(RiskEstimate("p/d@1", "t", 1.2, 0.0))
    assert not ledger.record(RiskEstimate("p/d@1", "t", float("nan"), 0.0))


def test_the_ledger_survives_a_restart() -> None:
    ledger = OutcomeLedger(min_interval=0.0)
    ledger.record(RiskEstimate("p/a@1", "gold", 0.3, 1.0))
    ledger.record(RiskEstimate("p/b@1", "bronze", 0.6, 2.0))
    ledger.resolve("p/a@1", missed=False, at=5.0)
    restored = OutcomeLedger.from_dict(json.loads(json.dumps(ledger.to_dict())))
    assert list(restored.judged) == list(ledger.judged)
    assert restored.resolve("p/a@1", missed=True, at=6.0) == ()  # still judged once
    assert restored.resolve("p/b@1", missed=True, at=7.0) == (
        Judged("p/b@1", "bronze", 0.6, 2.0, True, 7.0),
    )


def test_judged_documents_round_trip_and_bad_ones_are_named() -> None:
    items = [judged("p/a@1", "gold", 0.25, True, at=3.0)]
    assert read_judged([judged_document(j) for j in items]) == items
    with pytest.raises(ValueError, match="judged estimate 1"):
        read_judged([judged_document(items[0]), {"deadline": "x", "risk": 2, "at": 0}])
    with pytest.raises(ValueError, match="missed"):
        read_judged([{"deadline": "x", "risk": 0.5, "at": 0, "missed": "yes"}])


def test_resolved_since_and_by_tier() -> None:
    items = [judged("a", "gold", 0.1, False, at=0.0), judged("b", "bronze", 0.2, True, at=HOUR)]
    assert resolved_since(items, 1.5 * HOUR) == items[1:]
    assert list(by_tier(items)) == ["bronze", "gold"]


# -- the recalibration map -----------------------------------------------------------------------


def test_pool_adjacent_violators_by_hand() -> None:
    """(0.1, 0.3), (0.3, 0.2), (0.5, 0.6) of weights 1, 3, 1: the first two violate and pool
    to x = (0.1 + 0.9) / 4 = 0.25, y = (0.3 + 0.6) / 4 = 0.225."""
    blocks = pool_adjacent_violators([(0.1, 0.3, 1.0), (0.3, 0.2, 3.0), (0.5, 0.6, 1.0)])
    assert blocks == (
        Block(pytest.approx(0.25), pytest.approx(0.225), 4.0),  # type: ignore[arg-type]
        Block(0.5, 0.6, 1.0),
    )


def test_pool_adjacent_violators_pools_back_through_several_blocks() -> None:
    """y = 0.5, 0.6, 0.1 at equal weight: the last violates the pooled pair too: one block."""
    blocks = pool_adjacent_violators([(0.1, 0.5, 1.0), (0.2, 0.6, 1.0), (0.3, 0.1, 1.0)])
    assert len(blocks) == 1
    assert blocks[0].y == pytest.approx(0.4)
    assert blocks[0].x == pytest.approx(0.2)


def test_outcome_blocks_are_the_pooled_points_to_the_bit() -> None:
    """Outcomes counted per distinct risk give the very blocks pooling them one by one gives:
    risks of few distinct values (out-of-range ones clamped), missed in a pattern that makes
    violators to pool. Compared with ==, not approx: the fit is refitted from these."""
    risks = [(i % 23) / 22 for i in range(2_000)] + [-0.5, 1.7, 0.0, 1.0]
    missed = [(i * 7919) % 10 < 3 + (i % 23) % 5 for i in range(len(risks))]
    by_points = pool_adjacent_violators(
        (min(max(r, 0.0), 1.0), 1.0 if m else 0.0, 1.0) for r, m in zip(risks, missed, strict=True)
    )
    assert len(by_points) < 23  # some pooled
    assert outcome_blocks(risks, missed) == by_points
    pairs = [Pair(r, m) for r, m in zip(risks, missed, strict=True)]
    learned = fit_recalibration(pairs, strength=0.0)
    assert learned.xs == tuple(b.x for b in by_points)
    assert learned.ys == tuple(b.y for b in by_points)
    assert fit_recalibration(iter(pairs), strength=0.0) == learned


def test_recalibration_map_on_a_constructed_reliability_table() -> None:
    """A pessimistic model (the seed-7 trace's shape): 100 estimates at 0.25 of which 6
    missed, 100 at 0.45 of which 11, 100 at 0.75 of which 15. Already monotone, so the blocks
    are the rows; with no shrinkage the map gives the observed frequencies at the rows and
    interpolates between: 0.6 -> 0.11 + 0.04 * 0.5 = 0.13."""
    pairs = table((0.25, 100, 6), (0.45, 100, 11), (0.75, 100, 15))
    learned = fit_recalibration(pairs, strength=0.0)
    assert learned.xs == (0.25, 0.45, 0.75)
    assert learned.ys == pytest.approx((0.06, 0.11, 0.15))
    assert learned(0.25) == pytest.approx(0.06)
    assert learned(0.6) == pytest.approx(0.13)
    assert learned(0.1) == pytest.approx(0.06)  # constant beyond the ends
    assert learned(1.0) == pytest.approx(0.15)
    calibrated = [Pair(learned(p.risk), p.missed) for p in pairs]
    before, after = calibrate(pairs).brier, calibrate(calibrated).brier
    assert before is not None and after is not None
    assert after < before


def test_shrinkage_with_few_deadlines() -> None:
    """Evidence 5 deadlines against STRENGTH 20: weight 0.2. At 0.45 (block value 0.11) the
    map gives 0.2 * 0.11 + 0.8 * 0.45 = 0.382."""
    pairs = table((0.25, 100, 6), (0.45, 100, 11), (0.75, 100, 15))
    learned = fit_recalibration(pairs, evidence=5.0)
    assert STRENGTH == 20.0
    assert learned.weight == pytest.approx(0.2)
    assert learned(0.45) == pytest.approx(0.2 * 0.11 + 0.8 * 0.45)
    plenty = fit_recalibration(pairs, evidence=5_000.0)(0.45)
    assert plenty == pytest.approx(5000 / 5020 * 0.11 + 20 / 5020 * 0.45)


def test_no_evidence_is_the_identity() -> None:
    assert fit_recalibration([]) is IDENTITY
    assert [IDENTITY(r) for r in (0.0, 0.37, 1.0)] == [0.0, 0.37, 1.0]


def test_a_calibrated_model_maps_to_itself() -> None:
    """Observed equals predicted at every row: within the rows' span the map is the identity
    whatever the shrinkage (iso(r) = r there, and the blend of r with r is r)."""
    pairs = table((0.1, 100, 10), (0.3, 100, 30), (0.5, 100, 50), (0.8, 100, 80))
    for strength in (0.0, 20.0):
        learned = fit_recalibration(pairs, strength=strength)
        for r in (0.1, 0.2, 0.35, 0.5, 0.65, 0.8):
            assert learned(r) == pytest.approx(r)


@pytest.mark.parametrize("strength", [0.0, 20.0, 1e6])
def test_the_map_is_monotone(strength: float) -> None:
    """Rows that break monotonicity (0.5 observed less often than 0.3): the map never
    decreases, on a fine grid, shrunk or not."""
    pairs = table((0.1, 50, 20), (0.3, 50, 30), (0.5, 50, 5), (0.7, 50, 40), (0.9, 10, 2))
    learned = fit_recalibration(pairs, strength=strength)
    grid = [i / 200 for i in range(201)]
    values = [learned(r) for r in grid]
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(values))
    assert all(0.0 <= v <= 1.0 for v in values)


def test_estimates_fit_the_map_and_deadlines_shrink_it() -> None:
    """Deadline "long" estimated 100 times at 0.5 and missed; three others once each at 0.5,
    met. Per estimate: iso(0.5) = 100/103. Four deadlines: weight 4 / 24, so the calibrated
    0.5 is 4/24 * 100/103 + 20/24 * 0.5."""
    items = [judged("long", "gold", 0.5, True, at=float(i)) for i in range(100)]
    items += [judged(f"short{i}", "gold", 0.5, False) for i in range(3)]
    maps = fit_judged(items)
    assert maps.pooled.weight == pytest.approx(4 / 24)
    assert maps("gold", 0.5) == pytest.approx(4 / 24 * 100 / 103 + 20 / 24 * 0.5)


def test_one_map_for_every_tier() -> None:
    """Gold: 40 deadlines at 0.5, 1 in 4 missed; bronze: one at 0.5, missed. Pooled over 41
    deadlines: iso(0.5) = 11/41, weight 41/61; every tier, and a tier never judged, gets it."""
    items = [judged(f"g{i}", "gold", 0.5, i % 4 == 0) for i in range(40)]
    items.append(judged("b0", "bronze", 0.5, True))
    maps = fit_judged(items)
    pooled = 41 / 61 * (11 / 41) + 20 / 61 * 0.5
    for tier in ("gold", "bronze", "never-judged"):
        assert maps(tier, 0.5) == pytest.approx(pooled)


def test_evidence_counts_deadlines_not_estimates() -> None:
    """One deadline estimated 500 times is one piece of evidence: weight 1 / 21."""
    items = [judged("only", "gold", 0.2, True, at=float(i)) for i in range(500)]
    maps = fit_judged(items)
    assert maps.pooled.weight == pytest.approx(1 / 21)


def test_same_table_as_the_replay_prints_today() -> None:
    """Both compute the same document from the same records, the replay telling which
    deadline each record is of."""
    from controller.sim import calibration as replay  # noqa: PLC0415 - only this test

    records = [
        RiskRecord(time=float(i), project="p", deadline="d", risk=(i % 11) / 10, missed=i % 3 == 0)
        for i in range(300)
    ]
    assert calibration_document(
        calibrate(records, deadline=lambda r: (r.project, r.deadline))
    ) == replay.calibration_document(replay.calibrate(records))
