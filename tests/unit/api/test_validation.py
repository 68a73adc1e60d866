"""What `quartermaster validate` says about bad policies, and that it says all of it at once.

Each case changes one thing in an otherwise valid CapacityPolicy + TrainingProject pair and
states the exact errors expected, as (kind, name, path, message). Comparing the sorted lists
makes an extra error (noise) fail a case as surely as a missing one.

Cases marked `KNOWN_BUG` assert the behaviour we want but do not have yet; they are strict
xfails, so fixing the bug makes them fail until the mark is removed.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from controller.api import types
from controller.api.introspect import Kind, fields_of, item_hint, kind_of, rules_of, to_json
from controller.api.loader import load_path, load_policy_set
from controller.api.parse import FieldError, parse_object
from controller.api.policy_set import InvalidPolicyError, PolicyError, PolicyWarning
from controller.api.semantics import policy_warnings
from controller.api.types import CapacityPolicySpec, TrainingProjectSpec
from tests.builders import DELETE, policy_doc, pool_doc, project_doc, set_path

Docs = list[tuple[str, Any]]
Error = tuple[str, str, str, str]

POLICY_ORIGIN = "policy.yaml"
PROJECT_ORIGIN = "projects.yaml"

DNS_LABEL = (
    "must be a lowercase RFC 1123 label (a-z, 0-9 and '-', starting and ending alphanumeric)"
)
LABEL_VALUE = "must be a label value (alphanumerics, '-', '_' or '.', at most 63)"
QUALIFIED_NAME = "must be a qualified name such as 'nvidia.com/gpu' or 'example.com/key'"
EXTENDED_RESOURCE = "must be an extended resource name with a domain, such as 'nvidia.com/gpu'"
RFC3339 = "must be an RFC 3339 time with a time zone, such as 2026-12-01T18:00:00Z"
OBJECT_NAME = "must be a lowercase RFC 1123 label of at most 63 characters"
NO_POLICY = "no CapacityPolicy found; exactly one is required"


def KNOWN_BUG(  # noqa: N802 - reads as a marker
    reason: str, raises: type[BaseException] = AssertionError
) -> pytest.MarkDecorator:
    """A case asserting the right behaviour that the code does not have yet (see reason)."""
    return pytest.mark.xfail(reason=reason, strict=True, raises=raises)


def policy_with(path: str, value: Any) -> Docs:
    """The valid policy with `path` set to `value` (or removed), beside the valid project."""
    return [(POLICY_ORIGIN, set_path(policy_doc(), path, value)), (PROJECT_ORIGIN, project_doc())]


def project_with(path: str, value: Any) -> Docs:
    """The valid policy beside the valid project with `path` set to `value` (or removed)."""
    return [(POLICY_ORIGIN, policy_doc()), (PROJECT_ORIGIN, set_path(project_doc(), path, value))]


def with_projects(*projects: dict[str, Any], policy: dict[str, Any] | None = None) -> Docs:
    """A policy (the valid one unless given) and the given projects, one origin each."""
    docs: Docs = [(POLICY_ORIGIN, policy if policy is not None else policy_doc())]
    docs.extend((f"{p['metadata']['name']}.yaml", p) for p in projects)
    return docs


def deadline(**fields: Any) -> list[dict[str, Any]]:
    """A project's deadlines list holding one deadline named `launch` with `fields`."""
    return [{"name": "launch", **fields}]


def policy_error(path: str, message: str, name: str = "fleet") -> Error:
    return ("CapacityPolicy", name, path, message)


def project_error(path: str, message: str, name: str = "vision") -> Error:
    return ("TrainingProject", name, path, message)


def raised(docs: Docs) -> list[PolicyError]:
    """The errors loading `docs` raises; none when they load (so an assertion shows the diff)."""
    try:
        load_policy_set(docs)
    except InvalidPolicyError as invalid:
        return list(invalid.errors)
    return []


def reported(docs: Docs) -> list[Error]:
    return sorted((e.kind, e.name, e.path, e.message) for e in raised(docs))


def test_the_documents_every_case_starts_from_are_valid() -> None:
    policy_set = load_policy_set([(POLICY_ORIGIN, policy_doc()), (PROJECT_ORIGIN, project_doc())])
    assert policy_set.policy.name == "fleet"
    assert [p.name for p in policy_set.projects] == ["vision"]


# --------------------------------------------------------------------------- the table

