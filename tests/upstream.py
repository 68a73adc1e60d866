"""Check rendered objects against the schemas the real API server would enforce, offline.

Custom resources (Kueue, KEDA, Karpenter) are checked against the pinned upstream CRDs in
`third_party/crds` (or the folder named by `QUARTERMASTER_UPSTREAM_CRDS`): their OpenAPI v3
structural schema through jsonschema, and their `x-kubernetes-validations` CEL rules through
celpy where celpy can evaluate them. Built-in kinds (Deployment, PriorityClass) are checked
against the Kubernetes OpenAPI schemas that `kubernetes_validate` ships, in strict mode.

Like the API server, the checks run on the object after its schema defaults are applied, and
reject fields the schema does not know (`kubectl apply` and server-side apply default to strict
field validation). Every error reads "<json path>: <message>". Rules celpy cannot evaluate
(transition rules that compare with `oldSelf`, functions it lacks) are returned separately: they
are left to the integration tests against a real API server.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate.utils
import referencing
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError, base_functions

ENV_VAR = "QUARTERMASTER_UPSTREAM_CRDS"
REPO_ROOT = Path(__file__).resolve().parent.parent
KUBERNETES_VERSION = "1.37.0"
"""The Kubernetes release whose schemas the built-in kinds are checked against: the newest
that kubernetes_validate ships (it ships 1.25 to 1.37). Pinned so that a newer package does not
silently change what the tests accept."""

PathSegment = str | int
JsonPath = tuple[PathSegment, ...]

# --------------------------------------------------------------------------------------------
# Locating the upstream CRDs


class UpstreamCrdsMissingError(RuntimeError):
    """The pinned upstream CRDs are not where the tests were told to find them."""


def upstream_crds_dir() -> Path:
    """`$QUARTERMASTER_UPSTREAM_CRDS` if set, else `<repo root>/third_party/crds`; must exist."""
    configured = os.environ.get(ENV_VAR)
    directory = Path(configured) if configured else REPO_ROOT / "third_party" / "crds"
    if not directory.is_dir():
        source = f"${ENV_VAR}" if configured else f"the default (${ENV_VAR} is not set)"
        raise UpstreamCrdsMissingError(
            f"upstream CRD directory {directory} from {source} does not exist: the schema "
            "tests need the pinned Kueue, KEDA and Karpenter CRDs (third_party/crds in the "
            f"repository), or set {ENV_VAR} to a folder holding them"
        )
    return directory


def _split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


@functools.cache
def _load_crd(directory: Path, group: str, kind: str) -> dict[str, Any]:
    candidates = []
    for path in sorted(directory.rglob("*.y*ml")):
        text = path.read_text(encoding="utf-8")
        # Cheap filter before parsing: the big CRDs take a while to load.
        if f"group: {group}" not in text or f"kind: {kind}" not in text:
            continue
        for document in yaml.load_all(text, Loader=yaml.CSafeLoader):
            if (
                isinstance(document, dict)
                and document.get("kind") == "CustomResourceDefinition"
                and document["spec"]["group"] == group
                and document["spec"]["names"]["kind"] == kind
            ):
                candidates.append(document)
    if len(candidates) != 1:
        found = "no CustomResourceDefinition" if not candidates else "several CRDs"
        raise LookupError(f"{found} for kind {kind} in group {group} under {directory}")
    return candidates[0]


def crd(api_version: str, kind: str) -> dict[str, Any]:
    """The upstream CustomResourceDefinition of a kind (cached; do not modify it)."""
    group, _ = _split_api_version(api_version)
    return _load_crd(upstream_crds_dir(), group, kind)


def crd_schema(api_version: str, kind: str) -> dict[str, Any]:
    """The openAPIV3Schema of `kind` at the version in `api_version` (cached; do not modify)."""
    _, version = _split_api_version(api_version)
    for served in crd(api_version, kind)["spec"]["versions"]:
        if served["name"] == version:
            if not served.get("served", False):
                raise LookupError(f"{api_version} {kind} is not served by the upstream CRD")
            schema: dict[str, Any] = served["schema"]["openAPIV3Schema"]
            return schema
    raise LookupError(f"the upstream CRD for {kind} has no version {version}")


def _is_namespaced(api_version: str, kind: str) -> bool:
    return bool(crd(api_version, kind)["spec"]["scope"] == "Namespaced")


# --------------------------------------------------------------------------------------------
# Error formatting

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def json_path(path: Sequence[PathSegment]) -> str:
    """`$.spec.limits["nvidia.com/gpu"]`, `$.spec.resourceGroups[0]`."""
    out = "$"
    for segment in path:
        if isinstance(segment, int):
            out += f"[{segment}]"
        elif _IDENTIFIER.match(segment):
            out += f".{segment}"
        else:
            out += f"[{json.dumps(segment)}]"
    return out


def _member(name: str) -> str:
    return json_path((name,)).removeprefix("$")


def _error(path: Sequence[PathSegment], message: str) -> str:
    return f"{json_path(path)}: {message}"


# --------------------------------------------------------------------------------------------
# Formats: only those Kubernetes defines the same way; any other `format` is ignored.

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _int_within(bits: int) -> Callable[[object], bool]:
    def check(value: object) -> bool:
        if not isinstance(value, int) or isinstance(value, bool):
            return True  # `type` reports non-integers
        return bool(-(2 ** (bits - 1)) <= value < 2 ** (bits - 1))

    return check


def _date_time(value: object) -> bool:
    return not isinstance(value, str) or bool(_RFC3339.match(value))


def _format_checker() -> Any:
    checker = jsonschema.FormatChecker(formats=())
    checker.checks("int32")(_int_within(32))
    checker.checks("int64")(_int_within(64))
    checker.checks("date-time")(_date_time)
    return checker


_FORMATS: Any = _format_checker()

# --------------------------------------------------------------------------------------------
# Metadata: what the API server checks on every object, which the CRD schemas leave out.

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_MAX_ANNOTATIONS_BYTES = 256 * 1024


def is_dns_subdomain(value: str) -> bool:
    """RFC 1123 subdomain, as for most object names."""
    return len(value) <= 253 and bool(_DNS_SUBDOMAIN.match(value))


def is_dns_label(value: str) -> bool:
    """RFC 1123 label, as for namespace names."""
    return len(value) <= 63 and bool(_DNS_LABEL.match(value))


def _qualified_name_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and not (prefix and is_dns_subdomain(prefix)):
        return f"prefix {prefix!r} of key {key!r} must be a DNS subdomain (RFC 1123)"
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return (
            f"name part of key {key!r} must be at most 63 alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return None


def _label_value_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return f"label value {value!r} must be a string"
    if value and (len(value) > 63 or not _QUALIFIED_NAME.match(value)):
        return (
            f"label value {value!r} must be empty or at most 63 alphanumerics, '-', '_' or "
            "'.', starting and ending with an alphanumeric"
        )
    return None


def metadata_errors(obj: Mapping[str, Any], *, namespaced: bool) -> list[str]:
    """Name, namespace, label and annotation syntax, as the API server validates ObjectMeta."""
    meta = obj.get("metadata")
    where: JsonPath = ("metadata",)
    if not isinstance(meta, Mapping):
        return [_error(where, "metadata is required and must be an object")]
    errors = []
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        errors.append(_error((*where, "name"), "name is required"))
    elif not is_dns_subdomain(name):
        errors.append(
            _error(
                (*where, "name"),
                f"{name!r} is not a valid name: a DNS subdomain (RFC 1123) of at most 253 "
                "lower-case alphanumerics, '-' or '.'",
            )
        )
    namespace = meta.get("namespace")
    if namespaced and namespace is None:
        errors.append(_error((*where, "namespace"), f"{obj.get('kind')} is namespaced"))
    elif not namespaced and namespace is not None:
        errors.append(_error((*where, "namespace"), f"{obj.get('kind')} is cluster-scoped"))
    elif namespace is not None and not (isinstance(namespace, str) and is_dns_label(namespace)):
        errors.append(_error((*where, "namespace"), f"{namespace!r} is not a DNS label (RFC 1123)"))
    for field in ("labels", "annotations"):
        entries = meta.get(field)
        if entries is None:
            continue
        if not isinstance(entries, Mapping):
            errors.append(_error((*where, field), "must be a map of strings"))
            continue
        for key, value in entries.items():
            problem = _qualified_name_problem(str(key))
            if problem is None:
                if field == "labels":
                    problem = _label_value_problem(value)
                elif not isinstance(value, str):
                    problem = f"annotation value {value!r} must be a string"
            if problem is not None:
                errors.append(_error((*where, field, str(key)), problem))
        if field == "annotations":
            size = sum(len(str(k)) + len(str(v)) for k, v in entries.items())
            if size > _MAX_ANNOTATIONS_BYTES:
                errors.append(_error((*where, field), f"{size} bytes, more than 256 KiB"))
    return errors


# --------------------------------------------------------------------------------------------
# Structural schemas (OpenAPI v3.0 with Kubernetes extensions) as JSON Schema draft 4


def to_json_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A draft-4 JSON Schema enforcing what the API server enforces for a structural schema.

    `nullable` admits null; `x-kubernetes-int-or-string` admits an integer or a string (the
    upstream schemas already spell it as anyOf, this covers those that do not); an object with
    `properties` rejects unknown fields unless it preserves them (strict field validation), and
    an embedded resource also admits apiVersion, kind and metadata. Draft 4 reads the boolean
    `exclusiveMinimum`/`exclusiveMaximum` of OpenAPI 3.0 as they are meant; other
    `x-kubernetes-*` keys are ignored here (list keys and CEL rules have their own checks).
    """
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("properties", "patternProperties"):
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, Mapping):
            out[key] = to_json_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_json_schema(sub) for sub in value]
        elif key == "description" or key.startswith("x-kubernetes-"):
            continue
        else:
            out[key] = copy.deepcopy(value)
    if schema.get("nullable") is True:
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    if schema.get("x-kubernetes-int-or-string") is True and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("x-kubernetes-embedded-resource") is True:
        properties = out.setdefault("properties", {})
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        properties.setdefault("metadata", {"type": "object"})
    if (
        "properties" in out
        and "additionalProperties" not in schema
        and schema.get("x-kubernetes-preserve-unknown-fields") is not True
    ):
        out["additionalProperties"] = False
    return out


