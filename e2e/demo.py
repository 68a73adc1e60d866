"""`make demo`: Quartermaster running against a real API server, from nothing, in under a minute.

Steps, each timed:
1. the control plane (etcd and the CRD API server that kube-apiserver embeds, on loopback),
   built from Debian's packages on the first run (`make controlplane` does it before the demo,
   once) and reused after;
2. a real Prometheus (Debian's package, `make prometheus`) scraping the controller's /metrics
   every second; the policy points the controller at it, so history works as in a cluster;
3. the CRDs: the pinned upstream Kueue, KEDA, Karpenter and Prometheus Operator CRDs (from
   `third_party/crds` or `$QUARTERMASTER_UPSTREAM_CRDS`), ours (`manifests/crds`) and stand-ins
   for the built-in kinds the controller writes (Lease, Event, PriorityClass);
4. the example policy, applied as a GitOps tool would, with the demo's Prometheus and a one-off
   deadline 72 hours from now (the example's own deadlines recur); the applied files are
   written to `out/demo/policy/`;
5. the controller (`controller.reconcile.loop.Controller`) in a thread, leader election on,
   until it has led and synced once; `quartermaster plan` then finds nothing to change;
6. a few Kueue Workloads with GPU requests and deadline labels (no Kueue runs here, so they
   stay pending), and `quartermaster explain` for the project with the one-off deadline;
7. `kubectl get`-style tables: with kubectl when there is one, else the same tables from the
   API server's Table view (what kubectl prints, computed by the server);
8. a change: one project's quota edited; the controller converges and the ClusterQueue's quota
   and the NodePool limit follow;
9. what Prometheus stored, and the controller's HistoryAvailable condition;
10. everything stopped: the controller (releasing its Lease), Prometheus, the control plane.
   Ctrl-C at any point lands here too, and the demo still exits 0.

The controller's logs go to `out/demo/controller.log`, not between the tables.

Run: `.venv/bin/python -m e2e.demo [--no-kubectl] [--log-dir DIR] [-v]`.
"""

from __future__ import annotations

import argparse
import copy
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from controller import names
from controller.examples import EXAMPLE_DIR
from controller.health import HealthServer
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from controller.reconcile.diff import ref, show_ref
from controller.reconcile.loop import Controller, LoopOptions
from controller.reconcile.reconciler import ReconcileResult
from controller.yamlio import dump_documents
from testenv.controlplane import (
    BUILD_COST,
    Binaries,
    ControlPlane,
    ControlPlaneError,
    find_binaries,
    free_ports,
    kubectl_path,
)
from testenv.crds import CrdSet, CrdSourceError, crd_sources, load_crds, read_crd_set
from testenv.logconfig import LOGS, QUIET, configure_logging
from testenv.namespaces import ensure_namespaces, policy_namespaces
from testenv.prometheus import PrometheusError, PrometheusServer, ScrapeTarget

GITOPS = "demo-gitops"
"""The field manager the policy is applied with, as Argo CD or Flux would."""
GPU = "nvidia.com/gpu"
CHANGED_PROJECT = "vision-research"
CHANGED_GPUS = 32
ONE_OFF_PROJECT = "vision-research"
ONE_OFF_DEADLINE = "cvpr-submission"
ONE_OFF_HOURS = 72
ONE_OFF_LABELS = {"example.com/paper": "cvpr"}
DEFAULT_OUT = Path("out/demo")
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"

Document = dict[str, Any]


class DemoError(RuntimeError):
    """The demo cannot go on; the message says why and what to do."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived; everything started so far is stopped, then the demo exits."""


# --------------------------------------------------------------------------------------------
# Inputs


def example_documents() -> list[Document]:
    documents: list[Document] = []
    for path in sorted(EXAMPLE_DIR.glob("*.yaml")):
        documents.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return documents


def with_prometheus(documents: Sequence[Document], url: str) -> list[Document]:
    """The policy pointed at `url`: the controller reads history there, and the rendered
    ScaledObjects' triggers query it."""
    out = copy.deepcopy(list(documents))
    for doc in out:
        if doc["kind"] == "CapacityPolicy":
            doc["spec"].setdefault("prometheus", {})["url"] = url
    return out


