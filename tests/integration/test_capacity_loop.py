"""Deadline risk moves the spot/on-demand mix, end to end, through a real API server.

What is real: the API server and etcd enforcing the real Kueue and Karpenter schemas, every
object the reconciler writes and reads back, the status subresources, the Workloads (created as
Kueue records them), a Prometheus server (empty: it makes history available, which lowering
requires) and `quartermaster explain` run as a process. Stand-ins: Event is a custom resource
on this server (testenv/standins); no Kueue or Karpenter controller runs, so nothing
admits a Workload or provisions a node; the clock is injected (the reconciler and its Event
recorder read the same one), so an evaluation window or a cooldown passes in one step and the
test passes on any date. Passes run in-process so each write can be counted.

The scenario: llm-pretrain (production tier, 64 a100 + 32 h100 GPUs) has a weekly cutoff on
Fridays at 18:00 Europe/Berlin. On a Monday noon, N pending Workloads of 16 GPUs and 30 hours
each (checkpointing every 4 hours) count toward it. 15 of them put the cutoff at risk (about
0.5, above the 0.2 raise threshold) and one 16-GPU step fixes it; 24 cannot all make it
whatever the mix, so the controller climbs as far as llm-pretrain's quota goes.
"""

from __future__ import annotations

import copy
import itertools
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from controller import names
from controller.capacity import whole_nodes
from controller.decide.mix import Action, Decision, Reason
from controller.history import HistoryReader
from controller.kube import kinds
from controller.kube.client import KubeClient
from controller.kube.events import EventRecorder
from controller.metrics import Metrics
from controller.reconcile.diff import ref, show_ref
from controller.reconcile.reconciler import Reconciler, ReconcileResult
from testenv.controlplane import ControlPlane
from testenv.prometheus import PrometheusServer
from tests.clock import Clock
from tests.integration.test_reconcile import apply_doc, condition, example_documents

REPO_ROOT = Path(__file__).parents[2]
FIXED_MONDAY_NOON = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
"""The scenario's clock starts here, on purpose: the risk figures below are calibrated to a
cutoff 101 hours away, which a date taken from the real clock would move with DST and weekday.
Nothing in these tests reads the real clock for a decision."""
CUTOFF = "2026-11-27T17:00:00Z"
"""llm-pretrain's next cutoff after FIXED_MONDAY_NOON: Friday 18:00 Berlin, 17:00 UTC."""
PROJECT = "llm-pretrain"
NAMESPACE = "llm"
DEADLINE = "weekly-checkpoint"
POLICY = "gpu-fleet"
POOL = "a100"
GPU = "nvidia.com/gpu"
WINDOW = 600
COOLDOWN = 1800
MAX_STEP = 16
FLOOR = 16
"""The a100 floor: the policy's floorGpus, and the production tier's reservation."""
AT_RISK = 15
"""Workloads that put the cutoff at risk, and that one 16-GPU step fixes."""
HOPELESS = 24
"""Workloads that cannot all make the cutoff, whatever the mix."""
BOOST_VALUE = 5000


def deadline_workload(
    index: int,
    *,
    deadline: str | None = DEADLINE,
    prefix: str = "pretrain",
    capacity_type: str | None = None,
) -> dict[str, Any]:
    """A pending Workload of 2 pods x 8 GPUs, 30 hours long, checkpointing every 4 hours;
    with `capacity_type`, its owner chose it (so no lane moves it)."""
    labels = {names.LABEL_DEADLINE: deadline} if deadline else {}
    selector = {names.CAPACITY_TYPE_LABEL: capacity_type} if capacity_type else {}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"{prefix}-{index}",
            "namespace": NAMESPACE,
            "labels": labels,
            "annotations": {
                names.ANNOTATION_EXPECTED_DURATION: str(30 * 3600),
                names.ANNOTATION_CHECKPOINT_INTERVAL: str(4 * 3600),
            },
        },
        "spec": {
            "queueName": PROJECT,
            "priority": 100000,
            "podSets": [
                {
                    "name": "main",
                    "count": 2,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "train",
                                    "image": "trainer:1",
                                    "resources": {"requests": {GPU: "8"}},
                                }
                            ],
                            "restartPolicy": "Never",
                            **({"nodeSelector": selector} if selector else {}),
                        }
                    },
                }
            ],
        },
    }


