"""The reconciler's lane writes, on the in-memory stand-in for the API server (a fake, said so):
written once, not again while in place, and a refused one not sent again until the Workload
changes. That a real server takes the patch, and refuses it once quota is reserved, is
tests/integration/test_lanes.py's part.

The lane, by hand: vision-research's cvpr-submission cutoff is 2026-11-27 23:59 Pacific,
43,140 s after FIXED_NOW, at confidence 0.95. A one-node Workload declared at 27,000 s (spread
0.25) needs its 0.95 quantile, 27,000 x exp(1.645 x 0.25 - 0.25^2 / 2) = 39,480 s, plus the
a100's 420 s launch on on-demand: 39,900 s, inside. On spot, the 0.95 Poisson quantile of
0.04 x 39,480 / 3,600 = 0.44 interruptions is 2, each a launch and half the default one-hour
checkpoint interval (2,220 s): 44,340 s, past the cutoff.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from controller import names
from controller.api.loader import read_documents
from controller.examples import EXAMPLE_DIR
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from controller.metrics import Metrics
from controller.reconcile.reconciler import Reconciler
from testenv.kueue_standin import workload_body
from testenv.memoryserver import MemoryServer

FIXED_NOW = datetime(2026, 11, 27, 20, 0, tzinfo=UTC)
KEY = ("vision", "cvpr-tight")


def workload(name: str, seconds: int) -> dict[str, Any]:
    body = workload_body(
        name=name,
        namespace="vision",
        queue="vision-research",
        priority=0,
        pods=1,
        gpus_per_pod=8,
        labels={"example.com/paper": "cvpr"},
        annotations={names.ANNOTATION_EXPECTED_DURATION: str(seconds)},
    )
    body["metadata"]["creationTimestamp"] = "2026-11-27T18:00:00Z"
    return body


@pytest.fixture
def store() -> MemoryServer:
    server = MemoryServer()
    documents, errors = read_documents(EXAMPLE_DIR)
    assert not errors
    for _, doc in documents:
        server.put(copy.deepcopy(doc))
    server.put(workload("cvpr-tight", 27_000))
    server.put(workload("cvpr-easy", 3_600))
    return server


def reconciler(store: MemoryServer, metrics: Metrics | None = None) -> Reconciler:
    return Reconciler(cast(KubeClient, store), wall_clock=lambda: FIXED_NOW, metrics=metrics)


def stored(store: MemoryServer, name: str) -> dict[str, Any]:
    return store.objects[("Workload", "vision", name)]


def lane_writes(store: MemoryServer, before: int) -> list[str]:
    return [name for kind, name in store.writes[before:] if kind == "Workload"]


def test_a_lane_is_written_once_and_counted(store: MemoryServer) -> None:
    metrics = Metrics()
    passes = reconciler(store, metrics)
    result = passes.reconcile(store.snapshot())
    assert result.capacity is not None
    assert set(result.capacity.lanes) == {KEY}
    lane = result.capacity.lanes[KEY]
    assert (round(lane.needed_on_demand), round(lane.needed_on_spot)) == (39_900, 44_340)
    assert result.lanes_written == 1
    tight = stored(store, "cvpr-tight")
    assert tight["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] == {
        names.CAPACITY_TYPE_LABEL: names.ON_DEMAND
    }
    assert tight["metadata"]["annotations"][names.ANNOTATION_LANE_REASON] == lane.reason
    assert names.ANNOTATION_LANE not in (stored(store, "cvpr-easy")["metadata"]["annotations"])
    sample = metrics.registry.get_sample_value
    labels = {"project": "vision-research", "lane": names.ON_DEMAND}
    assert sample("quartermaster_lane_workloads", labels) == 1
    assert sample("quartermaster_lane_writes_total", labels) == 1

    before = len(store.writes)
    again = passes.reconcile(store.snapshot())
    assert again.lanes_written == 0
    assert "cvpr-tight" not in lane_writes(store, before)
    assert sample("quartermaster_lane_writes_total", labels) == 1


def test_a_refused_lane_is_not_sent_again_until_the_workload_changes(
    store: MemoryServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    tries: list[tuple[str, str]] = []

    def refuse(kind: kinds.Kind, name: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        tries.append((name, stored(store, name)["metadata"]["resourceVersion"]))
        raise KubeError("admission webhook denied the request", status=422, reason="Invalid")

    monkeypatch.setattr(store, "json_patch", refuse)
    passes = reconciler(store)
    snapshot = store.snapshot()
    assert passes.reconcile(snapshot).lanes_written == 0
    assert passes.reconcile(snapshot).lanes_written == 0
    assert len(tries) == 1, "not again on the same version"
    # The pass's boost wrote the Workload after the refusal: one more try on that version, and
    # none after it while nothing changes.
    for _ in range(3):
        assert passes.reconcile(store.snapshot()).lanes_written == 0
    assert [name for name, _ in tries] == ["cvpr-tight", "cvpr-tight"]
    assert len(set(tries)) == len(tries), "one try per version of the Workload"

    monkeypatch.undo()
    store.put(copy.deepcopy(stored(store, "cvpr-tight")))  # a new version (Kueue wrote it)
    assert passes.reconcile(store.snapshot()).lanes_written == 1


def test_a_server_error_fails_the_pass_like_any_write(
    store: MemoryServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unavailable(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise KubeError("etcd unavailable", status=503)

    monkeypatch.setattr(store, "json_patch", unavailable)
    with pytest.raises(KubeError):
        reconciler(store).reconcile(store.snapshot())
