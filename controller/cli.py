"""The `quartermaster` command: validate, render and plan policies from Git; run the controller.

`validate` is what a GitOps repository runs in CI before merging a policy change: errors fail
it, warnings (a one-off deadline already past) are printed and do not; `render` shows (or
writes, as one file or one file per object in a directory, for review) the exact Kueue,
Karpenter and KEDA objects a policy produces; `plan` compares them with a live cluster without
writing; `run` is the controller. The policy commands use the bundled example policy when no
`-f` is given, so a newcomer sees real output at once.

Exit codes: 0 success (for `plan`: nothing would change), 1 the policy is invalid, the cluster
cannot be read or the output cannot be written, 2 the command line is wrong (for `plan`:
something would change).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import yaml

from controller import __version__, allocator, collector, logs, names
from controller.api.loader import load_path
from controller.api.policy_set import InvalidPolicyError, PolicySet
from controller.api.semantics import policy_warnings
from controller.capacity import clamped_targets
from controller.examples import EXAMPLE_DIR
from controller.explain import format_explanation, relevant_events
from controller.health import HealthServer
from controller.kube import kinds
from controller.kube.cache import (
    CAPACITY_ERROR_SELECTORS,
    Source,
    controller_sources,
    observed_from,
    read_sources,
)
from controller.kube.client import KubeClient, KubeError, RetryPolicy
from controller.reconcile import learned_store
from controller.reconcile.diff import format_plan
from controller.reconcile.loop import Controller, LoopOptions
from controller.reconcile.reconciler import plan_against_cluster
from controller.reconcile.shortages import shortages_seen
from controller.render.desired import render
from controller.risk import recalibration
from controller.risk.shortage import Shortages
from controller.sim import plots
from controller.sim import run as sim_run
from controller.sim import sweep as sim_sweep
from controller.sim.assign import DEADLINE_FROM, AssignmentRule
from controller.sim.engine import BASELINES
from controller.sim.sweep_grid import GridError
from controller.sim.sweep_progress import progress_for
from controller.sim.trace import BUSIEST_MEASURE, parse_lead_in, parse_window
from controller.webhook import WebhookServer, holder_decide
from controller.yamlio import dump_documents, dump_per_object

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_PLAN_CHANGES = 2


def _policy_path(value: str | None) -> Path:
    return Path(value) if value else EXAMPLE_DIR


def _load(path: Path, err: TextIO) -> PolicySet | None:
    try:
        return load_path(path)
    except InvalidPolicyError as invalid:
        for error in invalid.errors:
            print(error, file=err)
        count = len(invalid.errors)
        print(f"{path}: {count} error{'s' if count != 1 else ''}", file=err)
        return None


def _parse_targets(values: Sequence[str]) -> dict[str, int]:
    targets: dict[str, int] = {}
    for value in values:
        pool, sep, gpus = value.partition("=")
        if not sep or not pool or not gpus.isdigit():
            raise argparse.ArgumentTypeError(
                f"--on-demand {value!r}: expected POOL=GPUS, e.g. a100=32"
            )
        targets[pool] = int(gpus)
    return targets


def _write_atomically(path: Path, text: str) -> None:
    """Replace `path` in one step, so a failed run never leaves half a file for GitOps to sync."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _rendered_by_us(path: Path) -> bool:
    """Whether `path` holds one object an earlier `render -o DIR` wrote (our managed-by label)."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    except (OSError, ValueError, yaml.YAMLError):
        return False
    if len(docs) != 1 or not isinstance(docs[0], dict):
        return False
    labels = (docs[0].get("metadata") or {}).get("labels") or {}
    return isinstance(labels, dict) and labels.get(names.LABEL_MANAGED_BY) == (
        names.MANAGED_BY_VALUE
    )


def _write_directory(directory: Path, files: Mapping[str, str]) -> tuple[int, int]:
    """Write one file per object; remove the files of objects an earlier render wrote that
    this one no longer has, so the directory mirrors the desired set for GitOps. Files that
    are not ours are left alone. Returns (files changed, files removed)."""
    directory.mkdir(parents=True, exist_ok=True)
    changed = 0
    for name, text in files.items():
        target = directory / name
        if target.is_file() and target.read_bytes() == text.encode("utf-8"):
            continue  # unchanged: keep its timestamp for make and for Git
        _write_atomically(target, text)
        changed += 1
    stale = [
        p
        for p in sorted(directory.glob("*.yaml"))
        if p.name not in files and p.is_file() and _rendered_by_us(p)
    ]
    for path in stale:
        path.unlink()
    return changed, len(stale)


def _os_reason(exc: OSError) -> str:
    """Why a write failed, in words: `mkdir` of a path that is a file says "File exists"."""
    if isinstance(exc, FileExistsError | NotADirectoryError) and exc.filename:
        path = Path(exc.filename)
        blocking = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), path)
        return f"{blocking} is a file, not a directory"
    reason = exc.strerror or str(exc)
    if not exc.filename:
        return reason
    where = Path(exc.filename)
    if where.name.startswith("."):  # our temporary file: name the directory it was to go in
        where = where.parent
    return f"{where}: {reason}"


def _is_directory_target(output: str) -> bool:
    return output.endswith(("/", os.sep)) or Path(output).is_dir()


def cmd_validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    path = _policy_path(args.filename)
    policy_set = _load(path, err)
    if policy_set is None:
        return EXIT_INVALID
    warnings = policy_warnings(policy_set, now=args.now())
    for warning in warnings:
        print(warning, file=err)
    pools = len(policy_set.policy.spec.pools)
    count = len(warnings)
    print(
        f"{path}: valid: CapacityPolicy {policy_set.policy.name} "
        f"({len(policy_set.policy.spec.tiers)} tiers, {pools} pools), "
        f"{len(policy_set.projects)} TrainingProjects"
        + (f"; {count} warning{'s' if count != 1 else ''}" if count else ""),
        file=out,
    )
    return EXIT_OK


def cmd_render(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    path = _policy_path(args.filename)
    try:
        targets = _parse_targets(args.on_demand)
    except argparse.ArgumentTypeError as exc:
        print(exc, file=err)
        return EXIT_USAGE
    policy_set = _load(path, err)
    if policy_set is None:
        return EXIT_INVALID
    unknown = sorted(set(targets) - {p.name for p in policy_set.policy.spec.pools})
    if unknown:
        print(f"--on-demand: unknown pool(s) {', '.join(unknown)}", file=err)
        return EXIT_USAGE
    for clamp in clamped_targets(policy_set, targets):
        print(
            f"--on-demand {clamp.pool}={clamp.asked}: rendering {clamp.used} on-demand GPUs "
            f"instead: {clamp.reason}",
            file=err,
        )
    rendered = render(policy_set, on_demand_gpus=targets or None, namespace=args.namespace)
    if args.output in (None, "-"):
        out.write(dump_documents(rendered.objects))
        return EXIT_OK
    mix = ", ".join(
        f"{m.pool} {m.on_demand_gpus} on-demand/{m.spot_gpus} spot" for m in rendered.mix
    )
    target = Path(args.output)
    try:
        if _is_directory_target(args.output):
            files = dump_per_object(rendered.objects)
            changed, removed = _write_directory(target, files)
            summary = (
                f"wrote {len(files)} objects to {target}/, one file each: {changed} written, "
                f"{len(files) - changed} unchanged"
                + (f", {removed} of an earlier render removed" if removed else "")
            )
        else:
            _write_atomically(target, dump_documents(rendered.objects))
            summary = f"wrote {len(rendered.objects)} objects to {target}"
    except OSError as exc:
        print(f"render: cannot write {target}: {_os_reason(exc)}", file=err)
        return EXIT_INVALID
    print(f"{summary} ({mix})", file=err)
    return EXIT_OK


def cmd_plan(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    path = _policy_path(args.filename)
    policy_set = _load(path, err)
    if policy_set is None:
        return EXIT_INVALID
    try:
        client = KubeClient.from_kubeconfig(
            args.kubeconfig, context=args.context, retry=RetryPolicy(max_delay_seconds=10)
        )
        try:
            plan, unserved = plan_against_cluster(client, policy_set, namespace=args.namespace)
        finally:
            client.close()
    except (KubeError, OSError, ValueError) as exc:
        print(f"cannot read the cluster: {exc}", file=err)
        return EXIT_INVALID
    out.write(format_plan(plan, unserved=unserved))
    return EXIT_OK if plan.empty else EXIT_PLAN_CHANGES


def cmd_run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    logs.configure(json={"json": True, "console": False}.get(args.log_format))
    collector.for_a_watch_cache()
    allocator.keep_freed_memory()
    identity = args.identity or f"{socket.gethostname()}-{os.getpid()}"
    try:
        client = KubeClient.from_kubeconfig(args.kubeconfig, context=args.context)
    except KubeError as exc:
        print(f"cannot connect to the cluster: {exc}", file=err)
        return EXIT_INVALID
    renew_deadline = args.lease_duration * 2 / 3
    # Lease renewals must give up well within the renew deadline, not after 30 s of retries.
    lease_client = KubeClient.from_kubeconfig(
        args.kubeconfig,
        context=args.context,
        retry=RetryPolicy(max_delay_seconds=renew_deadline / 2),
    )
    controller = Controller(
        client,
        LoopOptions(
            namespace=args.namespace,
            identity=identity,
            leader_election=args.leader_elect,
            lease_duration_seconds=args.lease_duration,
            renew_deadline_seconds=renew_deadline,
            retry_period_seconds=max(args.lease_duration / 7.5, 0.2),
            resync_seconds=args.resync_seconds,
            min_pass_interval_seconds=args.min_pass_interval,
        ),
        lease_client=lease_client,
    )
    host, _, port = args.health_address.rpartition(":")
    health = HealthServer(
        host or "0.0.0.0",
        int(port),
        healthz=controller.healthy,
        readyz=controller.ready,
        extra={"/metrics": controller.metrics.render},
    )
    health.start()
    webhook: WebhookServer | None = None
    if args.webhook_cert_dir is not None:
        host, _, port = args.webhook_address.rpartition(":")
        webhook = WebhookServer(
            host or "0.0.0.0",
            int(port),
            decide=holder_decide(controller.lanes),
            cert_dir=Path(args.webhook_cert_dir),
        )
        webhook.start()

    def on_signal(signum: int, _frame: object) -> None:
        controller.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        controller.run()
    finally:
        health.stop()
        if webhook is not None:
            webhook.stop()
        client.close()
        lease_client.close()
    return EXIT_OK


def cmd_explain(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        client = KubeClient.from_kubeconfig(
            args.kubeconfig, context=args.context, retry=RetryPolicy(max_delay_seconds=10)
        )
        try:
            project = client.get(kinds.TRAINING_PROJECT, args.project)
            if project is None:
                print(f"TrainingProject {args.project!r} not found", file=err)
                return EXIT_INVALID
            policies_from = Source(kinds.CAPACITY_POLICY)
            events_from = Source(kinds.EVENT, namespace=args.events_namespace)
            read = read_sources(client, (policies_from, events_from))
            policy = read[policies_from][0] if read[policies_from] else None
            events = read[events_from]
            workloads = project_workloads_read(client, project)
            shortages = shortages_read(client, policy, now=args.now().timestamp())
        finally:
            client.close()
    except (KubeError, OSError, ValueError) as exc:
        print(f"cannot read the cluster: {exc}", file=err)
        return EXIT_INVALID
    policy_name = policy["metadata"]["name"] if policy else None
    out.write(
        format_explanation(
            project,
            policy,
            relevant_events(events, args.project, policy_name),
            workloads,
            shortages,
        )
    )
    return EXIT_OK


def shortages_read(
    client: KubeClient, policy: dict[str, Any] | None, *, now: float
) -> tuple[Shortages, float] | None:
    """The spot shortages Karpenter's capacity errors show now, rebuilt from the cluster's
    Events and NodeClaims as a restarted controller rebuilds them; None without a policy."""
    if policy is None:
        return None
    served = frozenset(client.served_group_versions())
    sources = [
        s
        for s in controller_sources(names.DEFAULT_NAMESPACE)
        if s.kind in (kinds.NODE_CLAIM, *CAPACITY_ERROR_SELECTORS)
        and s.kind.group_version in served
    ]
    observed = observed_from(served, read_sources(client, sources))
    pools = {
        str(p.get("name")): [str(z) for z in p.get("zones") or []]
        for p in (policy.get("spec") or {}).get("pools") or []
        if isinstance(p, dict)
    }
    return shortages_seen(observed, pools, Shortages(), now=now), now


def project_workloads_read(client: KubeClient, project: dict[str, Any]) -> list[dict[str, Any]]:
    """The Workloads of the project's namespaces, for its lanes; none where Kueue's Workloads
    are not served (the rest of the explanation stands without them)."""
    out: list[dict[str, Any]] = []
    for namespace in (project.get("spec") or {}).get("namespaces") or []:
        try:
            items, _ = client.list(kinds.WORKLOAD, namespace=str(namespace), page_size=500)
        except KubeError as exc:
            if exc.not_found:
                return out
            raise
        out.extend(items)
    return out


def _non_negative_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not (math.isfinite(seconds) and seconds >= 0):
        raise argparse.ArgumentTypeError(
            f"invalid seconds {value!r}: expected a finite number >= 0"
        )
    return seconds


def _seed(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"invalid seed {value!r}: expected an integer >= 0")
    return int(value)


def _declared_sigma(value: str) -> float:
    try:
        sigma = float(value)
    except ValueError:
        sigma = math.nan
    if not (math.isfinite(sigma) and sigma >= 0):
        raise argparse.ArgumentTypeError(
            f"invalid declared sigma {value!r}: expected a finite number >= 0"
        )
    return sigma


def _jobs(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"invalid jobs {value!r}: expected an integer >= 1")
    return int(value)


def judged_read(document: Any) -> list[recalibration.Judged]:
    """Judged estimates from a document: a list of them, an outcome ledger's summary, what the
    controller learned (`OutcomeLearning.summary()`), or the ConfigMap it keeps that in.
    Raises ValueError for anything else."""
    if isinstance(document, Mapping) and document.get("kind") == kinds.CONFIG_MAP.kind:
        document = learned_store.read_config_map(document)
    if isinstance(document, Mapping) and isinstance(document.get("ledger"), Mapping):
        document = document["ledger"]
    return recalibration.judged_from_document(document)


def learned_read(args: argparse.Namespace) -> dict[str, Any]:
    """The ConfigMap in which the controller keeps what it learned, from the live cluster.
    Raises LookupError when there is none."""
    client = KubeClient.from_kubeconfig(
        args.kubeconfig, context=args.context, retry=RetryPolicy(max_delay_seconds=10)
    )
    try:
        found = client.get(kinds.CONFIG_MAP, names.LEARNED_STATE_NAME, args.namespace)
    finally:
        client.close()
    if found is None:
        raise LookupError(
            f"no ConfigMap {args.namespace}/{names.LEARNED_STATE_NAME}: the controller writes "
            "it once it judged or learned something, where the API server serves ConfigMaps "
            "(elsewhere it keeps what it learns in memory; the dashboard's Calibration row "
            "reads the same judgements from its metrics)"
        )
    return found


def cmd_calibration(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """How good the deadline risks were: see controller.risk.recalibration.format_report."""
    if args.source is None:
        try:
            judged = judged_read(learned_read(args))
        except (KubeError, OSError, LookupError) as exc:
            print(f"calibration: cannot read the cluster: {exc}", file=err)
            return EXIT_INVALID
        except ValueError as exc:
            print(f"calibration: {names.LEARNED_STATE_NAME}: {exc}", file=err)
            return EXIT_INVALID
    else:
        try:
            with open(args.source, encoding="utf-8") as file:
                judged = judged_read(json.load(file))
        except (OSError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
            print(f"calibration: {args.source}: {exc}", file=err)
            return EXIT_INVALID
    until = args.now().timestamp()
    out.write(recalibration.format_report(judged, since=until - args.days * 86_400, until=until))
    return EXIT_OK


def _days(value: str) -> float:
    try:
        days = float(value)
    except ValueError:
        days = math.nan
    if not (math.isfinite(days) and days > 0):
        raise argparse.ArgumentTypeError(f"invalid days {value!r}: expected a number > 0")
    return days


def cmd_simulate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Replay a trace through the policy and the baselines; see controller.sim.run."""
    try:
        if args.window:
            parse_window(args.window)
        lead_in = parse_lead_in(args.lead_in) if args.lead_in else 0.0
        if lead_in and not args.window:
            raise ValueError(
                f"--lead-in {args.lead_in}: needs --window (a whole trace has nothing before it)"
            )
        baselines = sim_run.parse_baselines(args.baselines)
    except ValueError as exc:
        print(f"simulate: {exc}", file=err)
        return EXIT_USAGE
    try:
        trace = sim_run.resolve_trace(args.trace)
    except FileNotFoundError as exc:
        print(f"simulate: {exc}", file=err)
        return EXIT_INVALID
    policy_set = None
    if args.policy:
        policy_set = _load(Path(args.policy), err)
        if policy_set is None:
            return EXIT_INVALID
    try:
        sim_run.simulate(
            trace,
            out_dir=Path(args.out),
            seed=args.seed,
            window=args.window,
            baselines=baselines,
            policy_set=policy_set,
            policy_source=args.policy,
            out=out,
            err=err,
            jobs=args.jobs,
            lead_in=lead_in,
            declared_sigma=args.declared_sigma,
            deadline_from=args.deadlines_from,
        )
    except (OSError, ValueError) as exc:
        print(f"simulate: {exc}", file=err)
        return EXIT_INVALID
    return EXIT_OK


