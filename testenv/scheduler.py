"""Timed actions run in one thread: a load generator that stays one core's sliver.

A soak or a bench plays Kueue (Workloads created, admitted, finished, deleted on their own
clocks), samples the controller and prints progress, all at once. Threads for each would cost
the cores the controller is being measured on; a heap of due times run by one thread costs
almost nothing when idle and tells how far behind it ever fell.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from functools import partial


class Scheduler:
    """A heap of timed actions run in one thread (`run_until`).

    Recurring actions are rescheduled from their due time, not from when they ran, so a slow
    API call does not lower the rate; `max_lag` says how far behind the generator ever fell.
    """

    def __init__(self) -> None:
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self.max_lag = 0.0

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Run `action` once at `when` (time.monotonic())."""
        heapq.heappush(self._queue, (when, next(self._order), action))

    def every(self, start: float, interval: float, action: Callable[[], None]) -> None:
        """Run `action` at `start`, then every `interval` seconds after that due time."""

        def run(due: float) -> None:
            action()
            self.at(due + interval, partial(run, due + interval))

        self.at(start, partial(run, start))

    def clear(self) -> None:
        self._queue.clear()

    def run_until(self, deadline: float) -> None:
        """Run what falls due until `deadline` (time.monotonic()); sleep in between."""
        while True:
            now = time.monotonic()
            if not self._queue or self._queue[0][0] > deadline:
                if deadline > now:
                    time.sleep(deadline - now)
                return
            when = self._queue[0][0]
            if when > now:
                time.sleep(when - now)
                continue
            _, _, action = heapq.heappop(self._queue)
            self.max_lag = max(self.max_lag, now - when)
            action()
