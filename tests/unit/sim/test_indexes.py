"""The indexes the replay keeps beside its state, checked against that state after every event.

The engine, the Kueue model and the Karpenter model keep indexes so that a settle need not
scan every job and node: the jobs a pass observes, each flavor's Ready nodes, the GPUs each
NodePool provisions, the placeholders each pool runs, the binds known to fail until a node
changes, each quota node's cached headroom, each queue's admitted workloads by flavor and priority,
and the pending counts. Each is checked here,
after every event and every settle of whole runs of `test_engine`'s random scenario (with a
warm pool, so placeholders come and go), against what it stands for, recomputed from scratch.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.sim import kueue as kueue_model
from controller.sim.engine import BASELINES, POLICY, Replay, RunSpec
from controller.sim.karpenter import Karpenter
from controller.sim.model import RunResult
from tests.unit.sim.test_engine import random_scenario

ACTIVE = ("pending", "admitted", "running")


def reference_available(node: kueue_model._Node, flavor: str) -> int:
    """Kueue's `available`, as `resource_node.go` writes it: recursive, nothing cached."""
    if node.parent is None:
        return node.subtree.get(flavor, 0) - node.usage.get(flavor, 0)
    from_parent = reference_available(node.parent, flavor)
    quota = node.quotas.get(flavor)
    if quota is not None and quota.borrowing_limit is not None:
        guaranteed = node.guaranteed(flavor)
        stored = node.subtree.get(flavor, 0) - guaranteed
        used = max(0, node.usage.get(flavor, 0) - guaranteed)
        from_parent = min(stored - used + quota.borrowing_limit, from_parent)
    return node.local_available(flavor) + from_parent


def reference_find(
    karpenter: Karpenter, flavor: tuple[str, str], pod: int
) -> tuple[int, int] | None:
    """Where a pod binds, found as the kube-scheduler model states it, over every node: best
    fit (least free room that takes it, then the oldest), else the fewest placeholders to
    preempt on the oldest node where that makes room."""
    ready = sorted(
        (n for n in karpenter.nodes.values() if n.ready and (n.pool, n.capacity_type) == flavor),
        key=lambda n: n.id,
    )
    fits = [n for n in ready if n.free >= pod]
    if fits:
        return min(fits, key=lambda n: (n.free, n.id)).id, 0
    for node in ready:
        for count in range(1, node.placeholders + 1):
            if node.free + count * node.gpus >= pod:
                return node.id, count
    return None


def skipped_as_unbindable(karpenter: Karpenter) -> list[int]:
    """The waiting workloads `place` would skip now, as known to bind nowhere."""
    out = []
    for key, (pool, capacity_type, pods) in karpenter.waiting.items():
        known = karpenter._unbindable.get((pool, capacity_type))
        current = karpenter._version.get((pool, capacity_type), 0)
        if known is not None and known[0] == current and min(pods) >= known[1]:
            out.append(key)
    return out


def karpenter_mismatches(karpenter: Karpenter) -> Iterator[str]:
    nodes = list(karpenter.nodes.values())
    flavors = {(n.pool, n.capacity_type) for n in nodes} | set(karpenter._ready)
    for pool, capacity_type in flavors:
        ready = [n for n in nodes if n.ready and (n.pool, n.capacity_type) == (pool, capacity_type)]
        if karpenter._ready_nodes(pool, capacity_type) != sorted(ready, key=lambda n: n.id):
            yield f"Ready nodes of {pool}/{capacity_type}"
        provisioned = sum(
            n.gpus for n in nodes if (n.pool, n.capacity_type) == (pool, capacity_type)
        )
        if karpenter.provisioned(pool, capacity_type) != provisioned:
            yield f"GPUs provisioned by {pool}/{capacity_type}"
    for pool in karpenter.pools:
        if karpenter.placeholders_running(pool) != sum(
            n.placeholders for n in nodes if n.pool == pool
        ):
            yield f"placeholders of {pool}"
        ready = sorted((n for n in nodes if n.ready and n.pool == pool), key=lambda n: n.id)
        if karpenter._ready_nodes(pool, None) != ready:
            yield f"Ready nodes of {pool}"
    for key in skipped_as_unbindable(karpenter):
        pool, capacity_type, pods = karpenter.waiting[key]
        if karpenter._find((pool, capacity_type), min(pods)) is not None:
            yield f"workload {key} skipped as unbindable, yet it binds"
    for pool, capacity_type in flavors:
        launching = [
            n for n in nodes if not n.ready and (n.pool, n.capacity_type) == (pool, capacity_type)
        ]
        if list(karpenter._launching.get((pool, capacity_type), {}).values()) != launching:
            yield f"launching nodes of {pool}/{capacity_type}"
        for pod in range(1, karpenter.pools[pool].gpus_per_node + 1):
            want = reference_find(karpenter, (pool, capacity_type), pod)
            if karpenter._find((pool, capacity_type), pod) != want:
                yield f"where a {pod}-GPU pod binds on {pool}/{capacity_type}"


