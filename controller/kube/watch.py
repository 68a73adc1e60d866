"""Watches that wake the reconcile loop: list, then watch from the list's version, forever.

The loop is level-triggered, so a watcher only has to say "something changed"; it keeps no
cache. On 410 (the version is too old) it relists; on any other failure it waits, with jittered
exponential backoff, and starts over, so a flapping API server never turns into a hot loop.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import structlog

from controller.kube.client import KubeClient, KubeError
from controller.kube.kinds import Kind

log = structlog.get_logger(__name__)


SHORT_WATCH_SECONDS = 1.0
"""A watch ended sooner than this with no event backs off before the next one."""


class Watcher(threading.Thread):
    """One kind's list-and-watch, calling `notify(kind_name)` on every change and relist."""

    def __init__(
        self,
        client: KubeClient,
        kind: Kind,
        *,
        notify: Callable[[str], None],
        stop: threading.Event,
        label_selector: str | None = None,
        namespace: str | None = None,
        timeout_seconds: int = 60,
        max_backoff_seconds: float = 30.0,
    ) -> None:
        super().__init__(name=f"watch-{kind.plural}", daemon=True)
        self.client = client
        self.kind = kind
        self.notify = notify
        self.stop_event = stop
        self.label_selector = label_selector
        self.namespace = namespace
        self.timeout_seconds = timeout_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.synced = threading.Event()
        self.relists = 0
        self.failures = 0

    def run(self) -> None:
        resource_version: str | None = None
        backoff = 0.5
        while not self.stop_event.is_set():
            try:
                if resource_version is None:
                    _, resource_version = self.client.list(
                        self.kind, namespace=self.namespace, label_selector=self.label_selector
                    )
                    self.relists += 1
                    self.synced.set()
                    self.notify(self.kind.kind)
                opened = time.monotonic()
                events = 0
                for event in self.client.watch(
                    self.kind,
                    resource_version=resource_version,
                    timeout_seconds=self.timeout_seconds,
                    label_selector=self.label_selector,
                    namespace=self.namespace,
                    stop=self.stop_event.is_set,
                ):
                    version = (event.object.get("metadata") or {}).get("resourceVersion")
                    if version:
                        resource_version = str(version)
                    events += 1
                    if event.type != "BOOKMARK":
                        self.notify(self.kind.kind)
                if events == 0 and time.monotonic() - opened < SHORT_WATCH_SECONDS:
                    # A watch the server ends at once without an event is a failure in
                    # disguise (client-go treats it so); re-watching at once would spin.
                    self.stop_event.wait(backoff)
                    backoff = min(backoff * 2, self.max_backoff_seconds)
                    continue
                backoff = 0.5
            except KubeError as exc:
                if self.stop_event.is_set():
                    return  # our own shutdown cut the watch: nothing failed
                if exc.gone:
                    log.info("watch_expired", kind=self.kind.kind)
                    resource_version = None
                    continue
                self.failures += 1
                delay = backoff + random.uniform(0, backoff / 2)
                # A throttled watch waits as long as the server asked: eleven watchers coming
                # back early add to the load that made it throttle.
                delay = max(delay, exc.retry_after or 0.0)
                log.warning(
                    "watch_failed",
                    kind=self.kind.kind,
                    error=str(exc)[:200],
                    retry_in_seconds=round(delay, 2),
                )
                self.stop_event.wait(delay)
                backoff = min(backoff * 2, self.max_backoff_seconds)
