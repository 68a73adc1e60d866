"""The controller's metrics contract, scraped by a real Prometheus from a real controller process.

What is real: `python -m controller.cli run` as an OS process (its loop, leader election, /metrics
on its health port), the API server and etcd with the real Kueue, Karpenter and KEDA schemas,
and Prometheus (Debian's package, testenv/prometheus.py) scraping that /metrics every
second, read back through prometheus-api-client, as the controller itself and KEDA's
Prometheus scaler ask. The example policy's `spec.prometheus.url` points at that Prometheus, so
the controller reads its history there and the KEDA ScaledObjects it writes query it.

Stand-ins: Lease and Event are custom resources on the CRD-only server
(testenv/standins); apps/v1 is not served there, so the warm-pool Deployments are
left out (their ScaledObjects are not); no Kueue or Karpenter controller runs, so the
Workloads stay pending. Prometheus scrapes the one controller twice, under two jobs, standing
for two replicas exporting the same series: a KEDA query must still give exactly one sample.

The controller runs on the wall clock, so the policy has no evaluation window and no cooldown,
and llm-pretrain's deadline is a one-off 60 hours from the start: 8 pending Workloads of
16 GPUs x 30 hours put it at risk (about 0.3) until one 16-GPU step of on-demand (about 0.1).
"""

from __future__ import annotations

import copy
import math
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller import __version__, names
from controller.api.loader import load_policy_set
from controller.capacity import whole_nodes
from controller.decide.mix import Action, Reason
from controller.kube import kinds
from controller.kube.client import KubeClient
from controller.render.desired import render
from controller.render.keda import warm_pool_query
from testenv.controlplane import ControlPlane, free_ports
from testenv.prometheus import PrometheusServer, ScrapeTarget
from tests.integration.conftest import delete_everything, ensure_namespaces, new_client
from tests.integration.test_capacity_loop import deadline_workload
from tests.integration.test_reconcile import apply_doc, example_documents

REPO_ROOT = Path(__file__).parents[2]
NAMESPACE = names.DEFAULT_NAMESPACE
JOB = "quartermaster"
REPLICA_JOB = "quartermaster-replica"
RESYNC_SECONDS = 2.0
LEASE_SECONDS = 3.0
PROJECT = "llm-pretrain"
DEADLINE = "weekly-checkpoint"
POLICY = "gpu-fleet"
POOL = "a100"
GPU = "nvidia.com/gpu"
FLOOR = 16
STEP = 16
WORKLOADS = 8
WORKLOAD_GPUS = 16
HOURS_TO_CUTOFF = 60

GAUGES = (
    "quartermaster_queue_pending_workloads",
    "quartermaster_queue_pending_gpus",
    "quartermaster_queue_predicted_wait_seconds",
    "quartermaster_deadline_risk_ratio",
    "quartermaster_deadline_slack_seconds",
    "quartermaster_capacity_target_gpus",
    "quartermaster_spot_ratio",
    "quartermaster_warm_pool_target_gpus",
    "quartermaster_pool_idle_gpus",
    "quartermaster_forecast_demand_gpus",
    "quartermaster_estimated_cost_dollars_per_hour",
    "quartermaster_last_successful_reconcile_timestamp_seconds",
    "quartermaster_build_info",
    "quartermaster_leader",
)
CONTRACT = (
    *GAUGES,
    "quartermaster_decisions_total",
    "quartermaster_reconcile_duration_seconds",
    "quartermaster_reconcile_errors_total",
)
"""Every name dashboards, alerts and KEDA rely on (controller/metrics.py)."""
LABELS = frozenset(
    {
        "pool",
        "capacity_type",
        "project",
        "deadline",
        "tier",
        "cluster_queue",
        "quantile",
        "action",
        "reason",
        "version",
        "le",
    }
)
"""Every label a quartermaster_* series may carry; none is per workload."""


