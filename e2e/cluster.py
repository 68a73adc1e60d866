"""`make cluster`: a local cluster to try Quartermaster on, running until Ctrl-C.

What `kind create cluster` or `tilt up` give elsewhere, on a machine without Docker. One
command starts:

1. etcd and the API server on loopback (`testenv/controlplane.py`), with the pinned
   upstream Kueue, KEDA, Karpenter and Prometheus Operator CRDs, ours, and stand-ins for Lease,
   Event and PriorityClass, as the demo and the tests load them;
2. a real Prometheus scraping the controller;
3. the bundled example policy, applied with kubectl's field manager and pointed at that
   Prometheus (unless `--no-example`); the applied files are written to `<state>/policy/`, and
   the demo's Workloads to `<state>/workloads.yaml`, to edit and apply;
4. the controller, `quartermaster run`, as its own process with leader election, as the
   Deployment runs it, until it is ready;

then prints the `export KUBECONFIG=...` line and waits. Ctrl-C (or SIGTERM) stops the
controller, Prometheus and the control plane, in that order; every server also dies with this
process if it is killed. `<state>` (default `out/cluster`) holds the kubeconfig, the logs, and
`cluster.json` (addresses and PIDs, for scripts); the next start empties it.

Run: `.venv/bin/python -m e2e.cluster [--state-dir DIR] [--no-example]`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller import logs, names
from controller.examples import EXAMPLE_DIR
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from controller.yamlio import dump_documents
from e2e.demo import (
    DemoError,
    Interrupted,
    deadline_names,
    example_documents,
    example_workloads,
    ignore_signals,
    signals_raise,
    with_prometheus,
    write_policy,
)
from testenv.controller_process import (
    ControllerExitedError,
    ControllerNotReadyError,
    RunOptions,
    start_controller,
    stop_controller,
    wait_ready,
)
from testenv.controlplane import (
    ControlPlane,
    ControlPlaneError,
    cache_dir,
    find_binaries,
    free_ports,
    kubectl_path,
)
from testenv.crds import CrdSourceError, crd_sources, load_crds, read_crd_set
from testenv.namespaces import ensure_namespaces, policy_namespaces
from testenv.processes import pid_gone
from testenv.prometheus import PrometheusError, PrometheusServer, ScrapeTarget

DEFAULT_STATE = Path("out/cluster")
FIELD_MANAGER = "kubectl"
"""The example is applied as `kubectl apply --server-side` applies, so the user's own
`kubectl apply --server-side -f <state>/policy/` owns the same fields and never conflicts."""
SCRAPE_SECONDS = 5.0
READY_TIMEOUT_SECONDS = 120.0
STOP_TIMEOUT_SECONDS = 30.0
STATE_FILE = "cluster.json"


class ClusterError(RuntimeError):
    """The cluster cannot start or keep running; the message says why and where to look."""


@dataclass
class Cluster:
    state: Path
    apply_example: bool
    plane: ControlPlane | None = None
    prometheus: PrometheusServer | None = None
    controller: subprocess.Popen[bytes] | None = None
    metrics_port: int = field(default_factory=lambda: free_ports(1)[0])
    crd_counts: dict[str, int] = field(default_factory=dict)

    @property
    def controller_log(self) -> Path:
        return self.state / "controller.log"

    # ------------------------------------------------------------------------ start
    def start(self) -> None:
        prepare_state_dir(self.state)
        self.write_state_file()
        sources = crd_sources()  # fail before starting anything when CRDs are missing
        # Parsing the CRDs takes seconds: do it while the servers start.
        reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-crds")
        parsed = reader.submit(read_crd_set, sources)
        reader.shutdown(wait=False)
        binaries = find_binaries()
        self.plane = ControlPlane(binaries, state_dir=self.state)
        try:
            self.plane.start()
        finally:
            self.write_state_file()
        say(f"API server ready: {self.plane.server}")
        target = ScrapeTarget(f"127.0.0.1:{self.metrics_port}")
        self.prometheus = PrometheusServer(
            [target], scrape_interval=SCRAPE_SECONDS, state_dir=self.state / "prometheus"
        )
        try:
            self.prometheus.start()
        finally:
            self.write_state_file()
        say(f"Prometheus ready: {self.prometheus.url}")
        crds = parsed.result()
        client = KubeClient.from_kubeconfig(str(self.plane.kubeconfig))
        try:
            load_crds(client, crds.documents)
            # The controller's namespace, where the server has namespaces (a kube-apiserver).
            ensure_namespaces(client, [names.DEFAULT_NAMESPACE])
            self.crd_counts = crds.counts
            say(f"CRDs established: {len(crds.documents)}")
            if self.apply_example:
                self.apply_example_policy(client, self.prometheus.url)
        finally:
            client.close()
        self.start_controller(self.plane.kubeconfig)

    def apply_example_policy(self, client: KubeClient, prometheus_url: str) -> None:
        documents = with_prometheus(example_documents(), prometheus_url)
        write_policy(
            documents,
            self.state / "policy",
            note=(
                f"The bundled example policy ({EXAMPLE_DIR}) as `make cluster` applied it, with\n"
                "spec.prometheus.url pointing at its Prometheus. Edit it, see the difference with\n"
                "`quartermaster plan -f` and apply it with `kubectl apply --server-side -f`."
            ),
        )
        workloads = example_workloads(deadline_names(documents))
        (self.state / "workloads.yaml").write_text(
            "# Kueue Workloads as `make demo` queues them; `kubectl apply -f` this file.\n"
            + dump_documents(workloads)
        )
        ensure_namespaces(client, policy_namespaces(documents))
        for doc in documents:
            client.apply(kinds.kind_of(doc), doc, field_manager=FIELD_MANAGER)
        say(f"example policy applied: {len(documents)} objects")

    def start_controller(self, kubeconfig: Path) -> None:
        options = RunOptions(
            kubeconfig=kubeconfig,
            identity="local-0",
            health_port=self.metrics_port,
            resync_seconds=30,
            log_format="console",
        )
        started = start_controller(options, log=self.controller_log, append=True)
        self.controller = started.process
        self.write_state_file()
        try:
            # Ready is any 200: a synced standby, or the leader once its first pass returned.
            wait_ready(started, timeout=READY_TIMEOUT_SECONDS, body=None)
        except ControllerExitedError as error:
            raise ClusterError(
                f"{error} before it was ready; log: {self.controller_log}\n"
                f"{tail(self.controller_log)}"
            ) from error
        except ControllerNotReadyError as error:
            raise ClusterError(
                f"the controller was not ready after {READY_TIMEOUT_SECONDS:.0f} s; "
                f"log: {self.controller_log}\n{tail(self.controller_log)}"
            ) from error
        say(f"controller ready: pid {self.controller.pid}")

    def pids(self) -> dict[str, int]:
        pids = dict(self.plane.pids) if self.plane is not None else {}
        if self.prometheus is not None and self.prometheus.pid is not None:
            pids["prometheus"] = self.prometheus.pid
        if self.controller is not None and self.controller.poll() is None:
            pids["controller"] = self.controller.pid
        return pids

    def write_state_file(self) -> None:
        """What runs, for scripts and for the next start's check; rewritten as servers start,
        so even a start that failed half-way leaves it."""
        info: dict[str, Any] = {
            "kubeconfig": str(self.plane.kubeconfig) if self.plane else None,
            "server": self.plane.server if self.plane else None,
            "prometheus": self.prometheus.url if self.prometheus else None,
            "metrics": f"http://127.0.0.1:{self.metrics_port}/metrics",
            "controller_log": str(self.controller_log),
            "policy": str(self.state / "policy") if self.apply_example else None,
            "pids": self.pids(),
        }
        (self.state / STATE_FILE).write_text(json.dumps(info, indent=2) + "\n")

    # ------------------------------------------------------------------------ run
    def watch(self) -> None:
        """Until interrupted; a ClusterError when a server stops on its own."""
        while True:
            if self.controller is not None and self.controller.poll() is not None:
                raise ClusterError(
                    f"the controller exited with {self.controller.returncode}; "
                    f"log: {self.controller_log}\n{tail(self.controller_log)}"
                )
            if self.plane is not None and not self.plane.apiserver_running:
                raise ClusterError(f"the API server stopped; log: {self.plane.state}/apiserver.log")
            if self.prometheus is not None and not self.prometheus.running:
                raise ClusterError(f"Prometheus stopped; log: {self.prometheus.log_file}")
            time.sleep(1)

    # ------------------------------------------------------------------------ stop
    def stop(self) -> None:
        ignore_signals()  # a second Ctrl-C must not leave servers running
        if self.controller is not None:
            stop_controller(self.controller, timeout=STOP_TIMEOUT_SECONDS)  # it releases its Lease
        if self.prometheus is not None:
            self.prometheus.close()
        if self.plane is not None:
            self.plane.stop()


STARTED = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:5.1f}s] {message}", flush=True)


def shown(path: Path) -> str:
    """`path` relative to the working directory when it is below it: shorter to read."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def tail(path: Path, lines: int = 20) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def prepare_state_dir(state: Path) -> None:
    """Empty `state` for a new cluster, refusing a directory that is not one of ours or whose
    cluster still runs."""
    if state.exists() and any(state.iterdir()):
        info_file = state / STATE_FILE
        if not info_file.is_file():
            raise ClusterError(
                f"{state} is not empty and holds no {STATE_FILE}: not a cluster state directory; "
                "choose another with --state-dir"
            )
        try:
            pids = json.loads(info_file.read_text()).get("pids", {})
        except ValueError:
            pids = {}
        alive = {name: pid for name, pid in pids.items() if not pid_gone(int(pid))}
        if alive:
            raise ClusterError(
                f"a cluster from {state} still runs ({alive}): stop it with Ctrl-C first"
            )
        shutil.rmtree(state)
    state.mkdir(parents=True, exist_ok=True)


