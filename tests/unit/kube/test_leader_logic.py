"""Leader-election rules without a server: the pure decision table, and the elector's loop
against an in-memory Lease store with hand-driven clocks, so timing is exact, not sampled."""

from __future__ import annotations

import copy
import threading
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

import pytest

from controller.kube.client import KubeClient, KubeError
from controller.kube.kinds import Kind
from controller.kube.leader import (
    LeaderElector,
    LeaseRecord,
    Verdict,
    format_microtime,
    next_record,
    parse_microtime,
    released_record,
    verdict,
)

FIXED_NOW = datetime(2026, 11, 21, 13, 4, 5, 123456, tzinfo=UTC)
ME = "replica-a"
OTHER = "replica-b"


def ago(seconds: float) -> datetime:
    return FIXED_NOW - timedelta(seconds=seconds)


def held_by(
    holder: str, *, renewed: float, duration: int = 15, transitions: int = 3
) -> LeaseRecord:
    return LeaseRecord(
        holder_identity=holder,
        lease_duration_seconds=duration,
        acquire_time=ago(100),
        renew_time=ago(renewed),
        lease_transitions=transitions,
    )


# ---------------------------------------------------------------------- the decision table
VERDICTS = [
    ("empty record", LeaseRecord(), Verdict.ACQUIRE),
    ("released: no holder, fresh renewTime", held_by("", renewed=0, duration=1), Verdict.ACQUIRE),
    ("no holder even though unexpired", held_by("", renewed=1), Verdict.ACQUIRE),
    ("other holder, renewed 1 s ago", held_by(OTHER, renewed=1), Verdict.HELD),
    ("other holder, 1 us before expiry", held_by(OTHER, renewed=14.999999), Verdict.HELD),
    ("other holder, expiring exactly now", held_by(OTHER, renewed=15), Verdict.ACQUIRE),
    ("other holder, long expired", held_by(OTHER, renewed=60), Verdict.ACQUIRE),
    ("other holder, renewTime in the future", held_by(OTHER, renewed=-5), Verdict.HELD),
    (
        "other holder, no renewTime",
        LeaseRecord(holder_identity=OTHER, lease_duration_seconds=15),
        Verdict.ACQUIRE,
    ),
    ("other holder, zero duration", held_by(OTHER, renewed=1, duration=0), Verdict.ACQUIRE),
    ("us, fresh", held_by(ME, renewed=1), Verdict.RENEW),
    ("us, expired: nobody took it", held_by(ME, renewed=60), Verdict.RENEW),
]


@pytest.mark.parametrize(
    ("record", "expected"), [v[1:] for v in VERDICTS], ids=[v[0] for v in VERDICTS]
)
def test_verdict(record: LeaseRecord, expected: Verdict) -> None:
    assert verdict(record, identity=ME, now=FIXED_NOW) is expected


NEXT_RECORDS: list[tuple[str, LeaseRecord | None, LeaseRecord | None]] = [
    (
        "missing lease: we create it, no transition yet",
        None,
        LeaseRecord(ME, 10, FIXED_NOW, FIXED_NOW, 0),
    ),
    ("held by another: nothing to write", held_by(OTHER, renewed=1), None),
    (
        "renewal keeps acquireTime and transitions",
        held_by(ME, renewed=2),
        LeaseRecord(ME, 10, ago(100), FIXED_NOW, 3),
    ),
    (
        "renewal of a record without acquireTime fills it in",
        LeaseRecord(ME, 15, None, ago(2), 3),
        LeaseRecord(ME, 10, FIXED_NOW, FIXED_NOW, 3),
    ),
    (
        "takeover of an expired lease counts a transition",
        held_by(OTHER, renewed=16),
        LeaseRecord(ME, 10, FIXED_NOW, FIXED_NOW, 4),
    ),
    (
        "takeover of a released lease counts a transition",
        released_record(held_by(OTHER, renewed=0), now=ago(0.1)),
        LeaseRecord(ME, 10, FIXED_NOW, FIXED_NOW, 4),
    ),
    (
        "takeover of an empty record",
        LeaseRecord(),
        LeaseRecord(ME, 10, FIXED_NOW, FIXED_NOW, 1),
    ),
]


@pytest.mark.parametrize(
    ("record", "expected"), [n[1:] for n in NEXT_RECORDS], ids=[n[0] for n in NEXT_RECORDS]
)
def test_next_record(record: LeaseRecord | None, expected: LeaseRecord | None) -> None:
    assert next_record(record, identity=ME, now=FIXED_NOW, lease_duration_seconds=10) == expected


def test_a_released_record_names_no_holder_and_keeps_the_transition_count() -> None:
    released = released_record(held_by(ME, renewed=1, transitions=7), now=FIXED_NOW)
    assert released == LeaseRecord("", 1, FIXED_NOW, FIXED_NOW, 7)
    assert verdict(released, identity=OTHER, now=FIXED_NOW) is Verdict.ACQUIRE


