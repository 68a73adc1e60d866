"""What the controller learned survives a restart: the ConfigMap beside it.

The pure parts (the encoding, fitting the size bound, refusing what cannot be read) on
constructed summaries; the write throttle on an injected monotonic clock (no sleeps); and a
restart: a reconciler learns from finished Workloads and a deadline judged missed, keeps it,
and a new one loads it and gives the same runtime estimates and calibrated risks.

The server is `testenv.memoryserver` with `core_v1=True`: a fake, said so. Core v1, and so a
ConfigMap, cannot be served by this project's test API server (it serves CRDs only); that the
controller runs on there with learning kept in memory is
tests/integration/test_learned_state.py's part.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
import random
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from controller import names
from controller.api.loader import read_documents
from controller.examples import EXAMPLE_DIR
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from controller.metrics import Metrics
from controller.reconcile.learned_store import (
    DATA_KEY,
    FORMAT_VERSION,
    LearnedStore,
    StoreState,
    UnreadableSummaryError,
    config_map,
    decode,
    encode,
    read_config_map,
    restore,
)
from controller.reconcile.learning import OutcomeLearning
from controller.reconcile.reconciler import Reconciler
from controller.risk.learning import FinishedRun
from controller.risk.recalibration import RiskEstimate
from testenv.kueue_standin import admission, admitted_status, finished_status, workload_body
from testenv.memoryserver import MemoryServer
from tests.unit.reconcile.test_learning import POLICY_SET, report, workload

NAMESPACE = names.DEFAULT_NAMESPACE
HOUR = 3600.0


def learned() -> OutcomeLearning:
    """Two runs learned (2x their declaration) and one deadline judged missed at risk 0.2."""
    learning = OutcomeLearning()
    learning.learn(
        POLICY_SET, [workload("a", finished_at=2000.0), workload("b", finished_at=2100.0)]
    )
    learning.judge(POLICY_SET, [report(0.2)], [workload("c")], 100.0)
    learning.judge(POLICY_SET, [], [workload("c")], 20_000.0)
    assert len(learning.ledger.judged) == 1
    return learning


def big(judged: int, keys: int) -> OutcomeLearning:
    """`judged` estimates of random risk (so they compress poorly), oldest first, and `keys`
    projects' runtimes, the least recently updated first."""
    rng = random.Random(7)
    learning = OutcomeLearning()
    for i in range(judged):
        ident = f"p{i % 50}/d@{i}"
        learning.ledger.record(RiskEstimate(ident, "research", rng.random(), float(i)))
        learning.ledger.resolve(ident, missed=rng.random() < 0.5, at=float(i) + 1)
    learning.runtimes.observe_all(
        FinishedRun(f"w{i}", f"project-{i}", float(i), HOUR * (1 + rng.random()), HOUR)
        for i in range(keys)
    )
    learning.revision += 1  # fed directly, not through a pass
    return learning


def through_json(summary: dict[str, Any]) -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(json.dumps(summary)))


# ------------------------------------------------------------------------------ the pure parts


@pytest.mark.parametrize(
    "learning",
    [
        pytest.param(OutcomeLearning(), id="nothing learned"),
        pytest.param(learned(), id="runs, a judged deadline and an open one"),
        pytest.param(big(2000, 300), id="two thousand judged estimates and 300 projects"),
    ],
)
def test_a_summary_comes_back_as_it_was_written(learning: OutcomeLearning) -> None:
    summary = learning.summary()
    encoded = encode(summary)
    assert not encoded.truncated
    assert decode(encoded.payload) == through_json(summary)
    stored = through_json(config_map(NAMESPACE, encoded))  # as the API server gives it back
    assert stored["data"] == {"version": FORMAT_VERSION}
    assert read_config_map(stored) == through_json(summary)
    assert restore(stored).summary() == through_json(summary)


@pytest.mark.parametrize(
    ("limit", "want_truncated"),
    [
        pytest.param(1 << 20, False, id="under the bound: all of it"),
        pytest.param(30_000, True, id="over it: the oldest judged and least recent keys go"),
    ],
)
def test_a_summary_is_made_to_fit_its_bound(limit: int, want_truncated: bool) -> None:
    learning = big(3000, 400)
    summary = learning.summary()
    encoded = encode(summary, limit=limit)
    assert encoded.size <= limit
    assert encoded.truncated is want_truncated
    kept = decode(encoded.payload)
    judged, keys = summary["ledger"]["judged"], summary["runtimes"]["keys"]
    assert kept["ledger"]["judged"] == judged[encoded.judged_dropped :], "the newest are kept"
    assert kept["runtimes"]["keys"] == keys[encoded.keys_dropped :], "the most recent are kept"
    if want_truncated:
        assert 0 < encoded.judged_dropped < len(judged)
        assert 0 < encoded.keys_dropped < len(keys)
        # Near the bound, not far under it: about as much as fits is kept.
        assert encoded.size > limit * 0.6
    restored = OutcomeLearning.from_summary(kept)
    assert len(restored.ledger.judged) == len(judged) - encoded.judged_dropped


