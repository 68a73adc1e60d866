"""Every cross-field rule says the same thing in CEL (for the API server) and in Python.

For each case, the CEL expression is evaluated with cel-python on the object as the API server
would see it, and compared with the rule's Python predicate on the dataclass built from the
same JSON. "As the API server sees it" means two things CEL depends on:

* Defaults from the CRD schema are applied first (the API server defaults before it runs
  validation rules), so `self.minGpus` is 0 where a user left it out rather than an error.
* Fields of `type: number` are doubles, even when written as `1` (the API server converts
  them; CEL has no `int <= double` overload).

A case may leave out optional fields; those cases are what make the defaulting matter.
"""

from __future__ import annotations

import copy
import dataclasses
from datetime import datetime
from typing import Any

import celpy
import pytest
from celpy.adapter import json_to_cel
from celpy.celtypes import BoolType

from controller.api import types
from controller.api.crds import capacity_policy_crd, training_project_crd
from controller.api.fields import Rule
from controller.api.introspect import Kind, fields_of, item_hint, kind_of, rules_of
from controller.api.loader import parse_document
from controller.api.parse import FieldError, parse_object
from controller.api.schema import object_schema
from controller.api.types import (
    Deadline,
    GpuPool,
    OnDemandBounds,
    Override,
    PoolQuota,
    Prices,
    RiskSettings,
    TrainingProjectSpec,
    WarmPoolBounds,
)
from tests.builders import policy_doc, pool_doc, set_path


def classes_with_rules() -> list[type]:
    return [
        cls
        for cls in vars(types).values()
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and rules_of(cls)
    ]


# --------------------------------------------------------------------------- evaluating


def as_api_server_sees(schema: dict[str, Any], value: Any) -> Any:
    """`value` with the schema's defaults applied and its numbers as doubles."""
    kind = schema.get("type")
    if kind == "object" and isinstance(value, dict):
        out = dict(value)
        properties: dict[str, Any] = schema.get("properties", {})
        for name, prop in properties.items():
            if name not in out and "default" in prop:
                out[name] = copy.deepcopy(prop["default"])
            if name in out:
                out[name] = as_api_server_sees(prop, out[name])
        return out
    if kind == "array" and isinstance(value, list):
        return [as_api_server_sees(schema["items"], item) for item in value]
    if kind == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def evaluate_cel(expression: str, value: Any) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    result = program.evaluate({"self": json_to_cel(value)})
    assert isinstance(result, BoolType), f"{expression} gave {result!r}"
    return bool(result)


def build(hint: Any, value: Any) -> Any:
    """The dataclass (or value) for JSON `value`, with no validation and no rules applied.

    Absent fields take the dataclass defaults, so the predicate sees what the parser would
    hand it, and the rule under test is the only thing deciding the outcome.
    """
    kind = kind_of(hint)
    if kind is Kind.OBJECT:
        return hint(
            **{
                info.name: build(info.hint, value[info.json_name])
                for info in fields_of(hint)
                if value.get(info.json_name) is not None
            }
        )
    if kind is Kind.ARRAY:
        return tuple(build(item_hint(hint), item) for item in value)
    if kind is Kind.ENUM:
        return hint(value)
    if kind is Kind.DATETIME:
        return datetime.fromisoformat(value)
    if kind is Kind.NUMBER:
        return float(value)
    return value


# --------------------------------------------------------------------------- cases

AT = "2026-12-01T18:00:00Z"

