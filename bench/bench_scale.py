"""The controller at scale under churn: 1,000 projects, 10,000 Workloads, 10 changes a second.

Why: a controller that lists the whole cluster on every pass costs the API server more with
every Workload, and a real ML cluster has thousands that Kueue updates all the time. This puts
`quartermaster run` (a process, as in a cluster) in front of a real API server at that size and
measures it from outside, through a counting HTTP proxy only the controller talks through:

- the initial sync: from start to `/readyz` "leading; synced" on a cluster holding the policy
  and the Workloads but none of our objects (the first pass creates them all), the first pass's
  own seconds, and, where the controller logs it, `cache_synced` (every store listed). This
  start talks straight to the API server, not through the proxy: relaying 7,500 writes costs
  the proxy some 10 s of CPU on the same two cores the API server needs, which no cluster
  pays. Its writes are counted from the pass's `reconciled` log line instead;
- a restart on the synced cluster, through the proxy: start to ready again, when there is
  nothing to create, with the LISTs a start makes;
- then `--seconds` of churn (60 by default; 600 for the goal's ten minutes), 10 Workload
  changes a second in Kueue's life cycle (created, admitted, finished, deleted; the
  population stays at 10,000): LIST requests a minute
  (by resource; the goal after the initial sync is 0, relists after a 410 aside), watches
  opened and other reads a minute, passes a minute, pass latency p50/p99 (the `reconciled`
  log line's seconds), API writes a minute by verb and resource, and the controller's RSS
  (start, end, max) and CPU.

The world: the control plane (etcd and the CRD API server on loopback) with every CRD; the
synthetic policy of 1,000 projects over 4 pools (controller/examples/synthetic.py); 10,000
Workloads spread over the projects' namespaces and queues, 7,000 pending and 3,000 admitted,
half of those in projects with deadlines bound to one. No Prometheus: the controller reports
its history as unavailable. No Kueue or Karpenter runs: the bench plays Kueue's part.

Before and after: `--controller-root DIR` runs the controller from another checkout (a
`git worktree` of an older commit, say) against the same world and load; the bench itself, the
proxy and the load are this tree's. Prints figures only, and writes them to
out/bench_scale.json; asserts nothing (timings depend on the machine).

Run: `make bench-scale` churns for 60 s, `make bench-scale SCALE_SECONDS=600` for the ten
minutes the goal names (`.venv/bin/python bench/bench_scale.py --seconds 600`); setting up
the world takes a few minutes more.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import subprocess
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from controller import names
from controller.examples.synthetic import synthetic_documents
from controller.kube import kinds
from controller.kube.client import WRITE_VERBS, KubeClient, KubeError
from controller.reconcile.loop import LoopOptions
from testenv.controller_process import (
    ControllerProcess,
    RunOptions,
    settle,
    start_controller,
    stop_controller,
    wait_ready,
)
from testenv.controlplane import ControlPlane, find_binaries, free_ports
from testenv.counting import ListCountingProxy
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
from testenv.logtail import WRITE_FIELDS, LogTail, logged, writes_in
from testenv.namespaces import ensure_namespaces, policy_namespaces
from testenv.procstat import proc_sample
from testenv.scheduler import Scheduler
from testenv.stats import percentiles

REPO_ROOT = Path(__file__).resolve().parents[1]
PROJECTS = 1000
POOLS = 4
WORKLOADS = 10_000
ADMITTED = 3_000
CHANGES_PER_SECOND = 10.0
GITOPS = "bench-gitops"
NAMESPACE = names.DEFAULT_NAMESPACE
READY_TIMEOUT = 600.0
SETTLE_TIMEOUT = LoopOptions.resync_seconds + 60.0
"""Longer than the controller's resync (300 s, `LoopOptions`' default and so the CLI's): a pass that
writes the last status wakes nothing (its own write is in the cache before its event comes), so
when no other event comes, the pass that shows nothing is left to write is the resync's. With
300 s it could end a second before that pass and read NOT."""
Document = dict[str, Any]


def line(label: str, value: str) -> None:
    print(f"  {label:<48} {value}", flush=True)


# --------------------------------------------------------------------------------------------
# The world


@dataclass
class Job:
    namespace: str
    name: str
    project: str
    pods: int
    gpus_per_pod: int
    pool: str


def projects_of(documents: Iterable[Document]) -> list[Document]:
    return [d for d in documents if d["kind"] == "TrainingProject"]


def job_body(job: Job, *, deadline: str | None, hours: int) -> Document:
    """The pending Workload of `job`, counting toward `deadline` when one is given."""
    labels = {"bench.quartermaster.dev/run": "1"}
    if deadline:
        labels[names.LABEL_DEADLINE] = deadline
    return workload_body(
        name=job.name,
        namespace=job.namespace,
        queue=job.project,
        priority=1000,
        pods=job.pods,
        gpus_per_pod=job.gpus_per_pod,
        labels=labels,
        annotations={names.ANNOTATION_EXPECTED_DURATION: str(hours * 3600)},
    )


def job_status(job: Job, *, finished: bool = False) -> Document:
    """`job` admitted now, on its pool's spot flavor; finished now too, when `finished`."""
    now = rfc3339(datetime.now(UTC))
    admitted = admitted_status(
        admission(
            cluster_queue=job.project,
            pods=job.pods,
            gpus_per_pod=job.gpus_per_pod,
            flavor=names.flavor_name(job.pool, names.SPOT),
        ),
        now,
    )
    return finished_status(admitted, now) if finished else admitted


