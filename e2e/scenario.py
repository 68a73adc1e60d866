"""The end-to-end scenario: submit workloads, watch risk rise, the mix move, and fall back.

One runner, two places to run it:

- `--local` (CI, any machine): a real etcd and API server on loopback with the upstream CRDs
  (testenv), an empty real Prometheus (history available, so the controller may
  lower), and the controller started as its own process (`quartermaster run`) with leader
  election on, exactly as the Deployment runs it.
- `--kubeconfig` (e2e/kind.sh, or any cluster): the controller installed from `manifests/`,
  Kueue, KEDA and Prometheus running; the runner only talks to the API server.

What is submitted differs, because only one of the two runs Kueue:

- `--submit jobs` (the default with `--kubeconfig`): batch/v1 Jobs, as users submit work, with
  `kueue.x-k8s.io/queue-name` and our deadline, expected-duration and checkpoint-interval
  keys as labels. Kueue makes each Job's Workload and copies those labels to it only if its
  configuration's `integrations.labelKeysToCopy` lists them (e2e/kind.sh sets that up); it
  copies no annotations. A Workload without them would leave the deadline's risk at 0, so the
  run fails at once, naming the cause, when the project reports DeadlinesTracked=False.
- `--submit workloads` (the only choice with `--local`): Kueue Workloads written directly, as
  Kueue would write them, with the expected duration and checkpoint interval as annotations.
  Nothing runs Kueue on the local control plane, so a Job would never become a Workload.

Either way the runner acts as a user does, through the API server alone:

1. apply a policy and a production project with a deadline 101 hours away (GitOps), after
   the namespaces they use (where the server has namespaces);
2. wait for the baseline: the a100 on-demand NodePool limit at the policy's floor;
3. submit 15 pending 16-GPU, 30-hour jobs counting toward the deadline (no GPU node runs
   them: on kind, no node has the GPUs; locally nothing admits them);
4. see the project's deadline risk rise in its status above the raise threshold;
5. see the mix move: the on-demand NodePool limit and the project's on-demand flavor quota
   rise, in the same pass;
6. delete the Jobs or Workloads (the work is done; a Job's Workload goes with it);
7. see the risk fall, and the limit and quota step back to the floor after the evaluation
   window and cooldown.

The policy uses a 15-second window and cooldown so the whole scenario takes a few minutes.
Each step prints how long it took; a step that does not happen within its timeout fails the run
with the state it last saw. `--json FILE` writes the timeline.

Run: `.venv/bin/python -m e2e.scenario --local` or `... --kubeconfig ~/.kube/config`.
The `--kubeconfig` path with Jobs needs a real cluster with Kueue; it has not been run on the
development machine (no Docker there for kind).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

from controller import logs, names
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from e2e.demo import example_documents
from testenv.controller_process import RunOptions, start_controller, stop_controller
from testenv.controlplane import ControlPlane, free_ports
from testenv.crds import crd_sources, load_crds, read_crd_set
from testenv.namespaces import ensure_namespaces, policy_namespaces
from testenv.prometheus import PrometheusServer

T = TypeVar("T")
Document = dict[str, Any]
Submit = Literal["jobs", "workloads"]

POLICY = "gpu-fleet"
PROJECT = "llm-pretrain"
WORKLOAD_NAMESPACE = "llm"
POOL = "a100"
GPU = "nvidia.com/gpu"
FLOOR = 16
WINDOW_SECONDS = 15
COOLDOWN_SECONDS = 15
RAISE_THRESHOLD = 0.2
LOWER_THRESHOLD = 0.05
WORKLOADS = 15
DEADLINE_HOURS = 101
DEADLINE = "release"
EXPECTED_SECONDS = 30 * 3600
CHECKPOINT_SECONDS = 4 * 3600
GITOPS = "e2e-gitops"
KUEUE = "e2e-kueue"
USER = "e2e-user"
JOB = kinds.Kind("batch", "v1", "Job", "jobs", True)
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
NAME_PREFIX = "e2e-train-"


class ScenarioError(RuntimeError):
    """A step did not happen in time; the message says what was last seen."""


# ------------------------------------------------------------------------------ documents


def scenario_documents(*, prometheus_url: str | None, now: datetime) -> list[Document]:
    """The example policy (fast window and cooldown) and its llm-pretrain project, whose
    deadline is an absolute time 101 hours from now."""
    out: list[Document] = []
    for doc in example_documents():
        if doc["kind"] == "CapacityPolicy":
            risk = doc["spec"]["risk"]
            risk.update(
                evaluationWindowSeconds=WINDOW_SECONDS,
                cooldownSeconds=COOLDOWN_SECONDS,
                raiseThreshold=RAISE_THRESHOLD,
                lowerThreshold=LOWER_THRESHOLD,
            )
            if prometheus_url:
                doc["spec"]["prometheus"]["url"] = prometheus_url
            out.append(doc)
        elif doc["kind"] == "TrainingProject" and doc["metadata"]["name"] == PROJECT:
            deadline = now + timedelta(hours=DEADLINE_HOURS)
            doc["spec"]["deadlines"] = [
                {
                    "name": DEADLINE,
                    "at": deadline.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "targetConfidence": 0.8,
                }
            ]
            out.append(doc)
    return out


def trainer() -> Document:
    """The pod of every submitted job: 8 GPUs, which no node here has."""
    return {
        "name": "train",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {GPU: "8"}, "limits": {GPU: "8"}},
    }


def workload(index: int) -> Document:
    """The local path (no Kueue): a pending Workload of 2 pods x 8 GPUs, 30 hours long,
    checkpointing every 4 hours, written as Kueue would write it."""
    return {
        "apiVersion": kinds.WORKLOAD.api_version,
        "kind": kinds.WORKLOAD.kind,
        "metadata": {
            "name": f"{NAME_PREFIX}{index}",
            "namespace": WORKLOAD_NAMESPACE,
            "labels": {names.LABEL_DEADLINE: DEADLINE},
            "annotations": {
                names.ANNOTATION_EXPECTED_DURATION: str(EXPECTED_SECONDS),
                names.ANNOTATION_CHECKPOINT_INTERVAL: str(CHECKPOINT_SECONDS),
            },
        },
        "spec": {
            "queueName": PROJECT,
            "podSets": [
                {
                    "name": "main",
                    "count": 2,
                    "template": {"spec": {"containers": [trainer()], "restartPolicy": "Never"}},
                }
            ],
        },
    }


def job(index: int) -> Document:
    """The cluster path (Kueue runs): a batch/v1 Job of 2 pods x 8 GPUs, 30 hours long,
    checkpointing every 4 hours, as a user submits it.

    Everything the risk model reads is a label, because Kueue copies to the Workload it makes
    only the Job's labels its `integrations.labelKeysToCopy` lists, and no annotations. The
    Job starts suspended, as Kueue's documentation submits them: Kueue resumes it on admission.
    """
    return {
        "apiVersion": JOB.api_version,
        "kind": JOB.kind,
        "metadata": {
            "name": f"{NAME_PREFIX}{index}",
            "namespace": WORKLOAD_NAMESPACE,
            "labels": {
                QUEUE_NAME_LABEL: PROJECT,
                names.LABEL_DEADLINE: DEADLINE,
                names.LABEL_EXPECTED_DURATION: str(EXPECTED_SECONDS),
                names.LABEL_CHECKPOINT_INTERVAL: str(CHECKPOINT_SECONDS),
            },
        },
        "spec": {
            "suspend": True,
            "parallelism": 2,
            "completions": 2,
            "backoffLimit": 0,
            "template": {"spec": {"containers": [trainer()], "restartPolicy": "Never"}},
        },
    }


def submit_jobs(client: KubeClient, submit: Submit) -> None:
    if submit == "jobs":
        for index in range(WORKLOADS):
            client.apply(JOB, job(index), field_manager=USER)
    else:
        for index in range(WORKLOADS):
            client.apply(kinds.WORKLOAD, workload(index), field_manager=KUEUE)


def delete_jobs(client: KubeClient, submit: Submit) -> None:
    """The work is done: the Jobs go (Kueue's Workloads with them, by their owner reference),
    or, locally, the Workloads."""
    kind = JOB if submit == "jobs" else kinds.WORKLOAD
    items, _ = client.list(kind, namespace=WORKLOAD_NAMESPACE)
    for item in items:
        if item["metadata"]["name"].startswith(NAME_PREFIX):
            client.delete(kind, item["metadata"]["name"], WORKLOAD_NAMESPACE)


# ------------------------------------------------------------------------------ observing


@dataclass(frozen=True)
class Seen:
    """What the cluster says, read back from the API server."""

    risk: float | None
    on_demand_limit: int | None
    spot_limit: int | None
    on_demand_quota: int | None
    untracked: str | None = None
    """The DeadlinesTracked=False message, when the project's Workloads miss its deadline."""

    def __str__(self) -> str:
        return (
            f"risk={self.risk} on-demand limit={self.on_demand_limit} "
            f"spot limit={self.spot_limit} on-demand quota={self.on_demand_quota}"
            + (f" DeadlinesTracked=False: {self.untracked}" if self.untracked else "")
        )


def _limit(client: KubeClient, capacity_type: str) -> int | None:
    pool = client.get(kinds.NODE_POOL, names.nodepool_name(POOL, capacity_type))
    value = ((pool or {}).get("spec", {}).get("limits") or {}).get(GPU)
    return int(value) if value is not None else None


def _quota(client: KubeClient) -> int | None:
    queue = client.get(kinds.CLUSTER_QUEUE, PROJECT)
    if queue is None:
        return None
    flavor = names.flavor_name(POOL, names.ON_DEMAND)
    return sum(
        int(resource["nominalQuota"])
        for group in queue["spec"]["resourceGroups"]
        for f in group["flavors"]
        if f["name"] == flavor
        for resource in f["resources"]
        if resource["name"] == GPU
    )


def observe(client: KubeClient) -> Seen:
    project = client.get(kinds.TRAINING_PROJECT, PROJECT) or {}
    status = project.get("status") or {}
    risk = status.get("worstDeadlineRisk")
    tracked: dict[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "DeadlinesTracked"), {}
    )
    return Seen(
        float(risk) if risk is not None else None,
        _limit(client, names.ON_DEMAND),
        _limit(client, names.SPOT),
        _quota(client),
        untracked=str(tracked.get("message")) if tracked.get("status") == "False" else None,
    )


