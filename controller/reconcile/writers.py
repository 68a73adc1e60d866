"""The threads a pass sends its independent writes on, kept from one pass to the next.

Why kept: a pass sends up to three batches of writes (creates kind after kind, priority
boosts, project statuses), about 30 passes a minute under churn. A pool built per batch started
and ended up to 8 threads each time, so the controller's thread count swung with whichever
batch was in flight, and a thread leak could not be told from a batch in the soak's count.
These threads start once, on the first batch that needs them, and idle between passes (in the
soak they hold 1.5 MiB more than threads that come and go).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from itertools import groupby
from typing import TypeVar

from controller.render.objects import KubeObject

T = TypeVar("T")
R = TypeVar("R")


class WritePool:
    """Up to `workers` writes at once, on threads shared by every batch of every pass."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False

    def map(self, items: Sequence[T], write: Callable[[T], R]) -> list[R]:
        """`write` each of `items` (independent writes), up to `workers` at once.

        Results come back in the items' order; the first exception is raised once every write
        has ended (not `Executor.map`: its iterator cancels the writes not yet started when one
        raises, so which objects were written would depend on thread timing).
        """
        executor = self._started() if self.workers > 1 and len(items) > 1 else None
        if executor is None:
            return [write(item) for item in items]
        futures: list[Future[R]] = [executor.submit(write, item) for item in items]
        wait(futures)
        return [future.result() for future in futures]

    def each_kind(
        self,
        objects: Sequence[KubeObject],
        write: Callable[[KubeObject], R],
        *,
        serial: Callable[[KubeObject], bool] = lambda _: False,
    ) -> list[R]:
        """`write` each object, up to `workers` at once within a kind and kind after kind.

        A first pass creates thousands of objects, and one at a time it waits a round trip
        and the server's admission for each (85 s for 4,000). Kinds stay in their order
        (flavors and cohorts before the queues that name them); within a kind, writes are
        independent. Results come back in the objects' order; the first exception is raised
        once every write of its kind has ended. A kind holding a `serial` object is written
        one at a time.
        """
        out: list[R] = []
        for _, group in groupby(objects, key=lambda o: str(o.get("kind"))):
            batch = list(group)
            if any(serial(obj) for obj in batch):
                out.extend(write(obj) for obj in batch)
                continue
            out.extend(self.map(batch, write))
        return out

    def close(self) -> None:
        """Let the threads end once their writes have. The loop closes the pool after its
        last pass; a batch sent after that is written in the caller's thread."""
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    def _started(self) -> ThreadPoolExecutor | None:
        """The threads, started on first use; none once closed."""
        with self._lock:
            if self._executor is None and not self._closed:
                self._executor = ThreadPoolExecutor(
                    max_workers=self.workers, thread_name_prefix="write"
                )
            return self._executor
