"""A lane written onto its Workload: the JSON Patch that puts a pending Workload on a capacity type.

The plan decides which pending deadline workloads go to on-demand (`controller.decide.lanes`);
this builds the one write that carries a lane out. Kueue 0.19.2 takes a change of a pending
Workload's `spec.podSets[*].template.spec.nodeSelector`, admits it on the flavor whose node
labels match, and writes the selector to the Job; patching the Job's template does not reach a
Workload that already exists (tried on a real kube-apiserver with Kueue 0.19.2). Its webhook refuses
pod-set changes once quota is reserved, and by then the flavor is chosen: a lane is written only
to a Workload with no quota reserved, and never taken off one.

Why a JSON Patch rather than a server-side apply like the boosts: the change is inside pod
sets Kueue owns, and an apply would make us a co-owner of whatever list item it names. A JSON
Patch names exactly the paths it sets, and it opens with a `test` of the resourceVersion it was
built from, so it is all or nothing against that very object: a node selector map added since
we read it is not replaced by ours, and a Workload that had quota reserved meanwhile is not
touched (the test fails with 422, or the write loses a race with 409; the next pass reads the
new version and decides again). The cache keeps each template's node selector and required
node affinity (`controller.kube.projection`), so a patch built from it sees what it writes to.

A Workload whose owner chose a capacity type (a node selector or a required node affinity on
`karpenter.sh/capacity-type`, without our lane annotation) is never touched: this is stricter
than the plan's test (`WorkloadView.owner_chose_capacity`, which reads only a selection of one
value), because a node selector added beside an affinity the owner wrote could make the pods
unschedulable. Pure: a Workload as read in, a list of operations out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller import names
from controller.decide.lanes import Lane

REASON_LIMIT = 256
"""Characters of a lane's reason kept in its annotation: a reason is one sentence of figures
(some 120 characters); an annotation of kilobytes on every Workload would only cost watch
traffic."""
QUOTA_CONDITIONS = ("QuotaReserved", "Admitted")
REQUIRED_AFFINITY = "requiredDuringSchedulingIgnoredDuringExecution"


def escape(token: str) -> str:
    """A JSON Pointer reference token (RFC 6901): `~` as `~0`, then `/` as `~1`."""
    return token.replace("~", "~0").replace("/", "~1")


def lane_reason(reason: str) -> str:
    """The reason as its annotation holds it: whole when short, else cut with an ellipsis."""
    if len(reason) <= REASON_LIMIT:
        return reason
    return reason[: REASON_LIMIT - 3].rstrip() + "..."


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _true(status: Mapping[str, Any], type_: str) -> bool:
    conditions = status.get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping) and c.get("type") == type_ and c.get("status") == "True"
        for c in conditions
    )


def quota_reserved(workload: Mapping[str, Any]) -> bool:
    """Kueue reserved quota for it (an admission, or QuotaReserved or Admitted True): its pod
    sets are fixed from then on, and Kueue's webhook refuses a change of them."""
    status = _map(workload.get("status"))
    return bool(status.get("admission")) or any(_true(status, t) for t in QUOTA_CONDITIONS)


def finished(workload: Mapping[str, Any]) -> bool:
    return _true(_map(workload.get("status")), "Finished")


def _template_spec(pod_set: Any) -> Mapping[str, Any] | None:
    template = _map(pod_set).get("template")
    spec = template.get("spec") if isinstance(template, Mapping) else None
    return spec if isinstance(spec, Mapping) else None


def _affinity_mentions_capacity_type(spec: Mapping[str, Any]) -> bool:
    """Any required node affinity expression on the capacity type, whatever its operator."""
    required = _map(_map(_map(spec.get("affinity")).get("nodeAffinity")).get(REQUIRED_AFFINITY))
    terms = required.get("nodeSelectorTerms")
    for term in terms if isinstance(terms, list) else []:
        expressions = _map(term).get("matchExpressions")
        for expression in expressions if isinstance(expressions, list) else []:
            if _map(expression).get("key") == names.CAPACITY_TYPE_LABEL:
                return True
    return False


def lane_patch(workload: Mapping[str, Any], lane: Lane) -> list[dict[str, Any]] | None:
    """The JSON Patch that puts `workload` in `lane`, or None when it must not be written (or
    need not be): quota reserved or finished, its owner chose a capacity type, a shape we
    cannot write into safely, no resourceVersion to guard with, or the lane already in place.

    The operations of `lane_operations`, opened with a `test` of the resourceVersion they were
    built from (see the module's docstring).
    """
    version = _map(workload.get("metadata")).get("resourceVersion")
    if not version:
        return None
    ops = lane_operations(workload, lane)
    if ops is None:
        return None
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": str(version)}, *ops]


def lane_operations(workload: Mapping[str, Any], lane: Lane) -> list[dict[str, Any]] | None:
    """The JSON Patch operations that put `workload` in `lane`, unguarded, or None when it must
    not be written (or need not be): quota reserved or finished, its owner chose a capacity
    type, a shape we cannot write into safely, or the lane already in place. The admission
    webhook (`controller.reconcile.admission`) sends them as they are: a Workload being
    created has no version to test, and the API server applies them to that very object.

    Every pod set's node selector gets the lane's capacity type (Kueue admits a Workload on one
    flavor per resource, so a lane that left one pod set on spot would hold back the rest);
    the annotations record the lane and why, so that `explain`, the Events and the next pass
    know it is ours.
    """
    if quota_reserved(workload) or finished(workload):
        return None
    meta = _map(workload.get("metadata"))
    pod_sets = _map(workload.get("spec")).get("podSets")
    if not isinstance(pod_sets, list) or not pod_sets:
        return None
    annotations = meta.get("annotations")
    ours = _map(annotations).get(names.ANNOTATION_LANE) in names.CAPACITY_TYPES
    specs = [_template_spec(p) for p in pod_sets]
    selectors: list[Any] = []
    for spec in specs:
        if spec is None:
            return None
        selector = spec.get("nodeSelector")
        if selector is not None and not isinstance(selector, Mapping):
            return None
        if not ours and (
            names.CAPACITY_TYPE_LABEL in _map(selector) or _affinity_mentions_capacity_type(spec)
        ):
            return None  # its owner chose
        selectors.append(selector)
    label = names.CAPACITY_TYPE_LABEL
    reason = lane_reason(lane.reason)
    in_place = all(_map(s).get(label) == lane.capacity_type for s in selectors)
    if in_place and _map(annotations).get(names.ANNOTATION_LANE) == lane.capacity_type:
        return None
    ops: list[dict[str, Any]] = []
    for index, selector in enumerate(selectors):
        path = f"/spec/podSets/{index}/template/spec/nodeSelector"
        if selector is None:
            ops.append({"op": "add", "path": path, "value": {label: lane.capacity_type}})
        else:
            ops.append(
                {"op": "add", "path": f"{path}/{escape(label)}", "value": lane.capacity_type}
            )
    wanted = {names.ANNOTATION_LANE: lane.capacity_type, names.ANNOTATION_LANE_REASON: reason}
    if isinstance(annotations, Mapping):
        ops.extend(
            {"op": "add", "path": f"/metadata/annotations/{escape(key)}", "value": value}
            for key, value in wanted.items()
        )
    else:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": wanted})
    return ops


__all__ = [
    "escape",
    "finished",
    "lane_operations",
    "lane_patch",
    "lane_reason",
    "quota_reserved",
]
