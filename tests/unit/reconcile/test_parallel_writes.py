"""Writes of one kind go out together, kind after kind, on threads kept from batch to batch
(`WritePool`)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from controller.kube import kinds
from controller.reconcile.writers import WritePool

from .test_quiet_pass import world as quiet_world

Doc = dict[str, Any]


def objects(kind: str, count: int) -> list[Doc]:
    return [{"kind": kind, "metadata": {"name": f"{kind.lower()}-{i}"}} for i in range(count)]


class Recorder:
    def __init__(self, barrier_kind: str | None = None, parties: int = 1) -> None:
        self.lock = threading.Lock()
        self.log: list[tuple[str, str, str]] = []
        self.in_flight = 0
        self.most_in_flight: dict[str, int] = {}
        self.barrier = threading.Barrier(parties, timeout=30) if barrier_kind else None
        self.barrier_kind = barrier_kind

    def __call__(self, obj: Doc) -> str:
        kind, name = str(obj["kind"]), str(obj["metadata"]["name"])
        with self.lock:
            self.log.append(("start", kind, name))
            self.in_flight += 1
            self.most_in_flight[kind] = max(self.most_in_flight.get(kind, 0), self.in_flight)
        if self.barrier is not None and kind == self.barrier_kind:
            self.barrier.wait()  # returns only once `parties` writes are in flight together
        with self.lock:
            self.in_flight -= 1
            self.log.append(("end", kind, name))
        return name


def test_writes_of_a_kind_overlap_and_kinds_keep_their_order() -> None:
    work = objects("ResourceFlavor", 3) + objects("ClusterQueue", 8) + objects("LocalQueue", 5)
    record = Recorder(barrier_kind="ClusterQueue", parties=4)

    results = WritePool(4).each_kind(work, record)

    assert results == [o["metadata"]["name"] for o in work]
    assert record.most_in_flight["ClusterQueue"] == 4
    position = {(event, name): i for i, (event, _, name) in enumerate(record.log)}
    last_end = {
        kind: max(position[("end", o["metadata"]["name"])] for o in work if o["kind"] == kind)
        for kind in ("ResourceFlavor", "ClusterQueue")
    }
    first_start = {
        kind: min(position[("start", o["metadata"]["name"])] for o in work if o["kind"] == kind)
        for kind in ("ClusterQueue", "LocalQueue")
    }
    assert last_end["ResourceFlavor"] < first_start["ClusterQueue"]
    assert last_end["ClusterQueue"] < first_start["LocalQueue"]


@pytest.mark.parametrize(
    ("workers", "serial_kind", "most"),
    [
        pytest.param(1, None, 1, id="one worker: one at a time"),
        pytest.param(4, "Deployment", 1, id="a serial kind: one at a time"),
    ],
)
def test_one_at_a_time(workers: int, serial_kind: str | None, most: int) -> None:
    work = objects("Deployment", 6)
    record = Recorder()
    WritePool(workers).each_kind(work, record, serial=lambda o: o["kind"] == serial_kind)
    assert record.most_in_flight["Deployment"] == most
    assert [e for e, _, _ in record.log] == ["start", "end"] * 6


def test_a_failed_write_is_raised_after_its_kind_and_stops_the_next_kinds() -> None:
    work = objects("ClusterQueue", 6) + objects("LocalQueue", 2)
    written: list[str] = []
    lock = threading.Lock()

    def write(obj: Doc) -> None:
        name = obj["metadata"]["name"]
        if name == "clusterqueue-0":
            raise RuntimeError("refused")
        # The others take a while, so writes are still queued when the first one fails: every
        # one of them must still be written (the timing only makes a cancelled write likely).
        time.sleep(0.05)
        with lock:
            written.append(name)

    with pytest.raises(RuntimeError, match="refused"):
        WritePool(3).each_kind(work, write)
    assert sorted(written) == [f"clusterqueue-{i}" for i in range(1, 6)]


def write_threads() -> set[int]:
    return {t.ident or 0 for t in threading.enumerate() if t.name.startswith("write")}


def test_batches_share_the_same_threads_and_close_ends_them() -> None:
    """Every batch of every pass runs on the threads the first batch started: a pass no longer
    starts and ends threads (the soak's thread count followed whichever batch was in flight)."""
    pool = WritePool(4)
    seen: list[set[int]] = []
    lock = threading.Lock()
    for _ in range(5):
        record = Recorder(barrier_kind="ClusterQueue", parties=4)  # 4 threads, every batch
        idents: set[int] = set()

        def write(obj: Doc, record: Recorder = record, idents: set[int] = idents) -> str:
            with lock:
                idents.add(threading.get_ident())
            return record(obj)

        names = pool.map(objects("ClusterQueue", 8), write)
        assert names == [f"clusterqueue-{i}" for i in range(8)]
        seen.append(idents)

    assert len(seen[0]) == 4
    assert all(idents == seen[0] for idents in seen)
    assert write_threads() >= seen[0]  # alive between batches, named as write threads

    pool.close()
    for thread in [t for t in threading.enumerate() if t.ident in seen[0]]:
        thread.join(timeout=30)
    assert not write_threads() & seen[0]
    # Closed, a batch is still written, in the caller's thread.
    callers: set[int] = set()

    def write_in_caller(item: int) -> int:
        callers.add(threading.get_ident())
        return item

    assert pool.map([1, 2, 3], write_in_caller) == [1, 2, 3]
    assert callers == {threading.get_ident()}


def test_a_first_pass_sends_project_statuses_and_boosts_together() -> None:
    """Through a whole pass on the in-memory stand-in (a fake API server, see its module): the
    example's 7 project statuses and 4 boosts each wait on a barrier of 4 parties, which only
    releases when 4 writes of that sort are in flight at once; written one by one, the barrier
    would break and the pass fail."""
    store, reconciler, _ = quiet_world()
    barriers = {
        "status": threading.Barrier(4, timeout=30),
        "boost": threading.Barrier(4, timeout=30),
    }
    seen: dict[str, int] = {"status": 0, "boost": 0}
    lock = threading.Lock()
    apply = store.apply

    def waiting_apply(kind: kinds.Kind, obj: Doc, **options: Any) -> Doc:
        sort = (
            "status"
            if options.get("subresource") == "status" and kind == kinds.TRAINING_PROJECT
            else "boost"
            if kind == kinds.WORKLOAD
            else None
        )
        if sort is not None:
            with lock:
                seen[sort] += 1
                first_four = seen[sort] <= 4
            if first_four:
                barriers[sort].wait()
        return apply(kind, obj, **options)

    store.apply = waiting_apply  # type: ignore[method-assign]
    result = reconciler.reconcile(store.snapshot())

    assert (result.status_writes, result.boosts_written) == (8, 4)  # 7 projects, 1 policy
    assert seen == {"status": 7, "boost": 4}
    assert not any(b.broken for b in barriers.values())
