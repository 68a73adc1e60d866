"""`quartermaster calibration --from FILE`: the reliability table of judged estimates."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path

from controller.cli import EXIT_INVALID, EXIT_OK, main
from controller.risk.recalibration import Judged, OutcomeLedger, RiskEstimate, judged_document

FIXED_NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
NOW = FIXED_NOW.timestamp()
DAY = 86_400.0


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err, now=lambda: FIXED_NOW)
    return code, out.getvalue(), err.getvalue()


def judged_file(path: Path) -> Path:
    """Gold: 2 deadlines a day ago, 0.2 (missed) and 0.4 (met); bronze: one at 0.9, met;
    and one gold resolved ten days ago, outside a 7-day window."""
    items = [
        Judged("vision/release@1", "gold", 0.2, NOW - 2 * DAY, True, NOW - DAY),
        Judged("vision/review@1", "gold", 0.4, NOW - 2 * DAY, False, NOW - DAY),
        Judged("nlp/eval@1", "bronze", 0.9, NOW - 2 * DAY, False, NOW - DAY),
        Judged("nlp/old@1", "gold", 0.5, NOW - 11 * DAY, True, NOW - 10 * DAY),
    ]
    path.write_text(json.dumps([judged_document(j) for j in items]))
    return path


def test_prints_the_table_brier_and_counts_of_the_window(tmp_path: Path) -> None:
    """Brier over the last 7 days: ((0.2-1)^2 + 0.4^2 + 0.9^2) / 3 = (0.64+0.16+0.81)/3."""
    code, out, err = run("calibration", "--from", str(judged_file(tmp_path / "j.json")))
    assert (code, err) == (EXIT_OK, "")
    assert "last 7 days" in out
    brier = (0.64 + 0.16 + 0.81) / 3
    assert "all tiers: 3 deadlines judged (1 missed); 3 estimates" in out
    assert f"Brier score {brier:.4f}" in out
    assert "tier gold: 2 deadlines judged (1 missed)" in out
    assert "tier bronze: 1 deadlines judged (0 missed)" in out
    assert "[0.9, 1.0]" in out


def test_a_longer_window_takes_the_older_deadline_in(tmp_path: Path) -> None:
    code, out, _ = run(
        "calibration", "--from", str(judged_file(tmp_path / "j.json")), "--days", "30"
    )
    assert code == EXIT_OK
    assert "all tiers: 4 deadlines judged (2 missed)" in out


def test_reads_an_outcome_ledger_summary(tmp_path: Path) -> None:
    ledger = OutcomeLedger()
    ledger.record(RiskEstimate("p/d@1", "gold", 0.3, NOW - DAY))
    ledger.resolve("p/d@1", missed=False, at=NOW - DAY / 2)
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps(ledger.to_dict()))
    code, out, _ = run("calibration", "--from", str(path))
    assert code == EXIT_OK
    assert "all tiers: 1 deadlines judged (0 missed)" in out
    assert "Brier score 0.0900" in out


def test_an_empty_window_says_so(tmp_path: Path) -> None:
    path = tmp_path / "none.json"
    path.write_text("[]")
    code, out, _ = run("calibration", "--from", str(path))
    assert code == EXIT_OK
    assert "no judged estimates" in out


def test_an_unreadable_file_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('[{"deadline": "x", "risk": 1.5, "at": 0, "missed": true}]')
    code, _, err = run("calibration", "--from", str(bad))
    assert code == EXIT_INVALID
    assert "judged estimate 0" in err
    code, _, err = run("calibration", "--from", str(tmp_path / "missing.json"))
    assert code == EXIT_INVALID
    assert "missing.json" in err
