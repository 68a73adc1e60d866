"""Whether the deadline risks mean what they say, and a correction learned from the outcomes.

A risk of 0.4 should mean that four in ten such deadlines are missed: teams page on it and the
policy acts on it. The model's risks do not mean that out of the box (replays found it
optimistic with declared runtimes, and a real cluster's trace found it pessimistic by up to
0.6), and a correction tuned on one replay is tuned to that replay. So the controller judges
its own estimates on its own cluster:

1. **Judged once.** Every estimate of a deadline is recorded (`RiskEstimate`: deadline id, tier,
   predicted risk, when) in an `OutcomeLedger`. When the deadline resolves (met: all its work
   finished in time, which may be before the cutoff; missed: the cutoff passed first) its
   pending estimates are joined with the outcome (`Judged`), once: a second resolution of the
   same deadline, or an estimate recorded after it, counts nothing. A deadline id names one
   occurrence (`deadline_id`: project, deadline and cutoff), so each cutoff of a schedule is
   judged on its own. Estimates are thinned to one per `MIN_INTERVAL_SECONDS` per deadline:
   a pass every few seconds would otherwise weigh a week-long deadline by the thousands.
2. **Reliability table and Brier score** (`calibrate`): the judged pairs binned by predicted
   risk into deciles [0, 0.1), ..., [0.9, 1.0]; per decile the count, mean predicted, observed
   miss frequency and their difference, and, told which deadline each estimate is of, the
   distinct deadlines and the difference's standard error counted by deadline; the Brier
   score; the largest deviation over deciles with at least `MIN_ESTIMATES` estimates. A
   deadline's estimates share one outcome, so a decile of a thousand estimates may hold a
   dozen draws: the standard error says how far chance alone moves its deviation, which the
   count of estimates does not (replays: 0.04 to 0.4 for deciles of 100 to 1,000 estimates).
   One function for the controller and the replay (it takes anything with `risk` and
   `missed`, the replay's `RiskRecord` included), so the two print the same table.
3. **Monotone recalibration** (`fit_recalibration`, `fit_judged`): isotonic regression by
   pool-adjacent-violators of outcome on predicted risk, so a higher raw risk never maps to a
   lower calibrated one (an alert threshold keeps its order); applied by linear interpolation
   between the pooled blocks and held constant beyond the end ones. Isotonic rather than
   logistic because the errors measured are not one slope and offset (pessimistic at one end,
   optimistic at the other on different traces). Each estimate weighs one in the fit, as it
   does in the reliability table and the Brier score the map is judged by; but the map is
   shrunk toward the identity by the number of distinct deadlines judged, not estimates (a
   deadline's estimates share one outcome: one piece of evidence, not hundreds):
   calibrated = w iso(r) + (1 - w) r, w = n / (n + k), n the deadlines, k = `STRENGTH`.
   **One map for all tiers.** The reliability table is kept per tier (what `calibration`
   prints), but the map is fitted on every tier's estimates together: per-tier maps, shrunk
   toward the pooled one, made the calibrated risk worse (replays of Alibaba seeds 0 and 1
   and Philly's busiest 14 days seed 0, each estimate judged: largest decile deviation 0.63,
   0.53, 0.72 with them, 0.39, 0.25, 0.72 without; Brier 0.0223, 0.0157, 0.0115 against
   0.0188, 0.0158, 0.0114): a tier's deadlines are too few, and change too much over time,
   for a map of their own. Weighing each deadline one instead (its n estimates 1/n each)
   was worse too (0.53, 0.58, 0.71; Brier 0.0184, 0.0184, 0.0125).

Pure: plain values in, plain values out; the ledger mutates only itself and reads no clock
(times come with the estimates and outcomes).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

DECILES = 10
MIN_ESTIMATES = 100
"""A decile is judged (counts toward `Calibration.max_deviation`) from this many estimates: with
100 one standard error of an observed frequency of 0.5 is 0.05."""
_EDGES = tuple(k / DECILES for k in range(1, DECILES))
"""The inner bin edges 0.1 ... 0.9, each the float nearest k/10."""

STRENGTH = 20.0
"""Deadlines judged at which the learned map and the identity weigh the same."""
MIN_INTERVAL_SECONDS = 900.0
"""At most one estimate per deadline is recorded per this much time."""
MAX_PER_DEADLINE = 256
"""Estimates pending per deadline, at most: beyond it every second one is dropped and that
deadline's interval doubles (a deadline months away still leaves an even record)."""
MAX_PENDING_DEADLINES = 20_000
"""Deadlines with pending estimates, at most; the least recently estimated are dropped."""
MAX_RESOLVED = 50_000
"""Resolved deadline ids remembered, so that a second resolution counts nothing."""
MAX_JUDGED = 100_000
"""Judged estimates kept (the oldest go first): a few days of 1,000 deadlines."""


