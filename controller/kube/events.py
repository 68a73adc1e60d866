"""Kubernetes Events (`events.k8s.io/v1`) saying what the controller did to an object, and why.

Events are best-effort: `emit` logs a failure and returns None, it never raises, because a
missing Event must not fail (or retry) the reconcile that produced it.

A controller repeats itself: a policy that cannot be satisfied says so on every reconcile. As
client-go's recorder does, an identical Event seen again within `SERIES_WINDOW` updates the
`series` (count, lastObservedTime) of the Event already written instead of creating one more
object. As client-go also does, only the first repeat is written at once; later ones are
counted in memory and written at most every `SERIES_REFRESH` (by `flush`, which the loop calls
after each pass), so a condition repeated on every pass of a busy controller costs one write
per Event per refresh, not one per pass. The map from Event identity to Event name lives in
memory: after a restart the first repeat creates a new Event, which costs one object, not
correctness; a count not yet written when the process ends is lost (Events are best effort).

The real API server rejects an `events.k8s.io/v1` Event whose immutable fields change on update,
so a repeat only ever touches `series` (a JSON merge patch); and it only accepts Events about a
cluster-scoped object in `default` or `kube-system`, which the constructor checks.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

import structlog

from controller.kube.client import MERGE_PATCH_CONTENT_TYPE, KubeClient, KubeError
from controller.kube.kinds import EVENT
from controller.kube.leader import format_microtime, utc_now

log = structlog.get_logger(__name__)

EventType = Literal["Normal", "Warning"]
EVENT_TYPES: frozenset[str] = frozenset({"Normal", "Warning"})
SERIES_WINDOW = timedelta(minutes=10)
SERIES_REFRESH = timedelta(minutes=5)
"""How stale a series' count may be on the server: repeats in between are kept in memory."""
NOTE_LIMIT_BYTES = 1024
FIELD_LIMIT = 128  # reason, action, reportingController and reportingInstance
MAX_NAME_LENGTH = 253
MAX_TRACKED_SERIES = 4096
CAMEL_CASE = re.compile(r"[A-Z][A-Za-z0-9]*")
# Where a cluster-scoped object's Events may live, per the API server's Event validation.
CLUSTER_SCOPED_EVENT_NAMESPACES = frozenset({"default", "kube-system"})
QUALIFIED_NAME = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)


def truncate_note(note: str) -> str:
    """At most 1024 bytes of UTF-8 (the server counts bytes), never splitting a character."""
    encoded = note.encode("utf-8")
    if len(encoded) <= NOTE_LIMIT_BYTES:
        return note
    return encoded[:NOTE_LIMIT_BYTES].decode("utf-8", errors="ignore")


def event_name(regarding_name: str, suffix: str) -> str:
    """`<name>.<suffix>`, shortened so the whole stays a valid DNS subdomain."""
    room = MAX_NAME_LENGTH - len(suffix) - 1
    prefix = regarding_name[:room].rstrip("-.")
    return f"{prefix}.{suffix}"


def object_reference(obj: Mapping[str, Any]) -> dict[str, str]:
    """The `regarding` reference to a live object; ValueError when it cannot be identified."""
    meta = obj.get("metadata") or {}
    reference = {
        "apiVersion": str(obj.get("apiVersion") or ""),
        "kind": str(obj.get("kind") or ""),
        "name": str(meta.get("name") or ""),
    }
    missing = [key for key, value in reference.items() if not value]
    if missing:
        raise ValueError(f"the object an Event is about lacks {', '.join(missing)}")
    if meta.get("namespace"):
        reference["namespace"] = str(meta["namespace"])
    if meta.get("uid"):
        reference["uid"] = str(meta["uid"])
    return reference


@dataclass(slots=True)
class _Series:
    """One Event identity: which object on the server carries it and how often it happened."""

    namespace: str
    name: str = ""  # empty until the Event is created
    count: int = 0
    written_count: int = 0
    """The count the server has (1 once created)."""
    written_at: datetime | None = None
    last_observed: datetime | None = None
    touched: datetime | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


