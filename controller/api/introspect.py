"""Reading the policy dataclasses' declarations once, for both the schema and the parser.

Both `controller.api.schema` and `controller.api.parse` need the same facts about each field
(its serialized name, type, constraints and default); computing them here keeps the two
derivations from drifting apart.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

from controller.api.fields import META_KEY, FieldSpec, Rule


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@dataclass(frozen=True)
class FieldInfo:
    """One declared field: how it is named, typed, constrained and defaulted."""

    name: str
    json_name: str
    hint: Any
    spec: FieldSpec
    optional: bool
    has_default: bool
    default: Any


class Kind(enum.Enum):
    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    DATETIME = "date-time"
    ENUM = "enum"
    ARRAY = "array"
    MAP = "map"
    OBJECT = "object"


def kind_of(hint: Any) -> Kind:
    origin = typing.get_origin(hint)
    if origin is tuple:
        return Kind.ARRAY
    if origin in (Mapping, dict):
        return Kind.MAP
    if isinstance(hint, type):
        if issubclass(hint, enum.Enum):
            return Kind.ENUM
        if dataclasses.is_dataclass(hint):
            return Kind.OBJECT
        scalar = {str: Kind.STRING, int: Kind.INTEGER, float: Kind.NUMBER, bool: Kind.BOOLEAN}
        if hint in scalar:
            return scalar[hint]
        if hint is datetime:
            return Kind.DATETIME
    raise TypeError(f"unsupported field type {hint!r}")


def item_hint(hint: Any) -> Any:
    """The element type of `tuple[X, ...]`."""
    return typing.get_args(hint)[0]


def _strip_optional(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"only X | None unions are supported, got {hint!r}")
        return args[0], True
    return hint, False


@cache
def fields_of(cls: type) -> tuple[FieldInfo, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(META_KEY)
        if spec is None:
            raise TypeError(f"{cls.__name__}.{f.name} has no field metadata")
        hint, optional = _strip_optional(hints[f.name])
        has_default = f.default is not dataclasses.MISSING or (
            f.default_factory is not dataclasses.MISSING
        )
        default: Any = None
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append(
            FieldInfo(
                name=f.name,
                json_name=spec.json_name or camel(f.name),
                hint=hint,
                spec=spec,
                optional=optional,
                has_default=has_default,
                default=default,
            )
        )
    return tuple(out)


def rules_of(cls: type) -> tuple[Rule, ...]:
    rules: tuple[Rule, ...] = getattr(cls, "__rules__", ())
    return rules


_PLAIN = frozenset({str, int, float, bool})


def to_json(value: Any) -> Any:
    """A policy value as the JSON the API server stores (None fields omitted)."""
    if type(value) in _PLAIN:
        return value  # most leaves: settled before the slower checks (statuses of 1,000 projects)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for info in fields_of(type(value)):
            v = getattr(value, info.name)
            if v is None:
                continue
            out[info.json_name] = to_json(v)
        return out
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return value
