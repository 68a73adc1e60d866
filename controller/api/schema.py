"""The structural OpenAPI v3 schema of a policy dataclass, as a CRD version embeds it.

Descriptions, bounds, list semantics and CEL rules all come from the dataclasses' field
metadata, so the API server enforces exactly what `controller.api.parse` checks.
"""

from __future__ import annotations

from typing import Any

from controller.api.fields import LABEL_VALUE, QUALIFIED_NAME, QUALIFIED_NAME_REASON, FieldSpec
from controller.api.introspect import Kind, fields_of, item_hint, kind_of, rules_of, to_json


def object_schema(cls: type) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for info in fields_of(cls):
        prop: dict[str, Any] = {"description": info.spec.description}
        prop.update(_type_schema(info.hint, info.spec))
        default = _default_json(info.default, info.hint)
        if default is not None:
            prop["default"] = default
        if not info.optional and not info.has_default:
            required.append(info.json_name)
        properties[info.json_name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    rules = rules_of(cls)
    if rules:
        schema["x-kubernetes-validations"] = [
            {"rule": r.cel, "message": r.message}
            | ({"fieldPath": r.field_path} if r.field_path else {})
            for r in rules
        ]
    return schema


def _default_json(default: Any, hint: Any) -> Any:
    """Defaults the API server should apply; empty collections are left absent.

    An object's default is spelled out in full: the API server checks a default against the
    object's CEL rules without first applying the defaults of its fields.
    """
    if default is None or kind_of(hint) in (Kind.ARRAY, Kind.MAP):
        return None
    return _prune_empty(to_json(default))


def _prune_empty(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _prune_empty(v) for k, v in value.items() if v not in ({}, [])}
    return value


def _scalar_constraints(spec: FieldSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if spec.minimum is not None:
        out["minimum"] = spec.minimum
        if spec.exclusive_minimum:
            out["exclusiveMinimum"] = True
    if spec.maximum is not None:
        out["maximum"] = spec.maximum
    if spec.min_length is not None:
        out["minLength"] = spec.min_length
    if spec.max_length is not None:
        out["maxLength"] = spec.max_length
    if spec.pattern is not None:
        out["pattern"] = spec.pattern
    if spec.format is not None:
        out["format"] = spec.format
    return out


def _type_schema(hint: Any, spec: FieldSpec) -> dict[str, Any]:
    kind = kind_of(hint)
    if kind is Kind.OBJECT:
        return object_schema(hint)
    if kind is Kind.ENUM:
        return {"type": "string", "enum": [m.value for m in hint]}
    if kind is Kind.DATETIME:
        return {"type": "string", "format": "date-time"}
    if kind is Kind.MAP:
        out: dict[str, Any] = {
            "type": "object",
            "additionalProperties": {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE},
        }
        if spec.max_properties is not None:
            out["maxProperties"] = spec.max_properties
        out["x-kubernetes-validations"] = [
            {
                "rule": f"self.all(k, k.size() <= 316 && k.matches('{QUALIFIED_NAME}'))",
                "message": f"every key {QUALIFIED_NAME_REASON}",
            }
        ]
        return out
    if kind is Kind.ARRAY:
        item = item_hint(hint)
        item_spec = FieldSpec(
            description="",
            max_length=spec.item_max_length,
            pattern=spec.item_pattern,
        )
        items = _type_schema(item, item_spec)
        out = {"type": "array", "items": items}
        if spec.min_items is not None:
            out["minItems"] = spec.min_items
        if spec.max_items is not None:
            out["maxItems"] = spec.max_items
        if spec.list_map_keys:
            out["x-kubernetes-list-type"] = "map"
            out["x-kubernetes-list-map-keys"] = list(spec.list_map_keys)
        elif spec.list_set:
            out["x-kubernetes-list-type"] = "set"
        else:
            out["x-kubernetes-list-type"] = "atomic"
        return out
    return {"type": kind.value} | _scalar_constraints(spec)
