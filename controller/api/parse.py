"""Validating raw YAML/JSON values into the frozen policy dataclasses.

It checks what the CRD schema checks (types, bounds, enums, patterns, list semantics, CEL
rules through their Python predicates) and reports every problem at once, each with the
Kubernetes-style field path (`spec.quotas[0].nominalGpus`) and a reason, never a traceback.
A parser is compiled once per dataclass, so validating thousands of projects stays fast.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any, TypeVar, cast

from controller.api.fields import (
    LABEL_VALUE,
    LABEL_VALUE_REASON,
    QUALIFIED_NAME,
    QUALIFIED_NAME_REASON,
    FieldSpec,
)
from controller.api.introspect import Kind, fields_of, item_hint, kind_of, rules_of


@dataclass(frozen=True, order=True)
class FieldError:
    """A problem with one field: where it is and why it is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class _Invalid:
    """Marks a value that failed validation; its errors are already recorded."""


INVALID: Any = _Invalid()
Parser = Callable[[Any, str, list[FieldError]], Any]
T = TypeVar("T")

_TYPE_NAMES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def go_pattern(pattern: str) -> re.Pattern[str]:
    """A CRD `pattern` as the API server's Go regexp reads it: a final `$` is the end of the
    text. Python's `$` also matches before a final newline, which would let a name written as
    a YAML block scalar ("vision\\n") through the loader that the API server refuses."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


def show(value: Any) -> str:
    """A value as a user wrote it, short enough for one line of output."""
    try:
        text = json.dumps(value, default=str, sort_keys=True)
    except (TypeError, ValueError):  # keys of mixed types cannot be sorted, nor tuples written
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    if value is None:
        return "null"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def wrong_type(expected: str, value: Any) -> str:
    """The reason for a value of the wrong JSON type, as every parser words it."""
    article = "an" if expected[0] in "aeiou" else "a"
    return f"must be {article} {expected}, got {_type_name(value)} {show(value)}"


def parse_object(cls: type[T], value: Any, path: str, errors: list[FieldError]) -> T | None:
    """Parse `value` as `cls`, appending every problem to `errors`; None when any was found."""
    result = _object_parser(cast(Hashable, cls))(value, path, errors)
    return None if result is INVALID else cast(T, result)


@cache
def _object_parser(cls: Any) -> Parser:
    infos = fields_of(cls)
    plans = [
        (
            info.name,
            info.json_name,
            _compile(info.hint, info.spec),
            info.optional or info.has_default,
        )
        for info in infos
    ]
    known = {info.json_name for info in infos}
    rules = rules_of(cls)

    def parse(value: Any, path: str, errors: list[FieldError]) -> Any:
        if not isinstance(value, dict):
            errors.append(FieldError(path, wrong_type("object", value)))
            return INVALID
        ok = True
        for key in value:
            if key not in known:
                errors.append(FieldError(f"{path}.{key}", "unknown field"))
                ok = False
        kwargs: dict[str, Any] = {}
        for name, json_name, parser, may_be_absent in plans:
            raw = value.get(json_name)
            if raw is None:
                if not may_be_absent:
                    errors.append(FieldError(f"{path}.{json_name}", "required field is missing"))
                    ok = False
                continue
            parsed = parser(raw, f"{path}.{json_name}", errors)
            if parsed is INVALID:
                ok = False
            else:
                kwargs[name] = parsed
        if not ok:
            return INVALID
        obj = cls(**kwargs)
        for rule in rules:
            if not rule.check(obj):
                errors.append(FieldError(path + (rule.field_path or ""), rule.message))
                ok = False
        return obj if ok else INVALID

    return parse


def _compile(hint: Any, spec: FieldSpec) -> Parser:
    kind = kind_of(hint)
    if kind is Kind.OBJECT:
        return _object_parser(hint)
    if kind is Kind.ARRAY:
        return _array_parser(hint, spec)
    if kind is Kind.MAP:
        return _map_parser(spec)
    if kind is Kind.ENUM:
        return _enum_parser(hint)
    if kind is Kind.DATETIME:
        return _parse_datetime
    if kind is Kind.STRING:
        return _string_parser(spec)
    return _number_parser(kind, spec)


def _enum_parser(enum_type: type[enum.Enum]) -> Parser:
    members = {m.value: m for m in enum_type}
    supported = ", ".join(f'"{v}"' for v in members)

    def parse(value: Any, path: str, errors: list[FieldError]) -> Any:
        if not isinstance(value, str):
            errors.append(FieldError(path, wrong_type("string", value)))
            return INVALID
        if value not in members:
            errors.append(
                FieldError(path, f"unsupported value {show(value)}; supported values: {supported}")
            )
            return INVALID
        return members[value]

    return parse


def _string_parser(spec: FieldSpec) -> Parser:
    pattern = go_pattern(spec.pattern) if spec.pattern else None
    reason = spec.pattern_reason or f"must match {spec.pattern}"

    def parse(value: Any, path: str, errors: list[FieldError]) -> Any:
        if not isinstance(value, str):
            errors.append(FieldError(path, wrong_type("string", value)))
            return INVALID
        if spec.min_length is not None and len(value) < spec.min_length:
            message = (
                "must not be empty"
                if spec.min_length == 1
                else f"must be at least {spec.min_length} characters"
            )
            errors.append(FieldError(path, message))
            return INVALID
        if spec.max_length is not None and len(value) > spec.max_length:
            errors.append(
                FieldError(path, f"must be at most {spec.max_length} characters, got {len(value)}")
            )
            return INVALID
        if pattern is not None and not pattern.search(value):
            errors.append(FieldError(path, f"invalid value {show(value)}: {reason}"))
            return INVALID
        return value

    return parse


def _number_parser(kind: Kind, spec: FieldSpec) -> Parser:
    def parse(value: Any, path: str, errors: list[FieldError]) -> Any:
        if kind is Kind.BOOLEAN:
            if not isinstance(value, bool):
                errors.append(FieldError(path, wrong_type("boolean", value)))
                return INVALID
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            errors.append(FieldError(path, wrong_type(kind.value, value)))
            return INVALID
        if kind is Kind.INTEGER and isinstance(value, float) and value.is_integer():
            value = int(value)  # 1000.0 is an integer to the API server, which stores 1000
        if kind is Kind.INTEGER and not isinstance(value, int):
            errors.append(FieldError(path, wrong_type("integer", value)))
            return INVALID
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an integer beyond any float
            finite = False
        if not finite:
            errors.append(FieldError(path, f"must be a finite number, got {show(value)}"))
            return INVALID
        if spec.minimum is not None:
            if spec.exclusive_minimum and value <= spec.minimum:
                errors.append(
                    FieldError(
                        path, f"must be greater than {show(spec.minimum)}, got {show(value)}"
                    )
                )
                return INVALID
            if value < spec.minimum:
                errors.append(
                    FieldError(
                        path,
                        f"must be greater than or equal to {show(spec.minimum)}, got {show(value)}",
                    )
                )
                return INVALID
        if spec.maximum is not None and value > spec.maximum:
            errors.append(
                FieldError(
                    path, f"must be less than or equal to {show(spec.maximum)}, got {show(value)}"
                )
            )
            return INVALID
        return float(value) if kind is Kind.NUMBER else value

    return parse


_RFC3339 = go_pattern(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
"""Upper-case T and Z only: the API server's date-time format refuses 't' and 'z'."""


