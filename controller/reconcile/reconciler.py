"""One level-triggered pass: from what is observed, derive the whole desired state, converge.

The shell around the pure core (validation, rendering, the plan, status): it takes what the
cluster holds (the loop's cache snapshot, or one list of each collection when run on its own),
calls the core, and carries out the plan with server-side apply under one field manager. It
writes only what differs, prunes only objects carrying our label, never prunes a queue that
workloads still use, and never touches anything while the policy is invalid or missing but the
Workloads it deactivated to move them to a lane, which it activates again on every pass
(nothing it stopped stays stopped). Every write first checks `may_write`, so a replica that
lost its lease stops in the middle of a pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal, Protocol

import structlog

from controller import names
from controller.api.policy_set import PolicySet
from controller.api.semantics import past_deadlines
from controller.api.types import CapacityPolicy, OverrideMode, TrainingProject
from controller.capacity import FlavorQuota
from controller.decide.lanes import Lane
from controller.decide.observation import Carry, History, Observation
from controller.decide.plan import CapacityPlan, plan_capacity, plan_holds
from controller.history import HistoryReader
from controller.kube import kinds
from controller.kube.cache import Observed, read_cluster
from controller.kube.client import KubeClient, KubeError
from controller.metrics import BINDING_REASONS, Metrics
from controller.reconcile.admission import LaneHolder, admission_state
from controller.reconcile.diff import (
    KubeObject,
    Plan,
    Ref,
    make_plan,
    ref,
    rendered_needs_apply,
    show_ref,
    with_last_applied,
)
from controller.reconcile.lanes import lane_patch, move_patch, moving_to, reactivation_patch
from controller.reconcile.learned_store import LearnedStore
from controller.reconcile.learning import OutcomeLearning
from controller.reconcile.lost import ACTION as LOST_ACTION
from controller.reconcile.lost import REASON as LOST_REASON
from controller.reconcile.lost import lost_note, tiers_of, to_tell, told_before, workload_key
from controller.reconcile.memo import DiffMemo, LastResult, VersionMemo
from controller.reconcile.shortages import shortages_seen
from controller.reconcile.status import (
    DeadlineTracking,
    PolicyOutcome,
    ProjectOutcome,
    invalid_spec_message,
    policy_status,
    pool_states,
    pool_status_entries,
    project_capacity_status,
    project_status,
    status_changed,
)
from controller.reconcile.validation import ClusterValidation, validate_cluster
from controller.reconcile.writers import WritePool
from controller.render.desired import Rendered
from controller.render.kueue import applied_quotas
from controller.risk.model import project_workloads
from controller.risk.pools import node_claim_view
from controller.risk.shortage import Shortages, expected_waits
from controller.risk.workloads import WorkloadView, workload_view

log = structlog.get_logger(__name__)

DEFAULT_WRITE_WORKERS = 8
"""Writes in flight at once (creates of one kind, project statuses, priority boosts): a first
pass at 1,000 projects writes 7,500 times; 8 at once readied it in 38 s against a 2-core
control plane where 4 took 43 s (both through the bench's proxy). Straight to the API server
8 take 30-32 s and 16 were no faster (30.2 s): the server's CPU is what is left to wait on."""


class NotLeaderError(Exception):
    """The lease was lost during a pass; the rest of it is abandoned (another replica leads)."""


class EventSink(Protocol):
    def emit(
        self,
        regarding: Mapping[str, Any],
        *,
        type: Literal["Normal", "Warning"],
        reason: str,
        action: str,
        note: str,
    ) -> str | None: ...


@dataclass
class ReconcileResult:
    created: int = 0
    updated: int = 0
    pruned: int = 0
    status_writes: int = 0
    handed_over: int = 0
    """Applies sharing create-only fields (a warm pool's starting replicas) with KEDA's side."""
    kept: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    """Objects the API server refused (a permanent error), as "Kind/name: reason"."""
    invalid: tuple[str, ...] = ()
    unserved: tuple[str, ...] = ()
    policy: str | None = None
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict, repr=False)
    """Seconds per phase of the pass (decide, converge, boosts, statuses): where it went."""
    plan: Plan | None = field(default=None, repr=False)
    capacity: CapacityPlan | None = field(default=None, repr=False)
    queued: Mapping[str, int] = field(default_factory=dict, repr=False)
    """Per project, the unfinished Workloads in its queues (as the risk model assigns them)."""
    boosts_written: int = 0
    lanes_written: int = 0
    """Workloads put in their lane (a node selector and our annotations) this pass."""
    lanes_moved: int = 0
    """Workloads admitted on spot deactivated this pass to move them to their lane."""
    moves_done: int = 0
    """Workloads deactivated to be moved, activated again this pass (in their lane)."""
    lost_told: int = 0
    """Workloads told this pass (a DeadlineLost Event) that their deadline is lost."""

    @property
    def writes(self) -> int:
        return (
            self.created
            + self.updated
            + self.pruned
            + self.status_writes
            + self.boosts_written
            + self.lanes_written
            + self.lanes_moved
            + self.moves_done
            + self.handed_over
        )


def _finished(workload: Mapping[str, Any]) -> bool:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Finished" and c.get("status") == "True" for c in conditions)


def queues_in_use(
    workloads: Sequence[Mapping[str, Any]], local_queues: Sequence[Mapping[str, Any]]
) -> dict[Ref, int]:
    """LocalQueues and ClusterQueues that unfinished workloads are pending in or admitted to."""
    in_use: dict[Ref, int] = {}
    cluster_queue_of = {
        (lq["metadata"].get("namespace", ""), lq["metadata"]["name"]): (lq.get("spec") or {}).get(
            "clusterQueue"
        )
        for lq in local_queues
    }
    for workload in workloads:
        if _finished(workload):
            continue
        namespace = workload["metadata"].get("namespace", "")
        queue = (workload.get("spec") or {}).get("queueName")
        targets: set[Ref] = set()
        if queue:
            targets.add(("LocalQueue", namespace, queue))
            cluster_queue = cluster_queue_of.get((namespace, queue))
            if cluster_queue:
                targets.add(("ClusterQueue", "", cluster_queue))
        admission = (workload.get("status") or {}).get("admission") or {}
        if admission.get("clusterQueue"):
            targets.add(("ClusterQueue", "", admission["clusterQueue"]))
        for target in targets:
            in_use[target] = in_use.get(target, 0) + 1
    return in_use


