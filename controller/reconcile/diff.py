"""What must change in the cluster: desired objects against live ones, as a plan.

Pure functions, shared by the reconciler (which carries the plan out) and `quartermaster plan`
(which prints it). An object needs an apply when either
- the desired object differs from the one we last applied (kept in an annotation), which catches
  fields the policy dropped: server-side apply then removes them; or
- a field we set has another value in the live object, which catches someone else's edit of a
  field we own: we take it back.
Fields we do not set are never compared, so other controllers' fields and server defaults
cause no writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller import names

KubeObject = dict[str, Any]
Ref = tuple[str, str, str]
"""(kind, namespace or "", name): an object's identity within one API group family."""


def ref(obj: Mapping[str, Any]) -> Ref:
    meta = obj["metadata"]
    return str(obj["kind"]), str(meta.get("namespace") or ""), str(meta["name"])


def show_ref(r: Ref) -> str:
    kind, namespace, name = r
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def with_last_applied(desired: KubeObject) -> KubeObject:
    """The object as applied: carrying its own canonical JSON in an annotation."""
    meta = dict(desired["metadata"])
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        names.ANNOTATION_LAST_APPLIED: canonical(desired),
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


def is_subset(want: Any, have: Any) -> bool:
    """Every field in `want` has the same value in `have` (lists compared item by item)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(
            k in have and is_subset(v, have[k]) for k, v in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(want) == len(have)
            and all(is_subset(w, h) for w, h in zip(want, have, strict=True))
        )
    return _same(want, have)


def _same(a: Any, b: Any) -> bool:
    """Scalar equality as JSON sees it: 1 == 1.0, but true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def needs_apply(desired: KubeObject, live: Mapping[str, Any]) -> bool:
    return last_applied(live) != desired or not is_subset(desired, live)


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list) and value:
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]")
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


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


_ABSENT: Any = _Absent()


def field_changes(desired: KubeObject, live: Mapping[str, Any]) -> tuple[FieldChange, ...]:
    """The fields an apply would change: set or changed by us, or dropped since last applied."""
    live_leaves = dict(_leaves(live))
    desired_leaves = dict(_leaves(desired))
    changes = [
        FieldChange(path, live_leaves.get(path, _ABSENT), value)
        for path, value in desired_leaves.items()
        if not _same(live_leaves.get(path, _ABSENT), value)
    ]
    previous = last_applied(live) or {}
    changes.extend(
        FieldChange(path, live_leaves.get(path, _ABSENT), _ABSENT)
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

    @property
    def empty(self) -> bool:
        return not (self.creates or self.updates or self.prunes)

    def summary(self) -> str:
        return (
            f"{len(self.creates)} to create, {len(self.updates)} to update, "
            f"{len(self.prunes)} to prune, {len(self.kept)} kept"
        )


def make_plan(
    desired: Sequence[KubeObject],
    live: Sequence[KubeObject],
    *,
    protected: Mapping[Ref, tuple[str, str]] | None = None,
) -> Plan:
    """Compare desired objects with the live objects we manage.

    `live` holds only objects carrying our managed-by label. `protected` maps objects that must
    not be pruned to (reason, message). Creates and updates keep the desired order; prunes come
    in reverse, so queues go before the flavors and cohorts they name.
    """
    live_by_ref = {ref(obj): obj for obj in live}
    desired_refs = {ref(obj) for obj in desired}
    creates: list[KubeObject] = []
    updates: list[Update] = []
    for obj in desired:
        current = live_by_ref.get(ref(obj))
        if current is None:
            creates.append(obj)
        elif needs_apply(obj, current):
            updates.append(Update(obj, current, field_changes(obj, current)))
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
    return Plan(tuple(creates), tuple(updates), tuple(prunes), tuple(kept))


def format_plan(plan: Plan, *, unserved: Sequence[str] = ()) -> str:
    """The plan as `quartermaster plan` prints it, one object per line, changes indented."""
    lines = [f"+ create {show_ref(ref(obj))}" for obj in plan.creates]
    for update in plan.updates:
        lines.append(f"~ update {show_ref(ref(update.desired))}")
        lines.extend(f"    {change}" for change in update.changes)
    lines.extend(f"- prune  {show_ref(ref(obj))}" for obj in plan.prunes)
    lines.extend(f"! keep   {show_ref(ref(k.live))}: {k.reason}: {k.message}" for k in plan.kept)
    lines.extend(f"? not served by the cluster, skipped: {kind}" for kind in unserved)
    lines.append(
        "No changes: the cluster matches the policy." if plan.empty else f"Plan: {plan.summary()}."
    )
    return "\n".join(lines) + "\n"
