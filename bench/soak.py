"""Soak: `quartermaster run` as a process, under steady Kueue Workload churn, for minutes.

Why: the tests and `make bench` show that one pass is right and fast; they cannot show that
the thousandth pass still is. A controller that keeps a little per pass (a cache keyed by
workload name, a client never closed, a metric series per job), writes more than it must while
the world moves (a status rewritten every pass, a boost annotation flipping), or slows down as
passes pile up only shows it after minutes of real traffic. This drives that traffic against a
real API server and measures the controller from outside, as an operator would see it:

- the RSS of the controller process (VmRSS from /proc every 10 s): at the start of the measured
  window, at its end, the growth, min/max and a least-squares slope in MiB/hour (also threads
  and open file descriptors, which leak along with memory);
- API writes a minute by verb and resource, counted by an HTTP proxy only the controller talks
  through (the counting proxy of testenv/counting.py, which counts instead of keeping
  a record of each request so the soak itself does not grow, with Nagle off and upstream
  connections kept open so it does not slow the passes it counts: its remaining cost is printed
  by `--direct`);
- reconcile latency p50/p90/p99/max per pass from the structured log (`reconciled.seconds`)
  and, as a cross-check, from the `quartermaster_reconcile_duration_seconds` histogram;
- reconcile errors (the counter and error-level log lines), and at the end whether
  `quartermaster plan` of the policy as last edited finds nothing to change.

The world: the control plane with every CRD (as the integration tests load them), a real
Prometheus scraping the controller (history available, as in a cluster), a policy of 20
projects over 2-4 of 4 pools with deadlines, budgets and priority boosts, and a short
evaluation window and cooldown so the mix moves during the run. The load, after a warm-up that
fills the queues: Workloads created at a steady rate in the projects' LocalQueues; most are
admitted a little later (QuotaReserved and Admitted, with a flavor assignment, as Kueue records
it), then finished, then deleted; the others are deleted while still pending; and one
TrainingProject is edited every 30 s (a quota or a deadline), as a GitOps commit would. No
Kueue or Karpenter runs: the soak plays their part on the Workloads.

Prints a progress line a minute and a summary, and writes the summary to out/soak.json (the
controller's log to out/soak-controller.log). Exits 1 when the controller died, logged an
error, or left a plan that is not clean.

The warm-up comes before the measured `--minutes`, and lasts until what the controller keeps
may be full: its longest retention (the Event series' window, `events.SERIES_WINDOW`, 10
minutes; history is refreshed every 5) plus the longest a Workload lives here (150 s), so 750 s
by default. Until then the controller's memory grows by design (each new Event's series is kept
for its window), and so do the allocators' pages, as the passes meet every size of work; the
3-minute warm-up used before counted most of that rise as growth. A leak grows in any window,
so a later start hides none. The report still gives the RSS every minute from the churn's start
(`rss_by_minute_mib`), so the warm-up's rise is in view, and splits the RSS into anonymous and
file-backed memory (code paged in as a path first runs is not a leak).

The controller runs from the working tree as it is when the soak starts; the
report records the commit and which controller files had uncommitted changes.

Run: `make soak`, or `.venv/bin/python bench/soak.py --minutes 1 --warmup-seconds 60` for a
quick look.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from controller import names
from controller.api.types import API_VERSION
from controller.history import REFRESH_SECONDS
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from controller.kube.events import SERIES_WINDOW
from testenv.checkout import tree_state
from testenv.controller_process import (
    ControllerExitedError,
    RunOptions,
    run_plan,
    settle,
    start_controller,
    stop_controller,
    wait_ready,
)
from testenv.controlplane import ControlPlane, find_binaries, free_ports
from testenv.counting import BOOKKEEPING, CountingProxy, writes_of
from testenv.crds import crd_sources, load_crds, read_crd_set
from testenv.faultproxy import kubeconfig_for
from testenv.kueue_standin import (
    admission,
    admitted_status,
    create_workload,
    delete_workload,
    finished_status,
    rfc3339,
    workload_body,
    write_status,
)
from testenv.logconfig import QUIET, configure_logging
from testenv.logtail import LogTail
from testenv.namespaces import ensure_namespaces, policy_namespaces
from testenv.procstat import (
    MACHINE,
    ProcSample,
    child_peak_rss_mib,
    cpu_by_process,
    machine_busy_seconds,
    proc_sample,
)
from testenv.prometheus import PrometheusServer, ScrapeTarget
from testenv.scheduler import Scheduler
from testenv.scrape import Scrape, bucket_quantile, scrape
from testenv.stats import percentiles, slope_per_hour

REPO_ROOT = Path(__file__).resolve().parents[1]
GITOPS = "soak-gitops"
"""Field manager of the policy and its edits, as Argo CD or Flux would apply them."""
NAMESPACE = names.DEFAULT_NAMESPACE
LEASE_DURATION = 15.0
SETTLE_TIMEOUT = 90.0
READY_TIMEOUT = 90.0
PLAN_TIMEOUT = 180.0
OWN_CPU = "soak (load, proxy)"
"""This process's name among the CPU figures: the load generator and the proxy."""
PROJECTS = 20
POOLS: tuple[tuple[str, int, float, float], ...] = (
    # name, GPUs per node, on-demand and spot dollars per GPU-hour
    ("a100", 8, 4.10, 1.29),
    ("h100", 8, 12.29, 3.90),
    ("l40s", 4, 1.86, 0.70),
    ("a10g", 4, 1.01, 0.35),
)
TIERS: tuple[tuple[str, int, str], ...] = (
    ("production", 100000, "LowerPriority"),
    ("research", 1000, "LowerPriority"),
    ("exploratory", 100, "Never"),
)
EXPECTED_HOURS = (1, 4, 8, 24, 36)
"""Expected runtimes of the jobs: the long ones put a deadline 30 hours out at risk."""
ADMITTED_SHARE = 0.8
"""Workloads that are admitted; the others are deleted while pending (cancelled)."""
PENDING_SECONDS = (5.0, 40.0)
RUNNING_SECONDS = (20.0, 90.0)
FINISHED_SECONDS = (5.0, 20.0)
CANCELLED_AFTER_SECONDS = (30.0, 90.0)
LIFETIME_SECONDS = max(
    PENDING_SECONDS[1] + RUNNING_SECONDS[1] + FINISHED_SECONDS[1], CANCELLED_AFTER_SECONDS[1]
)
"""The longest a Workload lives: by then as many finish as start, and the queues are full."""
RETENTION_SECONDS = max(SERIES_WINDOW.total_seconds(), REFRESH_SECONDS)
"""The longest the controller keeps what it has seen (the Event series' window)."""
WARMUP_SECONDS = RETENTION_SECONDS + LIFETIME_SECONDS

