"""Realistic policy mistakes, refused by `quartermaster validate` and by a real API server.

A team finds out a policy is wrong in one of two places: `quartermaster validate` in the GitOps
repository's CI, or `kubectl apply` against the cluster. Both must refuse the same mistakes and
point at the same field, or a policy that CI passes fails at deploy time (or the reverse). Each
row of the table is one mistake a person plausibly makes, with:

* where the loader (the code behind `quartermaster validate`) reports it: the exact field path
  and a keyword of the reason;
* what the API server does with it, created as kubectl does (`fieldValidation=Strict`):
  `Refused` (the CRD schema or a CEL rule catches it; the server's message or causes name the
  path), or `Accepted` (only the controller can see it: it spans objects, or no schema can say
  it, such as an unknown time zone). For `Accepted` rows the controller's own validation of the
  live objects (`validate_cluster`) must then report it, since that is the only place it shows.

The unit table in tests/unit/api/test_validation.py pins the loader's exact messages; this table
uses other fields and other slips, and adds the server's side.

Rows with a `*_bug` reason would be strict xfails: the behaviour we want that the code does not
have yet (none now: the bugs this table found are fixed). The module ends with two checks of
where loader and server disagree, and with objects larger than the server takes.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.api.loader import load_path
from controller.api.policy_set import InvalidPolicyError, PolicyError
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from controller.reconcile.validation import validate_cluster
from tests.builders import DELETE, policy_doc, pool_doc, project_doc, set_path

Doc = dict[str, Any]
REPO_ROOT = Path(__file__).parents[2]


# --------------------------------------------------------------------------- the table's vocabulary


@dataclass(frozen=True)
class Refused:
    """The API server refuses the document with `status`, naming `path`."""

    path: str
    status: int = 422


@dataclass(frozen=True)
class Accepted:
    """The API server stores every document; only the controller can see the mistake.

    `live_path` is where the controller reports it when it validates the live objects. None
    when the mistake does not survive the trip to the server: a second object of the same name
    is an update of the first, so the server ends up with one object and nothing to report.
    """

    live_path: str | None


@dataclass(frozen=True)
class Subject:
    """The documents of a policy directory, and which of them carries the mistake."""

    docs: tuple[Doc, ...]
    target: int

    @property
    def doc(self) -> Doc:
        return self.docs[self.target]


@dataclass(frozen=True)
class Bad:
    """One mistake: the documents, where the loader says it is, and what the server does."""

    subject: Subject
    path: str
    reason: str
    server: Refused | Accepted
    loader_bug: str = ""
    """Why the loader does not yet report it as described (a strict xfail)."""
    live_bug: str = ""
    """Why the controller's validation of live objects does not yet report it (strict xfail)."""


def in_policy(path: str, value: Any) -> Subject:
    """The valid policy with `path` set to `value` (DELETE removes it), beside a valid project."""
    return Subject((set_path(policy_doc(), path, value), project_doc()), 0)


def in_project(path: str, value: Any) -> Subject:
    """A valid policy beside the valid project with `path` set to `value` (or removed)."""
    return Subject((policy_doc(), set_path(project_doc(), path, value)), 1)


def deadline(**fields: Any) -> list[dict[str, Any]]:
    """A deadlines list of one deadline named `launch` with `fields`."""
    return [{"name": "launch", **fields}]


def weekly(**fields: Any) -> list[dict[str, Any]]:
    """A deadlines list of one Friday-evening deadline with `fields` on top."""
    return deadline(schedule="0 18 * * FRI", **fields)


AT = "2026-12-15T17:00:00Z"
"""A well-formed one-off cutoff. Only its form is checked here (no pass estimates a risk for
it), so its date passing changes nothing."""


# --------------------------------------------------------------------------- the table