# ------------------------------------------------------------------ helpers
def wait_for(
    predicate: Callable[[], bool], timeout: float, what: str, explain: Callable[[], str] = str
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}\n{explain()}")
        time.sleep(0.1)


def workload(index: int) -> dict[str, Any]:
    """A pending Workload of 2 pods x 8 GPUs, 30 hours long, checkpointing every 4 hours. Its
    owner chose spot, so no lane moves it: the pool's mix alone moves the on-demand limit."""
    return deadline_workload(index, prefix="pretrain-job", capacity_type="spot")


def policy_documents(prometheus_url: str) -> list[dict[str, Any]]:
    """The example policy for a controller on the wall clock (see the module docstring)."""
    cutoff = datetime.now(UTC) + timedelta(hours=HOURS_TO_CUTOFF)
    docs = example_documents()
    for doc in docs:
        if doc["kind"] == "CapacityPolicy":
            doc["spec"]["prometheus"]["url"] = prometheus_url
            doc["spec"]["risk"].update(evaluationWindowSeconds=0, cooldownSeconds=0)
        elif doc["metadata"]["name"] == PROJECT:
            doc["spec"]["deadlines"] = [
                {
                    "name": DEADLINE,
                    "at": cutoff.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "targetConfidence": 0.99,
                }
            ]
    return docs


@dataclass
class Running:
    kube: KubeClient
    prometheus: PrometheusServer
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    docs: list[dict[str, Any]]

    @property
    def policy(self) -> dict[str, Any]:
        return next(d for d in self.docs if d["kind"] == "CapacityPolicy")

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            body: bytes = r.read()
        return body.decode()

    def describe(self) -> str:
        tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
        return f"controller exit code {self.process.poll()}; log tail:\n{tail}"

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        wait_for(predicate, timeout, what, self.describe)

    def on_demand_limit(self, pool: str = POOL) -> int:
        nodepool = self.kube.get(kinds.NODE_POOL, names.nodepool_name(pool, names.ON_DEMAND))
        return int(nodepool["spec"]["limits"][GPU]) if nodepool else -1

    def policy_status(self) -> dict[str, Any]:
        live = self.kube.get(kinds.CAPACITY_POLICY, POLICY)
        return dict((live or {}).get("status") or {})

    def history_condition(self) -> tuple[str, str]:
        for c in self.policy_status().get("conditions") or []:
            if c["type"] == "HistoryAvailable":
                return str(c["status"]), str(c["reason"])
        return "", ""

    def last_decision(self, pool: str = POOL) -> dict[str, Any]:
        for entry in self.policy_status().get("pools") or []:
            if entry["pool"] == pool:
                return dict(entry.get("lastDecision") or {})
        return {}

    def sample(self, name: str, **labels: str) -> float | None:
        """The controller's own /metrics value of one series, None when it is not exported."""
        for family in text_string_to_metric_families(self.metrics_text()):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return float(s.value)
        return None

    def query(self, promql: str) -> list[dict[str, Any]]:
        return self.prometheus.query(promql)


@pytest.fixture(scope="module")
def running(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Running]:
    """Prometheus, the example policy pointing at it, 8 at-risk Workloads, and the controller."""
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("controller") / "controller.log"
    kube = new_client(control_plane)
    ensure_namespaces(kube, NAMESPACE)  # the controller's, where the server has namespaces
    targets = [ScrapeTarget(address, job=JOB), ScrapeTarget(address, job=REPLICA_JOB)]
    process: subprocess.Popen[bytes] | None = None
    try:
        with PrometheusServer(targets, scrape_interval=1.0) as prometheus:
            docs = policy_documents(prometheus.url)
            for doc in docs:
                apply_doc(kube, doc)
            for index in range(WORKLOADS):
                kube.apply(kinds.WORKLOAD, workload(index), field_manager="kueue")
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "controller.cli",
                        "run",
                        "--kubeconfig",
                        str(control_plane.kubeconfig),
                        "--health-address",
                        address,
                        "--resync-seconds",
                        str(RESYNC_SECONDS),
                        "--lease-duration",
                        str(LEASE_SECONDS),
                        "--log-format",
                        "json",
                    ],
                    cwd=REPO_ROOT,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            world = Running(kube, prometheus, process, port, log, docs)
            world.wait_for(
                lambda: world.last_decision().get("action") == Action.RAISE,
                60,
                "the controller raises the a100 mix",
            )
            world.wait_for(
                lambda: world.on_demand_limit() == FLOOR + STEP,
                10,
                "the a100 on-demand NodePool limit is one step above the floor",
            )
            yield world
    finally:
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
            process.wait()
        delete_everything(kube)
        kube.close()