@dataclass
class Timeline:
    started: float = field(default_factory=time.monotonic)
    steps: list[dict[str, Any]] = field(default_factory=list)

    def note(self, step: str, seen: Seen, seconds: float) -> None:
        entry = {
            "step": step,
            "at_seconds": round(time.monotonic() - self.started, 1),
            "took_seconds": round(seconds, 1),
            "risk": seen.risk,
            "on_demand_limit": seen.on_demand_limit,
            "spot_limit": seen.spot_limit,
            "on_demand_quota": seen.on_demand_quota,
        }
        self.steps.append(entry)
        print(f"[{entry['at_seconds']:7.1f}s] {step:<58} ({seconds:5.1f}s)  {seen}", flush=True)


def wait_until(
    client: KubeClient,
    what: str,
    predicate: Callable[[Seen], bool],
    *,
    timeout: float,
    poll: float = 1.0,
) -> tuple[Seen, float]:
    """The first observation satisfying `predicate`, and how long it took."""
    start = time.monotonic()
    seen = Seen(None, None, None, None)
    while True:
        try:
            seen = observe(client)
        except KubeError as exc:
            if not exc.retryable:
                raise
        else:
            if predicate(seen):
                return seen, time.monotonic() - start
            if seen.untracked:
                # The risk cannot rise: the Workloads do not count toward the deadline.
                raise ScenarioError(f"{what}: it cannot, the project says {seen}")
        if time.monotonic() - start > timeout:
            raise ScenarioError(f"not within {timeout:.0f} s: {what}; last seen: {seen}")
        time.sleep(poll)


