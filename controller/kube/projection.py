"""What the cache keeps of a Workload: of its spec, only what a pass reads.

A Workload that Kueue makes from a Job carries the Job's whole pod template: images, commands,
arguments, environment, volumes, probes, affinities. It is most of the object's bytes, and the
controller reads none of it but each container's resources (`risk.workloads.pod_set_gpus`)
and the node selection that says which capacity type its pods may run on.
Every watch event brings a new copy, decoded into thousands of small objects that stay until
the next event for that Workload replaces them, and with thousands of Workloads that Kueue
updates all the time the templates would be the largest thing the controller holds. client-go's
informers make the same cut with a transform (`SetTransform`), controller-runtime's cache with
one per kind (`cache.Options.ByObject`).

What is kept, and why each is enough:
- `metadata` whole (without managedFields, which the cache drops of every kind whose
  ownership no pass reads, Workloads among them): names, labels and annotations (deadlines,
  expected durations, boosts) are read.
- `spec.queueName` (the LocalQueue a Workload waits in), `spec.priority` (the admission
  order) and `spec.active` (a move to a lane deactivates a Workload and activates it again:
  `reconcile.lanes.move_patch`, `reactivation_patch`), which are read;
  `spec.priorityClassName` and `spec.priorityClassSource`, which are not yet, kept because
  they are a few bytes and say how Kueue orders the Workload.
- of each pod set: `name`, `count`, `minCount`, and of each container its `name` and
  `resources`: what `pod_set_gpus` sums.
- of each pod template's spec, `nodeSelector` whole and the required node affinity
  (`affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`): the capacity type
  a workload selects (`risk.workloads.selected_capacity_type`), which says whether its owner
  chose one and whether our lane is in place, and the node selector a lane's JSON Patch adds
  to (`reconcile.lanes.lane_patch`), which must see whether the map exists. Both are small;
  preferred affinities, pod affinities and the rest of the template are not read.
- `status` whole: conditions, the admission's flavors, requeue counts, past execution time.

A part that is not of the shape the API gives (a spec that is not a map, a pod set that is not
one) is kept as it came, so a reader sees exactly what it would have seen of a whole object.
A reader of any other spec field must add it here: `tests/unit/kube/test_projection.py` holds
every reader to the same answers on the kept and the whole object. Writes never send a cached
Workload back (a boost is a server-side apply of our own annotations; a lane, a move's two
writes included, is a JSON Patch of named paths, guarded by the resourceVersion it was built
from), so nothing cut here can be written over.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

WORKLOAD_SPEC_KEPT = ("queueName", "priority", "priorityClassName", "priorityClassSource", "active")
POD_SET_KEPT = ("name", "count", "minCount")
CONTAINER_KEPT = ("name", "resources")
REQUIRED_AFFINITY = "requiredDuringSchedulingIgnoredDuringExecution"


def _kept_affinity(affinity: Any) -> Any:
    """Of an affinity, only the required node affinity; one not of the API's shape as it came."""
    if not isinstance(affinity, Mapping):
        return affinity
    node = affinity.get("nodeAffinity")
    if not isinstance(node, Mapping):
        return {} if node is None else {"nodeAffinity": node}
    return {"nodeAffinity": {k: node[k] for k in (REQUIRED_AFFINITY,) if k in node}}


def _kept_pod_set(pod_set: Any) -> Any:
    if not isinstance(pod_set, Mapping):
        return pod_set
    template = pod_set.get("template")
    template_spec = template.get("spec") if isinstance(template, Mapping) else None
    kept = {k: pod_set[k] for k in POD_SET_KEPT if k in pod_set}
    if not isinstance(template_spec, Mapping):
        if "template" in pod_set:
            kept["template"] = template
        return kept
    containers = template_spec.get("containers")
    if isinstance(containers, list):
        containers = [
            {k: c[k] for k in CONTAINER_KEPT if k in c} if isinstance(c, Mapping) else c
            for c in containers
        ]
    spec: dict[str, Any] = {} if containers is None else {"containers": containers}
    if "nodeSelector" in template_spec:
        spec["nodeSelector"] = template_spec["nodeSelector"]
    if "affinity" in template_spec:
        spec["affinity"] = _kept_affinity(template_spec["affinity"])
    kept["template"] = {"spec": spec}
    return kept


def workload_as_kept(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The Workload with its spec cut to what a pass reads; a new dict, `obj` untouched."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return dict(obj)
    kept: dict[str, Any] = {k: spec[k] for k in WORKLOAD_SPEC_KEPT if k in spec}
    pod_sets = spec.get("podSets")
    if pod_sets is not None:
        kept["podSets"] = (
            [_kept_pod_set(p) for p in pod_sets] if isinstance(pod_sets, list) else pod_sets
        )
    return {**obj, "spec": kept}
