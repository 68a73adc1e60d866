"""What must change in the cluster: desired objects against live ones, as a plan.

Pure functions, shared by the reconciler (which carries the plan out) and `quartermaster plan`
(which prints it). An object needs an apply when either
- the desired object differs from the one we last applied (kept in an annotation), which catches
  fields the policy dropped: server-side apply then removes them; or
- a field we set has another value in the live object, which catches someone else's edit of a
  field we own: we take it back.
Fields we do not set are never compared, so other controllers' fields and server defaults
cause no writes. Both sides are compared in the form the API server stores (`stored.py`):
quantities by value, omitted and defaulted fields as the value they stand for.

Some fields are ours only at creation (`CREATE_ONLY`): the warm-pool Deployment's `replicas`
starts at the pool's minimum, then belongs to KEDA. Server-side apply would reset it on every
apply that names it, and an apply that stops naming a field its manager alone owns removes it
(the server then defaults `replicas` to 1). So the create names it, and a second apply under
`names.INITIAL_FIELD_MANAGER` then shares it (Kubernetes' documented hand-over to an
autoscaler); every later apply, every comparison and the last-applied annotation leave it out.
Whoever scales the Deployment next takes it over. A live object whose create-only field is
still ours alone (the pass stopped between the create and the hand-over) is handed over then.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller import names
from controller.reconcile.stored import stored_form

KubeObject = dict[str, Any]
Ref = tuple[str, str, str]
"""(kind, namespace or "", name): an object's identity within one API group family."""


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


_ABSENT: Any = _Absent()


def ref(obj: Mapping[str, Any]) -> Ref:
    meta = obj["metadata"]
    return str(obj["kind"]), str(meta.get("namespace") or ""), str(meta["name"])


def show_ref(r: Ref) -> str:
    kind, namespace, name = r
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


def canonical(obj: Any) -> str:
    """Compact JSON with sorted keys; a quantity compared by value prints as its canonical form."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


CREATE_ONLY: Mapping[str, tuple[tuple[str, ...], ...]] = {
    "Deployment": (("spec", "replicas"),),
}
"""Fields set when an object is created and left to others afterwards, by kind."""


def update_form(desired: Mapping[str, Any]) -> KubeObject:
    """`desired` without its create-only fields: what every apply after the create sends."""
    out = dict(desired)
    for path in CREATE_ONLY.get(str(desired.get("kind", "")), ()):
        out = _without(out, path)
    return out


def _without(value: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    head, rest = path[0], path[1:]
    if head not in value:
        return value
    if not rest:
        return {k: v for k, v in value.items() if k != head}
    child = value[head]
    return {**value, head: _without(child, rest)} if isinstance(child, dict) else value


def _get(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return _ABSENT
        value = value[key]
    return value


def hand_over(
    obj: Mapping[str, Any], paths: Sequence[tuple[str, ...]] | None = None
) -> KubeObject | None:
    """The apply that shares `obj`'s create-only fields (or those of `paths`) at their values
    in `obj`; None when it has none."""
    wanted = CREATE_ONLY.get(str(obj.get("kind", "")), ()) if paths is None else paths
    present = [p for p in wanted if _get(obj, p) is not _ABSENT]
    if not present:
        return None
    meta = obj["metadata"]
    body: KubeObject = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {k: meta[k] for k in ("name", "namespace") if k in meta},
    }
    for path in present:
        target = body
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = _get(obj, path)
    return body


def _owners(live: Mapping[str, Any], path: tuple[str, ...]) -> set[tuple[str, str]]:
    """(manager, operation) of every managedFields entry that owns `path`."""
    owners = set()
    for entry in live.get("metadata", {}).get("managedFields") or []:
        fields = entry.get("fieldsV1") or {}
        if _get(fields, tuple(f"f:{key}" for key in path)) is not _ABSENT:
            owners.add((str(entry.get("manager", "")), str(entry.get("operation", ""))))
    return owners


def pending_hand_over(live: Mapping[str, Any]) -> KubeObject | None:
    """The hand-over a live object still needs: the create-only fields that our applies alone
    own (so our next apply would remove them), at their live values."""
    ours = {(names.FIELD_MANAGER, "Apply")}
    paths = [
        p
        for p in CREATE_ONLY.get(str(live.get("kind", "")), ())
        if _get(live, p) is not _ABSENT and _owners(live, p) == ours
    ]
    return hand_over(live, paths) if paths else None


def with_last_applied(desired: KubeObject) -> KubeObject:
    """The object as applied: carrying the canonical JSON of its update form in an annotation.

    A create sends its create-only fields too, but the annotation records what later applies
    send, so the pass after a create finds nothing to do.
    """
    meta = dict(desired["metadata"])
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        names.ANNOTATION_LAST_APPLIED: canonical(update_form(desired)),
    }
    return {**desired, "metadata": meta}


def last_applied(live: Mapping[str, Any]) -> KubeObject | None:
    text = (live.get("metadata", {}).get("annotations") or {}).get(names.ANNOTATION_LAST_APPLIED)
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _empty(value: Any) -> bool:
    """An empty map or list: what `omitempty` leaves out, so it matches an absent field."""
    return isinstance(value, dict | list) and not value


def is_subset(want: Any, have: Any) -> bool:
    """Every field in `want` has the same value in `have` (lists compared item by item); an
    empty map or list in `want` also matches an absent field."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(
            is_subset(v, have[k]) if k in have else _empty(v) for k, v in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(want) == len(have)
            and all(is_subset(w, h) for w, h in zip(want, have, strict=True))
        )
    return _same(want, have)