class Scored(Protocol):
    """An estimate with its outcome: the controller's `Judged`, the replay's `RiskRecord`."""

    @property
    def risk(self) -> float: ...

    @property
    def missed(self) -> bool: ...


# -- the reliability table and Brier score ---------------------------------------------------------


@dataclass(frozen=True)
class Decile:
    """One bin of predicted risk, [low, high) (the last one [0.9, 1.0])."""

    low: float
    high: float
    count: int
    mean_predicted: float | None
    """None when the bin is empty."""
    observed: float | None
    """The share of its estimates whose deadline was missed; None when empty."""
    deadlines: int | None = None
    """The distinct deadlines its estimates belong to; None when not told which."""
    standard_error: float | None = None
    """The deviation's standard error with a deadline's estimates counted as one draw (they
    share one outcome): sqrt(sum over deadlines of (misses - predicted)^2) / estimates. None
    when not told which deadline each estimate is of, or when the bin is empty. A deviation
    within about two of these is as large as chance alone makes it with that few deadlines."""

    @property
    def deviation(self) -> float | None:
        """observed - mean predicted: positive when the risk was understated."""
        if self.mean_predicted is None or self.observed is None:
            return None
        return self.observed - self.mean_predicted

    @property
    def label(self) -> str:
        closing = "]" if self.high >= 1.0 else ")"
        return f"[{self.low:.1f}, {self.high:.1f}{closing}"


@dataclass(frozen=True)
class Calibration:
    """The reliability table and Brier score of a set of judged estimates."""

    count: int
    missed: int
    """Estimates whose deadline was missed."""
    brier: float | None
    """None when there are no estimates."""
    deciles: tuple[Decile, ...]

    def judged(self, min_count: int = MIN_ESTIMATES) -> tuple[Decile, ...]:
        """The deciles holding at least `min_count` estimates."""
        return tuple(d for d in self.deciles if d.count >= min_count)

    def max_deviation(self, min_count: int = MIN_ESTIMATES) -> float | None:
        """The largest |observed - predicted| over the judged deciles; None when none is."""
        deviations = [abs(d.deviation) for d in self.judged(min_count) if d.deviation is not None]
        return max(deviations, default=None)


def decile_of(risk: float) -> int:
    """The index (0-9) of the decile `risk` falls in: [k/10, (k+1)/10), and 1.0 in the last.

    Raises ValueError for a risk outside [0, 1] or not a number.
    """
    if not 0.0 <= risk <= 1.0:  # NaN fails this too
        raise ValueError(f"a risk is a probability in [0, 1], got {risk!r}")
    return bisect_right(_EDGES, risk)