CASES = [
    # ---------------------------------------------------------------- wrong types
    pytest.param(
        policy_with("spec.pools[0].maxGpus", "128"),
        [policy_error("spec.pools[0].maxGpus", 'must be an integer, got string "128"')],
        id="maxGpus is a quoted string, not an integer",
    ),
    pytest.param(
        project_with("spec.quotas[0].nominalGpus", 2.5),
        [project_error("spec.quotas[0].nominalGpus", "must be an integer, got number 2.5")],
        id="nominalGpus is a fraction, not an integer",
    ),
    pytest.param(
        policy_with("spec.pools[0].prices.spotPerGpuHour", True),
        [policy_error("spec.pools[0].prices.spotPerGpuHour", "must be a number, got boolean true")],
        id="spotPerGpuHour is a boolean, not a number",
    ),
    pytest.param(
        policy_with("spec.tiers[0].name", 5),
        [policy_error("spec.tiers[0].name", "must be a string, got integer 5")],
        id="a tier name is a number, not a string",
    ),
    pytest.param(
        project_with("spec.allowSpot", "yes"),
        [project_error("spec.allowSpot", 'must be a boolean, got string "yes"')],
        id="allowSpot is the string yes, not a boolean",
    ),
    pytest.param(
        project_with("spec.namespaces", {"name": "vision"}),
        [project_error("spec.namespaces", 'must be an array, got object {"name": "vision"}')],
        id="namespaces is an object, not a list",
    ),
    pytest.param(
        project_with("spec", ["vision"]),
        [project_error("spec", 'must be an object, got array ["vision"]')],
        id="a project's spec is a list, not an object",
    ),
    pytest.param(
        policy_with("spec.pools", ["a100"]),
        [policy_error("spec.pools[0]", 'must be an object, got string "a100"')],
        id="a pool is given by name where an object is expected",
    ),
    # ---------------------------------------------------------------- missing required fields
    pytest.param(
        policy_with("spec", DELETE),
        [policy_error("spec", "required field is missing")],
        id="the policy has no spec",
    ),
    pytest.param(
        policy_with("spec.tiers", DELETE),
        [policy_error("spec.tiers", "required field is missing")],
        id="the policy has no tiers",
    ),
    pytest.param(
        policy_with("spec.pools[0].nodeClass.name", DELETE),
        [policy_error("spec.pools[0].nodeClass.name", "required field is missing")],
        id="a pool's nodeClass has no name",
    ),
    pytest.param(
        project_with("spec.quotas[0].nominalGpus", DELETE),
        [project_error("spec.quotas[0].nominalGpus", "required field is missing")],
        id="a quota has no nominalGpus",
    ),
    pytest.param(
        policy_with("metadata.name", DELETE),
        [policy_error("metadata.name", "required field is missing", name="")],
        id="the policy has no metadata.name",
    ),
    pytest.param(
        project_with("metadata", DELETE),
        [project_error("metadata", "required field is missing", name="")],
        id="a project has no metadata at all",
    ),
    pytest.param(
        project_with("spec", {}),
        [
            project_error("spec.tier", "required field is missing"),
            project_error("spec.namespaces", "required field is missing"),
            project_error("spec.quotas", "required field is missing"),
        ],
        id="an empty project spec misses tier, namespaces and quotas, each reported",
    ),
    pytest.param(
        policy_with("spec.pools[0].onDemand", None),
        [policy_error("spec.pools[0].onDemand", "required field is missing")],
        id="a required object written as null is missing, as the API server prunes nulls",
    ),
    # ---------------------------------------------------------------- unknown fields
    pytest.param(
        [
            (
                POLICY_ORIGIN,
                set_path(
                    set_path(policy_doc(), "spec.tiers", DELETE),
                    "spec.tier",
                    policy_doc()["spec"]["tiers"],
                ),
            ),
            (PROJECT_ORIGIN, project_doc()),
        ],
        [
            policy_error("spec.tier", "unknown field"),
            policy_error("spec.tiers", "required field is missing"),
        ],
        id="tiers misspelled as tier is both unknown and missing",
    ),
    pytest.param(
        policy_with("spec.pools[0].prices", {"spotPerGPUHour": 1.0, "onDemandPerGpuHour": 4.0}),
        [
            policy_error("spec.pools[0].prices.spotPerGPUHour", "unknown field"),
            policy_error("spec.pools[0].prices.spotPerGpuHour", "required field is missing"),
        ],
        id="spotPerGpuHour misspelled with a capital GPU three levels deep",
    ),
    pytest.param(
        project_with("spec.deadlines", deadline(at="2026-12-01T18:00:00Z", matchlabels={})),
        [project_error("spec.deadlines[0].matchlabels", "unknown field")],
        id="matchLabels misspelled in lower case inside a deadline",
    ),
    pytest.param(
        policy_with("spec.tiers[0].maxGpus", 64),
        [policy_error("spec.tiers[0].maxGpus", "unknown field")],
        id="a pool's field maxGpus is set on a tier",
    ),
    pytest.param(
        policy_with("labels", {"team": "ml"}),
        [policy_error("labels", "unknown field")],
        id="labels is written at the top level instead of under metadata",
    ),
    # ---------------------------------------------------------------- enum values
    pytest.param(
        policy_with("spec.tiers[0].preemption", "Always"),
        [
            policy_error(
                "spec.tiers[0].preemption",
                'unsupported value "Always"; supported values: "Never", "LowerPriority", "Any"',
            )
        ],
        id="preemption Always is not a supported value",
    ),
    pytest.param(
        policy_with("spec.override", {"mode": "manual"}),
        [
            policy_error(
                "spec.override.mode",
                'unsupported value "manual"; supported values: "Auto", "Freeze", "Manual"',
            )
        ],
        id="override mode is case sensitive, so manual is not Manual",
    ),
    pytest.param(
        policy_with("spec.prometheus", {"kedaAuthentication": {"name": "prom", "kind": "Secret"}}),
        [
            policy_error(
                "spec.prometheus.kedaAuthentication.kind",
                'unsupported value "Secret"; supported values: "TriggerAuthentication", '
                '"ClusterTriggerAuthentication"',
            )
        ],
        id="kedaAuthentication kind Secret is not an authentication kind",
    ),
    # ---------------------------------------------------------------- numeric ranges
    pytest.param(
        policy_with("spec.pools[0].gpusPerNode", 0),
        [policy_error("spec.pools[0].gpusPerNode", "must be greater than or equal to 1, got 0")],
        id="a node with zero GPUs is below the minimum",
    ),
    pytest.param(
        project_with("spec.quotas[0].nominalGpus", -1),
        [project_error("spec.quotas[0].nominalGpus", "must be greater than or equal to 0, got -1")],
        id="a negative nominalGpus is below the minimum",
    ),
    pytest.param(
        policy_with("spec.pools[0].prices.onDemandPerGpuHour", 0),
        [policy_error("spec.pools[0].prices.onDemandPerGpuHour", "must be greater than 0, got 0")],
        id="a free on-demand GPU-hour fails the exclusive minimum",
    ),
    pytest.param(
        project_with("spec.budget", {"dollarsPerMonth": 0}),
        [project_error("spec.budget.dollarsPerMonth", "must be greater than 0, got 0")],
        id="a zero budget fails the exclusive minimum",
    ),
    pytest.param(
        project_with("spec.deadlines", deadline(at="2026-12-01T18:00:00Z", targetConfidence=1.0)),
        [
            project_error(
                "spec.deadlines[0].targetConfidence",
                "must be less than or equal to 0.9999, got 1.0",
            )
        ],
        id="a targetConfidence of 1.0 is above the maximum of 0.9999",
    ),
    pytest.param(
        policy_with("spec.risk", {"raiseThreshold": 1.5}),
        [policy_error("spec.risk.raiseThreshold", "must be less than or equal to 1, got 1.5")],
        id="a raiseThreshold of 1.5 is not a probability",
    ),
    pytest.param(
        policy_with("spec.tiers[0].fairShareWeight", math.nan),
        [policy_error("spec.tiers[0].fairShareWeight", "must be a finite number, got NaN")],
        id="a YAML .nan weight is not a number any bound can hold",
    ),
    pytest.param(
        project_with("spec.budget", {"dollarsPerMonth": math.inf}),
        [project_error("spec.budget.dollarsPerMonth", "must be a finite number, got Infinity")],
        id="a YAML .inf budget passes a minimum but is no limit, and is not JSON",
    ),
    # ---------------------------------------------------------------- string patterns
    pytest.param(
        policy_with("spec.tiers[0].name", "Production"),
        [policy_error("spec.tiers[0].name", f'invalid value "Production": {DNS_LABEL}')],
        id="a tier name with a capital letter is not a DNS label",
    ),
    pytest.param(
        policy_with("spec.pools[0].name", "a_100"),
        [policy_error("spec.pools[0].name", f'invalid value "a_100": {DNS_LABEL}')],
        id="a pool name with an underscore is not a DNS label",
    ),
    pytest.param(
        project_with("spec.namespaces", ["-vision"]),
        [project_error("spec.namespaces[0]", f'invalid value "-vision": {DNS_LABEL}')],
        id="a namespace starting with a hyphen is not a DNS label",
    ),
    pytest.param(
        policy_with("spec.pools[0].gpuResource", "nvidia.com/"),
        [
            policy_error(
                "spec.pools[0].gpuResource", f'invalid value "nvidia.com/": {EXTENDED_RESOURCE}'
            )
        ],
        id="a gpuResource with nothing after the slash is not a qualified name",
    ),
    pytest.param(
        policy_with("spec.pools[0].gpuResource", "gpu"),
        [policy_error("spec.pools[0].gpuResource", f'invalid value "gpu": {EXTENDED_RESOURCE}')],
        id="a gpuResource without a domain is not an extended resource",
    ),
    pytest.param(
        policy_with("spec.pools[0].gpuResource", "kubernetes.io/gpu"),
        [
            policy_error(
                "spec.pools[0].gpuResource",
                "gpuResource must not be in the kubernetes.io domain, which is reserved for "
                "built-in resources",
            )
        ],
        id="a gpuResource in the kubernetes.io domain is reserved for built-in resources",
    ),
    pytest.param(
        policy_with("spec.pools[0].nodeLabels", {"karpenter.sh/capacity-type": "spot"}),
        [
            policy_error(
                "spec.pools[0].nodeLabels",
                "nodeLabels must not set labels Karpenter reserves or Quartermaster sets itself "
                "(karpenter.sh/*, kubernetes.io/hostname, zone, instance type, pool)",
            )
        ],
        id="a node label the controller sets itself would contradict the flavor",
    ),
    pytest.param(
        policy_with("spec.pools[0].zones", ["us-east-1a", "us east 1b"]),
        [policy_error("spec.pools[0].zones[1]", f'invalid value "us east 1b": {LABEL_VALUE}')],
        id="a zone with spaces is not a label value",
    ),
    pytest.param(
        policy_with("spec.prometheus", {"url": "prometheus:9090"}),
        [
            policy_error(
                "spec.prometheus.url",
                'invalid value "prometheus:9090": must be an http:// or https:// URL',
            )
        ],
        id="a Prometheus url without a scheme",
    ),
    pytest.param(
        project_with("spec.deadlines", deadline(schedule="0 18 * *")),
        [
            project_error(
                "spec.deadlines[0].schedule",
                'invalid value "0 18 * *": '
                "must be a 5-field cron expression or an @-macro such as @weekly",
            )
        ],
        id="a schedule with four cron fields",
    ),
    # ---------------------------------------------------------------- length and list limits
    pytest.param(
        policy_with("spec.pools[0].name", "a" * 41),
        [policy_error("spec.pools[0].name", "must be at most 40 characters, got 41")],
        id="a pool name of 41 characters leaves no room for its NodePool suffixes",
    ),
    pytest.param(
        project_with("spec.namespaces", []),
        [project_error("spec.namespaces", "must have at least 1 item")],
        id="a project with no namespaces",
    ),
    pytest.param(
        policy_with("spec.tiers", [{"name": f"tier-{i}", "priority": i} for i in range(9)]),
        [policy_error("spec.tiers", "must have at most 8 items, got 9")],
        id="nine tiers are more than the eight allowed",
    ),
    pytest.param(
        policy_with("spec.pools[0].nodeLabels", {f"example.com/k{i}": "v" for i in range(17)}),
        [policy_error("spec.pools[0].nodeLabels", "must have at most 16 entries, got 17")],
        id="seventeen node labels are more than the sixteen allowed",
    ),
    # ---------------------------------------------------------------- duplicate list keys
    pytest.param(
        policy_with("spec.tiers[1].name", "production"),
        [policy_error("spec.tiers[1].name", 'duplicate value "production"')],
        id="two tiers are named production",
    ),
    pytest.param(
        project_with(
            "spec.quotas",
            [{"pool": "a100", "nominalGpus": 8}, {"pool": "a100", "nominalGpus": 8}],
        ),
        [project_error("spec.quotas[1].pool", 'duplicate value "a100"')],
        id="two quotas for the same pool",
    ),
    pytest.param(
        project_with("spec.namespaces", ["vision", "vision-batch", "vision"]),
        [project_error("spec.namespaces[2]", 'duplicate value "vision"')],
        id="a namespace listed twice in one project",
    ),
    pytest.param(
        project_with(
            "spec.deadlines",
            deadline(at="2026-12-01T18:00:00Z") + deadline(at="2026-12-08T18:00:00Z"),
        ),
        [project_error("spec.deadlines[1].name", 'duplicate value "launch"')],
        id="two deadlines share a name",
    ),
    pytest.param(
        policy_with("spec.tiers[0].name", ["production"]),
        [policy_error("spec.tiers[0].name", 'must be a string, got array ["production"]')],
        id="a tier name that is a list, which cannot be a list-map key",
    ),
    # ---------------------------------------------------------------- label maps
    pytest.param(
        policy_with("spec.pools[0].nodeLabels", {"data locality": "east"}),
        [
            policy_error(
                "spec.pools[0].nodeLabels.data locality",
                f'invalid key "data locality": {QUALIFIED_NAME}',
            )
        ],
        id="a node label key with a space",
    ),
    pytest.param(
        policy_with("spec.pools[0].nodeLabels", {"example.com/zone": "east 1"}),
        [
            policy_error(
                "spec.pools[0].nodeLabels.example.com/zone",
                f'invalid value "east 1": {LABEL_VALUE}',
            )
        ],
        id="a node label value with a space",
    ),
    pytest.param(
        policy_with("spec.pools[0].nodeLabels", {"example.com/gen": 4}),
        [
            policy_error(
                "spec.pools[0].nodeLabels.example.com/gen", "must be a string, got integer 4"
            )
        ],
        id="a node label value that is a number, not a string",
    ),
    pytest.param(
        project_with(
            "spec.deadlines", deadline(at="2026-12-01T18:00:00Z", matchLabels={"paper": "-cvpr"})
        ),
        [
            project_error(
                "spec.deadlines[0].matchLabels.paper", f'invalid value "-cvpr": {LABEL_VALUE}'
            )
        ],
        id="a matchLabels value starting with a hyphen",
    ),
    # ---------------------------------------------------------------- date-time
    pytest.param(
        project_with("spec.deadlines", deadline(at="2026-12-01T18:00:00")),
        [project_error("spec.deadlines[0].at", f'invalid value "2026-12-01T18:00:00": {RFC3339}')],
        id="a deadline time without a time zone",
    ),
    pytest.param(
        project_with("spec.deadlines", deadline(at="next friday")),
        [project_error("spec.deadlines[0].at", f'invalid value "next friday": {RFC3339}')],
        id="a deadline time that is not a date",
    ),
    pytest.param(
        project_with("spec.deadlines", deadline(at="2026-12-01")),
        [project_error("spec.deadlines[0].at", f'invalid value "2026-12-01": {RFC3339}')],
        id="a deadline that is a date without a time",
    ),
    pytest.param(
        project_with("spec.deadlines", deadline(at="20261201T180000Z")),
        [project_error("spec.deadlines[0].at", f'invalid value "20261201T180000Z": {RFC3339}')],
        id="a deadline in ISO 8601 basic format is not RFC 3339",
    ),
    # ---------------------------------------------------------------- CEL rules
    pytest.param(
        policy_with("spec.pools[0].prices", {"spotPerGpuHour": 5.0, "onDemandPerGpuHour": 4.0}),
        [
            policy_error(
                "spec.pools[0].prices.spotPerGpuHour",
                "spotPerGpuHour must not exceed onDemandPerGpuHour",
            )
        ],
        id="spot costs more than on-demand",
    ),
    pytest.param(
        policy_with("spec.pools[0].onDemand", {"floorGpus": 65, "ceilingGpus": 64}),
        [policy_error("spec.pools[0].onDemand.floorGpus", "floorGpus must not exceed ceilingGpus")],
        id="the on-demand floor is above the ceiling",
    ),
    pytest.param(
        policy_with("spec.pools[0].warmPool", {"minGpus": 8}),
        [policy_error("spec.pools[0].warmPool.minGpus", "minGpus must not exceed maxGpus")],
        id="a warm pool minimum above the default maximum of 0",
    ),
    pytest.param(
        policy_with("spec.pools[0].onDemand", {"floorGpus": 8, "ceilingGpus": 129}),
        [
            policy_error(
                "spec.pools[0].onDemand.ceilingGpus",
                "onDemand.ceilingGpus must not exceed maxGpus",
            )
        ],
        id="the on-demand ceiling is above the pool's maxGpus",
    ),
    pytest.param(
        policy_with("spec.pools[0].warmPool", {"maxGpus": 129}),
        [
            policy_error(
                "spec.pools[0].warmPool.maxGpus", "warmPool.maxGpus must not exceed maxGpus"
            )
        ],
        id="the warm pool maximum is above the pool's maxGpus",
    ),
    pytest.param(
        policy_with("spec.risk", {"lowerThreshold": 0.2}),
        [policy_error("spec.risk.lowerThreshold", "lowerThreshold must be below raiseThreshold")],
        id="lowerThreshold equals the default raiseThreshold, so it is not below it",
    ),
    pytest.param(
        policy_with("spec.override", {"mode": "Manual"}),
        [
            policy_error(
                "spec.override.onDemandGpus",
                "onDemandGpus must be set when mode is Manual, and only then",
            )
        ],
        id="Manual mode without onDemandGpus",
    ),
    pytest.param(
        policy_with("spec.override", {"onDemandGpus": [{"pool": "a100", "gpus": 16}]}),
        [
            policy_error(
                "spec.override.onDemandGpus",
                "onDemandGpus must be set when mode is Manual, and only then",
            )
        ],
        id="onDemandGpus set while mode is the default Auto",
    ),
    pytest.param(
        project_with("spec.quotas[0].lendingLimitGpus", 17),
        [
            project_error(
                "spec.quotas[0].lendingLimitGpus", "lendingLimitGpus must not exceed nominalGpus"
            )
        ],
        id="a project lends more GPUs than it has",
    ),
    pytest.param(
        project_with("spec.deadlines", deadline(at="2026-12-01T18:00:00Z", schedule="@weekly")),
        [
            project_error(
                "spec.deadlines[0]",
                "exactly one of at (a one-off time) or schedule (a recurring cutoff) must be set",
            )
        ],
        id="a deadline with both at and schedule",
    ),
    pytest.param(
        project_with("spec.deadlines", deadline()),
        [
            project_error(
                "spec.deadlines[0]",
                "exactly one of at (a one-off time) or schedule (a recurring cutoff) must be set",
            )
        ],
        id="a deadline with neither at nor schedule",
    ),
    pytest.param(
        project_with(
            "spec.deadlines", deadline(at="2026-12-01T18:00:00Z", timeZone="Europe/Berlin")
        ),
        [project_error("spec.deadlines[0].timeZone", "timeZone applies only to schedule")],
        id="a timeZone on a one-off deadline",
    ),
    pytest.param(
        project_with(
            "spec",
            project_doc(
                shareCapacity=False,
                quotas=[{"pool": "a100", "nominalGpus": 16, "borrowingLimitGpus": 8}],
            )["spec"],
        ),
        [
            project_error(
                "spec.quotas",
                "borrowingLimitGpus and lendingLimitGpus need shareCapacity: true "
                "(only a queue in a cohort borrows or lends)",
            )
        ],
        id="a borrowing limit on a project that does not share capacity",
    ),
    # ---------------------------------------------------------------- cross-object checks
    pytest.param(
        project_with("spec.tier", "gold"),
        [project_error("spec.tier", "unknown tier 'gold'; defined tiers: production, research")],
        id="a project names a tier the policy does not define",
    ),
    pytest.param(
        project_with("spec.quotas[0].pool", "h100"),
        [project_error("spec.quotas[0].pool", "unknown pool 'h100'; defined pools: a100")],
        id="a quota names a pool the policy does not define",
    ),
    pytest.param(
        policy_with("spec.tiers[0].reserved", [{"pool": "h100", "gpus": 8}]),
        [
            policy_error(
                "spec.tiers[0].reserved[0].pool", "unknown pool 'h100'; defined pools: a100"
            )
        ],
        id="a tier reserves GPUs in a pool that does not exist",
    ),
    pytest.param(
        policy_with(
            "spec.override", {"mode": "Manual", "onDemandGpus": [{"pool": "h100", "gpus": 8}]}
        ),
        [
            policy_error(
                "spec.override.onDemandGpus[0].pool", "unknown pool 'h100'; defined pools: a100"
            )
        ],
        id="a manual override for a pool that does not exist",
    ),
    pytest.param(
        policy_with(
            "spec.override", {"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": 4}]}
        ),
        [
            policy_error(
                "spec.override.onDemandGpus[0].gpus",
                "4 is outside the on-demand bounds [8, 64] of pool 'a100'",
            )
        ],
        id="a manual override below the pool's on-demand floor",
    ),
    pytest.param(
        policy_with(
            "spec.override", {"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": 65}]}
        ),
        [
            policy_error(
                "spec.override.onDemandGpus[0].gpus",
                "65 is outside the on-demand bounds [8, 64] of pool 'a100'",
            )
        ],
        id="a manual override above the pool's on-demand ceiling",
    ),
    pytest.param(
        policy_with("spec.tiers[1].priority", 1000),
        [
            policy_error(
                "spec.tiers[1].priority",
                "priority 1000 is also used by tier 'production'; tiers need distinct priorities",
            )
        ],
        id="two tiers share a priority",
    ),
    pytest.param(
        project_with("spec.quotas[0].nominalGpus", 129),
        [
            project_error("spec.quotas[0].nominalGpus", "129 exceeds maxGpus (128) of pool 'a100'"),
            policy_error(
                "spec.pools[0].maxGpus",
                "projects' nominal quotas (129) plus tier reservations (0) on pool 'a100' "
                "exceed maxGpus (128)",
            ),
        ],
        id="one quota is larger than its pool, which also over-subscribes the pool",
    ),
    pytest.param(
        with_projects(
            project_doc("vision", quotas=[{"pool": "a100", "nominalGpus": 100}]),
            project_doc("speech", quotas=[{"pool": "a100", "nominalGpus": 20}]),
            policy=policy_doc(
                tiers=[
                    {
                        "name": "production",
                        "priority": 1000,
                        "reserved": [{"pool": "a100", "gpus": 16}],
                    },
                    {"name": "research", "priority": 100},
                ]
            ),
        ),
        [
            policy_error(
                "spec.pools[0].maxGpus",
                "projects' nominal quotas (120) plus tier reservations (16) on pool 'a100' "
                "exceed maxGpus (128)",
            )
        ],
        id="two projects' quotas and a tier reservation over-subscribe a pool",
    ),
    pytest.param(
        with_projects(
            project_doc("vision", allowSpot=False, quotas=[{"pool": "a100", "nominalGpus": 65}])
        ),
        [
            policy_error(
                "spec.pools[0].onDemand.ceilingGpus",
                "quotas that cannot run on spot (65) plus tier reservations (0) on pool 'a100' "
                "need more on-demand GPUs than ceilingGpus (64)",
            )
        ],
        id="an on-demand-only project needs more than the on-demand ceiling",
    ),
    pytest.param(
        with_projects(
            project_doc("vision", quotas=[{"pool": "a100", "nominalGpus": 65}]),
            policy=set_path(policy_doc(), "spec.tiers[0].allowSpot", False),
        ),
        [
            policy_error(
                "spec.pools[0].onDemand.ceilingGpus",
                "quotas that cannot run on spot (65) plus tier reservations (0) on pool 'a100' "
                "need more on-demand GPUs than ceilingGpus (64)",
            )
        ],
        id="a project in a tier without spot needs more than the on-demand ceiling",
    ),
    pytest.param(
        with_projects(
            project_doc("vision", namespaces=["shared"]),
            project_doc("speech", namespaces=["speech", "shared"]),
        ),
        [
            project_error(
                "spec.namespaces[1]",
                "namespace 'shared' already belongs to project 'vision' (in vision.yaml)",
                name="speech",
            )
        ],
        id="two projects claim one namespace, and the one loaded second is blamed, not the "
        "second in name order",
    ),
    pytest.param(
        project_with("spec.deadlines", deadline(schedule="0 25 * * *")),
        [
            project_error(
                "spec.deadlines[0].schedule", 'hour field "25": value 25 out of range 0-23'
            )
        ],
        id="a schedule at hour 25",
    ),
    pytest.param(
        project_with("spec.deadlines", deadline(schedule="0 18 31 2 *")),
        [
            project_error(
                "spec.deadlines[0].schedule",
                'schedule "0 18 31 2 *" never fires: '
                "none of its days of the month exist in any of its months",
            )
        ],
        id="a schedule on February 31st never fires",
    ),
    pytest.param(
        project_with("spec.deadlines", deadline(schedule="0 18 * * FRI", timeZone="Mars/Olympus")),
        [project_error("spec.deadlines[0].timeZone", "unknown time zone 'Mars/Olympus'")],
        id="a schedule in a time zone that does not exist",
    ),
    pytest.param(
        project_with("spec.deadlines", deadline(schedule="0 18 * * FRI", timeZone="../../etc")),
        [project_error("spec.deadlines[0].timeZone", "unknown time zone '../../etc'")],
        id="a time zone that is a relative path",
    ),
    # ---------------------------------------------------------------- documents
    pytest.param(
        policy_with("apiVersion", "quartermaster.dev/v1"),
        [
            policy_error(
                "apiVersion", "must be 'quartermaster.dev/v1alpha1', got 'quartermaster.dev/v1'"
            )
        ],
        id="the policy has the wrong apiVersion",
    ),
    pytest.param(
        policy_with("apiVersion", DELETE),
        [
            policy_error(
                "apiVersion", "required field is missing; must be 'quartermaster.dev/v1alpha1'"
            )
        ],
        id="the policy has no apiVersion",
    ),
    pytest.param(
        project_with("kind", "Project"),
        [
            (
                "Project",
                "vision",
                "kind",
                "unsupported kind 'Project'; expected CapacityPolicy or TrainingProject",
            )
        ],
        id="a document of an unsupported kind",
    ),
    pytest.param(
        project_with("kind", DELETE),
        [
            (
                "document",
                "vision",
                "kind",
                "required field is missing; expected CapacityPolicy or TrainingProject",
            )
        ],
        id="a document without a kind",
    ),
    pytest.param(
        [(POLICY_ORIGIN, policy_doc()), (PROJECT_ORIGIN, ["vision"])],
        [("", "", "", 'the document must be a YAML mapping, got array ["vision"]')],
        id="a document that is a list, not a mapping",
    ),
    pytest.param(
        [(POLICY_ORIGIN, policy_doc()), (PROJECT_ORIGIN, "TrainingProject vision")],
        [("", "", "", 'the document must be a YAML mapping, got string "TrainingProject vision"')],
        id="a document that is a bare string",
    ),
    pytest.param(
        [
            (POLICY_ORIGIN, policy_doc()),
            ("other.yaml", set_path(policy_doc(), "metadata.name", "other")),
            (PROJECT_ORIGIN, project_doc()),
        ],
        [
            policy_error(
                "metadata.name",
                "only one CapacityPolicy is supported (another is in policy.yaml)",
                name="other",
            )
        ],
        id="two CapacityPolicies, and the second is blamed",
    ),
    pytest.param(
        [(PROJECT_ORIGIN, project_doc())],
        [("", "", "", NO_POLICY)],
        id="projects without a CapacityPolicy",
    ),
    pytest.param(
        [],
        [("", "", "", NO_POLICY)],
        id="no documents at all",
    ),
    pytest.param(
        [
            (POLICY_ORIGIN, policy_doc()),
            ("team-a.yaml", project_doc()),
            ("team-b.yaml", project_doc(namespaces=["vision-2"])),
        ],
        [project_error("metadata.name", "duplicate TrainingProject (also in team-a.yaml)")],
        id="two TrainingProjects share a name",
    ),
    pytest.param(
        policy_with("metadata.name", "GPU-Fleet"),
        [
            policy_error(
                "metadata.name", f"invalid value 'GPU-Fleet': {OBJECT_NAME}", name="GPU-Fleet"
            )
        ],
        id="a policy name with capitals",
    ),
    pytest.param(
        project_with("metadata.name", "vision_2"),
        [
            project_error(
                "metadata.name", f"invalid value 'vision_2': {OBJECT_NAME}", name="vision_2"
            )
        ],
        id="a project name with an underscore",
    ),
    pytest.param(
        project_with("metadata.name", "v" * 64),
        [
            project_error(
                "metadata.name", f"invalid value '{'v' * 64}': {OBJECT_NAME}", name="v" * 64
            )
        ],
        id="a project name of 64 characters",
    ),
    pytest.param(
        project_with("metadata.name", 42),
        [project_error("metadata.name", "must be a string, got integer 42", name="")],
        id="a project name that is a number",
    ),
]