def test_a_summary_that_cannot_fit_at_all_is_refused() -> None:
    with pytest.raises(ValueError, match="does not fit in 100 bytes"):
        encode(big(50, 5).summary(), limit=100)


def stored_with(payload: bytes | None = None, **changes: Any) -> dict[str, Any]:
    """A stored ConfigMap of `learned()`, its payload or fields replaced."""
    obj = config_map(NAMESPACE, encode(learned().summary()))
    if payload is not None:
        obj["binaryData"][DATA_KEY] = base64.b64encode(payload).decode()
    obj.update(changes)
    return through_json(obj)


def summary_with(**changes: Any) -> bytes:
    summary = {**learned().summary(), **changes}
    return gzip.compress(json.dumps(summary).encode())


UNREADABLE = [
    pytest.param(
        stored_with(data={"version": "2"}),
        "format version '2', this controller reads '1'",
        id="another format version",
    ),
    pytest.param(stored_with(data={}), "format version None", id="no format version"),
    pytest.param(stored_with(binaryData={}), "no binaryData", id="no payload"),
    pytest.param(stored_with(binaryData={DATA_KEY: "not base64!"}), "not base64", id="not base64"),
    pytest.param(stored_with(b"plain text"), "not gzip", id="not gzip"),
    pytest.param(
        stored_with(gzip.compress(b'{"version": 1}' * 50)[:-20]),
        "truncated gzip stream",
        id="a gzip stream cut short",
    ),
    pytest.param(stored_with(gzip.compress(b"{not json")), "not JSON", id="not JSON"),
    pytest.param(stored_with(gzip.compress(b"[1, 2]")), "a JSON list", id="a JSON list"),
    pytest.param(
        stored_with(summary_with(version=2)),
        "unknown learning summary version 2",
        id="another summary version",
    ),
    pytest.param(
        stored_with(summary_with(runtimes=[])),
        "runtimes and ledger must be objects",
        id="runtimes not an object",
    ),
    pytest.param(
        stored_with(summary_with(ledger={"version": 1, "judged": [{"risk": 2.0}]})),
        "outside",
        id="a judged risk that is no probability",
    ),
    pytest.param(
        stored_with(summary_with(open={"d": {"cutoff": 1.0}})),
        "unreadable learning summary",
        id="an open deadline without its members",
    ),
]


@pytest.mark.parametrize(("stored", "message"), UNREADABLE)
def test_a_summary_this_controller_cannot_read_is_refused_saying_why(
    stored: dict[str, Any], message: str
) -> None:
    with pytest.raises(UnreadableSummaryError, match=message):
        restore(stored)


@pytest.mark.parametrize(("stored", "message"), UNREADABLE)
def test_the_store_ignores_an_unreadable_summary_with_a_warning_and_replaces_it(
    stored: dict[str, Any], message: str
) -> None:
    server, store, _ = world_store()
    server.put(copy.deepcopy(stored))
    with capture_logs() as logs:
        assert store.load(SERVED) is None
    (warning,) = [e for e in logs if e["event"] == "learned_state_ignored"]
    assert warning["log_level"] == "warning"
    assert message in warning["reason"]
    assert store.state is StoreState.CONFIGMAP
    learning = learned()
    assert store.save(learning)
    assert restore(kept(server)).summary() == through_json(learning.summary())


# ------------------------------------------------------------------------------ the throttle

SERVED = frozenset({"v1", "kueue.x-k8s.io/v1beta2"})