# ------------------------------------------------------------------------------ the scenario


def run_scenario(
    client: KubeClient, *, prometheus_url: str | None, step_timeout: float, submit: Submit
) -> Timeline:
    timeline = Timeline()
    documents = scenario_documents(prometheus_url=prometheus_url, now=datetime.now(UTC))
    ensure_namespaces(client, [*policy_namespaces(documents), WORKLOAD_NAMESPACE])
    for doc in documents:
        client.apply(kinds.kind_of(doc), doc, field_manager=GITOPS)

    seen, took = wait_until(
        client,
        "the controller applies the policy at the on-demand floor",
        lambda s: s.on_demand_limit == FLOOR and s.on_demand_quota is not None,
        timeout=step_timeout,
    )
    timeline.note("baseline: on-demand NodePool limit at the floor", seen, took)
    baseline = seen

    submit_jobs(client, submit)
    seen, took = wait_until(
        client,
        f"the deadline risk rises above {RAISE_THRESHOLD}",
        lambda s: s.risk is not None and s.risk > RAISE_THRESHOLD,
        timeout=step_timeout,
    )
    timeline.note(f"{WORKLOADS} {submit} submitted: deadline risk above target", seen, took)

    assert baseline.on_demand_quota is not None
    floor_quota = baseline.on_demand_quota
    seen, took = wait_until(
        client,
        "the on-demand NodePool limit and flavor quota rise",
        lambda s: (s.on_demand_limit or 0) > FLOOR and (s.on_demand_quota or 0) > floor_quota,
        timeout=step_timeout,
    )
    timeline.note("mix moved: on-demand limit and quota raised", seen, took)
    raised = seen

    delete_jobs(client, submit)
    seen, took = wait_until(
        client,
        f"the deadline risk falls below {LOWER_THRESHOLD}",
        lambda s: s.risk is not None and s.risk < LOWER_THRESHOLD,
        timeout=step_timeout,
    )
    timeline.note("workloads done: deadline risk below the lower threshold", seen, took)

    seen, took = wait_until(
        client,
        "the on-demand NodePool limit and quota step back to the floor",
        lambda s: s.on_demand_limit == FLOOR and s.on_demand_quota == floor_quota,
        timeout=step_timeout * 2,
    )
    timeline.note("fell back: on-demand limit and quota at the floor again", seen, took)
    if not ((raised.on_demand_limit or 0) > FLOOR and seen.spot_limit == baseline.spot_limit):
        raise ScenarioError(f"the spot limit did not return: {baseline} -> {seen}")
    return timeline