@pytest.mark.parametrize(("docs", "expected"), CASES)
def test_a_bad_policy_is_rejected_with_exactly_these_errors(
    docs: Docs, expected: list[Error]
) -> None:
    assert reported(docs) == sorted(expected)


@pytest.mark.parametrize(
    ("docs", "expected"),
    [
        pytest.param(
            policy_with(
                "spec.override", {"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": 4}]}
            ),
            [("CapacityPolicy", "fleet", "spec.override.onDemandGpus[0].gpus")],
            id="a manual override below the pool's on-demand floor",
        ),
        pytest.param(
            policy_with(
                "spec.override", {"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": 65}]}
            ),
            [("CapacityPolicy", "fleet", "spec.override.onDemandGpus[0].gpus")],
            id="a manual override above the pool's on-demand ceiling",
        ),
        pytest.param(
            project_with("spec.quotas[0].nominalGpus", 129),
            [
                ("CapacityPolicy", "fleet", "spec.pools[0].maxGpus"),
                ("TrainingProject", "vision", "spec.quotas[0].nominalGpus"),
            ],
            id="one quota is larger than its pool",
        ),
        pytest.param(
            policy_with("apiVersion", DELETE),
            [("CapacityPolicy", "fleet", "apiVersion")],
            id="the policy has no apiVersion",
        ),
        pytest.param(
            project_with("kind", DELETE),
            [("document", "vision", "kind")],
            id="a document without a kind",
        ),
        pytest.param(
            project_with("metadata.name", 42),
            [("TrainingProject", "", "metadata.name")],
            id="a project name that is a number",
        ),
    ],
)
def test_errors_whose_wording_is_a_known_bug_still_point_at_the_right_field(
    docs: Docs, expected: list[tuple[str, str, str]]
) -> None:
    """The KNOWN_BUG cases above that are about wording only; these must keep passing."""
    assert sorted((kind, name, path) for kind, name, path, _ in reported(docs)) == expected


