"""What one decision pass sees: the single input of `plan_capacity`.

The controller builds it from the cluster (and Prometheus), `quartermaster plan` and `explain`
from a read of the cluster, and the simulator from its models of Kueue and Karpenter. Because
the three build the same type and call the same function, a pass in the replay is a pass of
the controller: same state carried, same targets rendered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controller import names
from controller.api.policy_set import PolicySet
from controller.capacity import FlavorQuota, PoolTarget
from controller.decide.mix import PoolState
from controller.render.desired import Rendered
from controller.risk.learning import RuntimeLearner
from controller.risk.model import Carried
from controller.risk.pools import NodeClaimView
from controller.risk.recalibration import Recalibration
from controller.risk.workloads import WorkloadView


@dataclass(frozen=True)
class History:
    """What Prometheus remembers; `available` False when it could not be asked."""

    available: bool = False
    median_runtime: Mapping[str, float] = field(default_factory=dict)
    demand_changes: Mapping[str, Sequence[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Observation:
    """The world one pass decides on, as plain data."""

    policy_set: PolicySet
    states: Mapping[str, PoolState]
    """Each pool's decision state as the last pass left it (kept in the policy's status)."""
    workloads: Sequence[WorkloadView]
    node_claims: Sequence[NodeClaimView]
    history: History
    now: float
    applied: Mapping[tuple[str, str], FlavorQuota] | None = None
    """(project, pool) -> the quota split in effect now, read from the live ClusterQueues.
    None when unknown (no ClusterQueue yet): the split the states describe is assumed."""
    namespace: str = names.DEFAULT_NAMESPACE
    seed: int = 0
    max_jobs: int | None = None
    """At most this many of a project's workloads, in admission order, enter each estimate
    (the simulator's bound on cost; the controller uses all of them)."""
    spot_shortages: Mapping[str, float] = field(default_factory=dict)
    """Per pool, how much longer a spot launch is expected to wait for a shortage the pool
    is known to be in, every zone of it short (`controller.risk.shortage`); none listed, none
    known."""
    lanes: bool = True
    """Whether pending deadline workloads get per-workload lanes (`controller.decide.lanes`);
    the replay's `policy-no-lanes` ablation turns them off."""
    predict_waits: bool = True
    """Whether the plan predicts each queue's wait. The predictions feed only the
    predicted-wait metric, no decision: the simulator, which publishes no metrics, skips
    them."""
    runtimes: RuntimeLearner | None = field(default=None, compare=False, repr=False)
    """Runtimes learned from finished work (`controller.risk.learning`), which the risk model
    samples instead of the fixed spreads; None: the fixed spreads alone. The learner changes
    as work finishes, so it is compared by nothing: a pass reads it as it is then."""
    recalibration: Recalibration | None = None
    """The monotone map learned from the deadlines judged so far
    (`controller.risk.recalibration`): when given, the mix is decided on the calibrated risk
    (what a risk's threshold means: a share of such deadlines missed on this cluster), not the
    raw one."""
    carried: Carry | None = field(default=None, compare=False, repr=False)
    """What the last pass made (`CapacityPlan.carried`), reused where its inputs did not
    change; not part of what the pass decides on, only of what it costs."""


@dataclass(frozen=True)
class Carry:
    """What one pass hands the next to save work: its estimates (for projects whose
    workloads did not change) and its rendered objects (for targets that did not change)."""

    estimates: Carried | None = None
    rendered: tuple[PolicySet, Mapping[str, PoolTarget], str, Rendered] | None = None
    """(policy set, targets, namespace) and what they rendered."""


__all__ = ["Carry", "History", "Observation"]
