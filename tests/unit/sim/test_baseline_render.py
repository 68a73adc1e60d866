"""The shortcuts a baseline's decision takes, checked against what they stand for.

A baseline renders on most decisions, often for the targets it rendered last time, and counts
what each side holds from the admitted workloads only (`Replay._render_baseline`). Here a
reused render must equal a fresh one, a parse of the same render give the same specs, and the
sides held counted from the admitted views equal those counted from every view, at every
decision of whole runs of `test_engine`'s random scenario. A Kueue head's first fit, kept
from the start of a scheduling cycle, is checked against a fresh one whenever it is used.
"""

from __future__ import annotations

from typing import TypeVar

import pytest

from controller.capacity import PoolTarget
from controller.decide.shift import held_by_side
from controller.render.desired import render
from controller.render.kueue import KUEUE_DEFAULT_WHEN_CAN_BORROW
from controller.sim import kueue as kueue_model
from controller.sim.engine import BASELINES, Replay, RunSpec, parse_run
from tests.unit.sim.test_engine import random_scenario


def target(
    on_demand: int, *, spot: int | None = None, limits: tuple[int, int] = (0, 0)
) -> PoolTarget:
    return PoolTarget(
        on_demand, spot_gpus=spot, nodepool_gpus={"spot": limits[0], "on-demand": limits[1]}
    )


@pytest.mark.parametrize(
    ("first_target", "second_target", "want_reused"),
    [
        pytest.param(target(16), target(16), True, id="equal targets reuse the render"),
        pytest.param(target(16), target(24), False, id="more on-demand renders anew"),
        pytest.param(
            target(16, spot=8), target(16, spot=16), False, id="a different spot cap renders anew"
        ),
        pytest.param(
            target(16, limits=(32, 16)),
            target(16, limits=(40, 16)),
            False,
            id="a different NodePool limit renders anew",
        ),
    ],
)
def test_a_baseline_render_is_reused_only_for_equal_targets_and_equals_a_fresh_one(
    first_target: PoolTarget, second_target: PoolTarget, want_reused: bool
) -> None:
    ps, jobs = random_scenario()
    pool = ps.policy.spec.pools[0].name
    first, second = {pool: first_target}, {pool: second_target}
    replay = Replay(ps, jobs, BASELINES["reactive"])

    before = replay._baseline_render(first)
    after = replay._baseline_render(second)

    assert (after is before) == want_reused
    assert before == render(ps, targets=first, when_can_borrow=KUEUE_DEFAULT_WHEN_CAN_BORROW)
    assert after == render(ps, targets=second, when_can_borrow=KUEUE_DEFAULT_WHEN_CAN_BORROW)
    assert replay._specs_of(after) == replay._specs_of(
        render(ps, targets=second, when_can_borrow=KUEUE_DEFAULT_WHEN_CAN_BORROW)
    )
    assert replay._specs_of(after) is replay._specs_of(after), "the same render's specs are kept"


class CheckedBaseline(Replay):
    """A replay that, at each baseline render, also counts the sides held from every view."""

    renders = 0
    reused = 0
    mismatches: list[str]

    def _render_baseline(self, wanted: dict[str, int]) -> None:
        last = self._last_render
        everything = held_by_side(self.pools.values(), self._workload_views(), [])
        admitted = held_by_side(self.pools.values(), self._admitted_views(), [])
        if everything != admitted:
            self.mismatches.append(f"held at {self.now}: {everything} != {admitted}")
        super()._render_baseline(wanted)
        self.renders += 1
        assert self._last_render is not None
        targets, rendered = self._last_render
        if last is not None and rendered is last[1]:
            self.reused += 1
        if rendered != render(
            self.policy_set, targets=targets, when_can_borrow=KUEUE_DEFAULT_WHEN_CAN_BORROW
        ):
            self.mismatches.append(f"render at {self.now}")


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(BASELINES["reactive"], id="reactive run"),
        pytest.param(parse_run("reactive:0.5"), id="reactive run at a higher threshold"),
    ],
)
def test_a_baseline_decision_renders_what_a_full_count_and_a_fresh_render_would(
    spec: RunSpec,
) -> None:
    ps, jobs = random_scenario()
    replay = CheckedBaseline(ps, jobs, spec, seed=1)
    replay.mismatches = []
    replay.run()

    assert replay.renders > 1, "the baseline rendered more than once"
    assert replay.mismatches == []
    assert replay.reused > 0, "some renders were reused"


class CheckedKueue(kueue_model.Kueue):
    """A Kueue model that checks each kept first fit it uses against a fresh one."""

    kept = 0
    mismatches: list[str]

    def _assign(
        self,
        queue: kueue_model._Queue,
        workload: kueue_model.Workload,
        *,
        now: float,
        known: kueue_model._Fit | None = None,
    ) -> kueue_model.Admission | None:
        if known is not None and known[0] == self._clock.changes:
            self.kept += 1
            if known[1] != self._first_fit(queue, workload):
                self.mismatches.append(f"first fit of {workload.key} at {now}")
        return super()._assign(queue, workload, now=now, known=known)


Checked = TypeVar("Checked", bound=kueue_model.Kueue)


def record_kueues(monkeypatch: pytest.MonkeyPatch, checked: type[Checked]) -> list[Checked]:
    """Every Kueue model a replay builds from now on is a `checked` one with no mismatches
    yet; the list returned fills as they are built."""
    made: list[Checked] = []

    def build(*args: object, **kwargs: object) -> Checked:
        kueue = checked(*args, **kwargs)  # type: ignore[arg-type]
        kueue.mismatches = []  # type: ignore[attr-defined]
        made.append(kueue)
        return kueue

    monkeypatch.setattr(kueue_model, "Kueue", build)
    return made


@pytest.mark.parametrize("spec", [pytest.param(s, id=f"{s.name} run") for s in BASELINES.values()])
def test_a_kept_first_fit_is_the_fit_a_fresh_search_finds(
    spec: RunSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = record_kueues(monkeypatch, CheckedKueue)
    ps, jobs = random_scenario()
    Replay(ps, jobs, spec, seed=1).run()

    assert len(made) == 1
    assert made[0].kept > 0, "some kept fits were used"
    assert made[0].mismatches == []
