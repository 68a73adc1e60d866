"""`quartermaster simulate`: load a trace, assign its jobs, replay the policy and the baselines,
and write what they did.

The steps are separate functions (`prepare`, `run_replays`, `write_outputs`, and `simulate`
doing all three) so the benchmark and the tests drive the same code the command does without
a subprocess. Every run of one simulation replays the same assigned jobs with the same seed:
the runs differ only in how the mix is set, which is the comparison the summary makes.

What a run prints and writes is split by whether it can be reproduced: summary.json holds only
what the inputs and the seed decide (byte for byte), while wall times and memory, which vary
from run to run, go to the terminal and summary.md.

Runs are independent, so they replay in parallel worker processes, one per core up to one per
run (`jobs` caps it; 1 replays them one after the other in this process, with a progress bar
on a terminal). Workers are spawned, not forked: each starts clean, imports only what a replay
needs (never matplotlib, which only the parent's plots use), and is sent the policy and the
jobs once, when it starts; it returns each run's result whole (its outcomes and estimates as
column tables, `controller.sim.tables`, so that the parent holding seventeen runs of the
whole Philly trace needs a fraction of a gigabyte, not two) and the run's figures, made where
the outcomes are. A run's result depends on its inputs and seed alone, so summary.json is the
same byte for byte whatever the number of workers.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import re
import resource
import sys
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from controller.allocator import keep_freed_memory
from controller.api.policy_set import PolicySet
from controller.collector import for_a_replay_worker
from controller.sim import plots
from controller.sim.assign import AssignmentRule, assign_jobs
from controller.sim.engine import BASELINES, POLICY, RunSpec, parse_run, replay
from controller.sim.model import RunResult, SimJob
from controller.sim.report import (
    Measurement,
    RunFigures,
    relative_costs,
    render_json,
    render_markdown,
    run_figures,
    summary_document,
    terminal_summary,
)
from controller.sim.scenario import Demand, default_policy_set, measure_demand
from controller.sim.sizing import policy_capacity, size_warnings
from controller.sim.trace import (
    DAY,
    Trace,
    describe_window,
    load_trace,
    no_usable_job,
    parse_window,
)

DEFAULT_OUT = Path("sim-out")
TRACES_ENV = "QUARTERMASTER_TRACES"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
DEFAULT_POLICY_SOURCE = "default: controller.sim.scenario.default_policy_set, sized to the trace"
_REPO_ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- inputs


def traces_dir() -> Path:
    """Where traces are looked for by name: $QUARTERMASTER_TRACES, else the checkout's
    `third_party/traces` (the installed package carries no traces: 0.9 MB of data a cluster
    never reads)."""
    configured = os.environ.get(TRACES_ENV)
    return Path(configured) if configured else _REPO_ROOT / "third_party" / "traces"


def resolve_trace(text: str) -> Path:
    """The trace file `text` names: a path as given, else a file of that name in `traces_dir()`,
    so `--trace philly.csv.gz` works from anywhere. Raises FileNotFoundError naming both."""
    given = Path(text)
    if given.is_file():
        return given
    named = traces_dir() / text
    if not given.is_absolute() and named.is_file():
        return named
    raise FileNotFoundError(f"trace {text!r}: no such file (also looked for {named})")


_NUMBER = re.compile(r"^[0-9]*\.?[0-9]+$")
_PARAMETRIC_KINDS = ("static", "reactive")


def parse_baselines(text: str) -> tuple[str, ...]:
    """The baselines a comma-separated list names, each as the text that names its run.

    Items: a name from `engine.BASELINES`, `static:F` (a fixed on-demand fraction F in
    [0, 1]) or `reactive:T` (step on-demand up while pending GPUs exceed the share T of the
    pool), as `engine.parse_run` reads them; `all` for the four named baselines (alone or
    among others); `none` alone for none. A bare number continues the kind before it, so
    `static:0.1,0.3,0.5` is three static runs (named `static:0.1`, `static:0.3`,
    `static:0.5`). Order is kept (it is the order of the runs and of the summary's rows);
    repeats are dropped. Raises ValueError naming the item and what was expected.
    """
    words = [w.strip() for w in text.split(",")]
    if [w for w in words if w] == ["none"]:
        return ()
    names: list[str] = []
    kind: str | None = None
    for item in words:
        word = item
        if not word:
            raise ValueError(f"invalid baselines {text!r}: an empty item")
        if word == "none":
            raise ValueError(f"invalid baselines {text!r}: none stands alone")
        if word == "all":
            names.extend(BASELINES)
            kind = None
            continue
        if _NUMBER.match(word):
            if kind is None:
                raise ValueError(
                    f"invalid baselines {text!r}: a bare number ({word}) continues a "
                    "static:F or reactive:T item before it"
                )
            word = f"{kind}:{word}"
        try:
            parse_run(word)
        except ValueError as exc:
            raise ValueError(f"invalid baselines {text!r}: {exc}") from None
        prefix = word.split(":", 1)[0]
        kind = prefix if ":" in word and prefix in _PARAMETRIC_KINDS else None
        names.append(word)
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Inputs:
    """Everything a replay needs, and what the summary says about where it came from."""

    trace: Trace
    window_text: str | None
    policy_set: PolicySet
    policy_source: str
    rule: AssignmentRule
    jobs: list[SimJob]
    demand: Demand
    """The trace's demand in the window, which the policy's size is checked against."""
    warnings: tuple[str, ...] = ()
    """What a reader must know before reading the figures (a policy far too small or big)."""

    @property
    def scored_from(self) -> float:
        """The window's start on the replay's clock: the lead-in's length (0 without one)."""
        return self.trace.lead_in

    @property
    def window_jobs(self) -> list[SimJob]:
        """The jobs the replay scores: those submitted in the window, not the lead-in's."""
        start = self.scored_from
        return self.jobs if not start else [j for j in self.jobs if j.submit >= start]


def prepare(
    trace_path: Path,
    *,
    seed: int = 0,
    window: str | None = None,
    policy_set: PolicySet | None = None,
    policy_source: str | None = None,
    lead_in: float = 0.0,
    declared_sigma: float = AssignmentRule.expected_sigma,
    deadline_from: str = AssignmentRule.deadline_from,
) -> Inputs:
    """Load the trace (in the window), size a policy to it unless one is given, assign the jobs.

    A given policy is checked against the trace's demand (`sizing.size_warnings`); the sized
    one passes that check by construction. A lead-in (seconds before the window, see
    `load_trace`) adds jobs to replay, never to the demand the policy is sized to: the same
    window is judged with the same policy, with or without one.

    Raises ValueError for an invalid window or lead-in, or a window with no usable job.
    """
    trace = load_trace(trace_path, window=parse_window(window) if window else None, lead_in=lead_in)
    return prepare_trace(
        trace,
        seed=seed,
        window=window,
        policy_set=policy_set,
        policy_source=policy_source,
        declared_sigma=declared_sigma,
        deadline_from=deadline_from,
    )


def prepare_trace(
    trace: Trace,
    *,
    seed: int = 0,
    window: str | None = None,
    policy_set: PolicySet | None = None,
    policy_source: str | None = None,
    declared_sigma: float = AssignmentRule.expected_sigma,
    deadline_from: str = AssignmentRule.deadline_from,
) -> Inputs:
    """`prepare` of a trace already loaded (in its window, with its lead-in, as `window`
    names it): a sweep reads each trace once and prepares it again for every seed and policy.
    """
    in_window = trace.window_jobs
    if not in_window:
        raise ValueError(
            no_usable_job(trace, window)
            + f" ({trace.skipped} unusable rows skipped: a job needs an id, a submit time"
            " >= 0, a duration > 0 and GPUs > 0, all numbers)"
        )
    demand = measure_demand(in_window)
    if policy_set is None:
        policy_set = default_policy_set(in_window)
        policy_source = DEFAULT_POLICY_SOURCE
    rule = AssignmentRule(seed=seed, expected_sigma=declared_sigma, deadline_from=deadline_from)
    return Inputs(
        trace=trace,
        window_text=window,
        policy_set=policy_set,
        policy_source=policy_source or "given",
        rule=rule,
        jobs=assign_jobs(trace.jobs, policy_set, rule),
        demand=demand,
        warnings=tuple(size_warnings(policy_capacity(policy_set), demand)),
    )


# --------------------------------------------------------------------------- running


def peak_rss_mib(who: int = resource.RUSAGE_SELF) -> float:
    """The process's peak resident set size so far (ru_maxrss: KiB on Linux, bytes on macOS);
    with `resource.RUSAGE_CHILDREN`, the largest of its ended worker processes'."""
    peak = resource.getrusage(who).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def peak_rss_any_mib() -> float:
    """The largest peak resident set size of this process and the workers it has ended."""
    return max(peak_rss_mib(), peak_rss_mib(resource.RUSAGE_CHILDREN))


class ProgressBar:
    """One run's progress on stderr: a bar redrawn in place on a terminal, else one line at the
    end, so a log file or CI output gets a line per run rather than hundreds of redraws."""

    WIDTH = 30

    def __init__(self, stream: TextIO, label: str, *, tty: bool | None = None) -> None:
        self.stream = stream
        self.label = label
        self.tty = stream.isatty() if tty is None else tty
        self.started = time.monotonic()
        self._percent = -1
        self._shown = 0

    def update(self, fraction: float) -> None:
        """Redraw at each whole percent of the trace's submit period replayed."""
        if not self.tty:
            return
        percent = int(100 * min(max(fraction, 0.0), 1.0))
        if percent == self._percent:
            return
        self._percent = percent
        filled = self.WIDTH * percent // 100
        bar = "#" * filled + "." * (self.WIDTH - filled)
        elapsed = time.monotonic() - self.started
        self._write(f"{self.label} [{bar}] {percent:3d} %  {elapsed:6.1f} s")
        self.stream.flush()

    def finish(self, message: str) -> None:
        """Replace the bar with `message` (or, off a terminal, print it)."""
        if self.tty:
            self._write(message)
        else:
            self.stream.write(message)
        self.stream.write("\n")
        self.stream.flush()

    def _write(self, text: str) -> None:
        # Pad to the longest text shown so a shorter one leaves no tail of the last.
        self.stream.write("\r" + text.ljust(self._shown))
        self._shown = max(self._shown, len(text))


def run_specs(baselines: Sequence[str]) -> list[RunSpec]:
    """The policy first, then the baselines in the order asked for (see `parse_baselines`)."""
    return [POLICY, *(parse_run(text) for text in baselines)]


def worker_count(runs: int, jobs: int | None = None) -> int:
    """How many processes replay `runs` runs: `jobs` (by default one per core), at most one
    per run, at least one."""
    wanted = jobs if jobs is not None else (os.cpu_count() or 1)
    return max(1, min(runs, wanted))


def submission_order(specs: Sequence[RunSpec]) -> list[int]:
    """The runs' indices, longest first: the policy and its ablations (a decision pass every
    few minutes of the trace, several times a baseline's replay each), then the baselines, each
    group in the order asked for. Longest first packs the runs onto the workers best: submitted
    in `specs` order, the ablations asked for last started when the baselines had run, and
    two cores replayed the whole Philly trace's seventeen runs in 1,188 s where the longest
    run took 614 s."""
    return sorted(range(len(specs)), key=lambda i: specs[i].kind != "policy")


_worker_inputs: tuple[PolicySet, Sequence[SimJob], float] | None = None
"""In a worker process: the policy, jobs and window start every run of this simulation
replays."""


def _start_worker(policy_set: PolicySet, jobs: Sequence[SimJob], scored_from: float) -> None:
    global _worker_inputs  # noqa: PLW0603 - a worker's one piece of state, set when it starts
    _worker_inputs = (policy_set, jobs, scored_from)
    keep_freed_memory()
    for_a_replay_worker()


def _tier_order(policy_set: PolicySet) -> list[str]:
    return [t.name for t in policy_set.policy.spec.tiers]


def _replay_in_worker(spec: RunSpec, seed: int) -> tuple[RunResult, RunFigures, float, float]:
    """One run in a worker: its result, its figures (costs not yet relative), wall seconds and
    the worker's peak RSS so far. The figures are made here, where the outcomes are, in
    parallel, rather than all at the end by the parent, from the outcome tables."""
    assert _worker_inputs is not None, "the worker was started without its inputs"
    policy_set, jobs, scored_from = _worker_inputs
    started = time.perf_counter()
    result = replay(policy_set, jobs, spec, seed=seed, scored_from=scored_from)
    wall = time.perf_counter() - started
    return result, run_figures(result, tiers=_tier_order(policy_set)), wall, peak_rss_mib()


def _finished_line(result: RunResult, measurement: Measurement, width: int) -> str:
    finished = len(result.outcomes) - result.unfinished
    return (
        f"{result.name.ljust(width)} {finished}/{len(result.outcomes)} jobs finished in "
        f"{measurement.wall_seconds:.1f} s, peak RSS {measurement.peak_rss_mib:,.0f} MiB"
    )


@dataclass(frozen=True)
class Replayed:
    """What `run_replays` gives back, each in `specs` order."""

    results: list[RunResult]
    figures: list[RunFigures]
    """Each run's figures (`report.run_figures`, costs relative to on-demand-only's)."""
    measurements: list[Measurement]


def run_replays(
    inputs: Inputs,
    specs: Sequence[RunSpec],
    *,
    seed: int,
    err: TextIO,
    tty: bool | None = None,
    jobs: int | None = None,
) -> Replayed:
    """Replay the same jobs under each spec with the same seed, showing progress on `err`.

    With one worker (`worker_count`), in this process, a progress bar per run; with more, in
    worker processes, a line per run as each finishes. Each run's figures are made where it
    was replayed, from its outcomes as they are.
    """
    width = max(len(s.name) for s in specs) if specs else 0
    workers = worker_count(len(specs), jobs)
    if workers == 1:
        return _replay_here(inputs, specs, seed=seed, err=err, tty=tty, width=width)
    err.write(f"replaying {len(specs)} runs in {workers} worker processes\n")
    err.flush()
    results: list[RunResult | None] = [None] * len(specs)
    figures: list[RunFigures | None] = [None] * len(specs)
    measurements: list[Measurement | None] = [None] * len(specs)
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(inputs.policy_set, inputs.jobs, inputs.scored_from),
    ) as pool:
        futures = {
            pool.submit(_replay_in_worker, specs[i], seed): i for i in submission_order(specs)
        }
        for future in as_completed(futures):
            index = futures[future]
            result, figure, wall, rss = future.result()
            measurement = Measurement(specs[index].name, wall, rss)
            err.write(_finished_line(result, measurement, width) + "\n")
            err.flush()
            results[index], figures[index], measurements[index] = result, figure, measurement
    return Replayed(
        [r for r in results if r is not None],
        relative_costs([f for f in figures if f is not None]),
        [m for m in measurements if m is not None],
    )


