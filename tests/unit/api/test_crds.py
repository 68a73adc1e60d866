"""The CRDs in manifests/crds/: current, complete, and in agreement with the parser.

The CRD schema is what the API server enforces on `kubectl apply`; `controller.api.parse` is
what `quartermaster validate` and the controller enforce. Both come from the dataclasses in
`controller.api.types`, and these tests check that nothing falls between them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml
from celpy.adapter import json_to_cel

from controller.api.crds import crd_files
from controller.api.loader import load_path, parse_document, read_documents
from tests.builders import DELETE, policy_doc, project_doc, set_path

ROOT = Path(__file__).resolve().parents[3]
CRD_DIR = ROOT / "manifests" / "crds"
EXAMPLES = ROOT / "controller" / "examples"


def committed_crds() -> dict[str, dict[str, Any]]:
    """The committed CRDs by kind, as the cluster gets them."""
    crds = [yaml.safe_load(path.read_text()) for path in sorted(CRD_DIR.glob("*.yaml"))]
    return {
        crd["spec"]["names"]["kind"]: crd
        for crd in crds
        if crd["kind"] == "CustomResourceDefinition"
    }


CRDS = committed_crds()
KINDS = sorted(CRDS)


def version(kind: str) -> dict[str, Any]:
    (served,) = CRDS[kind]["spec"]["versions"]
    assert isinstance(served, dict)
    return served


def root_schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = version(kind)["schema"]["openAPIV3Schema"]
    return schema


# --------------------------------------------------------------------------- (a) up to date


def test_the_committed_crds_are_exactly_what_the_types_generate() -> None:
    expected = crd_files()
    committed = {path.name: path.read_bytes() for path in sorted(CRD_DIR.glob("*.yaml"))}
    stale = sorted(
        name
        for name in expected.keys() | committed.keys()
        if committed.get(name) != expected.get(name, "").encode()
    )
    assert stale == [], (
        f"manifests/crds/ is out of date with controller/api/types.py ({', '.join(stale)}): "
        "run `make crds` (python -m controller.api.crds manifests/crds) and commit the result"
    )


# --------------------------------------------------------------------------- (b) complete
#
# Walking each CRD's openAPIV3Schema, every node must satisfy:
#
# * it has a `type` (a structural schema needs one on every node);
# * if it is a property of an object, it has a non-empty `description` (this is what
#   `kubectl explain` shows);
# * if it is an array, it has `maxItems`;
# * if it is a string (a property, an array item or a map value), it has `maxLength`, `enum`
#   or `format`. The API server cannot estimate the cost of CEL rules over unbounded strings
#   and lists, and rejects a CRD whose rules may cost too much.
#
# The root's apiVersion, kind and metadata are exempt: the API server validates them itself,
# and a CRD may not constrain metadata beyond name.


EXEMPT = {".apiVersion", ".kind", ".metadata"}


def schema_nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, role, schema) of every node; role is 'property', 'item', 'value' or 'root'."""
    yield path, "root", schema
    yield from _children(schema, path)