class Kueue:
    """Plays Kueue on the Workloads: creates them, admits them, finishes them, deletes them."""

    def __init__(self, client: KubeClient, projects: Sequence[Document], rng: random.Random):
        self.client = client
        self.projects = list(projects)
        self.rng = rng
        self.pending: deque[Job] = deque()
        self.running: deque[Job] = deque()
        self.finished: deque[Job] = deque()
        self.done: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self._names = itertools.count()
        self._lock = threading.Lock()

    def _call(self, what: str, request: Callable[[], object]) -> bool:
        try:
            request()
        except KubeError as exc:
            with self._lock:
                self.failures[f"{what}: {exc.status} {exc.reason}"] += 1
            return False
        with self._lock:
            self.done[what] += 1
        return True

    def new_job(self) -> tuple[Job, Document]:
        project = self.rng.choice(self.projects)
        spec = project["spec"]
        deadlines = [d["name"] for d in spec.get("deadlines") or []]
        job = Job(
            namespace=self.rng.choice(spec["namespaces"]),
            name=f"job-{next(self._names):06d}",
            project=project["metadata"]["name"],
            pods=self.rng.choice((1, 1, 2)),
            gpus_per_pod=self.rng.choice((1, 2, 4, 8)),
            pool=self.rng.choice([q["pool"] for q in spec["quotas"]]),
        )
        deadline = self.rng.choice(deadlines) if deadlines and self.rng.random() < 0.5 else None
        return job, job_body(job, deadline=deadline, hours=self.rng.choice((1, 4, 8, 24)))

    def create(self) -> Job | None:
        job, body = self.new_job()
        if self._call("created", partial(create_workload, self.client, body)):
            return job
        return None

    def _status(self, what: str, job: Job, status: Document) -> bool:
        return self._call(what, partial(write_status, self.client, job.namespace, job.name, status))

    def admit(self, job: Job) -> bool:
        return self._status("admitted", job, job_status(job))

    # ------------------------------------------------------------------ the world
    def populate(self, total: int, admitted: int, *, workers: int = 4) -> None:
        """`total` Workloads, `admitted` of them admitted, written in parallel."""
        with ThreadPoolExecutor(max_workers=workers) as pool:
            made = [j for j in pool.map(lambda _: self.create(), range(total)) if j is not None]
            chosen = made[:admitted]
            admitted_ok = list(pool.map(self.admit, chosen))
        self.running.extend(j for j, ok in zip(chosen, admitted_ok, strict=True) if ok)
        self.pending.extend(made[admitted:])

    # ------------------------------------------------------------------ churn
    def change(self, turn: int) -> None:
        """One Workload change; four in a row create, admit, finish and delete one each."""
        step = turn % 4
        if step == 0:
            job = self.create()
            if job is not None:
                self.pending.append(job)
        elif step == 1 and self.pending:
            job = self.pending.popleft()
            if self.admit(job):
                self.running.append(job)
        elif step == 2 and self.running:
            job = self.running.popleft()
            if self._status("finished", job, job_status(job, finished=True)):
                self.finished.append(job)
        elif step == 3 and self.finished:
            job = self.finished.popleft()
            self._call("deleted", partial(delete_workload, self.client, job.namespace, job.name))

    @property
    def live(self) -> int:
        return len(self.pending) + len(self.running) + len(self.finished)