def _replay_here(
    inputs: Inputs,
    specs: Sequence[RunSpec],
    *,
    seed: int,
    err: TextIO,
    tty: bool | None,
    width: int,
) -> Replayed:
    results: list[RunResult] = []
    figures: list[RunFigures] = []
    measurements: list[Measurement] = []
    for spec in specs:
        bar = ProgressBar(err, spec.name.ljust(width), tty=tty)
        started = time.perf_counter()
        result = replay(
            inputs.policy_set,
            inputs.jobs,
            spec,
            seed=seed,
            progress=bar.update,
            scored_from=inputs.scored_from,
        )
        measurement = Measurement(spec.name, time.perf_counter() - started, peak_rss_mib())
        bar.finish(_finished_line(result, measurement, width))
        results.append(result)
        figures.append(run_figures(result, tiers=_tier_order(inputs.policy_set)))
        measurements.append(measurement)
    return Replayed(results, relative_costs(figures), measurements)


# --------------------------------------------------------------------------- outputs


def assignment_statement(rule: AssignmentRule) -> str:
    """The assignment rule in words, with its parameters (controller.sim.assign states it in
    full, with the hash that makes it reproducible)."""
    return (
        f"Rule: `AssignmentRule(seed={rule.seed}, slack_min={rule.slack_min}, "
        f"slack_max={rule.slack_max}, deadline_share={rule.deadline_share}, "
        f"expected_sigma={rule.expected_sigma}, checkpoint_seconds={rule.checkpoint_seconds}, "
        f"deadline_from={rule.deadline_from!r})` "
        "(controller.sim.assign). Each job goes to a project drawn by a seeded hash of its "
        "job_id, each project's chance proportional to its nominal GPU quota; a job wider than "
        "its project could ever hold (nominal plus what it may borrow) goes to the project with "
        "the largest quota instead. It takes that project's tier and priority. It keeps the "
        "trace's deadline when the trace has one; otherwise "
        f"{100 * rule.deadline_share:g} % of jobs get the deadline submit + "
        f"{'declared runtime' if rule.deadline_from == 'declared' else 'duration'} x slack, "
        f"slack uniform in [{rule.slack_min:g}, {rule.slack_max:g}] by a seeded hash. Its "
        f"declared runtime is duration x exp({rule.expected_sigma:g} z), z a seeded standard "
        f"normal (the true duration is what runs), and it checkpoints every "
        f"{rule.checkpoint_seconds:g} s: an interruption or preemption loses the work since "
        "the last checkpoint."
    )