def nodepool_limit(kube: KubeClient, capacity_type: str, pool: str = POOL) -> int:
    nodepool = kube.get(kinds.NODE_POOL, names.nodepool_name(pool, capacity_type))
    assert nodepool is not None
    return int(nodepool["spec"]["limits"][GPU])


def flavor_gpus(kube: KubeClient, capacity_type: str, pool: str = POOL) -> int:
    """llm-pretrain's GPU nominal quota on the pool's flavor of that capacity type."""
    queue = kube.get(kinds.CLUSTER_QUEUE, PROJECT)
    assert queue is not None
    flavor = names.flavor_name(pool, capacity_type)
    return sum(
        int(resource["nominalQuota"])
        for group in queue["spec"]["resourceGroups"]
        for f in group["flavors"]
        if f["name"] == flavor
        for resource in f["resources"]
        if resource["name"] == GPU
    )


@dataclass(frozen=True)
class Mix:
    """What the cluster says about the a100 mix, read back from the API server."""

    on_demand: int
    spot: int
    quota_on_demand: int
    quota_spot: int


def read_mix(kube: KubeClient) -> Mix:
    return Mix(
        nodepool_limit(kube, names.ON_DEMAND),
        nodepool_limit(kube, names.SPOT),
        flavor_gpus(kube, names.ON_DEMAND),
        flavor_gpus(kube, names.SPOT),
    )


def pool_entry(kube: KubeClient, pool: str = POOL) -> dict[str, Any]:
    policy = kube.get(kinds.CAPACITY_POLICY, POLICY)
    assert policy is not None
    entry: dict[str, Any] = next(p for p in policy["status"]["pools"] if p["pool"] == pool)
    return entry


@dataclass
class World:
    kube: KubeClient
    clock: Clock
    reconciler: Reconciler
    policy: dict[str, Any]
    """The CapacityPolicy as applied (by "gitops")."""

    def reconcile(self) -> tuple[ReconcileResult, int]:
        """One pass, and how many writes it sent to the API server (Events included)."""
        before = self.kube.stats.writes
        result = self.reconciler.reconcile()
        return result, self.kube.stats.writes - before

    def add_workloads(self, count: int, *, start: int = 0) -> None:
        for index in range(start, start + count):
            self.kube.apply(kinds.WORKLOAD, deadline_workload(index), field_manager="kueue")

    def delete_workloads(self) -> None:
        items, _ = self.kube.list(kinds.WORKLOAD, namespace=NAMESPACE)
        for item in items:
            self.kube.delete(kinds.WORKLOAD, item["metadata"]["name"], NAMESPACE)


def decision(result: ReconcileResult, pool: str = POOL) -> Decision:
    assert result.capacity is not None
    return next(d for d in result.capacity.decisions if d.pool == pool)


def object_writes(result: ReconcileResult) -> int:
    return result.created + result.updated + result.pruned + result.boosts_written


@pytest.fixture(scope="module")
def prometheus() -> Iterator[PrometheusServer]:
    """An empty Prometheus: history is available (and empty), so lowering is allowed."""
    with PrometheusServer() as server:
        yield server


PolicyEdit = Callable[[dict[str, Any]], None]


def start(
    kube: KubeClient,
    prometheus: PrometheusServer,
    *,
    workloads: int,
    edit: PolicyEdit | None = None,
) -> World:
    """The example policy (Prometheus pointed at the test server), workloads, one pass."""
    policy: dict[str, Any] = {}
    for doc in example_documents():
        if doc["kind"] == "CapacityPolicy":
            doc["spec"]["prometheus"]["url"] = prometheus.url
            if edit is not None:
                edit(doc)
            policy = doc
        apply_doc(kube, doc)
    clock = Clock(FIXED_MONDAY_NOON)
    world = World(
        kube,
        clock,
        Reconciler(
            kube,
            events=EventRecorder(kube, reporting_instance="test", wall_clock=clock),
            wall_clock=clock,
            metrics=Metrics(),
            history=HistoryReader(),
        ),
        policy,
    )
    world.add_workloads(workloads)
    world.reconcile()
    return world


