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
"""

from __future__ import annotations

import functools
import gc
import threading
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


def collector_paused() -> AbstractContextManager[None]:
    return _PAUSE.held()


def pausing_collector(function: Callable[P, R]) -> Callable[P, R]:
    """`function` run with the collector paused (see the module docstring)."""

    @functools.wraps(function)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        with collector_paused():
            return function(*args, **kwargs)

    return paused