def _policy_document(inputs: Inputs) -> dict[str, Any]:
    policy = inputs.policy_set.policy
    projects = inputs.policy_set.projects
    return {
        "name": policy.name,
        "source": inputs.policy_source,
        "pools": [
            {
                "name": pool.name,
                "gpus_per_node": pool.gpus_per_node,
                "max_gpus": pool.max_gpus,
                "on_demand_floor_gpus": pool.on_demand.floor_gpus,
                "on_demand_ceiling_gpus": pool.on_demand.ceiling_gpus,
                "spot_per_gpu_hour": pool.prices.spot_per_gpu_hour,
                "on_demand_per_gpu_hour": pool.prices.on_demand_per_gpu_hour,
                "provisioning_latency_seconds": pool.provisioning_latency_seconds,
                "spot_interruptions_per_hour": pool.spot_interruptions_per_hour,
                "spot_availability": pool.spot_availability,
            }
            for pool in policy.spec.pools
        ],
        "tiers": [
            {
                "name": tier.name,
                "priority": tier.priority,
                "preemption": tier.preemption.value,
                "allow_spot": tier.allow_spot,
                "projects": sum(1 for p in projects if p.spec.tier == tier.name),
                "nominal_gpus": sum(
                    q.nominal_gpus
                    for p in projects
                    if p.spec.tier == tier.name
                    for q in p.spec.quotas
                ),
            }
            for tier in policy.spec.tiers
        ],
        "projects": len(projects),
    }


