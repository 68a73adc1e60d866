"""The controller process: watches wake a level-triggered loop that reconciles while it leads.

Any change to a policy object, a managed object or a Workload wakes the loop; after a short
quiet period (so a burst of events costs one pass) it re-derives the whole desired state. A
periodic resync catches anything a watch missed. Failed passes back off exponentially with
jitter up to a minute, so an unreachable API server is never hammered. Only the replica holding
the Lease reconciles; the others keep their watches warm and take over within a lease duration.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import structlog

from controller import names
from controller.history import HistoryReader
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from controller.kube.events import EventRecorder
from controller.kube.leader import LeaderElector, utc_now
from controller.kube.watch import Watcher
from controller.metrics import Metrics
from controller.reconcile.reconciler import NotLeaderError, Reconciler, ReconcileResult

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class LoopOptions:
    namespace: str = names.DEFAULT_NAMESPACE
    identity: str = "quartermaster"
    leader_election: bool = True
    lease_name: str = names.LEASE_NAME
    lease_duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0
    resync_seconds: float = 300.0
    debounce_seconds: float = 0.3
    max_backoff_seconds: float = 60.0


class Controller:
    """Runs until `stop` is set; `ready()` and `healthy()` feed the probes."""

    def __init__(
        self,
        client: KubeClient,
        options: LoopOptions,
        *,
        on_result: Callable[[ReconcileResult], None] | None = None,
        on_error: Callable[[Exception], None] | None = None,
        lease_client: KubeClient | None = None,
        wall_clock: Callable[[], datetime] = utc_now,
    ) -> None:
        """`lease_client` should retry for less than the renew deadline (see `run`).

        `wall_clock` is the time the decisions and their Events are made at (deadlines,
        evaluation windows, cooldowns, Event series): a test moves it to run the loop and its
        own passes on one timeline. The Lease, backoff and probes keep real time, which is
        what other replicas and the kubelet measure.
        """
        self.client = client
        self.options = options
        self.on_result = on_result
        self.on_error = on_error
        self.stop_event = threading.Event()
        self._wake = threading.Event()
        self._synced_once = False
        self._last_loop = time.monotonic()
        self._retry_at: float | None = None
        self.elector: LeaderElector | None = None
        if options.leader_election:
            self.elector = LeaderElector(
                lease_client or client,
                namespace=options.namespace,
                name=options.lease_name,
                identity=options.identity,
                lease_duration=options.lease_duration_seconds,
                renew_deadline=options.renew_deadline_seconds,
                retry_period=options.retry_period_seconds,
                on_started_leading=self._wake.set,
                on_stopped_leading=self._wake.set,
            )
        self.events = EventRecorder(
            client, reporting_instance=options.identity, wall_clock=wall_clock
        )
        self.metrics = Metrics()
        self.history = HistoryReader()
        self.reconciler = Reconciler(
            client,
            namespace=options.namespace,
            events=self.events,
            may_write=self.is_leader,
            metrics=self.metrics,
            history=self.history,
            wall_clock=wall_clock,
        )
        self.watchers: list[Watcher] = []

    # ------------------------------------------------------------------ state
    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def ready(self) -> tuple[bool, str]:
        if self.is_leader():
            if self._synced_once:
                return True, "leading; synced"
            return False, "leading; first sync not done"
        if self.watchers and all(w.synced.is_set() for w in self.watchers):
            return True, "standby; watches synced"
        return False, "standby; watches not synced"

    def healthy(self) -> tuple[bool, str]:
        stale = time.monotonic() - self._last_loop
        limit = self.options.resync_seconds + self.options.max_backoff_seconds + 60
        return (stale < limit), f"loop last ran {stale:.0f} s ago"

    # ------------------------------------------------------------------ running
    def _notify(self, _kind: str) -> None:
        self._wake.set()

    def _start_watchers(self) -> None:
        served = self.client.served_group_versions()
        watched: list[tuple[kinds.Kind, str | None]] = [
            (kinds.CAPACITY_POLICY, None),
            (kinds.TRAINING_PROJECT, None),
            (kinds.WORKLOAD, None),
            *((k, names.MANAGED_SELECTOR) for k in kinds.MANAGED_KINDS),
        ]
        for kind, selector in watched:
            if kind.group_version not in served:
                log.warning("kind_not_served", kind=kind.kind, group_version=kind.group_version)
                continue
            watcher = Watcher(
                self.client,
                kind,
                notify=self._notify,
                stop=self.stop_event,
                label_selector=selector,
                namespace=(
                    self.options.namespace if kind in kinds.CONTROLLER_NAMESPACE_KINDS else None
                ),
            )
            watcher.start()
            self.watchers.append(watcher)

    def run(self) -> None:
        log.info(
            "controller_starting",
            identity=self.options.identity,
            leader_election=self.options.leader_election,
        )
        self._start_with_retry(self._start_watchers)
        if self.elector is not None:
            self.elector.start()
        backoff = 1.0
        self._wake.set()
        try:
            while not self.stop_event.is_set():
                self._last_loop = time.monotonic()
                timeout = self.options.resync_seconds
                if self._retry_at is not None:
                    timeout = max(0.0, min(timeout, self._retry_at - time.monotonic()))
                woken = self._wake.wait(timeout=timeout)
                if self.stop_event.is_set():
                    break
                if woken:
                    self.stop_event.wait(self.options.debounce_seconds)
                self._wake.clear()
                leading = self.is_leader()
                self.metrics.leader.set(1.0 if leading else 0.0)
                if not leading:
                    self.metrics.forget_plan()
                    continue
                backoff = self._pass(backoff)
        finally:
            self.shutdown()

    def _pass(self, backoff: float) -> float:
        """One reconcile pass as leader; returns the backoff for the next failure."""
        started = time.monotonic()
        try:
            result = self.reconciler.reconcile()
        except NotLeaderError:
            log.warning("leadership_lost_mid_reconcile")
            return backoff
        except Exception as exc:  # the top of the loop: log, back off, go on
            # A bug hit by one object's content must not stop the controller for every team;
            # KubeErrors are the expected kind, anything else is logged with its traceback.
            self.metrics.reconcile_errors_total.inc()
            delay = backoff + random.uniform(0, backoff / 2)
            if isinstance(exc, KubeError):
                log.error(
                    "reconcile_failed", error=str(exc)[:300], retry_in_seconds=round(delay, 2)
                )
            else:
                log.exception("reconcile_crashed", retry_in_seconds=round(delay, 2))
            if self.on_error:
                self.on_error(exc)
            self.stop_event.wait(delay)
            self._wake.set()
            return min(backoff * 2, self.options.max_backoff_seconds)
        if result.failed:
            # Objects the server refused (or could not find while it restarted) are retried
            # with backoff, not left for the next resync.
            delay = backoff + random.uniform(0, backoff / 2)
            log.warning(
                "reconcile_incomplete", failed=len(result.failed), retry_in_seconds=round(delay, 2)
            )
            self._retry_at = time.monotonic() + delay
            backoff = min(backoff * 2, self.options.max_backoff_seconds)
        else:
            self._retry_at = None
            backoff = 1.0
        self._synced_once = True
        self.metrics.reconcile_duration_seconds.observe(time.monotonic() - started)
        self.metrics.last_successful_reconcile_timestamp_seconds.set(time.time())
        if self.on_result:
            self.on_result(result)
        return backoff

    def _start_with_retry(self, start: Callable[[], None]) -> None:
        backoff = 1.0
        while not self.stop_event.is_set():
            try:
                start()
                return
            except KubeError as exc:
                log.error("startup_failed", error=str(exc)[:300], retry_in_seconds=backoff)
                self.stop_event.wait(backoff)
                backoff = min(backoff * 2, self.options.max_backoff_seconds)

    def stop(self) -> None:
        self.stop_event.set()
        self._wake.set()
        # Requests in their retry loop give up now; SIGTERM must not wait out a 30 s deadline.
        self.client.cancelled.set()
        if self.elector is not None:
            self.elector.client.cancelled.set()

    def shutdown(self) -> None:
        self.stop_event.set()
        self.client.abort_watches()
        deadline = time.monotonic() + 5
        for watcher in self.watchers:
            watcher.join(timeout=max(deadline - time.monotonic(), 0.0))
        if self.elector is not None:
            self.elector.stop(release=True)
        log.info("controller_stopped", identity=self.options.identity)