def test_every_rule_in_the_types_has_a_case_in_the_table() -> None:
    """A new CEL rule without a bad-input case here fails this test."""
    messages = {error[3] for case in CASES for error in cast(list[Error], case.values[1])}
    rules = [
        (cls.__name__, rule.message)
        for cls in vars(types).values()
        if isinstance(cls, type) and dataclasses.is_dataclass(cls)
        for rule in rules_of(cls)
    ]
    assert rules
    assert [(cls, message) for cls, message in rules if message not in messages] == []


# --------------------------------------------------------------------------- all at once


def test_errors_in_different_objects_are_all_reported_in_one_raise() -> None:
    docs: Docs = [
        ("policy.yaml", set_path(policy_doc(), "spec.tiers[0].priority", "high")),
        ("policy.yaml", set_path(policy_doc(), "spec.pools[0].gpusPerNode", 0)),
        ("projects.yaml#1", set_path(project_doc("vision"), "spec.tier", 7)),
        ("projects.yaml#2", set_path(project_doc("speech"), "spec.namespaces", [])),
        ("projects.yaml#3", "not an object"),
    ]
    assert sorted(raised(docs)) == sorted(
        [
            PolicyError(
                "policy.yaml",
                "CapacityPolicy",
                "fleet",
                "spec.tiers[0].priority",
                'must be an integer, got string "high"',
            ),
            PolicyError(
                "policy.yaml",
                "CapacityPolicy",
                "fleet",
                "spec.pools[0].gpusPerNode",
                "must be greater than or equal to 1, got 0",
            ),
            # Two policy documents, each with a schema error: that there are two is an error too.
            PolicyError(
                "policy.yaml",
                "CapacityPolicy",
                "fleet",
                "metadata.name",
                "only one CapacityPolicy is supported (another is in policy.yaml)",
            ),
            PolicyError(
                "projects.yaml#1",
                "TrainingProject",
                "vision",
                "spec.tier",
                "must be a string, got integer 7",
            ),
            PolicyError(
                "projects.yaml#2",
                "TrainingProject",
                "speech",
                "spec.namespaces",
                "must have at least 1 item",
            ),
            PolicyError.in_file(
                "projects.yaml#3", 'the document must be a YAML mapping, got string "not an object"'
            ),
        ]
    )