TABLE: dict[str, Bad] = {
    # ------------------------------------------------------------------ wrong types
    "cpusPerGpu is written as a quoted string": Bad(
        in_policy("spec.pools[0].cpusPerGpu", "12"),
        "spec.pools[0].cpusPerGpu",
        "must be an integer",
        Refused("spec.pools[0].cpusPerGpu"),
    ),
    "a cooldown is written as a Go duration instead of seconds": Bad(
        in_policy("spec.risk", {"cooldownSeconds": "30m"}),
        "spec.risk.cooldownSeconds",
        "must be an integer",
        Refused("spec.risk.cooldownSeconds"),
    ),
    "a tier's maxExecutionSeconds is written as 7d": Bad(
        in_policy("spec.tiers[1].maxExecutionSeconds", "7d"),
        "spec.tiers[1].maxExecutionSeconds",
        "must be an integer",
        Refused("spec.tiers[1].maxExecutionSeconds"),
    ),
    "a single namespace is written as a bare string instead of a list": Bad(
        in_project("spec.namespaces", "vision"),
        "spec.namespaces",
        "must be an array",
        Refused("spec.namespaces"),
    ),
    "quotas are written as a map from pool to GPUs": Bad(
        in_project("spec.quotas", {"a100": 16}),
        "spec.quotas",
        "must be an array",
        # Strict decoding sees the map's keys as unknown fields before the schema sees a type.
        Refused("spec.quotas.a100", status=400),
    ),
    "a targetConfidence is written as a percentage string": Bad(
        in_project("spec.deadlines", deadline(at=AT, targetConfidence="95%")),
        "spec.deadlines[0].targetConfidence",
        "must be a number",
        Refused("spec.deadlines[0].targetConfidence"),
    ),
    "a budget is written as a bare number instead of an object": Bad(
        in_project("spec.budget", 5000),
        "spec.budget",
        "must be an object",
        Refused("spec.budget"),
    ),
    "priorityBoost is written as the string true": Bad(
        in_policy("spec.risk", {"priorityBoost": "true"}),
        "spec.risk.priorityBoost",
        "must be a boolean",
        Refused("spec.risk.priorityBoost"),
    ),
    "a zone is written as a number": Bad(
        in_policy("spec.pools[0].zones", [1]),
        "spec.pools[0].zones[0]",
        "must be a string",
        Refused("spec.pools[0].zones[0]"),
    ),
    "a nodeClass is given by bare name instead of as an object": Bad(
        in_policy("spec.pools[0].nodeClass", "gpu"),
        "spec.pools[0].nodeClass",
        "must be an object",
        Refused("spec.pools[0].nodeClass"),
    ),
    "an override reason is an incident number, not a string": Bad(
        in_policy("spec.override", {"mode": "Freeze", "reason": 4242}),
        "spec.override.reason",
        "must be a string",
        Refused("spec.override.reason"),
    ),
    "shareCapacity is written as 0": Bad(
        in_project("spec.shareCapacity", 0),
        "spec.shareCapacity",
        "must be a boolean",
        Refused("spec.shareCapacity"),
    ),
    "matchLabels are written as a list of key=value strings": Bad(
        in_project("spec.deadlines", deadline(at=AT, matchLabels=["paper=cvpr"])),
        "spec.deadlines[0].matchLabels",
        "must be an object",
        Refused("spec.deadlines[0].matchLabels"),
    ),
    "a time zone is written as an hour offset number": Bad(
        in_project("spec.deadlines", weekly(timeZone=2)),
        "spec.deadlines[0].timeZone",
        "must be a string",
        Refused("spec.deadlines[0].timeZone"),
    ),
    # ------------------------------------------------------------------ out of range
    "a node with 65 GPUs is above the maximum of 64": Bad(
        in_policy("spec.pools[0].gpusPerNode", 65),
        "spec.pools[0].gpusPerNode",
        "less than or equal to 64",
        Refused("spec.pools[0].gpusPerNode"),
    ),
    "a pool of 10^20 GPUs is a number no integer field holds": Bad(
        in_policy("spec.pools[0].maxGpus", 10**20),
        "spec.pools[0].maxGpus",
        "less than or equal to 100000",
        Refused("spec.pools[0].maxGpus"),
    ),
    "a tier priority below the WorkloadPriorityClass minimum": Bad(
        in_policy("spec.tiers[1].priority", -1000001),
        "spec.tiers[1].priority",
        "greater than or equal to -1000000",
        Refused("spec.tiers[1].priority"),
    ),
    "a project fair-share weight above 1000": Bad(
        in_project("spec.fairShareWeight", 1001),
        "spec.fairShareWeight",
        "less than or equal to 1000",
        Refused("spec.fairShareWeight"),
    ),
    "too few Monte Carlo samples for a risk estimate": Bad(
        in_policy("spec.risk", {"samples": 49}),
        "spec.risk.samples",
        "greater than or equal to 50",
        Refused("spec.risk.samples"),
    ),
    "an evaluation window longer than a day": Bad(
        in_policy("spec.risk", {"evaluationWindowSeconds": 86401}),
        "spec.risk.evaluationWindowSeconds",
        "less than or equal to 86400",
        Refused("spec.risk.evaluationWindowSeconds"),
    ),
    "a spot availability ratio above 1": Bad(
        in_policy("spec.pools[0].spotAvailability", 1.1),
        "spec.pools[0].spotAvailability",
        "less than or equal to 1",
        Refused("spec.pools[0].spotAvailability"),
    ),
    "a negative spot availability ratio": Bad(
        in_policy("spec.pools[0].spotAvailability", -0.1),
        "spec.pools[0].spotAvailability",
        "greater than or equal to 0",
        Refused("spec.pools[0].spotAvailability"),
    ),
    "a tier execution limit under a minute": Bad(
        in_policy("spec.tiers[0].maxExecutionSeconds", 59),
        "spec.tiers[0].maxExecutionSeconds",
        "greater than or equal to 60",
        Refused("spec.tiers[0].maxExecutionSeconds"),
    ),
    "a provisioning latency prior over two hours": Bad(
        in_policy("spec.pools[0].provisioningLatencySeconds", 7201),
        "spec.pools[0].provisioningLatencySeconds",
        "less than or equal to 7200",
        Refused("spec.pools[0].provisioningLatencySeconds"),
    ),
    "a Prometheus timeout of zero seconds": Bad(
        in_policy("spec.prometheus", {"timeoutSeconds": 0}),
        "spec.prometheus.timeoutSeconds",
        "greater than 0",
        Refused("spec.prometheus.timeoutSeconds"),
    ),
    "a target confidence below one half": Bad(
        in_project("spec.deadlines", deadline(at=AT, targetConfidence=0.4)),
        "spec.deadlines[0].targetConfidence",
        "greater than or equal to 0.5",
        Refused("spec.deadlines[0].targetConfidence"),
    ),
    "a negative budget": Bad(
        in_project("spec.budget", {"dollarsPerMonth": -100}),
        "spec.budget.dollarsPerMonth",
        "greater than 0",
        Refused("spec.budget.dollarsPerMonth"),
    ),
    "a negative borrowing limit": Bad(
        in_project("spec.quotas[0].borrowingLimitGpus", -8),
        "spec.quotas[0].borrowingLimitGpus",
        "greater than or equal to 0",
        Refused("spec.quotas[0].borrowingLimitGpus"),
    ),
    "a quota above the schema's 100000 GPUs": Bad(
        in_project("spec.quotas[0].nominalGpus", 100001),
        "spec.quotas[0].nominalGpus",
        "less than or equal to 100000",
        Refused("spec.quotas[0].nominalGpus"),
    ),
    "a tier reserves zero GPUs": Bad(
        in_policy("spec.tiers[0].reserved", [{"pool": "a100", "gpus": 0}]),
        "spec.tiers[0].reserved[0].gpus",
        "greater than or equal to 1",
        Refused("spec.tiers[0].reserved[0].gpus"),
    ),
    "zero GiB of memory per GPU": Bad(
        in_policy("spec.pools[0].memoryGiBPerGpu", 0),
        "spec.pools[0].memoryGiBPerGpu",
        "greater than or equal to 1",
        Refused("spec.pools[0].memoryGiBPerGpu"),
    ),
    "an interruption rate of 11 per node-hour": Bad(
        in_policy("spec.pools[0].spotInterruptionsPerHour", 11),
        "spec.pools[0].spotInterruptionsPerHour",
        "less than or equal to 10",
        Refused("spec.pools[0].spotInterruptionsPerHour"),
    ),
    "a priority boost of zero": Bad(
        in_policy("spec.risk", {"priorityBoostValue": 0}),
        "spec.risk.priorityBoostValue",
        "greater than or equal to 1",
        Refused("spec.risk.priorityBoostValue"),
    ),
    "a negative cooldown": Bad(
        in_policy("spec.risk", {"cooldownSeconds": -1}),
        "spec.risk.cooldownSeconds",
        "greater than or equal to 0",
        Refused("spec.risk.cooldownSeconds"),
    ),
    # ------------------------------------------------------------------ enums
    "preemption is written in camelCase as lowerPriority": Bad(
        in_policy("spec.tiers[0].preemption", "lowerPriority"),
        "spec.tiers[0].preemption",
        "unsupported value",
        Refused("spec.tiers[0].preemption"),
    ),
    "an override mode Paused that does not exist": Bad(
        in_policy("spec.override", {"mode": "Paused"}),
        "spec.override.mode",
        "unsupported value",
        Refused("spec.override.mode"),
    ),
    "a KEDA authentication kind in lower case": Bad(
        in_policy(
            "spec.prometheus",
            {"kedaAuthentication": {"name": "prom", "kind": "triggerauthentication"}},
        ),
        "spec.prometheus.kedaAuthentication.kind",
        "unsupported value",
        Refused("spec.prometheus.kedaAuthentication.kind"),
    ),
    "an empty preemption": Bad(
        in_policy("spec.tiers[1].preemption", ""),
        "spec.tiers[1].preemption",
        "unsupported value",
        Refused("spec.tiers[1].preemption"),
    ),
    # ------------------------------------------------------------------ cron and time zones
    "a schedule written in words": Bad(
        in_project("spec.deadlines", deadline(schedule="every friday")),
        "spec.deadlines[0].schedule",
        "5-field cron expression",
        Refused("spec.deadlines[0].schedule"),
    ),
    "a Quartz schedule with a seconds field": Bad(
        in_project("spec.deadlines", deadline(schedule="0 0 18 ? * FRI")),
        "spec.deadlines[0].schedule",
        "5-field cron expression",
        Refused("spec.deadlines[0].schedule"),
    ),
    "an @fortnightly macro cron does not have": Bad(
        in_project("spec.deadlines", deadline(schedule="@fortnightly")),
        "spec.deadlines[0].schedule",
        "5-field cron expression",
        Refused("spec.deadlines[0].schedule"),
    ),
    "a schedule at minute 60": Bad(
        in_project("spec.deadlines", deadline(schedule="60 17 * * FRI")),
        "spec.deadlines[0].schedule",
        "out of range",
        Accepted("spec.deadlines[0].schedule"),
    ),
    "a schedule on a misspelled weekday FRY": Bad(
        in_project("spec.deadlines", deadline(schedule="0 18 * * FRY")),
        "spec.deadlines[0].schedule",
        "FRY",
        Accepted("spec.deadlines[0].schedule"),
    ),
    "a schedule on February 30th never fires": Bad(
        in_project("spec.deadlines", deadline(schedule="0 18 30 2 *")),
        "spec.deadlines[0].schedule",
        "never fires",
        Accepted("spec.deadlines[0].schedule"),
    ),
    "a misspelled time zone Europe/Berln": Bad(
        in_project("spec.deadlines", weekly(timeZone="Europe/Berln")),
        "spec.deadlines[0].timeZone",
        "unknown time zone",
        Accepted("spec.deadlines[0].timeZone"),
    ),
    "a time zone abbreviation CEST instead of an IANA name": Bad(
        in_project("spec.deadlines", weekly(timeZone="CEST")),
        "spec.deadlines[0].timeZone",
        "unknown time zone",
        Accepted("spec.deadlines[0].timeZone"),
    ),
    "a time zone written as a UTC offset": Bad(
        in_project("spec.deadlines", weekly(timeZone="UTC+02:00")),
        "spec.deadlines[0].timeZone",
        "unknown time zone",
        Accepted("spec.deadlines[0].timeZone"),
    ),
    "a time zone that names a region, Europe, rather than a zone": Bad(
        in_project("spec.deadlines", weekly(timeZone="Europe")),
        "spec.deadlines[0].timeZone",
        "unknown time zone",
        Accepted("spec.deadlines[0].timeZone"),
    ),
    # ------------------------------------------------------------------ deadlines (date-time)
    "a deadline with a space between date and time": Bad(
        in_project("spec.deadlines", deadline(at="2026-12-15 17:00:00Z")),
        "spec.deadlines[0].at",
        "RFC 3339",
        Refused("spec.deadlines[0].at"),
    ),
    "a deadline on February 30th": Bad(
        in_project("spec.deadlines", deadline(at="2026-02-30T17:00:00Z")),
        "spec.deadlines[0].at",
        "RFC 3339",
        Refused("spec.deadlines[0].at"),
    ),
    "a deadline at 24:00, end-of-day notation RFC 3339 lacks": Bad(
        in_project("spec.deadlines", deadline(at="2026-12-15T24:00:00Z")),
        "spec.deadlines[0].at",
        "RFC 3339",
        Refused("spec.deadlines[0].at"),
    ),
    "a deadline as a Unix timestamp": Bad(
        in_project("spec.deadlines", deadline(at=1765818000)),
        "spec.deadlines[0].at",
        "RFC 3339",
        Refused("spec.deadlines[0].at"),
    ),
    "a deadline with an offset without a colon": Bad(
        in_project("spec.deadlines", deadline(at="2026-12-15T17:00:00+0100")),
        "spec.deadlines[0].at",
        "RFC 3339",
        Refused("spec.deadlines[0].at"),
    ),
    "a deadline in day/month/year order": Bad(
        in_project("spec.deadlines", deadline(at="15/12/2026 17:00")),
        "spec.deadlines[0].at",
        "RFC 3339",
        Refused("spec.deadlines[0].at"),
    ),
    "a deadline on a leap second": Bad(
        in_project("spec.deadlines", deadline(at="2026-12-31T23:59:60Z")),
        "spec.deadlines[0].at",
        "RFC 3339",
        Refused("spec.deadlines[0].at"),
    ),
    "a deadline written with a lower-case t and z": Bad(
        in_project("spec.deadlines", deadline(at="2026-12-15t17:00:00z")),
        "spec.deadlines[0].at",
        "RFC 3339",
        Refused("spec.deadlines[0]"),
    ),
    "a deadline with only a time zone": Bad(
        in_project("spec.deadlines", deadline(timeZone="Europe/Berlin")),
        "spec.deadlines[0]",
        "exactly one of at",
        Refused("spec.deadlines[0]"),
    ),
    # ------------------------------------------------------------------ min above max
    "a warm pool minimum above its maximum": Bad(
        in_policy("spec.pools[0].warmPool", {"minGpus": 20, "maxGpus": 16}),
        "spec.pools[0].warmPool.minGpus",
        "must not exceed maxGpus",
        Refused("spec.pools[0].warmPool.minGpus"),
    ),
    "lowerThreshold above raiseThreshold": Bad(
        in_policy("spec.risk", {"raiseThreshold": 0.2, "lowerThreshold": 0.3}),
        "spec.risk.lowerThreshold",
        "must be below raiseThreshold",
        Refused("spec.risk.lowerThreshold"),
    ),
    "an on-demand floor left above a lowered ceiling": Bad(
        in_policy("spec.pools[0].onDemand", {"floorGpus": 64, "ceilingGpus": 32}),
        "spec.pools[0].onDemand.floorGpus",
        "must not exceed ceilingGpus",
        Refused("spec.pools[0].onDemand.floorGpus"),
    ),
    "a project lends twice the GPUs it has": Bad(
        in_project("spec.quotas[0].lendingLimitGpus", 32),
        "spec.quotas[0].lendingLimitGpus",
        "must not exceed nominalGpus",
        Refused("spec.quotas[0].lendingLimitGpus"),
    ),
    "spot and on-demand prices written the wrong way round": Bad(
        in_policy("spec.pools[0].prices", {"spotPerGpuHour": 4.1, "onDemandPerGpuHour": 1.29}),
        "spec.pools[0].prices.spotPerGpuHour",
        "must not exceed onDemandPerGpuHour",
        Refused("spec.pools[0].prices.spotPerGpuHour"),
    ),
    "a warm pool larger than the pool": Bad(
        in_policy("spec.pools[0].warmPool", {"maxGpus": 256}),
        "spec.pools[0].warmPool.maxGpus",
        "must not exceed maxGpus",
        Refused("spec.pools[0].warmPool.maxGpus"),
    ),
    # ------------------------------------------------------------------ references and duplicates
    "a quota for a pool the policy does not define": Bad(
        in_project("spec.quotas[0].pool", "v100"),
        "spec.quotas[0].pool",
        "unknown pool",
        Accepted("spec.quotas[0].pool"),
    ),
    "a tier reserves GPUs of an undefined pool": Bad(
        in_policy("spec.tiers[0].reserved", [{"pool": "h100", "gpus": 8}]),
        "spec.tiers[0].reserved[0].pool",
        "unknown pool",
        Accepted("spec.tiers[0].reserved[0].pool"),
    ),
    "a manual override for an undefined pool": Bad(
        in_policy(
            "spec.override", {"mode": "Manual", "onDemandGpus": [{"pool": "h100", "gpus": 8}]}
        ),
        "spec.override.onDemandGpus[0].pool",
        "unknown pool",
        Accepted("spec.override.onDemandGpus[0].pool"),
    ),
    "a project in a tier the policy does not define": Bad(
        in_project("spec.tier", "platinum"),
        "spec.tier",
        "unknown tier",
        Accepted("spec.tier"),
    ),
    "a manual override outside the pool's on-demand bounds": Bad(
        in_policy(
            "spec.override", {"mode": "Manual", "onDemandGpus": [{"pool": "a100", "gpus": 2}]}
        ),
        "spec.override.onDemandGpus[0].gpus",
        "outside the on-demand bounds",
        Accepted("spec.override.onDemandGpus[0].gpus"),
    ),
    "two tiers share a priority": Bad(
        in_policy("spec.tiers[1].priority", 1000),
        "spec.tiers[1].priority",
        "distinct priorities",
        Accepted("spec.tiers[1].priority"),
    ),
    "a quota larger than its pool": Bad(
        in_project("spec.quotas[0].nominalGpus", 200),
        "spec.quotas[0].nominalGpus",
        "exceeds maxGpus",
        Accepted("spec.quotas[0].nominalGpus"),
    ),
    "two tiers with the same name": Bad(
        in_policy("spec.tiers[1].name", "production"),
        "spec.tiers[1].name",
        "duplicate value",
        Refused("spec.tiers[1]"),
    ),
    "two pools with the same name": Bad(
        in_policy("spec.pools", [pool_doc("a100"), pool_doc("a100", zones=["us-east-1b"])]),
        "spec.pools[1].name",
        "duplicate value",
        Refused("spec.pools[1]"),
    ),
    "a zone listed twice": Bad(
        in_policy("spec.pools[0].zones", ["us-east-1a", "us-east-1a"]),
        "spec.pools[0].zones[1]",
        "duplicate value",
        Refused("spec.pools[0].zones[1]"),
    ),
    "a tier reserving in the same pool twice": Bad(
        in_policy(
            "spec.tiers[0].reserved",
            [{"pool": "a100", "gpus": 8}, {"pool": "a100", "gpus": 4}],
        ),
        "spec.tiers[0].reserved[1].pool",
        "duplicate value",
        Refused("spec.tiers[0].reserved[1]"),
    ),
    "two TrainingProjects of the same name in different files": Bad(
        Subject(
            (policy_doc(), project_doc("vision"), project_doc("vision", namespaces=["vision-2"])),
            2,
        ),
        "metadata.name",
        "duplicate TrainingProject",
        Accepted(None),
    ),
    "two projects claim the same namespace": Bad(
        Subject(
            (policy_doc(), project_doc("vision"), project_doc("speech", namespaces=["vision"])),
            2,
        ),
        "spec.namespaces[0]",
        "already belongs to project",
        Accepted("spec.namespaces[0]"),
    ),
    "two CapacityPolicies": Bad(
        Subject(
            (policy_doc(), set_path(policy_doc(), "metadata.name", "other"), project_doc()),
            1,
        ),
        "metadata.name",
        "only one CapacityPolicy",
        Accepted("metadata.name"),
    ),
    "two projects' quotas together over-subscribe a pool": Bad(
        Subject(
            (
                policy_doc(),
                project_doc("vision", quotas=[{"pool": "a100", "nominalGpus": 100}]),
                project_doc("speech", quotas=[{"pool": "a100", "nominalGpus": 100}]),
            ),
            0,
        ),
        "spec.pools[0].maxGpus",
        "exceed maxGpus",
        Accepted("spec.pools[0].maxGpus"),
    ),
    # ------------------------------------------------------------------ too many items
    "seventeen zones in one pool": Bad(
        in_policy("spec.pools[0].zones", [f"zone-{i}" for i in range(17)]),
        "spec.pools[0].zones",
        "at most 16 items",
        Refused("spec.pools[0].zones"),
    ),
    "thirty-three instance types": Bad(
        in_policy("spec.pools[0].instanceTypes", [f"p{i}.xlarge" for i in range(33)]),
        "spec.pools[0].instanceTypes",
        "at most 32 items",
        Refused("spec.pools[0].instanceTypes"),
    ),
    "thirty-three namespaces in one project": Bad(
        in_project("spec.namespaces", [f"team-{i}" for i in range(33)]),
        "spec.namespaces",
        "at most 32 items",
        Refused("spec.namespaces"),
    ),
    "seventeen deadlines": Bad(
        in_project("spec.deadlines", [{"name": f"d{i}", "at": AT} for i in range(17)]),
        "spec.deadlines",
        "at most 16 items",
        Refused("spec.deadlines"),
    ),
    "seventeen pools": Bad(
        in_policy("spec.pools", [pool_doc(f"pool-{i}") for i in range(17)]),
        "spec.pools",
        "at most 16 items",
        Refused("spec.pools"),
    ),
    "seventeen quotas": Bad(
        in_project("spec.quotas", [{"pool": f"pool-{i}", "nominalGpus": 1} for i in range(17)]),
        "spec.quotas",
        "at most 16 items",
        Refused("spec.quotas"),
    ),
    "seventeen matchLabels": Bad(
        in_project(
            "spec.deadlines",
            deadline(at=AT, matchLabels={f"example.com/k{i}": "v" for i in range(17)}),
        ),
        "spec.deadlines[0].matchLabels",
        "at most 16 entries",
        Refused("spec.deadlines[0].matchLabels"),
    ),
    # ------------------------------------------------------------------ names
    "a project name with a dot, valid for Kubernetes but not as a queue name": Bad(
        in_project("metadata.name", "vision.research"),
        "metadata.name",
        "RFC 1123 label",
        Refused("metadata.name"),
    ),
    "a policy name of 64 characters": Bad(
        in_policy("metadata.name", "f" * 64),
        "metadata.name",
        "RFC 1123 label",
        Refused("metadata.name"),
    ),
    "a namespace with a capital letter": Bad(
        in_project("spec.namespaces", ["Vision"]),
        "spec.namespaces[0]",
        "RFC 1123 label",
        Refused("spec.namespaces[0]"),
    ),
    "a pool name in capitals": Bad(
        in_policy("spec.pools[0].name", "A100"),
        "spec.pools[0].name",
        "RFC 1123 label",
        Refused("spec.pools[0].name"),
    ),
    "a deadline name with a space": Bad(
        in_project("spec.deadlines", [{"name": "q4 launch", "at": AT}]),
        "spec.deadlines[0].name",
        "RFC 1123 label",
        Refused("spec.deadlines[0].name"),
    ),
    "a tier name of 41 characters": Bad(
        in_policy("spec.tiers[1].name", "r" * 41),
        "spec.tiers[1].name",
        "at most 40 characters",
        Refused("spec.tiers[1].name"),
    ),
    "a KEDA authentication name with an underscore": Bad(
        in_policy("spec.prometheus", {"kedaAuthentication": {"name": "prom_auth"}}),
        "spec.prometheus.kedaAuthentication.name",
        "RFC 1123 label",
        Refused("spec.prometheus.kedaAuthentication.name"),
    ),
    "a namespace with the trailing newline of a YAML block scalar": Bad(
        in_project("spec.namespaces", ["vision\n"]),
        "spec.namespaces[0]",
        "RFC 1123 label",
        Refused("spec.namespaces[0]"),
    ),
    "a project name with a trailing newline": Bad(
        in_project("metadata.name", "vision\n"),
        "metadata.name",
        "RFC 1123 label",
        Refused("metadata.name"),
    ),
    # ------------------------------------------------------------------ missing required fields
    "a pool without zones": Bad(
        in_policy("spec.pools[0].zones", DELETE),
        "spec.pools[0].zones",
        "required field is missing",
        Refused("spec.pools[0].zones"),
    ),
    "a pool without prices": Bad(
        in_policy("spec.pools[0].prices", DELETE),
        "spec.pools[0].prices",
        "required field is missing",
        Refused("spec.pools[0].prices"),
    ),
    "a project without a tier": Bad(
        in_project("spec.tier", DELETE),
        "spec.tier",
        "required field is missing",
        Refused("spec.tier"),
    ),
    "a quota without a pool": Bad(
        in_project("spec.quotas[0].pool", DELETE),
        "spec.quotas[0].pool",
        "required field is missing",
        Refused("spec.quotas[0].pool"),
    ),
    "a deadline without a name": Bad(
        in_project("spec.deadlines", [{"at": AT}]),
        "spec.deadlines[0].name",
        "required field is missing",
        Refused("spec.deadlines[0].name"),
    ),
    "a reservation without a GPU count": Bad(
        in_policy("spec.tiers[0].reserved", [{"pool": "a100"}]),
        "spec.tiers[0].reserved[0].gpus",
        "required field is missing",
        Refused("spec.tiers[0].reserved[0].gpus"),
    ),
    "an empty budget": Bad(
        in_project("spec.budget", {}),
        "spec.budget.dollarsPerMonth",
        "required field is missing",
        Refused("spec.budget.dollarsPerMonth"),
    ),
    # ------------------------------------------------------------------ unknown fields
    "a tier's weight instead of fairShareWeight": Bad(
        in_policy("spec.tiers[0].weight", 4),
        "spec.tiers[0].weight",
        "unknown field",
        Refused("spec.tiers[0].weight", status=400),
    ),
    "deadline in the singular instead of deadlines": Bad(
        in_project("spec.deadline", deadline(at=AT)),
        "spec.deadline",
        "unknown field",
        Refused("spec.deadline", status=400),
    ),
    "a quota's gpus instead of nominalGpus": Bad(
        in_project("spec.quotas", [{"pool": "a100", "gpus": 16}]),
        "spec.quotas[0].gpus",
        "unknown field",
        Refused("spec.quotas[0].gpus", status=400),
    ),
    "an on-demand floor written as floor": Bad(
        in_policy("spec.pools[0].onDemand", {"floor": 8, "ceilingGpus": 64}),
        "spec.pools[0].onDemand.floor",
        "unknown field",
        Refused("spec.pools[0].onDemand.floor", status=400),
    ),
    # ------------------------------------------------------------------ patterns and rules
    "a Prometheus url with an ftp scheme": Bad(
        in_policy("spec.prometheus", {"url": "ftp://prometheus:9090"}),
        "spec.prometheus.url",
        "http:// or https://",
        Refused("spec.prometheus.url"),
    ),
    "a node label Karpenter reserves": Bad(
        in_policy("spec.pools[0].nodeLabels", {"karpenter.sh/nodepool": "gpu"}),
        "spec.pools[0].nodeLabels",
        "Karpenter reserves",
        Refused("spec.pools[0].nodeLabels"),
    ),
    "a node label pinning one hostname": Bad(
        in_policy("spec.pools[0].nodeLabels", {"kubernetes.io/hostname": "gpu-node-1"}),
        "spec.pools[0].nodeLabels",
        "Karpenter reserves",
        Refused("spec.pools[0].nodeLabels"),
    ),
    "a GPU resource with a capitalised domain": Bad(
        in_policy("spec.pools[0].gpuResource", "Nvidia.com/gpu"),
        "spec.pools[0].gpuResource",
        "extended resource name",
        Refused("spec.pools[0].gpuResource"),
    ),
    "an instance type with a space": Bad(
        in_policy("spec.pools[0].instanceTypes", ["p4d 24xlarge"]),
        "spec.pools[0].instanceTypes[0]",
        "label value",
        Refused("spec.pools[0].instanceTypes[0]"),
    ),
    "a Freeze override that also lists on-demand GPUs": Bad(
        in_policy(
            "spec.override", {"mode": "Freeze", "onDemandGpus": [{"pool": "a100", "gpus": 8}]}
        ),
        "spec.override.onDemandGpus",
        "only then",
        Refused("spec.override.onDemandGpus"),
    ),
    "a lending limit on a project that does not share capacity": Bad(
        in_project(
            "spec",
            project_doc(
                shareCapacity=False,
                quotas=[{"pool": "a100", "nominalGpus": 16, "lendingLimitGpus": 8}],
            )["spec"],
        ),
        "spec.quotas",
        "need shareCapacity: true",
        Refused("spec.quotas"),
    ),
}


