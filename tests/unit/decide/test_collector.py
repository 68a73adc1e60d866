"""The cyclic collector paused around a decision pass (`controller/collector.py`).

The pause is only free if a pass makes no reference cycles (reference counting then frees all
it drops), so that is asserted on real passes: the example policy with boosts on, over several
worlds and a pass that raises. The pause itself: off during a pass, back on
after one (also when it raises), left off for a caller that turned it off, and shared by passes
that overlap in two threads until the last of them ends. The controller process's young
collections come less often.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from controller.collector import (
    YOUNG_COLLECTION_ALLOCATIONS,
    collector_paused,
    for_a_watch_cache,
    pausing_collector,
)
from controller.decide.observation import History, Observation
from controller.decide.plan import plan_capacity
from tests.unit.decide.test_plan import BOOSTING, CRUNCH, FIXED_NOW, background


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    """Every case starts with the collector running, and leaves it so."""
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.parametrize("seed", range(4))
def test_a_pass_leaves_no_cyclic_garbage(seed: int) -> None:
    world = [*background(seed), *CRUNCH]
    observation = Observation(
        BOOSTING, states={}, workloads=world, node_claims=[], history=History(), now=FIXED_NOW
    )
    first = plan_capacity(observation)  # warms caches that live past a pass
    gc.collect()
    gc.disable()
    try:
        later = plan_capacity(
            Observation(
                BOOSTING,
                states=first.states,
                workloads=world,
                node_claims=[],
                history=History(),
                now=FIXED_NOW + 900,
            )
        )
        del later
        found = gc.collect()
    finally:
        gc.enable()
    assert found == 0


def test_the_collector_is_off_during_a_pass_and_back_on_after() -> None:
    seen: list[bool] = []

    @pausing_collector
    def a_pass() -> None:
        seen.append(gc.isenabled())

    a_pass()
    assert seen == [False]
    assert gc.isenabled()


def test_a_pass_that_raises_turns_the_collector_back_on() -> None:
    @pausing_collector
    def failing() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        failing()
    assert gc.isenabled()


def test_a_caller_that_turned_the_collector_off_keeps_it_off() -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_overlapping_passes_share_one_pause_until_the_last_ends() -> None:
    started, release = threading.Event(), threading.Event()
    during: list[bool] = []

    def other_pass() -> None:
        with collector_paused():
            started.set()
            release.wait()
            during.append(gc.isenabled())

    thread = threading.Thread(target=other_pass)
    thread.start()
    started.wait()
    with collector_paused():
        pass
    assert not gc.isenabled(), "the other pass still holds the pause"
    release.set()
    thread.join()
    assert during == [False]
    assert gc.isenabled()


def test_the_controller_process_collects_young_objects_less_often() -> None:
    before = gc.get_threshold()
    try:
        for_a_watch_cache()
        assert gc.get_threshold() == (YOUNG_COLLECTION_ALLOCATIONS, before[1], before[2])
        assert before[0] < YOUNG_COLLECTION_ALLOCATIONS
    finally:
        gc.set_threshold(*before)