def test_cross_object_errors_are_reported_alongside_schema_errors_of_other_projects() -> None:
    docs: Docs = [
        ("policy.yaml", policy_doc()),
        ("a.yaml", project_doc("alpha", tier="gold")),
        ("b.yaml", project_doc("beta", quotas=[{"pool": "h100", "nominalGpus": 8}])),
        ("c.yaml", project_doc("gamma", namespaces=["alpha"])),
        ("d.yaml", set_path(project_doc("delta"), "spec.quotas[0].nominalGpus", -4)),
    ]
    assert sorted(raised(docs)) == [
        PolicyError(
            "a.yaml",
            "TrainingProject",
            "alpha",
            "spec.tier",
            "unknown tier 'gold'; defined tiers: production, research",
        ),
        PolicyError(
            "b.yaml",
            "TrainingProject",
            "beta",
            "spec.quotas[0].pool",
            "unknown pool 'h100'; defined pools: a100",
        ),
        PolicyError(
            "c.yaml",
            "TrainingProject",
            "gamma",
            "spec.namespaces[0]",
            "namespace 'alpha' already belongs to project 'alpha' (in a.yaml)",
        ),
        PolicyError(
            "d.yaml",
            "TrainingProject",
            "delta",
            "spec.quotas[0].nominalGpus",
            "must be greater than or equal to 0, got -4",
        ),
    ]


