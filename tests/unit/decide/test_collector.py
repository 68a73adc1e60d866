"""The cyclic collector paused around a decision pass (`controller/collector.py`).

The pause is only free if a pass makes no reference cycles (reference counting then frees all
it drops), so that is asserted on real passes: the example policy with boosts on, over several
worlds and a pass that raises. The pause itself: off during a pass, back on
after one (also when it raises), left off for a caller that turned it off, and shared by passes
that overlap in two threads until the last of them ends. The controller process's young
collections come less often, and a full collection comes between passes at most every
interval.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from controller.collector import (
    YOUNG_COLLECTION_ALLOCATIONS,
    FullCollections,
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


def test_a_replay_worker_sets_its_inputs_aside_and_collects_young_objects_less_often() -> None:
    """In a process of its own (a worker's settings are for its whole life): what it holds
    when it starts is frozen, garbage it held is collected first (not frozen with it), and the
    young threshold is the controller's."""
    script = """
import gc
import weakref
from controller.collector import YOUNG_COLLECTION_ALLOCATIONS, for_a_replay_worker
class Node:
    pass
held = [[i] for i in range(1000)]
cycle = Node()
cycle.me = cycle
gone = weakref.ref(cycle)
del cycle
gc.disable()
assert gc.get_freeze_count() == 0 and gone() is not None
for_a_replay_worker()
assert gone() is None  # collected, not frozen
assert gc.get_threshold()[0] == YOUNG_COLLECTION_ALLOCATIONS
assert gc.get_freeze_count() >= 1000, gc.get_freeze_count()
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize(
    ("calls_at", "want"),
    [
        pytest.param([10.0, 60.0, 119.9], [], id="none before the interval has passed"),
        pytest.param([120.0], [120.0], id="one once it has"),
        pytest.param(
            [130.0, 140.0, 249.0, 250.0, 251.0],
            [130.0, 250.0],
            id="the next an interval after the last one, not after the start",
        ),
        pytest.param([500.0, 500.0], [500.0], id="one however late the first call comes"),
    ],
)
def test_full_collections_come_between_passes_at_most_every_interval(
    calls_at: list[float], want: list[float]
) -> None:
    now = [0.0]
    collected: list[float] = []

    def collect() -> int:
        collected.append(now[0])
        return 0

    collections = FullCollections(120.0, clock=lambda: now[0], collect=collect)
    made = []
    for at in calls_at:
        now[0] = at
        made.append(collections.between_passes())
    assert collected == want
    assert made.count(True) == len(want)


def test_a_long_full_collection_waits_a_hundred_times_its_length() -> None:
    now = [0.0]

    def collect() -> int:
        now[0] += 3.0  # a collection of three seconds
        return 0

    collections = FullCollections(120.0, clock=lambda: now[0], collect=collect)
    now[0] = 120.0
    assert collections.between_passes()  # done at 123 s
    now[0] = 123.0 + 299.0
    assert not collections.between_passes()
    now[0] = 123.0 + 300.0
    assert collections.between_passes()


def test_a_full_collection_collects_the_oldest_generation() -> None:
    now = [0.0]
    collections = FullCollections(120.0, clock=lambda: now[0])
    gc.disable()  # no automatic collection in between (the fixture turns it back on)
    before = gc.get_stats()[2]["collections"]
    assert not collections.between_passes()
    assert gc.get_stats()[2]["collections"] == before
    now[0] = 120.0
    assert collections.between_passes()
    assert gc.get_stats()[2]["collections"] == before + 1


def test_what_follows_a_full_collection_runs_after_each_one() -> None:
    """The loop gives freed memory back right after each full collection, and only then."""
    now = [0.0]
    events: list[str] = []

    def collect() -> int:
        events.append("collect")
        return 0

    collections = FullCollections(
        120.0, clock=lambda: now[0], collect=collect, after=lambda: events.append("after")
    )
    for now[0] in (60.0, 121.0, 150.0, 242.0):
        collections.between_passes()
    assert events == ["collect", "after", "collect", "after"]
