"""The victim search's shortcut (`Kueue._bound_to_fail`) against the search it skips.

When every candidate in other queues may be evicted only if the preemptor then ends within its
quota, and the preemptor would still borrow with all of its own queue's candidates gone, the
search must fail once it takes another queue's candidate, which it does as soon as one of
those queues is borrowing. The shortcut says so without evicting anyone; here the full search
is run wherever the shortcut answers, in a hand-built cohort and in whole random replays, and
must fail too, leaving every usage as it was.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from controller.sim import kueue as kueue_model
from controller.sim.engine import BASELINES, POLICY, Replay, RunSpec
from controller.sim.kueue import (
    LOWER_PRIORITY,
    NEVER,
    CohortSpec,
    FlavorQuota,
    Kueue,
    QueueSpec,
    Workload,
)
from tests.unit.sim.test_baseline_render import record_kueues
from tests.unit.sim.test_engine import random_scenario

SPOT = "a100-spot"


class CheckedKueue(Kueue):
    """Runs the full search wherever the shortcut answers, and records any disagreement."""

    shortcuts = 0
    mismatches: list[str]
    _checking = False

    def _bound_to_fail(
        self,
        queue: kueue_model._Queue,
        workload: Workload,
        flavor: str,
        candidates: Sequence[tuple[int, bool]],
    ) -> bool:
        if self._checking:
            return False
        bound = super()._bound_to_fail(queue, workload, flavor, candidates)
        if bound:
            self.shortcuts += 1
            before = self._usages()
            self._checking = True
            try:
                found = self._victims(queue, workload, flavor)
            finally:
                self._checking = False
            if found is not None:
                self.mismatches.append(f"{workload.key} on {flavor}: search found {found}")
            if self._usages() != before:
                self.mismatches.append(f"{workload.key} on {flavor}: usage changed")
        return bound

    def _usages(self) -> list[tuple[str, dict[str, int]]]:
        return sorted((node.name, dict(node.usage)) for node in self._all_nodes())


def cohort() -> CheckedKueue:
    """Two queues of 8 GPUs each; `other` runs an 8-GPU and two 4-GPU workloads at priority
    0, so it borrows all 8 of `mine`'s quota. `mine` may reclaim, but not while it borrows."""
    queues = [
        QueueSpec(
            name=name,
            cohort="team",
            flavors=(SPOT,),
            quotas={SPOT: FlavorQuota(nominal=8)},
            within_cluster_queue=LOWER_PRIORITY,
            reclaim_within_cohort=LOWER_PRIORITY,
            borrow_within_cohort=NEVER,
        )
        for name in ("other", "mine")
    ]
    kueue = CheckedKueue(queues, [CohortSpec(name="team", parent=None, quotas={})])
    kueue.mismatches = []
    for key, gpus in ((0, 8), (1, 4), (2, 4)):
        kueue.submit(Workload(key=key, queue="other", gpus=gpus, priority=0, created=0.0))
    assert len(kueue.schedule(now=0.0)) == 3
    return kueue


def test_a_preemptor_that_would_still_borrow_finds_no_victims() -> None:
    """A priority-10 12-GPU workload of `mine` would borrow 4 even with all its own victims
    gone (it has none). Kueue does not even search: 12 exceeds `mine`'s nominal 8, its cohort
    is the root (no hierarchical claim) and `borrowWithinCohort` is Never, so
    `fitsResourceQuota` gives NoFit. Asked directly, the search is bound to fail, and the full
    search agrees."""
    kueue = cohort()
    workload = Workload(key=9, queue="mine", gpus=12, priority=10, created=1.0, queued_at=1.0)
    kueue.submit(workload)

    assert kueue.schedule(now=1.0) == []
    assert kueue.shortcuts == 0
    assert kueue._victims(kueue._queues["mine"], workload, SPOT) is None
    assert kueue.shortcuts == 1
    assert kueue.mismatches == []


def test_a_preemptor_that_ends_within_quota_reclaims() -> None:
    """The same cohort, an 8-GPU preemptor: it ends within its quota, so no shortcut, and it
    reclaims 8 GPUs from `other`: its 8-GPU workload, first in the search's order (same
    priority and admission time, lowest key)."""
    kueue = cohort()
    kueue.submit(Workload(key=9, queue="mine", gpus=8, priority=10, created=1.0, queued_at=1.0))

    (admission,) = kueue.schedule(now=1.0)

    assert admission.victims == (0,)
    assert kueue.shortcuts == 0
    assert kueue.mismatches == []


def test_the_shortcut_agrees_with_the_full_search_in_whole_replays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The policy and every baseline over `test_engine`'s random scenario."""
    made = record_kueues(monkeypatch, CheckedKueue)
    specs: list[RunSpec] = [POLICY, *BASELINES.values()]
    for spec in specs:
        ps, jobs = random_scenario()
        Replay(ps, jobs, spec, seed=1).run()

    assert len(made) == len(specs)
    assert sum(k.shortcuts for k in made) > 0, "the shortcut answered somewhere"
    assert [m for k in made for m in k.mismatches] == []