def protected_objects(
    managed: Sequence[KubeObject], validation: ClusterValidation, in_use: Mapping[Ref, int]
) -> dict[Ref, tuple[str, str]]:
    """Objects that must survive a prune: an invalid project's, and queues still in use."""
    protected: dict[Ref, tuple[str, str]] = {}
    invalid = validation.invalid_projects
    for obj in managed:
        project = (obj["metadata"].get("labels") or {}).get(names.LABEL_PROJECT)
        if project in invalid:
            protected[ref(obj)] = ("ProjectInvalid", f"project {project} is invalid; kept as is")
    for r, count in in_use.items():
        protected.setdefault(
            r, ("WorkloadsPresent", f"{count} workload(s) pending in or admitted to it")
        )
    return protected


def plan_against_cluster(
    client: KubeClient,
    policy_set: PolicySet,
    *,
    namespace: str = names.DEFAULT_NAMESPACE,
    now: float | None = None,
) -> tuple[Plan, tuple[str, ...]]:
    """What applying the policy would change, reading the cluster once and writing nothing."""
    return plan_against(
        read_cluster(client, namespace=namespace),
        policy_set,
        namespace=namespace,
        now=time.time() if now is None else now,
    )


def plan_against(
    observed: Observed, policy_set: PolicySet, *, namespace: str, now: float
) -> tuple[Plan, tuple[str, ...]]:
    """What applying the policy to what is observed would change.

    The controller's own pass with the mix frozen where it last decided (kept in the live
    policy's status): so a raise the controller made is not shown as drift, and the objects
    are exactly those the controller would apply now. Returns the plan and the kinds the
    cluster does not serve (skipped, as the controller would skip them).
    """
    policy = policy_set.policy
    frozen = replace(
        policy,
        spec=replace(policy.spec, override=replace(policy.spec.override, mode=OverrideMode.FREEZE)),
    )
    frozen_set = replace(policy_set, policy=frozen)
    capacity = plan_capacity(
        observation(
            observed,
            frozen_set,
            now=now,
            namespace=namespace,
            history=History(),
        )
    )
    desired, unserved = served_split(capacity.rendered.objects, observed.served)
    protected = protected_objects(observed.managed, ClusterValidation(None), _in_use(observed))
    return make_plan(desired, observed.managed, protected=protected), unserved


@dataclass(frozen=True)
class Readers:
    """How a pass reads objects into plain data. The controller's remember what they read
    while its objects do not change (see `controller.reconcile.memo`); `plan` reads afresh."""

    workloads: Callable[[Sequence[KubeObject], frozenset[str]], list[WorkloadView]] = (
        lambda objects, gpu_resources: [workload_view(o, gpu_resources) for o in objects]
    )
    applied: Callable[[PolicySet, Sequence[KubeObject]], dict[tuple[str, str], FlavorQuota]] = (
        applied_quotas
    )


def observation(
    observed: Observed,
    policy_set: PolicySet,
    *,
    now: float,
    namespace: str,
    history: History,
    seed: int = 0,
    readers: Readers | None = None,
    carried: Carry | None = None,
    spot_shortages: Mapping[str, float] | None = None,
) -> Observation:
    """What a pass decides on, from what it read of the cluster (through `readers`).

    `spot_shortages` is the reconciler's memory of Karpenter's capacity errors; None (a
    one-shot read) rebuilds it from the Events the cluster still holds."""
    readers = readers or Readers()
    live_policy = next(
        (p for p in observed.policies if p["metadata"]["name"] == policy_set.policy.name), {}
    )
    gpu_resources = frozenset(p.gpu_resource for p in policy_set.policy.spec.pools)
    applied = readers.applied(
        policy_set, [o for o in observed.managed if o.get("kind") == "ClusterQueue"]
    )
    return Observation(
        policy_set=policy_set,
        states=pool_states(live_policy),
        workloads=readers.workloads(observed.workloads, gpu_resources),
        node_claims=[c for c in map(node_claim_view, observed.node_claims) if c is not None],
        history=history,
        now=now,
        applied=applied or None,
        namespace=namespace,
        seed=seed,
        carried=carried,
        spot_shortages=dict(
            spot_shortages
            if spot_shortages is not None
            else expected_waits(
                shortages_seen(observed, _pool_zones(policy_set), Shortages(), now=now), now
            )
        ),
    )


def _pool_zones(policy_set: PolicySet) -> dict[str, tuple[str, ...]]:
    """Each pool's zones: where its shortages are kept, and all of which must be short for a
    pool to be."""
    return {p.name: p.zones for p in policy_set.policy.spec.pools}


def served_split(
    objects: Sequence[KubeObject], served: frozenset[str]
) -> tuple[list[KubeObject], tuple[str, ...]]:
    """The objects the cluster can take, and the kinds it does not serve (skipped, reported)."""
    desired = [o for o in objects if kinds.kind_of(o).group_version in served]
    unserved = sorted(
        {f"{o['apiVersion']} {o['kind']}" for o in objects}
        - {f"{o['apiVersion']} {o['kind']}" for o in desired}
    )
    return desired, tuple(unserved)


def unserved_kinds(served: frozenset[str]) -> tuple[str, ...]:
    """Every kind the controller writes that discovery does not list, as "apps/v1 Deployment".

    What the KindsServed condition reports while the policy is invalid: nothing is rendered
    then, so the rendered kinds are unknown, but a kind the cluster lacks is still worth saying.
    """
    return tuple(
        sorted(
            f"{kind.api_version} {kind.kind}"
            for kind in kinds.MANAGED_KINDS
            if kind.group_version not in served
        )
    )


def projects_with_objects(managed: Sequence[KubeObject]) -> frozenset[str]:
    """Projects that have objects of ours in the cluster, from the project label."""
    return frozenset(
        str(project)
        for obj in managed
        if (project := (obj["metadata"].get("labels") or {}).get(names.LABEL_PROJECT))
    )