@dataclass(frozen=True)
class Raised:
    world: World
    before: Mix
    after: Mix
    result: ReconcileResult


@pytest.fixture
def raised(kube: KubeClient, prometheus: PrometheusServer) -> Raised:
    """15 at-risk workloads; one pass at Monday noon, one a window later (the raise)."""
    world = start(kube, prometheus, workloads=AT_RISK)
    before = read_mix(kube)
    world.clock.advance(WINDOW + 1)
    result, _ = world.reconcile()
    return Raised(world, before, read_mix(kube), result)


def climb(world: World, *, passes: int = 8) -> list[Decision]:
    """Passes a window apart until the a100 mix stops rising; the raises on the way."""
    raises: list[Decision] = []
    for _ in range(passes):
        world.clock.advance(WINDOW + 1)
        result, _ = world.reconcile()
        made = decision(result)
        if made.action != Action.RAISE:
            return raises
        raises.append(made)
    pytest.fail(f"still raising after {passes} passes: {raises}")


# ------------------------------------------------------------------ raising
class TestRaise:
    def test_within_the_window_the_mix_holds(
        self, kube: KubeClient, prometheus: PrometheusServer
    ) -> None:
        world = start(kube, prometheus, workloads=AT_RISK)
        before = read_mix(kube)
        world.clock.advance(WINDOW - 1)
        result, _ = world.reconcile()
        held = decision(result)
        assert (held.action, held.reason) == (Action.HOLD, Reason.EVALUATION_WINDOW)
        assert held.inputs["worst_risk"] > held.inputs["raise_threshold"]
        assert object_writes(result) == 0
        assert read_mix(kube) == before

    def test_after_the_window_limit_and_quota_rise_in_the_same_pass(self, raised: Raised) -> None:
        made = decision(raised.result)
        assert (made.action, made.reason) == (Action.RAISE, Reason.RISK_ABOVE_THRESHOLD)
        step = made.target - made.previous
        assert 0 < step <= MAX_STEP
        before, after = raised.before, raised.after
        assert before.on_demand == FLOOR
        assert after.on_demand == before.on_demand + step
        assert after.quota_on_demand == before.quota_on_demand + step
        # The spot NodePool gives up what on-demand gained: the pool's total is unchanged.
        assert after.spot == before.spot - step
        assert after.on_demand + after.spot == before.on_demand + before.spot
        # llm-pretrain's a100 quota moved from the spot flavor to the on-demand one.
        assert after.quota_spot == before.quota_spot - step
        assert raised.result.plan is not None
        updated = {show_ref(ref(u.desired)) for u in raised.result.plan.updates}
        assert {
            "NodePool/a100-on-demand",
            "NodePool/a100-spot",
            f"ClusterQueue/{PROJECT}",
        } <= updated

    def test_the_policy_status_shows_the_assignment_and_the_decision(self, raised: Raised) -> None:
        made = decision(raised.result)
        entry = pool_entry(raised.world.kube)
        assert entry["onDemandGpus"] == raised.after.on_demand
        # The status keeps the exact split; the NodePool limit is it on whole 8-GPU nodes.
        assert whole_nodes(entry["spotGpus"], 8) == raised.after.spot
        assert entry["assignments"] == [{"project": PROJECT, "gpus": made.target - FLOOR}]
        last = entry["lastDecision"]
        assert (last["action"], last["reason"]) == ("Raise", "RiskAboveThreshold")
        assert f"{made.previous} -> {made.target} on-demand" in last["message"]
        assert last["time"] == raised.world.clock.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert entry["lastChange"] == last["time"]
        policy = raised.world.kube.get(kinds.CAPACITY_POLICY, POLICY)
        assert policy is not None
        assert condition(policy, "HistoryAvailable")["status"] == "True"
        mix = {m["pool"]: m for m in policy["status"]["mix"]}
        assert mix[POOL] == {
            "pool": POOL,
            "onDemandGpus": raised.after.on_demand,
            "spotGpus": entry["spotGpus"],
        }

    def test_the_project_status_shows_risk_slack_and_the_decision(self, raised: Raised) -> None:
        live = raised.world.kube.get(kinds.TRAINING_PROJECT, PROJECT)
        assert live is not None
        status = live["status"]
        [deadline] = status["deadlines"]
        assert deadline["name"] == DEADLINE
        assert deadline["cutoff"] == CUTOFF
        assert 0 <= deadline["risk"] <= 1
        assert isinstance(deadline["slackSeconds"], int)
        # Under the raised mix, the risk is reported as it now stands: below the raise threshold.
        assert status["worstDeadlineRisk"] == deadline["risk"] < 0.2
        assert re.fullmatch(r"-?(\d+d\d+h|\d+h\d\dm|\d+m)", status["slack"]), status["slack"]
        assert status["pendingGpus"] == AT_RISK * 16
        last = status["lastDecision"]
        assert (last["action"], last["reason"]) == ("Raise", "RiskAboveThreshold")
        assert last["message"]
        quota = {m["pool"]: m for m in status["mix"]}
        assert quota[POOL]["onDemandGpus"] == raised.after.quota_on_demand

    def test_events_about_the_raise_regard_the_policy_and_the_project(self, raised: Raised) -> None:
        events, _ = raised.world.kube.list(kinds.EVENT)
        raises = [
            e
            for e in events
            if e.get("reason") in {"RiskAboveThreshold", "CeilingBinds", "BudgetBinds"}
            and f"pool {POOL}:" in e.get("note", "")
        ]
        regarding = {(e["regarding"]["kind"], e["regarding"]["name"]) for e in raises}
        assert regarding == {("CapacityPolicy", POLICY), ("TrainingProject", PROJECT)}
        for event in raises:
            assert event["type"] in {"Normal", "Warning"}
            assert event["action"] == "Raise"
            assert "on-demand" in event["note"]

    def test_explain_prints_the_deadline_and_the_last_decision(
        self, raised: Raised, control_plane: ControlPlane
    ) -> None:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "controller.cli",
                "explain",
                PROJECT,
                "--kubeconfig",
                str(control_plane.kubeconfig),
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        [row] = [line.split() for line in lines if line.strip().startswith(DEADLINE)]
        assert row[:2] == [DEADLINE, CUTOFF]
        assert re.fullmatch(r"[01]\.\d\d", row[2]), row  # risk
        assert row[3] == "0.01"  # target: 1 - targetConfidence
        assert re.fullmatch(r"[+-]\d+\.\dh", row[4]), row  # slack
        [last] = [line for line in lines if line.startswith("Last decision:")]
        assert "Raise (RiskAboveThreshold)" in last
        made = decision(raised.result)
        assert f"{made.previous} -> {made.target} on-demand" in done.stdout
        assert any(
            "RiskAboveThreshold" in line and f"TrainingProject/{PROJECT}" in line for line in lines
        )