Document = dict[str, Any]


# --------------------------------------------------------------------------------------------
# The policy


@dataclass
class Project:
    """One TrainingProject as last applied: the generator's view, and the plan's input."""

    name: str
    namespaces: tuple[str, ...]
    pools: tuple[str, ...]
    deadlines: tuple[str, ...]
    priority: int
    allow_spot: bool
    doc: Document
    quota_raised: bool = False
    deadline_moved: bool = False


def policy_document(prometheus_url: str | None) -> Document:
    """Four pools, three tiers; a one-minute window and two-minute cooldown so the mix moves."""
    spec: dict[str, Any] = {
        "tiers": [
            {"name": name, "priority": priority, "preemption": preemption}
            for name, priority, preemption in TIERS
        ],
        "pools": [
            {
                "name": name,
                "zones": [f"us-east-1{'abcd'[i]}"],
                "instanceTypes": [f"{name}-node"],
                "gpusPerNode": per_node,
                "maxGpus": 512,
                "onDemand": {"floorGpus": 8, "ceilingGpus": 256},
                "nodeClass": {"name": f"gpu-{name}"},
                "prices": {"spotPerGpuHour": spot, "onDemandPerGpuHour": on_demand},
                "provisioningLatencySeconds": 300,
                "warmPool": {"minGpus": 0, "maxGpus": 16},
            }
            for i, (name, per_node, on_demand, spot) in enumerate(POOLS)
        ],
        "risk": {
            "raiseThreshold": 0.2,
            "lowerThreshold": 0.05,
            "evaluationWindowSeconds": 60,
            "cooldownSeconds": 120,
            "maxStepGpus": 16,
            "priorityBoost": True,
            "priorityBoostValue": 5000,
        },
    }
    if prometheus_url:
        spec["prometheus"] = {"url": prometheus_url}
    return {
        "apiVersion": API_VERSION,
        "kind": "CapacityPolicy",
        "metadata": {"name": "soak-fleet"},
        "spec": spec,
    }


def projects(now: datetime, count: int = PROJECTS) -> list[Project]:
    """`count` projects over 2-4 pools each; three in four with a deadline, some with budgets.

    The fixed-time deadline is 30 hours out, so the 24- and 36-hour jobs put it at risk.
    """
    release = rfc3339((now + timedelta(hours=30)).replace(minute=0, second=0, microsecond=0))
    made = []
    for i in range(count):
        name = f"team-{i:02d}"
        tier, priority, _ = TIERS[i % len(TIERS)]
        pools = tuple(POOLS[(i + k) % len(POOLS)][0] for k in range(2 + i % 3))
        spec: dict[str, Any] = {
            "tier": tier,
            "namespaces": [name, f"{name}-batch"],
            "quotas": [
                {"pool": pool, "nominalGpus": 8 * (1 + (i + k) % 3), "borrowingLimitGpus": 8}
                for k, pool in enumerate(pools)
            ],
            "allowSpot": i % 6 != 5,
        }
        deadlines: list[dict[str, Any]] = []
        if i % 4 in (0, 2):
            deadlines.append({"name": "release", "at": release, "targetConfidence": 0.95})
        if i % 4 in (1, 2):
            deadlines.append(
                {"name": "weekly", "schedule": "0 18 * * FRI", "timeZone": "Europe/Berlin"}
            )
        if deadlines:
            spec["deadlines"] = deadlines
        if i % 5 == 0:
            spec["budget"] = {"dollarsPerMonth": 200000}
        doc = {
            "apiVersion": API_VERSION,
            "kind": "TrainingProject",
            "metadata": {"name": name},
            "spec": spec,
        }
        made.append(
            Project(
                name=name,
                namespaces=(name, f"{name}-batch"),
                pools=pools,
                deadlines=tuple(d["name"] for d in deadlines),
                priority=priority,
                allow_spot=spec["allowSpot"],
                doc=doc,
            )
        )
    return made