CASES = [
    # Prices: spotPerGpuHour <= onDemandPerGpuHour
    pytest.param(Prices, {"spotPerGpuHour": 1.29, "onDemandPerGpuHour": 4.1}, id="spot cheaper"),
    pytest.param(Prices, {"spotPerGpuHour": 4, "onDemandPerGpuHour": 4.0}, id="spot the same"),
    pytest.param(Prices, {"spotPerGpuHour": 5, "onDemandPerGpuHour": 4}, id="spot dearer"),
    pytest.param(Prices, {"spotPerGpuHour": 0, "onDemandPerGpuHour": 0.01}, id="spot free"),
    # OnDemandBounds: floorGpus <= ceilingGpus (floorGpus defaults to 0)
    pytest.param(OnDemandBounds, {"ceilingGpus": 64}, id="floor absent, so 0 is under any ceiling"),
    pytest.param(OnDemandBounds, {"ceilingGpus": 0}, id="floor absent and ceiling 0"),
    pytest.param(OnDemandBounds, {"floorGpus": 8, "ceilingGpus": 8}, id="floor at the ceiling"),
    pytest.param(OnDemandBounds, {"floorGpus": 9, "ceilingGpus": 8}, id="floor over the ceiling"),
    # WarmPoolBounds: minGpus <= maxGpus (both default to 0)
    pytest.param(WarmPoolBounds, {}, id="warm pool with both bounds absent"),
    pytest.param(WarmPoolBounds, {"maxGpus": 16}, id="warm pool minimum absent"),
    pytest.param(WarmPoolBounds, {"minGpus": 1}, id="warm pool maximum absent under a minimum"),
    pytest.param(WarmPoolBounds, {"minGpus": 8, "maxGpus": 8}, id="warm pool min equals max"),
    pytest.param(WarmPoolBounds, {"minGpus": 9, "maxGpus": 8}, id="warm pool min over max"),
    # GpuPool: onDemand.ceilingGpus <= maxGpus and warmPool.maxGpus <= maxGpus
    pytest.param(GpuPool, pool_doc(), id="the builders' pool"),
    pytest.param(GpuPool, pool_doc(maxGpus=64), id="on-demand ceiling equal to maxGpus"),
    pytest.param(GpuPool, pool_doc(maxGpus=63), id="on-demand ceiling over maxGpus"),
    pytest.param(
        GpuPool, pool_doc(warmPool={"maxGpus": 128}), id="warm pool maximum equal to maxGpus"
    ),
    pytest.param(GpuPool, pool_doc(warmPool={"maxGpus": 129}), id="warm pool maximum over maxGpus"),
    pytest.param(GpuPool, pool_doc(warmPool={"minGpus": 0}), id="warm pool maximum absent, so 0"),
    # GpuPool: gpuResource outside kubernetes.io; nodeLabels free of reserved keys
    pytest.param(GpuPool, pool_doc(gpuResource="amd.com/gpu"), id="an AMD GPU resource"),
    pytest.param(
        GpuPool, pool_doc(gpuResource="kubernetes.io/gpu"), id="a GPU resource in kubernetes.io"
    ),
    pytest.param(
        GpuPool, pool_doc(gpuResource="sub.kubernetes.io/gpu"), id="a GPU resource in a subdomain"
    ),
    pytest.param(
        GpuPool, pool_doc(nodeLabels={"example.com/rack": "r1"}), id="a node label of our own"
    ),
    pytest.param(
        GpuPool,
        pool_doc(nodeLabels={"karpenter.k8s.aws/instance-family": "p4d"}),
        id="a node label of the cloud provider's Karpenter domain",
    ),
    pytest.param(
        GpuPool, pool_doc(nodeLabels={"karpenter.sh/team": "ml"}), id="a karpenter.sh label"
    ),
    pytest.param(
        GpuPool,
        pool_doc(nodeLabels={"topology.kubernetes.io/zone": "b"}),
        id="a zone label the controller sets itself",
    ),
    pytest.param(
        GpuPool,
        pool_doc(maxGpus=8, onDemand={"ceilingGpus": 9}, warmPool={"maxGpus": 9}),
        id="both the ceiling and the warm pool over maxGpus",
    ),
    # RiskSettings: lowerThreshold < raiseThreshold (0.05 and 0.2 by default)
    pytest.param(RiskSettings, {}, id="risk thresholds both defaulted"),
    pytest.param(RiskSettings, {"raiseThreshold": 0.05}, id="raise set to the default lower"),
    pytest.param(RiskSettings, {"lowerThreshold": 0.19}, id="lower just under the default raise"),
    pytest.param(RiskSettings, {"lowerThreshold": 0.5, "raiseThreshold": 0.4}, id="lower over"),
    pytest.param(RiskSettings, {"lowerThreshold": 0, "raiseThreshold": 1}, id="extremes"),
    # Override: onDemandGpus set if and only if mode is Manual
    pytest.param(Override, {}, id="override absent fields mean Auto without gpus"),
    pytest.param(Override, {"mode": "Freeze"}, id="Freeze without gpus"),
    pytest.param(
        Override,
        {"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": 8}]},
        id="Manual with gpus",
    ),
    pytest.param(Override, {"mode": "Manual"}, id="Manual without gpus"),
    pytest.param(Override, {"mode": "Manual", "onDemandGpus": []}, id="Manual with an empty list"),
    pytest.param(
        Override,
        {"mode": "Freeze", "onDemandGpus": [{"pool": "a100", "gpus": 8}]},
        id="Freeze with gpus",
    ),
    pytest.param(
        Override, {"onDemandGpus": [{"pool": "a100", "gpus": 0}]}, id="default Auto with gpus"
    ),
    # PoolQuota: lendingLimitGpus absent or <= nominalGpus
    pytest.param(PoolQuota, {"pool": "a100", "nominalGpus": 16}, id="no lending limit"),
    pytest.param(
        PoolQuota,
        {"pool": "a100", "nominalGpus": 16, "lendingLimitGpus": 16},
        id="lending everything",
    ),
    pytest.param(
        PoolQuota,
        {"pool": "a100", "nominalGpus": 16, "lendingLimitGpus": 17},
        id="lending more than nominal",
    ),
    pytest.param(
        PoolQuota,
        {"pool": "a100", "nominalGpus": 0, "lendingLimitGpus": 0, "borrowingLimitGpus": 8},
        id="lending nothing of nothing",
    ),
    # Deadline: exactly one of at and schedule; timeZone only with schedule
    pytest.param(Deadline, {"name": "d", "at": AT}, id="a one-off deadline"),
    pytest.param(Deadline, {"name": "d", "schedule": "@weekly"}, id="a recurring deadline"),
    pytest.param(
        Deadline,
        {"name": "d", "schedule": "0 18 * * FRI", "timeZone": "Europe/Berlin"},
        id="a recurring deadline with a time zone",
    ),
    pytest.param(Deadline, {"name": "d"}, id="a deadline with neither"),
    pytest.param(Deadline, {"name": "d", "at": AT, "schedule": "@daily"}, id="both"),
    pytest.param(Deadline, {"name": "d", "at": AT, "timeZone": "UTC"}, id="a one-off in a zone"),
    pytest.param(Deadline, {"name": "d", "timeZone": "UTC"}, id="only a time zone"),
    # TrainingProjectSpec: borrowing and lending limits need shareCapacity
    pytest.param(
        TrainingProjectSpec,
        {"tier": "t", "namespaces": ["n"], "quotas": [{"pool": "p", "nominalGpus": 1}]},
        id="shareCapacity absent, so true, without limits",
    ),
    pytest.param(
        TrainingProjectSpec,
        {
            "tier": "t",
            "namespaces": ["n"],
            "quotas": [{"pool": "p", "nominalGpus": 4, "borrowingLimitGpus": 2}],
        },
        id="shareCapacity absent, so true, with a borrowing limit",
    ),
    pytest.param(
        TrainingProjectSpec,
        {
            "tier": "t",
            "namespaces": ["n"],
            "shareCapacity": False,
            "quotas": [{"pool": "p", "nominalGpus": 4}, {"pool": "q", "nominalGpus": 4}],
        },
        id="not sharing, without limits",
    ),
    pytest.param(
        TrainingProjectSpec,
        {
            "tier": "t",
            "namespaces": ["n"],
            "shareCapacity": False,
            "quotas": [
                {"pool": "p", "nominalGpus": 4},
                {"pool": "q", "nominalGpus": 4, "lendingLimitGpus": 0},
            ],
        },
        id="not sharing, with a lending limit of 0 on the second quota",
    ),
    pytest.param(
        TrainingProjectSpec,
        {
            "tier": "t",
            "namespaces": ["n"],
            "shareCapacity": False,
            "quotas": [{"pool": "p", "nominalGpus": 4, "borrowingLimitGpus": 0}],
        },
        id="not sharing, with a borrowing limit",
    ),
]