def with_defaults(schema: Mapping[str, Any], value: Any) -> Any:
    """A copy of `value` with the schema's defaults filled in, as the API server does."""
    if isinstance(value, Mapping):
        out = dict(value)
        properties: Mapping[str, Any] = schema.get("properties", {})
        for name, sub in properties.items():
            if name not in out and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
        additional = schema.get("additionalProperties")
        for name in list(out):
            if name in properties:
                out[name] = with_defaults(properties[name], out[name])
            elif isinstance(additional, Mapping):
                out[name] = with_defaults(additional, out[name])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [with_defaults(schema["items"], item) for item in value]
    return value


@dataclass(frozen=True)
class _Node:
    schema: Mapping[str, Any]
    value: Any
    path: JsonPath
    schema_path: str
    """The path in the schema: `[*]` for any list item or map value."""


def _walk(
    schema: Mapping[str, Any], value: Any, path: JsonPath = (), at: str = "$"
) -> Iterator[_Node]:
    """Every value present in an object with its schema, outermost first."""
    if value is None:
        return
    yield _Node(schema, value, path, at)
    if isinstance(value, Mapping):
        properties: Mapping[str, Any] = schema.get("properties", {})
        additional = schema.get("additionalProperties")
        for name, item in value.items():
            if name in properties:
                yield from _walk(properties[name], item, (*path, name), at + _member(name))
            elif isinstance(additional, Mapping):
                yield from _walk(additional, item, (*path, name), f"{at}[*]")
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            yield from _walk(schema["items"], item, (*path, index), f"{at}[*]")