# ------------------------------------------------------------------ the contract
def test_every_contract_metric_reaches_prometheus(running: Running) -> None:
    with running.prometheus.connect() as client:
        for name in CONTRACT:
            series = name + "_count" if name.endswith("_duration_seconds") else name
            running.prometheus.wait_for_series(f'{series}{{job="{JOB}"}}', timeout=20)
            values = client.get_current_metric_value(series, label_config={"job": JOB})
            assert values, name
            for value in values:
                assert math.isfinite(float(value["value"][1])), value
        # Counters appear once incremented: the raise the fixture waited for is counted.
        [raised] = client.get_current_metric_value(
            "quartermaster_decisions_total",
            label_config={"job": JOB, "pool": POOL, "action": Action.RAISE},
        )
        assert raised["metric"]["reason"] == Reason.RISK_ABOVE_THRESHOLD
        assert float(raised["value"][1]) >= 1
    text = running.metrics_text()
    # Failures may be absent from Prometheus on other exporters; the contract is the HELP line.
    assert "# HELP quartermaster_reconcile_errors_total " in text
    assert "# TYPE quartermaster_reconcile_errors_total counter" in text


def test_the_values_prometheus_holds_are_what_the_controller_did(running: Running) -> None:
    def one(promql: str) -> float:
        [series] = running.prometheus.wait_for_series(promql, timeout=20)
        return float(series["value"][1])

    # Scraped after the raise: Prometheus sees what the NodePools were set to.
    running.prometheus.wait_for_series(
        f'quartermaster_capacity_target_gpus{{job="{JOB}",pool="{POOL}",'
        f'capacity_type="on-demand"}} == {FLOOR + STEP}',
        timeout=20,
    )
    nodepool = running.kube.get(kinds.NODE_POOL, names.nodepool_name(POOL, names.SPOT))
    assert nodepool is not None
    spot = int(nodepool["spec"]["limits"][GPU])
    selector = f'job="{JOB}",pool="{POOL}"'
    assert one(f'quartermaster_capacity_target_gpus{{{selector},capacity_type="spot"}}') == spot
    # The ratio is of the exact split (the status's mix); the limits are it on whole nodes.
    policy = running.kube.get(kinds.CAPACITY_POLICY, POLICY)
    assert policy is not None
    split = next(m for m in policy["status"]["mix"] if m["pool"] == POOL)["spotGpus"]
    assert whole_nodes(split, 8) == spot
    assert one(f"quartermaster_spot_ratio{{{selector}}}") == pytest.approx(
        split / (split + FLOOR + STEP)
    )
    queue = f'job="{JOB}",cluster_queue="{PROJECT}"'
    assert one(f"quartermaster_queue_pending_workloads{{{queue}}}") == WORKLOADS
    assert one(f"quartermaster_queue_pending_gpus{{{queue}}}") == WORKLOADS * WORKLOAD_GPUS
    risk = one(f'quartermaster_deadline_risk_ratio{{job="{JOB}",project="{PROJECT}"}}')
    assert 0 <= risk <= 1
    slack = one(f'quartermaster_deadline_slack_seconds{{job="{JOB}",project="{PROJECT}"}}')
    assert abs(slack) < HOURS_TO_CUTOFF * 3600
    assert one(f'quartermaster_build_info{{job="{JOB}",version="{__version__}"}}') == 1
    last = one(f'quartermaster_last_successful_reconcile_timestamp_seconds{{job="{JOB}"}}')
    assert time.time() - 60 < last <= time.time()
    assert one(f'quartermaster_reconcile_duration_seconds_count{{job="{JOB}"}}') >= 1
    assert one(f'quartermaster_prometheus_up{{job="{JOB}"}}') == 1