@pytest.mark.parametrize(("cls", "obj"), CASES)
def test_cel_and_python_agree(cls: type, obj: dict[str, Any]) -> None:
    seen = as_api_server_sees(object_schema(cls), obj)
    built = build(cls, obj)
    failing: list[Rule] = []
    for rule in rules_of(cls):
        python = rule.check(built)
        assert evaluate_cel(rule.cel, seen) is python, f"{rule.cel} disagrees with Python"
        if not python:
            failing.append(rule)
    # The parser applies exactly these predicates, and nothing else about the case is wrong.
    errors: list[FieldError] = []
    parsed = parse_object(cls, obj, "self", errors)
    assert sorted(errors) == sorted(
        FieldError("self" + (rule.field_path or ""), rule.message) for rule in failing
    )
    assert parsed == (None if failing else built)


def test_every_rule_has_cases_where_it_holds_and_where_it_fails() -> None:
    """A class that gains a rule, or a rule without both outcomes covered, fails here."""
    outcomes: dict[tuple[str, str], list[bool]] = {}
    for case in CASES:
        cls, obj = case.values
        assert isinstance(cls, type)
        built = build(cls, obj)
        for rule in rules_of(cls):
            outcomes.setdefault((cls.__name__, rule.cel), []).append(rule.check(built))
    expected = {(cls.__name__, rule.cel) for cls in classes_with_rules() for rule in rules_of(cls)}
    assert set(outcomes) == expected
    thin = {
        key: results
        for key, results in outcomes.items()
        if len(results) < 3 or all(results) or not any(results)
    }
    assert thin == {}