def with_one_off_deadline(
    documents: Sequence[Document], *, project: str, deadline: Document
) -> list[Document]:
    """`project` with `deadline` added (replacing one of the same name)."""
    out = copy.deepcopy(list(documents))
    for doc in out:
        if doc["kind"] == "TrainingProject" and doc["metadata"]["name"] == project:
            kept = [d for d in doc["spec"].get("deadlines") or [] if d["name"] != deadline["name"]]
            doc["spec"]["deadlines"] = [*kept, deadline]
            return out
    raise DemoError(f"the example policy has no TrainingProject {project}")


def one_off_deadline(now: datetime) -> Document:
    """A paper deadline 72 hours from now, on the hour: relative, so the demo shows a one-off
    deadline ahead of it whatever the date (the example's own deadlines recur)."""
    at = (now + timedelta(hours=ONE_OFF_HOURS)).replace(minute=0, second=0, microsecond=0)
    return {
        "name": ONE_OFF_DEADLINE,
        "at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "matchLabels": dict(ONE_OFF_LABELS),
        "targetConfidence": 0.95,
    }


def demo_documents(*, now: datetime, prometheus_url: str) -> list[Document]:
    """The example policy as the demo applies it."""
    return with_one_off_deadline(
        with_prometheus(example_documents(), prometheus_url),
        project=ONE_OFF_PROJECT,
        deadline=one_off_deadline(now),
    )


def write_policy(documents: Sequence[Document], directory: Path, *, note: str) -> None:
    """The applied documents as files `quartermaster plan -f` and `kubectl apply -f` take."""
    directory.mkdir(parents=True, exist_ok=True)
    header = "".join(f"# {line}\n" for line in note.splitlines())
    policies = [d for d in documents if d["kind"] == "CapacityPolicy"]
    projects = [d for d in documents if d["kind"] == "TrainingProject"]
    (directory / "policy.yaml").write_text(header + dump_documents(policies))
    (directory / "projects.yaml").write_text(header + dump_documents(projects))


def deadline_names(documents: Sequence[Document]) -> dict[str, set[str]]:
    """Project name -> the names of its deadlines."""
    return {
        d["metadata"]["name"]: {x["name"] for x in d["spec"].get("deadlines") or []}
        for d in documents
        if d["kind"] == "TrainingProject"
    }


PAPER = {"example.com/paper": "cvpr"}  # the vision project's deadline selects on it
WORKLOADS: tuple[tuple[str, str, str, int, int, str | None, float, dict[str, str]], ...] = (
    # namespace, name, LocalQueue, pods, GPUs per pod, deadline, expected hours, more labels
    ("llm", "llm-7b-pretrain", "llm-pretrain", 4, 8, "weekly-checkpoint", 30, {}),
    ("vision", "detector-cvpr", "vision-research", 2, 8, "cvpr-submission", 40, PAPER),
    ("recsys", "ranker-q4-refresh", "recsys-prod", 1, 8, "q4-model-refresh", 12, {}),
    ("nlp-eval", "nightly-eval", "nlp-eval", 1, 4, "nightly-eval", 2, {}),
    ("sandbox", "notebook-finetune", "sandbox", 1, 1, None, 1, {}),
)  # fmt: skip


def example_workloads(deadlines: Mapping[str, set[str]] | None = None) -> list[Document]:
    """Training jobs as Kueue sees them: queued in a project's LocalQueue, asking for GPUs.

    The `quartermaster.dev/deadline` label names the project deadline a job counts toward; the
    annotations carry what the risk model needs (expected duration, checkpoint interval). With
    `deadlines` (project -> deadline names), a label naming a deadline the project does not
    have is left out, so the jobs follow the example policy as it changes.
    """
    documents = []
    for namespace, name, queue, pods, gpus_per_pod, deadline, hours, labels in WORKLOADS:
        gpus = str(gpus_per_pod)
        counts_toward = deadline
        if deadlines is not None and deadline not in deadlines.get(queue, set()):
            counts_toward = None
        all_labels = {
            **labels,
            **({names.LABEL_DEADLINE: counts_toward} if counts_toward else {}),
        }
        container = {
            "name": "trainer",
            "image": "registry.example.com/trainer:1.4",
            "resources": {"requests": {GPU: gpus}, "limits": {GPU: gpus}},
        }
        documents.append(
            {
                "apiVersion": kinds.WORKLOAD.api_version,
                "kind": kinds.WORKLOAD.kind,
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": all_labels,
                    "annotations": {
                        names.ANNOTATION_EXPECTED_DURATION: str(int(hours * 3600)),
                        names.ANNOTATION_CHECKPOINT_INTERVAL: "1800",
                    },
                },
                "spec": {
                    "queueName": queue,
                    "podSets": [
                        {
                            "name": "workers",
                            "count": pods,
                            "template": {
                                "spec": {"restartPolicy": "Never", "containers": [container]}
                            },
                        }
                    ],
                },
            }
        )
    return documents


