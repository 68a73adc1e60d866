"""A model of Kueue's admission for the replay, built from the objects the controller renders.

Kueue itself cannot run inside a replay, so this is a stand-in, written after Kueue's own code
(`pkg/cache` resource nodes, `pkg/scheduler` ordering, `pkg/scheduler/flavorassigner`,
`pkg/scheduler/preemption` classical preemption, `pkg/workload` ordering) and fed the very
ClusterQueues, Cohorts and ResourceFlavors the renderer produces. Each case where a real Kueue
0.19 and this model once decided differently is a table test in
`tests/unit/sim/test_kueue_fidelity.py`, citing the function that decides it.

What it follows:

- **The quota tree.** Cohorts and ClusterQueues form Kueue's tree (root cohort, one cohort per
  tier, a queue per project). Each node has, per flavor, a nominal quota and optional borrowing
  and lending limits. As in `resource_node.go`: a node's subtree quota is its own nominal plus
  what its children may lend (their subtree quota minus what a lending limit keeps back); usage
  past a child's guaranteed quota counts in its parent; what a queue can still take is its local
  headroom plus what its parent can give, capped by its borrowing limit.
- **Which flavors a workload may take.** A pod set's node selector and required node affinity
  are matched against each flavor's `nodeLabels`, counting only the keys the flavor labels
  (`checkFlavorForPodSets`, `flavorSelector`): a workload selecting
  `karpenter.sh/capacity-type: on-demand` is only ever admitted on an on-demand flavor.
- **Flavor assignment** (`findFlavorForPodSets`). The allowed flavors are tried in order, each
  given a mode (`fitsResourceQuota`): it fits; or it needs preemption, which Kueue considers only
  when the request is within the queue's nominal quota of that flavor, or a cohort below the
  root would hold it (`FindHeightOfLowestSubtreeThatFits`' hierarchical claim), or
  `borrowWithinCohort` allows preempting while borrowing (`canPreemptWhileBorrowing`); then the
  preemption oracle (`SimulatePreemption`) finds Reclaim (every victim in another queue),
  Preempt (some in its own) or no candidates; else it does not fit. Each mode carries the
  height of the cohort it borrows from (0: none). The search stops at the first flavor
  `shouldTryNextFlavor` accepts (`whenCanBorrow`, `whenCanPreempt`: TryNextFlavor goes on past a
  borrowing fit or a preemption, MayStopSearch stops), else keeps the best by `isPreferred`
  with its default, BorrowingOverPreemption: fit over reclaim over preempt, then the lower
  borrowing height. So a fit without borrowing always wins, and among preemptions, reclaiming
  what other queues borrowed beats evicting the queue's own work.
- **Ordering.** Each queue orders its pending workloads by effective priority (the base
  priority plus the `kueue.x-k8s.io/priority-boost` annotation), then by creation time, which
  a preemption does not change (`workload.Ordering.GetQueueOrderTimestamp`). Queues are
  BestEffortFIFO: a head that does not fit is set aside until something is released in its
  tree. Each cycle takes every queue's head and admits them in Kueue's order: not borrowing
  first, then higher effective priority, then older.
- **Preemption.** Within a queue (`withinClusterQueue`), lower effective priority, or newer of
  equal priority for `LowerOrNewerEqualPriority`; across queues (`reclaimWithinCohort`),
  workloads of queues above their nominal quota, lower in priority for `LowerPriority`, any for
  `Any`. A preemptor that would itself borrow may reclaim only when `borrowWithinCohort` allows
  it and only from lower priorities; otherwise it reclaims only if it ends within its quota.
  Candidates are taken other queues first, lowest effective priority first, most recently
  admitted first (`CandidatesOrdering`); the victims the last one made unnecessary are given
  back (`fillBackWorkloads`).

What it simplifies, and which way that moves the replay's figures:

- **One resource, one pod set.** Only GPUs are counted (CPU and memory quotas scale with GPUs
  in what we render, so they never bind first) and a workload is one pod set.
- **Preemption is immediate.** Kueue evicts the victims and admits the preemptor in a later
  cycle, once they are gone (seconds, or the pods' termination grace); the model admits it at
  once. Preemptors start a little early.
- **No flavor memory.** Kueue resumes a workload's flavor search where its last attempt
  stopped (`LastAssignment`, `NextFlavorToTryForPodSetResource`) until the queue's quota
  generation changes; the model starts from the first flavor each time. The two differ only
  while a workload waits with quota unchanged, and then the model can place it on an earlier
  flavor.
- **`borrowWithinCohort.maxPriorityThreshold`** is not read: with `LowerPriority` any lower
  priority may be reclaimed while borrowing (the renderer sets no threshold).

What it leaves out: fair sharing (the renderer writes each queue's weight, which Kueue uses
only when its own configuration turns fair sharing on; it is off by default and then the
ordering and preemption above are Kueue's), `waitForPodsReady` (off by default: a workload
admitted here counts as started once Karpenter gives it nodes, and nothing requeues it for
pods not ready in time; a `pods_ready` run has the engine report `PodsReady` as Kueue does
with it enabled, `blockAdmission: false` and a timeout longer than the waits), admission
checks, topology-aware scheduling, partial admission, and
taints and tolerations on flavors (the rendered spot flavor's taint is tolerated by the
flavor's own tolerations).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NEVER = "Never"
LOWER_PRIORITY = "LowerPriority"
LOWER_OR_NEWER_EQUAL = "LowerOrNewerEqualPriority"
ANY = "Any"
MAY_STOP_SEARCH = "MayStopSearch"
TRY_NEXT_FLAVOR = "TryNextFlavor"


Requirement = tuple[str, str, tuple[str, ...]]
"""A node selector requirement: (key, operator, values), operators as in Kubernetes."""
NodeSelectorTerm = tuple[Requirement, ...]


def _requirement_matches(labels: Mapping[str, str], requirement: Requirement) -> bool:
    key, operator, values = requirement
    value = labels.get(key)
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def flavor_matches(
    labels: Mapping[str, str],
    node_selector: Mapping[str, str],
    affinity: Sequence[NodeSelectorTerm],
) -> bool:
    """Whether a flavor whose nodes carry `labels` can take a pod set, as Kueue's
    `checkFlavorForPodSets` decides it with `flavorSelector`: only the selector's and the
    affinity's keys that the flavor labels count (the rest is the kube-scheduler's business
    among the flavor's nodes); a term left with no requirement matches any flavor, so the
    affinity then says nothing; the selector must match whole and one term of the rest."""
    if any(labels.get(k) != v for k, v in node_selector.items() if k in labels):
        return False
    terms: list[NodeSelectorTerm] = []
    for term in affinity:
        kept = tuple(r for r in term if r[0] in labels)
        if not kept:
            return True
        terms.append(kept)
    return not terms or any(all(_requirement_matches(labels, r) for r in t) for t in terms)


@dataclass(frozen=True)
class FlavorQuota:
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True)
class QueueSpec:
    """A ClusterQueue as rendered: what the model needs of it."""

    name: str
    cohort: str | None
    flavors: tuple[str, ...]
    """In the order Kueue tries them."""
    quotas: Mapping[str, FlavorQuota]
    within_cluster_queue: str = LOWER_PRIORITY
    reclaim_within_cohort: str = LOWER_PRIORITY
    borrow_within_cohort: str = NEVER
    when_can_borrow: str = MAY_STOP_SEARCH
    """`flavorFungibility.whenCanBorrow`; "Borrow", MayStopSearch's deprecated name, reads
    as MayStopSearch."""
    when_can_preempt: str = TRY_NEXT_FLAVOR
    """`flavorFungibility.whenCanPreempt`, Kueue's default TryNextFlavor; "Preempt", its
    deprecated name for MayStopSearch, reads as MayStopSearch."""
    node_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Each flavor's ResourceFlavor `spec.nodeLabels`: what a pod set's node selector and
    required node affinity are matched against."""