# ------------------------------------------------------------------ steady state
class TestSteady:
    def test_the_pass_after_the_raise_changes_no_object(self, raised: Raised) -> None:
        result, _ = raised.world.reconcile()
        assert object_writes(result) == 0
        assert decision(result).action == Action.HOLD
        assert read_mix(raised.world.kube) == raised.after

    def test_the_pass_after_the_raise_writes_no_status(self, raised: Raised) -> None:
        result, writes = raised.world.reconcile()
        assert result.status_writes == 0
        assert writes == 0

    def test_once_settled_a_pass_writes_nothing(self, raised: Raised) -> None:
        raised.world.reconcile()
        result, writes = raised.world.reconcile()
        assert writes == 0
        assert (result.created, result.updated, result.pruned, result.status_writes) == (0, 0, 0, 0)
        assert result.boosts_written == 0

    def test_raises_are_a_window_apart(
        self, kube: KubeClient, prometheus: PrometheusServer
    ) -> None:
        world = start(kube, prometheus, workloads=HOPELESS)
        world.clock.advance(WINDOW + 1)
        first, _ = world.reconcile()
        assert decision(first).action == Action.RAISE
        raised_to = read_mix(kube).on_demand
        result, _ = world.reconcile()  # the same clock, the same world
        assert decision(result).action == Action.HOLD
        assert object_writes(result) == 0
        assert read_mix(kube).on_demand == raised_to


