"""A lane written onto its Workload: the JSON Patches that put a Workload on a capacity type.

The plan decides which deadline workloads go to on-demand (`controller.decide.lanes`); this
builds the writes that carry a lane out. Kueue 0.19.2 takes a change of a pending Workload's
`spec.podSets[*].template.spec.nodeSelector`, admits it on the flavor whose node labels match,
and writes the selector to the Job; patching the Job's template does not reach a Workload that
already exists (tried on a real kube-apiserver with Kueue 0.19.2). Its webhook refuses pod-set
changes once quota is reserved, and by then the flavor is chosen: a pending lane
(`lane_patch`) is written only to a Workload with no quota reserved, and never taken off one.

A workload admitted on spot whose pods wait for a node its deadline cannot wait for (a lane
with `move`) is moved in two writes, since its pod sets cannot change while Kueue holds its
quota, and deleting the Workload would not help: Kueue makes it again from the Job's template,
which a lane does not reach. Deactivation is how a Workload gives its quota back with its Job
kept:
1. `move_patch` sets `spec.active` false and adds `names.ANNOTATION_MOVING_TO` (the lane it
   goes to) with the lane annotations. Kueue evicts it (InactiveWorkload), takes back its spot
   quota and suspends the Job.
2. `reactivation_patch`, on a later pass, once Kueue holds no quota for it: the lane's node
   selector in every pod set, `spec.active` true and the moving-to annotation removed. It is
   written to every inactive Workload carrying that annotation, whatever the plan says by then:
   nothing this controller stopped stays stopped. When the pod sets are of a shape a selector
   cannot be written into safely, it is activated again without one. An inactive Workload
   without our annotation was stopped by someone else and is never touched.

Why a JSON Patch rather than a server-side apply like the boosts: the change is inside pod
sets Kueue owns, and an apply would make us a co-owner of whatever list item it names. A JSON
Patch names exactly the paths it sets, and it opens with a `test` of the resourceVersion it was
built from, so it is all or nothing against that very object: a node selector map added since
we read it is not replaced by ours, and a Workload that had quota reserved (or was admitted,
or had its pods become ready) meanwhile is not touched (the test fails with 422, or the write
loses a race with 409; the next pass reads the new version and decides again). The cache keeps
each template's node selector and required node affinity and `spec.active`
(`controller.kube.projection`), so a patch built from it sees what it writes to.

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


def _version_test(workload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `test` a guarded patch opens with, or None when there is no version to test."""
    version = _map(workload.get("metadata")).get("resourceVersion")
    if not version:
        return None
    return {"op": "test", "path": "/metadata/resourceVersion", "value": str(version)}


def lane_patch(workload: Mapping[str, Any], lane: Lane) -> list[dict[str, Any]] | None:
    """The JSON Patch that puts `workload` in `lane`, or None when it must not be written (or
    need not be): quota reserved or finished, its owner chose a capacity type, a shape we
    cannot write into safely, inactive or being moved, no resourceVersion to guard with, or
    the lane already in place.

    The operations of `lane_operations`, opened with a `test` of the resourceVersion they were
    built from (see the module's docstring).
    """
    test = _version_test(workload)
    if test is None:
        return None
    ops = lane_operations(workload, lane)
    if ops is None:
        return None
    return [test, *ops]


def _selectors(workload: Mapping[str, Any]) -> list[Any] | None:
    """Each pod set's node selector (None where it has none), or None when no selector may be
    written: no pod sets, a shape we cannot write into safely, or its owner chose a capacity
    type (a selection on it without our lane annotation)."""
    pod_sets = _map(workload.get("spec")).get("podSets")
    if not isinstance(pod_sets, list) or not pod_sets:
        return None
    annotations = _map(_map(workload.get("metadata")).get("annotations"))
    ours = annotations.get(names.ANNOTATION_LANE) in names.CAPACITY_TYPES
    selectors: list[Any] = []
    for pod_set in pod_sets:
        spec = _template_spec(pod_set)
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
    return selectors


