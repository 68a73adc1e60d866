"""What a conformant API server gives back for what we render, so a diff compares like with like.

A server does not store our bytes. A built-in kind is decoded into Go types and encoded again on
every write; a custom resource is stored as sent, unless a webhook round-trips it through Go
types (Kueue's ClusterQueue defaulting webhook does, on create only). The round trip
- prints every `resource.Quantity` in canonical form (`8` -> `"8"`, `"4096Gi"` -> `"4Ti"`,
  `0.5` -> `"500m"`; see `controller.quantity`);
- drops zero values of `omitempty` fields (PriorityClass `globalDefault: false`) and empty maps
  and lists, and fills in defaults (PriorityClass `preemptionPolicy: PreemptLowerPriority`,
  Deployment `strategy`, pod `dnsPolicy`, container `imagePullPolicy`, ...).

Seen against a kube-apiserver 1.36 with Kueue 0.19.2, a plain comparison re-applied the
warm-pool PriorityClass and Deployment on every pass and reported Kueue's queues as changed
after each create.

The design: compare in the stored form, and send what we render unchanged.
- `stored_form` rewrites an object as any such server would store it, for the fields we set:
  quantities become `Quantity` values that are equal when equal in value (so `8`, `"8"` and
  `"8000m"` match whether the server canonicalises or keeps our bytes, as the CRD-only test
  server and a Kueue update do), and fields the server omits or defaults are filled with the
  value they stand for (an absent `globalDefault` is `false`). It is applied to both sides.
- Defaults the server adds to fields we never set need nothing: the diff compares only the
  fields we set (`diff.is_subset`), and an empty map or list we set matches an absent one.
- We do not render canonical strings instead: that alone would not cover defaults or a server
  that keeps non-canonical bytes, and `quartermaster render` would print `"500m"` for a weight
  of 0.5. The last-applied annotation holds the bytes we sent, and is compared with what we
  would send, so it needs no normalising.

The tables name every quantity field and every omitted or defaulted field of each kind we
render; `tests/unit/reconcile/test_stored.py` holds, per kind, the form a real server stores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from controller import quantity

Path = tuple[str, ...]
"""Keys from the object's root; `*` is every item of a list or every value of a map."""

_RESOURCES = ("spec", "resourceGroups", "*", "flavors", "*", "resources", "*")
_CONTAINER_RESOURCES = ("spec", "template", "spec", "containers", "*", "resources")

QUANTITY_FIELDS: Mapping[str, tuple[Path, ...]] = {
    "ClusterQueue": (
        (*_RESOURCES, "nominalQuota"),
        (*_RESOURCES, "borrowingLimit"),
        (*_RESOURCES, "lendingLimit"),
        ("spec", "fairSharing", "weight"),
    ),
    "Cohort": (
        (*_RESOURCES, "nominalQuota"),
        (*_RESOURCES, "borrowingLimit"),
        (*_RESOURCES, "lendingLimit"),
        ("spec", "fairSharing", "weight"),
    ),
    "NodePool": (("spec", "limits", "*"),),
    "Deployment": (
        (*_CONTAINER_RESOURCES, "requests", "*"),
        (*_CONTAINER_RESOURCES, "limits", "*"),
    ),
}
"""Fields of type `resource.Quantity` in the Go types of each kind we render."""

DEFAULTS: Mapping[str, Mapping[Path, Any]] = {
    "PriorityClass": {
        # `bool` with omitempty: false is never stored.
        ("globalDefault",): False,
        # Defaulted by the server when absent (pkg/apis/scheduling/v1 defaults).
        ("preemptionPolicy",): "PreemptLowerPriority",
        # `string` with omitempty.
        ("description",): "",
    },
}
"""Fields we render that a server omits when zero or fills in when absent, and their value."""


def _map_at(value: Any, path: Path, change: Callable[[Any], Any]) -> Any:
    """`value` with `change` applied to what `path` reaches; absent steps are left alone."""
    if not path:
        return change(value)
    head, rest = path[0], path[1:]
    if head == "*":
        if isinstance(value, list):
            return [_map_at(item, rest, change) for item in value]
        if isinstance(value, dict):
            return {k: _map_at(v, rest, change) for k, v in value.items()}
        return value
    if isinstance(value, dict) and head in value:
        return {**value, head: _map_at(value[head], rest, change)}
    return value


def _fill(value: Any, path: Path, default: Any) -> Any:
    """`value` with `path` set to `default` where the field is absent and its parent exists."""
    if len(path) == 1:
        if isinstance(value, dict) and path[0] not in value:
            return {**value, path[0]: default}
        return value
    return _map_at(value, path[:-1], lambda parent: _fill(parent, path[-1:], default))


def _as_quantity(raw: Any) -> Any:
    """A quantity compared by value; left as it is when the server would refuse it anyway."""
    try:
        return quantity.parse(raw)
    except quantity.QuantityError:
        return raw


def stored_form(obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` as a conformant server stores it, in the fields the tables name. Pure."""
    kind = str(obj.get("kind", ""))
    out: dict[str, Any] = dict(obj)
    for path in QUANTITY_FIELDS.get(kind, ()):
        out = _map_at(out, path, _as_quantity)
    for path, default in DEFAULTS.get(kind, {}).items():
        out = _fill(out, path, default)
    return out