# ---------------------------------------------------------------------- wire format
def test_a_record_round_trips_through_a_lease_spec() -> None:
    record = held_by(ME, renewed=1)
    spec = record.to_spec()
    assert spec == {
        "holderIdentity": ME,
        "leaseDurationSeconds": 15,
        "leaseTransitions": 3,
        "acquireTime": "2026-11-21T13:02:25.123456Z",
        "renewTime": "2026-11-21T13:04:04.123456Z",
    }
    assert LeaseRecord.from_spec(spec) == record


def test_a_malformed_spec_reads_as_an_expired_lease() -> None:
    record = LeaseRecord.from_spec(
        {
            "holderIdentity": OTHER,
            "leaseDurationSeconds": "15",
            "renewTime": "yesterday",
            "leaseTransitions": None,
        }
    )
    assert record == LeaseRecord(holder_identity=OTHER)
    assert verdict(record, identity=ME, now=FIXED_NOW) is Verdict.ACQUIRE


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-21T13:04:05.123456Z", FIXED_NOW),
        ("2026-11-21T13:04:05Z", FIXED_NOW.replace(microsecond=0)),
        ("2026-11-21T15:04:05.123456+02:00", FIXED_NOW),
        ("2026-11-21T13:04:05.123456", FIXED_NOW),
        ("", None),
        ("not a time", None),
        (None, None),
        (12, None),
    ],
)
def test_parse_microtime(text: object, expected: datetime | None) -> None:
    assert parse_microtime(text) == expected


def test_format_microtime_is_utc_with_six_digits() -> None:
    assert format_microtime(FIXED_NOW) == "2026-11-21T13:04:05.123456Z"
    assert format_microtime(FIXED_NOW.replace(microsecond=0)) == "2026-11-21T13:04:05.000000Z"
    plus_two = FIXED_NOW.astimezone(timezone(timedelta(hours=2)))
    assert format_microtime(plus_two) == "2026-11-21T13:04:05.123456Z"
    with pytest.raises(ValueError, match="timezone"):
        format_microtime(FIXED_NOW.replace(tzinfo=None))


# ---------------------------------------------------------------------- the elector loop
class FakeLeases:
    """Leases kept in memory with the server's optimistic concurrency; `down` fails every call
    the way a stopped API server does (status 0, connection refused)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str | None, str], dict[str, Any]] = {}
        self.version = 0
        self.down = False
        self.writes = 0

    def _reachable(self) -> None:
        if self.down:
            raise KubeError("connection failed: refused")

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.writes += 1
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self.version)
        meta = stored["metadata"]
        self.objects[(meta.get("namespace"), meta["name"])] = stored
        return copy.deepcopy(stored)

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        self._reachable()
        found = self.objects.get((namespace, name))
        return copy.deepcopy(found) if found else None

    def create(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        self._reachable()
        meta = obj["metadata"]
        if (meta.get("namespace"), meta["name"]) in self.objects:
            raise KubeError("exists", status=409, reason="AlreadyExists")
        return self._store(obj)

    def replace(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        self._reachable()
        meta = obj["metadata"]
        current = self.objects.get((meta.get("namespace"), meta["name"]))
        if current is None:
            raise KubeError("not found", status=404, reason="NotFound")
        if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise KubeError("conflict", status=409, reason="Conflict")
        return self._store(obj)

    def spec(self, name: str = "lock") -> dict[str, Any]:
        spec: dict[str, Any] = self.objects[("ns", name)]["spec"]
        return spec


class Clocks:
    """One monotonic and one wall clock that advance together, by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return FIXED_NOW + timedelta(seconds=self.now - 1000.0)

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def started(self) -> None:
        self.calls.append("started")

    def stopped(self) -> None:
        self.calls.append("stopped")


def elector(
    store: FakeLeases, clocks: Clocks, identity: str = ME, recorder: Recorder | None = None
) -> LeaderElector:
    recorder = recorder or Recorder()
    return LeaderElector(
        cast(KubeClient, store),
        namespace="ns",
        name="lock",
        identity=identity,
        lease_duration=15.0,
        renew_deadline=10.0,
        retry_period=2.0,
        clock=clocks.monotonic,
        wall_clock=clocks.wall,
        on_started_leading=recorder.started,
        on_stopped_leading=recorder.stopped,
    )


@pytest.mark.parametrize(
    ("lease", "renew", "retry"),
    [(10.0, 10.0, 2.0), (10.0, 12.0, 2.0), (15.0, 10.0, 10.0), (15.0, 10.0, 0.0)],
)
def test_the_elector_refuses_timings_that_allow_two_leaders(
    lease: float, renew: float, retry: float
) -> None:
    with pytest.raises(ValueError, match="retry_period < renew_deadline < lease_duration"):
        LeaderElector(
            cast(KubeClient, FakeLeases()),
            namespace="ns",
            name="lock",
            identity=ME,
            lease_duration=lease,
            renew_deadline=renew,
            retry_period=retry,
        )


def test_the_elector_needs_an_identity() -> None:
    with pytest.raises(ValueError, match="identity"):
        LeaderElector(cast(KubeClient, FakeLeases()), namespace="ns", name="lock", identity="")