def _selector_ops(selectors: list[Any], capacity_type: str) -> list[dict[str, Any]]:
    """The capacity type into every pod set's node selector: the key added to a map there is,
    a map added where there is none (a JSON Patch cannot add a key to a map that is missing)."""
    label = names.CAPACITY_TYPE_LABEL
    ops: list[dict[str, Any]] = []
    for index, selector in enumerate(selectors):
        path = f"/spec/podSets/{index}/template/spec/nodeSelector"
        if selector is None:
            ops.append({"op": "add", "path": path, "value": {label: capacity_type}})
        else:
            ops.append({"op": "add", "path": f"{path}/{escape(label)}", "value": capacity_type})
    return ops


def _annotation_ops(annotations: Any, wanted: Mapping[str, str]) -> list[dict[str, Any]]:
    """Our annotations added: each key into the map there is, or the map where there is none."""
    if isinstance(annotations, Mapping):
        return [
            {"op": "add", "path": f"/metadata/annotations/{escape(key)}", "value": value}
            for key, value in wanted.items()
        ]
    return [{"op": "add", "path": "/metadata/annotations", "value": dict(wanted)}]


def _lane_selectors(workload: Mapping[str, Any]) -> list[Any] | None:
    """The pod sets' node selectors of a Workload a lane may be written to: active (one
    stopped by someone else is never touched), not being moved (its reactivation writes its
    lane), and of a shape we can write into; None otherwise."""
    if inactive(workload) or moving_to(workload) is not None:
        return None
    return _selectors(workload)


def _in_lane(selectors: list[Any], capacity_type: str) -> bool:
    """Every pod set already selects the capacity type."""
    return all(_map(s).get(names.CAPACITY_TYPE_LABEL) == capacity_type for s in selectors)


def lane_operations(workload: Mapping[str, Any], lane: Lane) -> list[dict[str, Any]] | None:
    """The JSON Patch operations that put `workload` in `lane`, unguarded, or None when it must
    not be written (or need not be): quota reserved or finished, its owner chose a capacity
    type, a shape we cannot write into safely, inactive (stopped by someone else, or by our
    move, whose reactivation writes the lane), being moved, or the lane already in place. The
    admission webhook (`controller.reconcile.admission`) sends them as they are: a Workload
    being created has no version to test, and the API server applies them to that very object.

    Every pod set's node selector gets the lane's capacity type (Kueue admits a Workload on one
    flavor per resource, so a lane that left one pod set on spot would hold back the rest);
    the annotations record the lane and why, so that `explain`, the Events and the next pass
    know it is ours.
    """
    if quota_reserved(workload) or finished(workload):
        return None
    selectors = _lane_selectors(workload)
    if selectors is None:
        return None
    annotations = _map(workload.get("metadata")).get("annotations")
    in_place = _in_lane(selectors, lane.capacity_type)
    if in_place and _map(annotations).get(names.ANNOTATION_LANE) == lane.capacity_type:
        return None
    wanted = {
        names.ANNOTATION_LANE: lane.capacity_type,
        names.ANNOTATION_LANE_REASON: lane_reason(lane.reason),
    }
    return [*_selector_ops(selectors, lane.capacity_type), *_annotation_ops(annotations, wanted)]


def moving_to(workload: Mapping[str, Any]) -> str | None:
    """The lane our move is taking it to (`names.ANNOTATION_MOVING_TO`), None when not moved."""
    value = _map(_map(workload.get("metadata")).get("annotations")).get(names.ANNOTATION_MOVING_TO)
    return None if value is None else str(value)


def inactive(workload: Mapping[str, Any]) -> bool:
    """`spec.active` is false: Kueue holds it (and evicts it if admitted). Absent is active."""
    return _map(workload.get("spec")).get("active") is False


