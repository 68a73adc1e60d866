"""Every metric the controller exports, with its labels, in one place.

Names follow Prometheus conventions (base units, `_total` counters, `_ratio` for 0..1) and are
the contract the KEDA ScaledObjects, alerts and dashboards rely on. Labels come only from
bounded sets (projects, pools, deadlines and tiers of the policy; actions and reasons of the
decision code), never workload names. Each controller, and each simulator run, has its own
registry. Series whose label set disappears (a project removed) are deleted one by one, so a
scrape never sees a gauge half cleared.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from controller import __version__
from controller.api.policy_set import PolicySet
from controller.capacity import whole_nodes
from controller.decide.mix import Decision, Reason
from controller.decide.plan import CapacityPlan
from controller.risk.recalibration import Judged

disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` series: they double the series count for nothing

PREFIX = "quartermaster"
BINDING_REASONS = frozenset(
    {
        Reason.CEILING_BINDS,
        Reason.BUDGET_BINDS,
        Reason.TARGET_UNREACHABLE,
        Reason.PROMETHEUS_UNAVAILABLE,
    }
)


def counted(decision: Decision) -> bool:
    """Decisions worth counting: a change of the mix, or a hold because something binds."""
    return decision.changed or decision.reason in BINDING_REASONS


RECONCILE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120)
"""A pass over 1,000 projects takes seconds; a slow one must still land in a bucket."""
DURATION_BUCKETS = (300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 259200, 604800)
RISK_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""The deciles of `quartermaster calibration`'s reliability table, as upper bounds (written out:
0.30000000000000004 would be a label value). Prometheus buckets hold their upper bound, so a
risk of exactly 0.2 counts in (0.1, 0.2] here and in [0.2, 0.3) in the table."""
MISSED, MET = "missed", "met"
OUTCOMES = (MISSED, MET)
LEARNED_PARTS = ("judged_estimates", "runtime_keys")
"""What is dropped from the learned summary when it does not fit its ConfigMap."""


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.queue_pending_workloads = Gauge(
            f"{PREFIX}_queue_pending_workloads",
            "Workloads waiting for admission in the ClusterQueue (count).",
            ["cluster_queue"],
            registry=r,
        )
        self.queue_pending_gpus = Gauge(
            f"{PREFIX}_queue_pending_gpus",
            "GPUs requested by workloads waiting in the ClusterQueue (GPUs).",
            ["cluster_queue"],
            registry=r,
        )
        self.queue_predicted_wait_seconds = Gauge(
            f"{PREFIX}_queue_predicted_wait_seconds",
            "Predicted wait of the next workload in the ClusterQueue, by quantile (seconds).",
            ["cluster_queue", "quantile"],
            registry=r,
        )
        self.deadline_risk_ratio = Gauge(
            f"{PREFIX}_deadline_risk_ratio",
            "Estimated probability of missing the deadline (ratio 0..1).",
            ["project", "deadline", "tier"],
            registry=r,
        )
        self.deadline_risk_calibrated_ratio = Gauge(
            f"{PREFIX}_deadline_risk_calibrated_ratio",
            "Probability of missing the deadline, recalibrated on the deadlines this controller "
            "judged (ratio 0..1); equal to the raw risk until any is judged.",
            ["project", "deadline", "tier"],
            registry=r,
        )
        self.deadline_risk_judged_ratio = Histogram(
            f"{PREFIX}_deadline_risk_judged_ratio",
            "Raw risk estimates of deadlines since judged, by tier and outcome (missed or met), "
            "each counted once when its deadline resolved; the reliability table per bucket "
            "(ratio 0..1).",
            ["tier", "outcome"],
            buckets=RISK_BUCKETS,
            registry=r,
        )
        self.deadline_risk_judged_squared_error_total = Counter(
            f"{PREFIX}_deadline_risk_judged_squared_error",
            "Sum of (risk - outcome)^2 over the judged estimates, outcome 1 when missed: over "
            "the estimates judged (the histogram's _count) it is the Brier score (ratio^2).",
            ["tier"],
            registry=r,
        )
        self.deadlines_judged_total = Counter(
            f"{PREFIX}_deadlines_judged",
            "Deadline occurrences judged (a cutoff met or missed), by tier and outcome (count).",
            ["tier", "outcome"],
            registry=r,
        )
        self.deadline_slack_seconds = Gauge(
            f"{PREFIX}_deadline_slack_seconds",
            "Deadline minus the median projected finish; negative when late (seconds).",
            ["project", "deadline", "tier"],
            registry=r,
        )
        self.capacity_target_gpus = Gauge(
            f"{PREFIX}_capacity_target_gpus",
            "GPUs the pool's NodePool of that capacity type may provision (GPUs).",
            ["pool", "capacity_type"],
            registry=r,
        )
        self.spot_ratio = Gauge(
            f"{PREFIX}_spot_ratio",
            "Share of the pool's GPUs that are spot (ratio 0..1).",
            ["pool"],
            registry=r,
        )
        self.warm_pool_target_gpus = Gauge(
            f"{PREFIX}_warm_pool_target_gpus",
            "Idle GPUs the pool's warm pool should hold; KEDA scales placeholders on it (GPUs).",
            ["pool"],
            registry=r,
        )
        self.pool_idle_gpus = Gauge(
            f"{PREFIX}_pool_idle_gpus",
            "GPUs on Ready nodes of the pool that no running workload uses; the warm pool "
            "converges when this reaches its target (GPUs).",
            ["pool"],
            registry=r,
        )
        self.forecast_demand_gpus = Gauge(
            f"{PREFIX}_forecast_demand_gpus",
            "Forecast GPU demand over the provisioning horizon, by quantile (GPUs).",
            ["pool", "quantile"],
            registry=r,
        )
        self.estimated_cost_dollars_per_hour = Gauge(
            f"{PREFIX}_estimated_cost_dollars_per_hour",
            "Cost of the GPUs in use at list prices (dollars per hour).",
            ["pool", "capacity_type"],
            registry=r,
        )
        self.project_cost_dollars_per_hour = Gauge(
            f"{PREFIX}_project_cost_dollars_per_hour",
            "Cost of the project's GPUs in use at list prices (dollars per hour).",
            ["project", "tier"],
            registry=r,
        )
        self.project_budget_exceeded = Gauge(
            f"{PREFIX}_project_budget_exceeded",
            "1 when the project's spending rate is over its monthly budget, else 0.",
            ["project", "tier"],
            registry=r,
        )
        self.pool_demand_gpus = Gauge(
            f"{PREFIX}_pool_demand_gpus",
            "GPUs requested in the pool by running and pending workloads (GPUs).",
            ["pool"],
            registry=r,
        )
        self.spot_shortage_expected_wait_seconds = Gauge(
            f"{PREFIX}_spot_shortage_expected_wait_seconds",
            "How much longer a spot launch in the pool is expected to wait for the capacity "
            "shortage Karpenter's InsufficientCapacityErrors show it in (every zone of the pool "
            "short); 0 when none is known (seconds).",
            ["pool"],
            registry=r,
        )
        self.decisions_total = Counter(
            f"{PREFIX}_decisions",
            "Capacity decisions taken, by pool, action and reason (count).",
            ["pool", "action", "reason"],
            registry=r,
        )
        self.lane_workloads = Gauge(
            f"{PREFIX}_lane_workloads",
            "Pending deadline workloads the controller puts in a lane (the capacity type their "
            "pods select), by project and lane (count).",
            ["project", "lane"],
            registry=r,
        )
        self.lane_writes_total = Counter(
            f"{PREFIX}_lane_writes",
            "Lanes written onto Workloads (a node selector and the lane annotations), by "
            "project and lane (count).",
            ["project", "lane"],
            registry=r,
        )
        self.lane_moves_total = Counter(
            f"{PREFIX}_lane_moves",
            "Workloads admitted on spot whose pods waited for a node, deactivated to move them "
            "to their lane (Kueue evicts them and gives back their spot quota; a later pass "
            "activates them again in the lane), by project and lane (count).",
            ["project", "lane"],
            registry=r,
        )
        self.lost_workloads = Gauge(
            f"{PREFIX}_lost_workloads",
            "Waiting workloads of the project whose deadline is lost: even started now, their "
            "chance to make it is under risk.lostBelow (count).",
            ["project"],
            registry=r,
        )
        self.reconcile_duration_seconds = Histogram(
            f"{PREFIX}_reconcile_duration_seconds",
            "Duration of one full reconcile pass (seconds).",
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        self.reconcile_errors_total = Counter(
            f"{PREFIX}_reconcile_errors", "Reconcile passes that failed (count).", registry=r
        )
        self.last_successful_reconcile_timestamp_seconds = Gauge(
            f"{PREFIX}_last_successful_reconcile_timestamp_seconds",
            "When the last reconcile pass succeeded (Unix time, seconds).",
            registry=r,
        )
        self.leader = Gauge(
            f"{PREFIX}_leader",
            "1 when this replica holds the Lease and reconciles, else 0; alerts on the "
            "controller's own view (Prometheus reachable) join on it to ignore the standby.",
            registry=r,
        )
        self.prometheus_up = Gauge(
            f"{PREFIX}_prometheus_up",
            "1 when the controller could read history from Prometheus, else 0.",
            registry=r,
        )
        self.workload_duration_seconds = Histogram(
            f"{PREFIX}_workload_duration_seconds",
            "Runtime of finished workloads, from admission to finish (seconds).",
            ["project", "tier"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.learned_state_persisted = Gauge(
            f"{PREFIX}_learned_state_persisted",
            "1 when what the controller learned (runtimes, judged deadlines) is kept in its "
            "ConfigMap across restarts, 0 when in memory only (no core v1 served, or the "
            "ConfigMap may not be read) or not known yet.",
            registry=r,
        )
        self.learned_state_bytes = Gauge(
            f"{PREFIX}_learned_state_bytes",
            "Size of the compressed learned summary last written to the ConfigMap (bytes).",
            registry=r,
        )
        self.learned_state_writes_total = Counter(
            f"{PREFIX}_learned_state_writes",
            "Writes of the learned summary to its ConfigMap, by result (written or failed) "
            "(count).",
            ["result"],
            registry=r,
        )
        self.learned_state_dropped_total = Counter(
            f"{PREFIX}_learned_state_dropped",
            "Items left out of a learned summary to fit its ConfigMap: the oldest judged "
            "estimates and the least recently updated runtime keys, by part (count).",
            ["part"],
            registry=r,
        )
        self.build_info = Gauge(
            f"{PREFIX}_build_info",
            "Build information; the value is always 1.",
            ["version"],
            registry=r,
        )
        self.build_info.labels(version=__version__).set(1)
        self._lock = threading.Lock()
        self._seen: dict[str, dict[tuple[str, ...], Gauge]] = {}
        """Per gauge, the series a plan set and their children: `Gauge.labels` checks and
        formats its labels on every call, and a pass sets some 7,000 series at 1,000
        projects."""

    def render(self) -> tuple[int, str, bytes]:
        return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)

    def _set(self, gauge: Gauge, values: Mapping[tuple[str, ...], float]) -> None:
        """Set these series and delete the ones of this gauge that are no longer reported."""
        children = self._seen.setdefault(gauge._name, {})
        for labels, value in values.items():
            child = children.get(labels)
            if child is None:
                child = children[labels] = gauge.labels(*labels)
            child.set(value)
        for labels in [labels for labels in children if labels not in values]:
            gauge.remove(*labels)
            del children[labels]

    def forget_plan(self) -> None:
        """Drop every series a plan set: a replica that stops leading must not go on exporting
        the last risks and targets it computed, or alerts taking the max over replicas would
        keep firing on figures nobody updates any more."""
        gauges = {g._name: g for g in vars(self).values() if isinstance(g, Gauge)}
        with self._lock:
            for name, seen in self._seen.items():
                for labels in seen:
                    gauges[name].remove(*labels)
            self._seen.clear()

    def update(
        self,
        policy_set: PolicySet,
        plan: CapacityPlan,
        calibrated: Mapping[tuple[str, str], float] | None = None,
    ) -> None:
        """Every plan series; `calibrated`, (project, deadline) -> the recalibrated risk, sets
        the calibrated gauge (none given: the raw risk, as with nothing judged yet)."""
        tiers = {p.name: p.spec.tier for p in policy_set.projects}
        calibrated = calibrated or {}
        with self._lock:
            self._set(
                self.queue_pending_workloads,
                {(p,): float(n) for p, n in plan.pending_workloads.items()},
            )
            self._set(
                self.queue_pending_gpus, {(p,): float(n) for p, n in plan.pending_gpus.items()}
            )
            waits: dict[tuple[str, ...], float] = {}
            for project, wait in plan.waits.items():
                waits[(project, "0.5")] = wait.p50_seconds
                waits[(project, "0.9")] = wait.p90_seconds
            self._set(self.queue_predicted_wait_seconds, waits)
            self._set(
                self.deadline_risk_ratio,
                {
                    (d.project, d.deadline, tiers.get(d.project, "")): d.estimate.risk
                    for d in plan.deadlines
                },
            )
            self._set(
                self.deadline_risk_calibrated_ratio,
                {
                    (d.project, d.deadline, tiers.get(d.project, "")): calibrated.get(
                        (d.project, d.deadline), d.estimate.risk
                    )
                    for d in plan.deadlines
                },
            )
            self._set(
                self.deadline_slack_seconds,
                {
                    (d.project, d.deadline, tiers.get(d.project, "")): d.estimate.slack_seconds
                    for d in plan.deadlines
                },
            )
            targets: dict[tuple[str, ...], float] = {}
            ratios: dict[tuple[str, ...], float] = {}
            per_node = {pool.name: pool.gpus_per_node for pool in policy_set.policy.spec.pools}
            for mix in plan.rendered.mix:
                # What the NodePools may provision: the mix on whole nodes, as rendered.
                node = per_node.get(mix.pool, 1)
                targets[(mix.pool, "on-demand")] = whole_nodes(mix.on_demand_gpus, node)
                targets[(mix.pool, "spot")] = whole_nodes(mix.spot_gpus, node)
                total = mix.on_demand_gpus + mix.spot_gpus
                ratios[(mix.pool,)] = mix.spot_gpus / total if total else 0.0
            self._set(self.capacity_target_gpus, targets)
            self._set(self.spot_ratio, ratios)
            self._set(
                self.warm_pool_target_gpus, {(p,): float(n) for p, n in plan.warm_targets.items()}
            )
            self._set(self.pool_idle_gpus, {(p,): gpus for p, gpus in plan.idle_gpus.items()})
            forecasts: dict[tuple[str, ...], float] = {}
            for pool, forecast in plan.forecasts.items():
                forecasts[(pool, "0.5")] = forecast.p50_gpus
                forecasts[(pool, "0.9")] = forecast.p90_gpus
            self._set(self.forecast_demand_gpus, forecasts)
            self._set(self.pool_demand_gpus, {(p,): d for p, d in plan.demand_gpus.items()})
            shortages = plan.observation.spot_shortages if plan.observation is not None else {}
            self._set(
                self.spot_shortage_expected_wait_seconds,
                {(p.name,): shortages.get(p.name, 0.0) for p in policy_set.policy.spec.pools},
            )
            self._set(
                self.estimated_cost_dollars_per_hour,
                {key: cost for key, cost in plan.cost_per_hour.items()},
            )
            self._set(
                self.project_cost_dollars_per_hour,
                {(p, tiers.get(p, "")): cost for p, cost in plan.project_cost_per_hour.items()},
            )
            self._set(
                self.project_budget_exceeded,
                {
                    (p.name, p.spec.tier): 1.0 if p.name in plan.budget_exceeded else 0.0
                    for p in policy_set.projects
                    if p.spec.budget is not None
                },
            )
            # Every project with deadlines reports, 0 included: an alert on a rise needs the
            # series before the first lost workload, not only after it.
            self._set(
                self.lost_workloads,
                {
                    (p.name,): float(len(plan.lost_of(p.name)))
                    for p in policy_set.projects
                    if p.spec.deadlines
                },
            )
            for decision in plan.decisions:
                if counted(decision):
                    self.decisions_total.labels(
                        decision.pool, decision.action, decision.reason
                    ).inc()

    def update_lanes(self, lanes: Iterable[tuple[str, str]]) -> None:
        """(project, lane) of each workload the plan puts in a lane: counted per pair, and a
        pair no longer reported is removed like every plan series."""
        counts: dict[tuple[str, ...], float] = {}
        for project, lane in lanes:
            counts[(project, lane)] = counts.get((project, lane), 0.0) + 1.0
        with self._lock:
            self._set(self.lane_workloads, counts)

    def lane_written(self, project: str, lane: str) -> None:
        self.lane_writes_total.labels(project, lane).inc()

    def lane_moved(self, project: str, lane: str) -> None:
        self.lane_moves_total.labels(project, lane).inc()

    def observe_judged(self, judged: Iterable[Judged]) -> None:
        """Estimates just judged (each once): the histogram of their raw risk by tier and
        outcome, the squared error per tier, and the distinct deadline occurrences judged."""
        deadlines: dict[tuple[str, str], set[str]] = {}
        for j in judged:
            outcome = MISSED if j.missed else MET
            self.deadline_risk_judged_ratio.labels(j.tier, outcome).observe(j.risk)
            error = j.risk - (1.0 if j.missed else 0.0)
            self.deadline_risk_judged_squared_error_total.labels(j.tier).inc(error * error)
            deadlines.setdefault((j.tier, outcome), set()).add(j.deadline_id)
        for (tier, outcome), ids in deadlines.items():
            self.deadlines_judged_total.labels(tier, outcome).inc(len(ids))

    def learned_state_dropped(self, *, judged: int, keys: int) -> None:
        """Items left out of a summary to fit its ConfigMap."""
        for part, count in zip(LEARNED_PARTS, (judged, keys), strict=True):
            if count:
                self.learned_state_dropped_total.labels(part).inc(count)

    def observe_finished(self, durations: Iterable[tuple[str, str, float]]) -> None:
        """(project, tier, seconds) of workloads seen finished for the first time."""
        for project, tier, seconds in durations:
            self.workload_duration_seconds.labels(project, tier).observe(seconds)
