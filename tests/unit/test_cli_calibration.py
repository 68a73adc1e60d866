"""`quartermaster calibration`: the reliability table of judged estimates, from a file or
from the ConfigMap the controller keeps them in on the live cluster."""

from __future__ import annotations

import copy
import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest

from controller import names
from controller.cli import EXIT_INVALID, EXIT_OK, main
from controller.kube.client import KubeClient
from controller.reconcile.learned_store import config_map, encode, read_config_map
from controller.reconcile.learning import OutcomeLearning
from controller.risk.recalibration import Judged, OutcomeLedger, RiskEstimate, judged_document
from testenv.memoryserver import MemoryServer

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
    # Each decile says how many deadlines stand behind it: one each here.
    assert "deadlines" in out and "+/- 2 s.e." in out
    row = next(line for line in out.splitlines() if line.strip().startswith("[0.2, 0.3)"))
    assert row.split()[2:] == ["1", "0.200", "1.000", "+0.800", "1", "1.600", "no"]


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


def learned_config_map() -> dict[str, Any]:
    """The ConfigMap a controller keeps what it learned in: one gold deadline judged a day
    ago, missed at 0.2, and one open."""
    learning = OutcomeLearning()
    learning.ledger.record(RiskEstimate("p/d@1", "gold", 0.2, NOW - 2 * DAY))
    learning.ledger.resolve("p/d@1", missed=True, at=NOW - DAY)
    learning.ledger.record(RiskEstimate("p/d@2", "gold", 0.7, NOW - DAY))
    stored = config_map(names.DEFAULT_NAMESPACE, encode(learning.summary()))
    return cast(dict[str, Any], json.loads(json.dumps(stored)))


class Cluster(MemoryServer):
    """The in-memory stand-in for an API server that serves ConfigMaps (a fake, said so:
    this project's test API server serves none), as `KubeClient.from_kubeconfig` gives it."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        super().__init__(core_v1=True)
        for obj in objects:
            self.put(copy.deepcopy(obj))
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    "document",
    [
        pytest.param(learned_config_map(), id="the ConfigMap, as kubectl get -o json prints it"),
        pytest.param(
            read_config_map(learned_config_map()), id="what the controller learned, as JSON"
        ),
    ],
)
def test_reads_what_the_controller_keeps_from_a_file(tmp_path: Path, document: Any) -> None:
    path = tmp_path / "learned.json"
    path.write_text(json.dumps(document))
    code, out, err = run("calibration", "--from", str(path))
    assert (code, err) == (EXIT_OK, "")
    assert "all tiers: 1 deadlines judged (1 missed)" in out
    assert "Brier score 0.6400" in out


def test_reads_the_live_cluster_without_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Cluster(learned_config_map())
    asked: list[tuple[str | None, str | None]] = []

    def connect(path: str | None, *, context: str | None = None, **_: Any) -> Cluster:
        asked.append((path, context))
        return cluster

    monkeypatch.setattr(KubeClient, "from_kubeconfig", connect)
    code, out, err = run("calibration", "--kubeconfig", "k.yaml", "--context", "prod")
    assert (code, err) == (EXIT_OK, "")
    assert asked == [("k.yaml", "prod")] and cluster.closed
    assert "tier gold: 1 deadlines judged (1 missed)" in out

    monkeypatch.setattr(KubeClient, "from_kubeconfig", lambda *a, **k: Cluster())
    code, out, err = run("calibration")
    assert (code, out) == (EXIT_INVALID, "")
    assert "no ConfigMap quartermaster-system/quartermaster-learned" in err

    unreadable = learned_config_map()
    unreadable["data"]["version"] = "0"
    monkeypatch.setattr(KubeClient, "from_kubeconfig", lambda *a, **k: Cluster(unreadable))
    code, _, err = run("calibration")
    assert code == EXIT_INVALID
    assert "quartermaster-learned: format version '0'" in err