def test_it_creates_a_missing_lease_and_leads() -> None:
    store, clocks, recorder = FakeLeases(), Clocks(), Recorder()
    a = elector(store, clocks, recorder=recorder)
    assert a._tick() == 2.0
    assert a.is_leader()
    assert recorder.calls == ["started"]
    assert store.spec() == {
        "holderIdentity": ME,
        "leaseDurationSeconds": 15,
        "leaseTransitions": 0,
        "acquireTime": "2026-11-21T13:04:05.123456Z",
        "renewTime": "2026-11-21T13:04:05.123456Z",
    }
    clocks.advance(2.0)
    a._tick()
    assert store.spec()["renewTime"] == "2026-11-21T13:04:07.123456Z"
    assert recorder.calls == ["started"], "a renewal is not a new term"


def test_a_standby_waits_for_expiry_then_takes_over_and_counts_the_transition() -> None:
    store, clocks = FakeLeases(), Clocks()
    a, b = elector(store, clocks), elector(store, clocks, identity=OTHER)
    a._tick()
    b._tick()
    assert a.is_leader() and not b.is_leader()
    clocks.advance(14.9)  # a has stopped renewing (crashed); its lease still runs
    b._tick()
    assert not b.is_leader()
    clocks.advance(0.1)
    b._tick()
    assert b.is_leader()
    assert store.spec()["holderIdentity"] == OTHER
    assert store.spec()["leaseTransitions"] == 1


def test_is_leader_turns_false_at_the_renew_deadline_without_waiting_for_the_loop() -> None:
    store, clocks, recorder = FakeLeases(), Clocks(), Recorder()
    a = elector(store, clocks, recorder=recorder)
    a._tick()
    store.down = True
    for _ in range(4):
        clocks.advance(2.0)
        wait = a._tick()
        assert a.is_leader()
    assert wait == pytest.approx(2.0)
    clocks.advance(1.0)
    assert a._tick() == pytest.approx(1.0), "the loop wakes up exactly at the deadline"
    clocks.advance(0.999)
    assert a.is_leader()
    clocks.advance(0.001)
    assert not a.is_leader(), "is_leader is computed, not left to the loop"
    assert recorder.calls == ["started"]
    a._tick()
    assert recorder.calls == ["started", "stopped"]
    # Nobody took the lease meanwhile: once the server is back, a re-acquires its own lease.
    store.down = False
    a._tick()
    assert a.is_leader()
    assert recorder.calls == ["started", "stopped", "started"]
    assert store.spec()["leaseTransitions"] == 0


def test_a_leader_that_finds_its_lease_taken_steps_down_at_once() -> None:
    store, clocks, recorder = FakeLeases(), Clocks(), Recorder()
    a = elector(store, clocks, recorder=recorder)
    a._tick()
    taken = copy.deepcopy(store.objects[("ns", "lock")])
    taken["spec"]["holderIdentity"] = OTHER
    taken["spec"]["renewTime"] = format_microtime(clocks.wall())
    store.replace(Kind("coordination.k8s.io", "v1", "Lease", "leases", True), taken)
    clocks.advance(2.0)
    a._tick()
    assert not a.is_leader()
    assert recorder.calls == ["started", "stopped"]
    assert store.spec()["holderIdentity"] == OTHER


def test_a_leader_renews_over_a_foreign_write_that_left_it_holder() -> None:
    store, clocks = FakeLeases(), Clocks()
    a = elector(store, clocks)
    a._tick()
    annotated = copy.deepcopy(store.objects[("ns", "lock")])
    annotated["metadata"]["annotations"] = {"touched": "by kubectl"}
    annotated["spec"]["strategy"] = "OldestEmulationVersion"
    store.replace(Kind("coordination.k8s.io", "v1", "Lease", "leases", True), annotated)
    clocks.advance(2.0)
    a._tick()
    assert a.is_leader()
    stored = store.objects[("ns", "lock")]
    assert stored["metadata"]["annotations"] == {"touched": "by kubectl"}
    assert stored["spec"]["strategy"] == "OldestEmulationVersion", "fields we do not own stay"
    assert stored["spec"]["renewTime"] == format_microtime(clocks.wall())


def test_stop_releases_the_lease_after_is_leader_turns_false() -> None:
    store = FakeLeases()
    seen: list[bool] = []
    leading = threading.Event()
    a = LeaderElector(
        cast(KubeClient, store),
        namespace="ns",
        name="lock",
        identity=ME,
        on_started_leading=leading.set,
        on_stopped_leading=lambda: seen.append(a.is_leader()),
    )
    a.start()
    assert leading.wait(5)
    a.stop()
    assert seen == [False]
    spec = store.spec()
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1
    assert spec["leaseTransitions"] == 0
    assert not a.is_leader()


def test_stop_from_a_callback_does_not_deadlock() -> None:
    store = FakeLeases()
    done = threading.Event()

    def give_up() -> None:
        a.stop(release=True)
        done.set()

    a = LeaderElector(
        cast(KubeClient, store),
        namespace="ns",
        name="lock",
        identity=ME,
        on_started_leading=give_up,
    )
    a.start()
    assert done.wait(5)
    assert a._thread is not None
    a._thread.join(5)
    assert not a._thread.is_alive()
    assert store.spec()["holderIdentity"] == ""