UNITS = (
    ("_squared_error_total", "(ratio^2)"),
    ("_bytes", "(bytes)"),
    ("_seconds", "seconds"),
    ("_gpus", "(GPUs)"),
    ("_ratio", "(ratio 0..1)"),
    ("_dollars_per_hour", "(dollars per hour)"),
    ("_total", "(count)"),
    ("_workloads", "(count)"),
    ("_info", "always 1"),
)


def test_help_lines_name_units_and_labels_are_bounded(running: Running) -> None:
    families = {
        f.name: f
        for f in text_string_to_metric_families(running.metrics_text())
        if f.name.startswith("quartermaster_")
    }
    for name in CONTRACT:
        assert name.removesuffix("_total") in families, f"{name} is not exported"
    for family in families.values():
        exported = family.name + ("_total" if family.type == "counter" else "")
        if exported.endswith("_created") and exported.removesuffix("_created") in families:
            continue  # prometheus_client's creation time of a counter or histogram
        unit = next((u for suffix, u in UNITS if exported.endswith(suffix)), None)
        if unit is None:  # a 0/1 flag
            assert family.documentation.startswith("1 when"), family.documentation
        else:
            assert unit in family.documentation, (exported, family.documentation)
    # Prometheus holds the same HELP, read through its metadata API.
    with running.prometheus.connect() as client:
        for name in ("quartermaster_deadline_risk_ratio", "quartermaster_warm_pool_target_gpus"):
            running.prometheus.wait_for_series(name, timeout=20)
            [meta] = client.get_metric_metadata(name)
            assert meta["help"] == families[name].documentation
            assert meta["type"] == "gauge"

    # Labels: only the bounded ones, with values from the policy and the decision code.
    projects = [d for d in running.docs if d["kind"] == "TrainingProject"]
    allowed = {
        "pool": {p["name"] for p in running.policy["spec"]["pools"]},
        "tier": {t["name"] for t in running.policy["spec"]["tiers"]},
        "project": {p["metadata"]["name"] for p in projects},
        "cluster_queue": {p["metadata"]["name"] for p in projects},
        "deadline": {d["name"] for p in projects for d in p["spec"].get("deadlines", [])},
        "capacity_type": set(names.CAPACITY_TYPES),
        "quantile": {"0.5", "0.9"},
        "action": {v for k, v in vars(Action).items() if k.isupper()},
        "reason": {v for k, v in vars(Reason).items() if k.isupper()},
        "version": {__version__},
    }
    workload_names = {workload(i)["metadata"]["name"] for i in range(WORKLOADS)}
    for family in families.values():
        for s in family.samples:
            assert set(s.labels) <= LABELS, (s.name, s.labels)
            for label, value in s.labels.items():
                assert value not in workload_names, (s.name, s.labels)
                if label in allowed:
                    assert value in allowed[label], (s.name, label, value)
    # The same in Prometheus: a few dozen series in all, none per workload.
    scraped = running.query(f'{{__name__=~"quartermaster_.+",job="{JOB}"}}')
    assert 30 < len(scraped) < 300
    for series in scraped:
        labels = set(series["metric"]) - {"__name__", "job", "instance"}
        assert labels <= LABELS, series["metric"]
        assert not any(re.search(r"pretrain-job-\d", v) for v in series["metric"].values())