def _policy_statement(document: dict[str, Any]) -> str:
    pools = "; ".join(
        f"`{p['name']}`: {p['gpus_per_node']} GPUs a node, at most {p['max_gpus']} GPUs, "
        f"on-demand {p['on_demand_floor_gpus']}-{p['on_demand_ceiling_gpus']} GPUs, "
        f"${p['spot_per_gpu_hour']:g} spot / ${p['on_demand_per_gpu_hour']:g} on-demand per "
        f"GPU-hour, {p['provisioning_latency_seconds']} s provisioning, "
        f"{p['spot_interruptions_per_hour']:g} spot interruptions per node-hour, "
        f"{100 * p['spot_availability']:g} % spot availability"
        for p in document["pools"]
    )
    tiers = "; ".join(
        f"`{t['name']}` (priority {t['priority']}, preemption {t['preemption']}, "
        f"spot {'allowed' if t['allow_spot'] else 'forbidden'}): {t['projects']} projects, "
        f"{t['nominal_gpus']} GPUs of nominal quota"
        for t in document["tiers"]
    )
    return (
        f"CapacityPolicy `{document['name']}` ({document['source']}), "
        f"{document['projects']} TrainingProjects. Pools: {pools}. Tiers: {tiers}. "
        "The policy run sets the mix with the controller's own decision code; the baselines "
        "set it by a fixed on-demand fraction (on-demand-only 100 %, fixed-80-20 20 %, "
        "all-spot 0 %, static:F F) or by reacting to queue depth (reactive, reactive:T: one "
        "node more on-demand while pending GPUs exceed 10 %, or T, of the pool)."
    )


