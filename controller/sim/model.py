"""The simulator's plain data: jobs in, per-job outcomes and a timeline out.

Kept apart from the engine so that reports, plots and tests read results without running it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

INFEASIBLE = "infeasible at submit"
WAITED_FOR_QUOTA = "waited for quota"
WAITED_FOR_NODE = "waited for a node"
INTERRUPTED = "work lost to interruptions"
PREEMPTED = "preempted"
CAUSES = (INFEASIBLE, WAITED_FOR_QUOTA, WAITED_FOR_NODE, INTERRUPTED, PREEMPTED)
"""Why a deadline was missed, one cause per miss (see `controller.sim.attribution`)."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One row of a trace, times in seconds from the trace's start."""

    job_id: str
    submit: float
    duration: float
    gpus: int
    deadline: float | None = None
    """Absolute (seconds from trace start), when the trace carries a `deadline` column."""


@dataclass(frozen=True, slots=True)
class SimJob:
    """A trace job with what the replay gives it: a project, a tier, a deadline."""

    job_id: str
    submit: float
    duration: float
    gpus: int
    project: str
    tier: str
    priority: int
    deadline: float | None
    expected_duration: float
    """What the job declares (its expected-duration annotation); the true one is `duration`."""
    checkpoint_seconds: float


@dataclass(frozen=True, slots=True)
class JobOutcome:
    job_id: str
    project: str
    tier: str
    gpus: int
    submit: float
    first_start: float | None
    finish: float | None
    deadline: float | None
    work_gpu_seconds: float
    """gpus x duration: the work the job needed."""
    used_gpu_seconds: float
    """GPU-seconds it held while running, lost work included."""
    lost_gpu_seconds: float
    """Work redone after interruptions and preemptions."""
    interruptions: int
    preemptions: int
    delays: Mapping[str, float] = field(default_factory=dict)
    """Seconds lost to each cause (`CAUSES` but infeasible): what attribution weighs."""
    cause: str | None = None
    """Why it missed its deadline (one of `CAUSES`); None when it met it or had none."""
    launch_seconds: float | None = None
    """How long a node of its project's pools takes to launch (the shortest provisioning
    latency among them); None in results saved before the engine recorded it."""

    @property
    def met(self) -> bool | None:
        if self.deadline is None:
            return None
        return self.finish is not None and self.finish <= self.deadline

    @property
    def wait(self) -> float | None:
        return None if self.first_start is None else self.first_start - self.submit

    @property
    def slack(self) -> float | None:
        """Seconds to spare at submit: deadline minus submit minus its runtime (negative when
        its runtime alone ends after the deadline); None without a deadline."""
        if self.deadline is None or self.gpus <= 0:
            return None
        return self.deadline - self.submit - self.work_gpu_seconds / self.gpus

    @property
    def tighter_than_launch(self) -> bool:
        """Whether only a node already up could have met its deadline: it was feasible at
        submit, with less slack than a new node takes to launch. Such misses are what warm
        capacity (or idle room on running nodes) buys back, and no mix of capacity types can."""
        slack = self.slack
        return (
            slack is not None
            and self.launch_seconds is not None
            and 0.0 <= slack < self.launch_seconds
        )


@dataclass(frozen=True, slots=True)
class FlavorGpus:
    """The GPUs of one pool and capacity type's nodes at a sample, by what they are doing.

    Their sum is what the flavor's nodes cost at that moment; only `in_use` runs work.
    """

    in_use: float
    """On ready nodes, held by running jobs."""
    idle: float
    """On ready nodes, held by no job: up for a job that does not fit on them yet, or empty
    and waiting out the ten minutes before consolidation removes them."""
    launching: float
    """On nodes launched and not ready yet (the pool's provisioning latency)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster at one moment of the timeline."""

    time: float
    gpus_in_use: dict[str, float]
    """By capacity type ("spot", "on-demand")."""
    gpus_provisioned: dict[str, float]
    on_demand_target: float
    """Sum over pools of the mix's on-demand GPUs."""
    pending_jobs: int
    by_flavor: dict[tuple[str, str], FlavorGpus] = field(default_factory=dict)
    """(pool, capacity type) -> its nodes' GPUs, for flavors with nodes; the totals above are
    its sums over pools."""
    on_demand_target_by_pool: dict[str, float] = field(default_factory=dict)
    """Each pool's on-demand GPUs in the mix (its on-demand NodePool limit)."""


@dataclass(frozen=True, slots=True)
class RiskRecord:
    """One risk the policy estimated for one deadline, and what became of the deadline."""

    time: float
    project: str
    deadline: str
    risk: float
    missed: bool
    """Whether some workload counting toward it at `time` finished after its cutoff (or never)."""
    calibrated: float | None = None
    """The risk recalibrated by what the run had judged before `time`
    (`controller.sim.judging`); None when the run did not recalibrate."""


@dataclass
class RunResult:
    """One policy's (or baseline's) replay of one trace."""

    name: str
    outcomes: Sequence[JobOutcome] = field(default_factory=list)
    """Per job of the window; a replay's as an `OutcomeTable` (a list's tenth of the memory)."""
    timeline: list[Sample] = field(default_factory=list)
    cost_by_capacity_type: dict[str, float] = field(default_factory=dict)
    """Dollars over the replay, for provisioned node GPU-hours."""
    gpu_hours_by_capacity_type: dict[str, float] = field(default_factory=dict)
    mix_changes: int = 0
    decisions: int = 0
    lane_writes: int = 0
    """Lanes written in the window: workloads whose pod sets were made to select on-demand."""
    lane_moves: int = 0
    """Of those, workloads moved off spot while admitted there with their pods waiting for a
    node (`Lane.move`)."""
    wall_seconds: float = 0.0
    unfinished: int = 0
    """Jobs still pending or running when the replay ended (counted as missed)."""
    risk_log: Sequence[RiskRecord] = field(default_factory=list)
    """Every deadline risk the policy estimated, with its outcome (empty for baselines); a
    replay's as a `RiskTable`."""
    peak_provisioned: dict[str, float] = field(default_factory=dict)
    """Per pool, the most GPUs it had provisioned at once (nodes launched, not yet removed)."""
    ceilings: dict[str, int] = field(default_factory=dict)
    """Per pool, its ceiling: the GPUs its quotas promise (at most its maxGpus)."""
