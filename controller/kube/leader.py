"""Leader election on a `coordination.k8s.io/v1` Lease, the way client-go's leaderelection does it.

Several replicas run; only the one holding the Lease may write. Safety rests on two clocks
agreeing closely enough: the holder stops calling itself leader `renew_deadline` after the start
of its last successful renewal (its own monotonic clock), while a standby only takes the Lease
once the holder's `renewTime + leaseDurationSeconds` has passed (its own wall clock). As long as
`renew_deadline < lease_duration` and the replicas' wall clocks differ by less than the gap,
two replicas never both believe they lead.

Every Lease write is a PUT carrying the resourceVersion that was read, so two replicas racing
for a free Lease cannot both win: the loser gets a 409 and re-reads. Those PUTs go through
`KubeClient.replace`, which does not retry, because a conflict must be seen at once; reads and
the initial create use the retrying verbs.

What to do with a Lease record (renew, acquire, keep waiting) is decided by pure functions
(`verdict`, `next_record`, `released_record`) so the rules are tested without a server.
"""

from __future__ import annotations

import copy
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import structlog

from controller.kube.client import KubeClient, KubeError
from controller.kube.kinds import LEASE

log = structlog.get_logger(__name__)

MICROTIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
RELEASED_LEASE_DURATION_SECONDS = 1


def utc_now() -> datetime:
    return datetime.now(UTC)


def format_microtime(moment: datetime) -> str:
    """RFC 3339 with microseconds in UTC, the only form a real API server accepts for MicroTime."""
    if moment.tzinfo is None:
        raise ValueError("a MicroTime needs a timezone-aware datetime")
    return moment.astimezone(UTC).strftime(MICROTIME_FORMAT)


def parse_microtime(value: object) -> datetime | None:
    """A Time or MicroTime as the server returns it; None for anything missing or malformed."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def default_identity() -> str:
    """Host name plus a random suffix: a restarted pod must not inherit its old self's lease."""
    return f"{socket.gethostname()}_{os.urandom(4).hex()}"


@dataclass(frozen=True)
class LeaseRecord:
    """The leader-election fields of a Lease spec."""

    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    lease_transitions: int = 0

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> LeaseRecord:
        duration = spec.get("leaseDurationSeconds")
        transitions = spec.get("leaseTransitions")
        return cls(
            holder_identity=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=duration if isinstance(duration, int) else 0,
            acquire_time=parse_microtime(spec.get("acquireTime")),
            renew_time=parse_microtime(spec.get("renewTime")),
            lease_transitions=transitions if isinstance(transitions, int) else 0,
        )

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.lease_transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = format_microtime(self.acquire_time)
        if self.renew_time is not None:
            spec["renewTime"] = format_microtime(self.renew_time)
        return spec

    @property
    def expires_at(self) -> datetime | None:
        """When a standby may take over; None when the record cannot say (treated as expired)."""
        if self.renew_time is None or self.lease_duration_seconds <= 0:
            return None
        return self.renew_time + timedelta(seconds=self.lease_duration_seconds)


class Verdict(StrEnum):
    RENEW = "renew"
    """We are the recorded holder: write a fresh renewTime."""
    ACQUIRE = "acquire"
    """Nobody holds it, or the holder let it expire: take it."""
    HELD = "held"
    """Someone else holds an unexpired lease: wait."""


def verdict(record: LeaseRecord, *, identity: str, now: datetime) -> Verdict:
    """What `identity` may do with `record` at wall-clock time `now`.

    A record naming us is renewed even when it has expired: nobody else took it, and the
    resourceVersion on the PUT makes that certain. A record without a usable renewTime or
    duration is treated as expired, or a corrupt Lease would block election forever.
    """
    if record.holder_identity == identity:
        return Verdict.RENEW
    if not record.holder_identity:
        return Verdict.ACQUIRE
    expires_at = record.expires_at
    if expires_at is None or expires_at <= now:
        return Verdict.ACQUIRE
    return Verdict.HELD


def first_record(*, identity: str, now: datetime, lease_duration_seconds: int) -> LeaseRecord:
    """The record of a Lease we create: its creator is its first holder, with no transition."""
    return LeaseRecord(
        holder_identity=identity,
        lease_duration_seconds=lease_duration_seconds,
        acquire_time=now,
        renew_time=now,
        lease_transitions=0,
    )