def calibrate(
    records: Iterable[Scored], *, deadline: Callable[[Any], Hashable] | None = None
) -> Calibration:
    """The reliability table and Brier score of `records` (1 for a miss, 0 for a hit).

    `deadline` names the deadline a record is an estimate of (its outcome's draw): with it,
    each decile also counts its deadlines and the deviation's standard error by deadline.

    Raises ValueError naming the record's position when a risk is outside [0, 1].
    """
    counts = [0] * DECILES
    predicted = [0.0] * DECILES
    misses = [0] * DECILES
    residuals: list[dict[Hashable, float]] = [{} for _ in range(DECILES)]
    squared = 0.0
    total = missed = 0
    for position, record in enumerate(records):
        try:
            index = decile_of(record.risk)
        except ValueError as exc:
            raise ValueError(f"estimate {position}: {exc}") from None
        outcome = 1.0 if record.missed else 0.0
        counts[index] += 1
        predicted[index] += record.risk
        misses[index] += bool(record.missed)
        squared += (record.risk - outcome) ** 2
        total += 1
        missed += bool(record.missed)
        if deadline is not None:
            by_deadline = residuals[index]
            key = deadline(record)
            by_deadline[key] = by_deadline.get(key, 0.0) + outcome - record.risk
    deciles = tuple(
        Decile(
            low=k / DECILES,
            high=(k + 1) / DECILES,
            count=counts[k],
            mean_predicted=predicted[k] / counts[k] if counts[k] else None,
            observed=misses[k] / counts[k] if counts[k] else None,
            deadlines=len(residuals[k]) if deadline is not None else None,
            standard_error=math.sqrt(sum(r * r for r in residuals[k].values())) / counts[k]
            if deadline is not None and counts[k]
            else None,
        )
        for k in range(DECILES)
    )
    return Calibration(
        count=total, missed=missed, brier=squared / total if total else None, deciles=deciles
    )


def calibration_document(calibration: Calibration) -> dict[str, Any]:
    """A JSON view: the table, the Brier score and the largest judged deviation."""
    return {
        "estimates": calibration.count,
        "missed": calibration.missed,
        "brier_score": calibration.brier,
        "min_estimates_judged": MIN_ESTIMATES,
        "max_abs_deviation_judged": calibration.max_deviation(),
        "deciles": [
            {
                "range": d.label,
                "count": d.count,
                "mean_predicted": d.mean_predicted,
                "observed": d.observed,
                "deviation": d.deviation,
                "deadlines": d.deadlines,
                "standard_error": d.standard_error,
            }
            for d in calibration.deciles
        ],
    }


RELIABILITY_HEADER = (
    "predicted risk",
    "estimates",
    "mean predicted",
    "observed",
    "deviation",
    "deadlines",
    "+/- 2 s.e.",
)
JUDGED_HEADER = f">= {MIN_ESTIMATES} estimates"


def _fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def _brier(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.4f}"


def reliability_rows(calibration: Calibration) -> list[list[str]]:
    """The reliability table's cells (`RELIABILITY_HEADER`, then whether judged)."""
    return [
        [
            d.label,
            f"{d.count:,}",
            _fraction(d.mean_predicted),
            _fraction(d.observed),
            _signed(d.deviation),
            "-" if d.deadlines is None else f"{d.deadlines:,}",
            _fraction(None if d.standard_error is None else 2 * d.standard_error),
            "yes" if d.count >= MIN_ESTIMATES else "no",
        ]
        for d in calibration.deciles
    ]


def describe(calibration: Calibration) -> str:
    """One line: estimates, Brier score, largest judged deviation."""
    if calibration.count == 0:
        return "no risk estimates"
    worst = calibration.max_deviation()
    judged = len(calibration.judged())
    worst_text = (
        f"no decile holds {MIN_ESTIMATES} estimates"
        if worst is None
        else f"largest |observed - predicted| {worst:.3f} over the {judged} deciles with "
        f">= {MIN_ESTIMATES} estimates"
    )
    return (
        f"{calibration.count:,} estimates ({calibration.missed:,} for deadlines then missed), "
        f"Brier score {_brier(calibration.brier)}, {worst_text}"
    )


# -- estimates judged once -------------------------------------------------------------------------


def deadline_id(project: str, deadline: str, cutoff: float) -> str:
    """One occurrence of a deadline: a schedule's every cutoff is judged on its own."""
    return f"{project}/{deadline}@{cutoff:.0f}"


@dataclass(frozen=True)
class RiskEstimate:
    deadline_id: str
    tier: str
    risk: float
    at: float
    """When it was estimated (epoch seconds)."""


@dataclass(frozen=True)
class Judged:
    """An estimate joined with its deadline's outcome."""

    deadline_id: str
    tier: str
    risk: float
    at: float
    missed: bool
    resolved_at: float


@dataclass
class _Pending:
    estimates: list[RiskEstimate] = field(default_factory=list)
    interval: float = MIN_INTERVAL_SECONDS


