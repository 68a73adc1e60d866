"""One level-triggered pass: read everything, derive the whole desired state, converge.

The shell around the pure core (validation, rendering, the plan, status): it reads the cluster,
calls the core, and carries out the plan with server-side apply under one field manager. It
writes only what differs, prunes only objects carrying our label, never prunes a queue that
workloads still use, and never touches anything while the policy is invalid. Every write first
checks `may_write`, so a replica that lost its lease stops in the middle of a pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal, Protocol

import structlog

from controller import names
from controller.api.types import CapacityPolicy, TrainingProject
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from controller.reconcile.diff import (
    KubeObject,
    Plan,
    Ref,
    make_plan,
    ref,
    show_ref,
    with_last_applied,
)
from controller.reconcile.status import (
    PolicyOutcome,
    ProjectOutcome,
    policy_status,
    project_status,
    status_changed,
)
from controller.reconcile.validation import ClusterValidation, validate_cluster
from controller.render.desired import Rendered, render

log = structlog.get_logger(__name__)


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


@dataclass(frozen=True)
class Observed:
    """Everything one pass reads from the cluster."""

    served: frozenset[str]
    policies: tuple[KubeObject, ...]
    projects: tuple[KubeObject, ...]
    managed: tuple[KubeObject, ...]
    workloads: tuple[KubeObject, ...]


@dataclass
class ReconcileResult:
    created: int = 0
    updated: int = 0
    pruned: int = 0
    status_writes: int = 0
    kept: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    """Objects the API server refused (a permanent error), as "Kind/name: reason"."""
    invalid: tuple[str, ...] = ()
    unserved: tuple[str, ...] = ()
    policy: str | None = None
    seconds: float = 0.0
    plan: Plan | None = field(default=None, repr=False)

    @property
    def writes(self) -> int:
        return self.created + self.updated + self.pruned + self.status_writes


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


def plan_against_cluster(client: KubeClient, rendered: Rendered) -> tuple[Plan, tuple[str, ...]]:
    """What applying `rendered` would change, reading the cluster and writing nothing.

    Returns the plan and the kinds the cluster does not serve (skipped, as the controller
    would skip them).
    """
    reader = Reconciler(client, may_write=lambda: False)
    observed = reader.observe()
    desired = [o for o in rendered.objects if kinds.kind_of(o).group_version in observed.served]
    unserved = sorted(
        {f"{o['apiVersion']} {o['kind']}" for o in rendered.objects}
        - {f"{o['apiVersion']} {o['kind']}" for o in desired}
    )
    local_queues = [o for o in observed.managed if o["kind"] == "LocalQueue"]
    in_use = queues_in_use(observed.workloads, local_queues)
    protected = {
        r: ("WorkloadsPresent", f"{count} workload(s) pending in or admitted to it")
        for r, count in in_use.items()
    }
    return make_plan(desired, observed.managed, protected=protected), tuple(unserved)


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
        on_demand_targets: Callable[[], Mapping[str, int] | None] = lambda: None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.events = events
        self.may_write = may_write
        self.wall_clock = wall_clock
        self.on_demand_targets = on_demand_targets

    # ------------------------------------------------------------------ observe
    def observe(self) -> Observed:
        served = frozenset(self.client.served_group_versions())
        policies, _ = self.client.list(kinds.CAPACITY_POLICY)
        projects, _ = self.client.list(kinds.TRAINING_PROJECT)
        managed: list[KubeObject] = []
        for kind in kinds.MANAGED_KINDS:
            if kind.group_version in served:
                items, _ = self.client.list(kind, label_selector=names.MANAGED_SELECTOR)
                managed.extend(items)
        workloads: list[KubeObject] = []
        if kinds.WORKLOAD.group_version in served:
            workloads, _ = self.client.list(kinds.WORKLOAD)
        return Observed(served, tuple(policies), tuple(projects), tuple(managed), tuple(workloads))

    # ------------------------------------------------------------------ the pass
    def reconcile(self) -> ReconcileResult:
        started = time.monotonic()
        observed = self.observe()
        validation = validate_cluster(observed.policies, observed.projects)
        result = ReconcileResult(
            policy=validation.policy_name,
            invalid=tuple(sorted(n for _, n in validation.errors)),
        )
        if validation.policy_name is None:
            log.info("no_capacity_policy", projects=len(observed.projects))
            result.seconds = time.monotonic() - started
            return result
        rendered: Rendered | None = None
        apply_error: str | None = None
        if validation.policy_set is not None:
            rendered = render(
                validation.policy_set,
                on_demand_gpus=self.on_demand_targets(),
                namespace=self.namespace,
            )
            try:
                self._converge(observed, validation, rendered, result)
            except KubeError as exc:
                apply_error = str(exc)[:500]
                self._write_statuses(observed, validation, rendered, result, apply_error)
                raise
            if result.failed:
                apply_error = f"{len(result.failed)} object(s) refused: " + "; ".join(
                    result.failed[:5]
                )
        self._write_statuses(observed, validation, rendered, result, apply_error)
        result.seconds = time.monotonic() - started
        log.info(
            "reconciled",
            policy=result.policy,
            created=result.created,
            updated=result.updated,
            pruned=result.pruned,
            status_writes=result.status_writes,
            kept=len(result.kept),
            invalid=list(result.invalid),
            seconds=round(result.seconds, 3),
        )
        return result

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
        desired = [o for o in rendered.objects if kinds.kind_of(o).group_version in observed.served]
        unserved = sorted(
            {f"{o['apiVersion']} {o['kind']}" for o in rendered.objects}
            - {f"{o['apiVersion']} {o['kind']}" for o in desired}
        )
        result.unserved = tuple(unserved)
        local_queues = [o for o in observed.managed if o["kind"] == "LocalQueue"]
        in_use = queues_in_use(observed.workloads, local_queues)
        plan = make_plan(
            desired,
            observed.managed,
            protected=protected_objects(observed.managed, validation, in_use),
        )
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

        for obj in plan.creates:
            if attempt(obj, partial(self._apply, obj)):
                result.created += 1
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

    def _apply(self, obj: KubeObject) -> None:
        kind = kinds.kind_of(obj)
        self.client.apply(kind, with_last_applied(obj), field_manager=names.FIELD_MANAGER)

    # ------------------------------------------------------------------ status
    def _write_status(self, kind: kinds.Kind, live: KubeObject, status: dict[str, Any]) -> bool:
        if not status_changed(live, status):
            return False
        self._guard()
        body = {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "metadata": {"name": live["metadata"]["name"]},
            "status": status,
        }
        try:
            self.client.apply(kind, body, field_manager=names.FIELD_MANAGER, subresource="status")
        except KubeError as exc:
            if exc.not_found:  # deleted since we listed it
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
            outcome = PolicyOutcome(
                errors=validation.errors_of(CapacityPolicy.KIND, name),
                projects=len(validation.policy_set.projects) if validation.policy_set else 0,
                mix=rendered.mix if rendered else (),
                unserved=result.unserved,
                kept=result.kept,
                apply_error=apply_error,
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
        for live in observed.projects:
            name = live["metadata"]["name"]
            errors = validation.errors_of(TrainingProject.KIND, name)
            quotas = (
                tuple(q for (project, _), q in rendered.quotas.items() if project == name)
                if rendered and not errors
                else ()
            )
            project_outcome = ProjectOutcome(
                errors=errors,
                policy_valid=validation.policy_set is not None,
                quotas=quotas,
                apply_error=apply_error,
            )
            was_valid = _condition_status(live, "Valid")
            status = project_status(live, project_outcome, now=now)
            if self._write_status(kinds.TRAINING_PROJECT, live, status):
                result.status_writes += 1
                if errors and was_valid != "False" and self.events is not None:
                    self.events.emit(
                        live,
                        type="Warning",
                        reason="InvalidSpec",
                        action="Validate",
                        note="; ".join(f"{e.path}: {e.message}" for e in errors)
                        + "; the objects applied before are kept",
                    )


def _condition_status(live: Mapping[str, Any], type_: str) -> str | None:
    for c in (live.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return str(c.get("status"))
    return None
