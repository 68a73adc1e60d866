"""Kubernetes RBAC authorization, for checking recorded API requests against our roles.

The test API server authorizes only `system:masters` and serves no rbac.authorization.k8s.io,
so a SubjectAccessReview cannot be asked of it. This is the equivalent check: the request
attributes the API server derives from a request (its RequestInfo: verb, API group, resource,
subresource, namespace, name) and the RBAC authorizer's matching rules (apiGroups, resources
with `resource/subresource`, verbs, resourceNames; a Role applies in its own namespace only).
It allows no wildcards, because our roles must not use them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

DISCOVERY_PREFIXES = ("/api", "/apis", "/version", "/openapi")


@dataclass(frozen=True)
class Attributes:
    """What the RBAC authorizer sees of one resource request."""

    verb: str
    group: str
    resource: str
    """With the subresource when there is one: `trainingprojects/status`."""
    namespace: str
    name: str

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {self.group or 'core'}/{self.resource}{named}{where}"


def attributes(method: str, path: str, query: str = "") -> Attributes | None:
    """The request's attributes, or None for a non-resource (discovery) request."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    elif rest[:1] == ["namespaces"] and len(rest) == 2:
        rest = ["namespaces", rest[1]]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    watch = parse_qs(query).get("watch", ["false"])[0] in ("true", "1")
    verb = {
        ("GET", True): "get",
        ("GET", False): "watch" if watch else "list",
        ("POST", False): "create",
        ("PUT", True): "update",
        ("PATCH", True): "patch",
        ("DELETE", True): "delete",
        ("DELETE", False): "deletecollection",
    }[(method, bool(name))]
    return Attributes(verb, group, resource, namespace, name)


def is_discovery(path: str) -> bool:
    return path.startswith(DISCOVERY_PREFIXES)


@dataclass(frozen=True)
class Grant:
    """One (group, resource, verb) a rule gives, where it applies, and to which names."""

    group: str
    resource: str
    verb: str
    namespace: str | None
    """None for a ClusterRole: every namespace and cluster-scoped objects."""
    names: frozenset[str]

    def allows(self, request: Attributes) -> bool:
        if (request.group, request.resource, request.verb) != (
            self.group,
            self.resource,
            self.verb,
        ):
            return False
        if self.namespace is not None and request.namespace != self.namespace:
            return False
        return not self.names or request.name in self.names

    def __str__(self) -> str:
        scope = f" in {self.namespace}" if self.namespace else ""
        named = f" {sorted(self.names)}" if self.names else ""
        return f"{self.verb} {self.group or 'core'}/{self.resource}{named}{scope}"


def grants(objects: Iterable[Mapping[str, Any]], *, subject: tuple[str, str]) -> list[Grant]:
    """Every grant the roles bound to the service account `(namespace, name)` give it."""
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    out: list[Grant] = []
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(
            s.get("kind") == "ServiceAccount" and (s.get("namespace"), s.get("name")) == subject
            for s in binding.get("subjects", [])
        ):
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role = roles[(ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"])]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.append(
                            Grant(
                                group,
                                resource,
                                verb,
                                scope,
                                frozenset(rule.get("resourceNames", [])),
                            )
                        )
    return out


def denied(requests: Iterable[Attributes], granted: Sequence[Grant]) -> list[Attributes]:
    return [r for r in requests if not any(g.allows(r) for g in granted)]


def unused(requests: Iterable[Attributes], granted: Sequence[Grant]) -> list[Grant]:
    seen = list(requests)
    return [g for g in granted if not any(g.allows(r) for r in seen)]