def test_every_keda_query_returns_exactly_one_sample(running: Running) -> None:
    items, _ = running.kube.list(
        kinds.SCALED_OBJECT, namespace=NAMESPACE, label_selector=names.MANAGED_SELECTOR
    )
    pools = {p["name"] for p in running.policy["spec"]["pools"] if p["warmPool"]["maxGpus"] > 0}
    assert {o["metadata"]["labels"][names.LABEL_POOL] for o in items} == pools
    rendered = render(load_policy_set(("test", d) for d in running.docs), namespace=NAMESPACE)
    rendered_queries = {
        t["metadata"]["query"]
        for o in rendered.objects
        if o["kind"] == "ScaledObject"
        for t in o["spec"]["triggers"]
    }
    for scaled_object in items:
        pool = scaled_object["metadata"]["labels"][names.LABEL_POOL]
        [trigger] = scaled_object["spec"]["triggers"]
        query = trigger["metadata"]["query"]
        assert trigger["metadata"]["serverAddress"] == running.prometheus.url
        assert query == warm_pool_query(pool)
        assert query in rendered_queries
        # Two jobs export the metric; KEDA must still get one number.
        raw = running.prometheus.wait_for_series(
            f'count({names.WARM_POOL_TARGET_METRIC}{{pool="{pool}"}}) == 2', timeout=20
        )
        assert raw
        [sample] = running.query(query)
        exported = running.sample(names.WARM_POOL_TARGET_METRIC, pool=pool)
        assert exported is not None
        assert float(sample["value"][1]) == exported


# ------------------------------------------------------------------ without Prometheus
# These come last: they stop Prometheus and delete the Workloads of the shared world.
def test_a_prometheus_outage_is_noticed_within_a_few_passes(running: Running) -> None:
    running.prometheus.stop()
    running.wait_for(
        lambda: running.history_condition() == ("False", "PrometheusUnreachable"),
        4 * RESYNC_SECONDS,
        "HistoryAvailable turns False after a few resyncs",
    )


def test_without_prometheus_nothing_scales_down(running: Running) -> None:
    running.prometheus.stop()
    # A change of the policy's Prometheus settings makes the controller ask at once.
    policy = copy.deepcopy(running.policy)
    policy["spec"]["prometheus"]["timeoutSeconds"] = 5
    apply_doc(running.kube, policy)
    running.wait_for(
        lambda: running.history_condition() == ("False", "PrometheusUnreachable"),
        20,
        "HistoryAvailable False, reason PrometheusUnreachable",
    )
    assert running.sample("quartermaster_prometheus_up") == 0
    raised = running.on_demand_limit()
    assert raised == FLOOR + STEP

    # The risk clears: with no window and no cooldown a lower would be due at once.
    for index in range(WORKLOADS):
        running.kube.delete(kinds.WORKLOAD, f"pretrain-job-{index}", "llm")
    running.wait_for(
        lambda: running.last_decision().get("reason") == Reason.PROMETHEUS_UNAVAILABLE,
        20,
        "the a100 decision is a hold for want of Prometheus",
    )
    assert running.last_decision()["action"] == Action.HOLD
    time.sleep(2 * RESYNC_SECONDS)  # more passes, the same answer
    assert running.on_demand_limit() == raised
    assert running.last_decision()["reason"] == Reason.PROMETHEUS_UNAVAILABLE
    held = running.sample(
        "quartermaster_decisions_total",
        pool=POOL,
        action=Action.HOLD,
        reason=Reason.PROMETHEUS_UNAVAILABLE,
    )
    assert held is not None and held >= 1

    running.prometheus.start()
    running.wait_for(
        lambda: running.history_condition() == ("True", "Queried"),
        20,
        "HistoryAvailable True again",
    )
    # With history back, the lower that was held happens.
    running.wait_for(lambda: running.on_demand_limit() == FLOOR, 20, "a100 back to its floor")
    running.prometheus.wait_for_series(f'quartermaster_prometheus_up{{job="{JOB}"}} == 1', 20)