# ------------------------------------------------------------------ lowering
def test_without_the_workloads_the_mix_steps_back_to_the_floor(
    kube: KubeClient, prometheus: PrometheusServer
) -> None:
    world = start(kube, prometheus, workloads=HOPELESS)
    floor_mix = read_mix(kube)
    raises = climb(world)
    top = read_mix(kube)
    assert len(raises) >= 2, raises
    assert top.on_demand >= FLOOR + 2 * MAX_STEP
    assert top.on_demand + top.spot == floor_mix.on_demand + floor_mix.spot

    world.delete_workloads()
    world.clock.advance(WINDOW + COOLDOWN + 1)
    result, _ = world.reconcile()
    held = decision(result)
    assert (held.action, held.reason) == (Action.HOLD, Reason.EVALUATION_WINDOW)
    assert read_mix(kube) == top

    steps: list[tuple[int, int]] = []
    for _ in range(8):
        world.clock.advance(WINDOW + COOLDOWN + 1)
        result, _ = world.reconcile()
        made = decision(result)
        if made.action == Action.HOLD:
            break
        assert (made.action, made.reason) == (Action.LOWER, Reason.RISK_CLEARED)
        now = read_mix(kube)
        assert now.on_demand == made.target
        assert now.on_demand + now.spot == top.on_demand + top.spot
        assert pool_entry(kube)["lastDecision"]["action"] == "Lower"
        steps.append((made.previous, made.target))
        if len(steps) == 1:
            # Within the cooldown of that step, the next one waits.
            world.clock.advance(COOLDOWN / 2)
            waiting, _ = world.reconcile()
            assert (decision(waiting).action, decision(waiting).reason) == (
                Action.HOLD,
                Reason.COOLDOWN,
            )
            assert read_mix(kube) == now
    assert len(steps) >= 2, steps
    assert steps[0][0] == top.on_demand
    for (previous, target), (next_previous, _) in itertools.pairwise(steps):
        assert 0 < previous - target <= MAX_STEP
        assert next_previous == target
    assert steps[-1][1] == FLOOR
    assert read_mix(kube) == floor_mix
    assert pool_entry(kube)["assignments"] == []


# ------------------------------------------------------------------ override
def freeze(world: World) -> None:
    """What an operator commits to GitOps: the same policy, override mode Freeze."""
    policy = copy.deepcopy(world.policy)
    policy["spec"]["override"] = {"mode": "Freeze"}
    apply_doc(world.kube, policy)


class TestFreeze:
    def test_freeze_keeps_the_mix_while_risk_rises(self, raised: Raised) -> None:
        world, kube = raised.world, raised.world.kube
        world.reconcile()  # settle
        freeze(world)
        world.add_workloads(HOPELESS - AT_RISK, start=AT_RISK)
        for _ in range(3):
            world.clock.advance(WINDOW + 1)
            result, _ = world.reconcile()
            for made in result.capacity.decisions if result.capacity else ():
                assert (made.action, made.reason) == (Action.FREEZE, Reason.OVERRIDE)
                assert made.target == made.previous
            # Freeze keeps the mix and every object; waiting work is still ordered by slack
            # (boosts are not the mix), so the only writes are the new work's boosts.
            assert (result.created, result.updated, result.pruned) == (0, 0, 0)
            assert read_mix(kube) == raised.after
        assert result.capacity is not None
        risk = next(d for d in result.capacity.deadlines if d.project == PROJECT).estimate.risk
        assert risk > 0.2
        entry = pool_entry(kube)
        assert entry["onDemandGpus"] == raised.after.on_demand
        assert (entry["lastDecision"]["action"], entry["lastDecision"]["reason"]) == (
            "Freeze",
            "Override",
        )

    def test_a_frozen_mix_writes_nothing_as_time_passes(self, raised: Raised) -> None:
        world = raised.world
        world.reconcile()  # settle
        freeze(world)
        world.reconcile()  # the policy changed: its status says so once
        world.clock.advance(60)
        result, writes = world.reconcile()
        assert result.status_writes == 0
        assert writes == 0