@dataclass(frozen=True)
class CohortSpec:
    name: str
    parent: str | None
    quotas: Mapping[str, FlavorQuota]


class _Clock:
    """Counts the changes of usage and quota in one quota tree: a node's `available` computed
    at one count holds until the next (a scheduling cycle asks it of every head, and of the
    same ancestors for each)."""

    def __init__(self) -> None:
        self.changes = 0


class _Node:
    """A ClusterQueue or a Cohort: Kueue's resourceNode, for one resource (GPUs)."""

    def __init__(
        self, name: str, quotas: Mapping[str, FlavorQuota], *, queue: bool, clock: _Clock
    ) -> None:
        self.name = name
        self.queue = queue
        self.quotas = dict(quotas)
        self.parent: _Node | None = None
        self.children: list[_Node] = []
        self.subtree: dict[str, int] = {}
        self.usage: dict[str, int] = {}
        self.clock = clock
        self._available: dict[str, tuple[int, int]] = {}
        """flavor -> (the clock's count, `available` at that count)."""

    def guaranteed(self, flavor: str) -> int:
        quota = self.quotas.get(flavor)
        if quota is None or quota.lending_limit is None:
            return 0
        return max(0, self.subtree.get(flavor, 0) - quota.lending_limit)

    def local_available(self, flavor: str) -> int:
        return max(0, self.guaranteed(flavor) - self.usage.get(flavor, 0))

    def available(self, flavor: str) -> int:
        """What this node can still take of `flavor`, borrowing included (Kueue's `available`):
        its local headroom plus what its parent can give, capped by its borrowing limit."""
        changes = self.clock.changes
        cached = self._available.get(flavor)
        if cached is not None and cached[0] == changes:
            return cached[1]
        subtree = self.subtree.get(flavor, 0)
        usage = self.usage.get(flavor, 0)
        if self.parent is None:
            result = subtree - usage
        else:
            from_parent = self.parent.available(flavor)
            quota = self.quotas.get(flavor)
            if quota is None or quota.lending_limit is None:
                guaranteed = 0
            else:
                guaranteed = max(0, subtree - quota.lending_limit)
            if quota is not None and quota.borrowing_limit is not None:
                stored = subtree - guaranteed
                used = max(0, usage - guaranteed)
                from_parent = min(stored - used + quota.borrowing_limit, from_parent)
            result = max(0, guaranteed - usage) + from_parent
        self._available[flavor] = (changes, result)
        return result

    def add(self, flavor: str, gpus: int) -> None:
        self.clock.changes += 1
        local = self.local_available(flavor)
        self.usage[flavor] = self.usage.get(flavor, 0) + gpus
        if self.parent is not None and gpus > local:
            self.parent.add(flavor, gpus - local)

    def remove(self, flavor: str, gpus: int) -> None:
        self.clock.changes += 1
        stored = self.usage.get(flavor, 0) - self.guaranteed(flavor)
        self.usage[flavor] = self.usage.get(flavor, 0) - gpus
        if stored > 0 and self.parent is not None:
            self.parent.remove(flavor, min(gpus, stored))

    def borrowing(self, flavor: str, extra: int = 0) -> bool:
        return self.usage.get(flavor, 0) + extra > self.subtree.get(flavor, 0)


