"""The controller's view of the cluster: one store per collection it reads, fed by list-and-watch.

A pass used to list the whole cluster again, every Workload included, while the watches only
woke the loop: with thousands of Workloads that Kueue updates all the time, each pass pulled
all of them from the API server. Kueue (`pkg/cache`), Karpenter (`state.Cluster`) and kopf
(indexes) keep a view fed by watches instead; so does this module, after client-go's reflector:

- A `Store` holds one collection's objects (plain dicts, by namespace and name) and the
  resourceVersion it is current to.
- A `Reflector` thread fills it: a paged LIST (`limit`/`continue`), then a WATCH from the list's
  resourceVersion with bookmarks, applying ADDED, MODIFIED and DELETED in the order the server
  sends them, and BOOKMARK only to move the version on (so a watch reopened after a quiet spell
  does not start from a version the server has compacted away). On 410 Gone, answering the
  watch or as an ERROR event in its stream, it lists again. Any other failure (a refused
  connection, a 5xx, a 429, a line that is not a watch event, a bug) is caught here, at the
  boundary: it is logged as `watch_failed` with the kind and the error (a 429, the server's
  own request to wait, as `watch_throttled` at info), the store counts as not
  synced, and the watch resumes from the last version after a jittered exponential backoff, at
  least the server's Retry-After. A reflector thread never dies before shutdown: a dead one
  would leave its store stale while readiness said all was well.
- Every change calls `notify`, which wakes the reconcile loop.
- A source may select on fields (Events: only Karpenter's capacity errors on NodeClaims, so a
  cluster's stream of Events never reaches the controller) and keep tombstones: the last few
  hundred objects deleted, as the DELETED event carried them. Karpenter deletes a NodeClaim
  whose launch failed at once; its Event names it, and only the tombstone still tells its pool.
- Objects are kept without `metadata.managedFields`, except those of the kinds whose ownership
  a pass reads (`kinds.OWNERSHIP_READ_KINDS`): most of a busy object's bytes, read by nothing.
  Workloads are kept without their pod templates but for each container's resources and
  each template's node selector and required node affinity (`projection.workload_as_kept`).
- `Cache.snapshot()` builds an `Observed`, what one pass works on, from the stores without a
  request. A store never changes a dict it holds (an event replaces it), so a snapshot stays as
  it was taken while events keep arriving. Nothing may change the dicts of a snapshot.
- The controller's own writes are recorded from the server's answer (`Cache.record`) when they
  are newer than what the store holds, so the next pass sees what the last one wrote even when
  the watch event is still on its way. The policy's status carries the mix decisions' state: a
  pass that read a stale copy would repeat a decision and its Event.
- Discovery (the group versions the server serves) is read at start, so only served kinds get a
  store, then again every `discovery_seconds` and after any relist, on a thread of its own, so
  a pass never waits for it. A group version served later (Kueue installed after the
  controller) gets its stores then. One that a refresh no longer lists keeps its stores and
  still counts as served: right after an API server restart discovery can list only some
  groups for a moment, and a working watch knows better. A CRD deleted under a running
  controller therefore leaves its store failing, and the controller not ready, until restart.

`read_sources` and `read_cluster` are the same store code without threads: one paged list of
each collection, for `quartermaster plan` and `explain` and for a `Reconciler` run on its own.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from tenacity import RetryCallState, Retrying, retry_if_exception

from controller import names
from controller.backoff import jittered, stop_when_set
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError, WatchEvent
from controller.kube.kinds import Kind
from controller.kube.projection import workload_as_kept

log = structlog.get_logger(__name__)

Object = dict[str, Any]
Key = tuple[str, str]
"""(namespace, name); the namespace is "" for a cluster-scoped object."""

DEFAULT_PAGE_SIZE = 500
"""Objects per LIST page: client-go's reflector default, a response of a few MB at most."""
DEFAULT_WATCH_SECONDS = 60
"""How long the server keeps one watch open before it ends it and the reflector reopens it."""
DEFAULT_DISCOVERY_SECONDS = 60.0
SHORT_WATCH_SECONDS = 1.0
"""A watch the server ends sooner than this, with no event at all, counts as a failure."""