class OutcomeLedger:
    """Estimates waiting for their deadline, and the judged ones; see the module docstring."""

    def __init__(
        self,
        *,
        min_interval: float = MIN_INTERVAL_SECONDS,
        max_per_deadline: int = MAX_PER_DEADLINE,
        max_judged: int = MAX_JUDGED,
    ) -> None:
        self.min_interval = min_interval
        self.max_per_deadline = max(max_per_deadline, 2)
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._resolved: OrderedDict[str, bool] = OrderedDict()
        self.judged: deque[Judged] = deque(maxlen=max_judged)

    def record(self, estimate: RiskEstimate) -> bool:
        """Keep `estimate` for judging: True when kept, False when its deadline was resolved
        already, its risk is not a probability, or another of the deadline's estimates was
        kept less than the interval before it."""
        if estimate.deadline_id in self._resolved or not 0.0 <= estimate.risk <= 1.0:
            return False
        pending = self._pending.get(estimate.deadline_id)
        if pending is None:
            pending = self._pending[estimate.deadline_id] = _Pending(interval=self.min_interval)
            if len(self._pending) > MAX_PENDING_DEADLINES:
                self._pending.popitem(last=False)
        else:
            self._pending.move_to_end(estimate.deadline_id)
            if estimate.at < pending.estimates[-1].at + pending.interval:
                return False
        pending.estimates.append(estimate)
        if len(pending.estimates) > self.max_per_deadline:
            pending.estimates = pending.estimates[::2]
            pending.interval *= 2
        return True

    def resolve(self, deadline_id: str, *, missed: bool, at: float) -> tuple[Judged, ...]:
        """Judge the deadline's pending estimates with its outcome, once: a deadline resolved
        before gives nothing (and so does one never estimated)."""
        if deadline_id in self._resolved:
            return ()
        self._resolved[deadline_id] = missed
        if len(self._resolved) > MAX_RESOLVED:
            self._resolved.popitem(last=False)
        pending = self._pending.pop(deadline_id, None)
        if pending is None:
            return ()
        judged = tuple(
            Judged(e.deadline_id, e.tier, e.risk, e.at, missed, at) for e in pending.estimates
        )
        self.judged.extend(judged)
        return judged

    def pending_count(self) -> int:
        return sum(len(p.estimates) for p in self._pending.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able summary: pending estimates, resolved ids, judged estimates."""
        return {
            "version": 1,
            "pending": {
                d: {
                    "interval": p.interval,
                    "estimates": [[e.tier, e.risk, e.at] for e in p.estimates],
                }
                for d, p in self._pending.items()
            },
            "resolved": dict(self._resolved),
            "judged": [judged_document(j) for j in self.judged],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OutcomeLedger:
        """The ledger `to_dict` summarised. Raises ValueError for one it cannot read."""
        if data.get("version") != 1:
            raise ValueError(f"unknown outcome ledger version {data.get('version')!r}")
        ledger = cls()
        try:
            for d, p in dict(data.get("pending", {})).items():
                ledger._pending[str(d)] = _Pending(
                    estimates=[
                        RiskEstimate(str(d), str(tier), float(risk), float(at))
                        for tier, risk, at in p["estimates"]
                    ],
                    interval=float(p["interval"]),
                )
            ledger._resolved = OrderedDict(
                (str(d), bool(m)) for d, m in dict(data.get("resolved", {})).items()
            )
            ledger.judged.extend(read_judged(data.get("judged", [])))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"unreadable outcome ledger: {exc!r}") from None
        return ledger


def judged_document(judged: Judged) -> dict[str, Any]:
    """One judged estimate as JSON (what `quartermaster calibration --from` reads)."""
    return {
        "deadline": judged.deadline_id,
        "tier": judged.tier,
        "risk": judged.risk,
        "at": judged.at,
        "missed": judged.missed,
        "resolvedAt": judged.resolved_at,
    }


def read_judged(items: Iterable[Any]) -> list[Judged]:
    """Judged estimates from their JSON documents. Raises ValueError naming the first one that
    cannot be read (a risk outside [0, 1], a field missing or of the wrong type)."""
    out = []
    for position, item in enumerate(items):
        try:
            risk = float(item["risk"])
            if not 0.0 <= risk <= 1.0:
                raise ValueError(f"risk {risk!r} outside [0, 1]")
            missed = item["missed"]
            if not isinstance(missed, bool):
                raise ValueError(f"missed is {missed!r}, not true or false")
            out.append(
                Judged(
                    deadline_id=str(item["deadline"]),
                    tier=str(item.get("tier") or ""),
                    risk=risk,
                    at=float(item["at"]),
                    missed=missed,
                    resolved_at=float(item.get("resolvedAt", item["at"])),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"judged estimate {position}: {exc}") from None
    return out


def resolved_since(judged: Iterable[Judged], since: float) -> list[Judged]:
    """The estimates whose deadline resolved at or after `since` (the last N days)."""
    return [j for j in judged if j.resolved_at >= since]


def by_tier(judged: Iterable[Judged]) -> dict[str, list[Judged]]:
    tiers: dict[str, list[Judged]] = {}
    for j in judged:
        tiers.setdefault(j.tier, []).append(j)
    return dict(sorted(tiers.items()))


# -- the monotone recalibration --------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """Points pooled by pool-adjacent-violators: their weighted mean x and y, and weight."""

    x: float
    y: float
    weight: float


def pool_adjacent_violators(points: Iterable[tuple[float, float, float]]) -> tuple[Block, ...]:
    """Isotonic (non-decreasing) regression of y on x with weights: (x, y, weight) in, the
    pooled blocks out in increasing x, their y non-decreasing. Points of equal x are pooled
    first (a step function cannot give one x two values). Zero or negative weights are
    ignored."""
    merged: dict[float, list[float]] = {}
    for x, y, w in points:
        if w > 0:
            held = merged.setdefault(x, [0.0, 0.0])
            held[0] += w * y
            held[1] += w
    return _pooled((x, merged[x][0], merged[x][1]) for x in sorted(merged))


def _pooled(sums: Iterable[tuple[float, float, float]]) -> tuple[Block, ...]:
    """Pool-adjacent-violators over (x, sum of w y, sum of w), one per distinct x in
    increasing order."""
    stack: list[list[float]] = []  # [sum w x, sum w y, sum w]
    for x, wy, w in sums:
        stack.append([w * x, wy, w])
        while len(stack) > 1 and stack[-2][1] / stack[-2][2] > stack[-1][1] / stack[-1][2]:
            top = stack.pop()
            for i in range(3):
                stack[-1][i] += top[i]
    return tuple(Block(x=wx / w, y=wy / w, weight=w) for wx, wy, w in stack)


def outcome_blocks(risks: npt.ArrayLike, missed: npt.ArrayLike) -> tuple[Block, ...]:
    """`pool_adjacent_violators` of outcomes (1 missed, 0 met, each of weight 1) on their risks
    (clamped into [0, 1]), the same blocks to the bit: the fit is over up to `MAX_JUDGED`
    estimates and their risks take few distinct values (fractions of the model's samples), so
    they are counted per distinct risk in arrays, where counts of ones and zeros are exact,
    and only those few are pooled one by one."""
    x = np.clip(np.asarray(risks, dtype=np.float64), 0.0, 1.0)
    distinct, where = np.unique(x, return_inverse=True)
    estimates = np.bincount(where, minlength=len(distinct)).astype(np.float64)
    misses = np.bincount(
        where, weights=np.asarray(missed, dtype=np.float64), minlength=len(distinct)
    )
    return _pooled(zip(distinct.tolist(), misses.tolist(), estimates.tolist(), strict=True))


@dataclass(frozen=True)
class RecalibrationMap:
    """calibrated(r) = weight * iso(r) + (1 - weight) * base(r), base the identity or a
    broader map; iso interpolates linearly between the blocks, constant beyond the ends."""

    xs: tuple[float, ...] = ()
    ys: tuple[float, ...] = ()
    weight: float = 0.0
    evidence: float = 0.0
    """Deadlines (or estimates, for plain pairs) the map was learned from."""
    base: RecalibrationMap | None = None

    def isotonic(self, risk: float) -> float:
        if not self.xs:
            return risk
        if risk <= self.xs[0]:
            return self.ys[0]
        if risk >= self.xs[-1]:
            return self.ys[-1]
        i = bisect_right(self.xs, risk)
        x0, x1, y0, y1 = self.xs[i - 1], self.xs[i], self.ys[i - 1], self.ys[i]
        return y0 + (y1 - y0) * (risk - x0) / (x1 - x0)

    def __call__(self, risk: float) -> float:
        """The calibrated risk of a raw one (clamped into [0, 1] first)."""
        risk = min(max(risk, 0.0), 1.0)
        below = risk if self.base is None else self.base(risk)
        if self.weight <= 0:
            return below
        return self.weight * self.isotonic(risk) + (1 - self.weight) * below


IDENTITY = RecalibrationMap()


def fit_recalibration(
    records: Iterable[Scored],
    *,
    evidence: float | None = None,
    strength: float = STRENGTH,
    base: RecalibrationMap | None = None,
) -> RecalibrationMap:
    """The isotonic map of outcome on risk over `records`, blended with `base` (the identity
    when None) at weight n / (n + strength). n is `evidence` when given (the controller passes
    the number of distinct deadlines), else the number of records."""
    items = records if isinstance(records, Sequence) else list(records)
    n = float(len(items)) if evidence is None else evidence
    if not items or n <= 0:
        return base if base is not None else IDENTITY
    blocks = outcome_blocks(
        np.fromiter((r.risk for r in items), dtype=np.float64, count=len(items)),
        np.fromiter((r.missed for r in items), dtype=np.bool_, count=len(items)),
    )
    return RecalibrationMap(
        xs=tuple(b.x for b in blocks),
        ys=tuple(b.y for b in blocks),
        weight=n / (n + strength),
        evidence=n,
        base=base,
    )


@dataclass(frozen=True)
class Recalibration:
    """The map learned from judged estimates."""

    pooled: RecalibrationMap = IDENTITY

    def __call__(self, tier: str, risk: float) -> float:
        """The calibrated risk of a raw one in `tier` (one map for all tiers today: see the
        module docstring; the tier stays in the call so that callers need not change if
        evidence ever supports maps of their own)."""
        return self.pooled(risk)


def fit_judged(judged: Sequence[Judged], *, strength: float = STRENGTH) -> Recalibration:
    """One map for every tier from the judged estimates, shrunk toward the identity by the
    number of distinct deadlines (see the module docstring for why not per tier)."""
    return Recalibration(
        pooled=fit_recalibration(
            judged, evidence=len({j.deadline_id for j in judged}), strength=strength
        )
    )


# -- the report `quartermaster calibration` prints -------------------------------------------------


def _deadline_of(judged: Judged) -> str:
    return judged.deadline_id


def judged_from_document(data: Any) -> list[Judged]:
    """Judged estimates from a JSON document: a list of them, or an `OutcomeLedger` summary
    (its `judged`). Raises ValueError for anything else."""
    if isinstance(data, list):
        return read_judged(data)
    if isinstance(data, Mapping) and isinstance(data.get("judged"), list):
        return read_judged(data["judged"])
    raise ValueError("expected a list of judged estimates or an outcome ledger's summary")


def _padded(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  "
        + "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def format_report(judged: Sequence[Judged], *, since: float, until: float) -> str:
    """The reliability table, Brier score and judged counts of the estimates whose deadline
    resolved in [since, until]: all tiers, then each tier. The risks are the raw ones the
    controller estimated (what the recalibration learns from)."""
    window = [j for j in judged if since <= j.resolved_at <= until]
    days = (until - since) / 86_400
    lines = [f"Deadline risk calibration, deadlines resolved in the last {days:g} days"]
    if not window:
        lines.append("no judged estimates in that window")
        return "\n".join(lines) + "\n"
    groups = [
        ("all tiers", window),
        *((f"tier {t}", items) for t, items in by_tier(window).items()),
    ]
    for name, items in groups:
        result = calibrate(items, deadline=_deadline_of)
        deadlines = len({j.deadline_id for j in items})
        missed = len({j.deadline_id for j in items if j.missed})
        lines += [
            "",
            f"{name}: {deadlines:,} deadlines judged ({missed:,} missed); {describe(result)}",
            *_padded([[*RELIABILITY_HEADER, JUDGED_HEADER], *reliability_rows(result)]),
        ]
    return "\n".join(lines) + "\n"