# ------------------------------------------------------------------------------ local run


@contextlib.contextmanager
def local_environment(log_dir: Path) -> Iterator[tuple[Path, str]]:
    """A real API server with the CRDs, an empty real Prometheus, and the controller as a
    process with leader election; yields the kubeconfig and Prometheus' URL."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with ControlPlane() as plane, PrometheusServer() as prometheus:
        client = KubeClient.from_kubeconfig(str(plane.kubeconfig))
        try:
            load_crds(client, read_crd_set(crd_sources()).documents)
            # The controller's namespace, where the server has namespaces.
            ensure_namespaces(client, [names.DEFAULT_NAMESPACE])
        finally:
            client.close()
        (port,) = free_ports(1)
        options = RunOptions(
            kubeconfig=plane.kubeconfig,
            identity="e2e-0",
            health_port=port,
            lease_duration=5,
            resync_seconds=3,
        )
        log_path = log_dir / "controller.log"
        controller = start_controller(options, log=log_path)
        try:
            yield plane.kubeconfig, prometheus.url
        finally:
            stop_controller(controller.process, timeout=30)
            code = controller.process.returncode
            if code not in (0, -15):
                print(f"controller exited {code}; log: {log_path}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--local", action="store_true", help="start everything on this machine")
    where.add_argument("--kubeconfig", help="run against the cluster of this kubeconfig")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument(
        "--prometheus-url",
        help="Prometheus as the controller in the cluster reaches it (default: the policy's)",
    )
    parser.add_argument(
        "--submit",
        choices=get_args(Submit),
        help="what to submit: Jobs, for Kueue to make the Workloads (default with --kubeconfig), "
        "or Workloads directly (--local: no Kueue runs there)",
    )
    parser.add_argument("--step-timeout", type=float, default=120.0, help="seconds per step")
    parser.add_argument("--json", type=Path, help="write the timeline here")
    parser.add_argument(
        "--log-dir", type=Path, default=Path("out/e2e"), help="controller log (local run)"
    )
    args = parser.parse_args(argv)
    submit: Submit = args.submit or ("workloads" if args.local else "jobs")
    if args.local and submit == "jobs":
        parser.error("--submit jobs needs Kueue, which --local does not run; use --kubeconfig")
    logs.configure(json=False, level="warning")

    with contextlib.ExitStack() as stack:
        if args.local:
            kubeconfig, prometheus_url = stack.enter_context(local_environment(args.log_dir))
            client = KubeClient.from_kubeconfig(str(kubeconfig))
        else:
            prometheus_url = args.prometheus_url
            client = KubeClient.from_kubeconfig(args.kubeconfig, context=args.context)
        stack.callback(client.close)
        try:
            timeline = run_scenario(
                client,
                prometheus_url=prometheus_url,
                step_timeout=args.step_timeout,
                submit=submit,
            )
        except ScenarioError as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
    total = timeline.steps[-1]["at_seconds"] if timeline.steps else 0.0
    print(f"scenario passed in {total:.0f} s: risk rose, the mix moved, and it fell back")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"steps": timeline.steps}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