_SeriesKey = bytes


def _series_key(
    reference: Mapping[str, str], *, type: str, reason: str, action: str, note: str
) -> _SeriesKey:
    """An Event's identity (the object, type, reason, action and note) as a 16-byte digest.

    The recorder keeps each identity for `SERIES_WINDOW` and only ever compares it; on a busy
    controller that is hundreds of identities at once, each with a note of up to 1 KiB, and
    the digest keeps none of those strings alive. Each part is length-prefixed, so no two
    identities give the same input.
    """
    digest = hashlib.blake2b(digest_size=16)
    parts = [f"{k}={v}" for k, v in sorted(reference.items())] + [type, reason, action, note]
    for part in parts:
        encoded = part.encode("utf-8")
        digest.update(len(encoded).to_bytes(4, "big"))
        digest.update(encoded)
    return digest.digest()


class EventRecorder:
    """Writes Events for one controller instance; safe to share between reconcile threads.

    Emits of different Events proceed in parallel; identical ones are serialised so a repeat
    always knows which Event to update.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        reporting_instance: str,
        reporting_controller: str = "quartermaster.dev/controller",
        namespace_for_cluster_scoped: str = "default",
        wall_clock: Callable[[], datetime] = utc_now,
        random_suffix: Callable[[], str] = lambda: os.urandom(8).hex(),
    ) -> None:
        if not QUALIFIED_NAME.fullmatch(reporting_controller) or len(reporting_controller) > (
            FIELD_LIMIT
        ):
            raise ValueError(f"reportingController {reporting_controller!r} is no qualified name")
        if not reporting_instance or len(reporting_instance) > FIELD_LIMIT:
            raise ValueError(f"reportingInstance must be 1 to {FIELD_LIMIT} characters")
        if namespace_for_cluster_scoped not in CLUSTER_SCOPED_EVENT_NAMESPACES:
            raise ValueError(
                "the API server only accepts Events about cluster-scoped objects in "
                f"{sorted(CLUSTER_SCOPED_EVENT_NAMESPACES)}, not {namespace_for_cluster_scoped!r}"
            )
        self.client = client
        self.reporting_controller = reporting_controller
        self.reporting_instance = reporting_instance
        self.namespace_for_cluster_scoped = namespace_for_cluster_scoped
        self._wall_clock = wall_clock
        self._random_suffix = random_suffix
        self._lock = threading.Lock()
        self._series: OrderedDict[_SeriesKey, _Series] = OrderedDict()

    def emit(
        self,
        regarding: Mapping[str, Any],
        *,
        type: EventType,
        reason: str,
        action: str,
        note: str,
    ) -> str | None:
        """Record that `action` happened to `regarding` because of `reason`.

        Returns the name of the Event created or updated, or None when nothing was written.
        """
        try:
            reference = object_reference(regarding)
            _check_fields(type=type, reason=reason, action=action)
        except ValueError as exc:
            log.error("event_emit_failed", reason=reason, action=action, error=str(exc))
            return None
        note = truncate_note(note)
        now = self._wall_clock()
        key = _series_key(reference, type=type, reason=reason, action=action, note=note)
        series = self._track(key, reference, now)
        with series.lock:
            try:
                if series.name and not self._repeat(series, now=now, due=False):
                    series.name = ""  # expired from the server: start a new Event
                if not series.name:
                    self._create(
                        series,
                        reference,
                        now=now,
                        type=type,
                        reason=reason,
                        action=action,
                        note=note,
                    )
            except KubeError as exc:
                log.warning(
                    "event_emit_failed",
                    regarding_kind=reference["kind"],
                    regarding_name=reference["name"],
                    reason=reason,
                    action=action,
                    status=exc.status,
                    error=str(exc)[:200],
                )
                return None
            series.last_observed = now
            return series.name

    # ------------------------------------------------------------------ internals
    def _track(self, key: _SeriesKey, reference: Mapping[str, str], now: datetime) -> _Series:
        """The series for `key`, forgetting those not seen within the window (and the oldest
        ones past `MAX_TRACKED_SERIES`) so the map stays bounded."""
        with self._lock:
            cutoff = now - SERIES_WINDOW
            while self._series:
                oldest = next(iter(self._series.values()))
                touched = oldest.touched
                if len(self._series) <= MAX_TRACKED_SERIES and touched and touched >= cutoff:
                    break
                self._series.popitem(last=False)
            series = self._series.get(key)
            if series is None or (series.last_observed and series.last_observed < cutoff):
                namespace = reference.get("namespace") or self.namespace_for_cluster_scoped
                series = _Series(namespace=namespace)
                self._series[key] = series
            series.touched = now
            self._series.move_to_end(key)
            return series

    def _create(
        self,
        series: _Series,
        reference: Mapping[str, str],
        *,
        now: datetime,
        type: str,
        reason: str,
        action: str,
        note: str,
    ) -> None:
        name = event_name(reference["name"], self._random_suffix())
        body = {
            "apiVersion": EVENT.api_version,
            "kind": EVENT.kind,
            "metadata": {"name": name, "namespace": series.namespace},
            "eventTime": format_microtime(now),
            "reportingController": self.reporting_controller,
            "reportingInstance": self.reporting_instance,
            "action": action,
            "reason": reason,
            "note": note,
            "type": type,
            "regarding": dict(reference),
        }
        try:
            self.client.create(EVENT, body)
        except KubeError as exc:
            # The name is random: it exists only if a retried POST had in fact gone through.
            if exc.reason != "AlreadyExists":
                raise
        series.name = name
        series.count = series.written_count = 1
        series.written_at = now
        log.debug("event_emitted", name=series.name, reason=reason, action=action)

    def _repeat(self, series: _Series, *, now: datetime, due: bool) -> bool:
        """Count one more occurrence on the existing Event (`due`: only write what is pending);
        False when the server no longer has it (Events live an hour by default).

        The first repeat is written at once, so the Event shows it is a series; the others
        when `SERIES_REFRESH` has passed since the last write.
        """
        if not due:
            series.count += 1
            series.last_observed = now
        first_repeat = series.written_count < 2 <= series.count
        stale = series.written_at is None or now - series.written_at >= SERIES_REFRESH
        if series.count == series.written_count or not (first_repeat or stale):
            return True
        assert series.last_observed is not None
        patch = {
            "series": {
                "count": series.count,
                "lastObservedTime": format_microtime(series.last_observed),
            }
        }
        try:
            self.client.request(
                "PATCH",
                EVENT.path(series.name, series.namespace),
                body=patch,
                content_type=MERGE_PATCH_CONTENT_TYPE,
            )
        except KubeError as exc:
            if exc.not_found:
                return False
            raise
        series.written_count, series.written_at = series.count, now
        log.debug("event_repeated", name=series.name, count=series.count)
        return True

    def flush(self) -> int:
        """Write the counts of series whose last write is `SERIES_REFRESH` old; the number of
        writes. Best effort, like `emit`: a failure is logged and left for the next flush."""
        now = self._wall_clock()
        with self._lock:
            pending = [s for s in self._series.values() if s.name and s.count > s.written_count]
        writes = 0
        for series in pending:
            with series.lock:
                before = series.written_count
                try:
                    if not self._repeat(series, now=now, due=True):
                        series.name = ""  # gone from the server: the next emit starts anew
                except KubeError as exc:
                    log.warning("event_flush_failed", name=series.name, error=str(exc)[:200])
                    continue
                writes += series.written_count != before
        return writes


def _check_fields(*, type: str, reason: str, action: str) -> None:
    """What the API server would reject, plus the CamelCase convention `kubectl` users expect."""
    if type not in EVENT_TYPES:
        raise ValueError(f"Event type must be Normal or Warning, not {type!r}")
    for label, value in (("reason", reason), ("action", action)):
        if not CAMEL_CASE.fullmatch(value) or len(value) > FIELD_LIMIT:
            raise ValueError(f"Event {label} must be CamelCase, 1 to {FIELD_LIMIT} characters")