@dataclass
class Workload:
    """One pending or admitted workload: a single pod set of `gpus` GPUs."""

    key: int
    queue: str
    gpus: int
    priority: int
    created: float
    boost: int = 0
    queued_at: float = 0.0
    """Queue order time (Kueue's `GetQueueOrderTimestamp`): the creation time, which a
    preemption does not change."""
    flavor: str | None = None
    admitted_at: float | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """The pod set's `nodeSelector` (a capacity type its owner chose, or a lane)."""
    affinity: tuple[NodeSelectorTerm, ...] = ()
    """The pod set's required node affinity: terms ORed, each term's requirements ANDed."""

    @property
    def effective_priority(self) -> int:
        return self.priority + self.boost


@dataclass(frozen=True)
class Admission:
    key: int
    flavor: str
    borrowed: bool
    victims: tuple[int, ...] = ()


@dataclass
class _Queue:
    spec: QueueSpec
    node: _Node
    heap: list[tuple[int, float, int]] = field(default_factory=list)
    """(-effective priority, queue time, key): the active pending workloads."""
    parked: set[int] = field(default_factory=set)
    """Pending workloads set aside after they did not fit (BestEffortFIFO's inadmissible)."""
    admitted: set[int] = field(default_factory=set)
    ranked: dict[str, dict[int, set[int]]] = field(default_factory=dict)
    """The admitted workloads by flavor and effective priority: preemption asks for those
    below a priority on one flavor, often none, and need not look at the rest."""

    def rank(self, workload: Workload) -> None:
        assert workload.flavor is not None
        by_priority = self.ranked.setdefault(workload.flavor, {})
        by_priority.setdefault(workload.effective_priority, set()).add(workload.key)

    def unrank(self, workload: Workload) -> None:
        assert workload.flavor is not None
        by_priority = self.ranked[workload.flavor]
        keys = by_priority[workload.effective_priority]
        keys.discard(workload.key)
        if not keys:
            del by_priority[workload.effective_priority]


_Fit = tuple[int, tuple[str, bool] | None]
"""(the quota clock's count, a workload's first fit at that count)."""


_NO_FIT, _NO_CANDIDATES, _PREEMPT, _RECLAIM, _FIT = range(5)
"""Kueue's `preemptionMode`s, from least to most preferred."""


def _try_next(mode: int, height: int, spec: QueueSpec) -> bool:
    """Kueue's `shouldTryNextFlavor`."""
    if mode in (_NO_FIT, _NO_CANDIDATES):
        return True
    if mode in (_PREEMPT, _RECLAIM) and spec.when_can_preempt == TRY_NEXT_FLAVOR:
        return True
    return height > 0 and spec.when_can_borrow == TRY_NEXT_FLAVOR


