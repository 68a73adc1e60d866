"""The figures of a replay, and the summary files and tables that show them.

Every figure is a pure function of a `RunResult` (and, for cost relative to on-demand-only, of
that baseline's cost), so a report can be recomputed from saved results and tested on
hand-built ones without running the engine.

Definitions, stated once because a figure is only as useful as its definition:

- **Deadline hit rate**: of the jobs that have a deadline, the share that finished by it. A job
  still pending or running when the replay ended counts as a miss: it did not finish by its
  deadline, and leaving it out would reward a policy for starving work. (`RunResult.unfinished`
  counts those jobs separately too.)
- **Waits**: first start minus submit, over the jobs that started at all; percentiles are linear
  interpolations between order statistics (NumPy's default), so a tier with one started job has
  that job's wait as every percentile.
- **Utilization**: GPU-seconds held by running jobs (lost work included) over the GPU-seconds
  of provisioned nodes (launch to removal, provisioning and idle time included).
- **Misses by cause**: each missed deadline counted once, under the cause the engine gave it
  (`JobOutcome.cause`, one of `model.CAUSES`; `controller.sim.attribution` says how it is
  chosen), so a tier's causes add up to its misses. A missed outcome without a cause (a result
  saved before the engine gave causes) is attributed here by the same rule from its own delays.
- **Tighter than a node launch**: a job whose deadline was feasible at submit but left it less
  slack than its pool's provisioning latency; only a node already up could start it in time.
  Counted per tier (`TierFigures.tight`, `tight_missed`) beside the causes, not as one.
- **Peak against the ceiling**: per pool, the most GPUs the run had provisioned at once, and
  the pool's ceiling (the GPUs its quotas promise, at most its maxGpus); a run whose peak
  exceeds it is flagged.
- **Calibration**: the reliability table and Brier score of the risks the run estimated
  (`controller.sim.calibration`), raw and recalibrated online from the deadlines judged before
  each estimate (`controller.sim.judging`); only the policy run estimates risks.
- **Conservation**: a finished job held its GPUs for its work plus the work it redid, so
  `used == work + lost` for each; the largest deviation is reported, in GPU-seconds, as a
  check on the engine's accounting rather than a property of the policy.

`summary.json` must be byte-identical for the same inputs and seed, so it holds no wall times
or memory figures (those vary run to run; they go to the terminal and `summary.md`), its keys
are sorted and its floats are rounded to six significant digits, which hides last-bit
differences in summation order but none that matter.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from controller import names
from controller.sim import calibration as calibration_model
from controller.sim.attribution import attribute
from controller.sim.calibration import Calibration, calibrate, calibrate_recalibrated
from controller.sim.model import (
    CAUSES,
    INFEASIBLE,
    INTERRUPTED,
    PREEMPTED,
    WAITED_FOR_NODE,
    WAITED_FOR_QUOTA,
    JobOutcome,
    RunResult,
)
from controller.sim.tables import as_list

SPOT, ON_DEMAND = names.SPOT, names.ON_DEMAND
CAPACITY_TYPES = (SPOT, ON_DEMAND)
ON_DEMAND_ONLY = "on-demand-only"
"""The baseline that costs are compared against (its name in `engine.BASELINES`)."""
ALL_TIERS = "all"
"""The tier name of the figures over every job."""
WAIT_PERCENTILES = (50.0, 90.0, 99.0)
SIGNIFICANT_DIGITS = 6
DEVIATION_RESOLUTION = 1e-6
"""GPU-seconds: conservation deviations are rounded to this in summary.json. Below it they are
floating-point noise of summation order, which should not decide whether two files match."""


@dataclass(frozen=True)
class TierFigures:
    """Deadlines and waits of one tier's jobs (or of all jobs, as tier `all`)."""

    tier: str
    jobs: int
    with_deadline: int
    met: int
    missed: int
    """Jobs with a deadline that finished after it or never finished."""
    unfinished_with_deadline: int
    """The part of `missed` that never finished."""
    started: int
    wait_p50: float | None
    wait_p90: float | None
    wait_p99: float | None
    """Seconds, over the started jobs; None when none started."""
    misses_by_cause: Mapping[str, int] = field(default_factory=dict)
    """Every cause in `CAUSES` order -> the missed deadlines it caused; adds up to `missed`."""
    tight: int = 0
    """Jobs whose deadline only a node already up could meet (`JobOutcome.tighter_than_launch`)."""
    tight_missed: int = 0
    """The part of `missed` that was tighter than a node launch."""

    @property
    def hit_rate(self) -> float | None:
        """met / with_deadline; None when no job has a deadline (nothing to hit or miss)."""
        return self.met / self.with_deadline if self.with_deadline else None