def cmd_sweep(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Many simulations over a grid of traces, seeds and policy settings; see
    controller.sim.sweep. A refused grid exits 2, like a wrong command line; a failed cell 1."""
    allocator.keep_freed_memory()  # cells run here when there is one worker
    executor: sim_sweep.Executor = sim_sweep.LocalExecutor(jobs=args.jobs)
    if args.ray is not None:
        # Imported only when asked for: Ray is an optional extra.
        from controller.sim import sweep_ray  # noqa: PLC0415

        executor = sweep_ray.RayExecutor(args.ray, jobs=args.jobs)
    try:
        result = sim_sweep.run_sweep(
            Path(args.grid),
            out_dir=Path(args.out),
            executor=executor,
            progress=progress_for(err),
            out=out,
        )
    except GridError as invalid:
        for error in invalid.errors:
            print(f"sweep: {args.grid}: {error}", file=err)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(
            f"sweep: interrupted; the finished cells are in {Path(args.out) / sim_sweep.CELLS_DIR}"
            ": the same command goes on from there",
            file=err,
        )
        return 130
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"sweep: {exc}", file=err)
        return EXIT_INVALID
    return EXIT_INVALID if result.failed else EXIT_OK


def add_sweep_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """`quartermaster sweep` (apart, so that `build_parser` stays readable)."""
    sweep = commands.add_parser(
        "sweep",
        help="many simulations over a grid of traces, seeds and policy settings; one table",
        description="Run `simulate` for every cell of a grid (traces and windows x policy "
        "settings x seeds) and write sweep.json, sweep.md and plots (the policy's cost against "
        "misses beside the baselines' frontier; a heat map per pair of swept settings). Cells "
        "already finished in --out are not run again, so an interrupted sweep goes on where it "
        "stopped. Exits 1 if any cell failed, 2 if the grid is refused. The plots need "
        "matplotlib" + ("" if plots.available() else ", which is not installed here") + f": "
        f"{plots.INSTALL_HINT}.",
    )
    sweep.add_argument(
        "--grid",
        required=True,
        metavar="FILE",
        help="the grid (YAML): traces, windows, seeds, baselines, policy, overrides (policy "
        "field path -> values, e.g. risk.raiseThreshold: [0.1, 0.2]); see the simulator docs",
    )
    sweep.add_argument(
        "--out",
        default=str(sim_sweep.DEFAULT_OUT),
        metavar="DIR",
        help="where sweep.json, sweep.md, the plots and cells/ (one file per finished cell) go "
        "(default %(default)s)",
    )
    sweep.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the cells as Ray tasks: auto (a running Ray, else a new local one) or a "
        "cluster's address; needs the `ray` extra, pip install 'quartermaster[ray]' (default: "
        "local worker processes)",
    )
    sweep.add_argument(
        "--jobs",
        type=_jobs,
        metavar="N",
        help="run at most N cells at once (default: one per core locally, the cluster's CPUs "
        "with Ray); locally, 1 runs them one after another in this process",
    )
    sweep.set_defaults(handler=cmd_sweep)


def add_explain_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """`quartermaster explain PROJECT` (apart, so that `build_parser` stays readable)."""
    explain = commands.add_parser(
        "explain", help="a project's deadline risks and the decisions behind its mix"
    )
    explain.add_argument("project", help="TrainingProject name")
    explain.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube)")
    explain.add_argument("--context", help="kubeconfig context")
    explain.add_argument(
        "--events-namespace",
        default="default",
        help="where Events about cluster-scoped objects live (default %(default)s)",
    )
    explain.set_defaults(handler=cmd_explain)


def add_calibration_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """`quartermaster calibration` (apart, so that `build_parser` stays readable)."""
    calibration = commands.add_parser(
        "calibration",
        help="how good the deadline risks were: reliability table, Brier score, judged count",
        description="The reliability table per tier, Brier score and number of judged "
        "deadlines over the last N days, of the estimates the controller judged on the live "
        "cluster (the ConfigMap it keeps what it learned in), or of a JSON file: a list of "
        "{deadline, tier, risk, at, missed, resolvedAt}, an outcome ledger's summary, or that "
        "ConfigMap (kubectl get -o json).",
    )
    calibration.add_argument(
        "--from",
        dest="source",
        metavar="FILE",
        help="JSON file of judged estimates (default: read the live cluster)",
    )
    calibration.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube)"
    )
    calibration.add_argument("--context", help="kubeconfig context")
    calibration.add_argument(
        "--namespace",
        default=names.DEFAULT_NAMESPACE,
        help="the controller's namespace (default %(default)s)",
    )
    calibration.add_argument(
        "--days", type=_days, default=7.0, help="deadlines resolved in the last N days (7)"
    )
    calibration.set_defaults(handler=cmd_calibration)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="quartermaster",
        description="Deadline-aware GPU capacity for Kueue, Karpenter and KEDA.",
    )
    parser.add_argument("--version", action="version", version=f"quartermaster {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def policy_argument(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "-f",
            "--filename",
            metavar="PATH",
            help="policy directory or file (default: the bundled example policy)",
        )

    validate = commands.add_parser("validate", help="check a policy; one line per error")
    policy_argument(validate)
    validate.set_defaults(handler=cmd_validate)

    render_cmd = commands.add_parser("render", help="print the objects a policy produces")
    policy_argument(render_cmd)
    render_cmd.add_argument(
        "-o",
        "--output",
        metavar="FILE|DIR/",
        help="write YAML to FILE (default -), or one file per object into a directory",
    )
    render_cmd.add_argument(
        "--namespace",
        default=names.DEFAULT_NAMESPACE,
        help="namespace of the warm-pool objects (default %(default)s)",
    )
    render_cmd.add_argument(
        "--on-demand",
        action="append",
        default=[],
        metavar="POOL=GPUS",
        help="render for this on-demand target instead of the pool's floor (repeatable)",
    )
    render_cmd.set_defaults(handler=cmd_render)

    def cluster_arguments(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then ~/.kube)")
        sub.add_argument("--context", help="kubeconfig context")
        sub.add_argument(
            "--namespace",
            default=names.DEFAULT_NAMESPACE,
            help="the controller's namespace: warm pools, Lease (default %(default)s)",
        )

    plan = commands.add_parser(
        "plan", help="diff the policy against a live cluster; exit 0 in sync, 2 if not"
    )
    policy_argument(plan)
    cluster_arguments(plan)
    plan.set_defaults(handler=cmd_plan)

    add_explain_command(commands)

    add_calibration_command(commands)

    run = commands.add_parser("run", help="run the controller")
    cluster_arguments(run)
    run.add_argument("--identity", help="leader-election identity (default host-pid)")
    run.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="hold a Lease so only one replica writes (default on)",
    )
    run.add_argument(
        "--lease-duration", type=float, default=15.0, help="seconds (default %(default)s)"
    )
    run.add_argument(
        "--resync-seconds",
        type=float,
        default=LoopOptions.resync_seconds,
        help="full resync period (default %(default)g)",
    )
    run.add_argument(
        "--min-pass-interval",
        type=_non_negative_seconds,
        default=LoopOptions.min_pass_interval_seconds,
        metavar="SECONDS",
        help="least time from the start of one reconcile pass to the next, so churn (Workloads "
        "changing all the time) costs at most 60/SECONDS passes a minute (default %(default)s)",
    )
    run.add_argument(
        "--health-address",
        default=":8080",
        help="host:port of /healthz, /readyz and /metrics (default :8080)",
    )
    run.add_argument(
        "--webhook-cert-dir",
        metavar="DIR",
        help="serve the lanes webhook (a mutating admission webhook on Workload CREATE, "
        "/mutate-workload-lanes) over HTTPS with DIR/tls.crt and DIR/tls.key, as a "
        "kubernetes.io/tls Secret mounts them; off unless given",
    )
    run.add_argument(
        "--webhook-address",
        default=":9443",
        help="host:port of the lanes webhook (default %(default)s)",
    )
    run.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        default="auto",
        help="auto: JSON unless stderr is a terminal",
    )
    run.set_defaults(handler=cmd_run)

    simulate = commands.add_parser(
        "simulate",
        help="replay a job trace through the policy and baselines; write a summary",
        description="Replay a job trace through the policy and the baselines; print the "
        "figures and write summary.json, summary.md and plots. The plots need matplotlib"
        + ("" if plots.available() else ", which is not installed here")
        + f": {plots.INSTALL_HINT}.",
    )
    simulate.add_argument(
        "--trace",
        required=True,
        metavar="FILE",
        help="trace CSV (gzip or plain); a bare name is also looked up in "
        f"${sim_run.TRACES_ENV}, else the checkout's third_party/traces",
    )
    simulate.add_argument(
        "--policy",
        metavar="DIR",
        help="policy directory or file (default: a policy sized to the trace)",
    )
    simulate.add_argument(
        "--out",
        default=str(sim_run.DEFAULT_OUT),
        metavar="DIR",
        help="where summary.json, summary.md and the plots go (default %(default)s); plots "
        "need matplotlib, the `sim` extra",
    )
    simulate.add_argument(
        "--seed", type=_seed, default=0, help="seeds the assignment and every run (default 0)"
    )
    simulate.add_argument(
        "--window",
        metavar="START:END",
        help="replay only jobs submitted in START:END (e.g. 56d:70d), or busiestNd: the N whole "
        f"days with the most {BUSIEST_MEASURE}; Philly's busiest14d is days 61-74, 28,479 "
        "jobs",
    )
    simulate.add_argument(
        "--lead-in",
        metavar="TIME",
        help="with --window: also replay the jobs submitted in this time before the window "
        "(e.g. 14d), first, so that the window starts on a running cluster, not an empty one; "
        "only the window's jobs are scored, and costs, mix changes and estimates count from "
        "its start (default none)",
    )
    simulate.add_argument(
        "--declared-sigma",
        type=_declared_sigma,
        default=AssignmentRule.expected_sigma,
        metavar="S",
        help="how far the runtimes jobs declare stray from their true ones: each declares its "
        "true runtime x exp(S z), z standard normal (default %(default)s; 0 declares them "
        "exactly)",
    )
    simulate.add_argument(
        "--deadlines-from",
        choices=DEADLINE_FROM,
        default=AssignmentRule.deadline_from,
        help="which runtime a job's deadline is set from, times its slack: the true one "
        "(every deadline then leaves room for the job's whole run, which the declared runtime "
        "does not tell) or the declared one, as a submitter would (default %(default)s)",
    )
    simulate.add_argument(
        "--baselines",
        default="all",
        metavar="LIST",
        help="comma-separated baselines to compare: "
        + ", ".join(BASELINES)
        + ", static:F (a fixed on-demand fraction F in [0, 1]), reactive:T (one node more "
        "on-demand while pending GPUs exceed the share T of the pool); all (the four named), "
        "or none alone; and the policy's ablations policy-fifo (no deadline order), "
        "policy-no-lanes (no lanes) and policy-raw (the mix decided on the raw risk). A bare "
        "number continues the kind before it: "
        "static:0.1,0.3,0.5. Every baseline is a point on frontier.png (default all)",
    )
    simulate.add_argument(
        "--jobs",
        type=_jobs,
        metavar="N",
        help="replay the runs in N worker processes (default: one per core, at most one per "
        "run); 1 replays them one after another in this process, with a progress bar",
    )
    simulate.set_defaults(handler=cmd_simulate)
    add_sweep_command(commands)
    return parser


def _utc_now() -> datetime:
    return datetime.now(UTC)


def main(
    argv: Sequence[str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    *,
    now: Callable[[], datetime] = _utc_now,
) -> int:
    """`now` is the clock `validate` judges deadlines by (tests pass a fixed one)."""
    args = build_parser().parse_args(argv)
    args.now = now
    if args.command != "run":
        # Retries and warnings go to standard error: `plan` output is for scripts to read.
        logs.configure(json=False, level="warning")
    code: int = args.handler(args, out or sys.stdout, err or sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