class Ticks:
    """Monotonic seconds, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def world_store(
    *, interval: float = 300.0, metrics: Metrics | None = None, core_v1: bool = True
) -> tuple[MemoryServer, LearnedStore, Ticks]:
    server = MemoryServer(core_v1=core_v1)
    clock = Ticks()
    store = LearnedStore(
        cast(KubeClient, server),
        namespace=NAMESPACE,
        interval_seconds=interval,
        clock=clock,
        metrics=metrics,
    )
    return server, store, clock


def kept(server: MemoryServer) -> dict[str, Any]:
    return server.objects[(kinds.CONFIG_MAP.kind, NAMESPACE, names.LEARNED_STATE_NAME)]


def config_map_writes(server: MemoryServer) -> int:
    return sum(1 for kind, _ in server.writes if kind == kinds.CONFIG_MAP.kind)


def test_nothing_is_written_while_nothing_was_learned_or_nothing_changed() -> None:
    server, store, _ = world_store()
    assert store.load(SERVED) is None  # no ConfigMap yet
    learning = OutcomeLearning()
    assert not store.save(learning), "nothing learned"
    learning.learn(POLICY_SET, [workload("a", finished_at=2000.0)])
    assert store.save(learning)
    assert not store.save(learning), "nothing new"
    learning.learn(POLICY_SET, [workload("a", finished_at=2000.0)])  # counted already
    assert not store.save(learning), "a repeat is nothing new"
    assert config_map_writes(server) == 1


def test_one_write_per_interval_while_the_learning_changes() -> None:
    metrics = Metrics()
    server, store, clock = world_store(interval=300.0, metrics=metrics)
    store.load(SERVED)
    learning = OutcomeLearning()
    written = []
    for second, name in ((0, "a"), (10, "b"), (299, "c"), (300, "d"), (310, "e"), (900, None)):
        clock.now = float(second)
        if name is not None:
            learning.learn(POLICY_SET, [workload(name, finished_at=2000.0 + second)])
        if store.save(learning):
            written.append(second)
    assert written == [0, 300, 900]
    assert restore(kept(server)).runtimes.observed == 5
    sample = metrics.registry.get_sample_value
    assert sample("quartermaster_learned_state_writes_total", {"result": "written"}) == 3
    assert sample("quartermaster_learned_state_persisted") == 1.0
    assert sample("quartermaster_learned_state_bytes") == len(
        base64.b64decode(kept(server)["binaryData"][DATA_KEY])
    )


def test_a_final_write_does_not_wait_for_the_interval_but_still_needs_news() -> None:
    server, store, clock = world_store()
    store.load(SERVED)
    learning = learned()
    assert store.save(learning)
    clock.now = 5.0
    learning.learn(POLICY_SET, [workload("late", finished_at=3000.0)])
    assert not store.save(learning)
    assert store.save(learning, final=True)
    assert not store.save(learning, final=True), "nothing new since"
    assert config_map_writes(server) == 2


def test_a_failed_write_is_logged_counted_and_tried_again_after_the_interval() -> None:
    metrics = Metrics()
    server, store, clock = world_store(metrics=metrics)
    store.load(SERVED)
    real = server.apply
    failing = [True]

    def apply(kind: kinds.Kind, obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if failing[0] and kind == kinds.CONFIG_MAP:
            raise KubeError("etcd unavailable", status=503)
        return real(kind, obj, **kwargs)

    server.apply = apply  # type: ignore[method-assign]
    learning = learned()
    with capture_logs() as logs:
        assert not store.save(learning)
    assert [e["event"] for e in logs] == ["learned_state_write_failed"]
    failing[0] = False
    clock.now = 100.0
    assert not store.save(learning), "not at every pass"
    clock.now = 300.0
    assert store.save(learning)
    sample = metrics.registry.get_sample_value
    assert sample("quartermaster_learned_state_writes_total", {"result": "failed"}) == 1
    assert sample("quartermaster_learned_state_writes_total", {"result": "written"}) == 1


def test_a_summary_over_the_bound_is_written_truncated_and_says_so() -> None:
    metrics = Metrics()
    server, store, _ = world_store(metrics=metrics)
    store.limit_bytes = 30_000
    store.load(SERVED)
    learning = big(3000, 400)
    with capture_logs() as logs:
        assert store.save(learning)
    (line,) = [e for e in logs if e["event"] == "learned_state_truncated"]
    assert line["judged_estimates_dropped"] > 0 and line["runtime_keys_dropped"] > 0
    sample = metrics.registry.get_sample_value
    for part, key in (
        ("judged_estimates", "judged_estimates_dropped"),
        ("runtime_keys", "runtime_keys_dropped"),
    ):
        assert sample("quartermaster_learned_state_dropped_total", {"part": part}) == line[key]
    restored = restore(kept(server))
    assert len(restored.ledger.judged) == 3000 - line["judged_estimates_dropped"]
    assert len(learning.ledger.judged) == 3000, "what is dropped is dropped from the write only"


def test_without_core_v1_learning_stays_in_memory_said_once_and_nothing_is_written() -> None:
    metrics = Metrics()
    server, store, _ = world_store(metrics=metrics, core_v1=False)
    served = server.snapshot().served
    with capture_logs() as logs:
        assert store.load(served) is None
        assert store.load(served) is None
    assert [(e["event"], e["log_level"]) for e in logs] == [("learning_in_memory_only", "warning")]
    assert store.state is StoreState.MEMORY
    assert not store.save(learned(), final=True)
    assert server.writes == []
    assert metrics.registry.get_sample_value("quartermaster_learned_state_persisted") == 0.0


@pytest.mark.parametrize(
    ("status", "want_state", "want_event"),
    [
        pytest.param(403, StoreState.MEMORY, "learning_in_memory_only", id="forbidden: memory"),
        pytest.param(503, StoreState.UNKNOWN, "learned_state_not_read", id="unavailable: later"),
    ],
)
def test_a_read_that_fails_never_fails_the_caller(
    status: int, want_state: StoreState, want_event: str
) -> None:
    server, store, _ = world_store()

    def get(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise KubeError("refused", status=status)

    server.get = get  # type: ignore[method-assign]
    with capture_logs() as logs:
        assert store.load(SERVED) is None
    assert [e["event"] for e in logs] == [want_event]
    assert store.state is want_state
    assert not store.save(learned()), "never written over what could not be read"


def test_a_replica_that_leads_again_reads_what_the_other_leader_wrote() -> None:
    server, store, _ = world_store()
    store.load(SERVED)
    mine = OutcomeLearning()
    _, other, _ = world_store()
    other.client = cast(KubeClient, server)
    other.load(SERVED)
    theirs = learned()
    assert other.save(theirs)
    assert store.load(SERVED) is None, "read once while leading"
    store.standby()
    again = store.load(SERVED)
    assert again is not None and again is not mine
    assert again.summary() == through_json(theirs.summary())
    assert not store.save(again), "what was just read is no news"


# ------------------------------------------------------------------------------ a restart

FIXED_NOW = datetime(2026, 11, 27, 20, 0, tzinfo=UTC).timestamp()
CVPR_CUTOFF = FIXED_NOW + 43_140
"""vision-research's cvpr-submission: 27 November 23:59 Pacific (see test_lane_writes)."""