@dataclass(frozen=True)
class Conservation:
    """used == work + lost over the finished jobs, in GPU-seconds."""

    finished: int
    used_gpu_seconds: float
    work_gpu_seconds: float
    lost_gpu_seconds: float
    max_abs_deviation: float
    """The largest |used - work - lost| of any one finished job (0 when none finished)."""

    @property
    def total_deviation(self) -> float:
        return self.used_gpu_seconds - self.work_gpu_seconds - self.lost_gpu_seconds


@dataclass(frozen=True)
class RunFigures:
    """Everything the summary shows about one run."""

    name: str
    jobs: int
    tiers: tuple[TierFigures, ...]
    """In the order asked for (the policy's tier order in a replay)."""
    overall: TierFigures
    gpu_hours: Mapping[str, float]
    """Provisioned GPU-hours by capacity type."""
    cost: Mapping[str, float]
    """Dollars by capacity type."""
    cost_vs_on_demand_only: float | None
    """Total cost as a percentage of the on-demand-only baseline's; None when it did not run."""
    used_gpu_hours: float
    """GPU-hours held by running jobs, lost work included, finished or not."""
    mix_changes: int
    decisions: int
    lane_writes: int
    lane_moves: int
    lost_gpu_hours: float
    interruptions: int
    preemptions: int
    unfinished: int
    conservation: Conservation
    peak_provisioned: Mapping[str, float] = field(default_factory=dict)
    """Per pool, the most GPUs provisioned at once."""
    ceilings: Mapping[str, int] = field(default_factory=dict)
    """Per pool, its ceiling in GPUs."""
    calibration: Calibration | None = None
    """The run's risk estimates scored; None when it estimated none (the baselines)."""
    recalibrated: Calibration | None = None
    """The same estimates scored by their calibrated risks; None without them."""

    @property
    def pools(self) -> list[str]:
        """Every pool with a peak or a ceiling, by name."""
        return sorted({*self.peak_provisioned, *self.ceilings})

    @property
    def over_ceiling(self) -> list[str]:
        """The pools whose peak provisioned GPUs exceeded their ceiling, by name."""
        return [
            pool
            for pool in self.pools
            if pool in self.ceilings and self.peak_provisioned.get(pool, 0.0) > self.ceilings[pool]
        ]

    @property
    def total_cost(self) -> float:
        return sum(self.cost.values())

    @property
    def provisioned_gpu_hours(self) -> float:
        return sum(self.gpu_hours.values())

    @property
    def utilization(self) -> float | None:
        """Used over provisioned GPU-time; None when nothing was provisioned."""
        provisioned = self.provisioned_gpu_hours
        return self.used_gpu_hours / provisioned if provisioned > 0 else None

    def tier(self, name: str) -> TierFigures:
        if name == ALL_TIERS:
            return self.overall
        for figures in self.tiers:
            if figures.tier == name:
                return figures
        raise KeyError(name)


@dataclass(frozen=True)
class Measurement:
    """What one replay cost to run: never in summary.json, since it varies run to run."""

    name: str
    wall_seconds: float
    peak_rss_mib: float
    """The process's peak resident set size when the replay ended (ru_maxrss)."""


# --------------------------------------------------------------------------- figures


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) by linear interpolation, NumPy's default; None when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (rank - low) * (ordered[high] - ordered[low])