def _list_key_errors(node: _Node) -> list[str]:
    """Duplicates in `x-kubernetes-list-type: set` or `map` lists, which the API server rejects."""
    schema, value, path = node.schema, node.value, node.path
    list_type = schema.get("x-kubernetes-list-type")
    if not isinstance(value, list) or list_type not in ("set", "map"):
        return []
    errors = []
    seen: set[str] = set()
    keys: list[str] = schema.get("x-kubernetes-list-map-keys", [])
    for index, item in enumerate(value):
        if list_type == "map" and isinstance(item, Mapping):
            identity = json.dumps([item.get(k) for k in keys])
            described = ", ".join(f"{k}={item.get(k)!r}" for k in keys)
        else:
            identity = json.dumps(item, sort_keys=True)
            described = repr(item)
        if identity in seen:
            errors.append(_error((*path, index), f"duplicate entry ({described})"))
        seen.add(identity)
    return errors


@functools.cache
def _crd_validator(directory: Path, api_version: str, kind: str) -> Any:
    schema = to_json_schema(crd_schema(api_version, kind))
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema, format_checker=_FORMATS)


def _schema_errors(validator: Any, obj: Mapping[str, Any]) -> list[str]:
    errors = sorted(validator.iter_errors(obj), key=lambda e: (list(map(str, e.path)), e.message))
    return [_error(tuple(e.path), e.message) for e in errors]