def context_document(inputs: Inputs, specs: Sequence[RunSpec], *, seed: int) -> dict[str, Any]:
    """What summary.json says about the inputs: only what the command line and files decide."""
    trace = inputs.trace
    jobs = inputs.window_jobs
    tiers = Counter(j.tier for j in jobs)
    return {
        "inputs": {
            "trace": trace.source,
            "window": None
            if trace.window is None
            else {
                "argument": inputs.window_text,
                "start_seconds": trace.window[0],
                "end_seconds": trace.window[1],
                "lead_in_seconds": trace.lead_in,
                "lead_in_jobs": len(inputs.jobs) - len(jobs),
            },
            "jobs": len(jobs),
            "skipped_rows": trace.skipped,
            "seed": seed,
            "work_gpu_hours": sum(j.gpus * j.duration for j in jobs) / 3600.0,
            "demand_gpus": {
                "p95": inputs.demand.p95,
                "mean": inputs.demand.mean,
                "peak": inputs.demand.peak,
            },
        },
        "warnings": list(inputs.warnings),
        "assignment": {
            "rule": dataclasses.asdict(inputs.rule),
            "statement": assignment_statement(inputs.rule),
            "jobs_by_tier": dict(tiers),
            "jobs_with_deadline": sum(1 for j in jobs if j.deadline is not None),
        },
        "policy": _policy_document(inputs),
        "runs_spec": {
            spec.name: {
                "kind": spec.kind,
                "on_demand_fraction": spec.on_demand_fraction,
                "threshold": spec.threshold if spec.kind == "reactive" else None,
                "decision_interval_seconds": spec.decision_interval,
                "sample_interval_seconds": spec.sample_interval,
            }
            for spec in specs
        },
    }