def miss_cause(outcome: JobOutcome) -> str | None:
    """Why `outcome` missed its deadline (one of `CAUSES`); None when it met it or had none.

    The engine's cause when it gave one; otherwise the attribution rule applied to what the
    outcome records (its runtime is its work over its GPUs, and it counts as admissible, since
    the outcome does not say whether its queue could ever admit it).
    """
    if outcome.met is not False:
        return None
    if outcome.cause in CAUSES:
        return outcome.cause
    return attribute(
        submit=outcome.submit,
        duration=outcome.work_gpu_seconds / outcome.gpus if outcome.gpus > 0 else 0.0,
        deadline=outcome.deadline,
        finish=outcome.finish,
        delays=outcome.delays,
    )


def tier_figures(tier: str, outcomes: Iterable[JobOutcome]) -> TierFigures:
    """Deadline hits, their misses' causes and waits over `outcomes` (the caller picks the
    tier's jobs)."""
    jobs = with_deadline = met = unfinished = tight = tight_missed = 0
    waits: list[float] = []
    causes = dict.fromkeys(CAUSES, 0)
    for outcome in outcomes:
        jobs += 1
        hit = outcome.met
        if hit is not None:
            with_deadline += 1
            met += hit
            unfinished += outcome.finish is None
            cause = miss_cause(outcome)
            if cause is not None:
                causes[cause] += 1
            if outcome.tighter_than_launch:
                tight += 1
                tight_missed += not hit
        wait = outcome.wait
        if wait is not None:
            waits.append(wait)
    p50, p90, p99 = (percentile(waits, q) for q in WAIT_PERCENTILES)
    return TierFigures(
        tier=tier,
        jobs=jobs,
        with_deadline=with_deadline,
        met=met,
        missed=with_deadline - met,
        unfinished_with_deadline=unfinished,
        started=len(waits),
        wait_p50=p50,
        wait_p90=p90,
        wait_p99=p99,
        misses_by_cause=causes,
        tight=tight,
        tight_missed=tight_missed,
    )


def conservation(outcomes: Iterable[JobOutcome]) -> Conservation:
    finished = 0
    used = work = lost = worst = 0.0
    for outcome in outcomes:
        if outcome.finish is None:
            continue
        finished += 1
        used += outcome.used_gpu_seconds
        work += outcome.work_gpu_seconds
        lost += outcome.lost_gpu_seconds
        worst = max(
            worst,
            abs(outcome.used_gpu_seconds - outcome.work_gpu_seconds - outcome.lost_gpu_seconds),
        )
    return Conservation(finished, used, work, lost, worst)


def run_figures(
    result: RunResult,
    *,
    tiers: Sequence[str] | None = None,
    on_demand_only_cost: float | None = None,
) -> RunFigures:
    """The figures of one run.

    `tiers` orders (and may add empty) tiers; by default the tiers the jobs have, by name.
    `on_demand_only_cost` is that baseline's total cost, when it ran, for the relative cost.
    """
    outcomes = as_list(result.outcomes)
    risk_log = as_list(result.risk_log)
    by_tier: dict[str, list[JobOutcome]] = {}
    for outcome in outcomes:
        by_tier.setdefault(outcome.tier, []).append(outcome)
    order = list(tiers) if tiers is not None else sorted(by_tier)
    order += sorted(set(by_tier) - set(order))
    cost = {ct: result.cost_by_capacity_type.get(ct, 0.0) for ct in CAPACITY_TYPES}
    total = sum(cost.values())
    relative = (
        100.0 * total / on_demand_only_cost
        if on_demand_only_cost is not None and on_demand_only_cost > 0
        else None
    )
    return RunFigures(
        name=result.name,
        jobs=len(outcomes),
        tiers=tuple(tier_figures(t, by_tier.get(t, ())) for t in order),
        overall=tier_figures(ALL_TIERS, outcomes),
        gpu_hours={ct: result.gpu_hours_by_capacity_type.get(ct, 0.0) for ct in CAPACITY_TYPES},
        cost=cost,
        cost_vs_on_demand_only=relative,
        used_gpu_hours=sum(o.used_gpu_seconds for o in outcomes) / 3600.0,
        mix_changes=result.mix_changes,
        decisions=result.decisions,
        lane_writes=result.lane_writes,
        lane_moves=result.lane_moves,
        lost_gpu_hours=sum(o.lost_gpu_seconds for o in outcomes) / 3600.0,
        interruptions=sum(o.interruptions for o in outcomes),
        preemptions=sum(o.preemptions for o in outcomes),
        unfinished=result.unfinished,
        conservation=conservation(outcomes),
        peak_provisioned=dict(sorted(result.peak_provisioned.items())),
        ceilings=dict(sorted(result.ceilings.items())),
        calibration=calibrate(risk_log) if risk_log else None,
        recalibrated=calibrate_recalibrated(risk_log),
    )