# --------------------------------------------------------------------------- duplicates

BAD_TIER_TYPE = set_path(project_doc(namespaces=["vision-2"]), "spec.tier", 7)
TIER_TYPE_ERROR = "must be a string, got integer 7"


def duplicate(origin: str, first: str, name: str = "vision") -> PolicyError:
    return PolicyError(
        origin,
        "TrainingProject",
        name,
        "metadata.name",
        f"duplicate TrainingProject (also in {first})",
    )


def tier_type_error(origin: str) -> PolicyError:
    return PolicyError(origin, "TrainingProject", "vision", "spec.tier", TIER_TYPE_ERROR)


@pytest.mark.parametrize(
    ("docs", "expected"),
    [
        pytest.param(
            [
                (POLICY_ORIGIN, policy_doc()),
                ("team-a.yaml", BAD_TIER_TYPE),
                ("team-b.yaml", project_doc()),
            ],
            [tier_type_error("team-a.yaml"), duplicate("team-b.yaml", "team-a.yaml")],
            id="the first of two same-named projects has a type error",
        ),
        pytest.param(
            [
                (POLICY_ORIGIN, policy_doc()),
                ("team-a.yaml", project_doc()),
                ("team-b.yaml", BAD_TIER_TYPE),
            ],
            [tier_type_error("team-b.yaml"), duplicate("team-b.yaml", "team-a.yaml")],
            id="the second of two same-named projects has a type error",
        ),
        pytest.param(
            [
                (POLICY_ORIGIN, policy_doc()),
                ("team-a.yaml", BAD_TIER_TYPE),
                ("team-b.yaml", BAD_TIER_TYPE),
            ],
            [
                tier_type_error("team-a.yaml"),
                tier_type_error("team-b.yaml"),
                duplicate("team-b.yaml", "team-a.yaml"),
            ],
            id="both same-named projects have a type error",
        ),
        pytest.param(
            [
                (POLICY_ORIGIN, policy_doc()),
                ("team-a.yaml", project_doc()),
                ("team-b.yaml", project_doc(namespaces=["vision-2"])),
                ("team-c.yaml", project_doc(namespaces=["vision-3"])),
            ],
            [
                duplicate("team-b.yaml", "team-a.yaml"),
                duplicate("team-c.yaml", "team-a.yaml"),
            ],
            id="three projects share a name: both later ones are blamed, naming the first",
        ),
        pytest.param(
            [
                ("a.yaml", set_path(policy_doc(), "spec.tiers[0].priority", "high")),
                ("b.yaml", set_path(policy_doc(), "metadata.name", "other")),
                (PROJECT_ORIGIN, project_doc()),
            ],
            [
                PolicyError(
                    "a.yaml",
                    "CapacityPolicy",
                    "fleet",
                    "spec.tiers[0].priority",
                    'must be an integer, got string "high"',
                ),
                PolicyError(
                    "b.yaml",
                    "CapacityPolicy",
                    "other",
                    "metadata.name",
                    "only one CapacityPolicy is supported (another is in a.yaml)",
                ),
            ],
            id="a second CapacityPolicy is reported when the first has a type error",
        ),
        pytest.param(
            [
                (POLICY_ORIGIN, policy_doc()),
                ("zeta.yaml", project_doc("zeta", namespaces=["shared", "zeta"])),
                ("alpha.yaml", project_doc("alpha", namespaces=["alpha", "shared"])),
                ("beta.yaml", project_doc("beta", namespaces=["zeta", "shared"])),
            ],
            [
                PolicyError(
                    "alpha.yaml",
                    "TrainingProject",
                    "alpha",
                    "spec.namespaces[1]",
                    "namespace 'shared' already belongs to project 'zeta' (in zeta.yaml)",
                ),
                PolicyError(
                    "beta.yaml",
                    "TrainingProject",
                    "beta",
                    "spec.namespaces[0]",
                    "namespace 'zeta' already belongs to project 'zeta' (in zeta.yaml)",
                ),
                PolicyError(
                    "beta.yaml",
                    "TrainingProject",
                    "beta",
                    "spec.namespaces[1]",
                    "namespace 'shared' already belongs to project 'zeta' (in zeta.yaml)",
                ),
            ],
            id="namespaces are blamed on the projects that claim them later in load order",
        ),
    ],
)
def test_every_duplicate_is_reported_on_the_document_that_adds_it(
    docs: Docs, expected: list[PolicyError]
) -> None:
    assert sorted(raised(docs)) == sorted(expected)


# --------------------------------------------------------------------------- round trip

