"""Field metadata and cross-field rules for the policy types.

The CRD schema the API server enforces and the validator `quartermaster validate` runs are
both derived from these declarations, so a policy that passes one passes the other. A rule
carries its CEL expression (for the API server) beside a Python predicate (for the CLI and the
controller); `tests/unit/api/test_rules.py` evaluates every CEL expression and proves the two
agree on the same cases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

META_KEY = "quartermaster"

# Patterns shared by several fields, with the reason shown when a value does not match.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_LABEL_REASON = (
    "must be a lowercase RFC 1123 label (a-z, 0-9 and '-', starting and ending alphanumeric)"
)
# `[.]` rather than `\.`: the patterns also appear inside CEL string literals.
QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
EXTENDED_RESOURCE = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)+/"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
EXTENDED_RESOURCE_REASON = (
    "must be an extended resource name with a domain, such as 'nvidia.com/gpu'"
)
# Node labels that Karpenter reserves or that the controller itself sets on a pool's nodes.
RESERVED_NODE_LABELS = (
    "karpenter.sh/capacity-type",
    "karpenter.sh/nodepool",
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "node.kubernetes.io/instance-type",
    "quartermaster.dev/pool",
)
KARPENTER_DOMAIN = r"^([^/]*[.])?karpenter[.]sh/"
QUALIFIED_NAME_REASON = "must be a qualified name such as 'nvidia.com/gpu' or 'example.com/key'"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_VALUE_REASON = "must be a label value (alphanumerics, '-', '_' or '.', at most 63)"


@dataclass(frozen=True)
class FieldSpec:
    """Constraints on one field, in the vocabulary of a structural OpenAPI schema."""

    description: str
    json_name: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    pattern_reason: str | None = None
    min_items: int | None = None
    max_items: int | None = None
    max_properties: int | None = None
    list_map_keys: tuple[str, ...] = ()
    list_set: bool = False
    item_max_length: int | None = None
    item_pattern: str | None = None
    item_pattern_reason: str | None = None
    format: str | None = None


def meta(description: str, **constraints: Any) -> dict[str, FieldSpec]:
    """Attach a FieldSpec to a dataclass field: `field(metadata=meta("..."))`."""
    return {META_KEY: FieldSpec(description, **constraints)}


@dataclass(frozen=True)
class Rule:
    """A cross-field rule, stated once for the API server (CEL) and once for Python.

    `field_path` is relative to the object the rule sits on (".lowerThreshold"), so the error
    points at the field a user has to change, as the API server does with `fieldPath`.
    """

    cel: str
    message: str
    check: Callable[[Any], bool]
    field_path: str | None = None