def figures_for_runs(
    results: Sequence[RunResult], *, tiers: Sequence[str] | None = None
) -> list[RunFigures]:
    """Every run's figures, costs relative to the on-demand-only run when there is one."""
    return relative_costs([run_figures(r, tiers=tiers) for r in results])


def relative_costs(figures: Sequence[RunFigures]) -> list[RunFigures]:
    """The runs' figures with each cost relative to the on-demand-only run's, when there is one
    (figures made run by run, where each replayed, cannot know it)."""
    reference = next((f for f in figures if f.name == ON_DEMAND_ONLY), None)
    reference_cost = sum(reference.cost.values()) if reference else None
    if reference_cost is None or reference_cost <= 0:
        return [replace(f, cost_vs_on_demand_only=None) for f in figures]
    return [
        replace(f, cost_vs_on_demand_only=100.0 * sum(f.cost.values()) / reference_cost)
        for f in figures
    ]


# --------------------------------------------------------------------------- summary.json


def round_significant(value: float, digits: int = SIGNIFICANT_DIGITS) -> float | None:
    """`value` to `digits` significant digits; None for NaN or infinity, which JSON lacks."""
    if not math.isfinite(value):
        return None
    # Adding 0.0 turns -0.0 into 0.0, so a zero never prints two ways.
    return float(f"{value:.{digits}g}") + 0.0


