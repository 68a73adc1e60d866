"""A lane applied when a Workload is created: what the mutating admission webhook decides.

A pass writes lanes onto pending Workloads (`controller.reconcile.lanes`), but Kueue admits a
new Workload within milliseconds when its spot quota has room, and a pass that comes seconds
later finds it admitted on spot, where its pod sets can no longer change. The replay decides a
new workload's lane on arrival, before Kueue sees it (`controller.sim.engine._arrival_lane`);
the webhook on Workload CREATE (`controller.webhook`) makes the live controller do the same.

It decides the way the pass does, from what the last pass left (`AdmissionState`: the policy,
each project's spot outlook and its on-demand room): the Workload is read by the same parser
(`workload_view`), its project, deadline, runtime and spread come from the same risk model
(`RiskModel.lane_workloads` on a snapshot of this one workload: declared runtime, else the
project's median, else the prior, with their spreads), and the lane from the same
`choose_lanes`, room included. The operations are those the pass would write, unguarded
(`lane_operations`): a Workload whose owner chose a capacity type is left alone, and one that
counts toward no open deadline, or whose project has no spot outlook or no on-demand room for
it, gets nothing.

`LaneHolder` is the one piece of state: the loop publishes each pass's `AdmissionState`, the
webhook's threads decide under its lock, and the room a webhook lane takes is remembered until
a pass has seen the Workload it went to (else a burst of creations between two passes would
each take the same free GPUs).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller import names
from controller.api.policy_set import PolicySet
from controller.decide.lanes import Lane, LaneInput, SpotOutlook, choose_lanes
from controller.decide.plan import CapacityPlan, on_demand_room
from controller.reconcile.lanes import lane_operations
from controller.risk.model import RiskModel, Snapshot
from controller.risk.workloads import WorkloadView, workload_view

Operations = list[dict[str, Any]]

GRANT_PASSES = 2
"""Passes a webhook lane's GPUs stay taken from its project's room when no pass has seen its
Workload: the pass running when the lane was given may have read the cache before the
Workload was created, but the next one starts after (passes run one after another); a Workload
that another admission webhook then refused is not seen by either, and its GPUs come back."""


@dataclass(frozen=True)
class AdmissionState:
    """What the last pass left for the webhook: enough to decide a new Workload's lane as
    that pass would have."""

    policy_set: PolicySet
    outlooks: Mapping[str, SpotOutlook]
    """Per project that may run on spot, what spot may cost it (`CapacityPlan.spot_outlooks`;
    empty when lanes are off)."""
    room: Mapping[str, int]
    """Per project, the on-demand GPUs its first pool's quota has free after the pass's own
    lanes."""
    median_runtime: Mapping[str, float] = field(default_factory=dict)
    """Per project, its median runtime from history (a runtime for undeclared work)."""


@dataclass(frozen=True)
class LaneDecision:
    """A lane given at creation, and the JSON Patch operations that carry it."""

    project: str
    gpus: int
    lane: Lane
    operations: Operations


def admission_state(
    plan: CapacityPlan, by_project: Mapping[str, Sequence[WorkloadView]]
) -> AdmissionState | None:
    """The state a pass leaves: its outlooks, and per project the on-demand room of the quotas
    it rendered (`on_demand_room`, as the pass's own lanes were given) less what the lanes it
    gives this pass take. None when the plan does not say what it was decided from."""
    observation = plan.observation
    if observation is None:
        return None
    policy_set = observation.policy_set
    room = on_demand_room(policy_set, plan.rendered.quotas, by_project)
    if plan.lanes:
        for project, workloads in by_project.items():
            for workload in workloads:
                lane = plan.lanes.get((workload.namespace, workload.name))
                if (
                    lane is not None
                    and lane.capacity_type == names.ON_DEMAND
                    and workload.lane != names.ON_DEMAND
                    and project in room
                ):
                    room[project] = max(room[project] - workload.gpus, 0)
    return AdmissionState(
        policy_set=policy_set,
        outlooks=dict(plan.spot_outlooks),
        room=room,
        median_runtime=dict(observation.history.median_runtime),
    )


def lane_at_creation(
    workload: Mapping[str, Any], state: AdmissionState, *, now: float
) -> LaneDecision | None:
    """The lane a Workload being created goes in, with its operations, or None to leave it as
    it is. `now` is the clock its deadline is measured from (epoch seconds)."""
    policy_set = state.policy_set
    gpu_resources = frozenset(p.gpu_resource for p in policy_set.policy.spec.pools)
    view = workload_view(workload, gpu_resources)
    if not view.pending or view.owner_chose_capacity:
        return None
    # The pass's clock is whole seconds (`plan_capacity`); so is this one.
    snapshot = Snapshot(
        policy_set=policy_set,
        quotas={},
        workloads=(view,),
        pools={},
        now=float(math.floor(now)),
        median_runtime=state.median_runtime,
    )
    fields = RiskModel(snapshot).lane_workloads()
    if not fields:
        return None  # not a project's, or counts toward no open deadline
    lane_input = LaneInput(*fields[0])
    project = lane_input.project
    outlook = state.outlooks.get(project)
    if outlook is None:
        return None
    lanes = choose_lanes([lane_input], {project: outlook}, {project: state.room.get(project, 0)})
    lane = lanes.get(lane_input.key)
    if lane is None:
        return None
    operations = lane_operations(workload, lane)
    if not operations:
        return None
    return LaneDecision(project=project, gpus=lane_input.gpus, lane=lane, operations=operations)


class LaneHolder:
    """The latest `AdmissionState`, shared by the loop (which publishes one per pass) and the
    webhook's request threads (which decide under the same lock, so two Workloads created at
    once cannot both take the last free on-demand GPUs)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: AdmissionState | None = None
        self._generation = 0
        self._grants: dict[tuple[str, str], tuple[str, int, int]] = {}
        """(namespace, name) -> (project, GPUs, generation given in) of each webhook lane no
        pass has seen yet."""
        self._unnamed = 0

    def publish(self, state: AdmissionState | None, workloads: Sequence[WorkloadView] = ()) -> None:
        """A pass's state (None: nothing to decide from, e.g. no valid policy), and the
        Workloads it saw: their webhook lanes are in its room from now on."""
        with self._lock:
            self._state = state
            self._generation += 1
            if self._grants:
                seen = {(w.namespace, w.name) for w in workloads}
                oldest = self._generation - GRANT_PASSES
                self._grants = {
                    key: grant
                    for key, grant in self._grants.items()
                    if key not in seen and grant[2] > oldest
                }

    def clear(self) -> None:
        """Forget the state: a replica that stops leading must not decide on stale figures."""
        with self._lock:
            self._state = None
            self._grants.clear()

    def decide(
        self, workload: Mapping[str, Any], *, now: float, take_room: bool = True
    ) -> LaneDecision | None:
        """The lane of a Workload being created, its GPUs taken from the room until a pass has
        seen it (unless `take_room` is False: a dry run creates nothing); None when there is
        no state yet or no lane."""
        with self._lock:
            state = self._state
            if state is None:
                return None
            room = dict(state.room)
            for project, gpus, _ in self._grants.values():
                if project in room:
                    room[project] = max(room[project] - gpus, 0)
            left = AdmissionState(state.policy_set, state.outlooks, room, state.median_runtime)
            decision = lane_at_creation(workload, left, now=now)
            if decision is not None and take_room:
                meta = workload.get("metadata")
                meta = meta if isinstance(meta, Mapping) else {}
                name = str(meta.get("name") or "")
                if not name:  # generateName: no pass will know it by this key
                    self._unnamed += 1
                    name = f"#{self._unnamed}"
                key = (str(meta.get("namespace") or ""), name)
                self._grants[key] = (decision.project, decision.gpus, self._generation)
            return decision


__all__ = [
    "GRANT_PASSES",
    "AdmissionState",
    "LaneDecision",
    "LaneHolder",
    "admission_state",
    "lane_at_creation",
]