def next_record(
    record: LeaseRecord | None,
    *,
    identity: str,
    now: datetime,
    lease_duration_seconds: int,
) -> LeaseRecord | None:
    """The record to write to hold the lease from `now`, or None while someone else holds it.

    `None` for `record` means the Lease does not exist yet (see `first_record`). Taking it over
    from anyone else, including from "" (a released lease), counts a transition, as client-go
    does; renewing our own keeps acquireTime and the count.
    """
    if record is None:
        return first_record(
            identity=identity, now=now, lease_duration_seconds=lease_duration_seconds
        )
    decision = verdict(record, identity=identity, now=now)
    if decision is Verdict.HELD:
        return None
    if decision is Verdict.RENEW:
        return replace(
            record,
            lease_duration_seconds=lease_duration_seconds,
            acquire_time=record.acquire_time or now,
            renew_time=now,
        )
    return LeaseRecord(
        holder_identity=identity,
        lease_duration_seconds=lease_duration_seconds,
        acquire_time=now,
        renew_time=now,
        lease_transitions=record.lease_transitions + 1,
    )


def released_record(record: LeaseRecord, *, now: datetime) -> LeaseRecord:
    """An empty holder with a one-second lease, so a standby takes over on its next poll."""
    return LeaseRecord(
        holder_identity="",
        lease_duration_seconds=RELEASED_LEASE_DURATION_SECONDS,
        acquire_time=now,
        renew_time=now,
        lease_transitions=record.lease_transitions,
    )


class _Outcome(StrEnum):
    HELD_BY_US = "held_by_us"
    HELD_BY_OTHER = "held_by_other"
    FAILED = "failed"