def _preferred(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Kueue's `isPreferred` with its default, BorrowingOverPreemption: a better mode wins,
    then borrowing from a lower cohort."""
    if a[0] == _NO_FIT:
        return False
    if b[0] == _NO_FIT:
        return True
    if (a[0] == _NO_CANDIDATES) != (b[0] == _NO_CANDIDATES):
        return a[0] != _NO_CANDIDATES
    if a[0] != b[0]:
        return a[0] > b[0]
    return a[1] < b[1]


def _root(node: _Node) -> _Node:
    while node.parent is not None:
        node = node.parent
    return node


class Kueue:
    """Kueue's quota tree, queues and scheduler over workloads identified by integer keys."""

    def __init__(self, queues: Sequence[QueueSpec], cohorts: Sequence[CohortSpec]) -> None:
        self.workloads: dict[int, Workload] = {}
        self._queues: dict[str, _Queue] = {}
        self._generation = 0
        """Counts changes of usage: a failure remembered at one generation holds within it."""
        self._failed: dict[tuple[str, int, tuple[str, ...]], int] = {}
        self._failed_generation = -1
        self._allowed_flavors: dict[tuple[Any, ...], tuple[str, ...]] = {}
        """(queue, node selector, affinity) -> the queue's flavors they allow."""
        self._heights: dict[str, int] = {}
        self._cohorts: dict[str, _Node] = {}
        self._clock = _Clock()
        self._configure(queues, cohorts)

    # ------------------------------------------------------------------ configuration
    def _configure(self, queues: Sequence[QueueSpec], cohorts: Sequence[CohortSpec]) -> None:
        old = self._queues
        self._cohorts = {
            c.name: _Node(c.name, c.quotas, queue=False, clock=self._clock) for c in cohorts
        }
        for cohort in cohorts:
            if cohort.parent is not None:
                parent = self._cohort(cohort.parent)
                child = self._cohorts[cohort.name]
                child.parent = parent
                parent.children.append(child)
        self._queues = {}
        for spec in queues:
            node = _Node(spec.name, spec.quotas, queue=True, clock=self._clock)
            if spec.cohort is not None:
                node.parent = self._cohort(spec.cohort)
                node.parent.children.append(node)
            previous = old.get(spec.name)
            self._queues[spec.name] = _Queue(
                spec,
                node,
                heap=previous.heap if previous else [],
                parked=previous.parked if previous else set(),
                admitted=previous.admitted if previous else set(),
                ranked=previous.ranked if previous else {},
            )
        for name in old.keys() - self._queues.keys():
            gone = old[name]
            if gone.admitted or gone.heap or gone.parked:
                raise ValueError(f"ClusterQueue {name} removed while it holds workloads")
        self._allowed_flavors.clear()
        self._heights.clear()
        self._recompute()
        self._generation += 1

    def _cohort(self, name: str) -> _Node:
        """A cohort named but not defined exists implicitly, with no quota, as in Kueue."""
        if name not in self._cohorts:
            self._cohorts[name] = _Node(name, {}, queue=False, clock=self._clock)
        return self._cohorts[name]

    def reconfigure(self, queues: Sequence[QueueSpec], cohorts: Sequence[CohortSpec]) -> None:
        """New quotas. Admitted workloads stay admitted even where usage now exceeds quota."""
        self._configure(queues, cohorts)
        self.release_parked()

    def _recompute(self) -> None:
        """Subtree quotas and usages from the leaves up, as `updateCohortResourceNode` does."""
        for queue in self._queues.values():
            node = queue.node
            node.subtree = {f: q.nominal for f, q in node.quotas.items()}
            node.usage = {}
            for key in queue.admitted:
                workload = self.workloads[key]
                assert workload.flavor is not None
                node.usage[workload.flavor] = node.usage.get(workload.flavor, 0) + workload.gpus
        for root in {id(r): r for r in map(_root, self._all_nodes())}.values():
            self._accumulate(root)
        self._clock.changes += 1

    def _all_nodes(self) -> Iterable[_Node]:
        yield from self._cohorts.values()
        for queue in self._queues.values():
            yield queue.node

    def _accumulate(self, node: _Node) -> None:
        if node.queue:
            return
        node.subtree = {f: q.nominal for f, q in node.quotas.items()}
        node.usage = {}
        for child in node.children:
            self._accumulate(child)
            for flavor, quota in child.subtree.items():
                node.subtree[flavor] = (
                    node.subtree.get(flavor, 0) + quota - child.guaranteed(flavor)
                )
            for flavor, used in child.usage.items():
                node.usage[flavor] = node.usage.get(flavor, 0) + max(
                    0, used - child.guaranteed(flavor)
                )

    # ------------------------------------------------------------------ workloads
    def queue_names(self) -> list[str]:
        return list(self._queues)

    def submit(self, workload: Workload) -> None:
        if workload.queue not in self._queues:
            raise ValueError(f"no ClusterQueue {workload.queue}")
        workload.flavor = None
        workload.admitted_at = None
        self.workloads[workload.key] = workload
        self._push(workload)

    def _push(self, workload: Workload) -> None:
        queue = self._queues[workload.queue]
        heapq.heappush(queue.heap, (-workload.effective_priority, workload.queued_at, workload.key))

    def set_boost(self, key: int, boost: int) -> None:
        """A new priority-boost annotation; a pending workload takes its new place in line."""
        workload = self.workloads[key]
        if workload.boost == boost:
            return
        admitted = workload.admitted_at is not None
        if admitted:
            self._queues[workload.queue].unrank(workload)
        workload.boost = boost
        self._generation += 1
        if admitted:
            self._queues[workload.queue].rank(workload)
        else:
            queue = self._queues[workload.queue]
            if key not in queue.parked:
                queue.heap = [e for e in queue.heap if e[2] != key]
                heapq.heapify(queue.heap)
                self._push(workload)

    def set_node_selector(self, key: int, selector: Mapping[str, str]) -> None:
        """A pending workload's pod sets now select `selector` (a lane written by the
        controller): the flavors it may take change, so a workload set aside as not fitting
        goes back in line. An admitted workload keeps what it was admitted on (Kueue refuses
        a change to the pod sets of a workload with quota reserved)."""
        workload = self.workloads[key]
        if workload.admitted_at is not None or dict(workload.node_selector) == dict(selector):
            return
        workload.node_selector = dict(selector)
        self._generation += 1
        queue = self._queues[workload.queue]
        if key in queue.parked:
            queue.parked.discard(key)
            self._push(workload)

    def pending(self, queue: str | None = None) -> list[Workload]:
        names = [queue] if queue is not None else list(self._queues)
        out: list[Workload] = []
        for name in names:
            q = self._queues[name]
            keys = [e[2] for e in q.heap] + sorted(q.parked)
            out.extend(self.workloads[k] for k in keys)
        return out

    def pending_count(self) -> int:
        """len(pending()), without building the list."""
        return sum(len(q.heap) + len(q.parked) for q in self._queues.values())

    def pending_gpus(self) -> int:
        """The GPUs of pending(), without building the list."""
        workloads = self.workloads
        return sum(
            sum(workloads[e[2]].gpus for e in q.heap) + sum(workloads[k].gpus for k in q.parked)
            for q in self._queues.values()
        )

    def admitted(self, queue: str) -> list[Workload]:
        return [self.workloads[k] for k in sorted(self._queues[queue].admitted)]

    def usage(self, queue: str, flavor: str) -> int:
        return self._queues[queue].node.usage.get(flavor, 0)

    def available(self, queue: str, flavor: str) -> int:
        return self._queues[queue].node.available(flavor)

    def finish(self, key: int) -> None:
        """A workload ended: its quota is released and set-aside workloads are tried again."""
        workload = self.workloads.pop(key)
        queue = self._queues[workload.queue]
        if workload.admitted_at is not None:
            self._release(workload)
        else:
            queue.parked.discard(key)
            queue.heap = [e for e in queue.heap if e[2] != key]
            heapq.heapify(queue.heap)

    def evict(self, key: int, *, now: float) -> None:
        """Quota taken back (a preemption): the workload queues again in its old place.

        Kueue orders a queue by `workload.Ordering.GetQueueOrderTimestamp`, which is the
        creation time unless the eviction was for pods not ready in time (with
        `requeuingStrategy.timestamp: Eviction`, its default) or by an admission check; a
        preempted workload keeps its creation time, so it goes ahead of newer work of its
        priority. `now` is when it happened, which the order does not use."""
        del now
        workload = self.workloads[key]
        assert workload.admitted_at is not None
        self._release(workload)
        workload.flavor = None
        workload.admitted_at = None
        self._push(workload)

    def _release(self, workload: Workload) -> None:
        queue = self._queues[workload.queue]
        assert workload.flavor is not None
        queue.admitted.discard(workload.key)
        queue.unrank(workload)
        queue.node.remove(workload.flavor, workload.gpus)
        self._generation += 1
        self.release_parked(_root(queue.node))

    def release_parked(self, root: _Node | None = None) -> None:
        """Set-aside workloads go back in line (all, or those of one cohort tree)."""
        for queue in self._queues.values():
            if not queue.parked:
                continue
            if root is not None and _root(queue.node) is not root:
                continue
            for key in queue.parked:
                self._push(self.workloads[key])
            queue.parked.clear()

    # ------------------------------------------------------------------ scheduling
    def schedule(self, *, now: float) -> list[Admission]:
        """Scheduling cycles until no queue has a head left to try; the admissions made.

        Each cycle takes the head of every queue, orders the heads as Kueue does, and admits
        each that fits or can preempt its way in; a head that cannot is set aside.
        """
        admissions: list[Admission] = []
        clock = self._clock
        while True:
            heads: list[tuple[tuple[bool, int, float, int], Workload, _Fit]] = []
            for queue in self._queues.values():
                if not queue.heap:
                    continue
                workload = self._pop_head(queue)
                if workload is None:
                    continue
                fit = self._first_fit(queue, workload)
                heads.append(
                    (
                        (
                            fit[1] if fit else True,
                            -(workload.priority + workload.boost),
                            workload.queued_at,
                            workload.key,
                        ),
                        workload,
                        (clock.changes, fit),
                    )
                )
            if not heads:
                return admissions
            heads.sort(key=lambda h: h[0])
            for _, workload, known in heads:
                queue = self._queues[workload.queue]
                admission = self._assign(queue, workload, now=now, known=known)
                if admission is None:
                    queue.parked.add(workload.key)
                else:
                    admissions.append(admission)

    def _pop_head(self, queue: _Queue) -> Workload | None:
        """The queue's next pending workload, taken off its heap (stale entries dropped)."""
        while queue.heap:
            priority, queued_at, key = heapq.heappop(queue.heap)
            workload = self.workloads.get(key)
            if (
                workload is None
                or workload.admitted_at is not None
                or key in queue.parked
                or (-workload.effective_priority, workload.queued_at) != (priority, queued_at)
            ):
                continue  # finished, admitted, set aside, or re-queued under a new boost
            return workload
        return None

    def _flavors_for(self, queue: _Queue, workload: Workload) -> tuple[str, ...]:
        """The queue's flavors, in order, that the workload's node selector and required
        affinity allow (Kueue's `checkFlavorForPodSets`); most workloads select nothing and
        may take them all."""
        if not workload.node_selector and not workload.affinity:
            return queue.spec.flavors
        signature = (
            queue.spec.name,
            tuple(sorted(workload.node_selector.items())),
            workload.affinity,
        )
        allowed = self._allowed_flavors.get(signature)
        if allowed is None:
            labels = queue.spec.node_labels
            allowed = tuple(
                f
                for f in queue.spec.flavors
                if flavor_matches(labels.get(f, {}), workload.node_selector, workload.affinity)
            )
            self._allowed_flavors[signature] = allowed
        return allowed

    def _first_fit(self, queue: _Queue, workload: Workload) -> tuple[str, bool] | None:
        """The flavor Kueue assigns among those where the workload fits without preemption:
        the first where it fits; under `whenCanBorrow: TryNextFlavor` the first that needs
        no borrowing, else the one that borrows from the lowest cohort (the first of equals;
        `findFlavorForPodSets` with `isPreferred`)."""
        try_next = queue.spec.when_can_borrow == TRY_NEXT_FLAVOR
        borrowed: tuple[str, bool] | None = None
        lowest = 0
        node = queue.node
        for flavor in self._flavors_for(queue, workload):
            if node.available(flavor) >= workload.gpus:
                borrowing = node.borrowing(flavor, workload.gpus)
                if not (borrowing and try_next):
                    return flavor, borrowing
                height = self._height_that_fits(node, flavor, workload.gpus)[0]
                if borrowed is None or height < lowest:
                    borrowed, lowest = (flavor, True), height
        return borrowed

    def _assign(
        self, queue: _Queue, workload: Workload, *, now: float, known: _Fit | None = None
    ) -> Admission | None:
        """Admits `workload` where it fits, or where preemption makes room; None if neither.

        `known` is its first fit as computed at a count of the quota clock: while the clock
        still shows that count no usage or quota has changed (every change counts), so the
        fit is what `_first_fit` would compute again.
        """
        if known is not None and known[0] == self._clock.changes:
            fit = known[1]
        else:
            fit = self._first_fit(queue, workload)
        victims: tuple[int, ...] = ()
        stops_at_preemption = queue.spec.when_can_preempt != TRY_NEXT_FLAVOR
        if fit is None or stops_at_preemption:
            # Nothing changed since a workload of this queue and priority, no wider, with the
            # same flavors to choose from, failed: this one cannot get in either (Kueue would
            # find the same, only slower).
            flavors = self._flavors_for(queue, workload)
            memo = (queue.spec.name, workload.priority + workload.boost, flavors)
            if self._failed_generation != self._generation:
                self._failed.clear()
                self._failed_generation = self._generation
            narrowest = self._failed.get(memo)
            if (
                fit is None
                and narrowest is not None
                and workload.gpus >= narrowest
                and (queue.spec.within_cluster_queue != LOWER_OR_NEWER_EQUAL)
            ):
                return None
            choice = self._choose(queue, workload, flavors)
            if choice is None:
                if fit is None:
                    self._failed[memo] = min(narrowest or workload.gpus, workload.gpus)
                    return None
            else:
                flavor, found = choice
                if found is not None:
                    for victim in found:
                        self.evict(victim, now=now)
                    victims = tuple(found)
                fit = flavor, queue.node.borrowing(flavor, workload.gpus)
        assert fit is not None
        flavor, borrowed = fit
        workload.flavor = flavor
        workload.admitted_at = now
        queue.admitted.add(workload.key)
        queue.rank(workload)
        queue.node.add(flavor, workload.gpus)
        self._generation += 1
        return Admission(workload.key, flavor, borrowed, victims)

    def _choose(
        self, queue: _Queue, workload: Workload, flavors: Sequence[str]
    ) -> tuple[str, list[int] | None] | None:
        """Kueue's flavor search with preemption (`findFlavorForPodSets`): each flavor in
        order gets a mode (fits, reclaims from other queues only, preempts in its own queue,
        has no candidates, does not fit) and the height of the cohort it borrows from; the
        search stops at the first mode `shouldTryNextFlavor` accepts, else keeps the one
        `isPreferred` ranks best (the mode first, then the lower borrowing). The flavor and
        its victims (None for a fit), or None when no flavor admits it in this cycle."""
        spec = queue.spec
        node = queue.node
        gpus = workload.gpus
        best: tuple[int, int, str, list[int] | None] | None = None
        for flavor in flavors:
            mode, height, victims = _NO_FIT, 0, None
            if node.available(flavor) >= gpus:
                mode = _FIT
                if node.borrowing(flavor, gpus):
                    height = self._height_that_fits(node, flavor, gpus)[0]
            elif gpus <= self._potential(node, flavor):
                quota = spec.quotas.get(flavor)
                height, reclaim_in_hierarchy = self._height_that_fits(node, flavor, gpus)
                if (
                    (quota is not None and quota.nominal >= gpus)
                    or reclaim_in_hierarchy
                    or spec.borrow_within_cohort != NEVER
                ):
                    found = self._victims(queue, workload, flavor)
                    if found is None:
                        mode = _NO_CANDIDATES
                    else:
                        victims, height = found
                        own = spec.name
                        mode = (
                            _PREEMPT
                            if any(self.workloads[k].queue == own for k in victims)
                            else _RECLAIM
                        )
            if not _try_next(mode, height, spec):
                best = (mode, height, flavor, victims)
                break
            if best is None or _preferred((mode, height), best[:2]):
                best = (mode, height, flavor, victims)
        if best is None or best[0] in (_NO_FIT, _NO_CANDIDATES):
            return None
        return best[2], best[3]

    def _height_that_fits(self, node: _Node, flavor: str, gpus: int) -> tuple[int, bool]:
        """Kueue's `FindHeightOfLowestSubtreeThatFits`: the height of the lowest subtree,
        from the queue up, whose quota takes `gpus` more (0: the queue's own), and whether
        that subtree is below the root, so that the queue has a hierarchical claim to
        reclaim there."""
        if node.parent is None or not node.borrowing(flavor, gpus):
            return 0, node.parent is not None
        remaining = gpus - node.local_available(flavor)
        ancestor: _Node = node.parent
        while True:
            if not ancestor.borrowing(flavor, remaining) or ancestor.parent is None:
                return self._node_height(ancestor), ancestor.parent is not None
            remaining -= ancestor.local_available(flavor)
            ancestor = ancestor.parent

    def _node_height(self, node: _Node) -> int:
        """Kueue's `getNodeHeight`: the distance from a cohort to its furthest leaf."""
        height = self._heights.get(node.name)
        if height is None:
            height = min(len(node.children), 1)
            for child in node.children:
                if not child.queue:
                    height = max(height, self._node_height(child) + 1)
            self._heights[node.name] = height
        return height

    # ------------------------------------------------------------------ preemption
    def _victims(
        self, queue: _Queue, workload: Workload, flavor: str
    ) -> tuple[list[int], int] | None:
        """The workloads to evict so `workload` fits `flavor`, with the height of the cohort
        it then borrows from (0: none), or None if no set of victims would do."""
        if workload.gpus > self._potential(queue.node, flavor):
            return None
        candidates = self._candidates(queue, workload, flavor)
        if not candidates or not self._room_with_all(queue.node, flavor, workload.gpus, candidates):
            return None
        if self._bound_to_fail(queue, workload, flavor, candidates):
            return None
        # Other queues first, lowest effective priority, most recently admitted, then by key:
        # a total order, so the keys computed once give the order a key function would.
        name = queue.spec.name
        workloads = self.workloads
        ordered = sorted(
            (
                (w.queue == name, w.priority + w.boost, -(w.admitted_at or 0.0), key, flag)
                for key, flag in candidates
                for w in (workloads[key],)
            )
        )
        removed: list[tuple[int, bool]] = []
        fits = False
        for *_, key, needs_no_borrowing in ordered:
            victim = self.workloads[key]
            owner = self._queues[victim.queue].node
            if victim.queue != queue.spec.name and not owner.borrowing(flavor):
                continue  # its queue is back within quota: no longer reclaimable
            owner.remove(flavor, victim.gpus)
            removed.append((key, needs_no_borrowing))
            if self._fits_after(queue.node, flavor, workload.gpus, removed):
                fits = True
                break
        if not fits:
            for key, _ in reversed(removed):
                victim = self.workloads[key]
                self._queues[victim.queue].node.add(flavor, victim.gpus)
            return None
        # Give back the victims that the last one made unnecessary.
        for key, _ in reversed(removed[:-1]):
            victim = self.workloads[key]
            owner = self._queues[victim.queue].node
            owner.add(flavor, victim.gpus)
            rest = [r for r in removed if r[0] != key]
            if self._fits_after(queue.node, flavor, workload.gpus, rest):
                removed = rest
            else:
                owner.remove(flavor, victim.gpus)
        height = self._height_that_fits(queue.node, flavor, workload.gpus)[0]
        for key, _ in removed:  # evict() releases them again
            victim = self.workloads[key]
            self._queues[victim.queue].node.add(flavor, victim.gpus)
        return [key for key, _ in removed], height

    def _room_with_all(
        self, node: _Node, flavor: str, gpus: int, candidates: Sequence[tuple[int, bool]]
    ) -> bool:
        """Whether evicting every candidate could leave `gpus` available. Evicting GPUs raises
        what a node has available by at most as many, so when even all of them fall short no
        set of victims makes room, and the search need not evict them one by one to find out
        (most searches that fail, fail so)."""
        workloads = self.workloads
        return node.available(flavor) + sum(workloads[key].gpus for key, _ in candidates) >= gpus

    def _bound_to_fail(
        self, queue: _Queue, workload: Workload, flavor: str, candidates: Sequence[tuple[int, bool]]
    ) -> bool:
        """Whether the search in `_victims` must fail, known without evicting anyone: every
        candidate in another queue may be taken only if the preemptor then ends within its
        quota; it would still borrow with every candidate of its own queue gone; and some
        other queue is borrowing, so the search takes that queue's first candidate. Other
        queues' candidates come first, and taking them leaves the preemptor's own usage as it
        is, so from then on it never fits. Most searches that fail past `_room_with_all` fail
        so, and finding out by evicting and restoring every candidate was a third of a
        baseline replay of the whole Philly trace."""
        name = queue.spec.name
        workloads = self.workloads
        own = 0
        other_borrowing = False
        for key, needs_no_borrowing in candidates:
            victim = workloads[key]
            if victim.queue == name:
                own += victim.gpus
            elif not needs_no_borrowing:
                return False
            elif not other_borrowing:
                other_borrowing = self._queues[victim.queue].node.borrowing(flavor)
        return other_borrowing and queue.node.borrowing(flavor, workload.gpus - own)

    @staticmethod
    def _fits_after(
        node: _Node, flavor: str, gpus: int, removed: Sequence[tuple[int, bool]]
    ) -> bool:
        if node.available(flavor) < gpus:
            return False
        # Reclaiming without the right to borrow: the preemptor must end within its quota.
        return not (any(flag for _, flag in removed) and node.borrowing(flavor, gpus))

    def _potential(self, node: _Node, flavor: str) -> float:
        """The most `node` could ever hold of `flavor` with no usage (Kueue's
        `potentialAvailable`): a workload wider than this can never be admitted there."""
        if node.parent is None:
            return node.subtree.get(flavor, 0)
        potential = node.guaranteed(flavor) + self._potential(node.parent, flavor)
        quota = node.quotas.get(flavor)
        if quota is not None and quota.borrowing_limit is not None:
            potential = min(potential, node.subtree.get(flavor, 0) + quota.borrowing_limit)
        return potential

    def _candidates(self, queue: _Queue, workload: Workload, flavor: str) -> list[tuple[int, bool]]:
        """(key, needs the preemptor to end within quota) for each workload it may evict."""
        spec = queue.spec
        priority = workload.priority + workload.boost
        queued_at = workload.queued_at
        out: list[tuple[int, bool]] = []
        if spec.within_cluster_queue != NEVER:
            out.extend(
                (key, False)
                for key in self._allowed(
                    queue,
                    spec.within_cluster_queue,
                    flavor=flavor,
                    priority=priority,
                    queued_at=queued_at,
                )
            )
        if spec.reclaim_within_cohort == NEVER or queue.node.parent is None:
            return out
        # Walking up: below the first ancestor where it fits within quota the preemptor has no
        # hierarchical advantage, and may reclaim only as its borrowing policy allows.
        workloads = self.workloads
        advantage = not queue.node.borrowing(flavor, workload.gpus)
        remaining = max(0, workload.gpus - queue.node.local_available(flavor))
        previous: _Node = queue.node
        ancestor: _Node | None = queue.node.parent
        reclaim = spec.reclaim_within_cohort
        may_borrow = spec.borrow_within_cohort != NEVER
        while ancestor is not None:
            for other_queue in self._borrowing_queues(ancestor, flavor, skip=previous):
                for key in self._allowed(
                    other_queue,
                    reclaim,
                    flavor=flavor,
                    priority=priority,
                    queued_at=queued_at,
                ):
                    other = workloads[key]
                    while_borrowing = may_borrow and (other.priority + other.boost < priority)
                    out.append((key, not (advantage or while_borrowing)))
            fits_here = ancestor.usage.get(flavor, 0) + remaining <= ancestor.subtree.get(flavor, 0)
            advantage = advantage or fits_here
            remaining = max(0, remaining - ancestor.local_available(flavor))
            previous, ancestor = ancestor, ancestor.parent
        return out

    def _allowed(
        self, queue: _Queue, policy: str, *, flavor: str, priority: int, queued_at: float
    ) -> list[int]:
        """The admitted workloads of `queue` on `flavor` that `policy` lets a preemptor of
        effective `priority`, queued at `queued_at`, evict (in no particular order: the
        victims are put in a total order after)."""
        ranked = queue.ranked.get(flavor)
        if not ranked:
            return []
        if policy == ANY:
            return [k for keys in ranked.values() for k in keys]
        if policy not in (LOWER_PRIORITY, LOWER_OR_NEWER_EQUAL):
            return []
        out = [k for p, keys in ranked.items() if p < priority for k in keys]
        if policy == LOWER_OR_NEWER_EQUAL:
            workloads = self.workloads
            out.extend(k for k in ranked.get(priority, ()) if workloads[k].queued_at > queued_at)
        return out

    def _borrowing_queues(self, cohort: _Node, flavor: str, *, skip: _Node) -> list[_Queue]:
        """Queues under `cohort`, outside `skip`, in subtrees above their nominal quota."""
        found: list[_Queue] = []

        def walk(node: _Node) -> None:
            for child in node.children:
                if child is skip:
                    continue
                if child.queue:
                    if child.borrowing(flavor):
                        found.append(self._queues[child.name])
                elif child.borrowing(flavor):
                    walk(child)

        walk(cohort)
        return found


# --------------------------------------------------------------------------- from objects


def _gpu_quota(resources: Sequence[Mapping[str, Any]], gpu_resources: set[str]) -> FlavorQuota:
    for resource in resources:
        if resource.get("name") in gpu_resources:
            return FlavorQuota(
                nominal=_int(resource.get("nominalQuota")),
                borrowing_limit=_optional_int(resource.get("borrowingLimit")),
                lending_limit=_optional_int(resource.get("lendingLimit")),
            )
    return FlavorQuota(0)


def _int(value: Any) -> int:
    return int(value) if value is not None else 0


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _fungibility(value: Any) -> str:
    """A `flavorFungibility` policy: TryNextFlavor, or MayStopSearch under any of its names."""
    return TRY_NEXT_FLAVOR if value == TRY_NEXT_FLAVOR else MAY_STOP_SEARCH


def specs_from_objects(
    objects: Iterable[Mapping[str, Any]], gpu_resources: set[str]
) -> tuple[list[QueueSpec], list[CohortSpec]]:
    """The ClusterQueues and Cohorts of a render, as the model's specs (GPU quotas only),
    with the node labels of the ResourceFlavors among the objects."""
    objects = list(objects)
    labels: dict[str, Mapping[str, str]] = {
        obj["metadata"]["name"]: dict((obj.get("spec") or {}).get("nodeLabels") or {})
        for obj in objects
        if obj.get("kind") == "ResourceFlavor"
    }
    queues: list[QueueSpec] = []
    cohorts: list[CohortSpec] = []
    for obj in objects:
        kind, spec = obj.get("kind"), obj.get("spec") or {}
        name = obj["metadata"]["name"]
        flavors: dict[str, FlavorQuota] = {}
        order: list[str] = []
        for group in spec.get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                order.append(flavor["name"])
                flavors[flavor["name"]] = _gpu_quota(flavor.get("resources") or [], gpu_resources)
        if kind == "ClusterQueue":
            preemption = spec.get("preemption") or {}
            fungibility = spec.get("flavorFungibility") or {}
            queues.append(
                QueueSpec(
                    name=name,
                    cohort=spec.get("cohortName"),
                    flavors=tuple(order),
                    quotas=flavors,
                    within_cluster_queue=preemption.get("withinClusterQueue", NEVER),
                    reclaim_within_cohort=preemption.get("reclaimWithinCohort", NEVER),
                    borrow_within_cohort=(preemption.get("borrowWithinCohort") or {}).get(
                        "policy", NEVER
                    ),
                    when_can_borrow=_fungibility(fungibility.get("whenCanBorrow")),
                    when_can_preempt=_fungibility(
                        fungibility.get("whenCanPreempt", TRY_NEXT_FLAVOR)
                    ),
                    node_labels={f: labels[f] for f in order if f in labels},
                )
            )
        elif kind == "Cohort":
            cohorts.append(CohortSpec(name=name, parent=spec.get("parentName"), quotas=flavors))
    return queues, cohorts


__all__ = [
    "ANY",
    "LOWER_PRIORITY",
    "MAY_STOP_SEARCH",
    "NEVER",
    "TRY_NEXT_FLAVOR",
    "Admission",
    "CohortSpec",
    "FlavorQuota",
    "Kueue",
    "QueueSpec",
    "Workload",
    "flavor_matches",
    "specs_from_objects",
]