FULL_POLICY: dict[str, Any] = policy_doc(
    tiers=[
        {
            "name": "production",
            "priority": 100000,
            "preemption": "LowerPriority",
            "allowSpot": True,
            "fairShareWeight": 4,
            "reserved": [{"pool": "a100", "gpus": 16}],
            "maxExecutionSeconds": 604800,
            "demoteLost": True,
        },
        {
            "name": "research",
            "priority": 1000,
            "preemption": "Any",
            "allowSpot": False,
            "fairShareWeight": 0.5,
            "reserved": [],
            "maxExecutionSeconds": 86400,
            "demoteLost": False,
        },
    ],
    pools=[
        pool_doc(
            "a100",
            zones=["us-east-1a", "us-east-1b"],
            gpusPerNode=8,
            maxGpus=256,
            onDemand={"ceilingGpus": 160, "floorGpus": 16},
            nodeClass={"name": "gpu-a100", "group": "karpenter.k8s.aws", "kind": "EC2NodeClass"},
            prices={"spotPerGpuHour": 1.29, "onDemandPerGpuHour": 4.1},
            gpuResource="nvidia.com/gpu",
            instanceTypes=["p4d.24xlarge", "p4de.24xlarge"],
            nodeLabels={"example.com/data-locality": "datasets-east"},
            cpusPerGpu=12,
            memoryGiBPerGpu=140,
            provisioningLatencySeconds=420,
            spotInterruptionsPerHour=0.04,
            spotAvailability=0.8,
            warmPool={"minGpus": 8, "maxGpus": 16},
        )
    ],
    risk={
        "raiseThreshold": 0.3,
        "lowerThreshold": 0.1,
        "evaluationWindowSeconds": 300,
        "cooldownSeconds": 900,
        "maxStepGpus": 8,
        "priorityBoost": True,
        "priorityBoostValue": 500,
        "learnRuntimes": True,
        "lostBelow": 0.02,
        "lostMaxWaitSeconds": 43200,
        "samples": 300,
    },
    override={
        "mode": "Manual",
        "onDemandGpus": [{"pool": "a100", "gpus": 32}],
        "reason": "INC-42: spot market unstable in us-east-1",
    },
    prometheus={
        "url": "https://prometheus.example.com:9090",
        "bearerTokenFile": "/var/run/secrets/prometheus/token",
        "caFile": "/etc/prometheus/ca.pem",
        "insecureSkipVerify": False,
        "timeoutSeconds": 30,
        "kedaAuthentication": {"name": "prometheus", "kind": "TriggerAuthentication"},
    },
)

FULL_PROJECT: dict[str, Any] = project_doc(
    "llm",
    tier="research",
    namespaces=["llm", "llm-eval"],
    quotas=[{"pool": "a100", "nominalGpus": 64, "borrowingLimitGpus": 32, "lendingLimitGpus": 16}],
    shareCapacity=True,
    fairShareWeight=2.5,
    allowSpot=True,
    deadlines=[
        {
            "name": "weekly-checkpoint",
            "schedule": "0 18 * * FRI",
            "timeZone": "Europe/Berlin",
            "matchLabels": {"example.com/run": "weekly"},
            "targetConfidence": 0.99,
        },
        {
            "name": "launch",
            "at": "2026-12-15T17:00:00Z",
            "matchLabels": {},
            "targetConfidence": 0.9,
        },
    ],
    budget={"dollarsPerMonth": 350000},
)


def _fields_written(hint: Any, value: Any, seen: dict[type, set[str]]) -> None:
    """Record, per dataclass, which of its fields `value` (JSON for `hint`) writes."""
    kind = kind_of(hint)
    if kind is Kind.ARRAY:
        for item in value:
            _fields_written(item_hint(hint), item, seen)
    elif kind is Kind.OBJECT:
        seen.setdefault(hint, set()).update(value)
        for info in fields_of(hint):
            if info.json_name in value:
                _fields_written(info.hint, value[info.json_name], seen)


@pytest.mark.parametrize(
    ("spec_type", "doc"),
    [
        pytest.param(CapacityPolicySpec, FULL_POLICY, id="the policy"),
        pytest.param(TrainingProjectSpec, FULL_PROJECT, id="the project"),
    ],
)
def test_the_full_example_sets_every_optional_field(spec_type: type, doc: dict[str, Any]) -> None:
    """So that the round trip below covers a field as soon as it is added."""
    seen: dict[type, set[str]] = {}
    _fields_written(spec_type, doc["spec"], seen)
    unset = {
        cls.__name__: sorted({info.json_name for info in fields_of(cls)} - written)
        for cls, written in seen.items()
    }
    assert {name: fields for name, fields in unset.items() if fields} == {}


def test_a_policy_with_every_optional_field_set_loads_and_round_trips() -> None:
    policy_set = load_policy_set([(POLICY_ORIGIN, FULL_POLICY), (PROJECT_ORIGIN, FULL_PROJECT)])
    for obj, doc in ((policy_set.policy, FULL_POLICY), (policy_set.projects[0], FULL_PROJECT)):
        as_json = to_json(obj.spec)
        assert as_json == doc["spec"]
        errors: list[FieldError] = []
        assert parse_object(type(obj.spec), as_json, "spec", errors) == obj.spec
        assert errors == []


def test_a_deadline_with_fractional_seconds_round_trips() -> None:
    doc = project_doc(deadlines=deadline(at="2026-12-15T17:00:00.250Z"))
    spec = load_policy_set([(POLICY_ORIGIN, policy_doc()), (PROJECT_ORIGIN, doc)]).projects[0].spec
    errors: list[FieldError] = []
    assert parse_object(TrainingProjectSpec, to_json(spec), "spec", errors) == spec
    assert errors == []