def _same(a: Any, b: Any) -> bool:
    """Scalar equality as JSON sees it: 1 == 1.0, but true is not 1; quantities by value."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def needs_apply(desired: KubeObject, live: Mapping[str, Any]) -> bool:
    """Whether `desired` (an update form) must be applied over `live`."""
    return last_applied(live) != desired or not is_subset(stored_form(desired), stored_form(live))


def list_keys(items: Sequence[Any]) -> list[str]:
    """How `plan` and the log name each item of a list: by its `name` where every item has a
    distinct one that cannot be read as an index (`resources[cpu]`, `flavors[a100-spot]`: the
    list-map key Kubernetes merges these lists by), else by position (`resourceGroups[0]`).

    By name, an item keeps its path when one is inserted before it, so the change shown is the
    field that changed, not every field after it."""
    names = [item.get("name") if isinstance(item, Mapping) else None for item in items]
    if all(isinstance(n, str) and n and not n.isdigit() for n in names) and len(set(names)) == len(
        names
    ):
        return [str(n) for n in names]
    return [str(i) for i in range(len(items))]


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list) and value:
        for key, item in zip(list_keys(value), value, strict=True):
            yield from _leaves(item, f"{path}[{key}]")
    else:
        yield path, value


@dataclass(frozen=True)
class FieldChange:
    path: str
    old: Any
    new: Any

    def __str__(self) -> str:
        def fmt(v: Any) -> str:
            return "(absent)" if v is _ABSENT else canonical(v)

        return f"{self.path}: {fmt(self.old)} -> {fmt(self.new)}"


def field_changes(desired: KubeObject, live: Mapping[str, Any]) -> tuple[FieldChange, ...]:
    """The fields an apply would change: set or changed by us, or dropped since last applied.

    Compared in the stored form; shown as written on each side (`"8"` live, `8` desired).
    """
    raw_live = dict(_leaves(live))
    raw_desired = dict(_leaves(desired))
    live_leaves = dict(_leaves(stored_form(live)))
    desired_leaves = dict(_leaves(stored_form(desired)))
    changes = [
        FieldChange(path, raw_live.get(path, _ABSENT), raw_desired.get(path, value))
        for path, value in desired_leaves.items()
        if not _same(live_leaves.get(path, _ABSENT), value)
        and not (path not in live_leaves and _empty(value))
    ]
    previous = stored_form(last_applied(live) or {})
    changes.extend(
        FieldChange(path, raw_live.get(path, live_leaves[path]), _ABSENT)
        for path, _ in _leaves(previous)
        if path not in desired_leaves and path in live_leaves
    )
    return tuple(changes)


@dataclass(frozen=True)
class Update:
    desired: KubeObject
    live: KubeObject
    changes: tuple[FieldChange, ...]


@dataclass(frozen=True)
class Kept:
    """A live object we would prune but must not, and why."""

    live: KubeObject
    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    creates: tuple[KubeObject, ...]
    updates: tuple[Update, ...]
    prunes: tuple[KubeObject, ...]
    kept: tuple[Kept, ...]
    hand_overs: tuple[KubeObject, ...] = ()
    """Applies under `names.INITIAL_FIELD_MANAGER` sharing create-only fields: one after each
    create that has them, and one for each live object whose create-only fields are ours alone.
    """

    @property
    def empty(self) -> bool:
        return not (self.creates or self.updates or self.prunes or self.hand_overs)

    @property
    def live_hand_overs(self) -> tuple[KubeObject, ...]:
        """Hand-overs of objects that already exist (not part of a create in this plan)."""
        created = {ref(obj) for obj in self.creates}
        return tuple(h for h in self.hand_overs if ref(h) not in created)

    def summary(self) -> str:
        text = (
            f"{len(self.creates)} to create, {len(self.updates)} to update, "
            f"{len(self.prunes)} to prune, {len(self.kept)} kept"
        )
        if self.live_hand_overs:
            text += f", {len(self.live_hand_overs)} to hand over"
        return text


def rendered_needs_apply(obj: KubeObject, live: Mapping[str, Any]) -> bool:
    """Whether the rendered `obj` must be applied over `live` (in its update form)."""
    return needs_apply(update_form(obj), live)


def make_plan(
    desired: Sequence[KubeObject],
    live: Sequence[KubeObject],
    *,
    protected: Mapping[Ref, tuple[str, str]] | None = None,
    differs: Callable[[KubeObject, Mapping[str, Any]], bool] = rendered_needs_apply,
) -> Plan:
    """Compare desired objects with the live objects we manage.

    `live` holds only objects carrying our managed-by label. `protected` maps objects that must
    not be pruned to (reason, message). Creates and updates keep the desired order; prunes come
    in reverse, so queues go before the flavors and cohorts they name. Creates carry their
    create-only fields; updates never do. `differs` is `rendered_needs_apply`, or one that
    remembers its answers for objects that did not change (the controller's).
    """
    live_by_ref = {ref(obj): obj for obj in live}
    desired_refs = {ref(obj) for obj in desired}
    creates: list[KubeObject] = []
    updates: list[Update] = []
    hand_overs: list[KubeObject] = []
    for obj in desired:
        current = live_by_ref.get(ref(obj))
        if current is None:
            creates.append(obj)
            handed = hand_over(obj)
        else:
            if differs(obj, current):
                wanted = update_form(obj)
                updates.append(Update(wanted, current, field_changes(wanted, current)))
            handed = pending_hand_over(current)
        if handed is not None:
            hand_overs.append(handed)
    prunes: list[KubeObject] = []
    kept: list[Kept] = []
    for r, obj in live_by_ref.items():
        if r in desired_refs:
            continue
        if protected and r in protected:
            reason, message = protected[r]
            kept.append(Kept(obj, reason, message))
        else:
            prunes.append(obj)
    order = {r: i for i, r in enumerate(live_by_ref)}
    prunes.sort(key=lambda o: order[ref(o)], reverse=True)
    return Plan(tuple(creates), tuple(updates), tuple(prunes), tuple(kept), tuple(hand_overs))


def _without_identity(obj: Mapping[str, Any]) -> KubeObject:
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}


def format_plan(plan: Plan, *, unserved: Sequence[str] = ()) -> str:
    """The plan as `quartermaster plan` prints it, one object per line, changes indented."""
    lines = [f"+ create {show_ref(ref(obj))}" for obj in plan.creates]
    for update in plan.updates:
        lines.append(f"~ update {show_ref(ref(update.desired))}")
        lines.extend(f"    {change}" for change in update.changes)
    for handed in plan.live_hand_overs:
        fields = ", ".join(path for path, _ in _leaves(_without_identity(handed)))
        lines.append(
            f"> hand over {show_ref(ref(handed))}: {fields} to {names.INITIAL_FIELD_MANAGER}"
        )
    lines.extend(f"- prune  {show_ref(ref(obj))}" for obj in plan.prunes)
    lines.extend(f"! keep   {show_ref(ref(k.live))}: {k.reason}: {k.message}" for k in plan.kept)
    lines.extend(f"? not served by the cluster, skipped: {kind}" for kind in unserved)
    lines.append(
        "No changes: the cluster matches the policy." if plan.empty else f"Plan: {plan.summary()}."
    )
    return "\n".join(lines) + "\n"