def _inputs_lines(inputs: Inputs, *, seed: int) -> list[str]:
    trace = inputs.trace
    window = describe_window(inputs.window_text, trace.window)
    jobs = inputs.window_jobs
    work = sum(j.gpus * j.duration for j in jobs) / 3600.0
    demand = inputs.demand
    lead = (
        [
            f"lead-in: the {trace.lead_in / DAY:g} days before the window, "
            f"{len(inputs.jobs) - len(jobs):,} jobs replayed first so that the window starts on "
            "a running cluster; they are not scored, and costs, mix changes and estimates "
            "count from the window's start"
        ]
        if trace.lead_in
        else []
    )
    return [
        f"trace: {trace.source} ({window})",
        *lead,
        f"jobs: {len(jobs):,} ({trace.skipped:,} unusable rows skipped), "
        f"{work:,.0f} GPU-hours of work",
        f"demand: p95 {demand.p95:,.0f} GPUs, mean {demand.mean:,.0f}, peak {demand.peak:,.0f} "
        "(every job started at its submit, over the submit period)",
        f"seed: {seed} (assignment and every run)",
        f"policy: {inputs.policy_set.policy.name} ({inputs.policy_source})",
    ]


@dataclass(frozen=True)
class Simulation:
    inputs: Inputs
    results: list[RunResult]
    figures: list[RunFigures]
    measurements: list[Measurement]
    files: list[Path]
    wall_seconds: float
    peak_rss_mib: float