@dataclass(frozen=True)
class Source:
    """One collection the controller reads: a kind, where, and which of its objects."""

    kind: Kind
    namespace: str | None = None
    label_selector: str | None = None
    """Only equality terms (`key=value,...`), the only kind the controller uses."""
    field_selector: str | None = None
    """Equality terms on dotted field paths (`reason=X,regarding.kind=Y`): the server sends
    only the matching objects, so a watch of a busy kind (Events) carries only those a pass
    reads."""
    tombstones: int = 0
    """How many of its objects deleted lately the store keeps (the newest): what a pass
    needs to know of an object after it is gone (a NodeClaim Karpenter deleted on a failed
    launch: its pool, for the Event that reported the failure)."""

    def admits(self, obj: Mapping[str, Any]) -> bool:
        """Whether `obj` belongs to this collection (an object we wrote, about to be recorded)."""
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        for term in filter(None, (self.label_selector or "").split(",")):
            key, equals, value = term.partition("=")
            if not equals or labels.get(key.strip()) != value.strip():
                return False
        for term in filter(None, (self.field_selector or "").split(",")):
            key, equals, value = term.partition("=")
            if not equals or _field(obj, key.strip()) != value.strip():
                return False
        return True


def _field(obj: Mapping[str, Any], path: str) -> str | None:
    """The value at a dotted path, as a field selector compares it (a string)."""
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return None if value is None else str(value)


NODE_CLAIM_TOMBSTONES = 512
"""Deleted NodeClaims kept: far more than fail in the minutes between a failure and the pass
that reads its Event, few enough to cost nothing."""
CAPACITY_ERROR_SELECTORS: Mapping[Kind, str] = {
    kinds.EVENT: f"reason={names.CAPACITY_ERROR_REASON},regarding.kind=NodeClaim",
    kinds.CORE_EVENT: f"reason={names.CAPACITY_ERROR_REASON},involvedObject.kind=NodeClaim",
}
"""Karpenter's capacity errors on NodeClaims in either Event API, by the fields both serve
as selectors; no other Event reaches the controller."""


def controller_sources(namespace: str) -> tuple[Source, ...]:
    """What a pass reads: policies, projects, the objects we manage, Workloads, NodeClaims
    (and the latest deleted ones), and Karpenter's capacity errors.

    The warm pools' kinds are read in the controller's namespace alone, so the controller needs
    no cluster-wide rights on Deployments (see `kinds.CONTROLLER_NAMESPACE_KINDS`). The
    capacity errors are read in both Event APIs: a cluster serves the same Events in both (one
    store), and a pass counts each once (by uid); reading both costs a watch of a handful of
    objects and works on a cluster that serves only one.
    """
    return (
        Source(kinds.CAPACITY_POLICY),
        Source(kinds.TRAINING_PROJECT),
        *(
            Source(
                kind,
                namespace=namespace if kind in kinds.CONTROLLER_NAMESPACE_KINDS else None,
                label_selector=names.MANAGED_SELECTOR,
            )
            for kind in kinds.MANAGED_KINDS
        ),
        Source(kinds.WORKLOAD),
        Source(kinds.NODE_CLAIM, tombstones=NODE_CLAIM_TOMBSTONES),
        *(Source(kind, field_selector=fields) for kind, fields in CAPACITY_ERROR_SELECTORS.items()),
    )


@dataclass(frozen=True)
class Observed:
    """Everything one pass reads from the cluster; each collection in (namespace, name) order."""

    served: frozenset[str]
    policies: tuple[Object, ...]
    projects: tuple[Object, ...]
    managed: tuple[Object, ...]
    """The managed kinds in `kinds.MANAGED_KINDS` order."""
    workloads: tuple[Object, ...]
    node_claims: tuple[Object, ...] = ()
    deleted_node_claims: tuple[Object, ...] = ()
    """NodeClaims deleted lately, as last seen (the newest `NODE_CLAIM_TOMBSTONES`)."""
    capacity_errors: tuple[Object, ...] = ()
    """Karpenter's InsufficientCapacityError Events on NodeClaims, in either Event API (the
    same Event may be here twice, once in each shape)."""