def pods_waiting(workload: Mapping[str, Any]) -> bool:
    """Kueue says its pods are not all ready (PodsReady False). A Workload without the
    condition (Kueue keeps it only with `waitForPodsReady` on) says nothing: not waiting."""
    conditions = _map(workload.get("status")).get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping) and c.get("type") == "PodsReady" and c.get("status") == "False"
        for c in conditions
    )


def move_patch(workload: Mapping[str, Any], lane: Lane) -> list[dict[str, Any]] | None:
    """The first of a move's two writes (see the module's docstring): `spec.active` false, our
    moving-to annotation naming the lane, and the lane annotations, guarded by the
    resourceVersion. None when it must not be written: no quota reserved (a pending Workload
    takes its lane by `lane_patch`), finished, its pods ready (running: an eviction would only
    lose work), already inactive (ours or someone else's), already being moved, its owner chose
    a capacity type, a shape its reactivation could not write the lane into, the lane already
    in every pod set (admitted on it), or no resourceVersion to guard with.
    """
    test = _version_test(workload)
    if test is None:
        return None
    if not quota_reserved(workload) or finished(workload) or not pods_waiting(workload):
        return None
    selectors = _lane_selectors(workload)
    if selectors is None or _in_lane(selectors, lane.capacity_type):
        return None
    wanted = {
        names.ANNOTATION_MOVING_TO: lane.capacity_type,
        names.ANNOTATION_LANE: lane.capacity_type,
        names.ANNOTATION_LANE_REASON: lane_reason(lane.reason),
    }
    annotations = _map(workload.get("metadata")).get("annotations")
    return [
        test,
        {"op": "add", "path": "/spec/active", "value": False},
        *_annotation_ops(annotations, wanted),
    ]


def reactivation_patch(
    workload: Mapping[str, Any], *, with_lane: bool = True
) -> list[dict[str, Any]] | None:
    """The second of a move's two writes (see the module's docstring): the lane named by our
    moving-to annotation into every pod set's node selector, `spec.active` true and the
    annotation removed, guarded by the resourceVersion. None unless the Workload carries our
    annotation, is inactive, has no quota reserved (Kueue has not evicted it yet) and is not
    finished, or without a resourceVersion to guard with.

    When no selector may be written (a shape we cannot write into safely, an unknown lane, its
    owner chose a capacity type meanwhile), or `with_lane` is false (the server refused the
    patch with the lane at this very version), it is activated again without one: nothing this
    controller stopped stays stopped. The lane annotation is added if it went missing, so the
    selector written stays known as ours.

    One that carries the annotation but is active again (someone else activated it) has only
    the annotation removed: the move is over, and the lanes treat it as any other from then
    on (while the annotation stays, no lane is written to it).
    """
    test = _version_test(workload)
    lane = moving_to(workload)
    if test is None or lane is None or finished(workload):
        return None
    unmark = {"op": "remove", "path": f"/metadata/annotations/{escape(names.ANNOTATION_MOVING_TO)}"}
    if not inactive(workload):
        return [test, unmark]
    if quota_reserved(workload):
        return None
    ops: list[dict[str, Any]] = [test]
    selectors = _selectors(workload) if with_lane and lane in names.CAPACITY_TYPES else None
    annotations = _map(workload.get("metadata")).get("annotations")
    if selectors is not None:
        ops.extend(_selector_ops(selectors, lane))
        if _map(annotations).get(names.ANNOTATION_LANE) != lane:
            ops.extend(_annotation_ops(annotations, {names.ANNOTATION_LANE: lane}))
    ops.append({"op": "replace", "path": "/spec/active", "value": True})
    ops.append(unmark)
    return ops


__all__ = [
    "escape",
    "finished",
    "inactive",
    "lane_operations",
    "lane_patch",
    "lane_reason",
    "move_patch",
    "moving_to",
    "pods_waiting",
    "quota_reserved",
    "reactivation_patch",
]