def rounded(value: Any) -> Any:
    """A copy of a JSON-ready value with every float rounded (bools and ints kept)."""
    if isinstance(value, float):
        return round_significant(value)
    if isinstance(value, Mapping):
        return {str(k): rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    return value


def tier_document(figures: TierFigures) -> dict[str, Any]:
    return {
        "jobs": figures.jobs,
        "with_deadline": figures.with_deadline,
        "met": figures.met,
        "missed": figures.missed,
        "unfinished_with_deadline": figures.unfinished_with_deadline,
        "hit_rate": figures.hit_rate,
        "started": figures.started,
        "wait_seconds": {
            "p50": figures.wait_p50,
            "p90": figures.wait_p90,
            "p99": figures.wait_p99,
        },
        "tighter_than_a_node_launch": {
            "with_deadline": figures.tight,
            "missed": figures.tight_missed,
        },
    }


def run_document(figures: RunFigures) -> dict[str, Any]:
    """One run's figures as plain JSON values (no wall time: see the module docstring)."""
    c = figures.conservation
    return {
        "jobs": figures.jobs,
        "deadlines": {
            **{t.tier: tier_document(t) for t in figures.tiers},
            ALL_TIERS: tier_document(figures.overall),
        },
        "tier_order": [t.tier for t in figures.tiers],
        "gpu_hours": dict(figures.gpu_hours),
        "cost": {**figures.cost, "total": figures.total_cost},
        "cost_percent_of_on_demand_only": figures.cost_vs_on_demand_only,
        "used_gpu_hours": figures.used_gpu_hours,
        "provisioned_gpu_hours": figures.provisioned_gpu_hours,
        "utilization": figures.utilization,
        "mix_changes": figures.mix_changes,
        "decisions": figures.decisions,
        "lane_writes": figures.lane_writes,
        "lane_moves": figures.lane_moves,
        "lost_gpu_hours": figures.lost_gpu_hours,
        "interruptions": figures.interruptions,
        "preemptions": figures.preemptions,
        "unfinished": figures.unfinished,
        "misses_by_cause": {
            **{t.tier: dict(t.misses_by_cause) for t in figures.tiers},
            ALL_TIERS: dict(figures.overall.misses_by_cause),
        },
        "ceiling": {
            pool: {
                "peak_provisioned_gpus": figures.peak_provisioned.get(pool),
                "ceiling_gpus": figures.ceilings.get(pool),
                "exceeds_ceiling": pool in figures.over_ceiling,
            }
            for pool in figures.pools
        },
        "calibration": None
        if figures.calibration is None
        else calibration_model.calibration_document(figures.calibration),
        "calibration_recalibrated": None
        if figures.recalibrated is None
        else calibration_model.calibration_document(figures.recalibrated),
        "conservation": {
            "finished_jobs": c.finished,
            "used_gpu_seconds": c.used_gpu_seconds,
            "work_gpu_seconds": c.work_gpu_seconds,
            "lost_gpu_seconds": c.lost_gpu_seconds,
            "total_deviation_gpu_seconds": _resolved(c.total_deviation),
            "max_abs_deviation_gpu_seconds": _resolved(c.max_abs_deviation),
        },
    }


def _resolved(deviation: float) -> float:
    return round(deviation / DEVIATION_RESOLUTION) * DEVIATION_RESOLUTION + 0.0


def summary_document(
    figures: Sequence[RunFigures], *, context: Mapping[str, Any]
) -> dict[str, Any]:
    """summary.json's content: the context (inputs, assignment, policy) and every run."""
    return {
        **context,
        "run_order": [f.name for f in figures],
        "runs": {f.name: run_document(f) for f in figures},
    }


def render_json(document: Mapping[str, Any]) -> str:
    """Stable text: sorted keys, rounded floats, a fixed indent and a final newline."""
    return json.dumps(rounded(document), sort_keys=True, indent=2, allow_nan=False) + "\n"


# --------------------------------------------------------------------------- text


def format_seconds(seconds: float | None) -> str:
    """A duration in the unit a reader takes in at a glance: 45 s, 12.5 min, 3.2 h, 2.1 d."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def format_percent(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100 * fraction:.1f} %"


def _money(dollars: float) -> str:
    return f"${dollars:,.0f}"


def _hit_cell(figures: TierFigures) -> str:
    if figures.hit_rate is None:
        return "-"
    return f"{format_percent(figures.hit_rate)} ({figures.met}/{figures.with_deadline})"


def table(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, markdown: bool, left: int = 1
) -> list[str]:
    """Columns padded to their widest cell; Markdown pipes when asked (text left, figures
    right, which is how both a terminal and a rendered table read best). The first `left`
    columns are text."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.ljust(widths[i]) if i < left else cell.rjust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "| " + " | ".join(padded) + " |" if markdown else "  ".join(padded).rstrip()

    lines = [line(header)]
    if markdown:
        rule = [
            "-" * widths[i] if i < left else "-" * (widths[i] - 1) + ":" for i in range(len(header))
        ]
        lines.append("| " + " | ".join(rule) + " |")
    else:
        lines.append("  ".join("-" * w for w in widths))
    lines.extend(line(row) for row in rows)
    return lines


def _tier_names(figures: Sequence[RunFigures]) -> list[str]:
    names_seen: list[str] = []
    for run in figures:
        for t in run.tiers:
            if t.tier not in names_seen:
                names_seen.append(t.tier)
    return names_seen


def _safe_tier(run: RunFigures, tier: str) -> TierFigures | None:
    try:
        return run.tier(tier)
    except KeyError:
        return None


def deadline_table(figures: Sequence[RunFigures], *, markdown: bool) -> list[str]:
    tiers = _tier_names(figures)
    header = ["run", *tiers, "overall", "misses", "unfinished"]
    rows = []
    for run in figures:
        cells = [run.name]
        for tier in tiers:
            found = _safe_tier(run, tier)
            cells.append("-" if found is None else _hit_cell(found))
        cells += [_hit_cell(run.overall), str(run.overall.missed), str(run.unfinished)]
        rows.append(cells)
    return table(header, rows, markdown=markdown)


def wait_table(
    figures: Sequence[RunFigures],
    *,
    markdown: bool,
    percentiles: Sequence[str] = ("p50", "p90", "p99"),
) -> list[str]:
    tiers = [*_tier_names(figures), ALL_TIERS]
    header = ["run", *(f"{tier} {p}" for tier in tiers for p in percentiles)]
    rows = []
    for run in figures:
        cells = [run.name]
        for tier in tiers:
            found = _safe_tier(run, tier)
            for p in percentiles:
                value = None if found is None else getattr(found, f"wait_{p}")
                cells.append(format_seconds(value))
        rows.append(cells)
    return table(header, rows, markdown=markdown)


_COST_HEADERS = (
    # (Markdown header, terminal header): the terminal's must fit a wide terminal's line.
    ("spot GPU-h", "spot GPU-h"),
    ("on-demand GPU-h", "OD GPU-h"),
    ("spot cost", "spot $"),
    ("on-demand cost", "OD $"),
    ("total cost", "total $"),
    ("% of on-demand-only", "% OD-only"),
    ("utilization", "util"),
    ("mix changes", "mix chg"),
    ("lost GPU-h", "lost GPU-h"),
    ("interruptions", "interrupts"),
    ("preemptions", "preempts"),
    ("max abs(used - work - lost) GPU-s", "max dev GPU-s"),
)


def cost_table(figures: Sequence[RunFigures], *, markdown: bool) -> list[str]:
    header = ["run", *(long if markdown else short for long, short in _COST_HEADERS)]
    rows = [
        [
            run.name,
            f"{run.gpu_hours[SPOT]:,.0f}",
            f"{run.gpu_hours[ON_DEMAND]:,.0f}",
            _money(run.cost[SPOT]),
            _money(run.cost[ON_DEMAND]),
            _money(run.total_cost),
            "-" if run.cost_vs_on_demand_only is None else f"{run.cost_vs_on_demand_only:.1f} %",
            format_percent(run.utilization),
            str(run.mix_changes),
            f"{run.lost_gpu_hours:,.1f}",
            str(run.interruptions),
            str(run.preemptions),
            f"{run.conservation.max_abs_deviation:.2g}",
        ]
        for run in figures
    ]
    return table(header, rows, markdown=markdown)


CAUSE_SHORT = {
    INFEASIBLE: "infeasible",
    WAITED_FOR_QUOTA: "quota",
    WAITED_FOR_NODE: "node",
    INTERRUPTED: "interrupted",
    PREEMPTED: "preempted",
}
"""The terminal's column headers for `CAUSES` (summary.md spells them out)."""


def _cause_cells(figures: TierFigures) -> list[str]:
    return [str(figures.missed), *(str(figures.misses_by_cause.get(c, 0)) for c in CAUSES)]


def cause_table(figures: Sequence[RunFigures], tier: str, *, markdown: bool) -> list[str]:
    """One tier's (or `ALL_TIERS`') missed deadlines: rows runs, columns the misses and each
    cause's share of them."""
    header = ["run", "misses", *(c if markdown else CAUSE_SHORT[c] for c in CAUSES)]
    rows = []
    for run in figures:
        found = _safe_tier(run, tier)
        cells = ["-"] * (1 + len(CAUSES)) if found is None else _cause_cells(found)
        rows.append([run.name, *cells])
    return table(header, rows, markdown=markdown)


def tight_table(figures: Sequence[RunFigures], *, markdown: bool) -> list[str]:
    """Per run and tier, the deadlines tighter than a node launch: missed / such jobs, and
    their share of all the run's misses."""
    tiers = [*_tier_names(figures), ALL_TIERS]
    header = ["run", *tiers, "share of misses"]
    rows = []
    for run in figures:
        cells = [run.name]
        for tier in tiers:
            found = _safe_tier(run, tier)
            cells.append("-" if found is None else f"{found.tight_missed}/{found.tight}")
        missed = run.overall.missed
        cells.append(f"{100.0 * run.overall.tight_missed / missed:.1f} %" if missed else "-")
        rows.append(cells)
    return table(header, rows, markdown=markdown)


def cause_table_by_tier(figures: Sequence[RunFigures], *, markdown: bool) -> list[str]:
    """Every run's missed deadlines by cause, a row per run and tier (every tier, then all)."""
    tiers = [*_tier_names(figures), ALL_TIERS]
    header = ["run", "tier", "misses", *(c if markdown else CAUSE_SHORT[c] for c in CAUSES)]
    rows = []
    for run in figures:
        for tier in tiers:
            found = _safe_tier(run, tier)
            if found is not None:
                rows.append([run.name, tier, *_cause_cells(found)])
    return table(header, rows, markdown=markdown, left=2)


EXCEEDS_CEILING = "exceeds ceiling"


def _gpus(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def ceiling_table(figures: Sequence[RunFigures], *, markdown: bool) -> list[str]:
    """Per run and pool, the peak provisioned GPUs against the ceiling; a run whose peak
    exceeds a pool's ceiling says so in its last column."""
    pools = sorted({pool for run in figures for pool in run.pools})
    header = ["run", *(f"{pool} peak / ceiling GPUs" for pool in pools), "ceiling"]
    rows = []
    for run in figures:
        cells = [run.name]
        for pool in pools:
            peak = run.peak_provisioned.get(pool)
            ceiling = run.ceilings.get(pool)
            cells.append(f"{_gpus(peak)} / {_gpus(None if ceiling is None else float(ceiling))}")
        over = run.over_ceiling
        cells.append(f"{EXCEEDS_CEILING} ({', '.join(over)})" if over else "within")
        rows.append(cells)
    return table(header, rows, markdown=markdown)


def reliability_table(calibration: Calibration, *, markdown: bool) -> list[str]:
    header = [*calibration_model.RELIABILITY_HEADER, calibration_model.JUDGED_HEADER]
    return table(header, calibration_model.reliability_rows(calibration), markdown=markdown)


def _calibrated(figures: Sequence[RunFigures]) -> list[tuple[str, Calibration]]:
    """(title, table) of each run's risks: raw, then recalibrated where the run has it."""
    out = []
    for run in figures:
        if run.calibration is not None:
            out.append((run.name, run.calibration))
        if run.recalibrated is not None:
            out.append((f"{run.name}, recalibrated", run.recalibrated))
    return out


def measurement_table(measurements: Sequence[Measurement], *, markdown: bool) -> list[str]:
    rows = [[m.name, f"{m.wall_seconds:.1f} s", f"{m.peak_rss_mib:,.0f} MiB"] for m in measurements]
    return table(["run", "wall time", "peak RSS so far"], rows, markdown=markdown)


def terminal_summary(
    figures: Sequence[RunFigures], measurements: Sequence[Measurement] = ()
) -> str:
    """The tables `quartermaster simulate` prints: hits, waits (p50/p90), cost, run time."""
    lines = ["Deadline hit rate by tier (met/with deadline; unfinished jobs count as missed)"]
    lines += deadline_table(figures, markdown=False)
    lines += ["", "Wait by tier (started jobs)"]
    lines += wait_table(figures, markdown=False, percentiles=("p50", "p90"))
    lines += ["", "Missed deadlines by cause (each miss has one cause; they add up to misses)"]
    lines += cause_table_by_tier(figures, markdown=False)
    lines += ["", "Cost and capacity (OD = on-demand; max dev = max abs(used - work - lost))"]
    lines += cost_table(figures, markdown=False)
    lines += ["", "Peak provisioned GPUs against the pool ceiling"]
    lines += ceiling_table(figures, markdown=False)
    for name, calibration in _calibrated(figures):
        lines += ["", f"Risk calibration of {name}: {calibration_model.describe(calibration)}"]
        if calibration.count:
            lines += reliability_table(calibration, markdown=False)
    if measurements:
        lines += ["", "Replay wall time and memory"]
        lines += measurement_table(measurements, markdown=False)
    return "\n".join(lines) + "\n"


def render_markdown(
    figures: Sequence[RunFigures],
    *,
    title: str,
    inputs: Sequence[str],
    assignment: str,
    policy: str,
    warnings: Sequence[str] = (),
    measurements: Sequence[Measurement] = (),
    plots: Sequence[str] = (),
) -> str:
    """summary.md: the same figures as summary.json, with how jobs were assigned and the
    policy used, so the file stands on its own. Warnings come first, before any figure they
    change the reading of."""
    lines = [f"# {title}", ""]
    for warning in warnings:
        lines += [f"> **Warning:** {warning}", ""]
    lines += [f"- {item}" for item in inputs]
    lines += [
        "",
        "## Deadline hit rate by tier",
        "",
        "Met / jobs with a deadline. Jobs still pending or running when the replay ended count "
        "as missed (and are counted under unfinished).",
        "",
        *deadline_table(figures, markdown=True),
        "",
        "## Wait by tier (first start - submit, started jobs)",
        "",
        *wait_table(figures, markdown=True),
        "",
        "## Cost and capacity",
        "",
        "GPU-hours and cost are for provisioned nodes, launch to removal. Utilization is used "
        "GPU-seconds (lost work included) over provisioned GPU-hours x 3600. The last column "
        "checks the engine's accounting: for every finished job used = work + lost.",
        "",
        *cost_table(figures, markdown=True),
        "",
        "## Why deadlines were missed",
        "",
        "Each missed deadline has one cause, so a row's causes add up to its misses. "
        f"*{INFEASIBLE}*: its runtime alone ends after the deadline, or it is wider than its "
        f"queue could ever admit. Otherwise the largest of the time it lost: *{WAITED_FOR_QUOTA}* "
        f"(pending in its queue before its first admission), *{WAITED_FOR_NODE}* (admitted, "
        f"before its first start), *{INTERRUPTED}* (work redone after spot reclaims, and the "
        f"waits that followed), *{PREEMPTED}* (work redone after Kueue took its quota back, and "
        "the waits that followed); ties go to the earlier cause.",
    ]
    for tier in [ALL_TIERS, *_tier_names(figures)]:
        lines += ["", f"### {'all tiers' if tier == ALL_TIERS else tier}", ""]
        lines += cause_table(figures, tier, markdown=True)
    lines += [
        "",
        "### Deadlines tighter than a node launch",
        "",
        "Missed / jobs whose slack at submit (deadline - submit - runtime) was at least 0 but "
        "less than their pool's provisioning latency: only a node already up could start them "
        "in time, so no mix of spot and on-demand can save them; warm capacity, or room left "
        "on running nodes, can. Their misses are counted under the causes above as well.",
        "",
        *tight_table(figures, markdown=True),
    ]
    lines += [
        "",
        "## Peak GPUs against the pool ceiling",
        "",
        "The most GPUs each run had provisioned at once in each pool (nodes launched and not "
        "yet removed), against the pool's ceiling: the GPUs its quotas promise, at most its "
        "maxGpus.",
        "",
        *ceiling_table(figures, markdown=True),
    ]
    for name, calibration in _calibrated(figures):
        lines += [
            "",
            f"## Risk calibration ({name})",
            "",
            f"{calibration_model.describe(calibration)}. Every deadline risk the run estimated, "
            "binned by predicted risk, against how often that deadline was then missed; "
            "deviation = observed - mean predicted (positive: risk understated). Deciles with "
            f"fewer than {calibration_model.MIN_ESTIMATES} estimates are shown, not judged. "
            "Each pass re-estimates every open deadline, so one deadline gives many estimates. "
            "The recalibrated table scores the same estimates by the risk the online "
            "recalibration made of each, fitted only on the deadlines judged before it "
            "(`controller.sim.judging`); the policy decides its mix on the recalibrated risk "
            "(`policy-raw` on the raw one).",
        ]
        if calibration.count:
            lines += ["", *reliability_table(calibration, markdown=True)]
    if measurements:
        lines += [
            "",
            "## Replay wall time and memory",
            "",
            "Not in summary.json, which stays byte-identical for the same inputs and seed. Peak "
            "RSS is the process's, so it never falls from one run to the next.",
            "",
            *measurement_table(measurements, markdown=True),
        ]
    lines += ["", "## How jobs were assigned", "", assignment, "", "## Policy", "", policy]
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{name}]({name})" for name in plots]
    return "\n".join(lines) + "\n"