# --------------------------------------------------------------------------- CRD-level rules


def _validations(schema: dict[str, Any], path: str) -> list[tuple[str, str]]:
    """(path, rule) of every x-kubernetes-validations rule in a CRD schema."""
    found = [(path, v["rule"]) for v in schema.get("x-kubernetes-validations", [])]
    for name, prop in schema.get("properties", {}).items():
        found += _validations(prop, f"{path}.{name}")
    if "items" in schema:
        found += _validations(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        found += _validations(schema["additionalProperties"], f"{path}[*]")
    return found


CRDS = {
    crd["spec"]["names"]["kind"]: crd for crd in (capacity_policy_crd(), training_project_crd())
}


def _root(kind: str) -> dict[str, Any]:
    root: dict[str, Any] = CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return root


@pytest.mark.parametrize(
    ("kind", "path", "rule"),
    [
        pytest.param(kind, path, rule, id=f"{kind}{path}: {rule}")
        for kind in CRDS
        for path, rule in _validations(_root(kind), "")
    ],
)
def test_every_rule_in_the_crds_compiles(kind: str, path: str, rule: str) -> None:
    env = celpy.Environment()
    env.program(env.compile(rule))


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("fleet", id="a plain name"),
        pytest.param("gpu-fleet-2", id="hyphens and digits"),
        pytest.param("f" * 63, id="63 characters"),
        pytest.param("f" * 64, id="64 characters"),
        pytest.param("Fleet", id="a capital"),
        pytest.param("-fleet", id="a leading hyphen"),
        pytest.param("fleet-", id="a trailing hyphen"),
        pytest.param("gpu.fleet", id="a dot"),
        pytest.param("gpu_fleet", id="an underscore"),
    ],
)
def test_the_crds_name_rule_agrees_with_the_loader(name: str) -> None:
    (rule,) = _root("CapacityPolicy")["x-kubernetes-validations"]
    doc = set_path(policy_doc(), "metadata.name", name)
    _, errors = parse_document("policy.yaml", doc)
    loader_accepts = not [e for e in errors if e.path == "metadata.name"]
    assert evaluate_cel(rule["rule"], doc) is loader_accepts
