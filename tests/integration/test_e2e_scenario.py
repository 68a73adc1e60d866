"""The e2e scenario runner, locally, as CI runs it: `python -m e2e.scenario --local`.

Everything is real but the cluster's other controllers: its own etcd and API server with the
upstream CRDs, an empty Prometheus, and the controller as a separate process with leader
election. No Kueue admits the Workloads and no Karpenter provisions nodes (e2e/kind.sh runs the
same scenario with Kueue installed). The runner fails on its own when a step does not happen;
this test also checks the timeline it writes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from e2e.scenario import FLOOR

REPO = Path(__file__).resolve().parents[2]


def test_risk_rises_the_mix_moves_and_falls_back(tmp_path: Path) -> None:
    timeline = tmp_path / "timeline.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "e2e.scenario",
            "--local",
            "--json",
            str(timeline),
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    log = (tmp_path / "logs" / "controller.log").read_text(errors="replace")
    assert run.returncode == 0, (
        f"{run.stdout}\n{run.stderr}\n--- controller log tail:\n{log[-3000:]}"
    )
    steps = json.loads(timeline.read_text())["steps"]

    baseline, risen, moved, done, back = steps
    assert baseline["on_demand_limit"] == FLOOR
    assert risen["risk"] > 0.2
    assert moved["on_demand_limit"] > FLOOR
    assert moved["on_demand_quota"] > baseline["on_demand_quota"]
    assert moved["spot_limit"] < baseline["spot_limit"]
    assert done["risk"] < 0.05
    assert (back["on_demand_limit"], back["on_demand_quota"], back["spot_limit"]) == (
        FLOOR,
        baseline["on_demand_quota"],
        baseline["spot_limit"],
    )
    assert '"level": "error"' not in log
