"""Runtimes learned from finished work: how long a project's jobs really run.

The risk model samples each workload's runtime from a lognormal around what it declares
(`expected-duration-seconds`, spread `SIGMA_ANNOTATED`) or, without a declaration, around the
project's median from history or a prior of an hour. Declarations are habitually wrong in a
project-specific way (one team always asks for half of what it needs, another pads by 3x), and
that bias is what made the model's risks mean something else than they said. So, from every
Workload that finished, this module keeps per project (and per queue, and per user label where
present) the distribution of

- log(actual / declared) for work that declared a runtime, and
- log(actual) for work that did not,

and gives the risk model a lognormal for a new workload of that key (3Sigma, EuroSys'18:
predict with the distribution of past runtimes, not a point).

**Actual runtime** is what the risk model's own clock would have counted when the workload
finished: `WorkloadView.elapsed(finished_at)`, i.e. from its pods' readiness (else its
admission) to its finish, plus Kueue's `accumulatedPastExecutionTimeSeconds` of earlier
admissions. Queueing is not runtime; a run redone after an eviction is. Learning the same
quantity the model subtracts (`total - elapsed`) keeps the two consistent.

**Sketch.** Each key holds a fixed grid of log-space bins (`BINS` per distribution), and per bin
the decayed weight and the decayed weighted sum of the values that fell in it (so a bin knows
its own mean: a project that always runs exactly 2x is learned as exactly 2x, not as the bin's
centre). Quantiles come from those weighted centroids; the median and the spread
(q84 - q16) / 2 fit the lognormal the model samples. Quantiles rather than moments so that a
handful of jobs killed after a second (also `Finished`) do not blow up the spread. Values
outside the grid are clamped to its end bins (a ratio beyond 1/55..55, a runtime beyond
1 s..103 days). Memory per key is fixed: two arrays of `BINS` float32 per distribution that
has seen data (1.3 kB of arrays with both, about 1.5 kB per key in all: `bench/bench_learning.py`);
keys are at most `MAX_KEYS`, least recently updated evicted first.

**Forgetting: a half-life in finished workloads of the key, not in time.** A project's habits
change with its code, which changes as it submits work; counting finished workloads forgets
at the pace evidence arrives: a busy project adapts in a day, a quiet one keeps what it has
until new evidence replaces it (a half-life in time would leave a project that paused for the
holidays with no history at all). It is also independent of the clock, so a replay learns the
same thing however fast it runs, and tests need no dates. Implemented without touching old
bins: each new observation weighs `scale`, and `scale` grows by 2^(1/half-life) per update
(renormalised when large), which is the same as decaying everything older.

**Shrinkage.** A key with effective weight n (decayed count) is blended with its parent (user
label -> queue -> project -> the caller's prior) with a pseudo-count k: mu = (n m + k mu0) /
(n + k), sigma^2 = (n s^2 + k sigma0^2) / (n + k). With no history the prior comes back exactly
(the declared runtime and `SIGMA_ANNOTATED`, or whatever prior the caller passes).

**Persistence: a compact summary kept by the controller (a ConfigMap), not rebuilt.** The
cluster does not keep what a rebuild needs: Kueue deletes a finished Workload with its Job
(`ttlSecondsAfterFinished`, or its own retention policy when configured), and Prometheus has
no series carrying a workload's declared runtime next to its real one (our median-runtime query
is per project, already aggregated). A summary is small (sparse non-empty bins, rounded) and
makes a restart lose nothing; `to_dict` / `from_dict` are that summary. It also keeps the
`watermark` and the recently counted workloads, so the finished Workloads still present after a
restart are not counted twice. Where it is written is the reconciler's business, not this
module's: `controller.reconcile.learned_store` keeps it, with the outcome ledger, in the
ConfigMap `quartermaster-learned` beside the controller (not the policy's status, which every
pass rewrites and `explain` reads), written at most every five minutes and on a graceful stop;
where the API server serves no ConfigMaps it stays in memory and a restart starts afresh.

Pure: plain values in, plain values out; the learner mutates only itself (a fold over finished
workloads), and never reads a clock.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from controller.risk.workloads import WorkloadView

FloatArray = npt.NDArray[np.float32]

BINS = 80
RATIO_LOW, RATIO_WIDTH = -4.0, 0.1
"""log(actual/declared) bins: [-4, 4) in steps of 0.1, a ratio of 1/55 to 55."""
RUNTIME_LOW, RUNTIME_WIDTH = 0.0, 0.2
"""log(seconds) bins: [0, 16) in steps of 0.2, one second to 103 days."""

HALF_LIFE = 100.0
"""Finished workloads of a key after which an observation weighs half: an effective memory of
about 144 (1/ln 2 of it), enough for a median good to a tenth of the spread, short enough that
a change of habit shows within a hundred runs."""
PSEUDO_COUNT_DECLARED = 10.0
"""Weight of the parent's (finally the declared runtime's) view against a key's history: ten
finished workloads pull the estimate halfway to what they show."""
PSEUDO_COUNT_UNDECLARED = 3.0
"""The same for undeclared work, lower: the prior there (a project median, or an hour for
everyone) knows less about this key than a declaration does."""
MAX_KEYS = 4096
"""Keys held at once (project, project/queue, project/queue/user); the least recently updated
goes first. 1,000 projects with a few queues each fit."""
RECENT_SECONDS = 600.0
"""A finished workload up to this much older than the newest one counted may still arrive
(watch lag, a restart): it is counted if not counted yet; older ones are taken as counted."""
MAX_RECENT = 20_000
"""Ids of recently counted workloads kept, at most."""

MAX_ANSWERS = 4096
"""Projects whose estimates are remembered, and estimates per project, at most."""

_RENORMALISE_AT = 1e18
_Z84 = 0.8413447460685429
"""Phi(1): the quantiles q(1 - _Z84) and q(_Z84) of a normal lie one sigma either side."""


@dataclass(frozen=True)
class FinishedRun:
    """A finished workload as the learner counts it: plain values, no Kubernetes."""

    uid: str
    """Unique per workload (namespace/name, or the object's uid): what "counted once" means."""
    project: str
    finished_at: float
    actual_seconds: float
    declared_seconds: float | None = None
    queue: str | None = None
    user: str | None = None


@dataclass(frozen=True)
class RuntimeEstimate:
    """A lognormal for a workload's total runtime, as `risk.deadline.Job` takes it."""

    mean_seconds: float
    """The distribution's mean (the model's `Job.mean_seconds`)."""
    sigma: float
    """Its log-space spread (the model's `Job.sigma`)."""
    evidence: float
    """The effective number of finished workloads it rests on (decayed), over the levels
    consulted; 0 when it is the prior."""
    source: str
    """`prior`, or the most specific key that had history: `project`, `queue`, `user`."""

    @property
    def median_seconds(self) -> float:
        return self.mean_seconds * math.exp(-self.sigma * self.sigma / 2)


def finished_run(
    view: WorkloadView, project: str, user_label: str | None = None
) -> FinishedRun | None:
    """The run `view` contributes, or None when it has not finished or its times do not say
    how long it ran (no admission time, a finish before it, a zero runtime)."""
    if not view.finished or view.finished_at is None or view.admitted_at is None:
        return None
    actual = view.elapsed(view.finished_at)
    if not (actual > 0 and math.isfinite(actual)):
        return None
    user = view.labels.get(user_label) if user_label else None
    return FinishedRun(
        uid=f"{view.namespace}/{view.name}",
        project=project,
        finished_at=view.finished_at,
        actual_seconds=actual,
        declared_seconds=view.expected_duration,
        queue=view.queue or None,
        user=user or None,
    )


Key = tuple[str, ...]


def keys_of(project: str, queue: str | None, user: str | None) -> tuple[tuple[str, Key], ...]:
    """(level, key) from the least to the most specific: project, project/queue,
    project/queue/user (a level with no value is skipped; a user without a queue is keyed
    project/""/user)."""
    keys: list[tuple[str, Key]] = [("project", (project,))]
    if queue:
        keys.append(("queue", (project, queue)))
    if user:
        keys.append(("user", (project, queue or "", user)))
    return tuple(keys)


class _Sketch:
    """Decayed weighted log-space bins of one distribution; see the module docstring."""

    __slots__ = ("low", "scale", "sums", "weights", "width")

    def __init__(self, low: float, width: float) -> None:
        self.low = low
        self.width = width
        self.weights: FloatArray = np.zeros(BINS, dtype=np.float32)
        self.sums: FloatArray = np.zeros(BINS, dtype=np.float32)
        self.scale = 1.0
        """What the latest observation weighs; everything older weighs relatively less."""

    def add(self, value: float, growth: float) -> None:
        index = min(max(int((value - self.low) / self.width), 0), BINS - 1)
        clamped = min(max(value, self.low), self.low + BINS * self.width)
        self.scale *= growth
        self.weights[index] += self.scale
        self.sums[index] += self.scale * clamped
        if self.scale > _RENORMALISE_AT:
            self.weights /= np.float32(self.scale)
            self.sums /= np.float32(self.scale)
            self.scale = 1.0

    @property
    def evidence(self) -> float:
        """The decayed count: the weight of everything seen, in units of the newest."""
        return float(self.weights.sum(dtype=np.float64)) / self.scale

    def centroids(self) -> tuple[list[float], list[float]]:
        """(means, weights) of the non-empty bins, in order."""
        filled = np.nonzero(self.weights > 0)[0]
        weights = self.weights[filled].astype(np.float64)
        means = self.sums[filled].astype(np.float64) / weights
        return [float(m) for m in means], [float(w) for w in weights]


def weighted_quantile(means: list[float], weights: list[float], q: float) -> float:
    """The q-quantile of weighted point masses (sorted by mean): each mass sits at the middle
    of its share of the cumulative weight, linear between, constant beyond the end ones.

    Raises ValueError when there is no weight.
    """
    total = sum(weights)
    if not means or total <= 0:
        raise ValueError("no weight to take a quantile of")
    target = q * total
    cumulative = 0.0
    previous_mid = previous_mean = None
    for mean, weight in zip(means, weights, strict=True):
        mid = cumulative + weight / 2
        if target <= mid:
            if previous_mid is None or previous_mean is None:
                return mean
            share = (target - previous_mid) / (mid - previous_mid)
            return previous_mean + share * (mean - previous_mean)
        previous_mid, previous_mean = mid, mean
        cumulative += weight
    return means[-1]


@dataclass(frozen=True)
class LogStats:
    """A distribution in log space as the lognormal fit sees it."""

    centre: float
    """The median of the logs."""
    spread: float
    """(q84 - q16) / 2 of the logs: sigma for a normal, robust to a few outliers."""
    evidence: float


def _stats(sketch: _Sketch | None) -> LogStats | None:
    if sketch is None:
        return None
    evidence = sketch.evidence
    if evidence <= 0:
        return None
    means, weights = sketch.centroids()
    centre = weighted_quantile(means, weights, 0.5)
    spread = (
        weighted_quantile(means, weights, _Z84) - weighted_quantile(means, weights, 1 - _Z84)
    ) / 2
    return LogStats(centre=centre, spread=max(spread, 0.0), evidence=evidence)


def shrink(
    stats: LogStats | None, prior_mu: float, prior_sigma: float, pseudo_count: float
) -> tuple[float, float]:
    """(mu, sigma) of `stats` blended with the prior (mu0, sigma0) at weights n and k; the
    prior itself when there are no stats."""
    if stats is None:
        return prior_mu, prior_sigma
    n, k = stats.evidence, pseudo_count
    mu = (n * stats.centre + k * prior_mu) / (n + k)
    variance = (n * stats.spread**2 + k * prior_sigma**2) / (n + k)
    return mu, math.sqrt(variance)


class _Entry:
    __slots__ = ("declared", "undeclared")

    def __init__(self) -> None:
        self.declared: _Sketch | None = None
        self.undeclared: _Sketch | None = None


class RuntimeLearner:
    """Per-key runtime distributions learned from finished workloads, bounded in memory.

    `observe` each finished workload (repeats are ignored: see `RECENT_SECONDS`), then ask
    `declared` or `undeclared` for the lognormal of a new one.
    """

    def __init__(
        self,
        *,
        half_life: float = HALF_LIFE,
        max_keys: int = MAX_KEYS,
        pseudo_count_declared: float = PSEUDO_COUNT_DECLARED,
        pseudo_count_undeclared: float = PSEUDO_COUNT_UNDECLARED,
    ) -> None:
        if not (half_life > 0 and max_keys > 0):
            raise ValueError("half_life and max_keys must be positive")
        self.half_life = half_life
        self.max_keys = max_keys
        self.pseudo_count_declared = pseudo_count_declared
        self.pseudo_count_undeclared = pseudo_count_undeclared
        self._growth = 2.0 ** (1.0 / half_life)
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self.watermark = -math.inf
        """The latest finish counted."""
        self._recent: OrderedDict[str, float] = OrderedDict()
        """uid -> finish, for the workloads counted within `RECENT_SECONDS` of the watermark."""
        self.observed = 0
        """Workloads counted since the learner began (restored ones included)."""
        self._answers: dict[str, dict[tuple[Any, ...], tuple[float, float, float, str]]] = {}
        """Per project, the estimates asked since its last finished workload: a pass asks for
        thousands of pending workloads of a few hundred keys, and a key's answer changes only
        when something of its project finishes."""

    def __len__(self) -> int:
        return len(self._entries)

    def _entry(self, key: Key) -> _Entry:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
            if len(self._entries) > self.max_keys:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        return entry

    def _seen(self, run: FinishedRun) -> bool:
        """Whether `run` was counted already (or is too old to tell, and taken as counted)."""
        if run.finished_at < self.watermark - RECENT_SECONDS:
            return True
        return run.uid in self._recent

    def _remember(self, run: FinishedRun) -> None:
        self._recent[run.uid] = run.finished_at
        self.watermark = max(self.watermark, run.finished_at)
        horizon = self.watermark - RECENT_SECONDS
        # Insertion order is about finish order: drop from the front while it is old (an
        # out-of-order old one goes when it reaches the front, or at the size bound).
        while self._recent:
            uid, finished = next(iter(self._recent.items()))
            if finished >= horizon and len(self._recent) <= MAX_RECENT:
                break
            del self._recent[uid]

    def observe(self, run: FinishedRun) -> bool:
        """Count `run` once: True when it was counted, False for a repeat or an unusable one."""
        if not (run.actual_seconds > 0 and math.isfinite(run.actual_seconds)):
            return False
        declared = run.declared_seconds
        if declared is not None and not (declared > 0 and math.isfinite(declared)):
            declared = None
        if self._seen(run):
            return False
        self._remember(run)
        self.observed += 1
        self._answers.pop(run.project, None)
        if declared is not None:
            value = math.log(run.actual_seconds / declared)
        else:
            value = math.log(run.actual_seconds)
        for _, key in keys_of(run.project, run.queue, run.user):
            entry = self._entry(key)
            if declared is not None:
                if entry.declared is None:
                    entry.declared = _Sketch(RATIO_LOW, RATIO_WIDTH)
                entry.declared.add(value, self._growth)
            else:
                if entry.undeclared is None:
                    entry.undeclared = _Sketch(RUNTIME_LOW, RUNTIME_WIDTH)
                entry.undeclared.add(value, self._growth)
        return True

    def observe_all(self, runs: Iterable[FinishedRun]) -> int:
        """Count each of `runs` once, in finish order; how many were new."""
        return sum(self.observe(r) for r in sorted(runs, key=lambda r: (r.finished_at, r.uid)))

    def _chain(
        self,
        project: str,
        queue: str | None,
        user: str | None,
        *,
        declared: bool,
        prior_mu: float,
        prior_sigma: float,
    ) -> tuple[float, float, float, str]:
        """(mu, sigma, evidence, source): the prior shrunk level by level toward each key's
        history, least specific first."""
        answers = self._answers.get(project)
        if answers is None:
            if len(self._answers) >= MAX_ANSWERS:
                self._answers.clear()
            answers = self._answers[project] = {}
        asked = (queue, user, declared, prior_mu, prior_sigma)
        answer = answers.get(asked)
        if answer is None:
            answer = self._answer(
                project, queue, user, declared=declared, prior_mu=prior_mu, prior_sigma=prior_sigma
            )
            if len(answers) >= MAX_ANSWERS:
                answers.clear()
            answers[asked] = answer
        return answer

    def _answer(
        self,
        project: str,
        queue: str | None,
        user: str | None,
        *,
        declared: bool,
        prior_mu: float,
        prior_sigma: float,
    ) -> tuple[float, float, float, str]:
        mu, sigma, evidence, source = prior_mu, prior_sigma, 0.0, "prior"
        k = self.pseudo_count_declared if declared else self.pseudo_count_undeclared
        for level, key in keys_of(project, queue, user):
            entry = self._entries.get(key)
            sketch = None if entry is None else entry.declared if declared else entry.undeclared
            stats = _stats(sketch)
            if stats is None:
                continue
            mu, sigma = shrink(stats, mu, sigma, k)
            evidence = max(evidence, stats.evidence)
            source = level
        return mu, sigma, evidence, source

    def declared(
        self,
        project: str,
        declared_seconds: float,
        *,
        queue: str | None = None,
        user: str | None = None,
        prior_sigma: float,
    ) -> RuntimeEstimate:
        """The runtime of a workload declaring `declared_seconds`: the declaration times the
        learned ratio. With no history: exactly (declared_seconds, prior_sigma), today's model
        (the prior's log-ratio centre is -sigma^2/2, so its mean is the declaration)."""
        prior_mu = -prior_sigma * prior_sigma / 2
        mu, sigma, evidence, source = self._chain(
            project, queue, user, declared=True, prior_mu=prior_mu, prior_sigma=prior_sigma
        )
        if source == "prior":
            return RuntimeEstimate(declared_seconds, prior_sigma, 0.0, "prior")
        mean = declared_seconds * math.exp(mu + sigma * sigma / 2)
        return RuntimeEstimate(mean, sigma, evidence, source)

    def undeclared(
        self,
        project: str,
        *,
        queue: str | None = None,
        user: str | None = None,
        prior_mean_seconds: float,
        prior_sigma: float,
    ) -> RuntimeEstimate:
        """The runtime of a workload declaring nothing: the learned runtimes, shrunk toward
        the prior (the project's median from Prometheus, or an hour) with no history exactly
        the prior."""
        prior_mu = math.log(prior_mean_seconds) - prior_sigma * prior_sigma / 2
        mu, sigma, evidence, source = self._chain(
            project, queue, user, declared=False, prior_mu=prior_mu, prior_sigma=prior_sigma
        )
        if source == "prior":
            return RuntimeEstimate(prior_mean_seconds, prior_sigma, 0.0, "prior")
        return RuntimeEstimate(math.exp(mu + sigma * sigma / 2), sigma, evidence, source)

    def history(self, project: str) -> dict[str, float]:
        """How much a project's estimates rest on: the decayed counts of its finished work,
        declared and undeclared, at the project level (what `explain` shows)."""
        entry = self._entries.get((project,))
        if entry is None:
            return {"declared": 0.0, "undeclared": 0.0}
        return {
            "declared": 0.0 if entry.declared is None else entry.declared.evidence,
            "undeclared": 0.0 if entry.undeclared is None else entry.undeclared.evidence,
        }

    def nbytes(self) -> int:
        """Bytes held by the sketches' arrays (what grows with keys; the dict's own overhead
        is measured by the benchmark)."""
        total = 0
        for entry in self._entries.values():
            for sketch in (entry.declared, entry.undeclared):
                if sketch is not None:
                    total += sketch.weights.nbytes + sketch.sums.nbytes
        return total

    # -- the summary kept across restarts ------------------------------------------------------

    def to_dict(self, *, digits: int = 5) -> dict[str, Any]:
        """A JSON-able summary: the parameters, the watermark and recent ids, and per key the
        non-empty bins (index, weight, mean) relative to its scale, rounded to `digits`
        significant digits. Bins weighing under 1e-6 of their sketch's newest observation are
        dropped: forgotten already."""
        keys = []
        for key, entry in self._entries.items():
            item: dict[str, Any] = {"key": list(key)}
            for name, sketch in (("declared", entry.declared), ("undeclared", entry.undeclared)):
                if sketch is None:
                    continue
                weights = sketch.weights.astype(np.float64) / sketch.scale
                sums = sketch.sums.astype(np.float64) / sketch.scale
                bins = [
                    [int(i), _round(weights[i], digits), _round(sums[i] / weights[i], digits)]
                    for i in np.nonzero(weights > 1e-6)[0]
                ]
                item[name] = bins
            keys.append(item)
        return {
            "version": 1,
            "halfLife": self.half_life,
            "observed": self.observed,
            "watermark": None if self.watermark == -math.inf else self.watermark,
            "recent": dict(self._recent),
            "keys": keys,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, max_keys: int = MAX_KEYS) -> RuntimeLearner:
        """The learner `to_dict` summarised. Raises ValueError for a summary it cannot read
        (the caller then starts afresh: a lost summary costs history, not correctness)."""
        try:
            if data.get("version") != 1:
                raise ValueError(f"unknown runtime summary version {data.get('version')!r}")
            learner = cls(half_life=float(data["halfLife"]), max_keys=max_keys)
            learner.observed = int(data.get("observed", 0))
            watermark = data.get("watermark")
            learner.watermark = -math.inf if watermark is None else float(watermark)
            recent = sorted(dict(data.get("recent", {})).items(), key=lambda item: item[1])
            learner._recent = OrderedDict((str(u), float(t)) for u, t in recent)
            for item in data["keys"]:
                entry = learner._entry(tuple(str(p) for p in item["key"]))
                for name, low, width in (
                    ("declared", RATIO_LOW, RATIO_WIDTH),
                    ("undeclared", RUNTIME_LOW, RUNTIME_WIDTH),
                ):
                    if name not in item:
                        continue
                    sketch = _Sketch(low, width)
                    for index, weight, mean in item[name]:
                        if not 0 <= int(index) < BINS:
                            raise ValueError(f"bin {index} outside 0..{BINS - 1}")
                        sketch.weights[int(index)] = weight
                        sketch.sums[int(index)] = weight * mean
                    setattr(entry, name, sketch)
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"unreadable runtime summary: {exc!r}") from None
        return learner


def _round(value: float, digits: int) -> float:
    return float(f"{value:.{digits}g}")