def _children(schema: dict[str, Any], path: str) -> Iterator[tuple[str, str, Any]]:
    for name, prop in schema.get("properties", {}).items():
        yield f"{path}.{name}", "property", prop
        yield from _children(prop, f"{path}.{name}")
    if "items" in schema:
        yield f"{path}[]", "item", schema["items"]
        yield from _children(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield f"{path}[*]", "value", schema["additionalProperties"]
        yield from _children(schema["additionalProperties"], f"{path}[*]")


def schema_problems(schema: dict[str, Any]) -> list[str]:
    problems = []
    for path, role, node in schema_nodes(schema):
        if path in EXEMPT:
            continue
        if "type" not in node:
            problems.append(f"{path}: no type")
        if role == "property" and not str(node.get("description", "")).strip():
            problems.append(f"{path}: no description")
        if node.get("type") == "array" and "maxItems" not in node:
            problems.append(f"{path}: array without maxItems")
        if node.get("type") == "string" and not {"maxLength", "enum", "format"} & node.keys():
            problems.append(f"{path}: string without maxLength, enum or format")
    return problems


@pytest.mark.parametrize("kind", KINDS)
def test_every_field_is_described_and_bounded(kind: str) -> None:
    assert schema_problems(root_schema(kind)) == []


def test_the_completeness_check_finds_what_it_looks_for() -> None:
    """The walk above reaches nested properties, array items and map values."""
    schema = {
        "type": "object",
        "properties": {
            "tags": {
                "type": "array",
                "description": "tags",
                "items": {"type": "object", "properties": {"value": {"type": "string"}}},
            },
            "labels": {
                "type": "object",
                "description": "labels",
                "additionalProperties": {"type": "string"},
            },
            "name": {"type": "string", "maxLength": 3},
        },
    }
    assert schema_problems(schema) == [
        ".tags: array without maxItems",
        ".tags[].value: no description",
        ".tags[].value: string without maxLength, enum or format",
        ".labels[*]: string without maxLength, enum or format",
        ".name: no description",
    ]


# --------------------------------------------------------------------------- (c) agreement
#
# The CRD schema is OpenAPI 3.0, which for the keywords we use is JSON Schema draft 4:
# `exclusiveMinimum` is a boolean beside `minimum`. `x-kubernetes-*` keys are annotations to
# jsonschema (list types and CEL rules are checked in test_rules.py and test_validation.py),
# and `default` is not applied. Without the rfc3339-validator package jsonschema does not
# check `format: date-time`, so no date case is here.


def validator(kind: str) -> jsonschema.Draft4Validator:
    schema = root_schema(kind)
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def schema_error_paths(doc: dict[str, Any]) -> set[str]:
    """Where the CRD schema finds `doc` wrong, as Kubernetes field paths."""
    paths: set[str] = set()
    for error in validator(doc["kind"]).iter_errors(doc):
        path = ""
        for part in error.absolute_path:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
        if error.validator == "required":
            # jsonschema reports a missing field at its parent; we report the field.
            missing = [k for k in error.validator_value if k not in error.instance]
            paths.update(f"{path}.{name}" if path else name for name in missing)
        else:
            paths.add(path)
    return paths


def parser_error_paths(doc: dict[str, Any]) -> set[str]:
    _, errors = parse_document("doc.yaml", doc)
    return {e.path for e in errors}


def example_documents() -> list[tuple[str, Any]]:
    documents, errors = read_documents(EXAMPLES)
    assert errors == []
    return documents


@pytest.mark.parametrize(
    "doc",
    [pytest.param(doc, id=Path(origin).name) for origin, doc in example_documents()],
)
def test_the_examples_validate_against_the_crds(doc: dict[str, Any]) -> None:
    assert [e.message for e in validator(doc["kind"]).iter_errors(doc)] == []


def test_the_examples_load_with_the_parser_too() -> None:
    policy_set = load_path(EXAMPLES)
    assert policy_set.policy.name == "gpu-fleet"
    assert len(policy_set.projects) == 7


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(
            set_path(policy_doc(), "spec.pools[0].maxGpus", "128"),
            id="a quoted integer",
        ),
        pytest.param(
            set_path(policy_doc(), "spec.pools[0].gpusPerNode", True),
            id="a boolean for an integer",
        ),
        pytest.param(
            set_path(policy_doc(), "spec.pools[0].prices.onDemandPerGpuHour", 0),
            id="zero against an exclusive minimum",
        ),
        pytest.param(
            set_path(policy_doc(), "spec.risk", {"raiseThreshold": 1.5}),
            id="a probability above 1",
        ),
        pytest.param(
            set_path(policy_doc(), "spec.tiers[1].preemption", "Always"),
            id="an unsupported enum value",
        ),
        pytest.param(
            set_path(policy_doc(), "spec.tiers[0].name", "Production"),
            id="a name that is not a DNS label",
        ),
        pytest.param(
            set_path(policy_doc(), "spec.pools[0].name", "a" * 41),
            id="a pool name over 40 characters",
        ),
        pytest.param(
            set_path(policy_doc(), "spec.pools[0].zones", []),
            id="an empty list that needs an item",
        ),
        pytest.param(
            set_path(policy_doc(), "spec.pools[0].nodeClass.name", DELETE),
            id="a missing nested required field",
        ),
        pytest.param(
            set_path(policy_doc(), "spec.pools[0].nodeLabels", {"example.com/zone": "east 1"}),
            id="a label value with a space",
        ),
        pytest.param(
            set_path(project_doc(), "spec.namespaces", [f"ns-{i}" for i in range(33)]),
            id="more namespaces than allowed",
        ),
        pytest.param(
            set_path(project_doc(), "spec.quotas[0].nominalGpus", DELETE),
            id="a quota without nominalGpus",
        ),
        pytest.param(
            set_path(
                project_doc(),
                "spec.deadlines",
                [{"name": "d", "schedule": "0 18 * *", "targetConfidence": 0.2}],
            ),
            id="a deadline with a bad schedule and a low confidence",
        ),
        pytest.param(
            set_path(project_doc(), "spec", DELETE),
            id="no spec",
        ),
    ],
)
def test_the_crd_and_the_parser_reject_a_bad_field_at_the_same_path(doc: dict[str, Any]) -> None:
    parser_paths = parser_error_paths(doc)
    assert parser_paths
    assert schema_error_paths(doc) == parser_paths