# ------------------------------------------------------------------ priority boost
def test_priority_boost_orders_waiting_work_by_slack(
    kube: KubeClient, prometheus: PrometheusServer
) -> None:
    def boost_on(policy: dict[str, Any]) -> None:
        policy["spec"]["risk"].update(priorityBoost=True, priorityBoostValue=BOOST_VALUE)

    world = start(kube, prometheus, workloads=0, edit=boost_on)
    kube.apply(
        kinds.WORKLOAD, deadline_workload(0, deadline=None, prefix="adhoc"), field_manager="kueue"
    )
    running = deadline_workload(0, prefix="running")
    kube.apply(kinds.WORKLOAD, running, field_manager="kueue")
    running["status"] = {
        "conditions": [
            {
                "type": "Admitted",
                "status": "True",
                "reason": "Admitted",
                "message": "admitted",
                "lastTransitionTime": (world.clock.now - timedelta(hours=6)).strftime(
                    "%Y-%m-%dT%H:%M:%SZ"
                ),
            }
        ]
    }
    kube.apply(kinds.WORKLOAD, running, field_manager="kueue", subresource="status")
    world.add_workloads(HOPELESS)

    def annotations(name: str) -> dict[str, str]:
        workload = kube.get(kinds.WORKLOAD, name, NAMESPACE)
        assert workload is not None
        return dict(workload["metadata"].get("annotations") or {})

    result, _ = world.reconcile()
    assert result.capacity is not None
    risk = next(d for d in result.capacity.deadlines if d.project == PROJECT).estimate.risk
    assert risk > 0.2
    # Waiting work is ordered by slack with boosts that only ever lower (the cycle-free rule:
    # a boost can never make a workload preempt running work of its own queue).
    boosts = result.capacity.boosts
    assert boosts, "waiting work of a project with deadlines is ordered by its slack"
    assert all(b < 0 for b in boosts.values())
    assert result.boosts_written == len(boosts)
    for (namespace, name), boost in boosts.items():
        assert namespace == NAMESPACE
        got = annotations(name)
        assert got[names.ANNOTATION_PRIORITY_BOOST] == str(boost)
    for index in range(HOPELESS):
        assert annotations(f"pretrain-{index}")[names.ANNOTATION_EXPECTED_DURATION] == str(
            30 * 3600
        )
    # Work with no deadline waits behind every deadline's work.
    assert boosts[(NAMESPACE, "adhoc-0")] == min(boosts.values())
    # Admitted work carries none.
    assert names.ANNOTATION_PRIORITY_BOOST not in annotations("running-0")
    again, _ = world.reconcile()
    assert again.boosts_written == 0

    # Once admitted, a workload's boost is taken off and what Kueue's side wrote stays.
    admitted = deadline_workload(1, prefix="pretrain")
    admitted["status"] = copy.deepcopy(running["status"])
    kube.apply(kinds.WORKLOAD, admitted, field_manager="kueue", subresource="status")
    result, _ = world.reconcile()
    got = annotations("pretrain-1")
    assert names.ANNOTATION_PRIORITY_BOOST not in got
    assert names.ANNOTATION_BOOSTED not in got
    assert got[names.ANNOTATION_EXPECTED_DURATION] == str(30 * 3600)
    assert got[names.ANNOTATION_CHECKPOINT_INTERVAL] == str(4 * 3600)