# --------------------------------------------------------------------------------------------
# The controller


def start(root: Path, kubeconfig: Path, log_path: Path) -> ControllerProcess:
    """`quartermaster run` from the checkout at `root`; its log appended to `log_path`."""
    (port,) = free_ports(1)
    options = RunOptions(
        kubeconfig=kubeconfig, identity="bench-scale", health_port=port, namespace=NAMESPACE
    )
    return start_controller(options, log=log_path, root=root, append=True)


@dataclass
class Sync:
    """One start of the controller, until ready."""

    ready_seconds: float
    first_pass_seconds: float | None
    first_pass_writes: int | None
    first_pass_phases: dict[str, float]
    cache_synced_seconds: float | None
    lists: int | None
    """LIST requests from start to ready; None for a start that bypassed the proxy."""
    writes: dict[str, int]
    """API writes from start to ready, by verb and resource through the proxy; for a start
    straight to the API server, the first pass's writes as it logged them."""
    cpu_seconds: float | None
    """The controller's CPU from start to ready; the rest of the machine served the API."""


def start_and_sync(
    root: Path, kubeconfig: Path, log_path: Path, proxy: ListCountingProxy | None
) -> tuple[ControllerProcess, Sync]:
    """Start the controller and wait until it is ready; `proxy` None when it bypasses one."""
    before = proxy.snapshot()[0] if proxy is not None else Counter()
    wall = time.time()
    controller = start(root, kubeconfig, log_path)
    ready = wait_ready(controller, timeout=READY_TIMEOUT, poll=0.1)
    sample = proc_sample(controller.process.pid)
    passes = logged(log_path, "reconciled", since_wall=wall)
    synced = logged(log_path, "cache_synced", since_wall=wall)
    first = passes[0] if passes else {}
    lists: int | None = None
    if proxy is not None:
        after = proxy.snapshot()[0]
        lists = sum(n for (verb, _), n in (after - before).items() if verb == "LIST")
        written = {
            f"{verb} {resource}": n
            for (verb, resource), n in sorted((after - before).items(), key=lambda kv: -kv[1])
            if verb in WRITE_VERBS
        }
    else:
        written = {f"first pass {k}": int(first[k]) for k in WRITE_FIELDS if first.get(k)}
    writes = writes_in(first)
    return controller, Sync(
        ready_seconds=ready,
        first_pass_seconds=float(first["seconds"]) if first else None,
        first_pass_writes=writes if first else None,
        first_pass_phases=dict(first.get("phases") or {}),
        cache_synced_seconds=float(synced[0]["seconds"]) if synced else None,
        lists=lists,
        writes=written,
        cpu_seconds=sample.cpu_seconds if sample is not None else None,
    )


def show_sync(label: str, sync: Sync) -> None:
    cache = (
        f"; cache synced in {sync.cache_synced_seconds:.1f} s"
        if sync.cache_synced_seconds is not None
        else ""
    )
    phases = ", ".join(
        f"{name} {seconds:.1f} s" for name, seconds in sync.first_pass_phases.items()
    )
    phases = f" ({phases})" if phases else ""  # a controller that logs no phases
    first = (
        f"; first pass {sync.first_pass_seconds:.1f} s{phases}, {sync.first_pass_writes} writes"
        if sync.first_pass_seconds is not None
        else ""
    )
    cpu = f"; controller CPU {sync.cpu_seconds:.1f} s" if sync.cpu_seconds is not None else ""
    lists = f"; {sync.lists} LISTs" if sync.lists is not None else ""
    line(label, f"{sync.ready_seconds:.1f} s to ready{first}{cache}{lists}{cpu}")
    for what, count in sync.writes.items():
        line(f"  {what}", str(count))


# --------------------------------------------------------------------------------------------
# The window


@dataclass
class Window:
    minutes: float
    requests: Counter[tuple[str, str]]
    passes: list[float]
    pass_writes: int
    rss: list[float] = field(default_factory=list)
    cpu_percent: float = 0.0
    changes: Counter[str] = field(default_factory=Counter)


