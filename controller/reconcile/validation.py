"""Validating the policy objects read from the cluster, object by object.

The API server has already checked each object's schema and CEL rules; what can still be wrong
spans objects (a project naming a tier that does not exist, two projects claiming a namespace,
quotas over a pool's ceiling). A bad project must not stop the others, and must not lose what
was applied for it before: it is left out of the desired state and its objects are protected
from pruning. A bad policy stops everything: nothing is applied or pruned until it is fixed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.api.loader import parse_document
from controller.api.policy_set import PolicyError, PolicySet
from controller.api.semantics import check_policy_set
from controller.api.types import CapacityPolicy, TrainingProject

ORIGIN = "cluster"
"""Where errors about live objects come from, in place of a file name."""

ObjectKey = tuple[str, str]
"""(kind, name) of a cluster-scoped policy object."""


@dataclass(frozen=True)
class ClusterValidation:
    policy_set: PolicySet | None
    """The policy with its valid projects, or None when there is no valid policy."""
    errors: Mapping[ObjectKey, tuple[PolicyError, ...]] = field(default_factory=dict)
    policy_name: str | None = None
    readable: Mapping[str, TrainingProject] = field(default_factory=dict)
    """Every project whose own spec parses, valid across objects or not, by name."""

    @property
    def invalid_projects(self) -> frozenset[str]:
        return frozenset(name for kind, name in self.errors if kind == TrainingProject.KIND)

    def errors_of(self, kind: str, name: str) -> tuple[PolicyError, ...]:
        return self.errors.get((kind, name), ())


def _age_key(doc: Mapping[str, Any]) -> tuple[str, str]:
    meta = doc.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")


def validate_cluster(
    policies: Sequence[Mapping[str, Any]], projects: Sequence[Mapping[str, Any]]
) -> ClusterValidation:
    """Split the live objects into a usable PolicySet and per-object errors."""
    errors: dict[ObjectKey, list[PolicyError]] = defaultdict(list)
    ordered = sorted(policies, key=_age_key)
    policy: CapacityPolicy | None = None
    policy_name: str | None = None
    for i, doc in enumerate(ordered):
        name = str((doc.get("metadata") or {}).get("name"))
        obj, doc_errors = parse_document(ORIGIN, dict(doc))
        if i > 0:
            errors[(CapacityPolicy.KIND, name)].append(
                PolicyError(
                    "cluster",
                    CapacityPolicy.KIND,
                    name,
                    "metadata.name",
                    f"only one CapacityPolicy is supported; {policy_name!r} is in use",
                )
            )
            continue
        policy_name = name
        if doc_errors or not isinstance(obj, CapacityPolicy):
            errors[(CapacityPolicy.KIND, name)].extend(doc_errors)
        else:
            policy = obj
    parsed: list[TrainingProject] = []
    for doc in projects:
        obj, doc_errors = parse_document(ORIGIN, dict(doc))
        if isinstance(obj, TrainingProject) and not doc_errors:
            parsed.append(obj)
        else:
            name = str((doc.get("metadata") or {}).get("name"))
            errors[(TrainingProject.KIND, name)].extend(doc_errors)
    readable = {p.name: p for p in parsed}
    if policy is None:
        return ClusterValidation(
            None, {k: tuple(v) for k, v in errors.items()}, policy_name, readable
        )
    candidate = PolicySet(policy=policy, projects=tuple(sorted(parsed, key=lambda p: p.name)))
    # Of two projects claiming one namespace, the one created later is blamed.
    created = [_age_key(doc)[1] for doc in sorted(projects, key=_age_key)]
    for error in check_policy_set(candidate, order=created):
        errors[(error.kind, error.name)].append(error)
    frozen = {k: tuple(v) for k, v in errors.items()}
    if (CapacityPolicy.KIND, policy.name) in frozen:
        return ClusterValidation(None, frozen, policy.name, readable)
    valid = tuple(p for p in candidate.projects if (TrainingProject.KIND, p.name) not in frozen)
    return ClusterValidation(
        PolicySet(policy=policy, projects=valid), frozen, policy.name, readable
    )
