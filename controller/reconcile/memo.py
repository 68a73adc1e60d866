"""Results derived from one object, kept across passes while the object does not change.

A pass re-derives everything from its snapshot, but most objects are the same as last pass:
at 10,000 Workloads, parsing each one again costs more than the decision it feeds. The API
server gives every version of an object its own `resourceVersion`, so a result derived from
(namespace, name, resourceVersion) stays true until the object changes; an object without one
(a test's hand-made snapshot) is derived afresh each time. Entries of objects a pass did not
see are dropped at the end of it, so the memo holds what the cluster holds and no more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

C = TypeVar("C")
T = TypeVar("T")

Key = tuple[str, str]


class VersionMemo(Generic[C, T]):
    """One value derived from an object and a context (what else the derivation reads, e.g.
    the policy's GPU resource names), recomputed when either changes."""

    def __init__(self, derive: Callable[[Mapping[str, Any], C], T]) -> None:
        self._derive = derive
        self._kept: dict[Key, tuple[str, C, T]] = {}
        self._seen: dict[Key, tuple[str, C, T]] = {}

    def __call__(self, obj: Mapping[str, Any], context: C) -> T:
        meta = obj.get("metadata") or {}
        version = meta.get("resourceVersion")
        if not version:
            return self._derive(obj, context)
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        kept = self._kept.get(key)
        if kept is None or kept[0] != version or kept[1] != context:
            kept = (str(version), context, self._derive(obj, context))
        self._seen[key] = kept
        return kept[2]

    def end_pass(self) -> None:
        """Keep only what this pass asked for: objects gone from the cluster are forgotten."""
        self._kept, self._seen = self._seen, {}

    def __len__(self) -> int:
        return len(self._kept)


class DiffMemo:
    """Whether a rendered object must be applied over its live object, remembered per pair.

    The answer depends only on the two: the rendered object (the very same one when the plan
    stood, see `plan_holds`) and the live one's resourceVersion. Comparing 3,000 objects in
    their stored form is most of a pass in which nothing changed; with this it is a lookup.
    """

    def __init__(self, differs: Callable[[dict[str, Any], Mapping[str, Any]], bool]) -> None:
        self._differs = differs
        self._kept: dict[tuple[str, str, str], tuple[dict[str, Any], str, bool]] = {}
        self._seen: dict[tuple[str, str, str], tuple[dict[str, Any], str, bool]] = {}

    def __call__(self, rendered: dict[str, Any], live: Mapping[str, Any]) -> bool:
        meta = live.get("metadata") or {}
        version = str(meta.get("resourceVersion") or "")
        if not version:
            return self._differs(rendered, live)
        key = (str(live.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))
        kept = self._kept.get(key)
        if kept is None or kept[0] is not rendered or kept[1] != version:
            # The entry holds the rendered object itself, so its identity stays its own.
            kept = (rendered, version, self._differs(rendered, live))
        self._seen[key] = kept
        return kept[2]

    def end_pass(self) -> None:
        self._kept, self._seen = self._seen, {}


class LastResult(Generic[T]):
    """The last result of one derivation over a whole collection, and the inputs it came from.

    Asked again with equal inputs it answers without deriving. The cache hands the very same
    objects for what did not change, so comparing two snapshots' tuples is mostly pointer
    checks; a changed object costs one comparison and a new derivation.
    """

    def __init__(self, derive: Callable[..., T]) -> None:
        self._derive = derive
        self._last: tuple[tuple[Any, ...], T] | None = None

    def __call__(self, *inputs: Any) -> T:
        if self._last is not None and self._last[0] == inputs:
            return self._last[1]
        value = self._derive(*inputs)
        self._last = (inputs, value)
        return value


__all__ = ["DiffMemo", "LastResult", "VersionMemo"]