def kubectl_hint() -> str:
    """Where kubectl comes from here, or how to do without."""
    kubectl = kubectl_path()
    if kubectl is None:
        return (
            "  # no kubectl here: `quartermaster plan` and `quartermaster explain` read the "
            "cluster,\n  # and any kubectl works against it"
        )
    on_path = shutil.which("kubectl")
    if on_path is None or Path(on_path).resolve() != kubectl.resolve():
        # None on PATH, or another release: the build's is the server's own.
        return f"  export PATH={kubectl.parent}:$PATH   # kubectl of the server's release"
    return f"  # kubectl: {kubectl}"


def banner(cluster: Cluster, seconds: float) -> str:
    assert cluster.plane is not None and cluster.prometheus is not None
    kubeconfig = cluster.plane.kubeconfig.resolve()
    counts = ", ".join(f"{label} {n}" for label, n in cluster.crd_counts.items())
    quartermaster = Path(sys.executable).parent / "quartermaster"
    qm = quartermaster if quartermaster.exists() else Path("quartermaster")
    controller = cluster.controller.pid if cluster.controller else "-"
    policy = shown(cluster.state / "policy")
    lines = [
        "",
        f"Local cluster ready in {seconds:.1f} s (kubeconfig, logs, policy in "
        f"{shown(cluster.state)}):",
        f"  API server  {cluster.plane.server}  (etcd and the CRD API server: custom resources "
        "only, no Pods)",
        f"  CRDs        {sum(cluster.crd_counts.values())}: {counts}",
        f"  Prometheus  {cluster.prometheus.url}  (scrapes the controller every "
        f"{SCRAPE_SECONDS:.0f} s)",
        f"  controller  quartermaster run, pid {controller}: "
        f"http://127.0.0.1:{cluster.metrics_port}/metrics, log {shown(cluster.controller_log)}",
    ]
    if cluster.apply_example:
        lines.append(
            f"  policy      the bundled example, applied as {policy}/ "
            "(spec.prometheus.url is the Prometheus above)"
        )
    else:
        lines.append("  policy      none (--no-example): apply your own")
    lines += [
        "",
        "In another terminal:",
        f"  export KUBECONFIG={kubeconfig}",
        kubectl_hint(),
        "  kubectl get cpol,tproj",
    ]
    if cluster.apply_example:
        lines += [
            f"  {shown(qm)} plan -f {policy}",
            f"  {shown(qm)} explain llm-pretrain",
            f"  kubectl apply -f {shown(cluster.state / 'workloads.yaml')}",
        ]
    lines += ["", "Ctrl-C stops everything.", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.cluster",
        description="A local cluster with Quartermaster running, until Ctrl-C.",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE,
        help="kubeconfig, logs, applied policy; emptied at start (default %(default)s)",
    )
    parser.add_argument(
        "--no-example", action="store_true", help="do not apply the bundled example policy"
    )
    args = parser.parse_args(argv)
    logs.configure(json=False, level="warning")  # the controller's own logs go to its file
    # Absolute: the kubeconfig names its certificates by path.
    cluster = Cluster(state=args.state_dir.resolve(), apply_example=not args.no_example)
    say(
        f"Starting a local cluster in {args.state_dir}: etcd and the API server with the CRDs, "
        "Prometheus, the example policy and the controller (binaries from "
        f"{cache_dir().parent.parent})"
    )
    started = time.monotonic()
    code = 0
    try:
        with signals_raise():
            try:
                cluster.start()
                print(banner(cluster, time.monotonic() - started), flush=True)
                cluster.watch()
            finally:
                say("stopping: the controller, Prometheus, the control plane")
                cluster.stop()
    except Interrupted:
        say(f"stopped; logs are kept in {args.state_dir}")
    except (
        ClusterError,
        DemoError,
        CrdSourceError,
        ControlPlaneError,
        PrometheusError,
        KubeError,
        OSError,
    ) as error:
        print(f"cluster failed: {error}", file=sys.stderr, flush=True)
        code = 1
    return code


if __name__ == "__main__":
    raise SystemExit(main())