# --------------------------------------------------------------------------------------------
# Output


class Clock:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.timings: list[tuple[str, float]] = []

    def say(self, message: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {message}", flush=True)

    def record(self, label: str, seconds: float) -> None:
        self.timings.append((label, seconds))


def heading(title: str) -> None:
    print(f"\n==> {title}", flush=True)


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns as kubectl aligns them: left-aligned, three spaces apart, no trailing blanks."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "   ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class Tables:
    """`kubectl get` output: by kubectl when available, else from the server's Table view."""

    def __init__(self, client: KubeClient, kubeconfig: Path, *, use_kubectl: bool) -> None:
        self.client = client
        self.kubeconfig = kubeconfig
        self.kubectl = kubectl_path() if use_kubectl else None

    def describe_source(self) -> str:
        if self.kubectl:
            return f"tables by {self.kubectl}"
        return "kubectl not used: tables from the API server's Table view (kubectl's columns)"

    def show(self, kind: kinds.Kind) -> None:
        resource = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
        all_namespaces = " -A" if kind.namespaced else ""
        print(f"$ kubectl get {resource}{all_namespaces}", flush=True)
        if self.kubectl:
            command = [str(self.kubectl), "--kubeconfig", str(self.kubeconfig), "get", resource]
            if kind.namespaced:
                command.append("--all-namespaces")
            completed = subprocess.run(
                command, capture_output=True, text=True, timeout=60, check=False
            )
            if completed.returncode == 0:
                print(completed.stdout.rstrip("\n") or "No resources found", flush=True)
                return
            print(f"(kubectl failed: {completed.stderr.strip()[:200]}; using the API)")
        print(self.from_api(kind), flush=True)

    def from_api(self, kind: kinds.Kind) -> str:
        table = self._server_table(kind)
        if table.get("kind") != "Table":  # a server without Table support: names only
            items = table.get("items") or []
            return format_table(["NAME"], [[i["metadata"]["name"]] for i in items])
        # Priority-0 columns are what `kubectl get` shows; the others are `-o wide`.
        definitions = table.get("columnDefinitions") or []
        indexes = [i for i, c in enumerate(definitions) if c.get("priority", 0) == 0]
        header = [str(definitions[i]["name"]).upper() for i in indexes]
        rows: list[list[str]] = []
        for row in table.get("rows") or []:
            cells = [cell(row["cells"][i]) for i in indexes]
            if kind.namespaced:
                namespace = ((row.get("object") or {}).get("metadata") or {}).get("namespace")
                cells.insert(0, cell(namespace))
            rows.append(cells)
        if kind.namespaced:
            header.insert(0, "NAMESPACE")
        if not rows:
            return "No resources found"
        return format_table(header, rows)

    def _server_table(self, kind: kinds.Kind) -> dict[str, Any]:
        api = self.client.api_client
        _, url, headers, _, _ = api.param_serialize(
            "GET",
            kind.path(),
            header_params={"Accept": TABLE_ACCEPT},
            auth_settings=["BearerToken"],
        )
        response = api.call_api("GET", url, header_params=headers, _request_timeout=30)
        text = response.read().decode("utf-8", errors="replace")  # type: ignore[no-untyped-call]
        if not 200 <= response.status < 300:
            raise KubeError(f"GET {kind.path()} as Table: {response.status} {text[:300]}")
        decoded: dict[str, Any] = json.loads(text)
        return decoded


def gpu_quotas(cluster_queue: Mapping[str, Any]) -> dict[str, Any]:
    """Flavor name -> nominal GPU quota of a ClusterQueue."""
    quotas: dict[str, Any] = {}
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                if resource.get("name") == GPU:
                    quotas[flavor["name"]] = resource.get("nominalQuota")
    return quotas


def gpu_limit(node_pool: Mapping[str, Any]) -> Any:
    return ((node_pool.get("spec") or {}).get("limits") or {}).get(GPU)


def quota_table(client: KubeClient) -> str:
    queues, _ = client.list(kinds.CLUSTER_QUEUE, label_selector=names.MANAGED_SELECTOR)
    rows = []
    for queue in sorted(queues, key=lambda q: str(q["metadata"]["name"])):
        quotas = gpu_quotas(queue)
        shown = ", ".join(f"{flavor} {cell(gpus)}" for flavor, gpus in quotas.items())
        total = sum(int(g) for g in quotas.values() if str(g).isdigit())
        rows.append([queue["metadata"]["name"], str(total), shown])
    return format_table(["CLUSTERQUEUE", "GPUS", "NOMINAL GPU QUOTA BY FLAVOR"], rows)


def limit_table(client: KubeClient) -> str:
    pools, _ = client.list(kinds.NODE_POOL, label_selector=names.MANAGED_SELECTOR)
    rows = [
        [p["metadata"]["name"], cell(gpu_limit(p)), cell(p["spec"].get("weight"))]
        for p in sorted(pools, key=lambda p: str(p["metadata"]["name"]))
    ]
    return format_table(["NODEPOOL", "GPU LIMIT", "WEIGHT"], rows)


def events_summary(client: KubeClient, since: str = "") -> list[str]:
    """The controller's Events, oldest first: `type reason Kind/name: note`."""
    events, _ = client.list(kinds.EVENT)
    ours = [
        e
        for e in events
        if e.get("reportingController") == names.REPORTING_CONTROLLER
        and str(e.get("eventTime") or "") >= since
    ]
    ours.sort(key=lambda e: str(e.get("eventTime") or ""))
    return [
        f"{e.get('type')} {e.get('reason')} {e['regarding']['kind']}/{e['regarding']['name']}: "
        f"{e.get('note')}"
        for e in ours
    ]


# --------------------------------------------------------------------------------------------
# Signals


@contextmanager
def signals_raise() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into `Interrupted` in the main thread, for the block."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        ignore_signals()  # the next Ctrl-C must not interrupt the teardown this one starts
        raise Interrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def ignore_signals() -> None:
    """During teardown: a second Ctrl-C must not leave etcd or the API server running."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)


# --------------------------------------------------------------------------------------------
# The demo


def wait_for(
    condition: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.05
) -> float:
    """Seconds until `condition()` held; DemoError after `timeout`."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise DemoError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - started


@dataclass
class ControllerRun:
    controller: Controller
    client: KubeClient
    thread: threading.Thread
    results: list[ReconcileResult] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def results_since(self, index: int) -> list[ReconcileResult]:
        with self.lock:
            return list(self.results[index:])

    def result_count(self) -> int:
        with self.lock:
            return len(self.results)


def run_quartermaster(args: Sequence[str], *, shown: str) -> int:
    """Run the `quartermaster` command as a user would, printing `$ quartermaster <shown>` and
    its output; returns its exit code."""
    print(f"$ quartermaster {shown}", flush=True)
    completed = subprocess.run(
        [sys.executable, "-m", "controller.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    print((completed.stdout + completed.stderr).rstrip("\n"), flush=True)
    return completed.returncode


class Demo:
    def __init__(self, *, use_kubectl: bool, out_dir: Path = DEFAULT_OUT) -> None:
        self.use_kubectl = use_kubectl
        self.out_dir = out_dir
        self.clock = Clock()
        self.plane: ControlPlane | None = None
        self.prometheus: PrometheusServer | None = None
        self.metrics_port = free_ports(1)[0]
        self.health: HealthServer | None = None
        self.client: KubeClient | None = None
        self.run_state: ControllerRun | None = None
        self.documents: list[Document] = []

    # ---------------------------------------------------------------- the whole run
    def run(self) -> None:
        """Every step; whatever happens (Ctrl-C included), `teardown` stops what was started."""
        try:
            sources = crd_sources()  # fail before starting anything when CRDs are missing
            # Parsing the CRDs takes seconds: do it while the control plane starts.
            reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-crds")
            parsed = reader.submit(read_crd_set, sources)
            reader.shutdown(wait=False)
            binaries = self.binaries()
            self.start_control_plane(binaries)
            client = self.client
            plane = self.plane
            assert client is not None and plane is not None
            prometheus = self.start_prometheus()
            self.load_crds(client, parsed.result())
            self.apply_policy(client, prometheus)
            self.start_controller(plane)
            tables = Tables(client, plane.kubeconfig, use_kubectl=self.use_kubectl)
            self.show_plan(plane)
            self.create_workloads(client)
            self.show_state(client, tables)
            self.show_explain(plane)
            self.change_quota(client, tables)
            self.show_history(client, prometheus)
        finally:
            self.teardown()

    # ---------------------------------------------------------------- steps
    def binaries(self) -> Binaries:
        try:
            binaries = find_binaries(build=False)
        except ControlPlaneError:
            # `make demo` builds it first; run directly, the demo builds it (announced there).
            self.clock.say(f"control plane: not built yet; building it now ({BUILD_COST})")
            started = time.monotonic()
            binaries = find_binaries(build=True)
            took = time.monotonic() - started
            self.clock.record("control plane build (first run only)", took)
            return binaries
        kind = "kube-apiserver" if binaries.full_kube_apiserver else "CRD API server"
        self.clock.say(f"control plane: etcd and the {kind} from {binaries.apiserver.parent}")
        return binaries

    def start_control_plane(self, binaries: Binaries) -> None:
        started = time.monotonic()
        self.plane = ControlPlane(binaries)  # only a temporary directory so far
        self.plane.start()
        took = time.monotonic() - started
        self.clock.record("control plane start (etcd + API server ready)", took)
        self.clock.say(
            f"control plane started in {took:.1f} s: {self.plane.server}, "
            f"kubeconfig {self.plane.kubeconfig}"
        )
        self.client = KubeClient.from_kubeconfig(str(self.plane.kubeconfig))

    def start_prometheus(self) -> PrometheusServer:
        started = time.monotonic()
        target = ScrapeTarget(f"127.0.0.1:{self.metrics_port}")
        self.prometheus = PrometheusServer([target], scrape_interval=1.0)
        self.prometheus.start()
        took = time.monotonic() - started
        self.clock.record("Prometheus start (ready to scrape and answer)", took)
        self.clock.say(
            f"Prometheus started in {took:.1f} s: {self.prometheus.url}, scraping the "
            f"controller's /metrics (127.0.0.1:{self.metrics_port}) every second"
        )
        return self.prometheus

    def load_crds(self, client: KubeClient, crds: CrdSet) -> None:
        started = time.monotonic()
        load_crds(client, crds.documents)
        took = time.monotonic() - started
        self.clock.record("CRDs ready (established and served)", took)
        counts = ", ".join(f"{label} {n}" for label, n in crds.counts.items())
        self.clock.say(
            f"CRDs ready in {took:.1f} s: {len(crds.documents)} established and served ({counts})"
        )

    def apply_policy(self, client: KubeClient, prometheus: PrometheusServer) -> None:
        documents = demo_documents(now=datetime.now(UTC), prometheus_url=prometheus.url)
        self.documents = documents
        policy_dir = self.out_dir / "policy"
        write_policy(
            documents,
            policy_dir,
            note=f"The example policy ({EXAMPLE_DIR}) as the demo applied it: its Prometheus, "
            f"and {ONE_OFF_PROJECT}'s one-off deadline {ONE_OFF_HOURS} hours ahead.",
        )
        # The projects' namespaces and the controller's, where the server has namespaces.
        ensure_namespaces(client, [*policy_namespaces(documents), names.DEFAULT_NAMESPACE])
        for doc in documents:
            client.apply(kinds.kind_of(doc), doc, field_manager=GITOPS)
        projects = sum(1 for d in documents if d["kind"] == "TrainingProject")
        policy = next(d for d in documents if d["kind"] == "CapacityPolicy")
        deadline = one_off_deadline(datetime.now(UTC))
        self.clock.say(
            f"example policy applied: CapacityPolicy {policy['metadata']['name']}, {projects} "
            f"TrainingProjects (field manager {GITOPS}, as a GitOps tool would), with "
            f"spec.prometheus.url {prometheus.url} and {ONE_OFF_PROJECT}'s one-off deadline "
            f"{deadline['name']} at {deadline['at']}; the files: {policy_dir}/"
        )

    def start_controller(self, plane: ControlPlane) -> None:
        client = KubeClient.from_kubeconfig(str(plane.kubeconfig))
        options = LoopOptions(
            identity="demo-controller",
            leader_election=True,
            lease_duration_seconds=15,
            renew_deadline_seconds=10,
            retry_period_seconds=2,
            resync_seconds=60,
        )
        holder: list[ControllerRun] = []

        def on_result(result: ReconcileResult) -> None:
            with holder[0].lock:
                holder[0].results.append(result)

        def on_error(error: Exception) -> None:
            with holder[0].lock:
                holder[0].errors.append(error)

        controller = Controller(client, options, on_result=on_result, on_error=on_error)
        self.health = HealthServer(
            "127.0.0.1",
            self.metrics_port,
            healthz=controller.healthy,
            readyz=controller.ready,
            extra={"/metrics": controller.metrics.render},
        )
        self.health.start()
        thread = threading.Thread(target=controller.run, name="controller", daemon=True)
        state = ControllerRun(controller, client, thread)
        holder.append(state)
        self.run_state = state
        started = time.monotonic()
        thread.start()

        def synced() -> bool:
            if not thread.is_alive():
                raise DemoError("the controller thread ended before its first sync")
            # ready() turns true just before on_result runs: wait for both.
            return controller.ready()[0] and state.result_count() > 0

        try:
            wait_for(synced, timeout=120, what="the controller's first sync")
        except DemoError as error:
            with state.lock:
                last = f" (last error: {state.errors[-1]})" if state.errors else ""
            raise DemoError(f"{error}{last}") from error
        took = time.monotonic() - started
        self.clock.record("first sync (controller start to leading and synced)", took)
        first = state.results_since(0)[0]
        unserved = ", ".join(first.unserved) or "none"
        learned = controller.reconciler.learned
        kept = learned.state.value if learned is not None else "memory"
        self.clock.say(
            f"controller running (leader election on, identity {options.identity}): led and "
            f"synced in {took:.1f} s; first pass created {first.created} objects and wrote "
            f"{first.status_writes} statuses in {first.seconds:.2f} s "
            f"(not served by this API server, skipped: {unserved}; what it learns is kept in: "
            f"{kept}{', as this server serves no ConfigMaps' if kept == 'memory' else ''})"
        )

    def show_plan(self, plane: ControlPlane) -> None:
        heading("quartermaster plan: the applied policy files against the cluster")
        policy_dir = self.out_dir / "policy"
        kubeconfig = str(plane.kubeconfig)
        code = run_quartermaster(
            ["plan", "-f", str(policy_dir), "--kubeconfig", kubeconfig],
            shown=f"plan -f {policy_dir} --kubeconfig $KUBECONFIG",
        )
        print(f"(exit {code}: {'in sync' if code == 0 else 'changes pending'})", flush=True)

    def show_explain(self, plane: ControlPlane) -> None:
        heading(f"quartermaster explain: {ONE_OFF_PROJECT}, its one-off deadline and its risk")
        run_quartermaster(
            ["explain", ONE_OFF_PROJECT, "--kubeconfig", str(plane.kubeconfig)],
            shown=f"explain {ONE_OFF_PROJECT} --kubeconfig $KUBECONFIG",
        )

    def show_history(self, client: KubeClient, prometheus: PrometheusServer) -> None:
        heading(f"Prometheus ({prometheus.url}): what it scraped from the controller")
        prometheus.wait_for_series("quartermaster_prometheus_up == 1", timeout=60)
        risks = prometheus.wait_for_series("quartermaster_deadline_risk_ratio", timeout=60)
        rows = sorted(
            [
                [
                    str(r["metric"].get("project")),
                    str(r["metric"].get("deadline")),
                    str(r["metric"].get("tier")),
                    f"{float(r['value'][1]):.2f}",
                ]
                for r in risks
            ]
        )
        print("$ PromQL: quartermaster_deadline_risk_ratio")
        print(format_table(["PROJECT", "DEADLINE", "TIER", "RISK"], rows))
        policy = (client.list(kinds.CAPACITY_POLICY)[0] or [{}])[0]
        history: dict[str, Any] = next(
            (
                c
                for c in (policy.get("status") or {}).get("conditions") or []
                if c.get("type") == "HistoryAvailable"
            ),
            {},
        )
        print(
            f"\nquartermaster_prometheus_up is 1, and CapacityPolicy {policy['metadata']['name']} "
            f"says HistoryAvailable={history.get('status')} ({history.get('reason')}): the "
            "controller reads its history (runtimes, demand) from this Prometheus.",
            flush=True,
        )

    def create_workloads(self, client: KubeClient) -> None:
        heading("Workloads: training jobs queued in the projects' LocalQueues")
        workloads = example_workloads(deadline_names(self.documents))
        for workload in workloads:
            client.apply(kinds.WORKLOAD, workload, field_manager="demo-user")
        gpus = sum(
            int(w["spec"]["podSets"][0]["count"])
            * int(
                w["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"][
                    "requests"
                ][GPU]
            )
            for w in workloads
        )
        with_deadline = sum(1 for w in workloads if names.LABEL_DEADLINE in w["metadata"]["labels"])
        self.clock.say(
            f"created {len(workloads)} Workloads asking for {gpus} GPUs in all, {with_deadline} "
            f"labelled {names.LABEL_DEADLINE}=<deadline>. No Kueue runs here: they stay pending."
        )

    def show_state(self, client: KubeClient, tables: Tables) -> None:
        heading(f"The cluster as the controller left it ({tables.describe_source()})")
        for kind in (
            kinds.CAPACITY_POLICY,
            kinds.TRAINING_PROJECT,
            kinds.CLUSTER_QUEUE,
            kinds.NODE_POOL,
            kinds.WORKLOAD,
        ):
            print()
            tables.show(kind)
        print("\nGPU quotas (ClusterQueue flavors) and NodePool GPU limits:")
        print(quota_table(client))
        print()
        print(limit_table(client))
        print("\nThe controller's Events:")
        for line in events_summary(client):
            print(f"  {line}")

    def change_quota(self, client: KubeClient, tables: Tables) -> None:
        state = self.run_state
        assert state is not None
        project = next(
            d
            for d in self.documents
            if d["kind"] == "TrainingProject" and d["metadata"]["name"] == CHANGED_PROJECT
        )
        old_gpus = project["spec"]["quotas"][0]["nominalGpus"]
        pool = project["spec"]["quotas"][0]["pool"]
        heading(
            f"A change: {CHANGED_PROJECT}'s {pool} quota {old_gpus} -> {CHANGED_GPUS} GPUs "
            "(a merged Git commit, applied by the GitOps tool)"
        )
        before_queue = client.get(kinds.CLUSTER_QUEUE, CHANGED_PROJECT) or {}
        before_pools = {
            p["metadata"]["name"]: gpu_limit(p)
            for p in client.list(kinds.NODE_POOL, label_selector=names.MANAGED_SELECTOR)[0]
        }
        since = state.result_count()
        changed = copy.deepcopy(project)
        changed["spec"]["quotas"][0]["nominalGpus"] = CHANGED_GPUS
        started = time.monotonic()
        client.apply(kinds.TRAINING_PROJECT, changed, field_manager=GITOPS)

        def converged() -> bool:
            queue = client.get(kinds.CLUSTER_QUEUE, CHANGED_PROJECT) or {}
            live = client.get(kinds.TRAINING_PROJECT, CHANGED_PROJECT) or {}
            status = live.get("status") or {}
            total = sum(int(v) for v in gpu_quotas(queue).values())
            return (
                total == CHANGED_GPUS
                and status.get("nominalGpus") == CHANGED_GPUS
                and status.get("observedGeneration") == live["metadata"].get("generation")
            )

        wait_for(converged, timeout=60, what="the controller to apply the change")
        took = time.monotonic() - started
        self.clock.record("change converged (apply to ClusterQueue and status updated)", took)
        updated = sorted(
            {
                show_ref(ref(update.desired))
                for result in state.results_since(since)
                if result.plan is not None
                for update in result.plan.updates
            }
        )
        self.clock.say(
            f"controller converged in {took:.2f} s; it updated {', '.join(updated) or 'nothing'}"
        )
        after_queue = client.get(kinds.CLUSTER_QUEUE, CHANGED_PROJECT) or {}
        old_quota, new_quota = gpu_quotas(before_queue), gpu_quotas(after_queue)
        rows = [
            [
                f"ClusterQueue/{CHANGED_PROJECT}",
                f"{flavor} nominal quota",
                cell(old_quota.get(flavor)),
                cell(new_quota.get(flavor)),
            ]
            for flavor in dict.fromkeys([*old_quota, *new_quota])
        ]
        after_pools = {
            p["metadata"]["name"]: gpu_limit(p)
            for p in client.list(kinds.NODE_POOL, label_selector=names.MANAGED_SELECTOR)[0]
        }
        rows += [
            [f"NodePool/{name}", f"{GPU} limit", cell(before_pools.get(name)), cell(limit)]
            for name, limit in sorted(after_pools.items())
            if name.startswith(f"{pool}-")
        ]
        print(format_table(["OBJECT", "FIELD", "BEFORE", "AFTER"], rows))
        print()
        tables.show(kinds.TRAINING_PROJECT)
        print("\nThe controller's Events:")
        for line in events_summary(client):
            print(f"  {line}")

    # ---------------------------------------------------------------- teardown
    def teardown(self) -> None:
        ignore_signals()
        state, plane = self.run_state, self.plane
        if state is not None or plane is not None:
            heading("Stopping")
        if state is not None:
            started = time.monotonic()
            state.controller.stop()
            if state.thread.ident is not None:  # started
                state.thread.join(timeout=60)
            released = ""
            if self.client is not None and plane is not None and plane.apiserver_running:
                try:
                    lease = self.client.get(
                        kinds.LEASE, names.LEASE_NAME, state.controller.options.namespace
                    )
                    holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
                    released = "; Lease released" if lease and not holder else ""
                except KubeError:
                    pass
            alive = " (its thread is still running!)" if state.thread.is_alive() else ""
            self.clock.say(
                f"controller stopped in {time.monotonic() - started:.1f} s{released}{alive}"
            )
        QUIET.set()  # its watches now fail, as they are cut: expected, not news
        if state is not None:
            state.controller.cache.stop()
            state.controller.cache.join(timeout=5)
            state.client.close()
        if self.health is not None:
            self.health.stop()
        if self.client is not None:
            self.client.close()
        if self.prometheus is not None:
            started = time.monotonic()
            self.prometheus.close()
            self.clock.say(
                f"Prometheus stopped in {time.monotonic() - started:.1f} s (data directory removed)"
            )
        if plane is not None:
            started = time.monotonic()
            plane.stop()
            self.clock.say(
                f"control plane stopped in {time.monotonic() - started:.1f} s "
                "(etcd and the API server terminated, state directory removed)"
            )

    def print_timings(self) -> None:
        if not self.clock.timings:
            return
        heading("Timings")
        for label, seconds in self.clock.timings:
            print(f"  {label:<62} {seconds:6.2f} s")
        print(f"  {'whole demo':<62} {time.monotonic() - self.clock.started:6.2f} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.demo",
        description="Quartermaster against a real API server and Prometheus, start to finish.",
    )
    parser.add_argument(
        "--no-kubectl",
        action="store_true",
        help="print tables from the API even when kubectl is available",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="where the controller log and the applied policy go (default %(default)s)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="the controller's logs on stderr, not a file"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.out / "controller.log"
    with log_path.open("w") as log_file:
        LOGS.path = None if args.verbose else log_path
        configure_logging(verbose=args.verbose, log_file=log_file)
        return run_demo(Demo(use_kubectl=not args.no_kubectl, out_dir=args.out))


def run_demo(demo: Demo) -> int:
    where = f"the controller's logs: {LOGS.path}" if LOGS.path else "the controller's logs: stderr"
    print(
        "Quartermaster demo: etcd and a Kubernetes API server on loopback, the upstream Kueue, "
        "Karpenter and KEDA CRDs,\na real Prometheus, the example policy, and the controller "
        "turning it into queues and node pools.\n"
        f"Ctrl-C stops it cleanly at any point; {where}.\n",
        flush=True,
    )
    code = 0
    try:
        with signals_raise():
            demo.run()
    except Interrupted as interrupted:
        print(f"\ninterrupted ({interrupted}): everything started was stopped", flush=True)
    except (
        DemoError,
        CrdSourceError,
        ControlPlaneError,
        PrometheusError,
        KubeError,
        OSError,
    ) as error:
        print(f"\ndemo failed: {error}", file=sys.stderr, flush=True)
        code = 1
    else:
        demo.print_timings()
        print("\nDone: controller, Prometheus and control plane stopped.")
    if LOGS.path:
        problems = LOGS.problems
        found = (
            f"{len(problems)} warnings or errors ({', '.join(sorted(set(problems)))})"
            if problems
            else "no warnings or errors"
        )
        print(f"The controller's logs: {LOGS.path} ({found}).", flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
