"""The result of loading a policy: a validated PolicySet, or every error found.

Kept apart from the loader so that the semantic checks, the renderer and the controller can
share these types without depending on how YAML is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from controller.api.types import CapacityPolicy, TrainingProject


@dataclass(frozen=True, order=True)
class PolicyError:
    """One problem in one object: the line `quartermaster validate` prints."""

    origin: str
    kind: str
    name: str
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.kind}/{self.name}" if self.name else self.kind
        return f"{self.origin}: {where}: {self.path}: {self.message}"


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