def _params(
    cases: dict[str, Bad],
    bug: str | None,
    *,
    when: type[Refused] | type[Accepted] | None = None,
) -> list[Any]:
    """The table as pytest params, each row a strict xfail where its `bug` field says so."""
    params = []
    for name, case in cases.items():
        if when is not None and not isinstance(case.server, when):
            continue
        reason = getattr(case, bug) if bug else ""
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(case, id=name, marks=marks))
    return params


def test_the_table_holds_at_least_sixty_distinct_mistakes() -> None:
    """The table is the point of this module; it must not shrink unnoticed."""
    subjects = {json.dumps(case.subject.docs, sort_keys=True) for case in TABLE.values()}
    assert len(TABLE) >= 60
    assert len(subjects) == len(TABLE)


def test_the_documents_the_rows_change_are_valid(tmp_path: Path) -> None:
    """So that a row fails for its own mistake; each row also asserts its exact path."""
    write_policy_dir(tmp_path, (policy_doc(), project_doc()))
    policy_set = load_path(tmp_path)
    assert [p.name for p in policy_set.projects] == ["vision"]


# --------------------------------------------------------------------------- (a) the loader


def write_policy_dir(directory: Path, docs: tuple[Doc, ...]) -> Path:
    """policy.yaml with the first document, projects.yaml with the rest, as a repository has."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "policy.yaml").write_text(yaml.safe_dump(docs[0], sort_keys=False))
    if docs[1:]:
        (directory / "projects.yaml").write_text(yaml.safe_dump_all(docs[1:], sort_keys=False))
    return directory


def origins_of(directory: Path, docs: tuple[Doc, ...]) -> dict[tuple[str, str], str]:
    """(kind, name) -> the origin the loader gives that document (the later one on a clash)."""
    projects = directory / "projects.yaml"
    origins = {(docs[0]["kind"], docs[0]["metadata"]["name"]): str(directory / "policy.yaml")}
    for i, doc in enumerate(docs[1:], start=1):
        origin = str(projects) if len(docs) == 2 else f"{projects}#{i}"
        origins[(doc["kind"], str(doc["metadata"]["name"]))] = origin
    return origins


def loader_errors(directory: Path) -> list[PolicyError]:
    try:
        load_path(directory)
    except InvalidPolicyError as invalid:
        return list(invalid.errors)
    return []


@pytest.mark.parametrize("case", _params(TABLE, "loader_bug"))
def test_quartermaster_validate_rejects_it_naming_the_field(case: Bad, tmp_path: Path) -> None:
    errors = loader_errors(write_policy_dir(tmp_path, case.subject.docs))
    assert errors, "the loader accepted the policy"
    doc = case.subject.doc
    matching = [e for e in errors if e.path == case.path and case.reason in e.message]
    assert matching, f"no error at {case.path} saying {case.reason!r}: {[str(e) for e in errors]}"
    error = matching[0]
    assert error.kind == doc["kind"]
    assert error.origin == origins_of(tmp_path, case.subject.docs)[(error.kind, error.name)]


# --------------------------------------------------------------------------- (b) the API server


def kind_of(doc: Doc) -> kinds.Kind:
    return kinds.CAPACITY_POLICY if doc["kind"] == "CapacityPolicy" else kinds.TRAINING_PROJECT


def create_as_kubectl(kube: KubeClient, doc: Doc) -> dict[str, Any]:
    """POST the object the way `kubectl create` does: unknown fields are errors, not pruned."""
    result: dict[str, Any] = kube.request(
        "POST", kind_of(doc).path(), query={"fieldValidation": "Strict"}, body=doc
    )
    return result


def names_on_server(kube: KubeClient, kind: kinds.Kind) -> list[str]:
    items, _ = kube.list(kind)
    return sorted(item["metadata"]["name"] for item in items)


@pytest.mark.parametrize("case", _params(TABLE, None, when=Refused))
def test_the_api_server_refuses_it_naming_the_field(case: Bad, kube: KubeClient) -> None:
    assert isinstance(case.server, Refused)
    doc = case.subject.doc
    with pytest.raises(KubeError) as refused:
        create_as_kubectl(kube, doc)
    error = refused.value
    fields = [str(cause.get("field", "")) for cause in error.causes]
    message = str(error.body.get("message", ""))
    assert error.status == case.server.status, message
    assert case.server.path in message or any(case.server.path in f for f in fields), (
        f"{case.server.path} not in {message!r} / {fields}"
    )
    assert names_on_server(kube, kind_of(doc)) == []


def live_validation_errors(kube: KubeClient) -> list[PolicyError]:
    """What the controller reports from the objects on the server (Valid=False conditions)."""
    policies, _ = kube.list(kinds.CAPACITY_POLICY)
    projects, _ = kube.list(kinds.TRAINING_PROJECT)
    validation = validate_cluster(policies, projects)
    return [error for errors in validation.errors.values() for error in errors]


@pytest.mark.parametrize("case", _params(TABLE, "live_bug", when=Accepted))
def test_the_api_server_accepts_it_and_the_controller_flags_the_live_object(
    case: Bad, kube: KubeClient
) -> None:
    """Only the controller can see these; it must, from what the server stores."""
    assert isinstance(case.server, Accepted)
    for doc in case.subject.docs:
        kube.apply(kind_of(doc), copy.deepcopy(doc), field_manager="kubectl")
    target = case.subject.doc
    if case.server.live_path is None:
        # A second object of the same name updated the first: one object, the later spec.
        stored = kube.get(kind_of(target), target["metadata"]["name"])
        assert stored is not None
        assert names_on_server(kube, kind_of(target)) == [target["metadata"]["name"]]
        assert stored["spec"]["namespaces"] == target["spec"]["namespaces"]
        return
    errors = live_validation_errors(kube)
    assert [e for e in errors if e.path == case.server.live_path and case.reason in e.message], [
        str(e) for e in errors
    ]


# --------------------------------------------------------------------------- (c) the CLI

CLI_CASES = [
    "a single namespace is written as a bare string instead of a list",
    "a quota for a pool the policy does not define",
    "a schedule at minute 60",
    "a tier's weight instead of fairShareWeight",
    "seventeen zones in one pool",
]


@pytest.mark.parametrize("name", CLI_CASES)
def test_the_cli_exits_non_zero_naming_file_document_and_field(name: str, tmp_path: Path) -> None:
    """One file with every document, as `kubectl apply -f` takes it, checked by the real command."""
    case = TABLE[name]
    file = tmp_path / "fleet.yaml"
    file.write_text(yaml.safe_dump_all(case.subject.docs, sort_keys=False))
    result = subprocess.run(
        [sys.executable, "-m", "controller.cli", "validate", "-f", str(file)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    doc = case.subject.doc
    where = f"{file}#{case.subject.target + 1}: {doc['kind']}/{doc['metadata']['name']}: "
    lines = result.stderr.splitlines()
    assert any(
        line.startswith(f"{where}{case.path}: ") and case.reason in line for line in lines
    ), result.stderr
    assert lines[-1].startswith(f"{file}: ") and lines[-1].endswith(("error", "errors"))


# --------------------------------------------------------------------------- loader vs server


def test_an_integral_float_is_an_integer_to_the_loader_as_to_the_api_server(
    kube: KubeClient, tmp_path: Path
) -> None:
    doc = set_path(policy_doc(), "spec.tiers[0].priority", 1000.0)
    stored = create_as_kubectl(kube, doc)
    assert stored["spec"]["tiers"][0]["priority"] == 1000
    write_policy_dir(tmp_path, (doc, project_doc()))
    assert [str(e) for e in loader_errors(tmp_path)] == []


def test_a_far_future_deadline_the_server_stores_does_not_stop_the_controller(
    kube: KubeClient,
) -> None:
    far = set_path(project_doc("far"), "spec.deadlines", deadline(at="9999-12-31T23:59:59-01:00"))
    kube.apply(kinds.CAPACITY_POLICY, policy_doc(), field_manager="kubectl")
    kube.apply(kinds.TRAINING_PROJECT, project_doc("vision"), field_manager="kubectl")
    kube.apply(kinds.TRAINING_PROJECT, far, field_manager="kubectl")
    policies, _ = kube.list(kinds.CAPACITY_POLICY)
    projects, _ = kube.list(kinds.TRAINING_PROJECT)
    validation = validate_cluster(policies, projects)
    assert validation.policy_set is not None
    assert "vision" in [p.name for p in validation.policy_set.projects]


# --------------------------------------------------------------------------- oversized objects

REQUEST_LIMIT = 3 * 1024 * 1024
"""kube-apiserver's --max-request-bytes default: bodies above it are refused before decoding."""