# --------------------------------------------------------------------------- files


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def write_documents(path: Path, *docs: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def path_errors(path: Path) -> list[PolicyError]:
    try:
        load_path(path)
    except InvalidPolicyError as invalid:
        return list(invalid.errors)
    return []


def test_a_yaml_syntax_error_is_reported_at_its_file_line_and_column(tmp_path: Path) -> None:
    write_documents(tmp_path / "policy.yaml", policy_doc())
    broken = write(
        tmp_path / "projects.yaml",
        """
        apiVersion: quartermaster.dev/v1alpha1
        kind: TrainingProject
        metadata: {name: vision
        spec: {}
        """,
    )
    assert path_errors(tmp_path) == [
        PolicyError.in_file(
            f"{broken}:4:5",
            "invalid YAML: expected ',' or '}', but got ':' "
            "(the flow mapping started at line 3, column 11)",
        )
    ]


def test_a_key_written_twice_in_one_mapping_is_an_error(tmp_path: Path) -> None:
    write_documents(tmp_path / "policy.yaml", policy_doc())
    duplicated = write(
        tmp_path / "projects.yaml",
        """
        apiVersion: quartermaster.dev/v1alpha1
        kind: TrainingProject
        metadata:
          name: vision
        spec:
          tier: production
          namespaces: [vision]
          quotas: [{pool: a100, nominalGpus: 16}]
          tier: research
        """,
    )
    assert path_errors(tmp_path) == [
        PolicyError.in_file(f"{duplicated}:9:3", "invalid YAML: duplicate key 'tier'")
    ]


def test_documents_of_a_multi_document_file_are_labelled_by_position(tmp_path: Path) -> None:
    projects = write_documents(
        tmp_path / "all.yaml",
        policy_doc(),
        project_doc("vision"),
        set_path(project_doc("speech"), "spec.tier", "gold"),
    )
    assert path_errors(tmp_path) == [
        PolicyError(
            f"{projects}#3",
            "TrainingProject",
            "speech",
            "spec.tier",
            "unknown tier 'gold'; defined tiers: production, research",
        )
    ]


def test_an_unquoted_timestamp_stays_a_string_as_kubernetes_reads_it(tmp_path: Path) -> None:
    write_documents(tmp_path / "policy.yaml", policy_doc())
    write(
        tmp_path / "projects.yaml",
        """
        apiVersion: quartermaster.dev/v1alpha1
        kind: TrainingProject
        metadata: {name: vision}
        spec:
          tier: production
          namespaces: [vision]
          quotas: [{pool: a100, nominalGpus: 16}]
          deadlines: [{name: launch, at: 2026-12-15T17:00:00Z}]
        """,
    )
    (deadline_,) = load_path(tmp_path).projects[0].spec.deadlines
    assert deadline_.at is not None
    assert deadline_.at.isoformat() == "2026-12-15T17:00:00+00:00"


def test_hidden_directories_and_kustomization_files_are_not_policy(tmp_path: Path) -> None:
    write_documents(tmp_path / "policy.yaml", policy_doc())
    write_documents(tmp_path / "teams" / "vision.yml", project_doc("vision"))
    write(tmp_path / ".git" / "config.yaml", "not: [valid")
    write_documents(tmp_path / "teams" / ".drafts" / "speech.yaml", project_doc("speech"))
    write(
        tmp_path / "kustomization.yaml",
        """
        apiVersion: kustomize.config.k8s.io/v1beta1
        kind: Kustomization
        resources: [policy.yaml]
        """,
    )
    write(tmp_path / "teams" / "kustomization.yml", "kind: Kustomization\n")
    write(tmp_path / "README.md", "# not YAML: [")
    policy_set = load_path(tmp_path)
    assert [p.name for p in policy_set.projects] == ["vision"]


def test_a_missing_path_is_reported(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    assert PolicyError.in_file(str(missing), "no such file or directory") in path_errors(missing)


def test_a_missing_path_is_the_only_error_reported(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    assert path_errors(missing) == [PolicyError.in_file(str(missing), "no such file or directory")]


# ------------------------------------------------------------------- files a loader cannot use


def test_a_dangling_symbolic_link_is_named_not_skipped(tmp_path: Path) -> None:
    """A copied example whose links point nowhere must say so, not "no CapacityPolicy found"."""
    (tmp_path / "policy.yaml").symlink_to("../../controller/examples/policy.yaml")
    write_documents(tmp_path / "projects.yaml", project_doc())
    assert path_errors(tmp_path) == [
        PolicyError.in_file(str(tmp_path), NO_POLICY),
        PolicyError.in_file(
            str(tmp_path / "policy.yaml"),
            "cannot read: a symbolic link to ../../controller/examples/policy.yaml, "
            "which does not exist",
        ),
    ]


def test_a_dangling_link_given_as_the_path_is_named(tmp_path: Path) -> None:
    link = tmp_path / "policy.yaml"
    link.symlink_to(tmp_path / "gone.yaml")
    assert path_errors(link) == [
        PolicyError.in_file(
            str(link),
            f"cannot read: a symbolic link to {tmp_path / 'gone.yaml'}, which does not exist",
        )
    ]


def test_a_link_to_a_real_file_is_read(tmp_path: Path) -> None:
    write_documents(tmp_path / "real" / "policy.yaml", policy_doc(), project_doc())
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "policy.yaml").symlink_to(tmp_path / "real" / "policy.yaml")
    assert [p.name for p in load_path(tmp_path / "policy").projects] == ["vision"]


def test_a_directory_without_policy_files_says_so(tmp_path: Path) -> None:
    write(tmp_path / "README.md", "# policies go here\n")
    assert path_errors(tmp_path) == [
        PolicyError.in_file(str(tmp_path), "no policy files (*.yaml, *.yml) in this directory")
    ]


def test_no_capacity_policy_is_reported_against_the_path_read(tmp_path: Path) -> None:
    write_documents(tmp_path / "projects.yaml", project_doc())
    (error,) = path_errors(tmp_path)
    assert str(error) == f"{tmp_path}: {NO_POLICY}"


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        pytest.param(
            """
            apiVersion: quartermaster.dev/v1alpha1
            kind: TrainingProject
            metadata:
              name: vision
            spec:
              tier: production
              namespaces: [vision,
                vision-eval
              quotas: [{pool: a100, nominalGpus: 16}]
            """,
            "9:9",
            "expected ',' or ']', but got ':' (the flow sequence started at line 7, column 15)",
            id="an unclosed [ is found two lines later and shown where it began",
        ),
        pytest.param(
            "metadata: {name: vision\nspec: {}\n",
            "2:5",
            "expected ',' or '}', but got ':' (the flow mapping started at line 1, column 11)",
            id="an unclosed { is shown where it began",
        ),
        pytest.param(
            'kind: "TrainingProject\n',
            "2:1",
            "found unexpected end of stream (the quoted scalar started at line 1, column 7)",
            id="an unclosed quote is shown where it began",
        ),
        pytest.param(
            "kind: TrainingProject: x\n",
            "1:22",
            "mapping values are not allowed here",
            id="an error PyYAML gives no context for has no parenthesis",
        ),
    ],
)
def test_a_yaml_error_shows_where_it_was_found_and_where_its_construct_began(
    tmp_path: Path, text: str, where: str, message: str
) -> None:
    broken = write(tmp_path / "projects.yaml", text)
    (error,) = path_errors(broken)
    assert str(error) == f"{broken}:{where}: invalid YAML: {message}"


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(PolicyError.in_file("p.yaml", "cannot read: x"), id="a file"),
        pytest.param(PolicyError.in_file("p.yaml:3:1", "invalid YAML: y"), id="a YAML error"),
        pytest.param(PolicyError.in_file("p.yaml#2", "the document z"), id="a document"),
    ],
)
def test_file_level_errors_print_no_placeholders(error: PolicyError) -> None:
    text = str(error)
    assert text == f"{error.origin}: {error.message}"
    assert ": -" not in text and ": file" not in text and ": policy" not in text


# --------------------------------------------------------------------------- warnings

FIXED_WARNING_NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("deadlines", "expected"),
    [
        pytest.param(
            deadline(at="2025-05-01T00:00:00Z"),
            [
                PolicyWarning(
                    PROJECT_ORIGIN,
                    "TrainingProject",
                    "vision",
                    "spec.deadlines[0].at",
                    "deadline 'launch' (2025-05-01T00:00:00Z) passed 572d12h ago; "
                    "move or remove it",
                )
            ],
            id="a one-off deadline in the past",
        ),
        pytest.param(
            [
                {"name": "nightly", "schedule": "0 6 * * *"},
                {"name": "demo", "at": "2026-11-24T11:30:00+01:00"},
            ],
            [
                PolicyWarning(
                    PROJECT_ORIGIN,
                    "TrainingProject",
                    "vision",
                    "spec.deadlines[1].at",
                    "deadline 'demo' (2026-11-24T10:30:00Z) passed 1h30m ago; move or remove it",
                )
            ],
            id="the second deadline passed, written with an offset",
        ),
        pytest.param(
            deadline(at="2026-11-24T12:00:00Z"),
            [
                PolicyWarning(
                    PROJECT_ORIGIN,
                    "TrainingProject",
                    "vision",
                    "spec.deadlines[0].at",
                    "deadline 'launch' (2026-11-24T12:00:00Z) passed 0m ago; move or remove it",
                )
            ],
            id="a deadline exactly now has passed",
        ),
        pytest.param(deadline(at="2026-11-24T12:00:01Z"), [], id="a deadline a second ahead"),
        pytest.param(deadline(schedule="0 6 * * *"), [], id="a recurring deadline never passes"),
        pytest.param([], [], id="no deadlines"),
    ],
)
def test_a_past_one_off_deadline_is_a_warning(
    deadlines: list[dict[str, Any]], expected: list[PolicyWarning]
) -> None:
    policy_set = load_policy_set(project_with("spec.deadlines", deadlines))
    assert policy_warnings(policy_set, now=FIXED_WARNING_NOW) == expected


def test_a_warning_prints_as_a_located_line_marked_warning() -> None:
    warning = PolicyWarning("p.yaml#2", "TrainingProject", "vision", "spec.deadlines[0].at", "m")
    assert str(warning) == "p.yaml#2: TrainingProject/vision: spec.deadlines[0].at: warning: m"
