"""The cyclic garbage collector paused while a decision pass runs.

A pass over 1,000 projects makes a burst of some hundred thousand short-lived, acyclic objects
(jobs, estimates, quotas, rendered dicts) while the world it reads stays alive. Each 700 net
allocations start a collection of the young objects (about 150 a pass), and about once a pass
a full one walks the whole world: a seventh of the pass's CPU, finding nothing, since reference
counting frees all of it (`tests/unit/decide/test_collector.py` holds
the pass to leaving no cyclic garbage). Paused, the pass leaves the collector one young
collection of what it returns.

The collector is process-wide: a pass in one thread pauses it for the others, for the length of
a pass, and what they make meanwhile is collected once it resumes. Passes that overlap (the
loop and an `explain` request) share one pause, which ends when the last of them does.

The controller process also collects its young objects less often (`for_a_watch_cache`), and
makes up for it with a full collection between passes every `FULL_COLLECTION_SECONDS`
(`FullCollections`).
"""

from __future__ import annotations

import functools
import gc
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class _Pause:
    """One pause shared by every pass that runs while it lasts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._resume = False
        """Whether the collector ran before the first holder paused it (a caller that had
        turned it off itself keeps it off)."""

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._holders == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0 and self._resume:
                    gc.enable()


_PAUSE = _Pause()


YOUNG_COLLECTION_ALLOCATIONS = 10_000
"""Net allocations between young collections in the controller process (Python's default is
700). The watch cache holds every object the controller reads as a decoded JSON tree (some two
million objects at 1,000 projects and 10,000 Workloads), and every watch event replaces one.
At the default a full collection walked all of it about every 70,000 allocations that lived:
ten of them, 1.8 s of CPU, by the end of the first pass at that size, each 0.1-0.2 s. With
this, one (`bench/bench_scale.py`, 5 runs each: ready in 27.1-27.7 s where it took 29.0-30.6
s, the controller's CPU 9.9-10.3 s where it was 12.3-12.4 s, a pass under churn 0.79-0.84 s at
the median where it took 0.85-0.88 s, the same RSS). The trees hold no cycles; what garbage
there is gets collected as before, only later."""


def for_a_watch_cache() -> None:
    """Collect young objects every `YOUNG_COLLECTION_ALLOCATIONS` net allocations (the older
    generations' thresholds as they are)."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_ALLOCATIONS, middle, old)


def for_a_replay_worker() -> None:
    """In a worker process that replays traces: what it was sent (the trace's jobs, the
    policy: some hundred thousand objects, held for the worker's life) set aside for good,
    and young objects collected every `YOUNG_COLLECTION_ALLOCATIONS`.

    A replay makes millions of short-lived objects outside its decision passes (the Kueue and
    Karpenter models' events, the views the passes read), and at Python's default every 700
    net allocations started a young collection, and every so often a full one walked the
    whole trace again: 15 s of CPU in the busiest 14 days' policy run (about 250 s), 3.4 s
    with the inputs frozen and the young threshold raised. The replay is the same to the
    outcome: collections free nothing reference counting does not.
    """
    gc.collect()
    gc.freeze()
    for_a_watch_cache()


def collector_paused() -> AbstractContextManager[None]:
    return _PAUSE.held()


def pausing_collector(function: Callable[P, R]) -> Callable[P, R]:
    """`function` run with the collector paused (see the module docstring)."""

    @functools.wraps(function)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        with collector_paused():
            return function(*args, **kwargs)

    return paused


FULL_COLLECTION_SECONDS = 120.0
"""Least time between the full collections the controller makes between passes."""
FULL_COLLECTION_SHARE = 0.01
"""The most of the loop's time full collections may take: once one takes over 1.2 s (some
2.5 million tracked objects at the rate measured below), they come further apart than
`FULL_COLLECTION_SECONDS`."""


class FullCollections:
    """A full collection between passes, at most every `interval` seconds.

    With young collections every `YOUNG_COLLECTION_ALLOCATIONS` and passes run paused, the
    oldest generation is collected seldom, and only a full collection empties the free lists
    CPython keeps for tuples, lists, dicts and floats: blocks on them stay allocated and keep
    their pools, and so the allocator's arenas, resident. Over the 60-minute soak the
    controller's RSS rose for its first half hour and then held, the rise made of resident
    pages rather than objects kept; a probe soak with a full collection every two minutes
    held 85.2 -> 87.3 MiB at minute 20 where the soak beside it rose 85.7 -> 88.7 MiB. (Go's
    runtime, likewise, forces a collection at least every two minutes.) It costs 30-80 ms at
    the soak's size (some 80,000 tracked objects) and 0.65 s of CPU over 1.4 million
    decoded-JSON objects (the watch cache holds some two million at 10,000 Workloads), so the
    wait after one is also at least its own length over `FULL_COLLECTION_SHARE`. The loop
    makes it after a pass, never during one.
    """

    def __init__(
        self,
        interval: float = FULL_COLLECTION_SECONDS,
        *,
        clock: Callable[[], float] = time.monotonic,
        collect: Callable[[], int] = gc.collect,
        after: Callable[[], object] | None = None,
    ) -> None:
        """`after` runs right after each collection, when the most memory is free (the loop
        gives the allocator's free pages back there: `allocator.give_back_freed_memory`)."""
        self.interval = interval
        self._clock = clock
        self._collect = collect
        self._after = after
        self._last = clock()
        self._wait = interval

    def between_passes(self) -> bool:
        """Collect if the wait since the last collection is over; whether it did."""
        started = self._clock()
        if started - self._last < self._wait:
            return False
        self._collect()
        if self._after is not None:
            self._after()
        self._last = self._clock()
        self._wait = max(self.interval, (self._last - started) / FULL_COLLECTION_SHARE)
        return True
