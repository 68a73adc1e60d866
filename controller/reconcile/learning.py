"""What the controller learns from its own cluster between passes: runtimes and outcomes.

The shell around `controller.risk.learning` and `controller.risk.recalibration`: each pass

1. counts the Workloads Kueue reports Finished into the `RuntimeLearner` (`finished_run`: from
   pods-ready, else admission, to the finish, plus earlier admissions), which the pass's risk
   model then samples (`Observation.runtimes`);
2. records each open deadline's raw risk in the `OutcomeLedger`, with the Workloads counting
   toward it then, and judges a deadline occurrence once its outcome is known: *met* when all
   its Workloads finished by the cutoff, *missed* at the first pass after the cutoff when one
   was still unfinished then or finished after it;
3. refits the monotone recalibration (`fit_judged`) when new judgements arrived (and
   only then: REFIT_GROWTH keeps a large ledger's refits rare), and gives each deadline's
   calibrated risk for the metrics.

**Kept across restarts.** `summary()` holds everything learned: the learner's summary
(`RuntimeLearner.to_dict`), the ledger's (`OutcomeLedger.to_dict`), the deadline occurrences
still waiting for their outcome with their Workloads, and how many judgements arrived since the
last fit; `from_summary` rebuilds from it the same learning (the same runtime estimates, the
same recalibration, the same deadlines waiting to be judged). `controller.reconcile.learned_store`
keeps it in a ConfigMap beside the controller and says why there. Where the API server serves
no ConfigMaps (the CRD-only test server) it stays in memory and a restart starts afresh: with
no history the risk model's runtimes are exactly today's (declared runtime and fixed spread)
and the calibrated risk is the raw one, so a lost summary costs accuracy, never correctness.
`revision` counts the changes a summary would show, so a writer knows when there is news.

A Workload that disappears (Kueue deleted it with its Job) before it was seen finished is taken
as finished when last seen unfinished: late only if that was after the cutoff. A deadline's
members are every Workload that counted toward it at any of its estimates (one outcome per
deadline occurrence, as the ledger judges); one whose part is settled (finished by the cutoff,
or gone before it) is let go, so that what a deadline weeks out keeps is its unfinished work,
not every Workload that ever counted toward it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.api.policy_set import PolicySet
from controller.risk.learning import RuntimeLearner, finished_run
from controller.risk.model import DeadlineReport, counting_toward, project_workloads
from controller.risk.recalibration import (
    Judged,
    OutcomeLedger,
    Recalibration,
    RiskEstimate,
    deadline_id,
    fit_judged,
)
from controller.risk.workloads import WorkloadView

REFIT_GROWTH = 0.05
"""The recalibration is refitted once the estimates judged since the last fit number this share
of those it was fitted on (and at least one): a ledger of 100,000 refits seldom."""

Key = tuple[str, str]
"""(namespace, name) of a Workload."""

SUMMARY_VERSION = 1
"""The version of `OutcomeLearning.summary()`; `from_summary` refuses any other."""


@dataclass
class _Open:
    """A deadline occurrence waiting for its outcome.

    Only what can still decide the outcome is kept: a Workload that finished by the cutoff (or
    went while unfinished before it) can no longer make the deadline missed, so it leaves
    `members`, and its key stays in `finished` only while it is still listed (so that it is not
    counted again). A deadline weeks out, with a Workload a second counting toward it, would
    otherwise keep every one of them until its cutoff, in memory and in the summary a restart
    reads."""

    cutoff: float
    members: dict[Key, float] = field(default_factory=dict)
    """Each Workload counting toward it whose part is not settled -> when it was last seen
    unfinished."""
    finished: dict[Key, float] = field(default_factory=dict)
    """Members seen finished by the cutoff and still listed -> their finish."""


class OutcomeLearning:
    """The runtime learner, the outcome ledger and the recalibration, fed pass by pass."""

    def __init__(self) -> None:
        self.runtimes = RuntimeLearner()
        self.ledger = OutcomeLedger()
        self.recalibration = Recalibration()
        self._open: dict[str, _Open] = {}
        self._fitted_size = 0
        self._judged_since_fit = 0
        self.fits = 0
        self.revision = 0
        """Grows with every change `summary()` would show but a Workload's last sighting
        (which moves every pass): a finished run counted, an estimate kept, a judgement, a
        Workload newly counted toward a deadline."""
        self.judged_last: tuple[Judged, ...] = ()
        """The estimates the last `judge` judged (each estimate is judged once, ever)."""

    def learn(self, policy_set: PolicySet, workloads: Sequence[WorkloadView]) -> int:
        """Count the finished Workloads of the policy's projects (each once); how many were
        new. A Workload belongs to the project whose queue it was submitted to."""
        owner = {
            (namespace, project.name): project.name
            for project in policy_set.projects
            for namespace in project.spec.namespaces
        }
        runs = []
        for workload in workloads:
            if not workload.finished:
                continue
            project = owner.get((workload.namespace, workload.queue))
            if project is None and workload.cluster_queue is not None:
                project = (
                    workload.cluster_queue if policy_set.project(workload.cluster_queue) else None
                )
            if project is not None:
                run = finished_run(workload, project)
                if run is not None:
                    runs.append(run)
        counted = self.runtimes.observe_all(runs)
        self.revision += counted
        return counted

    def judge(
        self,
        policy_set: PolicySet,
        reports: Sequence[DeadlineReport],
        workloads: Sequence[WorkloadView],
        now: float,
        *,
        by_project: Mapping[str, Sequence[WorkloadView]] | None = None,
    ) -> dict[tuple[str, str], float]:
        """Judge what resolved, record this pass's estimates, refit if new judgements came;
        the calibrated risk of each deadline reported (the plan's `deadlines`), by (project,
        deadline). `by_project` is `project_workloads` of the same workloads, if the caller
        has it at hand."""
        seen = {(w.namespace, w.name): w for w in workloads}
        judged: list[Judged] = []
        for ident in list(self._open):
            outcome = self._outcome(self._open[ident], seen, now)
            if outcome is not None:
                judged.extend(self.ledger.resolve(ident, missed=outcome, at=now))
                del self._open[ident]
                self.revision += 1
        self.judged_last = tuple(judged)
        self._judged_since_fit += len(judged)
        if self._judged_since_fit and self._judged_since_fit >= REFIT_GROWTH * self._fitted_size:
            self._refit(list(self.ledger.judged))
        tiers = {p.name: p.spec.tier for p in policy_set.projects}
        if by_project is None:
            by_project = project_workloads(policy_set, workloads)
        calibrated = {}
        for report in reports:
            tier = tiers.get(report.project, "")
            calibrated[(report.project, report.deadline)] = self.recalibration(
                tier, report.estimate.risk
            )
            if report.cutoff <= now or not report.workloads:
                continue
            ident = deadline_id(report.project, report.deadline, report.cutoff)
            if self.ledger.record(RiskEstimate(ident, tier, report.estimate.risk, now)):
                self.revision += 1
            project = policy_set.project(report.project)
            deadline = (
                next((d for d in project.spec.deadlines if d.name == report.deadline), None)
                if project is not None
                else None
            )
            if deadline is None:
                continue
            opened = self._open.get(ident)
            if opened is None:
                opened = self._open[ident] = _Open(report.cutoff)
                self.revision += 1
            members, settled = opened.members, opened.finished
            before = len(members)
            members.update(
                (key, now)
                for w in counting_toward(by_project.get(report.project, ()), deadline)
                if (key := (w.namespace, w.name)) not in settled
            )
            self.revision += len(members) - before  # each Workload newly counted
        return calibrated

    def _refit(self, judged: list[Judged], *, since_fit: int = 0) -> None:
        """Fit the recalibration on `judged`; `since_fit` judgements arrived after them."""
        self.recalibration = fit_judged(judged)
        self._fitted_size, self._judged_since_fit = len(judged), since_fit
        self.fits += 1

    def _outcome(self, opened: _Open, seen: Mapping[Key, WorkloadView], now: float) -> bool | None:
        """True missed, False met, None not known yet. Members whose part is settled (finished
        by the cutoff, or gone while unfinished before it) leave `members`; finished ones no
        longer listed leave `finished`."""
        running = False
        settled: list[Key] = []
        for key, last_seen in opened.members.items():
            workload = seen.get(key)
            if workload is not None and workload.finished:
                finish = workload.finished_at if workload.finished_at is not None else now
                if finish > opened.cutoff:
                    return True
                opened.finished[key] = finish
                settled.append(key)
            elif workload is not None:
                opened.members[key] = now
                if now > opened.cutoff:
                    return True
                running = True
            elif last_seen > opened.cutoff:
                return True  # gone, and last seen unfinished after the cutoff
            else:
                settled.append(key)  # gone, taken as finished when last seen, by the cutoff
        for key in settled:
            del opened.members[key]
        gone = [key for key in opened.finished if key not in seen]
        for key in gone:
            del opened.finished[key]
        self.revision += len(settled) + len(gone)
        if now > opened.cutoff or not running:
            return False
        return None

    def summary(self) -> dict[str, Any]:
        """What a restart needs, JSON-able: the learner's and the ledger's summaries, the
        deadline occurrences waiting for their outcome, and the judgements since the last fit
        (the last ones in the ledger's `judged`)."""
        return {
            "version": SUMMARY_VERSION,
            "runtimes": self.runtimes.to_dict(),
            "ledger": self.ledger.to_dict(),
            "open": {
                ident: {
                    "cutoff": opened.cutoff,
                    "members": [[ns, name, at] for (ns, name), at in opened.members.items()],
                    "finished": [[ns, name, at] for (ns, name), at in opened.finished.items()],
                }
                for ident, opened in self._open.items()
            },
            "sinceFit": self._judged_since_fit,
        }

    @classmethod
    def from_summary(cls, data: Mapping[str, Any]) -> OutcomeLearning:
        """The learning `summary()` summarised: the recalibration is fitted again on the
        judgements the last fit saw, so the calibrated risks are the same as before (when the
        ledger dropped its oldest judgements since, on what is left of them).

        Raises ValueError for a summary it cannot read, naming what: the caller then starts
        afresh (a lost summary costs history, not correctness).
        """
        try:
            if data.get("version") != SUMMARY_VERSION:
                raise ValueError(f"unknown learning summary version {data.get('version')!r}")
            runtimes, ledger = data["runtimes"], data["ledger"]
            if not isinstance(runtimes, Mapping) or not isinstance(ledger, Mapping):
                raise ValueError("runtimes and ledger must be objects")
            learning = cls()
            learning.runtimes = RuntimeLearner.from_dict(runtimes)
            learning.ledger = OutcomeLedger.from_dict(ledger)
            for ident, item in dict(data.get("open", {})).items():
                learning._open[str(ident)] = _Open(
                    cutoff=float(item["cutoff"]),
                    members={(str(ns), str(n)): float(at) for ns, n, at in item["members"]},
                    finished={(str(ns), str(n)): float(at) for ns, n, at in item["finished"]},
                )
            since_fit = int(data.get("sinceFit", 0))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"unreadable learning summary: {exc!r}") from None
        judged = list(learning.ledger.judged)
        since_fit = min(max(since_fit, 0), len(judged))
        fitted = judged[: len(judged) - since_fit]
        if fitted:
            learning._refit(fitted, since_fit=since_fit)
            learning.fits = 0
        else:
            learning._judged_since_fit = since_fit
        return learning