def live_state(kube: KubeClient) -> dict[tuple[str, str], tuple[str, Any]]:
    """(kind, name) -> (resourceVersion, spec) of every policy object on the server."""
    state = {}
    for kind in (kinds.CAPACITY_POLICY, kinds.TRAINING_PROJECT):
        items, _ = kube.list(kind)
        for item in items:
            meta = item["metadata"]
            state[(kind.kind, meta["name"])] = (meta["resourceVersion"], item["spec"])
    return state


def oversized_project(name: str) -> Doc:
    """A project whose JSON is over the request limit: 260,000 namespaces (about 3.5 MiB)."""
    doc = project_doc(name, namespaces=[f"ns-{i:07d}" for i in range(260_000)])
    assert len(json.dumps(doc)) > REQUEST_LIMIT
    return doc


@pytest.mark.parametrize(
    ("attempt", "status", "says"),
    [
        pytest.param(
            lambda kube: create_as_kubectl(kube, oversized_project("huge")),
            413,
            "limit is 3145728",
            id="a new project over the 3 MiB request limit",
        ),
        pytest.param(
            lambda kube: kube.apply(
                kinds.TRAINING_PROJECT, oversized_project("vision"), field_manager="kubectl"
            ),
            413,
            "limit is 3145728",
            id="an update of a live project to over the 3 MiB request limit",
        ),
        pytest.param(
            lambda kube: kube.apply(
                kinds.TRAINING_PROJECT,
                project_doc("vision", namespaces=[f"ns-{i}" for i in range(100_000)]),
                field_manager="kubectl",
            ),
            422,
            "spec.namespaces: Too many: 100000: must have at most 32 items",
            id="an update of a live project to 100,000 namespaces, under the size limit",
        ),
        pytest.param(
            lambda kube: create_as_kubectl(
                kube,
                set_path(
                    policy_doc(),
                    "spec.pools",
                    [pool_doc(f"pool-{i}") for i in range(5_000)],
                ),
            ),
            422,
            "spec.pools: Too many: 5000: must have at most 16 items",
            id="a second policy with 5,000 pools",
        ),
    ],
)
def test_an_oversized_object_is_refused_and_the_live_objects_are_untouched(
    kube: KubeClient, attempt: Callable[[KubeClient], object], status: int, says: str
) -> None:
    """The server's limits hold whatever the controller's: nothing of the live policy changes."""
    kube.apply(kinds.CAPACITY_POLICY, policy_doc(), field_manager="kubectl")
    kube.apply(kinds.TRAINING_PROJECT, project_doc("vision"), field_manager="kubectl")
    before = live_state(kube)
    with pytest.raises(KubeError) as refused:
        attempt(kube)
    assert refused.value.status == status
    assert says in str(refused.value.body.get("message", ""))
    assert live_state(kube) == before
    policies, _ = kube.list(kinds.CAPACITY_POLICY)
    projects, _ = kube.list(kinds.TRAINING_PROJECT)
    validation = validate_cluster(policies, projects)
    assert validation.policy_set is not None
    assert [p.name for p in validation.policy_set.projects] == ["vision"]
