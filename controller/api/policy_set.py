"""The result of loading a policy: a validated PolicySet, or every error found.

Kept apart from the loader so that the semantic checks, the renderer and the controller can
share these types without depending on how YAML is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from controller.api.types import CapacityPolicy, PoolQuota, TrainingProject


@dataclass(frozen=True, order=True)
class _Finding:
    """Something `quartermaster validate` says about one object, field, file or document.

    A finding about a whole file or document (it cannot be read, is not YAML, is not an object)
    has no kind and no path, and prints as `origin: message`.
    """

    origin: str
    kind: str
    name: str
    path: str
    message: str

    def _location(self) -> list[str]:
        parts = [self.origin]
        if self.kind:
            parts.append(f"{self.kind}/{self.name}" if self.name else self.kind)
        if self.path:
            parts.append(self.path)
        return parts


@dataclass(frozen=True, order=True)
class PolicyError(_Finding):
    """One problem, as `validate` prints it: `file#doc: Kind/name: field.path: reason`."""

    @classmethod
    def in_file(cls, origin: str, message: str) -> PolicyError:
        """A problem with a file or document as a whole, not with a field of an object."""
        return cls(origin, "", "", "", message)

    def __str__(self) -> str:
        return ": ".join([*self._location(), self.message])


@dataclass(frozen=True, order=True)
class PolicyWarning(_Finding):
    """Something valid that is probably not what was meant; `validate` still exits 0."""

    def __str__(self) -> str:
        return ": ".join([*self._location(), "warning", self.message])


class InvalidPolicyError(Exception):
    """The policy has errors; all of them are in `errors`, sorted."""

    def __init__(self, errors: Iterable[PolicyError]) -> None:
        self.errors = tuple(sorted(errors))
        super().__init__(f"{len(self.errors)} policy error(s); first: {self.errors[0]}")


@dataclass(frozen=True)
class PolicySet:
    """One CapacityPolicy and the TrainingProjects it governs, sorted by name."""

    policy: CapacityPolicy
    projects: tuple[TrainingProject, ...]
    origins: Mapping[tuple[str, str], str] = field(default_factory=dict, compare=False)

    @cached_property
    def _by_name(self) -> dict[str, TrainingProject]:
        return {p.name: p for p in self.projects}

    def project(self, name: str) -> TrainingProject | None:
        return self._by_name.get(name)

    @cached_property
    def _quotas_by_pool(self) -> dict[str, tuple[tuple[TrainingProject, PoolQuota], ...]]:
        found: dict[str, list[tuple[TrainingProject, PoolQuota]]] = {}
        for project in self.projects:
            for quota in project.spec.quotas:
                found.setdefault(quota.pool, []).append((project, quota))
        return {pool: tuple(pairs) for pool, pairs in found.items()}

    def quotas_in(self, pool: str) -> tuple[tuple[TrainingProject, PoolQuota], ...]:
        """Each project's quota in `pool`, in project order: rendering walks them pool by
        pool, every pass."""
        return self._quotas_by_pool.get(pool, ())