def kueue_mismatches(kueue: kueue_model.Kueue) -> Iterator[str]:
    flavors = sorted({f for q in kueue._queues.values() for f in q.spec.flavors})
    nodes = [*kueue._cohorts.values(), *(q.node for q in kueue._queues.values())]
    for node in nodes:
        for flavor in flavors:
            if node.available(flavor) != reference_available(node, flavor):
                yield f"available {flavor} of {node.name}"
    for name, queue in kueue._queues.items():
        ranked: dict[str, dict[int, set[int]]] = {}
        for key in queue.admitted:
            workload = kueue.workloads[key]
            assert workload.flavor is not None
            by_priority = ranked.setdefault(workload.flavor, {})
            by_priority.setdefault(workload.priority + workload.boost, set()).add(key)
        if {f: p for f, p in queue.ranked.items() if p} != ranked:
            yield f"admitted workloads of {name} by flavor and priority"
    pending = kueue.pending()
    if kueue.pending_count() != len(pending):
        yield "pending count"
    if kueue.pending_gpus() != sum(w.gpus for w in pending):
        yield "pending GPUs"


class CheckedReplay(Replay):
    """A replay that checks its indexes after every event and settle, and keeps what failed."""

    checks = 0
    skips = 0
    """Waiting workloads that `place` would have skipped, over all checks."""
    most_placeholders = 0
    mismatches: list[str]

    def _check(self, where: str) -> None:
        self.checks += 1
        self.skips += len(skipped_as_unbindable(self.karpenter))
        self.most_placeholders = max(
            self.most_placeholders, *map(self.karpenter.placeholders_running, self.pools)
        )
        found = list(karpenter_mismatches(self.karpenter))
        if self.kueue is not None:
            found.extend(kueue_mismatches(self.kueue))
        active = {i for i, j in enumerate(self.jobs) if j.state in ACTIVE}
        if self.active != active:
            found.append("active jobs")
        self.mismatches.extend(f"{where} at {self.now}: {m}" for m in found)

    def _handle(self, kind: str, a: int, b: int) -> None:
        super()._handle(kind, a, b)
        self._check(kind)

    def _settle(self) -> None:
        super()._settle()
        self._check("settle")


@pytest.mark.parametrize(
    "spec", [pytest.param(s, id=f"{s.name} run") for s in (POLICY, *BASELINES.values())]
)
def test_every_index_agrees_with_the_state_it_stands_for_after_every_event(
    spec: RunSpec,
) -> None:
    ps, jobs = random_scenario(warm_pool={"minGpus": 8, "maxGpus": 16})
    replay = CheckedReplay(ps, jobs, spec, seed=1)
    replay.mismatches = []
    result: RunResult = replay.run()

    assert replay.checks > 1000, "the indexes were checked all through the run"
    assert replay.mismatches == []
    if not (spec.kind == "static" and spec.on_demand_fraction == 1.0):
        assert any(o.interruptions for o in result.outcomes), "spot nodes were reclaimed"
    assert any(o.preemptions for o in result.outcomes), "workloads were preempted"
    assert replay.skips > 0, "some binds were skipped as known to fail"
    if spec.kind == "policy":
        assert replay.most_placeholders > 0, "the warm pool ran placeholders"