def _in_use(
    observed: Observed,
    count: Callable[
        [Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]], dict[Ref, int]
    ] = queues_in_use,
) -> dict[Ref, int]:
    local_queues = [o for o in observed.managed if o["kind"] == "LocalQueue"]
    return count(observed.workloads, local_queues)


def _phase_timer(phases: dict[str, float]) -> Callable[[str], None]:
    """`mark(name)` records the seconds since the last mark under `name`."""
    last = [time.monotonic()]

    def mark(name: str) -> None:
        now = time.monotonic()
        phases[name] = round(now - last[0], 3)
        last[0] = now

    return mark


class Reconciler:
    """Converges the cluster on the policy; one `reconcile()` is one full pass."""

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str = names.DEFAULT_NAMESPACE,
        events: EventSink | None = None,
        may_write: Callable[[], bool] = lambda: True,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        metrics: Metrics | None = None,
        history: HistoryReader | None = None,
        seed: int = 0,
        record: Callable[[kinds.Kind, KubeObject], None] | None = None,
        write_workers: int = DEFAULT_WRITE_WORKERS,
        admission: LaneHolder | None = None,
        learned: LearnedStore | None = None,
    ) -> None:
        """`record` gets each object as the server answered a write of it (the loop's cache
        keeps it, so the next pass sees this one's writes before their watch events).
        `admission` gets what each pass leaves for the lanes webhook (`admission_state`).
        `learned` keeps what the passes learn across restarts (the loop gives one; without it
        the learning is kept in memory only)."""
        self.client = client
        self.namespace = namespace
        self.events = events
        self.may_write = may_write
        self.wall_clock = wall_clock
        self.metrics = metrics
        self.history = history
        self.seed = seed
        self.record = record
        self.writes = WritePool(write_workers)
        self.admission = admission
        self._finished_seen: set[tuple[str, str]] = set()
        self._views: VersionMemo[frozenset[str], WorkloadView] = VersionMemo(workload_view)
        self._readers = Readers(
            workloads=LastResult(self._read_workloads), applied=LastResult(applied_quotas)
        )
        self._queues_in_use = LastResult(queues_in_use)
        self._boosts_settled: tuple[Sequence[KubeObject], Mapping[Any, int]] | None = None
        self._lanes_settled: tuple[Sequence[KubeObject], Mapping[Any, Lane]] | None = None
        self._lanes_refused: dict[tuple[str, str], str] = {}
        """Per Workload, the resourceVersion a lane's patch was refused at: not sent again
        until the Workload changes (a refusal at one version is one at every try of it)."""
        self._lane_projects: dict[tuple[str, str], str] = {}
        """The project of each workload the plan puts in a lane, for the metrics."""
        self._reactivations_refused: dict[tuple[str, str], tuple[str, bool]] = {}
        """Per Workload being moved, the resourceVersion its reactivation was refused at and
        whether that patch was the one without the lane: at that version the next is sent
        without the lane, and none after both were refused, until the Workload changes."""
        self._statuses_settled: dict[str, tuple[Any, ...]] = {}
        """Per project, what its status was last computed from when it needed no write."""
        self._differs = DiffMemo(rendered_needs_apply)
        self._validated: tuple[tuple[tuple[Any, Any], ...], ClusterValidation] | None = None
        self._plan: CapacityPlan | None = None
        """The last pass's plan: it stands for the next pass when nothing it read changed."""
        self.shortages = Shortages()
        """Per pool, the spot shortages Karpenter's capacity errors showed (see
        `controller.reconcile.shortages`): kept across passes, rebuilt by the first."""
        self._shortage_waits: dict[str, float] = {}
        self.learning = OutcomeLearning()
        """Runtimes and outcomes learned from this cluster (see its module); restored from
        and kept in `learned` when there is one."""
        self.learned = learned
        self._lost_told: set[tuple[str, str]] | None = None
        """Workloads told their deadline is lost (once each, while unfinished); None until the
        first pass, which starts from those the project statuses name."""

    def close(self) -> None:
        """Keep what was learned (as leader) and let the write threads end: the loop calls
        this once its last pass is done, before it releases the Lease."""
        self.keep_learning(final=True)
        self.writes.close()

    def standby(self) -> None:
        """This replica does not lead (any more): what it learned is read again from the
        store when it leads next, since the leader meanwhile learned more."""
        if self.learned is not None:
            self.learned.standby()

    def _restore_learning(self, observed: Observed) -> None:
        """Before the first pass learns anything: adopt what the store kept."""
        if self.learned is None:
            return
        restored = self.learned.load(observed.served)
        if restored is not None:
            self.learning = restored

    def keep_learning(self, *, final: bool = False) -> bool:
        """Write what was learned when the store's throttle allows (as leader only); True
        when written. Never raises for the store's sake: a failed write is logged."""
        if self.learned is None or not self.may_write():
            return False
        return self.learned.save(self.learning, final=final)

    # ------------------------------------------------------------------ observe
    def observe(self) -> Observed:
        """One list of each collection a pass reads: for a Reconciler run without the loop."""
        return read_cluster(self.client, namespace=self.namespace)

    # ------------------------------------------------------------------ decide
    def _read_workloads(
        self, objects: Sequence[KubeObject], gpu_resources: frozenset[str]
    ) -> list[WorkloadView]:
        """Views of the snapshot's Workloads, parsing only those that changed."""
        views = [self._views(o, gpu_resources) for o in objects]
        self._views.end_pass()
        return views

    def _decide(
        self, observed: Observed, policy_set: PolicySet
    ) -> tuple[CapacityPlan, dict[str, int]]:
        """The pass's plan, and per project the unfinished Workloads in its queues."""
        policy = policy_set.policy
        history = History()
        if self.history is not None:
            history = self.history.read(
                policy.spec.prometheus,
                pools=[p.name for p in policy.spec.pools],
                horizon_seconds={
                    p.name: float(p.provisioning_latency_seconds) for p in policy.spec.pools
                },
            )
        now = self.wall_clock().timestamp()
        seen = observation(
            observed,
            policy_set,
            now=now,
            namespace=self.namespace,
            history=history,
            seed=self.seed,
            readers=self._readers,
            carried=self._plan.carried if self._plan is not None else None,
            spot_shortages=self._track_shortages(observed, policy_set, now),
        )
        workloads = seen.workloads
        # Finished work first, so that this pass's risks already sample what it taught.
        self.learning.learn(policy_set, workloads)
        # The mix is decided on the risk recalibrated from the deadlines judged so far.
        seen = replace(
            seen, runtimes=self.learning.runtimes, recalibration=self.learning.recalibration
        )
        previous = self._plan
        if previous is not None and plan_holds(previous, seen):
            plan = previous  # nothing it read changed: the decision stands, no need to decide
        else:
            plan = plan_capacity(seen)
        self._plan = plan
        by_project = project_workloads(policy_set, workloads)
        calibrated = self.learning.judge(
            policy_set, plan.deadlines, workloads, seen.now, by_project=by_project
        )
        if self.admission is not None:
            self.admission.publish(admission_state(plan, by_project), workloads)
        queued = {name: len(items) for name, items in by_project.items()}
        self._lane_projects = {
            (w.namespace, w.name): name
            for name, items in (by_project.items() if plan.lanes else ())
            for w in items
            if (w.namespace, w.name) in plan.lanes
        }
        if self.metrics is not None:
            tiers = {p.name: p.spec.tier for p in policy_set.projects}
            self.metrics.update(policy_set, plan, calibrated)
            self.metrics.update_lanes(
                (self._lane_projects[key], lane.capacity_type)
                for key, lane in plan.lanes.items()
                if key in self._lane_projects
            )
            self.metrics.prometheus_up.set(1.0 if history.available else 0.0)
            self.metrics.observe_judged(self.learning.judged_last)
            self.metrics.observe_finished(
                (w.queue, tiers[w.queue], w.finished_at - w.admitted_at)
                for w in workloads
                if w.finished_at
                and w.admitted_at
                and w.queue in tiers
                and (w.namespace, w.name) not in self._finished_seen
            )
        self._finished_seen = {(w.namespace, w.name) for w in workloads if w.finished}
        for decision in plan.decisions:
            if decision.changed:
                log.info(
                    "capacity_decision",
                    pool=decision.pool,
                    action=decision.action,
                    reason=decision.reason,
                    previous=decision.previous,
                    target=decision.target,
                    message=decision.message,
                    inputs={k: round(v, 4) for k, v in decision.inputs.items()},
                )
        return plan, queued

    def _track_shortages(
        self, observed: Observed, policy_set: PolicySet, now: float
    ) -> dict[str, float]:
        """Fold what the snapshot shows of Karpenter's capacity errors and spot launches into
        the shortages kept, log each pool's shortage (every zone of it short) as it starts and
        ends, and return the expected extra spot wait of each pool in one."""
        before = self._shortage_waits
        self.shortages = shortages_seen(observed, _pool_zones(policy_set), self.shortages, now=now)
        waits = expected_waits(self.shortages, now)
        for pool in sorted(waits.keys() - before.keys()):
            state = self.shortages.state(pool)
            log.info(
                "spot_shortage_started",
                pool=pool,
                since=state.started,
                zones=sorted(state.short),
                expected_wait_seconds=round(waits[pool], 1),
            )
        for pool in sorted(before.keys() - waits.keys()):
            log.info("spot_shortage_ended", pool=pool)
        self._shortage_waits = waits
        return waits

    # ------------------------------------------------------------------ the pass
    def reconcile(self, observed: Observed | None = None) -> ReconcileResult:
        """One pass over `observed` (the loop's snapshot), or over one fresh read of it all."""
        started = time.monotonic()
        if observed is None:
            observed = self.observe()
        self._restore_learning(observed)
        validation = self._validate(observed)
        result = ReconcileResult(
            policy=validation.policy_name,
            invalid=tuple(sorted(n for _, n in validation.errors)),
        )
        if validation.policy_set is None and self.admission is not None:
            self.admission.publish(None)  # nothing valid to decide a lane from
        if validation.policy_name is None:
            log.info("no_capacity_policy", projects=len(observed.projects))
            result.moves_done = self._reactivate(observed)
            result.seconds = time.monotonic() - started
            return result
        rendered: Rendered | None = None
        apply_error: str | None = None
        if validation.policy_set is None:
            # Nothing is rendered, so say which of the kinds we write the cluster lacks, rather
            # than leave KindsServed claiming that everything is served.
            result.unserved = unserved_kinds(observed.served)
            # Whatever the policy says, what a pass deactivated to move is activated again.
            result.moves_done = self._reactivate(observed)
        else:
            mark = _phase_timer(result.phases)
            capacity, result.queued = self._decide(observed, validation.policy_set)
            mark("decide")
            result.capacity = capacity
            rendered = capacity.rendered
            try:
                self._converge(observed, validation, rendered, result)
                self._emit_decisions(observed, validation.policy_set, capacity)
                mark("converge")
                # Lanes before boosts: a lane's patch is guarded by the version this pass read,
                # which a boost's write would move on; a boost's apply is not. Reactivations
                # first, on every pass: they do not depend on the plan's lanes.
                result.moves_done = self._reactivate(observed)
                result.lanes_written, result.lanes_moved = self._apply_lanes(observed, capacity)
                mark("lanes")
                result.boosts_written = self._apply_boosts(
                    observed, validation.policy_set, capacity
                )
                mark("boosts")
                result.lost_told = self._tell_lost(observed, validation.policy_set, capacity)
            except KubeError as exc:
                apply_error = str(exc)[:500]
                self._write_statuses(observed, validation, rendered, result, apply_error)
                raise
            if result.failed:
                apply_error = f"{len(result.failed)} object(s) refused: " + "; ".join(
                    result.failed[:5]
                )
        statuses_started = time.monotonic()
        self._write_statuses(observed, validation, rendered, result, apply_error)
        if result.phases:
            result.phases["statuses"] = round(time.monotonic() - statuses_started, 3)
        self.keep_learning()
        result.seconds = time.monotonic() - started
        log.info(
            "reconciled",
            policy=result.policy,
            created=result.created,
            updated=result.updated,
            pruned=result.pruned,
            status_writes=result.status_writes,
            boosts=result.boosts_written,
            lanes=result.lanes_written,
            lanes_moved=result.lanes_moved,
            moves_done=result.moves_done,
            lost_told=result.lost_told,
            handed_over=result.handed_over,
            kept=len(result.kept),
            invalid=list(result.invalid),
            seconds=round(result.seconds, 3),
            phases=result.phases,
        )
        return result

    def _validate(self, observed: Observed) -> ClusterValidation:
        """`validate_cluster`, again only when a policy or project changed since last pass."""
        versions = tuple(
            (obj["metadata"].get("name"), obj["metadata"].get("resourceVersion"))
            for obj in (*observed.policies, *observed.projects)
        )
        if (
            self._validated is not None
            and self._validated[0] == versions
            and all(version for _, version in versions)
        ):
            return self._validated[1]
        validation = validate_cluster(observed.policies, observed.projects)
        self._validated = (versions, validation)
        return validation

    def _guard(self) -> None:
        if not self.may_write():
            raise NotLeaderError("lost leadership during a reconcile")

    def _converge(
        self,
        observed: Observed,
        validation: ClusterValidation,
        rendered: Rendered,
        result: ReconcileResult,
    ) -> None:
        desired, result.unserved = served_split(rendered.objects, observed.served)
        plan = make_plan(
            desired,
            observed.managed,
            protected=protected_objects(
                observed.managed, validation, _in_use(observed, self._queues_in_use)
            ),
            differs=self._differs,
        )
        self._differs.end_pass()
        result.plan = plan
        result.kept = tuple(show_ref(ref(k.live)) for k in plan.kept)
        failed: list[str] = []

        def attempt(obj: KubeObject, write: Callable[[], object]) -> bool:
            """One write; a permanent refusal is recorded and the pass goes on."""
            self._guard()
            try:
                write()
            except KubeError as exc:
                if exc.retryable:
                    raise
                failed.append(f"{show_ref(ref(obj))}: {str(exc)[:300]}")
                log.warning(
                    "apply_refused", ref=show_ref(ref(obj)), status=exc.status, error=str(exc)[:300]
                )
                return False
            return True

        # A create's hand-over follows it at once, before KEDA can act on the new Deployment;
        # those of existing objects come before any update, whose apply would otherwise drop
        # the fields they hold.
        hand_overs = {ref(h): h for h in plan.hand_overs}

        def create(obj: KubeObject) -> tuple[int, int]:
            """One create and its hand-over: (created, handed over)."""
            if not attempt(obj, partial(self._apply, obj)):
                return 0, 0
            handed = hand_overs.get(ref(obj))
            return 1, int(handed is not None and attempt(handed, partial(self._hand_over, handed)))

        # Deployments go one by one: each create and its hand-over are written back to back.
        for created, handed_over in self.writes.each_kind(
            plan.creates, create, serial=lambda obj: ref(obj) in hand_overs
        ):
            result.created += created
            result.handed_over += handed_over
        for handed in plan.live_hand_overs:
            if attempt(handed, partial(self._hand_over, handed)):
                result.handed_over += 1
        for update in plan.updates:
            if attempt(update.desired, partial(self._apply, update.desired)):
                result.updated += 1
                log.info(
                    "object_updated",
                    ref=show_ref(ref(update.desired)),
                    changes=[str(c) for c in update.changes[:10]],
                )
        for obj in plan.prunes:
            meta = obj["metadata"]
            delete = partial(
                self.client.delete, kinds.kind_of(obj), meta["name"], meta.get("namespace")
            )
            if attempt(obj, delete):
                result.pruned += 1
                log.info("object_pruned", ref=show_ref(ref(obj)))
        result.failed = tuple(failed)
        for kept in plan.kept:
            log.info("prune_blocked", ref=show_ref(ref(kept.live)), reason=kept.reason)
            if kept.reason == "WorkloadsPresent" and self.events is not None:
                self.events.emit(
                    kept.live,
                    type="Warning",
                    reason="PruneBlocked",
                    action="Prune",
                    note=f"left out of the policy but kept: {kept.message}",
                )
        if not plan.empty and self.events is not None:
            policy = next(
                p for p in observed.policies if p["metadata"]["name"] == validation.policy_name
            )
            self.events.emit(
                policy,
                type="Normal",
                reason="Reconciled",
                action="Apply",
                note=f"created {result.created}, updated {result.updated}, "
                f"pruned {result.pruned}, kept {len(plan.kept)}",
            )

    def _emit_decisions(
        self, observed: Observed, policy_set: PolicySet, capacity: CapacityPlan
    ) -> None:
        """An Event on the policy (and on each project served) for every change of the mix."""
        if self.events is None:
            return
        live = {p["metadata"]["name"]: p for p in observed.projects}
        policy = next(
            p for p in observed.policies if p["metadata"]["name"] == policy_set.policy.name
        )
        for decision in capacity.decisions:
            if not decision.changed:
                continue
            event_type: Literal["Normal", "Warning"] = (
                "Warning" if decision.reason in BINDING_REASONS else "Normal"
            )
            note = f"pool {decision.pool}: {decision.message}"
            self.events.emit(
                policy, type=event_type, reason=decision.reason, action=decision.action, note=note
            )
            for project in decision.state.assignments:
                if project in live:
                    self.events.emit(
                        live[project],
                        type=event_type,
                        reason=decision.reason,
                        action=decision.action,
                        note=note,
                    )
        applied_before = {
            str(e.get("pool")): e.get("onDemandGpus")
            for e in (policy.get("status") or {}).get("pools") or []
            if isinstance(e, dict)
        }
        for pool, shift in capacity.shifts.items():
            if not shift.waiting_gpus or applied_before.get(pool) == shift.applied:
                continue
            side = "spot" if shift.target > shift.applied else "on-demand"
            self.events.emit(
                policy,
                type="Normal",
                reason="ShiftWaiting",
                action="Apply",
                note=f"pool {pool}: on-demand {shift.target} GPUs decided, {shift.applied} "
                f"applied now; {shift.waiting_gpus} GPUs wait for {side} work to drain, so "
                "the pool never runs past its ceiling",
            )

    def _apply_boosts(
        self, observed: Observed, policy_set: PolicySet, capacity: CapacityPlan
    ) -> int:
        """Kueue priority boosts as the plan orders waiting work; none on anything else.

        Only the boosts this controller set (marked by our annotation) are ever removed, and
        a workload that is admitted or finished loses ours (see `controller.decide.boost`).
        """
        settled = (observed.workloads, capacity.boosts)
        if self._boosts_settled is not None and self._boosts_settled == settled:
            return 0  # every boost was in place over these very Workloads last pass
        bodies: list[KubeObject] = []
        for workload in observed.workloads:
            if _finished(workload):
                continue
            meta = workload["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            annotations = meta.get("annotations") or {}
            boosted = annotations.get(names.ANNOTATION_BOOSTED) == "true"
            value = capacity.boosts.get(key)
            wanted = value is not None
            in_place = annotations.get(names.ANNOTATION_PRIORITY_BOOST) == str(value)
            if wanted == boosted and (in_place or not wanted):
                continue
            bodies.append(
                {
                    "apiVersion": kinds.WORKLOAD.api_version,
                    "kind": kinds.WORKLOAD.kind,
                    "metadata": {
                        "name": meta["name"],
                        "namespace": meta.get("namespace"),
                        "annotations": {
                            names.ANNOTATION_PRIORITY_BOOST: str(value),
                            names.ANNOTATION_BOOSTED: "true",
                        }
                        if wanted
                        else {},
                    },
                }
            )

        def boost(body: KubeObject) -> bool:
            """One apply; False when the server refused it for good (logged)."""
            meta = body["metadata"]
            workload = f"{meta['namespace']}/{meta['name']}"
            self._guard()
            try:
                # Applying no annotations under our own field manager removes the ones we set.
                self._recorded(
                    kinds.WORKLOAD,
                    self.client.apply(
                        kinds.WORKLOAD, body, field_manager=names.BOOST_FIELD_MANAGER
                    ),
                )
            except KubeError as exc:
                if exc.retryable:
                    raise
                log.warning("boost_refused", workload=workload, error=str(exc)[:200])
                return False
            log.info("priority_boost", workload=workload, boosted=bool(meta["annotations"]))
            return True

        done = self.writes.map(bodies, boost)
        writes = sum(done)
        refused = len(done) - writes
        self._boosts_settled = settled if not writes and not refused else None
        return writes

    def _patch_workload(
        self, meta: Mapping[str, Any], patch: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """A lane's JSON Patch to its Workload, as the lane field manager, while this replica
        still leads."""
        self._guard()
        return self.client.json_patch(
            kinds.WORKLOAD,
            meta["name"],
            meta.get("namespace"),
            patch,
            field_manager=names.LANE_FIELD_MANAGER,
        )

    def _apply_lanes(self, observed: Observed, capacity: CapacityPlan) -> tuple[int, int]:
        """Each lane of the plan onto its Workload: the lanes written, and the moves started.

        A pending Workload takes its lane while Kueue has reserved it no quota: the plan lanes
        only pending workloads whose owner chose no capacity type; the patch
        (`controller.reconcile.lanes.lane_patch`) checks again on the object itself, quota
        reserved included (Kueue reserves before it admits), and guards on the version it
        was built from. A lane is never taken off: an admitted workload keeps what Kueue
        admitted it on, and one still waiting keeps its lane (the plan keeps it too).

        A lane with `move` is for a workload admitted on spot whose pods wait for a node: its
        first write (`move_patch`) deactivates it, so that Kueue evicts it and gives back its
        spot quota; `_reactivate` writes the lane on a later pass. A move lane on a Workload
        found pending is written as a pending one.
        A 409 or 422 is the Workload changing under the write (Kueue reserving quota, most
        often): logged, and the next pass decides on the new version.
        """
        settled = (observed.workloads, capacity.lanes)
        if not capacity.lanes or (
            self._lanes_settled is not None and self._lanes_settled == settled
        ):
            return 0, 0
        live = {
            key: workload
            for workload in observed.workloads
            if (key := (workload["metadata"].get("namespace", ""), workload["metadata"]["name"]))
            in capacity.lanes
        }
        self._lanes_refused = {
            key: version
            for key, version in self._lanes_refused.items()
            if key in live and live[key]["metadata"].get("resourceVersion") == version
        }
        writes: list[tuple[KubeObject, Lane, list[dict[str, Any]], bool]] = []
        for key, workload in live.items():
            if key in self._lanes_refused:
                continue
            lane = capacity.lanes[key]
            patch = move_patch(workload, lane) if lane.move else None
            move = patch is not None
            if patch is None:
                patch = lane_patch(workload, lane)
            if patch is not None:
                writes.append((workload, lane, patch, move))

        def write(item: tuple[KubeObject, Lane, list[dict[str, Any]], bool]) -> bool:
            """One patch; False when the server refused it (logged, not sent again at this
            version)."""
            workload, lane, patch, move = item
            meta = workload["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            shown = f"{key[0]}/{key[1]}"
            try:
                written = self._patch_workload(meta, patch)
            except KubeError as exc:
                if exc.status in {409, 422}:
                    log.info("lane_not_written", workload=shown, move=move, error=str(exc)[:200])
                elif exc.retryable:
                    raise
                else:
                    log.warning("lane_refused", workload=shown, move=move, error=str(exc)[:200])
                self._lanes_refused[key] = str(meta.get("resourceVersion"))
                return False
            self._recorded(kinds.WORKLOAD, written)
            project = self._lane_projects.get(key, "")
            on_demand = lane.capacity_type == names.ON_DEMAND
            if move:
                log.info(
                    "lane_move_started",
                    workload=shown,
                    lane=lane.capacity_type,
                    reason=lane.reason,
                )
                if self.metrics is not None:
                    self.metrics.lane_moved(project, lane.capacity_type)
                reason = "MovedToOnDemand" if on_demand else "MovedToSpot"
            else:
                log.info(
                    "lane_written", workload=shown, lane=lane.capacity_type, reason=lane.reason
                )
                if self.metrics is not None:
                    self.metrics.lane_written(project, lane.capacity_type)
                reason = "OnDemandLane" if on_demand else "SpotLane"
            if self.events is not None:
                self.events.emit(
                    written or workload,
                    type="Normal",
                    reason=reason,
                    action="Patch",
                    note=lane.reason,
                )
            return True

        done = self.writes.map(writes, write)
        self._lanes_settled = settled if not writes else None
        moved = sum(ok for ok, (*_, move) in zip(done, writes, strict=True) if move)
        return sum(done) - moved, moved

    def _reactivate(self, observed: Observed) -> int:
        """Every Workload deactivated to move it (our moving-to annotation) activated again in
        its lane once Kueue holds no quota for it (`reactivation_patch`): the number done.

        On every pass that observes Workloads, whatever the plan says (no lanes, lanes off, no
        lane for it any more, no valid policy): nothing this controller stopped may stay
        stopped, so this reads no plan and no settled memo. An inactive Workload without our
        annotation was stopped by someone else and is never touched. A 409 or 422 is the
        Workload changing under the write: logged, and tried again on the next pass; a
        refusal at the very version read sends the next try without the lane, so a lane the
        server will not take cannot keep the Workload stopped.
        """
        writes: list[tuple[KubeObject, list[dict[str, Any]], bool]] = []
        refused: dict[tuple[str, str], tuple[str, bool]] = {}
        for workload in observed.workloads:
            if moving_to(workload) is None:
                continue
            key = workload_key(workload)
            version = str(workload["metadata"].get("resourceVersion"))
            tried = self._reactivations_refused.get(key)
            bare = False  # with the lane, unless refused with it at this very version
            if tried is not None and tried[0] == version:
                refused[key] = tried
                if tried[1]:
                    continue  # refused with and without the lane: not again at this version
                bare = True
            patch = reactivation_patch(workload, with_lane=not bare)
            if patch is not None:
                writes.append((workload, patch, bare))
        self._reactivations_refused = refused

        def write(item: tuple[KubeObject, list[dict[str, Any]], bool]) -> bool:
            """One patch; False when the server refused it (logged)."""
            workload, patch, bare = item
            meta = workload["metadata"]
            key = workload_key(workload)
            shown = f"{key[0]}/{key[1]}"
            lane = moving_to(workload)
            try:
                written = self._patch_workload(meta, patch)
            except KubeError as exc:
                if exc.status in {409, 422}:
                    log.info("lane_move_not_done", workload=shown, error=str(exc)[:200])
                elif exc.retryable:
                    raise
                else:
                    log.warning("lane_move_refused", workload=shown, error=str(exc)[:200])
                self._reactivations_refused[key] = (str(meta.get("resourceVersion")), bare)
                return False
            self._recorded(kinds.WORKLOAD, written)
            selector = any(op["path"].startswith("/spec/podSets/") for op in patch)
            activated = any(op["path"] == "/spec/active" for op in patch)
            log.info(
                "lane_move_done", workload=shown, lane=lane, selector=selector, activated=activated
            )
            if self.events is not None:
                if not activated:
                    note = f"activated again by someone else: the move to {lane} is over"
                elif selector:
                    note = f"activated again with its pods on {lane}"
                else:
                    note = f"activated again; its pods could not be put on {lane}"
                self.events.emit(
                    written or workload,
                    type="Normal",
                    reason="LaneMoveDone",
                    action="Patch",
                    note=note,
                )
            return True

        return sum(self.writes.map(writes, write))

    def _tell_lost(self, observed: Observed, policy_set: PolicySet, capacity: CapacityPlan) -> int:
        """A Warning Event (DeadlineLost) on each Workload newly judged lost, once per
        Workload (see `controller.reconcile.lost`); the number told. One whose Event could
        not be written is tried again next pass."""
        if self._lost_told is None:
            self._lost_told = told_before(observed.projects)
        unfinished = {workload_key(w): w for w in observed.workloads if not _finished(w)}
        tell, self._lost_told = to_tell(capacity.lost_deadlines, self._lost_told, unfinished)
        events = self.events
        if events is None or not tell:
            return 0
        spec = policy_set.policy.spec
        tiers = tiers_of(policy_set.projects, spec.tiers)

        def emit(key: tuple[str, str]) -> bool:
            judged = capacity.lost_deadlines[key]
            note = lost_note(
                judged,
                lost_below=spec.risk.lost_below,
                tier=tiers.get(judged.project),
                max_wait_seconds=spec.risk.lost_max_wait_seconds,
            )
            written = events.emit(
                unfinished[key], type="Warning", reason=LOST_REASON, action=LOST_ACTION, note=note
            )
            if written is not None:
                log.info("deadline_lost", workload=f"{key[0]}/{key[1]}", deadline=judged.deadline)
            return written is not None

        done = self.writes.map(tell, emit)
        self._lost_told.update(key for key, ok in zip(tell, done, strict=True) if ok)
        return sum(done)

    def _apply(self, obj: KubeObject) -> None:
        kind = kinds.kind_of(obj)
        self._recorded(
            kind, self.client.apply(kind, with_last_applied(obj), field_manager=names.FIELD_MANAGER)
        )

    def _hand_over(self, body: KubeObject) -> None:
        kind = kinds.kind_of(body)
        self._recorded(
            kind, self.client.apply(kind, body, field_manager=names.INITIAL_FIELD_MANAGER)
        )

    def _recorded(self, kind: kinds.Kind, written: KubeObject) -> None:
        if self.record is not None and written:
            self.record(kind, written)

    # ------------------------------------------------------------------ status
    def _write_status(self, kind: kinds.Kind, live: KubeObject, status: dict[str, Any]) -> bool:
        if not status_changed(live, status):
            return False
        return self._send_status(kind, live, status)

    def _send_status(self, kind: kinds.Kind, live: KubeObject, status: dict[str, Any]) -> bool:
        """Apply `status`; False when the object was deleted since it was read."""
        self._guard()
        body = {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "metadata": {"name": live["metadata"]["name"]},
            "status": status,
        }
        try:
            self._recorded(
                kind,
                self.client.apply(
                    kind, body, field_manager=names.FIELD_MANAGER, subresource="status"
                ),
            )
        except KubeError as exc:
            if exc.not_found:  # deleted since we read it
                return False
            raise
        return True

    def _write_statuses(
        self,
        observed: Observed,
        validation: ClusterValidation,
        rendered: Rendered | None,
        result: ReconcileResult,
        apply_error: str | None,
    ) -> None:
        now = self.wall_clock()
        for live in observed.policies:
            name = live["metadata"]["name"]
            capacity = result.capacity
            outcome = PolicyOutcome(
                errors=validation.errors_of(CapacityPolicy.KIND, name),
                projects=len(validation.policy_set.projects) if validation.policy_set else 0,
                mix=rendered.mix if rendered else (),
                unserved=result.unserved,
                kept=result.kept,
                apply_error=apply_error,
                pools=tuple(pool_status_entries(capacity, live, now=now.timestamp()))
                if capacity is not None
                else (),
                history_error=self.history.error if self.history is not None else None,
                binding=tuple(
                    f"{d.pool}: {d.reason}"
                    for d in (capacity.decisions if capacity is not None else ())
                    if d.reason in BINDING_REASONS
                ),
            )
            was_valid = _condition_status(live, "Valid")
            if self._write_status(
                kinds.CAPACITY_POLICY, live, policy_status(live, outcome, now=now)
            ):
                result.status_writes += 1
                if outcome.errors and was_valid != "False" and self.events is not None:
                    self.events.emit(
                        live,
                        type="Warning",
                        reason="InvalidPolicy",
                        action="Validate",
                        note="; ".join(f"{e.path}: {e.message}" for e in outcome.errors),
                    )
        with_objects = projects_with_objects(observed.managed)
        quotas_of: dict[str, list[FlavorQuota]] = {}
        for (project_name, _), quota in (rendered.quotas if rendered else {}).items():
            quotas_of.setdefault(project_name, []).append(quota)
        settled, self._statuses_settled = self._statuses_settled, {}
        changed: list[_StatusWrite] = []
        for live in observed.projects:
            name = live["metadata"]["name"]
            errors = validation.errors_of(TrainingProject.KIND, name)
            inputs = (
                live,
                result.capacity,
                validation,
                apply_error,
                result.queued.get(name),
                name in with_objects,
            )
            if not errors and _same_inputs(settled.get(name), inputs):
                # The very objects it was computed from last pass, when it needed no write:
                # the status would come out the same (the clock alone changes no part of it
                # while the plan stands, see plan_holds).
                self._statuses_settled[name] = inputs
                continue
            readable = validation.readable.get(name)
            quotas = tuple(quotas_of.get(name, ())) if not errors else ()
            project_outcome = ProjectOutcome(
                errors=errors,
                policy_valid=validation.policy_set is not None,
                quotas=quotas,
                apply_error=apply_error,
                capacity=project_capacity_status(
                    result.capacity,
                    name,
                    live,
                    now=now.timestamp(),
                    runtime_history=self.learning.runtimes.history(name),
                )
                if result.capacity is not None and not errors
                else None,
                applied_before=name in with_objects,
                passed_deadlines=tuple(d for _, d, _ in past_deadlines(readable, now=now))
                if readable is not None
                else None,
                tracking=_tracking(result, validation.policy_set, name) if not errors else None,
            )
            status = project_status(live, project_outcome, now=now)
            if not status_changed(live, status):
                self._statuses_settled[name] = inputs
                continue
            changed.append(_StatusWrite(live, status, inputs, project_outcome, errors))

        # The writes go out together (each its own object); what follows them, in order.
        sent = self.writes.map(
            changed, lambda w: self._send_status(kinds.TRAINING_PROJECT, w.live, w.status)
        )
        for write, written in zip(changed, sent, strict=True):
            live, name = write.live, write.live["metadata"]["name"]
            if not written:
                self._statuses_settled[name] = write.inputs
                continue
            result.status_writes += 1
            tracked = _condition(write.status, TRACKED)
            if (
                tracked is not None
                and tracked["status"] == "False"
                and _condition_status(live, TRACKED) != "False"
                and self.events is not None
            ):
                self.events.emit(
                    live,
                    type="Warning",
                    reason=tracked["reason"],
                    action="Observe",
                    note=tracked["message"],
                )
            if (
                write.errors
                and _condition_status(live, "Valid") != "False"
                and self.events is not None
            ):
                self.events.emit(
                    live,
                    type="Warning",
                    reason="InvalidSpec",
                    action="Validate",
                    note=invalid_spec_message(
                        write.errors, applied_before=write.outcome.applied_before
                    ),
                )


@dataclass(frozen=True)
class _StatusWrite:
    """A project status that differs from the live one, and what it was computed from."""

    live: KubeObject
    status: dict[str, Any]
    inputs: tuple[Any, ...]
    outcome: ProjectOutcome
    errors: tuple[Any, ...]


TRACKED = "DeadlinesTracked"


def _same_inputs(kept: tuple[Any, ...] | None, inputs: tuple[Any, ...]) -> bool:
    """Objects compared by identity (a deep comparison of a plan would cost what it saves),
    the small values after them by equality."""
    return (
        kept is not None
        and all(a is b for a, b in zip(kept[:3], inputs[:3], strict=True))
        and kept[3:] == inputs[3:]
    )


def _tracking(
    result: ReconcileResult, policy_set: PolicySet | None, project: str
) -> DeadlineTracking | None:
    """DeadlinesTracked's inputs from this pass's plan, or None when no risk was estimated."""
    spec = policy_set.project(project) if policy_set is not None else None
    if result.capacity is None or spec is None:
        return None
    return DeadlineTracking(
        deadlines=tuple(spec.spec.deadlines),
        queued=result.queued.get(project, 0),
        counted={d.deadline: d.workloads for d in result.capacity.deadlines_of(project)},
    )


def _condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)


def _condition_status(live: Mapping[str, Any], type_: str) -> str | None:
    found = _condition(live.get("status") or {}, type_)
    return None if found is None else str(found.get("status"))