def validate_against_crd(obj: Mapping[str, Any]) -> list[str]:
    """Everything the upstream CRD's structural schema rejects in `obj`, plus its metadata.

    CEL rules are not included: see `evaluate_cel_rules`.
    """
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    schema = crd_schema(api_version, kind)
    defaulted = with_defaults(schema, obj)
    errors = _schema_errors(_crd_validator(upstream_crds_dir(), api_version, kind), defaulted)
    for node in _walk(schema, defaulted):
        errors.extend(_list_key_errors(node))
    errors.extend(metadata_errors(obj, namespaced=_is_namespaced(api_version, kind)))
    return errors


# --------------------------------------------------------------------------------------------
# Built-in kinds, from the schemas kubernetes_validate ships

_BUILTIN_SCOPES = {
    ("apps/v1", "Deployment"): True,
    ("scheduling.k8s.io/v1", "PriorityClass"): False,
}
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000


@functools.cache
def _builtin_validator(api_version: str, kind: str) -> Any:
    """kubernetes_validate's strict schema for the kind, as its own `validate` builds it.

    Built once and kept, and asked for every error rather than the first.
    """
    group, version = _split_api_version(api_version)
    short_group = group.split(".")[0] if group else ""
    suffix = f"{short_group}-{version}" if short_group else version
    directory = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict"
    schema = kubernetes_validate.utils.schema_contents(
        f"{directory}/{kind.lower()}-{suffix}.json", KUBERNETES_VERSION
    )
    definitions = kubernetes_validate.utils.schema_contents(
        f"{directory}/_definitions.json", KUBERNETES_VERSION
    )
    registry: Any = referencing.Registry()
    registry = referencing.Resource.from_contents(schema) @ registry
    registry = referencing.Resource.from_contents(definitions) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry, format_checker=_FORMATS)


def _deployment_errors(obj: Mapping[str, Any]) -> list[str]:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return []
    selector = spec.get("selector", {}).get("matchLabels", {})
    labels = spec.get("template", {}).get("metadata", {}).get("labels", {})
    if any(labels.get(key) != value for key, value in selector.items()):
        return [
            _error(
                ("spec", "template", "metadata", "labels"),
                "selector does not match template labels",
            )
        ]
    return []


_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})


def _is_extended_resource(name: str) -> bool:
    """Domain-qualified and outside kubernetes.io, as Kubernetes' IsExtendedResourceName."""
    return (
        "/" in name
        and "kubernetes.io/" not in name
        and not name.startswith("requests.")
        and _qualified_name_problem(name) is None
    )


def _container_resource_errors(obj: Mapping[str, Any]) -> list[str]:
    """Resource names a container may ask for, and extended resources' request == limit."""
    errors = []
    pod = obj.get("spec", {}).get("template", {}).get("spec", {})
    for field in ("initContainers", "containers"):
        for index, container in enumerate(pod.get(field) or []):
            resources = container.get("resources") or {}
            requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
            at: JsonPath = ("spec", "template", "spec", field, index, "resources")
            for section, amounts in (("requests", requests), ("limits", limits)):
                for name in amounts:
                    standard = name in _STANDARD_CONTAINER_RESOURCES or name.startswith(
                        "hugepages-"
                    )
                    if not standard and not _is_extended_resource(name):
                        errors.append(
                            _error(
                                (*at, section, name),
                                "must be a standard resource for containers or an extended "
                                "resource with a domain outside kubernetes.io",
                            )
                        )
            for name, amount in requests.items():
                if not _is_extended_resource(name):
                    continue
                if name not in limits:
                    errors.append(
                        _error((*at, "limits", name), "an extended resource needs a limit")
                    )
                elif str(limits[name]) != str(amount):
                    errors.append(
                        _error(
                            (*at, "requests", name), "must equal the limit of an extended resource"
                        )
                    )
    return errors