def _parse_datetime(value: Any, path: str, errors: list[FieldError]) -> Any:
    """RFC 3339 exactly, as the API server's `format: date-time` accepts it."""
    reason = "must be an RFC 3339 time with a time zone, such as 2026-12-01T18:00:00Z"
    if not isinstance(value, str) or not _RFC3339.search(value):
        errors.append(FieldError(path, f"invalid value {show(value)}: {reason}"))
        return INVALID
    try:
        parsed = datetime.fromisoformat(value.upper())
    except ValueError:
        errors.append(FieldError(path, f"invalid value {show(value)}: {reason}"))
        return INVALID
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        errors.append(FieldError(path, f"invalid value {show(value)}: out of the range of dates"))
        return INVALID


def _array_parser(hint: Any, spec: FieldSpec) -> Parser:
    item_spec = FieldSpec(
        description="",
        max_length=spec.item_max_length,
        pattern=spec.item_pattern,
        pattern_reason=spec.item_pattern_reason,
    )
    item = _compile(item_hint(hint), item_spec)
    keys = spec.list_map_keys

    def parse(value: Any, path: str, errors: list[FieldError]) -> Any:
        if not isinstance(value, list):
            errors.append(FieldError(path, wrong_type("array", value)))
            return INVALID
        if spec.min_items is not None and len(value) < spec.min_items:
            noun = "item" if spec.min_items == 1 else "items"
            errors.append(FieldError(path, f"must have at least {spec.min_items} {noun}"))
            return INVALID
        if spec.max_items is not None and len(value) > spec.max_items:
            errors.append(
                FieldError(path, f"must have at most {spec.max_items} items, got {len(value)}")
            )
            return INVALID
        ok = True
        out = []
        seen: set[Any] = set()
        for i, raw in enumerate(value):
            at = f"{path}[{i}]"
            identity: Any = None
            if keys and isinstance(raw, dict):
                key_values = tuple(raw.get(k) for k in keys)
                if all(isinstance(v, str | int | float | bool) for v in key_values):
                    identity = key_values
                    at_key = f"{at}.{keys[0]}"
                    shown = show(key_values[0] if len(keys) == 1 else list(key_values))
            elif spec.list_set and isinstance(raw, str):
                identity, at_key, shown = raw, at, show(raw)
            if identity is not None:
                if identity in seen:
                    errors.append(FieldError(at_key, f"duplicate value {shown}"))
                    ok = False
                    continue
                seen.add(identity)
            parsed = item(raw, at, errors)
            if parsed is INVALID:
                ok = False
            else:
                out.append(parsed)
        return tuple(out) if ok else INVALID

    return parse


_LABEL_KEY = go_pattern(QUALIFIED_NAME)
_LABEL_VALUE = go_pattern(LABEL_VALUE)


def _map_parser(spec: FieldSpec) -> Parser:
    def parse(value: Any, path: str, errors: list[FieldError]) -> Any:
        if not isinstance(value, dict):
            errors.append(FieldError(path, wrong_type("object", value)))
            return INVALID
        if spec.max_properties is not None and len(value) > spec.max_properties:
            errors.append(
                FieldError(
                    path, f"must have at most {spec.max_properties} entries, got {len(value)}"
                )
            )
            return INVALID
        ok = True
        for key, item in value.items():
            at = f"{path}.{key}"
            if not isinstance(key, str) or len(key) > 316 or not _LABEL_KEY.search(key):
                errors.append(FieldError(at, f"invalid key {show(key)}: {QUALIFIED_NAME_REASON}"))
                ok = False
            elif not isinstance(item, str):
                errors.append(FieldError(at, wrong_type("string", item)))
                ok = False
            elif len(item) > 63 or not _LABEL_VALUE.search(item):
                errors.append(FieldError(at, f"invalid value {show(item)}: {LABEL_VALUE_REASON}"))
                ok = False
        return dict(value) if ok else INVALID

    return parse
