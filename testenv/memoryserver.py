"""An in-memory stand-in for the API server, for passes measured or checked without one.

A fake, said so wherever it is used: it keeps each object as applied under a new
resourceVersion, a status apart from the rest, a priority boost as an annotation merge, a
lane's JSON Patch (its `test` and `add` operations, the only ones the controller sends), and
hands out snapshots in the controller cache's form. That is all a pass needs from a server to
show what it derives again, what it keeps and what it writes; that a real server accepts the
writes is the integration tests' part.

`core_v1=True` makes it claim core `v1` in its snapshots' discovery and keep what is applied
there (the ConfigMap of what the controller learned, `controller/reconcile/learned_store.py`),
answering `get` for it: the one way this project's tests show a restart that keeps what was
learned, since the test API server serves CRDs only and so no ConfigMaps.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from controller.kube import kinds
from controller.kube.cache import Observed
from controller.kube.client import KubeError

Object = dict[str, Any]


class MemoryServer:
    """Answers the calls a reconcile pass makes: apply (with a status subresource), create,
    delete; `writes` lists every apply as (kind, name)."""

    def __init__(self, *, core_v1: bool = False) -> None:
        self.objects: dict[tuple[str, str, str], Object] = {}
        self.writes: list[tuple[str, str]] = []
        self.core_v1 = core_v1
        self._versions = itertools.count(1)

    def get(self, kind: kinds.Kind, name: str, namespace: str | None = None) -> Object | None:
        """A copy of the object kept; None when there is none, or its kind is not served
        (core `v1` without `core_v1`): the server's 404, as `KubeClient.get` answers it."""
        if kind.group_version == "v1" and not self.core_v1:
            return None
        found = self.objects.get((kind.kind, namespace or "", name))
        return copy.deepcopy(found) if found is not None else None

    def put(self, obj: Object) -> Object:
        """Store `obj` (as a client outside the controller would) under a new version."""
        meta = obj["metadata"]
        meta["resourceVersion"] = str(next(self._versions))
        meta.setdefault("generation", 1)
        self.objects[(obj["kind"], meta.get("namespace") or "", meta["name"])] = obj
        return obj

    def _served(self, kind: kinds.Kind) -> None:
        if kind.group_version == "v1" and not self.core_v1:
            raise KubeError(f"the server could not find the resource {kind.plural}", status=404)

    def apply(
        self, kind: kinds.Kind, obj: Object, *, subresource: str | None = None, **_: Any
    ) -> Object:
        meta = obj["metadata"]
        self._served(kind)
        self.writes.append((kind.kind, meta["name"]))
        current = self.objects.get((kind.kind, meta.get("namespace") or "", meta["name"]))
        if subresource == "status":
            assert current is not None
            new = copy.deepcopy(current)
            new["status"] = copy.deepcopy(obj["status"])
        elif kind == kinds.WORKLOAD and current is not None:
            new = copy.deepcopy(current)  # a priority boost: annotations only
            new["metadata"].setdefault("annotations", {}).update(obj["metadata"]["annotations"])
        else:
            new = copy.deepcopy(obj)
            if current is not None and "status" in current:
                new["status"] = current["status"]
        return self.put(new)

    def json_patch(
        self,
        kind: kinds.Kind,
        name: str,
        namespace: str | None,
        patch: list[Object],
        **_: Any,
    ) -> Object:
        """`test`, `add`, `replace` and `remove` (RFC 6902) of map members, all or nothing; a
        failed test, or a replace or remove of a member that is missing, is the server's 422."""
        self.writes.append((kind.kind, name))
        current = self.objects.get((kind.kind, namespace or "", name))
        if current is None:
            raise KubeError(f"{kind.kind} {name} not found", status=404)
        new = copy.deepcopy(current)
        for op in patch:
            *parents, last = [
                t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]
            ]
            target: Any = new
            for token in parents:
                target = target[int(token)] if isinstance(target, list) else target[token]
            if op["op"] == "test":
                if target.get(last) != op["value"]:
                    raise KubeError(f"test of {op['path']} failed", status=422, reason="Invalid")
            elif op["op"] == "add":
                target[last] = copy.deepcopy(op["value"])
            elif op["op"] in {"replace", "remove"}:
                if last not in target:
                    raise KubeError(f"{op['path']} is missing", status=422, reason="Invalid")
                if op["op"] == "replace":
                    target[last] = copy.deepcopy(op["value"])
                else:
                    del target[last]
            else:
                raise ValueError(f"operation {op['op']!r} is not kept by this fake")
        return self.put(new)

    def create(self, kind: kinds.Kind, obj: Object) -> Object:
        return obj  # Events: not kept

    def delete(self, kind: kinds.Kind, name: str, namespace: str | None = None) -> bool:
        return self.objects.pop((kind.kind, namespace or "", name), None) is not None

    def snapshot(self) -> Observed:
        """What the controller's cache would hold: every collection in (namespace, name) order."""

        def of(kind: kinds.Kind) -> tuple[Object, ...]:
            return tuple(o for (k, _, _), o in sorted(self.objects.items()) if k == kind.kind)

        return Observed(
            served=frozenset(k.group_version for k in (*kinds.MANAGED_KINDS, kinds.WORKLOAD))
            | {kinds.CAPACITY_POLICY.group_version}
            | ({"v1"} if self.core_v1 else set()),
            policies=of(kinds.CAPACITY_POLICY),
            projects=of(kinds.TRAINING_PROJECT),
            managed=tuple(o for kind in kinds.MANAGED_KINDS for o in of(kind)),
            workloads=of(kinds.WORKLOAD),
        )


__all__ = ["MemoryServer"]
