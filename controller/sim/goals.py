"""The simulator's benchmark goals, checked on the figures of replays (`make bench-sim`).

The benchmark replays each trace (Philly's busiest 14 days, the whole of Philly, Alibaba) with
the sized replay policy on several seeds, and each goal is checked on every one of those
cases; a goal is met when it holds in every case:

- **misses and cost**: the policy misses fewer deadlines than every baseline, at a cost no
  higher than the cheaper of fixed-80-20 and reactive;
- **production**: the policy meets at least 99 % of the production tier's deadlines;
- **calibration**: in every decile of the policy's estimated risks holding at least 100
  estimates, the observed share of misses is within 0.05 of the mean predicted risk;
- **recalibration**: the same of the risks as the online recalibration made them
  (`controller.sim.judging`), and their Brier score below the raw risks';
- **mix changes**: the policy changes the mix no more often than reactive;
- **speed**: the whole Philly replay, the policy and every baseline, takes under 5 minutes
  (checked only on the case named `philly`; the machine's cores are the reader's to state).

One replay is one draw: `judge_draws` compares the policy with an ablation over several draws
of a case (`bench/bench_draws.py`), paired by what differs between them, on the means.

A case that lacks what a goal compares (no reactive run, no production tier, no risk
estimates) leaves the goal *not checked* rather than met. The checks and the tables are pure
functions of `CaseNumbers`, which `case_numbers` takes from a replay's figures, so they are
tested on hand-built numbers.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from controller.sim.calibration import MIN_ESTIMATES
from controller.sim.report import Measurement, RunFigures, table

POLICY = "policy"
"""The run the goals judge (`engine.POLICY`'s name); every other run is a baseline."""
PRODUCTION_TIER = "production"
PRODUCTION_TARGET = 0.99
CALIBRATION_TOLERANCE = 0.05
CHEAPER_OF = ("fixed-80-20", "reactive")
REACTIVE = "reactive"
SPEED_CASE = "philly"
SPEED_LIMIT_SECONDS = 300.0

MET, NOT_MET, NOT_CHECKED = "met", "NOT MET", "not checked"


@dataclass(frozen=True)
class RunNumbers:
    """What the goals and the benchmark's table read of one run."""

    name: str
    misses: int
    cost: float
    """Dollars."""
    cost_percent: float | None = None
    """Of on-demand-only's cost; None when it did not run."""
    mix_changes: int = 0
    production_hit_rate: float | None = None
    """None when the run has no production tier or none of its jobs has a deadline."""
    estimates: int = 0
    """Risk estimates recorded (the policy's); 0 for the baselines."""
    calibration_deviation: float | None = None
    """The largest |observed - predicted| over the deciles with `MIN_ESTIMATES` estimates."""
    judged_deciles: int = 0
    brier: float | None = None
    recalibrated_deviation: float | None = None
    """The same of the recalibrated risks; None without them."""
    recalibrated_judged_deciles: int = 0
    recalibrated_brier: float | None = None
    peak: Mapping[str, float] = field(default_factory=dict)
    """Per pool, the peak provisioned GPUs."""
    ceilings: Mapping[str, int] = field(default_factory=dict)
    wall_seconds: float | None = None
    peak_rss_mib: float | None = None


@dataclass(frozen=True)
class CaseNumbers:
    """One trace replayed on one seed: its runs, and what the whole replay took."""

    case: str
    seed: int
    runs: tuple[RunNumbers, ...]
    wall_seconds: float
    """The whole simulation: loading, every run, the summaries and plots."""
    peak_rss_mib: float
    """Of the largest process (this one or a worker)."""

    @property
    def label(self) -> str:
        return f"{self.case} seed {self.seed}"

    def run(self, name: str) -> RunNumbers | None:
        return next((r for r in self.runs if r.name == name), None)

    @property
    def baselines(self) -> tuple[RunNumbers, ...]:
        return tuple(r for r in self.runs if r.name != POLICY)


def case_numbers(
    case: str,
    seed: int,
    figures: Sequence[RunFigures],
    *,
    measurements: Sequence[Measurement] = (),
    wall_seconds: float,
    peak_rss_mib: float,
) -> CaseNumbers:
    """The numbers of one replay, from its runs' figures and measurements."""
    measured = {m.name: m for m in measurements}
    runs = []
    for run in figures:
        production = next((t for t in run.tiers if t.tier == PRODUCTION_TIER), None)
        calibration, recalibrated = run.calibration, run.recalibrated
        measurement = measured.get(run.name)
        runs.append(
            RunNumbers(
                name=run.name,
                misses=run.overall.missed,
                cost=run.total_cost,
                cost_percent=run.cost_vs_on_demand_only,
                mix_changes=run.mix_changes,
                production_hit_rate=None if production is None else production.hit_rate,
                estimates=0 if calibration is None else calibration.count,
                calibration_deviation=None if calibration is None else calibration.max_deviation(),
                judged_deciles=0 if calibration is None else len(calibration.judged()),
                brier=None if calibration is None else calibration.brier,
                recalibrated_deviation=None
                if recalibrated is None
                else recalibrated.max_deviation(),
                recalibrated_judged_deciles=0
                if recalibrated is None
                else len(recalibrated.judged()),
                recalibrated_brier=None if recalibrated is None else recalibrated.brier,
                peak=dict(run.peak_provisioned),
                ceilings=dict(run.ceilings),
                wall_seconds=None if measurement is None else measurement.wall_seconds,
                peak_rss_mib=None if measurement is None else measurement.peak_rss_mib,
            )
        )
    return CaseNumbers(case, seed, tuple(runs), wall_seconds, peak_rss_mib)


# --------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class CaseCheck:
    """One goal on one case: met, not met, or not checked (None), with the numbers."""

    label: str
    met: bool | None
    numbers: str


@dataclass(frozen=True)
class GoalCheck:
    goal: str
    checks: tuple[CaseCheck, ...]

    @property
    def met(self) -> bool | None:
        """False when a case fails it; None when no case, or not every case, was checked."""
        if any(c.met is False for c in self.checks):
            return False
        if not self.checks or any(c.met is None for c in self.checks):
            return None
        return True

    @property
    def verdict(self) -> str:
        return {True: MET, False: NOT_MET, None: NOT_CHECKED}[self.met]

    def lines(self) -> list[str]:
        """The goal's line, then one per case with its numbers."""
        failed = sum(1 for c in self.checks if c.met is False)
        tally = f" ({failed} of {len(self.checks)} cases fail)" if failed else ""
        head = f"goal: {self.goal}: {self.verdict}{tally}"
        marks = {True: "ok ", False: "NO ", None: "-- "}
        return [head, *(f"  {marks[c.met]} {c.label}: {c.numbers}" for c in self.checks)]


def _costs(policy: RunNumbers, other: RunNumbers) -> str:
    """Both costs, as shares of on-demand-only's when both have one, else in dollars."""
    if policy.cost_percent is not None and other.cost_percent is not None:
        return f"{policy.cost_percent:.1f} % vs {other.cost_percent:.1f} % of on-demand-only"
    return f"${policy.cost:,.0f} vs ${other.cost:,.0f}"


def check_misses_and_cost(case: CaseNumbers) -> CaseCheck:
    """Fewer misses than every baseline, at a cost no higher than the cheaper of fixed-80-20
    and reactive."""
    policy = case.run(POLICY)
    cheap = [r for r in (case.run(name) for name in CHEAPER_OF) if r is not None]
    if policy is None or not case.baselines or len(cheap) < len(CHEAPER_OF):
        missing = [n for n in (POLICY, *CHEAPER_OF) if case.run(n) is None]
        return CaseCheck(case.label, None, f"no {', '.join(missing) or 'baseline'} run")
    best = min(case.baselines, key=lambda r: (r.misses, r.name))
    cheapest = min(cheap, key=lambda r: (r.cost, r.name))
    fewer = policy.misses < best.misses
    cheaper = policy.cost <= cheapest.cost
    return CaseCheck(
        case.label,
        fewer and cheaper,
        f"policy {policy.misses:,} misses vs the fewest of the baselines {best.misses:,} "
        f"({best.name}); cost {_costs(policy, cheapest)} ({cheapest.name})",
    )


def check_production(case: CaseNumbers) -> CaseCheck:
    policy = case.run(POLICY)
    rate = None if policy is None else policy.production_hit_rate
    if rate is None:
        return CaseCheck(case.label, None, f"no {PRODUCTION_TIER} deadlines in the policy run")
    return CaseCheck(
        case.label,
        rate >= PRODUCTION_TARGET,
        f"policy meets {100 * rate:.2f} % of {PRODUCTION_TIER} deadlines "
        f"(goal {100 * PRODUCTION_TARGET:g} %)",
    )


def check_calibration(case: CaseNumbers) -> CaseCheck:
    policy = case.run(POLICY)
    if policy is None or not policy.estimates:
        return CaseCheck(case.label, None, "the policy run recorded no risk estimates")
    deviation = policy.calibration_deviation
    if deviation is None:
        return CaseCheck(
            case.label,
            None,
            f"{policy.estimates:,} estimates, no decile holds {MIN_ESTIMATES}",
        )
    brier = "-" if policy.brier is None else f"{policy.brier:.4f}"
    return CaseCheck(
        case.label,
        deviation <= CALIBRATION_TOLERANCE,
        f"largest |observed - predicted| {deviation:.3f} over {policy.judged_deciles} deciles "
        f"with >= {MIN_ESTIMATES} estimates (goal {CALIBRATION_TOLERANCE:g}); "
        f"{policy.estimates:,} estimates, Brier score {brier}",
    )


def check_recalibration(case: CaseNumbers) -> CaseCheck:
    """The recalibrated risks within the tolerance in every judged decile, and a Brier score
    better than the raw risks' (a recalibration that only moved risks around is no gain)."""
    policy = case.run(POLICY)
    if policy is None or policy.recalibrated_brier is None or policy.brier is None:
        return CaseCheck(case.label, None, "the policy run recorded no recalibrated risks")
    deviation = policy.recalibrated_deviation
    if deviation is None:
        return CaseCheck(case.label, None, f"no decile of recalibrated risks holds {MIN_ESTIMATES}")
    return CaseCheck(
        case.label,
        deviation <= CALIBRATION_TOLERANCE and policy.recalibrated_brier < policy.brier,
        f"largest |observed - predicted| {deviation:.3f} over "
        f"{policy.recalibrated_judged_deciles} deciles (goal {CALIBRATION_TOLERANCE:g}); "
        f"Brier score {policy.recalibrated_brier:.4f} recalibrated vs {policy.brier:.4f} raw",
    )


def check_mix_changes(case: CaseNumbers) -> CaseCheck:
    policy, reactive = case.run(POLICY), case.run(REACTIVE)
    if policy is None or reactive is None:
        return CaseCheck(case.label, None, f"no {POLICY if policy is None else REACTIVE} run")
    return CaseCheck(
        case.label,
        policy.mix_changes <= reactive.mix_changes,
        f"policy {policy.mix_changes:,} mix changes vs reactive {reactive.mix_changes:,}",
    )


def check_speed(case: CaseNumbers) -> CaseCheck:
    return CaseCheck(
        case.label,
        case.wall_seconds < SPEED_LIMIT_SECONDS,
        f"{len(case.runs)} runs in {case.wall_seconds:,.1f} s "
        f"(goal under {SPEED_LIMIT_SECONDS:g} s)",
    )


Check = Callable[[CaseNumbers], CaseCheck]
GOALS: tuple[tuple[str, Check, str | None], ...] = (
    (
        "the policy misses fewer deadlines than every baseline, at a cost no higher than the "
        "cheaper of fixed-80-20 and reactive",
        check_misses_and_cost,
        None,
    ),
    (
        f"the policy meets >= {100 * PRODUCTION_TARGET:g} % of {PRODUCTION_TIER} deadlines",
        check_production,
        None,
    ),
    (
        f"calibration within +/-{CALIBRATION_TOLERANCE:g} in every decile holding at least "
        f"{MIN_ESTIMATES} estimates",
        check_calibration,
        None,
    ),
    (
        f"recalibrated risks within +/-{CALIBRATION_TOLERANCE:g} in every decile holding at "
        f"least {MIN_ESTIMATES} estimates, with a Brier score below the raw risks'",
        check_recalibration,
        None,
    ),
    ("no more mix changes than reactive", check_mix_changes, None),
    (
        "the whole Philly replay with the policy and all baselines in under "
        f"{SPEED_LIMIT_SECONDS / 60:g} minutes",
        check_speed,
        SPEED_CASE,
    ),
)
"""Each goal: its statement, its check, and the one case it applies to (None: every case)."""


def check_goals(cases: Sequence[CaseNumbers]) -> list[GoalCheck]:
    """Every goal on every case it applies to, in `GOALS` order."""
    return [
        GoalCheck(goal, tuple(check(c) for c in cases if only is None or c.case == only))
        for goal, check, only in GOALS
    ]


# --------------------------------------------------------------------------- the table


def _percent(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{100 * value:.{digits}f} %"


def _ceiling(run: RunNumbers) -> str:
    cells = []
    for pool in sorted({*run.peak, *run.ceilings}):
        peak, ceiling = run.peak.get(pool), run.ceilings.get(pool)
        over = peak is not None and ceiling is not None and peak > ceiling
        cell = (
            f"{'-' if peak is None else f'{peak:,.0f}'} / "
            f"{'-' if ceiling is None else f'{ceiling:,}'}"
        )
        cells.append(cell + (" exceeds ceiling" if over else ""))
    return "; ".join(cells) or "-"


def case_table(case: CaseNumbers) -> list[str]:
    """Per run of one case: the figures the goals read, its peak against the ceiling, and
    what it took to replay."""
    header = [
        "run",
        "misses",
        "cost",
        "% OD-only",
        f"{PRODUCTION_TIER} met",
        "mix changes",
        "calibration max dev",
        "recalibrated max dev",
        "peak / ceiling GPUs",
        "wall",
        "peak RSS",
    ]
    rows = [
        [
            run.name,
            f"{run.misses:,}",
            f"${run.cost:,.0f}",
            "-" if run.cost_percent is None else f"{run.cost_percent:.1f} %",
            _percent(run.production_hit_rate, 2),
            f"{run.mix_changes:,}",
            "-"
            if run.calibration_deviation is None
            else f"{run.calibration_deviation:.3f} ({run.judged_deciles} deciles)",
            "-"
            if run.recalibrated_deviation is None
            else f"{run.recalibrated_deviation:.3f} ({run.recalibrated_judged_deciles} deciles)",
            _ceiling(run),
            "-" if run.wall_seconds is None else f"{run.wall_seconds:,.1f} s",
            "-" if run.peak_rss_mib is None else f"{run.peak_rss_mib:,.0f} MiB",
        ]
        for run in case.runs
    ]
    return table(header, rows, markdown=False)


@dataclass(frozen=True)
class DrawVerdict:
    """The policy's misses in several draws of one case against another run's, paired."""

    policy_mean: float
    other_mean: float
    wins: int
    """Pairings where the policy missed no more than the other run."""
    pairs: int

    @property
    def met(self) -> bool:
        """No more misses than the other run, on the means."""
        return self.policy_mean <= self.other_mean

    @property
    def excess(self) -> float:
        """How far the policy's mean is above the other's, as a fraction of it (0 if met)."""
        if self.met or not self.other_mean:
            return 0.0
        return self.policy_mean / self.other_mean - 1


def judge_draws(policy: Sequence[int], other: Sequence[int]) -> DrawVerdict:
    """Draw i of the policy against draw i of the other run (the same perturbation, say the
    same decision interval). Raises ValueError unless both have the same number, at least 1."""
    if not policy or len(policy) != len(other):
        raise ValueError(f"expected paired draws, got {len(policy)} and {len(other)}")
    wins = sum(p <= o for p, o in zip(policy, other, strict=True))
    return DrawVerdict(statistics.fmean(policy), statistics.fmean(other), wins, len(policy))