def _priority_class_errors(obj: Mapping[str, Any]) -> list[str]:
    errors = []
    value = obj.get("value")
    if isinstance(value, int) and value > HIGHEST_USER_DEFINABLE_PRIORITY:
        errors.append(_error(("value",), f"must be at most {HIGHEST_USER_DEFINABLE_PRIORITY}"))
    name = obj.get("metadata", {}).get("name", "")
    if isinstance(name, str) and name.startswith("system-"):
        errors.append(_error(("metadata", "name"), "the 'system-' prefix is reserved"))
    return errors


def validate_builtin(obj: Mapping[str, Any]) -> list[str]:
    """Errors in a Deployment or PriorityClass against Kubernetes' strict OpenAPI schema.

    Also checks what the API server validates beyond the schema and the renderer could get
    wrong: metadata syntax; a Deployment's selector matching its pod labels, and its containers'
    resource names (standard, or extended with a domain) with extended requests equal to limits;
    a PriorityClass's value range and reserved names.
    """
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    if (api_version, kind) not in _BUILTIN_SCOPES:
        raise LookupError(f"no built-in schema checks for {api_version} {kind}")
    errors = _schema_errors(_builtin_validator(api_version, kind), obj)
    errors.extend(metadata_errors(obj, namespaced=_BUILTIN_SCOPES[(api_version, kind)]))
    if kind == "Deployment":
        errors.extend(_deployment_errors(obj))
        errors.extend(_container_resource_errors(obj))
    else:
        errors.extend(_priority_class_errors(obj))
    return errors


def is_builtin(obj: Mapping[str, Any]) -> bool:
    return (obj.get("apiVersion"), obj.get("kind")) in _BUILTIN_SCOPES


def validate(obj: Mapping[str, Any]) -> list[str]:
    """`validate_builtin` for built-in kinds, else `validate_against_crd`."""
    return validate_builtin(obj) if is_builtin(obj) else validate_against_crd(obj)


# --------------------------------------------------------------------------------------------
# CEL rules (x-kubernetes-validations)


@dataclass(frozen=True)
class CelRule:
    """One `x-kubernetes-validations` entry of an upstream CRD."""

    kind: str
    schema_path: str
    """Where in the schema the rule sits; `[*]` stands for any list item or map value."""
    rule: str
    message: str
    field_path: str = ""
    """Where below `schema_path` the API server reports a failure (`fieldPath`), if set."""

    def __str__(self) -> str:
        return f"{self.kind} {self.schema_path}: {self.rule}"


@dataclass(frozen=True)
class UnevaluatedRule:
    rule: CelRule
    reason: str

    def __str__(self) -> str:
        return f"{self.rule} ({self.reason})"


@dataclass(frozen=True)
class CelReport:
    errors: list[str]
    """"<json path>: <message>" for each rule an object breaks."""
    evaluated: list[CelRule]
    """Rules celpy evaluated (once per rule, however many values it was evaluated on)."""
    not_evaluated: list[UnevaluatedRule]
    """Rules on values present in the object that celpy cannot evaluate."""


def _find(value: celtypes.StringType, pattern: celtypes.StringType) -> celtypes.StringType:
    """Kubernetes' regex library `<string>.find(<regex>)`: the first match, or ""."""
    match = re.search(str(pattern), str(value))
    return celtypes.StringType(match.group(0) if match else "")


def _find_all(value: celtypes.StringType, pattern: celtypes.StringType) -> celtypes.ListType:
    """Kubernetes' regex library `<string>.findAll(<regex>)`: every match."""
    return celtypes.ListType(
        [celtypes.StringType(m.group(0)) for m in re.finditer(str(pattern), str(value))]
    )


KUBERNETES_CEL_FUNCTIONS: dict[str, Any] = {"find": _find, "findAll": _find_all}
"""The few functions of the Kubernetes CEL libraries that the upstream rules use and celpy
lacks. Anything else a rule calls that celpy does not provide leaves the rule unevaluated."""

_CEL_MACROS = frozenset({"has", "all", "exists", "exists_one", "map", "filter"})
_CEL_STRING = re.compile(r"""[rR]?("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')""")
_CEL_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


@functools.cache
def _cel_environment() -> Any:
    return celpy.Environment()