def map_schemas() -> list[Any]:
    return [
        pytest.param(node, id=f"{kind}{path}")
        for kind in KINDS
        for path, _, node in schema_nodes(root_schema(kind))
        if node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict)
    ]


def cel_holds(rule: str, value: Any) -> bool:
    env = celpy.Environment()
    return bool(env.program(env.compile(rule)).evaluate({"self": json_to_cel(value)}))


@pytest.mark.parametrize("schema", map_schemas())
def test_label_maps_take_label_values_as_the_parser_does(schema: dict[str, Any]) -> None:
    values = schema["additionalProperties"]
    assert values["maxLength"] == 63
    assert re.match(values["pattern"], "datasets-east_1.a")
    assert not re.match(values["pattern"], "east 1")


@pytest.mark.parametrize("schema", map_schemas())
def test_label_maps_reject_a_bad_key_as_the_parser_does(schema: dict[str, Any]) -> None:
    rules = [v["rule"] for v in schema.get("x-kubernetes-validations", [])]
    assert all(cel_holds(rule, {"example.com/data-locality": "east"}) for rule in rules)
    assert not all(cel_holds(rule, {"data locality": "east"}) for rule in rules)


# --------------------------------------------------------------------------- (d) kubectl


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        pytest.param("CapacityPolicy", ["Mode", "Projects", "Ready", "Age"], id="CapacityPolicy"),
        pytest.param(
            "TrainingProject",
            ["Tier", "GPUs", "Risk", "Slack", "Lost", "Ready", "Age"],
            id="TrainingProject",
        ),
    ],
)
def test_kubectl_get_shows_these_columns(kind: str, columns: list[str]) -> None:
    assert [c["name"] for c in version(kind)["additionalPrinterColumns"]] == columns


def resolve(schema: dict[str, Any], json_path: str) -> dict[str, Any]:
    """The schema node a printer column's JSONPath (`.a.b[?(...)].c`) selects."""
    node = schema
    for part in re.sub(r"\[\?\(.*?\)\]", ".[]", json_path).strip(".").split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


@pytest.mark.parametrize("kind", KINDS)
def test_every_printer_column_shows_a_field_of_its_type(kind: str) -> None:
    schema = root_schema(kind)
    for column in version(kind)["additionalPrinterColumns"]:
        if column["jsonPath"].startswith(".metadata."):
            assert column["type"] == "date"
            continue
        assert resolve(schema, column["jsonPath"])["type"] == column["type"], column["name"]


@pytest.mark.parametrize(
    ("kind", "short_names"),
    [
        pytest.param("CapacityPolicy", ["cpol"], id="CapacityPolicy"),
        pytest.param("TrainingProject", ["tproj"], id="TrainingProject"),
    ],
)
def test_each_kind_has_short_names(kind: str, short_names: list[str]) -> None:
    assert CRDS[kind]["spec"]["names"]["shortNames"] == short_names


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_cluster_scoped_with_a_status_subresource(kind: str) -> None:
    assert CRDS[kind]["spec"]["scope"] == "Cluster"
    assert version(kind)["subresources"] == {"status": {}}
    assert version(kind)["served"] is True
    assert version(kind)["storage"] is True
