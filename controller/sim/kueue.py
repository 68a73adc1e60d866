"""A model of Kueue's admission for the replay, built from the objects the controller renders.

Kueue itself cannot run inside a replay, so this is a stand-in, written after Kueue's own code
(`pkg/cache` resource nodes, `pkg/scheduler` ordering, `pkg/scheduler/preemption` classical
preemption) and fed the very ClusterQueues and Cohorts the renderer produces. What it keeps:

- **The quota tree.** Cohorts and ClusterQueues form Kueue's tree (root cohort, one cohort per
  tier, a queue per project). Each node has, per flavor, a nominal quota and optional borrowing
  and lending limits. As in `resource_node.go`: a node's subtree quota is its own nominal plus
  what its children may lend (their subtree quota minus what a lending limit keeps back); usage
  past a child's guaranteed quota counts in its parent; what a queue can still take is its local
  headroom plus what its parent can give, capped by its borrowing limit.
- **Flavor assignment.** A workload's one pod set takes one flavor. Under the queue's
  `whenCanBorrow: TryNextFlavor` (what the controller renders): the first of its flavors, in
  order, where it fits without borrowing, else the first where it fits by borrowing (Kueue's
  `shouldTryNextFlavor` and `isPreferred`). Under `MayStopSearch` (Kueue's default, the
  baselines'): the first flavor where it fits, borrowing or not. Failing both, the first
  flavor where preemption can make room (`whenCanPreempt: TryNextFlavor`).
- **Ordering.** Each queue orders its pending workloads by effective priority (the base
  priority plus the `kueue.x-k8s.io/priority-boost` annotation), then by queue time (creation,
  or the last eviction). Queues are BestEffortFIFO: a head that does not fit is set aside until
  something is released in its tree. Each cycle takes every queue's head and admits them in
  Kueue's order: not borrowing first, then higher effective priority, then older.
- **Preemption.** Within a queue (`withinClusterQueue`), lower effective priority, or newer of
  equal priority for `LowerOrNewerEqualPriority`; across queues (`reclaimWithinCohort`),
  workloads of queues above their nominal quota, lower in priority for `LowerPriority`, any for
  `Any`. A preemptor that would itself borrow may reclaim only when `borrowWithinCohort` allows
  it and only from lower priorities; otherwise it reclaims only if it ends within its quota.
  Candidates are taken other queues first, lowest effective priority first, most recently
  admitted first; the victims the last one made unnecessary are given back.

What it leaves out: resources other than GPUs (CPU and memory quotas scale with GPUs in what we
render, so they never bind first), fair sharing (no weights in the ordering), admission checks,
topology-aware scheduling, the seconds a preemptor waits for its victims to terminate, and
how high in the cohort tree a workload borrows (Kueue prefers, among flavors that all borrow,
the one borrowing nearest its queue).
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
    """Queue order time: creation, or the last eviction (Kueue's default requeuing timestamp)."""
    flavor: str | None = None
    admitted_at: float | None = None

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
        self._failed: dict[tuple[str, int], int] = {}
        self._failed_generation = -1
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
        """Quota taken back (a preemption): the workload queues again from `now`."""
        workload = self.workloads[key]
        assert workload.admitted_at is not None
        self._release(workload)
        workload.flavor = None
        workload.admitted_at = None
        workload.queued_at = now
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

    def _first_fit(self, queue: _Queue, workload: Workload) -> tuple[str, bool] | None:
        try_next = queue.spec.when_can_borrow == TRY_NEXT_FLAVOR
        borrowed: tuple[str, bool] | None = None
        for flavor in queue.spec.flavors:
            if queue.node.available(flavor) >= workload.gpus:
                borrowing = queue.node.borrowing(flavor, workload.gpus)
                if not (borrowing and try_next):
                    return flavor, borrowing
                borrowed = borrowed or (flavor, True)
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
        if fit is None:
            # Nothing changed since a workload of this queue and priority, no wider, failed:
            # this one cannot get in either (Kueue would find the same, only slower).
            memo = (queue.spec.name, workload.priority + workload.boost, workload.queued_at)
            if self._failed_generation != self._generation:
                self._failed.clear()
                self._failed_generation = self._generation
            narrowest = self._failed.get(memo[:2])
            if (
                narrowest is not None
                and workload.gpus >= narrowest
                and (queue.spec.within_cluster_queue != LOWER_OR_NEWER_EQUAL)
            ):
                return None
            for flavor in queue.spec.flavors:
                found = self._victims(queue, workload, flavor)
                if found is not None:
                    for victim in found:
                        self.evict(victim, now=now)
                    victims = tuple(found)
                    fit = flavor, queue.node.borrowing(flavor, workload.gpus)
                    break
            if fit is None:
                self._failed[memo[:2]] = min(narrowest or workload.gpus, workload.gpus)
                return None
        flavor, borrowed = fit
        workload.flavor = flavor
        workload.admitted_at = now
        queue.admitted.add(workload.key)
        queue.rank(workload)
        queue.node.add(flavor, workload.gpus)
        self._generation += 1
        return Admission(workload.key, flavor, borrowed, victims)

    # ------------------------------------------------------------------ preemption
    def _victims(self, queue: _Queue, workload: Workload, flavor: str) -> list[int] | None:
        """The workloads to evict so `workload` fits `flavor`, or None if none would do."""
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
        for key, _ in removed:  # evict() releases them again
            victim = self.workloads[key]
            self._queues[victim.queue].node.add(flavor, victim.gpus)
        return [key for key, _ in removed]

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


def specs_from_objects(
    objects: Iterable[Mapping[str, Any]], gpu_resources: set[str]
) -> tuple[list[QueueSpec], list[CohortSpec]]:
    """The ClusterQueues and Cohorts of a render, as the model's specs (GPU quotas only)."""
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
                    when_can_borrow=TRY_NEXT_FLAVOR
                    if (spec.get("flavorFungibility") or {}).get("whenCanBorrow") == TRY_NEXT_FLAVOR
                    else MAY_STOP_SEARCH,
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
    "specs_from_objects",
]