@functools.cache
def _cel_program(rule: str) -> tuple[Any, str | None]:
    """The compiled rule, or why celpy cannot evaluate it."""
    code = _CEL_STRING.sub('""', rule)
    if re.search(r"\boldSelf\b", code):
        return None, "transition rule: compares with oldSelf, which only updates have"
    known = set(base_functions) | _CEL_MACROS | set(KUBERNETES_CEL_FUNCTIONS)
    missing = sorted(set(_CEL_CALL.findall(code)) - known)
    if missing:
        return None, f"celpy lacks {', '.join(missing)}"
    try:
        environment = _cel_environment()
        return environment.program(environment.compile(rule), KUBERNETES_CEL_FUNCTIONS), None
    except Exception as error:  # celpy raises several kinds of parse errors
        return None, f"celpy cannot compile it: {type(error).__name__}: {error}"


def _rules_at(schema: Mapping[str, Any], kind: str, path: str) -> list[CelRule]:
    return [
        CelRule(
            kind=kind,
            schema_path=path,
            rule=entry["rule"],
            message=entry.get("message") or f"failed rule: {entry['rule']}",
            field_path=entry.get("fieldPath", ""),
        )
        for entry in schema.get("x-kubernetes-validations", [])
    ]


def crd_cel_rules(api_version: str, kind: str) -> list[CelRule]:
    """Every CEL rule in the kind's upstream schema, outermost first."""
    rules: list[CelRule] = []

    def visit(schema: Mapping[str, Any], path: str) -> None:
        rules.extend(_rules_at(schema, kind, path))
        for name, sub in schema.get("properties", {}).items():
            visit(sub, path + _member(name))
        for key in ("items", "additionalProperties"):
            if isinstance(schema.get(key), Mapping):
                visit(schema[key], f"{path}[*]")

    visit(crd_schema(api_version, kind), "$")
    return rules


def unevaluable_cel_rules(api_version: str, kind: str) -> list[UnevaluatedRule]:
    """The kind's rules celpy cannot evaluate, whatever the object."""
    out = []
    for rule in crd_cel_rules(api_version, kind):
        _, reason = _cel_program(rule.rule)
        if reason is not None:
            out.append(UnevaluatedRule(rule, reason))
    return out


def evaluate_cel_rules(obj: Mapping[str, Any]) -> CelReport:
    """Evaluate the upstream CRD's CEL rules on every value of `obj` they apply to.

    As in the API server, rules see the object with defaults applied, and a rule on a field
    runs only when the field is present, once per list item or map value it applies to.
    """
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    schema = crd_schema(api_version, kind)
    errors: list[str] = []
    evaluated: dict[CelRule, None] = {}
    not_evaluated: dict[UnevaluatedRule, None] = {}
    for node in _walk(schema, with_defaults(schema, obj)):
        rules = _rules_at(node.schema, kind, node.schema_path)
        if not rules:
            continue
        cel_value = json_to_cel(node.value)
        for rule in rules:
            program, reason = _cel_program(rule.rule)
            if program is None:
                not_evaluated[UnevaluatedRule(rule, reason or "")] = None
                continue
            try:
                result = program.evaluate({"self": cel_value})
            except CELEvalError as error:
                result = error
            evaluated[rule] = None
            where = json_path(node.path) + rule.field_path
            if isinstance(result, CELEvalError):
                errors.append(f"{where}: {rule.message} (the rule could not run: {result.args[0]})")
            elif not (isinstance(result, celtypes.BoolType) and bool(result)):
                errors.append(f"{where}: {rule.message}")
    return CelReport(errors=errors, evaluated=list(evaluated), not_evaluated=list(not_evaluated))


_CLUSTER_SCOPED_BUILTINS = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "PriorityClass",
        "CustomResourceDefinition",
        "MutatingWebhookConfiguration",
    }
)


def validate_any_builtin(obj: Mapping[str, Any]) -> list[str]:
    """Errors in any built-in object (Service, Role, NetworkPolicy, ...) against Kubernetes'
    strict OpenAPI schema, plus metadata syntax; Deployments get the extra checks of
    `validate_builtin`. For the install manifests, whose kinds the test API server cannot serve.
    """
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    if (api_version, kind) in _BUILTIN_SCOPES:
        return validate_builtin(obj)
    errors = _schema_errors(_builtin_validator(api_version, kind), obj)
    errors.extend(metadata_errors(obj, namespaced=kind not in _CLUSTER_SCOPED_BUILTINS))
    return errors