def write_policy_dir(directory: Path, policy: Document, members: Sequence[Project]) -> None:
    """The policy as a GitOps repository holds it now: what `quartermaster plan -f` reads."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "policy.yaml").write_text(yaml.safe_dump(policy, sort_keys=False))
    (directory / "projects.yaml").write_text(
        yaml.safe_dump_all([p.doc for p in members], sort_keys=False)
    )


# --------------------------------------------------------------------------------------------
# The load: Kueue's part on Workloads, and GitOps edits


@dataclass
class Tally:
    created: int = 0
    admitted: int = 0
    finished: int = 0
    deleted: int = 0
    cancelled: int = 0
    edits: int = 0
    failures: int = 0

    def minus(self, other: Tally) -> Tally:
        return Tally(**{k: v - getattr(other, k) for k, v in vars(self).items()})


@dataclass
class Live:
    """A Workload the soak created and has not deleted yet."""

    project: Project
    namespace: str
    state: str  # pending, running, finished
    pods: int
    gpus_per_pod: int


class Churn:
    """Creates Workloads at a steady rate and walks each through Kueue's life cycle."""

    def __init__(
        self,
        client: KubeClient,
        members: Sequence[Project],
        scheduler: Scheduler,
        rng: random.Random,
        *,
        rate: float,
        edit_every: float,
    ) -> None:
        self.client = client
        self.members = list(members)
        self.scheduler = scheduler
        self.rng = rng
        self.rate = rate
        self.edit_every = edit_every
        self.tally = Tally()
        self.live: dict[tuple[str, str], Live] = {}
        self.errors: Counter[str] = Counter()
        self._names = itertools.count()
        self._edit_turn = itertools.count()

    def start(self, now: float) -> None:
        self.scheduler.every(now, 1.0 / self.rate, self.create)
        self.scheduler.every(now + self.edit_every, self.edit_every, self.edit)

    def states(self) -> Counter[str]:
        return Counter(w.state for w in self.live.values())

    def _call(self, what: str, request: Callable[[], object]) -> bool:
        """One API call; a failure is counted, never fatal: the load goes on."""
        try:
            request()
        except KubeError as exc:
            self.tally.failures += 1
            self.errors[f"{what}: {exc.status} {exc.reason or str(exc)[:80]}"] += 1
            return False
        return True

    def _later(self, bounds: tuple[float, float], action: Callable[[], None]) -> None:
        self.scheduler.at(time.monotonic() + self.rng.uniform(*bounds), action)

    # ------------------------------------------------------------------ workloads
    def create(self) -> None:
        project = self.rng.choice(self.members)
        namespace = self.rng.choice(project.namespaces)
        name = f"job-{next(self._names):06d}"
        pods = self.rng.choice((1, 1, 2, 4))
        gpus_per_pod = self.rng.choice((1, 2, 4, 4, 8))
        labels = {"soak.quartermaster.dev/run": "1"}
        if project.deadlines and self.rng.random() < 0.7:
            labels[names.LABEL_DEADLINE] = self.rng.choice(project.deadlines)
        hours = self.rng.choice(EXPECTED_HOURS)
        body = workload_body(
            name=name,
            namespace=namespace,
            queue=project.name,
            priority=project.priority,
            pods=pods,
            gpus_per_pod=gpus_per_pod,
            labels=labels,
            annotations={
                names.ANNOTATION_EXPECTED_DURATION: str(hours * 3600),
                names.ANNOTATION_CHECKPOINT_INTERVAL: str(min(hours, 4) * 3600),
            },
        )
        if not self._call("create", partial(create_workload, self.client, body)):
            return
        self.tally.created += 1
        key = (namespace, name)
        self.live[key] = Live(project, namespace, "pending", pods, gpus_per_pod)
        if self.rng.random() < ADMITTED_SHARE:
            self._later(PENDING_SECONDS, partial(self.admit, key))
        else:
            self._later(CANCELLED_AFTER_SECONDS, partial(self.delete, key, cancelled=True))

    def _status(self, key: tuple[str, str], status: Document) -> bool:
        return self._call("status", partial(write_status, self.client, *key, status))

    def _admission(self, workload: Live) -> Document:
        pool = self.rng.choice(workload.project.pools)
        spot = workload.project.allow_spot and self.rng.random() < 0.6
        return admission(
            cluster_queue=workload.project.name,
            pods=workload.pods,
            gpus_per_pod=workload.gpus_per_pod,
            flavor=names.flavor_name(pool, names.SPOT if spot else names.ON_DEMAND),
        )

    def admit(self, key: tuple[str, str]) -> None:
        workload = self.live.get(key)
        if workload is None:
            return
        status = admitted_status(self._admission(workload), rfc3339(datetime.now(UTC)))
        if self._status(key, status):
            self.tally.admitted += 1
            workload.state = "running"
            self._later(RUNNING_SECONDS, partial(self.finish, key, status))

    def finish(self, key: tuple[str, str], admitted: Document) -> None:
        workload = self.live.get(key)
        if workload is None:
            return
        if self._status(key, finished_status(admitted, rfc3339(datetime.now(UTC)))):
            self.tally.finished += 1
            workload.state = "finished"
        self._later(FINISHED_SECONDS, partial(self.delete, key))

    def delete(self, key: tuple[str, str], *, cancelled: bool = False) -> None:
        if key not in self.live:
            return
        if self._call("delete", partial(delete_workload, self.client, *key)):
            self.tally.deleted += 1
            self.tally.cancelled += int(cancelled)
        del self.live[key]

    # ------------------------------------------------------------------ GitOps
    def edit(self) -> None:
        """One project changes, in turn: its first quota moves by 8 GPUs, or its fixed-time
        deadline by 6 hours; the next edit of the same kind moves it back."""
        turn = next(self._edit_turn)
        project = self.members[turn % len(self.members)]
        spec = project.doc["spec"]
        fixed = [d for d in spec.get("deadlines", []) if "at" in d]
        if fixed and (turn // len(self.members)) % 2 == 1:
            at = datetime.fromisoformat(fixed[0]["at"].replace("Z", "+00:00"))
            moved = -6 if project.deadline_moved else 6
            fixed[0]["at"] = rfc3339(at + timedelta(hours=moved))
            project.deadline_moved = not project.deadline_moved
        else:
            spec["quotas"][0]["nominalGpus"] += -8 if project.quota_raised else 8
            project.quota_raised = not project.quota_raised
        if self._call(
            "edit",
            partial(self.client.apply, kinds.TRAINING_PROJECT, project.doc, field_manager=GITOPS),
        ):
            self.tally.edits += 1


# --------------------------------------------------------------------------------------------
# Printing


def fmt(value: float | None, unit: str = "", digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{unit}"


def line(label: str, value: str) -> None:
    print(f"  {label:<44} {value}", flush=True)


def top_writes(counts: Counter[tuple[str, str]], minutes: float, limit: int = 6) -> str:
    if not counts:
        return "none"
    return ", ".join(
        f"{verb} {res} {n / minutes:.1f}" for (verb, res), n in counts.most_common(limit)
    )


# --------------------------------------------------------------------------------------------
# The run


@dataclass
class Options:
    minutes: float
    warmup_seconds: float
    rate: float
    edit_every: float
    resync_seconds: float
    sample_every: float
    seed: int
    prometheus: bool
    direct: bool
    out: Path


@dataclass
class Marker:
    """The state of every counter at one instant, for differences over an interval."""

    mono: float
    wall: float
    requests: Counter[tuple[str, str]]
    statuses: Counter[int]
    request_seconds: dict[tuple[str, str], float]
    cpu: dict[str, float]
    tally: Tally
    scrape: Scrape | None
    sample: ProcSample | None


class Monitor:
    """Samples the controller on the scheduler's thread; prints a progress line a minute."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        metrics_url: str,
        log: LogTail,
        proxy: CountingProxy,
        churn: Churn,
    ) -> None:
        self.process = process
        self.metrics_url = metrics_url
        self.log = log
        self.proxy = proxy
        self.churn = churn
        self.samples: list[ProcSample] = []
        self.window_start: Marker | None = None
        self.last_progress: Marker | None = None
        self.minute = 0

    def alive(self) -> bool:
        return self.process.poll() is None

    def sample(self) -> ProcSample | None:
        self.log.poll()
        if not self.alive():
            raise ControllerExitedError(f"the controller exited with {self.process.returncode}")
        taken = proc_sample(self.process.pid)
        if taken is not None:
            self.samples.append(taken)
        return taken

    def mark(self) -> Marker:
        taken = self.sample()
        requests, statuses, seconds = self.proxy.snapshot()
        return Marker(
            mono=time.monotonic(),
            wall=time.time(),
            requests=requests,
            statuses=statuses,
            request_seconds=seconds,
            cpu={
                **cpu_by_process(self.process.pid, own=OWN_CPU),
                MACHINE: machine_busy_seconds(),
            },
            tally=Tally(**vars(self.churn.tally)),
            scrape=scrape(self.metrics_url),
            sample=taken,
        )

    def begin_window(self) -> Marker:
        self.window_start = self.last_progress = self.mark()
        return self.window_start

    def progress(self) -> None:
        assert self.last_progress is not None
        previous, now = self.last_progress, self.mark()
        self.last_progress = now
        self.minute += 1
        minutes = (now.mono - previous.mono) / 60
        writes = writes_of(now.requests - previous.requests)
        passes = self.log.passes_between(previous.wall, now.wall)
        latency = percentiles([p.seconds for p in passes])
        done = now.tally.minus(previous.tally)
        states = self.churn.states()
        rss = f"{now.sample.rss_mib:.1f} MiB" if now.sample else "n/a"
        assert self.window_start is not None
        warnings = sum(1 for at, _ in self.log.warnings if at >= self.window_start.wall)
        print(
            f"  [minute {self.minute}] rss {rss}"
            f" | passes {len(passes)} p50 {fmt(latency['p50'], ' s', 2)}"
            f" max {fmt(latency['max'], ' s', 2)}"
            f" | writes/min {sum(writes.values()) / minutes:.0f} ({top_writes(writes, minutes, 4)})"
            f" | workloads +{done.created} admitted {done.admitted} finished {done.finished}"
            f" deleted {done.deleted}, live {len(self.churn.live)} ({states['pending']} pending,"
            f" {states['running']} running)"
            f" | errors {self.log.error_lines} warnings {warnings}",
            flush=True,
        )


def parse_args(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=10.0, help="measured window (10)")
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=WARMUP_SECONDS,
        help="churn before measuring, until the queues are full and what the controller keeps "
        f"has filled its longest window ({WARMUP_SECONDS:g})",
    )
    parser.add_argument("--rate", type=float, default=2.0, help="Workloads created a second (2)")
    parser.add_argument(
        "--edit-every", type=float, default=30.0, help="seconds between project edits (30)"
    )
    parser.add_argument(
        "--resync-seconds", type=float, default=10.0, help="the controller's resync (10)"
    )
    parser.add_argument("--sample-every", type=float, default=10.0, help="RSS sampling (10 s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-prometheus",
        dest="prometheus",
        action="store_false",
        help="no Prometheus: the controller reports history unavailable every pass",
    )
    parser.add_argument(
        "--direct",
        action="store_true",
        help="the controller talks straight to the API server: no proxy, so writes go uncounted "
        "(to see what the proxy costs in latency)",
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out", help="where soak.json goes")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.rate <= 0 or args.edit_every <= 0 or args.sample_every <= 0:
        parser.error("--minutes, --rate, --edit-every and --sample-every must be positive")
    return Options(
        minutes=args.minutes,
        warmup_seconds=max(args.warmup_seconds, 0.0),
        rate=args.rate,
        edit_every=args.edit_every,
        resync_seconds=args.resync_seconds,
        sample_every=args.sample_every,
        seed=args.seed,
        prometheus=args.prometheus,
        direct=args.direct,
        out=args.out,
    )


@dataclass
class Outcome:
    """How the run ended, beyond the counters."""

    ready_seconds: float = 0.0
    died: str | None = None
    began: float | None = None
    """When the churn began (time.monotonic()), the controller ready and synced."""
    start: Marker | None = None
    end: Marker | None = None
    settled_seconds: float | None = None
    plan_code: int | None = None
    plan_output: str = ""
    exit_code: int | None = None
    stop_seconds: float = 0.0
    peaks: dict[str, float] = field(default_factory=dict)


@dataclass
class World:
    """What `build_world` started: the soak drives and measures it, the ExitStack stops it."""

    plane: ControlPlane
    admin: KubeClient
    policy: Document
    members: list[Project]
    proxy: CountingProxy
    process: subprocess.Popen[bytes]
    metrics_url: str
    log: LogTail


def build_world(stack: ExitStack, options: Options, state: Path, outcome: Outcome) -> World:
    """Control plane, CRDs, Prometheus, the policy, the proxy and the controller, ready."""
    started = time.monotonic()
    plane = ControlPlane(find_binaries())  # builds on the first run: about 4 minutes
    stack.callback(plane.stop)
    plane.start()
    admin = KubeClient.from_kubeconfig(str(plane.kubeconfig))
    stack.callback(admin.close)
    load_crds(admin, read_crd_set(crd_sources()).documents)
    line("control plane up, CRDs established", f"{time.monotonic() - started:.1f} s")

    (metrics_port,) = free_ports(1)
    prometheus: PrometheusServer | None = None
    if options.prometheus:
        prometheus = PrometheusServer(
            [ScrapeTarget(f"127.0.0.1:{metrics_port}")], scrape_interval=5.0
        )
        stack.callback(prometheus.close)
        prometheus.start()
        line("Prometheus scraping the controller", f"{prometheus.url}, every 5 s")

    policy = policy_document(prometheus.url if prometheus else None)
    members = projects(datetime.now(UTC))
    ensure_namespaces(admin, [*policy_namespaces(p.doc for p in members), NAMESPACE])
    for doc in (policy, *(p.doc for p in members)):
        admin.apply(kinds.kind_of(doc), doc, field_manager=GITOPS)
    line(
        "policy applied",
        f"{len(members)} projects, {sum(len(p.pools) for p in members)} quotas over "
        f"{len(POOLS)} pools, {sum(1 for p in members if p.deadlines)} with deadlines",
    )

    proxy = CountingProxy(plane)
    proxy.start()
    log_path = state / "controller.log"
    kubeconfig = plane.kubeconfig if options.direct else kubeconfig_for(proxy, state)
    controller = start_controller(
        RunOptions(
            kubeconfig=kubeconfig,
            identity="soak",
            health_port=metrics_port,
            namespace=NAMESPACE,
            lease_duration=LEASE_DURATION,
            resync_seconds=options.resync_seconds,
        ),
        log=log_path,
        root=REPO_ROOT,
    )
    process = controller.process

    def stop_all() -> None:
        if outcome.exit_code is None and process.poll() is None:
            outcome.exit_code, outcome.stop_seconds = stop_controller(process)
        QUIET.set()  # the generator's client may log as the server goes away
        proxy.close()

    stack.callback(stop_all)
    outcome.ready_seconds = wait_ready(controller, timeout=READY_TIMEOUT)
    line("controller leading and synced", f"{outcome.ready_seconds:.1f} s (pid {process.pid})")
    return World(
        plane,
        admin,
        policy,
        members,
        proxy,
        process,
        controller.metrics_url,
        LogTail(log_path),
    )


def drive(world: World, options: Options, outcome: Outcome) -> tuple[Monitor, Churn, Scheduler]:
    """Warm-up, then the measured window: churn, samples, a progress line a minute."""
    scheduler = Scheduler()
    churn = Churn(
        world.admin,
        world.members,
        scheduler,
        random.Random(options.seed),
        rate=options.rate,
        edit_every=options.edit_every,
    )
    monitor = Monitor(world.process, world.metrics_url, world.log, world.proxy, churn)

    def sample() -> None:
        monitor.sample()

    t0 = outcome.began = time.monotonic()
    churn.start(t0)
    scheduler.every(t0, options.sample_every, sample)
    print(
        f"warm-up: {options.warmup_seconds:g} s of churn at {options.rate:g} Workloads/s",
        flush=True,
    )
    try:
        scheduler.run_until(t0 + options.warmup_seconds)
        start = outcome.start = monitor.begin_window()
        rss = f"{start.sample.rss_mib:.1f} MiB" if start.sample else "n/a"
        print(
            f"measuring {options.minutes:g} min from here: controller RSS {rss}, "
            f"{len(churn.live)} live Workloads",
            flush=True,
        )
        scheduler.every(start.mono + 60, 60, monitor.progress)
        scheduler.run_until(start.mono + options.minutes * 60)
        outcome.end = monitor.mark()
    except ControllerExitedError as died:
        outcome.died = str(died)
    scheduler.clear()
    return monitor, churn, scheduler


def conclude(world: World, state: Path, outcome: Outcome) -> None:
    """Let the controller settle, plan the policy as last edited, then SIGTERM it."""
    stopped = time.time()
    if outcome.died is None:
        outcome.settled_seconds = settle(
            world.log, stopped, timeout=SETTLE_TIMEOUT, process=world.process
        )
        policy_dir = state / "policy"
        write_policy_dir(policy_dir, world.policy, world.members)
        plan = run_plan(
            policy_dir,
            world.plane.kubeconfig,
            namespace=NAMESPACE,
            root=REPO_ROOT,
            timeout=PLAN_TIMEOUT,
        )
        outcome.plan_code, outcome.plan_output = plan.code, plan.output
        if world.process.poll() is not None:
            outcome.died = f"the controller exited with {world.process.returncode}"
        else:
            outcome.exit_code, outcome.stop_seconds = stop_controller(world.process)
    world.log.poll()
    outcome.peaks = child_peak_rss_mib()


@dataclass
class Run:
    """Everything the report reads."""

    options: Options
    outcome: Outcome
    log: LogTail
    monitor: Monitor
    churn: Churn
    scheduler: Scheduler
    tree: dict[str, Any]


def soak(options: Options, state: Path) -> Run:
    outcome = Outcome()
    tree = tree_state(REPO_ROOT)  # as the controller process is about to import it
    with ExitStack() as stack:
        world = build_world(stack, options, state, outcome)
        monitor, churn, scheduler = drive(world, options, outcome)
        conclude(world, state, outcome)
    return Run(options, outcome, world.log, monitor, churn, scheduler, tree)


def verdict(run: Run) -> list[str]:
    """Why the soak failed; empty when it passed."""
    outcome, log = run.outcome, run.log
    failures = []
    if outcome.died:
        failures.append(f"controller died: {outcome.died}")
    elif outcome.exit_code != 0:
        failures.append(f"controller exit code on SIGTERM: {outcome.exit_code}")
    if log.error_lines:
        failures.append(f"controller logged {log.error_lines} error line(s)")
    if log.not_json:
        failures.append(f"controller wrote {log.not_json} log line(s) that are not JSON")
    if outcome.plan_code != 0:
        failures.append(f"final plan not clean (exit {outcome.plan_code})")
    return failures


# --------------------------------------------------------------------------------------------
# The report


def by_minute(samples: Sequence[ProcSample], began: float) -> list[float]:
    """The RSS at each whole minute since `began`, warm-up included (the first sample at or
    after it), so the report shows the curve's shape, not only its ends."""
    curve: list[float] = []
    for sample in samples:
        if sample.at >= began + 60 * len(curve):
            curve.append(round(sample.rss_mib, 1))
    return curve


def memory_section(run: Run, start: Marker, end: Marker) -> dict[str, Any]:
    samples = [s for s in run.monitor.samples if start.mono - 1 <= s.at <= end.mono + 1]
    second_half = [s for s in samples if s.at >= (start.mono + end.mono) / 2]
    first, last = start.sample, end.sample
    if not (first and last and samples):
        return {}
    growth = last.rss_mib - first.rss_mib
    memory: dict[str, Any] = {
        "rss_start_mib": round(first.rss_mib, 1),
        "rss_end_mib": round(last.rss_mib, 1),
        "growth_mib": round(growth, 1),
        "growth_percent": round(100 * growth / first.rss_mib, 1),
        "rss_min_mib": round(min(s.rss_mib for s in samples), 1),
        "rss_max_mib": round(max(s.rss_mib for s in samples), 1),
        "peak_rss_mib": round(last.hwm_mib, 1),
        "slope_mib_per_hour": slope_per_hour([(s.at, s.rss_mib) for s in samples]),
        "slope_second_half_mib_per_hour": slope_per_hour([(s.at, s.rss_mib) for s in second_half]),
        "anon_start_end_mib": [round(first.anon_mib, 1), round(last.anon_mib, 1)],
        "file_start_end_mib": [round(first.file_mib, 1), round(last.file_mib, 1)],
        "rss_by_minute_mib": by_minute(run.monitor.samples, run.outcome.began or start.mono),
        "samples": len(samples),
        "threads_start_end": [first.threads, last.threads],
        "fds_start_end": [first.fds, last.fds],
        "cpu_percent": round(
            100 * (last.cpu_seconds - first.cpu_seconds) / (end.mono - start.mono), 1
        ),
    }
    line(
        "controller RSS start -> end",
        f"{first.rss_mib:.1f} -> {last.rss_mib:.1f} MiB "
        f"({growth:+.1f} MiB, {memory['growth_percent']:+.1f} %)",
    )
    line(
        "  anonymous, file-backed (start -> end)",
        f"{first.anon_mib:.1f} -> {last.anon_mib:.1f} MiB, "
        f"{first.file_mib:.1f} -> {last.file_mib:.1f} MiB",
    )
    line(
        "  min / max (peak VmHWM)",
        f"{memory['rss_min_mib']} / {memory['rss_max_mib']} MiB ({memory['peak_rss_mib']} MiB), "
        f"{len(samples)} samples",
    )
    line(
        "  slope, linear fit: whole / second half",
        f"{fmt(memory['slope_mib_per_hour'], ' MiB/h', 1)} / "
        f"{fmt(memory['slope_second_half_mib_per_hour'], ' MiB/h', 1)}",
    )
    line(
        "  threads, open fds (start -> end)",
        f"{first.threads} -> {last.threads}, {first.fds} -> {last.fds}",
    )
    line("  CPU (one core = 100 %)", f"{memory['cpu_percent']} %")
    return memory


def api_section(start: Marker, end: Marker) -> dict[str, Any]:
    minutes = (end.mono - start.mono) / 60
    requests = end.requests - start.requests
    writes = writes_of(requests)
    objects = sum(n for (_, res), n in writes.items() if res not in BOOKKEEPING)
    reads = sum(n for (verb, _), n in requests.items() if verb == "GET")
    watches = sum(n for (verb, _), n in requests.items() if verb == "WATCH")
    odd = {str(code): n for code, n in sorted((end.statuses - start.statuses).items())}
    odd = {code: n for code, n in odd.items() if not code.startswith("2")}
    line("API writes/min (all)", f"{sum(writes.values()) / minutes:.1f}")
    for (verb, res), n in writes.most_common():
        line(f"  {verb} {res}", f"{n / minutes:.2f}/min ({n})")
    line("API writes/min without Lease and Event", f"{objects / minutes:.1f}")
    line("API reads/min (GET: list, get)", f"{reads / minutes:.1f}")
    line("watches opened/min", f"{watches / minutes:.1f}")
    line("responses not 2xx", json.dumps(odd) if odd else "none")
    # Where a pass waits: time to the response's headers, through the proxy, by request kind.
    waited = {
        key: end.request_seconds.get(key, 0.0) - start.request_seconds.get(key, 0.0)
        for key in requests
    }
    slowest = sorted(waited.items(), key=lambda item: -item[1])[:6]
    line(
        "request time by kind (total s, mean ms)",
        ", ".join(
            f"{verb} {res} {total:.0f} s {1000 * total / requests[(verb, res)]:.0f} ms"
            for (verb, res), total in slowest
        ),
    )
    return {
        "window_minutes": round(minutes, 2),
        "writes_per_minute": round(sum(writes.values()) / minutes, 1),
        "object_and_status_writes_per_minute": round(objects / minutes, 1),
        "reads_per_minute": round(reads / minutes, 1),
        "watches_opened_per_minute": round(watches / minutes, 1),
        "writes_per_minute_by_verb_resource": {
            f"{verb} {res}": round(n / minutes, 2) for (verb, res), n in writes.most_common()
        },
        "writes_by_verb_resource": {f"{v} {r}": n for (v, r), n in writes.most_common()},
        "responses_not_2xx": odd,
        "request_mean_ms_by_verb_resource": {
            f"{verb} {res}": round(1000 * total / requests[(verb, res)], 1)
            for (verb, res), total in slowest
        },
    }


def cpu_section(start: Marker, end: Marker) -> dict[str, float]:
    """CPU of every process over the window (one core = 100 %), and what the rest of the
    machine used: other work on the same cores slows the passes as much as the controller."""
    seconds = end.mono - start.mono

    def percent(name: str) -> float:
        return round(100 * (end.cpu.get(name, 0.0) - start.cpu.get(name, 0.0)) / seconds, 1)

    ours = sorted((n for n in end.cpu if n != MACHINE), key=lambda n: -percent(n))
    used = {name: percent(name) for name in ours}
    used["others on the machine"] = round(percent(MACHINE) - sum(used.values()), 1)
    load = os.getloadavg()
    line(
        f"CPU % by process ({os.cpu_count()} cores)",
        ", ".join(f"{name} {value}" for name, value in used.items()),
    )
    line("  load average at the end (1, 5, 15 min)", " ".join(f"{v:.2f}" for v in load))
    return used


def latency_section(run: Run, start: Marker, end: Marker) -> dict[str, Any]:
    minutes = (end.mono - start.mono) / 60
    passes = run.log.passes_between(start.wall, end.wall)
    from_log = percentiles([p.seconds for p in passes])
    with_writes = sum(1 for p in passes if p.writes)
    # The window in sixths: do passes slow down as the soak goes on?
    span = (end.wall - start.wall) / 6
    sixths = [
        percentiles(
            [
                p.seconds
                for p in run.log.passes_between(start.wall + i * span, start.wall + (i + 1) * span)
            ]
        )["p50"]
        for i in range(6)
    ]
    latency: dict[str, Any] = {
        "passes": len(passes),
        "passes_per_minute": round(len(passes) / minutes, 1),
        "passes_with_writes": with_writes,
        "from_log_seconds": from_log,
        "p50_by_sixth_of_window": sixths,
    }
    line(
        "reconcile passes",
        f"{len(passes)} ({len(passes) / minutes:.1f}/min, {with_writes} with object or "
        "status writes)",
    )
    line(
        "latency p50/p90/p99/max (log, per pass)",
        " / ".join(fmt(from_log[k]) for k in ("p50", "p90", "p99", "max")) + " s",
    )
    line("  p50 by sixth of the window", " ".join(fmt(v) for v in sixths))
    if start.scrape and end.scrape:
        count = end.scrape.count - start.scrape.count
        total = end.scrape.total_seconds - start.scrape.total_seconds
        mean = total / count if count else None
        bucketed = {
            f"p{round(q * 100)}": bucket_quantile(start.scrape, end.scrape, q)
            for q in (0.5, 0.9, 0.99)
        }
        latency["from_histogram"] = {
            "count": int(count),
            "mean_seconds": None if mean is None else round(mean, 3),
            **bucketed,
        }
        line(
            "latency p50/p90/p99 (histogram)",
            f"{' / '.join(bucketed.values())} s, mean {fmt(mean)} s, {int(count)} passes",
        )
        latency["metrics_series_start_end"] = [start.scrape.series, end.scrape.series]
        line("/metrics samples (start -> end)", f"{start.scrape.series} -> {end.scrape.series}")
    return latency


def errors_section(run: Run, start: Marker, end: Marker) -> dict[str, Any]:
    log = run.log
    in_window = total = None
    if start.scrape and end.scrape:
        in_window = int(end.scrape.errors - start.scrape.errors)
        total = int(end.scrape.errors)
    line("reconcile errors (metric: window / all)", f"{in_window} / {total}")
    line("error log lines", f"{log.error_lines}")
    for text in log.errors[:5]:
        print(f"    {text}")
    inside = Counter(e for at, e in log.warnings if start.wall <= at < end.wall)
    outside = Counter(e for at, e in log.warnings if not start.wall <= at < end.wall)
    warnings = dict(inside.most_common())
    line("warnings in the window, by event", json.dumps(warnings) if warnings else "none")
    line(
        "  before and after it (start-up, shutdown)",
        json.dumps(dict(outside.most_common())) if outside else "none",
    )
    decisions = dict(log.decisions.most_common())
    line(
        "capacity decisions logged (action/reason)", json.dumps(decisions) if decisions else "none"
    )
    line(
        "priority boosts written, objects updated",
        f"{log.events['priority_boost']}, {log.events['object_updated']}",
    )
    return {
        "reconcile_errors_in_window": in_window,
        "reconcile_errors_total": total,
        "error_log_lines": log.error_lines,
        "first_errors": log.errors[:10],
        "warnings_in_window_by_event": warnings,
        "warnings_outside_window_by_event": dict(outside.most_common()),
        "not_json_lines": log.not_json,
        "decisions_by_action_reason": decisions,
        "priority_boost_writes": log.events["priority_boost"],
        "objects_updated": log.events["object_updated"],
    }


def load_section(run: Run, start: Marker, end: Marker) -> dict[str, Any]:
    churn, done = run.churn, end.tally.minus(start.tally)
    states = churn.states()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = round(usage.ru_utime + usage.ru_stime, 1)
    line(
        "Workloads in the window",
        f"created {done.created}, admitted {done.admitted}, finished {done.finished}, "
        f"deleted {done.deleted} ({done.cancelled} while pending); {done.edits} project edits",
    )
    line(
        "  live at the end",
        f"{len(churn.live)} ({states['pending']} pending, {states['running']} running, "
        f"{states['finished']} finished)",
    )
    line(
        "  load generator and proxy",
        f"max lag {run.scheduler.max_lag:.2f} s, {churn.tally.failures} failed calls, "
        f"{cpu} s CPU in all",
    )
    return {
        "window": vars(done),
        "live_at_end": len(churn.live),
        "live_by_state_at_end": dict(states),
        "generator_errors": dict(churn.errors.most_common(10)),
        "generator_max_lag_seconds": round(run.scheduler.max_lag, 2),
        "soak_process_cpu_seconds": cpu,
    }


def final_section(run: Run) -> dict[str, Any]:
    outcome = run.outcome
    line(
        "settled after the churn stopped",
        "no" if outcome.settled_seconds is None else f"in {outcome.settled_seconds:.1f} s",
    )
    clean = outcome.plan_code == 0
    line("final plan", "clean (0 changes)" if clean else f"NOT clean (exit {outcome.plan_code})")
    if not clean:
        for text in outcome.plan_output.splitlines()[:20]:
            print(f"    {text}")
    line("controller on SIGTERM", f"exit {outcome.exit_code} after {outcome.stop_seconds:.1f} s")
    peaks = {k: round(v) for k, v in sorted(outcome.peaks.items())}
    line("peak RSS of every child process", ", ".join(f"{k} {v} MiB" for k, v in peaks.items()))
    return {
        "settled_seconds": outcome.settled_seconds,
        "plan_exit_code": outcome.plan_code,
        "plan_clean": clean,
        "plan_output": outcome.plan_output.splitlines()[:40],
        "controller_exit_code": outcome.exit_code,
        "sigterm_to_exit_seconds": round(outcome.stop_seconds, 2),
        "peak_rss_mib_by_process": peaks,
    }


def report(run: Run) -> dict[str, Any]:
    """Print the summary block; return it for out/soak.json."""
    options, outcome = run.options, run.outcome
    summary: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]),
        "options": {**vars(options), "out": str(options.out)},
        "policy": {"projects": PROJECTS, "pools": len(POOLS)},
        "controller_ready_seconds": round(outcome.ready_seconds, 2),
        "controller_died": outcome.died,
        "tree": run.tree,
    }
    print("summary", flush=True)
    line("controller", f"ready in {outcome.ready_seconds:.1f} s; {outcome.died or 'alive'}")
    start, end = outcome.start, outcome.end
    if start is not None and end is not None:
        summary["memory"] = memory_section(run, start, end)
        summary["cpu_percent_by_process"] = cpu_section(start, end)
        if options.direct:
            line("API writes", "not counted (--direct: no proxy)")
        else:
            summary["api"] = api_section(start, end)
        summary["latency"] = latency_section(run, start, end)
        summary["errors"] = errors_section(run, start, end)
        summary["load"] = load_section(run, start, end)
    summary["final"] = final_section(run)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_args(argv)
    configure_logging(verbose=False)
    print(
        f"soak: `quartermaster run` as a process; {PROJECTS} projects x {len(POOLS)} pools, "
        f"{options.rate:g} Workloads/s, a project edit every {options.edit_every:g} s, "
        f"resync {options.resync_seconds:g} s; {options.minutes:g} min measured",
        flush=True,
    )
    state = Path(tempfile.mkdtemp(prefix="qm-soak-"))
    options.out.mkdir(parents=True, exist_ok=True)
    log_copy = options.out / "soak-controller.log"
    try:
        run = soak(options, state)
    finally:  # the controller's log is wanted most when the soak failed
        if (state / "controller.log").exists():
            shutil.copyfile(state / "controller.log", log_copy)
        shutil.rmtree(state, ignore_errors=True)
    summary = report(run)
    failures = verdict(run)
    summary.update(controller_log=str(log_copy), failures=failures, ok=not failures)
    target = options.out / "soak.json"
    target.write_text(json.dumps(summary, indent=2) + "\n")
    line("written", f"{target}, {log_copy}")
    if failures:
        print("FAILED: " + "; ".join(failures), flush=True)
        return 1
    print("OK: the controller stayed up, logged no errors and left a clean plan", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
