"""A deadline that cannot be made, through a real API server: the controller tells the team at
once, with a DeadlineLost Event on the Workload, Lost in the project's status (which the
server's schema for it must take) and the metric, and explain lists the workload.

What is real and what is not is as in test_lanes (whose world this reuses): no Kueue runs and
Events are a stand-in custom resource on the CRD-only server. The clock is injected: the
example's llm-pretrain cutoff is Friday 18:00 Berlin, 101 hours (363,600 s) after
FIXED_MONDAY_NOON, on any date.

Why lost, by hand (controller.risk.urgency.chance_to_finish): a Workload declared at 200 hours
(720,000 s, spread 0.25) started now, after the slower launch of llm-pretrain's pools (the
h100's 600 s), finishes by the cutoff with chance
Phi((ln 363,000 - ln 720,000 + 0.25^2 / 2) / 0.25) = Phi(-2.614) = 0.45 %, under the policy's
lostBelow of 5 %. The 50-hour Workload beside it makes it (it is the lane test's, put on
on-demand), so it is not lost.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.kube import kinds
from controller.kube.client import KubeClient
from testenv.controlplane import ControlPlane
from tests.integration.test_lanes import (
    DEADLINE,
    NAMESPACE,
    PROJECT,
    World,
    deadline_workload,
    explain,
    world,
)

__all__ = ["world"]  # the fixture, shared with test_lanes

HOPELESS_HOURS = 200
CHANCE = 0.00447
"""Phi(-2.614), worked out above."""


def lost_events(kube: KubeClient) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.list(kinds.EVENT)[0]
        if e.get("reason") == "DeadlineLost" and e["regarding"]["kind"] == "Workload"
    ]


def test_a_workload_that_cannot_make_its_deadline_is_told_lost_at_once(
    world: World, control_plane: ControlPlane
) -> None:
    kube = world.kube
    world.add(deadline_workload("hopeless-0", hours=HOPELESS_HOURS))
    world.add(deadline_workload("tight-0"))

    result = world.reconcile()

    assert result.capacity is not None
    assert set(result.capacity.lost) == {(NAMESPACE, "hopeless-0")}
    assert result.capacity.lost[(NAMESPACE, "hopeless-0")] == pytest.approx(CHANCE, abs=1e-4)
    assert result.lost_told == 1
    [event] = lost_events(kube)
    assert (event["type"], event["regarding"]["name"]) == ("Warning", "hopeless-0")
    assert event["regarding"]["namespace"] == NAMESPACE
    assert f"deadline {DEADLINE} (" in event["note"]
    assert "0.4% chance to finish in time" in event["note"]
    assert world.sample("quartermaster_lost_workloads", project=PROJECT) == 1

    project = kube.get(kinds.TRAINING_PROJECT, PROJECT)
    assert project is not None
    status = project["status"]
    [deadline] = [d for d in status["deadlines"] if d["name"] == DEADLINE]
    assert (deadline["state"], deadline["lostWorkloads"]) == ("Lost", 1)
    assert status["lostWorkloads"] == 1
    assert status["lost"] == [
        {"namespace": NAMESPACE, "name": "hopeless-0", "deadline": DEADLINE, "chance": 0.004}
    ]

    shown = explain(control_plane.kubeconfig)
    assert "Lost: 1 waiting workload(s) cannot make their deadline" in shown
    [row] = [
        line for line in shown.splitlines() if line.strip().startswith(f"{NAMESPACE}/hopeless")
    ]
    assert row.split() == [f"{NAMESPACE}/hopeless-0", DEADLINE, "0.4%"]

    # The next pass tells no one again, and writes no status: nothing changed.
    again = world.reconcile()
    assert again.lost_told == 0
    assert again.status_writes == 0
    assert len(lost_events(kube)) == 1
    assert world.sample("quartermaster_lost_workloads", project=PROJECT) == 1