def cvpr_workload(
    name: str, declared: int | None, admitted: str, finished: str | None = None
) -> dict[str, Any]:
    body = workload_body(
        name=name,
        namespace="vision",
        queue="vision-research",
        priority=0,
        pods=1,
        gpus_per_pod=8,
        labels={"example.com/paper": "cvpr"},
        annotations={} if declared is None else {names.ANNOTATION_EXPECTED_DURATION: str(declared)},
    )
    body["metadata"]["creationTimestamp"] = "2026-11-27T08:00:00Z"
    admitted_as = admitted_status(
        admission(cluster_queue="vision-research", pods=1, gpus_per_pod=8, flavor="a100-spot"),
        admitted,
    )
    body["status"] = finished_status(admitted_as, finished) if finished else admitted_as
    return body


def cluster() -> MemoryServer:
    """The example fleet; four cvpr runs that took 3 h where they declared 2 h, one that
    declared nothing and took 5 h, and one declared at a day, running since 19:00 UTC: the
    cvpr cutoff is missed."""
    server = MemoryServer(core_v1=True)
    documents, errors = read_documents(EXAMPLE_DIR)
    assert not errors
    for _, doc in documents:
        server.put(copy.deepcopy(doc))
    for i in range(4):
        server.put(
            cvpr_workload(
                f"done-{i}", 7200, f"2026-11-27T1{i}:00:00Z", f"2026-11-27T1{i + 3}:00:00Z"
            )
        )
    server.put(cvpr_workload("quiet", None, "2026-11-27T09:00:00Z", "2026-11-27T14:00:00Z"))
    server.put(cvpr_workload("long", 86_400, "2026-11-27T19:00:00Z"))
    return server


def controller(
    server: MemoryServer, wall: list[float], ticks: Ticks, metrics: Metrics
) -> Reconciler:
    store = LearnedStore(
        cast(KubeClient, server), namespace=NAMESPACE, clock=ticks, metrics=metrics
    )
    return Reconciler(
        cast(KubeClient, server),
        wall_clock=lambda: datetime.fromtimestamp(wall[0], UTC),
        metrics=metrics,
        learned=store,
    )


CVPR = {"project": "vision-research", "deadline": "cvpr-submission", "tier": "research"}