def churn(
    kueue: Kueue, controller: ControllerProcess, proxy: ListCountingProxy, minutes: float
) -> Window:
    log = LogTail(controller.log_path)
    log.poll()
    scheduler = Scheduler()
    turns = itertools.count()
    rss: list[float] = []
    first = proc_sample(controller.process.pid)

    def sample() -> None:
        taken = proc_sample(controller.process.pid)
        if taken is None:
            raise RuntimeError("the controller died during the churn")
        rss.append(taken.rss_mib)
        log.poll()

    start_requests, _, _ = proxy.snapshot()
    done_before = Counter(kueue.done)
    start_wall, start = time.time(), time.monotonic()
    scheduler.every(start, 1.0 / CHANGES_PER_SECOND, lambda: kueue.change(next(turns)))
    scheduler.every(start, 10.0, sample)
    scheduler.every(start + 60, 60.0, lambda: progress(log, kueue, rss, start_wall))
    scheduler.run_until(start + minutes * 60)
    end_wall, end = time.time(), time.monotonic()
    sample()
    last = proc_sample(controller.process.pid)
    end_requests, _, _ = proxy.snapshot()
    passes = log.passes_between(start_wall, end_wall)
    cpu = 100 * (last.cpu_seconds - first.cpu_seconds) / (end - start) if first and last else 0.0
    return Window(
        minutes=(end - start) / 60,
        requests=end_requests - start_requests,
        passes=[p.seconds for p in passes],
        pass_writes=sum(p.writes for p in passes),
        rss=rss,
        cpu_percent=cpu,
        changes=Counter(kueue.done) - done_before,
    )


def progress(log: LogTail, kueue: Kueue, rss: list[float], start_wall: float) -> None:
    log.poll()
    passes = log.passes_between(start_wall, time.time())
    minutes = (time.time() - start_wall) / 60
    print(
        f"  [{minutes:.0f} min] {len(passes)} passes, last {passes[-1].seconds:.2f} s"
        if passes
        else f"  [{minutes:.0f} min] no pass yet",
        f"| RSS {rss[-1]:.0f} MiB" if rss else "",
        f"| {kueue.live} Workloads ({len(kueue.pending)} pending, {len(kueue.running)} running)",
        flush=True,
    )


def per_minute(
    requests: Counter[tuple[str, str]], verbs: set[str], minutes: float
) -> dict[str, float]:
    return {
        f"{verb} {res}": round(n / minutes, 2)
        for (verb, res), n in requests.most_common()
        if verb in verbs
    }


def report(window: Window) -> dict[str, Any]:
    minutes = window.minutes

    def rate(verbs: set[str]) -> float:
        return sum(per_minute(window.requests, verbs, minutes).values())

    lists = per_minute(window.requests, {"LIST"}, minutes)
    writes = per_minute(window.requests, set(WRITE_VERBS), minutes)
    latency = percentiles(window.passes)
    by_resource = f" ({', '.join(f'{k} {v}' for k, v in lists.items())})" if lists else ""
    rss = window.rss or [0.0]
    print(f"under churn: {minutes:.1f} min at {CHANGES_PER_SECOND:g} Workload changes/s")
    line("Workload changes made", ", ".join(f"{k} {n}" for k, n in sorted(window.changes.items())))
    line("LIST requests/min (goal 0)", f"{rate({'LIST'}):.1f}{by_resource}")
    line("WATCH requests/min (opened or reopened)", f"{rate({'WATCH'}):.1f}")
    line("GET (one object)/min, discovery/min", f"{rate({'GET'}):.1f}, {rate({'DISCOVERY'}):.1f}")
    line("passes/min", f"{len(window.passes) / minutes:.1f}")
    line("pass seconds p50 / p99 / max", f"{latency['p50']} / {latency['p99']} / {latency['max']}")
    line("API writes/min", f"{sum(writes.values()):.1f}")
    for key, value in writes.items():
        line(f"  {key}", f"{value}")
    line("controller RSS start / end / max", f"{rss[0]:.0f} / {rss[-1]:.0f} / {max(rss):.0f} MiB")
    line("controller CPU (one core = 100 %)", f"{window.cpu_percent:.0f} %")
    return {
        "minutes": round(minutes, 2),
        "changes": dict(window.changes),
        "lists_per_minute": round(rate({"LIST"}), 2),
        "lists_per_minute_by_resource": lists,
        "watches_per_minute": round(rate({"WATCH"}), 2),
        "passes_per_minute": round(len(window.passes) / minutes, 2),
        "pass_seconds": latency,
        "writes_per_minute": round(sum(writes.values()), 2),
        "writes_per_minute_by_verb_resource": writes,
        "rss_mib": {"start": rss[0], "end": rss[-1], "max": max(rss)},
        "cpu_percent": round(window.cpu_percent, 1),
    }