def write_outputs(
    out_dir: Path,
    inputs: Inputs,
    *,
    specs: Sequence[RunSpec],
    results: Sequence[RunResult],
    figures: Sequence[RunFigures],
    measurements: Sequence[Measurement],
    seed: int,
) -> list[Path]:
    """summary.json, summary.md and, when matplotlib is installed, the plots."""
    out_dir.mkdir(parents=True, exist_ok=True)
    context = context_document(inputs, specs, seed=seed)
    json_path = out_dir / SUMMARY_JSON
    json_path.write_text(
        render_json(summary_document(figures, context=context)), encoding="utf-8", newline="\n"
    )
    drawn: list[Path] = []
    if plots.available():
        drawn = plots.write_plots(results, figures, out_dir, policy=POLICY.name)
    else:
        # Plots left by an earlier run would show other figures than this summary's.
        for name in plots.PLOT_FILES:
            (out_dir / name).unlink(missing_ok=True)
    md_path = out_dir / SUMMARY_MD
    title = inputs.trace.source + (f" ({inputs.window_text})" if inputs.window_text else "")
    md_path.write_text(
        render_markdown(
            figures,
            title=f"Replay of {title}",
            inputs=_inputs_lines(inputs, seed=seed)
            + (
                []
                if drawn
                else [f"plots: not drawn (matplotlib is not installed): {plots.INSTALL_HINT}"]
            ),
            assignment=assignment_statement(inputs.rule),
            policy=_policy_statement(context["policy"]),
            warnings=inputs.warnings,
            measurements=measurements,
            plots=[p.name for p in drawn],
        ),
        encoding="utf-8",
        newline="\n",
    )
    return [json_path, md_path, *drawn]


def simulate(
    trace_path: Path,
    *,
    out_dir: Path = DEFAULT_OUT,
    seed: int = 0,
    window: str | None = None,
    baselines: Sequence[str] = tuple(BASELINES),
    policy_set: PolicySet | None = None,
    policy_source: str | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    tty: bool | None = None,
    jobs: int | None = None,
    lead_in: float = 0.0,
    declared_sigma: float = AssignmentRule.expected_sigma,
    deadline_from: str = AssignmentRule.deadline_from,
) -> Simulation:
    """The whole command: prepare, replay the policy and each baseline, print, write.

    `baselines` are the texts `parse_baselines` returns; `lead_in` the seconds before the
    window replayed first (`prepare`); `declared_sigma` the assignment rule's spread of declared
    runtimes (`AssignmentRule.expected_sigma`), `deadline_from` which runtime deadlines are
    set from (`AssignmentRule.deadline_from`). `jobs` caps the worker processes
    (`worker_count`; 1 replays in this process). Progress goes to `err` (in this process, a
    bar when `tty`, by default when `err` is a terminal); the summary tables and the files
    written go to `out`.
    """
    keep_freed_memory()  # the replay's passes, here (each worker sets it as it starts)
    started = time.perf_counter()
    inputs = prepare(
        trace_path,
        seed=seed,
        window=window,
        policy_set=policy_set,
        policy_source=policy_source,
        lead_in=lead_in,
        declared_sigma=declared_sigma,
        deadline_from=deadline_from,
    )
    for line in _inputs_lines(inputs, seed=seed):
        out.write(line + "\n")
    out.write("\n")
    out.flush()
    for warning in inputs.warnings:
        err.write(f"warning: {warning}\n")
    err.flush()
    specs = run_specs(baselines)
    replayed = run_replays(inputs, specs, seed=seed, err=err, tty=tty, jobs=jobs)
    results, figures, measurements = replayed.results, replayed.figures, replayed.measurements
    if not plots.available():
        err.write(f"plots skipped: matplotlib is not installed; {plots.INSTALL_HINT}\n")
    files = write_outputs(
        out_dir,
        inputs,
        specs=specs,
        results=results,
        figures=figures,
        measurements=measurements,
        seed=seed,
    )
    wall = time.perf_counter() - started
    peak = peak_rss_any_mib()
    out.write(terminal_summary(figures, measurements))
    out.write(f"\nwrote {', '.join(str(f) for f in files)}\n")
    if not plots.available():
        out.write(f"no plots (matplotlib is not installed): {plots.INSTALL_HINT}\n")
    out.write(f"total wall time {wall:.1f} s, peak RSS {peak:,.0f} MiB (largest process)\n")
    out.flush()
    return Simulation(inputs, results, list(figures), measurements, files, wall, peak)
