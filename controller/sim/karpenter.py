"""A model of Karpenter and the kube-scheduler for the replay, fed the NodePools we render.

Karpenter and a cloud cannot run inside a replay, so this stands in for them (and for the
cloud's spot market: a fake, seeded). It follows the NodePools the controller renders:

- **NodePools.** One per pool and capacity type, with its GPU `limits` and `weight` as
  rendered. Karpenter never launches a node that would take a NodePool's GPUs (nodes launched
  and not yet removed) past its limit; lowering a limit removes no node.
- **Pods.** An admitted workload's pod set becomes pods of at most a node's GPUs each (a
  16-GPU job on 8-GPU nodes is two 8-GPU pods) that must land on nodes of the capacity type its
  flavor selects. Pods bind one at a time, best fit on Ready nodes (the fullest node that takes
  the pod: the kube-scheduler's `MostAllocated` scoring, which GPU clusters use to keep whole
  nodes free for wide pods), largest first, and hold their node while the rest of their gang
  waits; the workload starts once all its pods are bound. Warm-pool placeholders are pods of
  a node's GPUs at a priority below every workload: a workload preempts them from a Ready node
  (the kube-scheduler's preemption) and binds there at once; a displaced placeholder waits for
  room again.
- **Launches.** Pods that fit no Ready node are bin-packed, largest first, onto nodes being
  launched and then onto new nodes of the highest-weight NodePool that may take them (a
  workload's pods only on its flavor's capacity type; placeholders on either). A node is Ready
  after the pool's provisioning latency.
- **The spot market** (a fake cloud, seeded): shortages come and go, in each zone of a pool
  apart. Each zone's market alternates between periods with spot capacity and shortages in
  which its spot launches fail; a spot node launches in the first of the pool's zones (in
  name order) that has capacity, and when none has, the launch fails with an
  `InsufficientCapacityError` for all the pool's zones (the NodeClaim may go to any) and is
  tried again when the first zone comes back. A pool of `k` zones is short when all are:
  zones are independent, each short the share (1 - spotAvailability)^(1/k) of the time, for
  `k` x `SHORTAGE_SECONDS` on average (exponentially distributed), so the pool is short the
  share 1 - spotAvailability of the time, `SHORTAGE_SECONDS` on average (the first of `k`
  zones to come back), whatever `k`: `spotAvailability` means here what the risk model takes
  it to mean, the share of the time the market delivers the spot quota asked for. A shortage
  stops launches only: running spot nodes are reclaimed at their own rate.
- **Disruption.** Each spot node is reclaimed at a seeded exponential time of rate
  `spotInterruptionsPerHour`; the workloads on it stop. Only empty nodes are consolidated,
  `consolidateAfter` after they empty. A node costs its capacity type's price per GPU-hour
  from launch to removal.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller import names
from controller.api.types import GpuPool

SPOT, ON_DEMAND = names.SPOT, names.ON_DEMAND
SHORTAGE_SECONDS = 1800.0
"""The mean length of a pool's spot shortage (every zone of it short): an assumption of the
fake market (capacity shortages of a GPU type in one zone typically clear within minutes to
hours)."""

Push = Callable[[float, str, int], None]
"""Schedules an event (time, kind, node id) in the replay's clock."""


@dataclass(frozen=True)
class NodePoolSpec:
    pool: str
    capacity_type: str
    limit_gpus: int
    weight: int
    consolidate_after: float


@dataclass
class Node:
    id: int
    pool: str
    capacity_type: str
    gpus: int
    launched: float
    zone: str = ""
    """The zone it launched in (spot: the first with capacity; on-demand: the pool's first)."""
    ready: bool = False
    free: int = 0
    jobs: dict[int, int] = field(default_factory=dict)
    """Workload key -> GPUs its pods hold here."""
    placeholders: int = 0
    idle_since: float | None = None


@dataclass(frozen=True)
class Removal:
    node: Node
    at: float


def pods_of(gpus: int, per_node: int) -> list[int]:
    """A pod set as pods of at most a node's GPUs each, largest first."""
    if gpus <= per_node:
        return [gpus]
    whole, rest = divmod(gpus, per_node)
    return [per_node] * whole + ([rest] if rest else [])