# --------------------------------------------------------------------------------------------
# The run


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument(
        "--seconds",
        type=float,
        default=60.0,
        help="churn window in seconds (default %(default)s; the goal's ten minutes: 600)",
    )
    parser.add_argument(
        "--controller-root",
        type=Path,
        default=REPO_ROOT,
        help="the checkout whose controller runs (default: this one)",
    )
    parser.add_argument("--projects", type=int, default=PROJECTS)
    parser.add_argument("--workloads", type=int, default=WORKLOADS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "out" / "bench_scale.json", help="JSON summary"
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.projects <= 0 or args.workloads <= 0:
        parser.error("--seconds, --projects and --workloads must be positive")
    return args


@dataclass
class World:
    plane: ControlPlane
    kueue: Kueue
    proxy: ListCountingProxy
    kubeconfig: Path


def build_world(stack: ExitStack, state: Path, args: argparse.Namespace) -> World:
    """The control plane with every CRD, the policy, the Workloads, and the counting proxy."""
    plane = ControlPlane(find_binaries())
    stack.callback(plane.stop)
    stack.callback(QUIET.set)
    plane.start()
    admin = KubeClient.from_kubeconfig(str(plane.kubeconfig))
    stack.callback(admin.close)
    load_crds(admin, read_crd_set(crd_sources()).documents)
    documents = synthetic_documents(projects=args.projects, pools=POOLS)
    ensure_namespaces(admin, [*policy_namespaces(documents), NAMESPACE])
    started = time.monotonic()
    for doc in documents:
        admin.apply(kinds.kind_of(doc), doc, field_manager=GITOPS)
    line("policy applied", f"{len(documents)} objects in {time.monotonic() - started:.1f} s")
    kueue = Kueue(admin, projects_of(documents), random.Random(args.seed))
    started = time.monotonic()
    kueue.populate(args.workloads, min(ADMITTED, args.workloads * 3 // 10))
    line(
        "Workloads created",
        f"{kueue.live} ({len(kueue.running)} admitted) in {time.monotonic() - started:.1f} s",
    )
    proxy = ListCountingProxy(plane)
    proxy.start()
    stack.callback(proxy.close)
    return World(plane, kueue, proxy, kubeconfig_for(proxy, state))


def measure(world: World, root: Path, log_path: Path, minutes: float) -> dict[str, Any]:
    """First start, restart, then the churn window; the controller is stopped after each."""
    controller, first = start_and_sync(root, world.plane.kubeconfig, log_path, proxy=None)
    show_sync("initial sync (direct, creates all)", first)
    # The first pass wrote: wait for the next.
    settled = settle(LogTail(log_path), time.time(), timeout=SETTLE_TIMEOUT)
    line("then settled (a pass writing nothing)", f"{settled:.1f} s" if settled else "NOT")
    code, took = stop_controller(controller.process)
    line("stopped (SIGTERM)", f"exit {code} in {took:.1f} s")

    restarted_at = time.time()
    controller, restart = start_and_sync(root, world.kubeconfig, log_path, world.proxy)
    show_sync("restart on the synced cluster", restart)
    try:
        # Usually the restart's first pass writes nothing already; no later pass need come.
        settle(LogTail(log_path), restarted_at, timeout=SETTLE_TIMEOUT)
        churned = report(churn(world.kueue, controller, world.proxy, minutes))
    finally:
        code, took = stop_controller(controller.process)
    line("stopped (SIGTERM)", f"exit {code} in {took:.1f} s")
    if world.kueue.failures:
        line("load generator failures", json.dumps(dict(world.kueue.failures)))
    failed = [
        entry
        for event in ("reconcile_failed", "reconcile_crashed")
        for entry in logged(log_path, event, since_wall=0)
    ]
    line("failed passes (whole run)", str(len(failed)))
    return {"initial_sync": vars(first), "restart": vars(restart), "churn": churned}


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    configure_logging(verbose=False)
    root = args.controller_root.resolve()
    commit = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    print(
        f"scale under churn: {args.projects} projects x {POOLS} pools, {args.workloads} "
        f"Workloads, {CHANGES_PER_SECOND:g} changes/s; controller from {root} ({commit})",
        flush=True,
    )
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        world = build_world(stack, Path(tmp), args)
        measured = measure(world, root, Path(tmp) / "controller.log", args.seconds / 60)
    summary = {"controller_root": str(root), "commit": commit, **measured}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"summary written to {args.out}")


if __name__ == "__main__":
    main()
