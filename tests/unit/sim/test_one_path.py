"""One decision path: the replay's way of carrying state and the controller's give the same passes.

The replay carries each pass's `CapacityPlan.states` in memory into the next `Observation`, and
the split in effect as the rendered quotas (`engine.Replay._decide` / `_observe`). The
controller writes the states into the policy's `status.pools` (`pool_status_entries`, inside
`policy_status`), and on the next pass reads them back (`pool_states`) and reads the split in
effect from the live ClusterQueues (`applied_quotas`), as `reconciler.observation` does. Both
then call `plan_capacity`. Here the status and the ClusterQueues also go through JSON, as they
would through the API server.

The scenario is the example policy's CVPR crunch (`tests/unit/decide/test_plan.py`): 9 pending
8-GPU workloads due in under 12 hours, beside a seeded background of every project's work.
Passes come at uneven times, some between whole seconds. With the crunch the policy holds for
its evaluation window and raises a100 from 16 to 32 on-demand GPUs at +600 s; at +1800 s the
crunch is gone (finished), and after the window and the cooldown it lowers, 32 -> 16. The two
paths must agree at every pass on the decisions, the states, the targets and the rendered
NodePools and ClusterQueues.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from controller.api.policy_set import PolicySet
from controller.capacity import FlavorQuota
from controller.decide.mix import Action, PoolState
from controller.decide.observation import History, Observation
from controller.decide.plan import CapacityPlan, plan_capacity
from controller.reconcile.status import (
    PolicyOutcome,
    policy_status,
    pool_states,
    pool_status_entries,
)
from controller.render.kueue import applied_quotas
from controller.risk.workloads import WorkloadView
from tests.unit.decide.test_plan import CRUNCH, EXAMPLE, FIXED_NOW, background

PASSES = (0.0, 600.4, 660.0, 1200.9, 1800.0, 2400.2, 3000.0, 3600.0, 4200.5, 4800.0, 5400.0)
WITH_CRUNCH = [*CRUNCH, *background(3)]
AFTER_CRUNCH = background(3)
RENDERED_KINDS = ("ClusterQueue", "Cohort", "NodePool", "ResourceFlavor")


def world_at(offset: float) -> list[WorkloadView]:
    return WITH_CRUNCH if offset < 1800 else AFTER_CRUNCH


def observe(
    policy_set: PolicySet,
    offset: float,
    *,
    states: Mapping[str, PoolState],
    applied: Mapping[tuple[str, str], FlavorQuota] | None,
) -> Observation:
    return Observation(
        policy_set,
        states=states,
        workloads=world_at(offset),
        node_claims=(),
        history=History(available=True),
        now=FIXED_NOW + offset,
        applied=applied,
    )


def through_the_replay(policy_set: PolicySet) -> list[CapacityPlan]:
    """States and the applied split carried in memory, as the replay carries them."""
    plans = []
    states: dict[str, PoolState] = {}
    applied: dict[tuple[str, str], FlavorQuota] | None = None
    for offset in PASSES:
        plan = plan_capacity(observe(policy_set, offset, states=states, applied=applied))
        states, applied = dict(plan.states), dict(plan.rendered.quotas)
        plans.append(plan)
    return plans


def through_the_controller(policy_set: PolicySet) -> list[CapacityPlan]:
    """States written to the policy's status and read back, the split read from the live
    ClusterQueues, both through JSON as the API server stores them."""
    plans = []
    live: dict[str, Any] = {"metadata": {"name": policy_set.policy.name, "generation": 1}}
    cluster_queues: Sequence[Mapping[str, Any]] = ()
    for offset in PASSES:
        applied = applied_quotas(policy_set, cluster_queues)
        plan = plan_capacity(
            observe(policy_set, offset, states=pool_states(live), applied=applied or None)
        )
        now = FIXED_NOW + offset
        outcome = PolicyOutcome(
            errors=(),
            projects=len(policy_set.projects),
            mix=plan.rendered.mix,
            unserved=(),
            kept=(),
            pools=tuple(pool_status_entries(plan, live, now=now)),
        )
        status = policy_status(live, outcome, now=datetime.fromtimestamp(now, UTC))
        live = json.loads(json.dumps({**live, "status": status}))
        cluster_queues = json.loads(
            json.dumps([o for o in plan.rendered.objects if o["kind"] == "ClusterQueue"])
        )
        plans.append(plan)
    return plans


def rendered_capacity(plan: CapacityPlan) -> list[dict[str, Any]]:
    """The objects that carry the split: NodePool limits, flavor quotas, cohorts."""
    return [o for o in plan.rendered.objects if o["kind"] in RENDERED_KINDS]


def test_the_replay_and_the_controller_carry_the_same_state_pass_by_pass() -> None:
    replayed = through_the_replay(EXAMPLE)
    controlled = through_the_controller(EXAMPLE)

    for offset, mine, theirs in zip(PASSES, replayed, controlled, strict=True):
        assert mine.decisions == theirs.decisions, offset
        assert mine.states == theirs.states, offset
        assert mine.targets == theirs.targets, offset
        assert mine.shifts == theirs.shifts, offset
        assert mine.rendered.mix == theirs.rendered.mix, offset
        assert mine.rendered.quotas == theirs.rendered.quotas, offset
        assert rendered_capacity(mine) == rendered_capacity(theirs), offset
        assert mine.boosts == theirs.boosts, offset
        assert mine.warm_targets == theirs.warm_targets, offset

    # The scenario moves the mix both ways, so the comparison could fail.
    a100 = [{d.pool: d for d in p.decisions}["a100"] for p in replayed]
    assert [(d.action, d.previous, d.target) for d in a100 if d.action != Action.HOLD] == [
        (Action.RAISE, 16, 32),
        (Action.LOWER, 32, 16),
    ]
    mixes = {tuple(m.on_demand_gpus for m in p.rendered.mix) for p in replayed}
    assert len(mixes) >= 2, mixes