def duration_seconds(text: Any) -> float:
    """A Go duration like "10m" or "30s" (only what we render), in seconds."""
    value = str(text or "0s")
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    return float(value[:-1]) * units[value[-1]] if value[-1] in units else float(value)


def specs_from_objects(
    objects: Iterable[Mapping[str, Any]], pools: Mapping[str, GpuPool]
) -> list[NodePoolSpec]:
    """The NodePools of a render, as the model's specs."""
    out = []
    for obj in objects:
        if obj.get("kind") != "NodePool":
            continue
        spec = obj.get("spec") or {}
        pool_name = (
            ((spec.get("template") or {}).get("metadata") or {})
            .get("labels", {})
            .get(names.LABEL_POOL)
        )
        pool = pools.get(str(pool_name))
        if pool is None:
            continue
        requirements = ((spec.get("template") or {}).get("spec") or {}).get("requirements") or []
        capacity_type = next(
            r["values"][0] for r in requirements if r.get("key") == names.CAPACITY_TYPE_LABEL
        )
        out.append(
            NodePoolSpec(
                pool=pool.name,
                capacity_type=capacity_type,
                limit_gpus=int((spec.get("limits") or {}).get(pool.gpu_resource, 0)),
                weight=int(spec.get("weight") or 0),
                consolidate_after=duration_seconds(
                    (spec.get("disruption") or {}).get("consolidateAfter")
                ),
            )
        )
    return out