class LeaderElector:
    """Campaigns for and keeps one Lease from a background thread.

    `is_leader()` is the check to make before every write. Callbacks run on the elector's
    thread, in order (started, stopped, started, ...); they must return quickly, since a slow
    callback delays renewals. A request that hangs (up to the client's request timeout) can
    delay `on_stopped_leading`, but never `is_leader()` turning False: that is computed from the
    clock at every call.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = utc_now,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
    ) -> None:
        if not identity:
            raise ValueError("a leader elector needs a non-empty identity")
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError(
                "need 0 < retry_period < renew_deadline < lease_duration, or two replicas can "
                f"both lead (got {retry_period}, {renew_deadline}, {lease_duration})"
            )
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock = clock
        self._wall_clock = wall_clock
        self._on_started_leading = on_started_leading
        self._on_stopped_leading = on_stopped_leading
        # Rounded up: a standby waiting a little longer is safe, taking over early is not.
        self._lease_seconds = math.ceil(lease_duration)
        self._lock = threading.Lock()
        self._leading = False
        self._renewed_at = 0.0
        self._observed: dict[str, Any] | None = None
        self._seen_holder = ""
        self._stopping = threading.Event()
        self._release_on_stop = True
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ public API
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("a LeaderElector is started once")
        self._thread = threading.Thread(
            target=self._run, name=f"leader-elector-{self.name}", daemon=True
        )
        self._thread.start()

    def stop(self, *, release: bool = True) -> None:
        """Stop campaigning; with `release`, hand the Lease over now rather than at expiry.

        Blocks until the elector's thread has finished its current request, which with the
        API server down can take as long as the client's retry deadline. Called from a
        callback (the elector's own thread), it returns at once and the loop ends after it.
        """
        self._release_on_stop = release
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def is_leader(self) -> bool:
        with self._lock:
            return self._leading and self._clock() - self._renewed_at < self.renew_deadline

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._stopping.wait(self._tick())
        finally:
            self._shut_down()

    def _tick(self) -> float:
        """One attempt to acquire or renew; returns how long to sleep before the next."""
        self._step_down_if_overdue()
        started = self._clock()
        outcome = self._attempt()
        if outcome is _Outcome.HELD_BY_US:
            if self._clock() - started < self.renew_deadline:
                self._renewed(started)
        elif outcome is _Outcome.HELD_BY_OTHER and self._leading:
            self._step_down("lease_taken")
        self._step_down_if_overdue()
        if not self._leading:
            return self.retry_period
        until_deadline = self._renewed_at + self.renew_deadline - self._clock()
        return max(0.0, min(self.retry_period, until_deadline))

    def _attempt(self) -> _Outcome:
        """client-go's tryAcquireOrRenew: the leader writes optimistically over what it wrote."""
        try:
            if self._leading and self._observed is not None:
                try:
                    return self._write(self._observed)
                except KubeError as exc:
                    if exc.status != 409:
                        raise
                    log.info("lease_conflict", lease=self.name, identity=self.identity)
            lease = self.client.get(LEASE, self.name, self.namespace)
            if lease is None:
                try:
                    return self._create()
                except KubeError as exc:
                    if exc.reason != "AlreadyExists":
                        raise
                lease = self.client.get(LEASE, self.name, self.namespace)
                if lease is None:
                    return _Outcome.FAILED
            return self._write(lease)
        except KubeError as exc:
            log.warning(
                "lease_update_failed",
                lease=self.name,
                identity=self.identity,
                leading=self._leading,
                status=exc.status,
                error=str(exc)[:200],
            )
            return _Outcome.FAILED

    def _create(self) -> _Outcome:
        record = first_record(
            identity=self.identity,
            now=self._wall_clock(),
            lease_duration_seconds=self._lease_seconds,
        )
        body = {
            "apiVersion": LEASE.api_version,
            "kind": LEASE.kind,
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": record.to_spec(),
        }
        self._observed = self.client.create(LEASE, body)
        log.info("lease_created", lease=self.name, identity=self.identity)
        return _Outcome.HELD_BY_US

    def _write(self, lease: dict[str, Any]) -> _Outcome:
        """PUT our record over `lease`, unless someone else holds it; 409 propagates."""
        spec = lease.get("spec") or {}
        record = next_record(
            LeaseRecord.from_spec(spec),
            identity=self.identity,
            now=self._wall_clock(),
            lease_duration_seconds=self._lease_seconds,
        )
        if record is None:
            self._observed = lease
            holder = str(spec.get("holderIdentity") or "")
            if holder != self._seen_holder:
                log.info("lease_held", lease=self.name, identity=self.identity, holder=holder)
                self._seen_holder = holder
            return _Outcome.HELD_BY_OTHER
        body = copy.deepcopy(lease)
        body["apiVersion"] = LEASE.api_version
        body["kind"] = LEASE.kind
        body["spec"] = {**spec, **record.to_spec()}  # keep fields we do not own
        self._observed = self.client.replace(LEASE, body)
        return _Outcome.HELD_BY_US

    # ------------------------------------------------------------------ transitions
    def _renewed(self, started: float) -> None:
        with self._lock:
            was_leading = self._leading
            self._leading = True
            self._renewed_at = started
        if not was_leading:
            log.info("leader_acquired", lease=self.name, identity=self.identity)
            if self._on_started_leading is not None:
                self._on_started_leading()

    def _step_down_if_overdue(self) -> None:
        if self._leading and self._clock() - self._renewed_at >= self.renew_deadline:
            self._step_down("renew_deadline_exceeded")

    def _step_down(self, reason: str) -> None:
        with self._lock:
            was_leading = self._leading
            self._leading = False
        if was_leading:
            log.warning("leader_lost", lease=self.name, identity=self.identity, reason=reason)
            if self._on_stopped_leading is not None:
                self._on_stopped_leading()

    def _shut_down(self) -> None:
        """Leave: is_leader() turns False before the release is sent, never after."""
        still_valid = self.is_leader()
        with self._lock:
            was_leading = self._leading
            self._leading = False
        if not was_leading:
            return
        if self._stopping.is_set() and self._release_on_stop and still_valid:
            self._release()
        log.info("leader_stopped", lease=self.name, identity=self.identity)
        if self._on_stopped_leading is not None:
            self._on_stopped_leading()

    def _release(self) -> None:
        if self._observed is None:
            return
        spec = self._observed.get("spec") or {}
        record = released_record(LeaseRecord.from_spec(spec), now=self._wall_clock())
        body = copy.deepcopy(self._observed)
        body["apiVersion"] = LEASE.api_version
        body["kind"] = LEASE.kind
        body["spec"] = {**spec, **record.to_spec()}
        try:
            self._observed = self.client.replace(LEASE, body)
        except KubeError as exc:
            # Someone took it already (409) or the server is away: the lease expires anyway.
            log.warning(
                "lease_release_failed",
                lease=self.name,
                identity=self.identity,
                status=exc.status,
                error=str(exc)[:200],
            )
            return
        log.info("leader_released", lease=self.name, identity=self.identity)
