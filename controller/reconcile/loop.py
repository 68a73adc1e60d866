"""The controller process: a watch-fed cache wakes a loop that reconciles while it leads.

The cache (controller/kube/cache.py) keeps every collection a pass reads current through
list-and-watch, and any change it sees wakes the loop. A pass then works on one snapshot of the
cache, sending no request to read, and re-derives the whole desired state from it (it is
level-triggered: which event woke it does not matter). Passes are paced: a short quiet period
after a wake-up, so a burst of events costs one pass, and at least `min_pass_interval_seconds`
from the start of one pass to the start of the next, so steady churn costs a bounded number of
passes a minute however fast the events come, and so do the status writes that follow churn (at
most one per object a pass, and none for estimate noise: see `status_changed`). A periodic
resync runs a pass even when nothing woke the loop. Failed passes back off exponentially with
jitter up to a minute, so an unreachable API server is never hammered. Only the replica holding
the Lease reconciles; the others keep their cache warm and take over within a lease duration.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import structlog
from tenacity import RetryCallState, Retrying, retry_if_exception_type

from controller import allocator, names
from controller.backoff import Backoff, jittered, stop_when_set
from controller.collector import FULL_COLLECTION_SECONDS, FullCollections
from controller.history import HistoryReader
from controller.kube.cache import (
    DEFAULT_DISCOVERY_SECONDS,
    DEFAULT_PAGE_SIZE,
    DEFAULT_WATCH_SECONDS,
    Cache,
    controller_sources,
)
from controller.kube.client import KubeClient, KubeError
from controller.kube.events import EventRecorder
from controller.kube.leader import LeaderElector, utc_now
from controller.metrics import Metrics
from controller.reconcile.admission import LaneHolder
from controller.reconcile.learned_store import WRITE_INTERVAL_SECONDS, LearnedStore
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
    min_pass_interval_seconds: float = 2.0
    """From the start of one pass to the start of the next: at most 30 passes a minute."""
    max_backoff_seconds: float = 60.0
    page_size: int = DEFAULT_PAGE_SIZE
    watch_seconds: int = DEFAULT_WATCH_SECONDS
    discovery_seconds: float = DEFAULT_DISCOVERY_SECONDS
    full_collection_seconds: float = FULL_COLLECTION_SECONDS
    """Least time between the full collections the loop makes between passes."""
    learned_write_seconds: float = WRITE_INTERVAL_SECONDS
    """Least time between two writes of what was learned to its ConfigMap (and one more on
    a graceful stop)."""


def wait_before_pass(
    *,
    now: float,
    last_pass_started: float,
    min_interval_seconds: float,
    debounce_seconds: float,
    woken: bool,
) -> float:
    """Seconds to wait before the next pass starts (0 when it may start now).

    A wake-up waits the quiet period, so a burst of events costs one pass; any pass waits until
    `min_interval_seconds` after the last one started, so events arriving all the time cost at
    most one pass per interval, whatever their rate. A resync or a retry (not woken) waits only
    for the interval.
    """
    wait = last_pass_started + min_interval_seconds - now
    if woken:
        wait = max(wait, debounce_seconds)
    return max(wait, 0.0)


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
        self._last_pass_started = float("-inf")
        self._retry_at: float | None = None
        self._backoff = Backoff(initial=1.0, maximum=options.max_backoff_seconds)
        self.collections = FullCollections(
            options.full_collection_seconds, after=allocator.give_back_freed_memory
        )
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
        self.lanes = LaneHolder()
        """What each pass leaves for the lanes webhook (`controller.webhook`)."""
        self.learned = LearnedStore(
            client,
            namespace=options.namespace,
            interval_seconds=options.learned_write_seconds,
            metrics=self.metrics,
        )
        """What the passes learned, kept across restarts (`reconcile/learned_store.py`)."""
        self.cache = Cache(
            client,
            controller_sources(options.namespace),
            notify=self._notify,
            page_size=options.page_size,
            watch_seconds=options.watch_seconds,
            discovery_seconds=options.discovery_seconds,
        )
        self.reconciler = Reconciler(
            client,
            namespace=options.namespace,
            events=self.events,
            may_write=self.is_leader,
            metrics=self.metrics,
            history=self.history,
            wall_clock=wall_clock,
            record=self.cache.record,
            admission=self.lanes,
            learned=self.learned,
        )

    # ------------------------------------------------------------------ state
    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def ready(self) -> tuple[bool, str]:
        """Ready: every store synced (listed, its watch up), and as leader a pass done."""
        if self.is_leader():
            if not self._synced_once:
                return False, "leading; first sync not done"
            stale = self.cache.unsynced()
            if stale:
                return False, f"leading; watches not synced: {', '.join(stale)}"
            return True, "leading; synced"
        if self.cache.synced():
            return True, "standby; watches synced"
        return False, "standby; watches not synced"

    def healthy(self) -> tuple[bool, str]:
        stale = time.monotonic() - self._last_loop
        limit = self.options.resync_seconds + self.options.max_backoff_seconds + 60
        return (stale < limit), f"loop last ran {stale:.0f} s ago"

    # ------------------------------------------------------------------ running
    def _notify(self, _kind: str) -> None:
        self._wake.set()

    def run(self) -> None:
        log.info(
            "controller_starting",
            identity=self.options.identity,
            leader_election=self.options.leader_election,
        )
        self._start_cache()
        if self.elector is not None:
            self.elector.start()
        self._wake.set()
        try:
            while not self.stop_event.is_set():
                self._last_loop = time.monotonic()
                woken = self._wake.wait(timeout=self._until_due())
                if self.stop_event.is_set():
                    break
                self._pace(woken=woken)
                self._wake.clear()
                leading = self.is_leader()
                self.metrics.leader.set(1.0 if leading else 0.0)
                if not leading:
                    self.metrics.forget_plan()
                    self.lanes.clear()
                    self.reconciler.standby()
                elif self.cache.listed():  # if not, the last store's first list wakes the loop
                    self._pass()
                self.collections.between_passes()
        finally:
            self.shutdown()

    def _until_due(self) -> float:
        """Seconds until a pass is due with no wake-up: the resync, or the retry of a pass
        the server refused part of."""
        timeout = self.options.resync_seconds
        if self._retry_at is not None:
            timeout = max(0.0, min(timeout, self._retry_at - time.monotonic()))
        return timeout

    def _pace(self, *, woken: bool) -> None:
        """Wait out the quiet period after a wake-up and the minimum interval between passes;
        the events that arrive meanwhile are all in the snapshot the pass then takes."""
        wait = wait_before_pass(
            now=time.monotonic(),
            last_pass_started=self._last_pass_started,
            min_interval_seconds=self.options.min_pass_interval_seconds,
            debounce_seconds=self.options.debounce_seconds,
            woken=woken,
        )
        if wait > 0:
            self.stop_event.wait(wait)

    def _pass(self) -> None:
        """One reconcile pass as leader, on a snapshot of the cache."""
        started = time.monotonic()
        self._last_pass_started = started
        try:
            result = self.reconciler.reconcile(self.cache.snapshot())
        except NotLeaderError:
            log.warning("leadership_lost_mid_reconcile")
            return
        except Exception as exc:  # the top of the loop: log, back off, go on
            # A bug hit by one object's content must not stop the controller for every team;
            # KubeErrors are the expected kind, anything else is logged with its traceback.
            self.metrics.reconcile_errors_total.inc()
            delay = self._backoff.next_delay()
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
            return
        if result.failed:
            # Objects the server refused (or could not find while it restarted) are retried
            # with backoff, not left for the next resync; wake-ups are still answered meanwhile.
            delay = self._backoff.next_delay()
            log.warning(
                "reconcile_incomplete", failed=len(result.failed), retry_in_seconds=round(delay, 2)
            )
            self._retry_at = time.monotonic() + delay
        else:
            self._retry_at = None
            self._backoff.reset()
        self._synced_once = True
        self.events.flush()  # repeats of Events, written at most every SERIES_REFRESH
        self.metrics.reconcile_duration_seconds.observe(time.monotonic() - started)
        self.metrics.last_successful_reconcile_timestamp_seconds.set(time.time())
        if self.on_result:
            self.on_result(result)

    def _start_cache(self) -> None:
        """Start the cache (its first step, discovery, can fail), retrying until stopped."""
        retrying = Retrying(
            retry=retry_if_exception_type(KubeError),
            wait=jittered(1.0, self.options.max_backoff_seconds),
            stop=stop_when_set(self.stop_event),
            sleep=self._sleep,
            before_sleep=_log_startup_failure,
            reraise=True,
        )
        try:
            retrying(self.cache.start)
        except KubeError:
            if not self.stop_event.is_set():
                raise

    def _sleep(self, seconds: float) -> None:
        self.stop_event.wait(seconds)

    def stop(self) -> None:
        self.stop_event.set()
        self.cache.stop_event.set()  # a watch cut from here on is no failure to report
        self._wake.set()
        # Requests in their retry loop give up now; SIGTERM must not wait out a 30 s deadline.
        self.client.cancelled.set()
        if self.elector is not None:
            self.elector.client.cancelled.set()

    def shutdown(self) -> None:
        self.stop_event.set()
        self.cache.stop()
        self.cache.join(timeout=5)
        self.reconciler.close()
        if self.elector is not None:
            self.elector.stop(release=True)
        log.info("controller_stopped", identity=self.options.identity)


def _log_startup_failure(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome else None
    delay = state.next_action.sleep if state.next_action else 0.0
    log.error("startup_failed", error=str(error)[:300], retry_in_seconds=round(delay, 2))