class Karpenter:
    """Nodes, NodePool limits and pod placement for one replay."""

    def __init__(
        self,
        pools: Mapping[str, GpuPool],
        rng: np.random.Generator,
        push: Push,
        *,
        market_seed: int = 0,
    ) -> None:
        self.pools = dict(pools)
        self.rng = rng
        # Each zone's market draws from its own stream, so every run of one seed meets the
        # same shortages at the same times, whatever it launches; a pool's first zone draws
        # the stream the pool drew before zones were modelled, so one-zone replays are as
        # they were.
        self._market = {
            (name, zone): np.random.default_rng([market_seed, 7, i, *([j] if j else [])])
            for i, name in enumerate(sorted(self.pools))
            for j, zone in enumerate(self.zones(name))
        }
        self._retries: set[float] = set()
        self.push = push
        self.nodepools: dict[tuple[str, str], NodePoolSpec] = {}
        self.nodes: dict[int, Node] = {}
        self._next_id = 0
        self.waiting: dict[int, tuple[str, str, list[int]]] = {}
        """Workload key -> (pool, capacity type, pods) for admitted workloads not yet placed."""
        self.placed: dict[int, dict[int, int]] = {}
        """Workload key -> {node id: GPUs} for running workloads."""
        self.placeholders_wanted: dict[str, int] = {}
        self._shortage_until: dict[tuple[str, str], float] = {}
        self.capacity_errors: dict[str, tuple[float, float, frozenset[str]]] = {}
        """Per pool, the first spot launch that failed in the shortage in force, when the
        shortage ends, and the zones the failed NodeClaims could launch in (all the pool's):
        Karpenter reports `InsufficientCapacityError`s from the first until a launch
        succeeds, every few minutes (what the controller observes)."""
        self._market_checked: dict[tuple[str, str], float] = {}
        self.removed: list[Removal] = []
        """Nodes removed, with when: for cost, read and cleared by the replay."""
        self.interrupted: list[Node] = []
        """Spot nodes reclaimed since the replay last looked (what NodeClaims would show)."""
        # Indexes kept in step with `nodes`, so a settle reads them instead of scanning every
        # node: the Ready and the launching nodes of each (pool, capacity type), its Ready
        # nodes by free GPUs and those running placeholders, the GPUs each provisions, and a
        # count of the changes that could let a pod bind on its Ready nodes.
        self._ready: dict[tuple[str, str], dict[int, Node]] = {}
        self._launching: dict[tuple[str, str], dict[int, Node]] = {}
        """Nodes launched and not Ready yet, in launch order."""
        self._by_free: dict[tuple[str, str], dict[int, list[int]]] = {}
        """Free GPUs -> a heap of the ids of Ready nodes with that many free. An entry goes
        stale when its node's free GPUs change (the node is pushed again under the new
        count) and is dropped when met at the top."""
        self._with_placeholders: dict[tuple[str, str], set[int]] = {}
        self._provisioned: dict[tuple[str, str], int] = {}
        self._placeholders: dict[str, int] = {}
        """Pool -> the placeholders running on its nodes."""
        self._version: dict[tuple[str, str], int] = {}
        self._unbindable: dict[tuple[str, str], tuple[int, int]] = {}
        """(pool, capacity type) -> (its version, the narrowest pod found to bind nowhere on
        its Ready nodes at that version): a pod no narrower binds nowhere either."""

    def zones(self, pool: str) -> tuple[str, ...]:
        """The pool's zones in name order (one unnamed zone for a pool that lists none)."""
        return tuple(sorted(self.pools[pool].zones)) or ("",)

    # ------------------------------------------------------------------ configuration
    def configure(self, nodepools: Sequence[NodePoolSpec]) -> None:
        self.nodepools = {(n.pool, n.capacity_type): n for n in nodepools}

    def set_placeholders(self, pool: str, replicas: int) -> None:
        """KEDA's scale of a pool's warm-pool Deployment."""
        self.placeholders_wanted[pool] = max(replicas, 0)

    # ------------------------------------------------------------------ queries
    def provisioned(self, pool: str, capacity_type: str) -> int:
        """GPUs of the nodes launched and not yet removed."""
        return self._provisioned.get((pool, capacity_type), 0)

    def provisioned_in_pool(self, pool: str) -> int:
        return sum(gpus for (name, _), gpus in self._provisioned.items() if name == pool)

    def placeholders_running(self, pool: str) -> int:
        return self._placeholders.get(pool, 0)

    # ------------------------------------------------------------------ workloads
    def admit(self, key: int, pool: str, capacity_type: str, gpus: int) -> None:
        per_node = self.pools[pool].gpus_per_node
        self.waiting[key] = (pool, capacity_type, pods_of(gpus, per_node))
        self.placed.setdefault(key, {})

    def release(self, key: int, *, now: float) -> None:
        """A workload stopped or finished: its pods leave their nodes (or stop waiting)."""
        self.waiting.pop(key, None)
        for node_id, gpus in self.placed.pop(key, {}).items():
            node = self.nodes.get(node_id)
            if node is None:
                continue
            node.free += gpus
            node.jobs.pop(key, None)
            self._changed(node)
            self._maybe_idle(node, now)

    def _add_placeholders(self, node: Node, count: int) -> None:
        node.placeholders += count
        self._placeholders[node.pool] = self._placeholders.get(node.pool, 0) + count

    def _changed(self, node: Node) -> None:
        """After a Ready node's free GPUs or placeholders changed, or it came or went: it is
        indexed under its new room, and binds that failed on its flavor may not any more."""
        flavor = (node.pool, node.capacity_type)
        self._version[flavor] = self._version.get(flavor, 0) + 1
        present = node.ready and node.id in self.nodes
        if present:
            heapq.heappush(self._by_free.setdefault(flavor, {}).setdefault(node.free, []), node.id)
        with_placeholders = self._with_placeholders.setdefault(flavor, set())
        if present and node.placeholders > 0:
            with_placeholders.add(node.id)
        else:
            with_placeholders.discard(node.id)

    def _maybe_idle(self, node: Node, now: float) -> None:
        if node.ready and not node.jobs and not node.placeholders and node.idle_since is None:
            node.idle_since = now
            spec = self.nodepools.get((node.pool, node.capacity_type))
            after = spec.consolidate_after if spec is not None else 0.0
            self.push(now + after, "idle", node.id)

    # ------------------------------------------------------------------ placement
    def place(self, *, now: float) -> list[int]:
        """Binds waiting workloads' pods to Ready nodes, then launches nodes for what is left.

        Pods bind one by one, as the kube-scheduler binds them, and hold their node while the
        rest of their gang waits (so a half-placed job's node is never consolidated away); a
        workload starts once all its pods are bound. Returns the workloads that started, in
        the order they were admitted.
        """
        started: list[int] = []
        for key in list(self.waiting):
            pool, capacity_type, pods = self.waiting[key]
            flavor = (pool, capacity_type)
            version = self._version.get(flavor, 0)
            narrowest = min(pods)
            known = self._unbindable.get(flavor)
            if known is not None and known[0] == version and narrowest >= known[1]:
                continue  # nothing on its Ready nodes changed since a narrower pod bound nowhere
            left = self._bind(key, flavor, pods)
            if len(left) == len(pods):
                # No pod bound: its narrowest binds nowhere, and neither does any wider pod.
                if known is not None and known[0] == version:
                    narrowest = min(narrowest, known[1])
                self._unbindable[flavor] = (version, narrowest)
            if left:
                self.waiting[key] = (pool, capacity_type, left)
            else:
                del self.waiting[key]
                started.append(key)
        self._place_placeholders(now)
        self._launch(now)
        return started

    def _ready_nodes(self, pool: str, capacity_type: str | None) -> list[Node]:
        """The pool's Ready nodes (of one capacity type, or of all), oldest first."""
        if capacity_type is not None:
            ready = self._ready.get((pool, capacity_type), {})
            return [ready[i] for i in sorted(ready)]
        found = {
            i: n
            for (name, _), nodes in self._ready.items()
            if name == pool
            for i, n in nodes.items()
        }
        return [found[i] for i in sorted(found)]

    def _bind(self, key: int, flavor: tuple[str, str], pods: Sequence[int]) -> list[int]:
        """Binds the workload's pods, largest first, each where `_find` puts it (preempting
        placeholders if need be); the pods that found no room."""
        taken: dict[int, int] = {}
        left: list[int] = []
        for pod in pods:
            found = self._find(flavor, pod)
            if found is None:
                left.append(pod)
                continue
            node_id, evicted = found
            node = self.nodes[node_id]
            if evicted:
                self._add_placeholders(node, -evicted)
                node.free += evicted * node.gpus
            node.free -= pod
            self._changed(node)
            taken[node_id] = taken.get(node_id, 0) + pod
        bound = self.placed.setdefault(key, {})
        for node_id, gpus in taken.items():
            node = self.nodes[node_id]
            node.jobs[key] = node.jobs.get(key, 0) + gpus
            node.idle_since = None
            bound[node_id] = bound.get(node_id, 0) + gpus
        return left

    def _find(self, flavor: tuple[str, str], pod: int) -> tuple[int, int] | None:
        """Where one pod binds among the flavor's Ready nodes, as (node id, placeholders to
        preempt there), or None: best fit (the least free room that takes it, the oldest node
        of those); failing that, the fewest placeholders on the oldest node where preempting
        them makes room."""
        ready = self._ready.get(flavor)
        if not ready:
            return None
        buckets = self._by_free.get(flavor, {})
        for room in sorted(buckets):
            if room < pod:
                continue
            heap = buckets[room]
            while heap:
                node = ready.get(heap[0])
                if node is not None and node.free == room:
                    return node.id, 0
                heapq.heappop(heap)
        for node_id in sorted(self._with_placeholders.get(flavor, ())):
            node = ready[node_id]
            for count in range(1, node.placeholders + 1):
                if node.free + count * node.gpus >= pod:
                    return node_id, count
        return None

    def _place_placeholders(self, now: float) -> None:
        for pool_name, wanted in self.placeholders_wanted.items():
            running = self.placeholders_running(pool_name)
            excess = running - wanted
            if excess > 0:
                for node in sorted(self._all_nodes(pool_name), key=lambda n: -n.id):
                    while excess > 0 and node.placeholders > 0:
                        self._add_placeholders(node, -1)
                        node.free += node.gpus
                        excess -= 1
                        self._changed(node)
                    self._maybe_idle(node, now)
                continue
            for node in self._ready_nodes(pool_name, None):
                if running >= wanted:
                    break
                if node.free == node.gpus and not node.jobs and not node.placeholders:
                    self._add_placeholders(node, 1)
                    node.free = 0
                    node.idle_since = None
                    running += 1
                    self._changed(node)

    def _all_nodes(self, pool: str) -> list[Node]:
        return [n for n in self.nodes.values() if n.pool == pool]

    # ------------------------------------------------------------------ launches
    def _launch(self, now: float) -> None:
        """New nodes for pods no Ready node can take, within the NodePools' limits.

        Workload pods first, each on its flavor's NodePool; then missing placeholders, on the
        heaviest NodePool of their pool with room, counting nodes on their way that no
        workload pod needs.
        """
        demand: dict[tuple[str, str], list[int]] = {}
        for pool, capacity_type, pods in self.waiting.values():
            demand.setdefault((pool, capacity_type), []).extend(pods)
        for key, pods in demand.items():
            self._launch_for(key, sorted(pods, reverse=True), now)
        for pool_name, wanted in self.placeholders_wanted.items():
            missing = wanted - self.placeholders_running(pool_name)
            if missing <= 0:
                continue
            per_node = self.pools[pool_name].gpus_per_node
            coming = sum(len(n) for (name, _), n in self._launching.items() if name == pool_name)
            needed = math.ceil(
                sum(sum(p) for k, p in demand.items() if k[0] == pool_name) / per_node
            )
            missing -= max(coming - needed, 0)
            for nodepool in sorted(
                (n for n in self.nodepools.values() if n.pool == pool_name),
                key=lambda n: -n.weight,
            ):
                if missing <= 0:
                    break
                missing -= self._launch_nodes((pool_name, nodepool.capacity_type), missing, now)

    def _launch_for(self, key: tuple[str, str], pods: list[int], now: float) -> None:
        """Bin-packs pods onto nodes on their way, then onto as many new nodes as needed."""
        per_node = self.pools[key[0]].gpus_per_node
        bins = [n.gpus for n in self._launching.get(key, {}).values()]
        new = 0
        for pod in pods:
            for i, room in enumerate(bins):
                if room >= pod:
                    bins[i] -= pod
                    break
            else:
                bins.append(per_node - pod)
                new += 1
        if new:
            self._launch_nodes(key, new, now)

    def _launch_nodes(self, key: tuple[str, str], count: int, now: float) -> int:
        """Up to `count` nodes within the NodePool's limit; how many were launched."""
        pool_name, capacity_type = key
        nodepool = self.nodepools.get(key)
        if nodepool is None:
            return 0
        pool = self.pools[pool_name]
        per_node = pool.gpus_per_node
        room = max(nodepool.limit_gpus - self.provisioned(*key), 0) // per_node
        count = min(count, room)
        if count <= 0:
            return 0
        zone = self.zones(pool_name)[0]
        if capacity_type == SPOT:
            until = self.shortage_until(pool, now)
            if until > now:
                # Karpenter's InsufficientCapacityError, for every zone the NodeClaim could go
                # to: it reports one now and again every few minutes while the pods wait, until
                # a launch succeeds at `until`.
                first, last_until, _ = self.capacity_errors.get(
                    pool_name, (now, -math.inf, frozenset())
                )
                self.capacity_errors[pool_name] = (
                    first if last_until > now else now,
                    until,
                    frozenset(self.zones(pool_name)),
                )
                if until not in self._retries:
                    self._retries.add(until)
                    self.push(until, "retry", 0)
                return 0
            zone = next(z for z in self.zones(pool_name) if self._zone_until(pool, z, now) <= now)
        launched = 0
        for _ in range(count):
            node = Node(self._next_id, pool_name, capacity_type, per_node, launched=now, zone=zone)
            self._next_id += 1
            self.nodes[node.id] = node
            self._launching.setdefault(key, {})[node.id] = node
            self._provisioned[key] = self._provisioned.get(key, 0) + node.gpus
            self.push(now + pool.provisioning_latency_seconds, "ready", node.id)
            launched += 1
        return launched

    def retried(self, at: float) -> None:
        self._retries.discard(at)

    def shortage_until(self, pool: GpuPool, now: float) -> float:
        """When the pool's spot shortage in force at `now` ends (`now` when there is none): the
        first of its zones to come back, as a launch may go to any."""
        return min(self._zone_until(pool, zone, now) for zone in self.zones(pool.name))

    def _zone_until(self, pool: GpuPool, zone: str, now: float) -> float:
        """When the zone's spot shortage in force at `now` ends (`now` when there is none).

        The market's periods are drawn lazily, in time order, from the zone's generator:
        available periods of mean `k` x SHORTAGE_SECONDS x b / (1 - b), shortages of mean
        `k` x SHORTAGE_SECONDS, where `k` is the pool's zones and 1 - b = (1 - a)^(1/k), a
        being spotAvailability (the pool short, all its zones at once, 1 - a of the time).
        """
        availability = pool.spot_availability
        if availability >= 1.0:
            return now
        if availability <= 0.0:
            return math.inf
        k = len(self.zones(pool.name))
        if k > 1:
            availability = 1.0 - (1.0 - availability) ** (1.0 / k)
        mean = SHORTAGE_SECONDS * k
        key = (pool.name, zone)
        rng = self._market[key]
        until = self._shortage_until.get(key)
        checked = self._market_checked.get(key)
        if until is None or checked is None:
            # The market starts, at time 0, in its long-run state: short with probability
            # 1 - b; periods are then drawn in time order, whenever they are first needed.
            short = rng.random() > availability
            until = rng.exponential(mean) if short else 0.0
            start_next = until + rng.exponential(mean * availability / (1 - availability))
            checked = start_next
        # `checked` is when the next shortage starts; walk forward to `now`.
        while checked <= now:
            until = checked + rng.exponential(mean)
            checked = until + rng.exponential(mean * availability / (1 - availability))
        self._shortage_until[key] = until
        self._market_checked[key] = checked
        return until if until > now else now

    # ------------------------------------------------------------------ node events
    def node_ready(self, node_id: int, *, now: float) -> None:
        node = self.nodes.get(node_id)
        if node is None:
            return
        node.ready, node.free = True, node.gpus
        del self._launching[(node.pool, node.capacity_type)][node.id]
        self._ready.setdefault((node.pool, node.capacity_type), {})[node.id] = node
        self._changed(node)
        self._maybe_idle(node, now)
        if node.capacity_type == SPOT:
            rate = self.pools[node.pool].spot_interruptions_per_hour
            if rate > 0:
                self.push(now + self.rng.exponential(3600.0 / rate), "interrupt", node.id)

    def interrupt(self, node_id: int, *, now: float) -> list[int]:
        """A spot node reclaimed: the workloads that ran on it (they stop entirely)."""
        node = self.nodes.get(node_id)
        if node is None:
            return []
        stopped = sorted(node.jobs)
        for key in stopped:
            self.release(key, now=now)
        self._remove(node, now)
        self.interrupted.append(node)
        return stopped

    def idle(self, node_id: int, *, now: float) -> None:
        node = self.nodes.get(node_id)
        if node is None or node.jobs or node.placeholders or node.idle_since is None:
            return
        spec = self.nodepools.get((node.pool, node.capacity_type))
        after = spec.consolidate_after if spec is not None else 0.0
        if now - node.idle_since >= after - 1e-6:
            self._remove(node, now)

    def _remove(self, node: Node, now: float) -> None:
        del self.nodes[node.id]
        flavor = (node.pool, node.capacity_type)
        self._provisioned[flavor] -= node.gpus
        if node.placeholders:
            self._placeholders[node.pool] -= node.placeholders
        if node.ready:
            del self._ready[flavor][node.id]
        else:
            del self._launching[flavor][node.id]
        self._changed(node)
        self.removed.append(Removal(node, now))

    def remove_all(self, *, now: float) -> None:
        for node in list(self.nodes.values()):
            self._remove(node, now)


__all__ = ["Karpenter", "Node", "NodePoolSpec", "pods_of", "specs_from_objects"]