def test_a_restart_keeps_the_runtimes_and_judgements_learned() -> None:
    server = cluster()
    wall, ticks = [FIXED_NOW], Ticks()
    first = controller(server, wall, ticks, Metrics())
    first.reconcile(server.snapshot())
    wall[0] = CVPR_CUTOFF + 60
    first.reconcile(server.snapshot())  # within the write interval: not written yet
    learning = first.learning
    assert learning.runtimes.observed == 5
    assert [(j.tier, j.missed) for j in learning.ledger.judged] == [("research", True)]
    first.close()  # a graceful stop writes what changed since

    metrics = Metrics()
    second = controller(server, wall, ticks, metrics)
    assert second.learning.runtimes.observed == 0, "nothing before its first pass"
    second.reconcile(server.snapshot())
    restored = second.learning
    assert restored is not learning
    assert restored.runtimes.observed == 5, "the finished runs still listed are not recounted"
    for before, after in (
        (
            learning.runtimes.declared(
                "vision-research", 7200, queue="vision-research", prior_sigma=0.25
            ),
            restored.runtimes.declared(
                "vision-research", 7200, queue="vision-research", prior_sigma=0.25
            ),
        ),
        (
            learning.runtimes.undeclared(
                "vision-research", prior_mean_seconds=HOUR, prior_sigma=1.0
            ),
            restored.runtimes.undeclared(
                "vision-research", prior_mean_seconds=HOUR, prior_sigma=1.0
            ),
        ),
    ):
        assert after.source == before.source != "prior"
        assert after.mean_seconds == pytest.approx(before.mean_seconds, rel=1e-4)
        assert after.sigma == pytest.approx(before.sigma, rel=1e-3)
    assert list(restored.ledger.judged) == list(learning.ledger.judged)
    grid = [i / 20 for i in range(21)]
    for tier in ("research", "production"):
        assert [restored.recalibration(tier, r) for r in grid] == [
            learning.recalibration(tier, r) for r in grid
        ]
    raw = metrics.registry.get_sample_value("quartermaster_deadline_risk_ratio", CVPR)
    calibrated = metrics.registry.get_sample_value(
        "quartermaster_deadline_risk_calibrated_ratio", CVPR
    )
    assert raw is not None and calibrated is not None
    assert calibrated == learning.recalibration("research", raw) != raw

    # Without the ConfigMap a new controller starts afresh: the raw risk, nothing learned.
    metrics = Metrics()
    afresh = Reconciler(
        cast(KubeClient, server),
        wall_clock=lambda: datetime.fromtimestamp(wall[0], UTC),
        metrics=metrics,
    )
    afresh.reconcile(server.snapshot())
    assert not afresh.learning.ledger.judged
    sample = metrics.registry.get_sample_value
    assert sample("quartermaster_deadline_risk_calibrated_ratio", CVPR) == sample(
        "quartermaster_deadline_risk_ratio", CVPR
    )


def test_passes_write_once_per_interval_the_stop_writes_the_rest_and_only_the_leader() -> None:
    server = cluster()
    wall, ticks = [FIXED_NOW], Ticks()
    leading = [True]
    reconciler = controller(server, wall, ticks, Metrics())
    reconciler.may_write = lambda: leading[0]
    reconciler.reconcile(server.snapshot())
    assert config_map_writes(server) == 1, "the first pass learned: written"
    ticks.now, wall[0] = 60.0, CVPR_CUTOFF + 60
    reconciler.reconcile(server.snapshot())
    assert config_map_writes(server) == 1, "judged within the interval: not yet"
    ticks.now, wall[0] = 400.0, CVPR_CUTOFF + 400
    reconciler.reconcile(server.snapshot())
    assert config_map_writes(server) == 2, "written once the interval passed"
    ticks.now, wall[0] = 500.0, CVPR_CUTOFF + 500
    reconciler.reconcile(server.snapshot())
    assert config_map_writes(server) == 2, "nothing new: not written"
    server.put(cvpr_workload("new", 7200, "2026-11-28T06:00:00Z", "2026-11-28T08:05:00Z"))
    ticks.now, wall[0] = 600.0, CVPR_CUTOFF + 600
    reconciler.reconcile(server.snapshot())
    leading[0] = False
    reconciler.close()
    assert config_map_writes(server) == 2, "a replica that does not lead writes nothing"
    leading[0] = True
    reconciler.close()
    assert config_map_writes(server) == 3, "the stop writes what changed since"
    assert restore(kept(server)).runtimes.observed == 6