def observed_from(
    served: Iterable[str],
    items: Mapping[Source, Sequence[Object]],
    deleted: Mapping[Source, Sequence[Object]] | None = None,
) -> Observed:
    def of(kind: Kind, collections: Mapping[Source, Sequence[Object]]) -> tuple[Object, ...]:
        return tuple(
            obj for source, objs in collections.items() if source.kind == kind for obj in objs
        )

    return Observed(
        served=frozenset(served),
        policies=of(kinds.CAPACITY_POLICY, items),
        projects=of(kinds.TRAINING_PROJECT, items),
        managed=tuple(obj for kind in kinds.MANAGED_KINDS for obj in of(kind, items)),
        workloads=of(kinds.WORKLOAD, items),
        node_claims=of(kinds.NODE_CLAIM, items),
        deleted_node_claims=of(kinds.NODE_CLAIM, deleted or {}),
        capacity_errors=of(kinds.EVENT, items) + of(kinds.CORE_EVENT, items),
    )


# ---------------------------------------------------------------------------------- the store
def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    if not meta.get("name"):
        raise ValueError(f"an object without metadata.name: {str(obj)[:200]}")
    return str(meta.get("namespace") or ""), str(meta["name"])


def _version(obj: Mapping[str, Any]) -> int | None:
    """The object's resourceVersion as a number, or None when it is not one.

    The API calls the version opaque; etcd-backed servers (all of them) send its revision, a
    number that grows with every write. Versions that are not numbers are never compared.
    """
    value = (obj.get("metadata") or {}).get("resourceVersion")
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _newer(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """Whether `one` is known to be a later version of an object than `other`."""
    a, b = _version(one), _version(other)
    return a is not None and b is not None and a > b


class Store:
    """One collection's objects as last listed and watched, and whether that view is current."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self._lock = threading.Lock()
        self._objects: dict[Key, Object] = {}
        self._deleted: OrderedDict[Key, Object] = OrderedDict()
        """The latest `source.tombstones` objects deleted, oldest first."""
        self._items: tuple[Object, ...] | None = ()
        """The objects in key order, kept until the next change (a pass asks every time)."""
        self._resource_version = ""
        self._listed = False
        self._synced = False

    @property
    def resource_version(self) -> str:
        with self._lock:
            return self._resource_version

    @property
    def listed(self) -> bool:
        """Listed at least once: its contents are a whole view, if perhaps an old one."""
        with self._lock:
            return self._listed

    @property
    def synced(self) -> bool:
        """Listed, and its watch is up (not failed since): its contents are current."""
        with self._lock:
            return self._synced

    def mark_synced(self) -> None:
        """The watch is (back) up, resuming from the store's version: current again."""
        with self._lock:
            self._synced = self._listed

    def mark_unsynced(self) -> None:
        with self._lock:
            self._synced = False

    def replace(self, items: Iterable[Object], resource_version: str) -> None:
        """A fresh list: the whole contents at once, current as of `resource_version`."""
        objects = {_key(obj): self._typed(obj) for obj in items}
        with self._lock:
            self._objects = objects
            self._items = None
            self._resource_version = resource_version
            self._listed = True
            self._synced = True

    def apply(self, event: WatchEvent) -> bool:
        """One watch event, in the order received; whether the contents changed."""
        obj = event.object
        if event.type == "BOOKMARK":
            with self._lock:
                self._resource_version = str(
                    (obj.get("metadata") or {}).get("resourceVersion") or self._resource_version
                )
            return False
        if event.type not in ("ADDED", "MODIFIED", "DELETED"):
            raise ValueError(f"{self.source.kind.kind}: unknown watch event type {event.type!r}")
        key = _key(obj)
        obj = self._typed(obj)
        with self._lock:
            self._resource_version = str(
                (obj.get("metadata") or {}).get("resourceVersion") or self._resource_version
            )
            held = self._objects.get(key)
            was, now = (_version(held), _version(obj)) if held is not None else (None, None)
            if was is not None and now is not None:
                if was > now:
                    return False  # our own later write, recorded already
                if was == now and event.type != "DELETED":
                    # Our own write's event: it brings nothing new, and the copy recorded stays.
                    return False
            if event.type == "DELETED":
                if held is None:
                    return False
                del self._objects[key]
                self._tombstone(key, obj)
            else:
                self._objects[key] = obj
                self._deleted.pop(key, None)
            self._items = None
            return True

    def _tombstone(self, key: Key, obj: Object) -> None:
        """Keep a deleted object (its last state, which the DELETED event carries) while it
        is among the newest `source.tombstones`; the caller holds the lock."""
        if self.source.tombstones <= 0:
            return
        self._deleted[key] = obj
        self._deleted.move_to_end(key)
        while len(self._deleted) > self.source.tombstones:
            self._deleted.popitem(last=False)

    def deleted(self) -> tuple[Object, ...]:
        """The objects deleted lately, oldest first (none unless `source.tombstones`). A
        deletion between a watch's end and a relist is not seen, so this is a memory, not a
        record: its readers must work without it."""
        with self._lock:
            return tuple(self._deleted.values())

    def _typed(self, obj: Object) -> Object:
        """The object as kept: with its apiVersion and kind, which list items leave out,
        without managedFields unless a pass reads them, and a Workload without what no pass
        reads of its spec.

        managedFields are most of what a much-written object holds (an entry per manager, each
        a tree of the fields it owns), and nothing but the hand-over reads them. Kept, they
        were more than half of the cache (in the soak 2.5 of its 4.5 MB, and 27,500 of its
        49,700 objects, replaced with every watch event). client-go's informers drop them the
        same way.
        """
        meta = obj.get("metadata")
        if (
            isinstance(meta, dict)
            and "managedFields" in meta
            and self.source.kind not in kinds.OWNERSHIP_READ_KINDS
        ):
            # A new metadata dict: the object may be a write's answer its caller still reads.
            obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
        if self.source.kind == kinds.WORKLOAD:
            obj = workload_as_kept(obj)
        obj.setdefault("apiVersion", self.source.kind.api_version)
        obj.setdefault("kind", self.source.kind.kind)
        return obj

    def record(self, obj: Object) -> bool:
        """An object as the server answered our write of it, kept if the watch is behind it.

        Once the watch has passed the write's version, it has delivered that write (or a later
        change, a deletion say) already: recording it then could bring back a deleted object.
        """
        version = _version(obj)
        if not self.source.admits(obj) or version is None:
            return False
        key = _key(obj)
        with self._lock:
            current = self._resource_version
            behind = current.isdigit() and version > int(current)
            held = self._objects.get(key)
            if not (self._listed and behind) or (held is not None and _newer(held, obj)):
                return False
            self._objects[key] = self._typed(obj)
            self._items = None
            return True

    def items(self) -> tuple[Object, ...]:
        """Every object, in (namespace, name) order, as a LIST returns them."""
        with self._lock:
            if self._items is None:
                self._items = tuple(self._objects[k] for k in sorted(self._objects))
            return self._items


def fill(client: KubeClient, store: Store, *, page_size: int = DEFAULT_PAGE_SIZE) -> int:
    """One paged list of the store's collection, replacing what it held; how many objects."""
    source = store.source
    items, version = client.list(
        source.kind,
        namespace=source.namespace,
        label_selector=source.label_selector,
        field_selector=source.field_selector,
        page_size=page_size,
    )
    store.replace(items, version)
    return len(items)


def read_sources(
    client: KubeClient,
    sources: Iterable[Source],
    *,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> dict[Source, tuple[Object, ...]]:
    """Each collection listed once through a store: a one-shot sync, no watch."""
    read: dict[Source, tuple[Object, ...]] = {}
    for source in sources:
        store = Store(source)
        fill(client, store, page_size=page_size)
        read[source] = store.items()
    return read


def read_cluster(
    client: KubeClient, *, namespace: str, page_size: int = DEFAULT_PAGE_SIZE
) -> Observed:
    """What a pass reads, listed once (served kinds only): the cache's snapshot, without one."""
    served = frozenset(client.served_group_versions())
    sources = [s for s in controller_sources(namespace) if s.kind.group_version in served]
    return observed_from(served, read_sources(client, sources, page_size=page_size))


# ------------------------------------------------------------------------------ the reflector
class _EndedEarlyError(KubeError):
    """The server ended a watch at once with no event: a failure in disguise (client-go too
    treats it so), and watching again at once would spin."""


class Reflector(threading.Thread):
    """Keeps one Store current: list, watch from the list's version, and so on, until stopped."""

    def __init__(
        self,
        client: KubeClient,
        store: Store,
        *,
        notify: Callable[[str], None],
        stop: threading.Event,
        listed: Callable[[Reflector, bool], None] = lambda _reflector, _first: None,
        page_size: int = DEFAULT_PAGE_SIZE,
        watch_seconds: int = DEFAULT_WATCH_SECONDS,
        initial_backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 30.0,
    ) -> None:
        super().__init__(name=f"reflector-{store.source.kind.plural}", daemon=True)
        self.client = client
        self.store = store
        self.notify = notify
        self.stop_event = stop
        self.listed = listed
        """Called after each list, with whether it was the store's first."""
        self.page_size = page_size
        self.watch_seconds = watch_seconds
        self.relists = 0
        """Lists after the first: one per 410 (or per failed first list)."""
        self.failures = 0
        self.last_error: str | None = None
        self._must_list = True
        self._backoff = jittered(initial_backoff_seconds, max_backoff_seconds)
        self._retrying = Retrying(
            retry=retry_if_exception(lambda _: not self.stop_event.is_set()),
            wait=self._wait,
            stop=stop_when_set(self.stop_event),
            sleep=self._sleep,
            before_sleep=self._failed,
            reraise=True,
        )

    @property
    def kind(self) -> Kind:
        return self.store.source.kind

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self._retrying(self._session)
            except Exception:  # raised only once stopping: every failure before is retried
                return

    def _session(self) -> None:
        """List if needed, then one watch until the server ends it; raises on any failure."""
        if self._must_list:
            self._list()
        if self.stop_event.is_set():
            return
        source = self.store.source
        opened = time.monotonic()
        events = 0
        try:
            for event in self.client.watch(
                source.kind,
                resource_version=self.store.resource_version,
                timeout_seconds=self.watch_seconds,
                label_selector=source.label_selector,
                field_selector=source.field_selector,
                namespace=source.namespace,
                stop=self.stop_event.is_set,
                opened=self.store.mark_synced,
            ):
                events += 1
                if self.store.apply(event):
                    self.notify(source.kind.kind)
        except KubeError as exc:
            if exc.gone:
                self._must_list = True
            raise
        quick = time.monotonic() - opened < SHORT_WATCH_SECONDS
        if events == 0 and quick and not self.stop_event.is_set():
            raise _EndedEarlyError(f"watch {source.kind.kind}: ended at once with no event")

    def _list(self) -> None:
        first = not self.store.listed
        count = fill(self.client, self.store, page_size=self.page_size)
        self._must_list = False
        if not first:
            self.relists += 1
            log.info("store_relisted", kind=self.kind.kind, objects=count)
        self.listed(self, first)
        self.notify(self.kind.kind)

    def _wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, KubeError) and error.gone and state.attempt_number == 1:
            return 0.0  # expired, not failed: list again at once
        delay = float(self._backoff(state))
        if isinstance(error, KubeError) and error.retry_after is not None:
            # A throttled watch waits as long as the server asked: fifteen reflectors coming
            # back early add to the load that made it throttle.
            delay = max(delay, float(error.retry_after))
        return delay

    def _sleep(self, seconds: float) -> None:
        self.stop_event.wait(seconds)

    def _failed(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        self.store.mark_unsynced()
        if isinstance(error, KubeError) and error.gone:
            log.info("watch_expired", kind=self.kind.kind)
            return
        self.failures += 1
        self.last_error = f"{type(error).__name__}: {error}"[:300]
        delay = state.next_action.sleep if state.next_action else 0.0
        if isinstance(error, KubeError) and error.status == 429:
            # The server asked us to wait (a CRD's storage still initializing, say, just after
            # it was established): expected and self-healing, so news but not a warning, as
            # client-go's reflector logs it ("returned 429 - backing off").
            log.info(
                "watch_throttled",
                kind=self.kind.kind,
                error=str(error)[:300],
                retry_in_seconds=round(delay, 2),
            )
        elif isinstance(error, KubeError):
            log.warning(
                "watch_failed",
                kind=self.kind.kind,
                error=str(error)[:300],
                status=error.status,
                retry_in_seconds=round(delay, 2),
            )
        else:  # not an API error: a bug, worth its traceback
            log.warning(
                "watch_failed",
                kind=self.kind.kind,
                error=self.last_error,
                retry_in_seconds=round(delay, 2),
                exc_info=error,
            )


# ---------------------------------------------------------------------------------- the cache
def discover(client: KubeClient, wanted: Collection[str]) -> frozenset[str]:
    """The group/versions the server serves, refused while it is still starting.

    An API server that has just started answers discovery before it has registered its groups
    (seen here: none of the controller's, not even built-in ones, a second after a restart).
    Taken as the truth, that would start no watch and let the controller report itself synced
    over nothing until the next rediscovery, a minute later. So a list that serves none of the
    `wanted` group/versions (the sources') raises a retryable KubeError, and the caller retries
    with its backoff."""
    served = frozenset(client.served_group_versions())
    if wanted and not served.intersection(wanted):
        raise KubeError(
            "discovery lists none of the groups the controller reads: the API server is "
            "still starting",
            status=503,
        )
    return served


class Cache:
    """A store and a reflector per served source, discovery kept fresh, snapshots on demand."""

    def __init__(
        self,
        client: KubeClient,
        sources: Sequence[Source],
        *,
        notify: Callable[[str], None] = lambda _: None,
        page_size: int = DEFAULT_PAGE_SIZE,
        watch_seconds: int = DEFAULT_WATCH_SECONDS,
        discovery_seconds: float = DEFAULT_DISCOVERY_SECONDS,
        max_backoff_seconds: float = 30.0,
    ) -> None:
        self.client = client
        self.sources = tuple(sources)
        self._wanted = frozenset(source.kind.group_version for source in self.sources)
        self.notify = notify
        self.page_size = page_size
        self.watch_seconds = watch_seconds
        self.discovery_seconds = discovery_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._reflectors: dict[Source, Reflector] = {}
        self._discovered: frozenset[str] = frozenset()
        self._started = False
        self._rediscover = threading.Event()
        self._discovery: threading.Thread | None = None
        self._started_at = 0.0
        self._sync_logged = False

    # ------------------------------------------------------------------ state
    @property
    def reflectors(self) -> list[Reflector]:
        with self._lock:
            return list(self._reflectors.values())

    @property
    def served(self) -> frozenset[str]:
        """What discovery lists, and the group versions whose collections are watched."""
        with self._lock:
            return self._discovered | {s.kind.group_version for s in self._reflectors}

    def listed(self) -> bool:
        """Started, and every store listed at least once: a snapshot shows the whole cluster."""
        return self._started and all(r.store.listed for r in self.reflectors)

    def unsynced(self) -> list[str]:
        """The kinds whose store is not current (not listed yet, or its watch failed)."""
        return sorted({r.kind.kind for r in self.reflectors if not r.store.synced})

    def synced(self) -> bool:
        return self._started and not self.unsynced()

    def snapshot(self) -> Observed:
        """What a pass works on, from the stores as they are now; sends no request."""
        with self._lock:
            reflectors = dict(self._reflectors)
            served = self._discovered | {s.kind.group_version for s in reflectors}
        return observed_from(
            served,
            {s: r.store.items() for s, r in reflectors.items()},
            {s: r.store.deleted() for s, r in reflectors.items() if s.tombstones},
        )

    def record(self, kind: Kind, obj: Object) -> None:
        """An object the controller wrote, as the server answered: see the module docstring."""
        for reflector in self.reflectors:
            if reflector.kind == kind:
                reflector.store.record(obj)

    # ------------------------------------------------------------------ running
    def start(self) -> None:
        """Read discovery, start a reflector per served source and the discovery refresh.

        Raises KubeError when discovery cannot be read; the caller retries.
        """
        served = discover(self.client, self._wanted)
        self._started_at = time.monotonic()
        for source in self.sources:
            if source.kind.group_version not in served:
                kind = source.kind
                log.warning("kind_not_served", kind=kind.kind, group_version=kind.group_version)
        with self._lock:
            self._discovered = served
        self._start_reflectors(served)
        self._started = True
        self._discovery = threading.Thread(
            target=self._keep_discovering, name="cache-discovery", daemon=True
        )
        self._discovery.start()

    def _start_reflectors(self, served: frozenset[str]) -> None:
        """A reflector for each served source that has none; all registered before any runs,
        so the first to list cannot find itself the only one."""
        new: list[Reflector] = []
        with self._lock:
            for source in self.sources:
                if source.kind.group_version in served and source not in self._reflectors:
                    self._reflectors[source] = Reflector(
                        self.client,
                        Store(source),
                        notify=self.notify,
                        stop=self.stop_event,
                        listed=self._listed,
                        page_size=self.page_size,
                        watch_seconds=self.watch_seconds,
                        max_backoff_seconds=self.max_backoff_seconds,
                    )
                    new.append(self._reflectors[source])
        for reflector in new:
            if self._started:
                log.info("kind_served", kind=reflector.kind.kind)
            reflector.start()

    def _listed(self, reflector: Reflector, first: bool) -> None:
        """A store listed: the first time, say when all have; later (a relist), rediscover."""
        if not first:
            self._rediscover.set()
            return
        reflectors = self.reflectors
        with self._lock:
            done = not self._sync_logged and all(r.store.listed for r in reflectors)
            self._sync_logged = self._sync_logged or done
        if done:
            log.info(
                "cache_synced",
                stores=len(reflectors),
                objects=sum(len(r.store.items()) for r in reflectors),
                seconds=round(time.monotonic() - self._started_at, 3),
            )

    def _keep_discovering(self) -> None:
        while not self.stop_event.is_set():
            self._rediscover.wait(self.discovery_seconds)
            self._rediscover.clear()
            if self.stop_event.is_set():
                return
            try:
                served = discover(self.client, self._wanted)
            except KubeError as exc:
                if not self.stop_event.is_set():
                    log.warning("discovery_failed", error=str(exc)[:300])
                continue
            with self._lock:
                self._discovered = served
            self._start_reflectors(served)

    def stop(self) -> None:
        """Stop every thread: the reflectors' watches are cut (the client refuses new ones)."""
        self.stop_event.set()
        self._rediscover.set()
        self.client.abort_watches()

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        threads: list[threading.Thread] = [*self.reflectors]
        if self._discovery is not None:
            threads.append(self._discovery)
        for thread in threads:
            thread.join(timeout=max(deadline - time.monotonic(), 0.0))

    def threads(self) -> list[threading.Thread]:
        """Every thread the cache started, for a caller checking that all have ended."""
        return [*self.reflectors, *([self._discovery] if self._discovery is not None else [])]
