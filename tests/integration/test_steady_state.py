"""Steady state when the API server stores our objects in its own form, and who the server says
wrote them.

The test API server is the CRD-only apiextensions server: it stores custom resources as sent,
and serves PriorityClass as a stand-in CRD that neither canonicalises nor defaults. A real
kube-apiserver re-encodes built-in kinds (quantities canonical, `globalDefault: false`
omitted), and Kueue's ClusterQueue webhook re-encodes queues on create. Here, after the first
pass, each live object is rewritten by a raw update (PUT) into the form such a server stores:
that rewrite stands in for what a real server does. The next pass must write nothing, and
`quartermaster plan` must exit 0. On a kube-apiserver the built-in kinds come back in that form
already, so only the custom resources (no Kueue webhook runs here) are rewritten.

The rewrite below is the test's own, written from Kubernetes' rules for the values the example
policy produces, not the controller's quantity code, so the two can disagree.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller import names
from controller.api.loader import load_path
from controller.examples import EXAMPLE_DIR
from controller.kube import kinds
from controller.kube.client import KubeClient
from controller.kube.events import EventRecorder
from controller.reconcile.diff import is_subset, ref, show_ref, update_form
from controller.reconcile.reconciler import Reconciler
from controller.render.desired import render
from testenv.controlplane import ControlPlane
from tests.integration.conftest import Server, written_objects
from tests.integration.test_plan_cli import IN_SYNC, policy_dir, run_plan, unserved_lines
from tests.integration.test_reconcile import apply_doc, example_documents, managed, writes_of

__all__ = ["policy_dir"]  # a fixture, used by name

Doc = dict[str, Any]
BINARY = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
DECIMAL = {0: "", 3: "k", 6: "M", 9: "G", 12: "T"}


def server_quantity(value: Any) -> str:
    """How kube-apiserver prints the quantities the example renders: whole numbers (`48`),
    binary sizes (`4096Gi`) and decimal weights (`0.5`)."""
    text = str(value)
    if text in ("0", "0Gi"):
        return "0"
    if match := re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)", text):
        number, power = int(match.group(1)), BINARY.index(match.group(2))
        while number % 1024 == 0:
            number, power = number // 1024, power + 1
        return f"{number}{BINARY[power]}"
    if re.fullmatch(r"\d+\.\d+", text):
        return f"{round(float(text) * 1000)}m"
    number, exponent = int(text), 0
    while number % 1000 == 0:
        number, exponent = number // 1000, exponent + 3
    return f"{number}{DECIMAL[exponent]}"


def as_a_server_stores_it(obj: Doc) -> Doc:
    """A live object as a kube-apiserver with Kueue's webhooks would store it."""
    out = {k: v for k, v in copy.deepcopy(obj).items() if (k, v) != ("globalDefault", False)}
    spec = out.get("spec") or {}
    if "fairSharing" in spec:
        spec["fairSharing"]["weight"] = server_quantity(spec["fairSharing"]["weight"])
    for group in spec.get("resourceGroups") or []:
        for flavor in group["flavors"]:
            for resource in flavor["resources"]:
                for field in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    if field in resource:
                        resource[field] = server_quantity(resource[field])
    if "limits" in spec:
        spec["limits"] = {k: server_quantity(v) for k, v in spec["limits"].items()}
    return out


@pytest.fixture
def synced(kube: KubeClient) -> Iterator[Reconciler]:
    for doc in example_documents():
        apply_doc(kube, doc)
    reconciler = Reconciler(kube, events=EventRecorder(kube, reporting_instance="test"))
    reconciler.reconcile()
    yield reconciler


def test_objects_in_the_servers_form_need_no_writes_and_plan_is_clean(
    kube: KubeClient,
    server: Server,
    synced: Reconciler,
    policy_dir: Path,
    control_plane: ControlPlane,
) -> None:
    rendered = {show_ref(ref(o)): o for o in render(load_path(EXAMPLE_DIR)).objects}
    rewritten = []
    for key, live in managed(kube).items():
        stored = as_a_server_stores_it(live)
        if stored == live:
            continue
        kube.replace(kinds.kind_of(stored), stored)
        rewritten.append(key)
    after = managed(kube)
    # The rewrite took, and it is one a byte-for-byte comparison would call a change.
    assert "globalDefault" not in after["PriorityClass/quartermaster-warm-pool"]
    memory = after["ClusterQueue/llm-pretrain"]["spec"]["resourceGroups"][0]["flavors"][2]
    assert memory["resources"][1] == {
        "name": "memory",
        "nominalQuota": "8Ti",
        "lendingLimit": "4Ti",
    }
    assert after["Cohort/gpu-fleet-tier-exploratory"]["spec"]["fairSharing"]["weight"] == "500m"
    assert after["NodePool/a100-on-demand"]["spec"]["limits"] == {"nvidia.com/gpu": "16"}
    differing = [k for k in rewritten if not is_subset(update_form(rendered[k]), after[k])]
    assert len(differing) == len(rewritten) > 10, differing

    result, writes = writes_of(kube, synced)

    assert writes == 0
    assert (result.created, result.updated, result.pruned, result.status_writes) == (0, 0, 0, 0)
    run = run_plan(policy_dir, control_plane.kubeconfig)
    assert (run.code, run.stdout, run.stderr) == (0, [*unserved_lines(server), IN_SYNC], [])


def test_a_real_change_after_the_rewrite_is_still_applied(
    kube: KubeClient, synced: Reconciler
) -> None:
    """Someone sets a canonical limit of another value: that is drift, taken back."""
    live = kube.get(kinds.NODE_POOL, "a100-on-demand")
    assert live is not None
    kube.replace(
        kinds.NODE_POOL, {**live, "spec": {**live["spec"], "limits": {"nvidia.com/gpu": "24"}}}
    )
    result, _ = writes_of(kube, synced)
    assert result.plan is not None
    assert [str(c) for u in result.plan.updates for c in u.changes] == [
        'spec.limits.nvidia.com/gpu: "24" -> 16'
    ]


def test_every_write_names_quartermaster_as_its_manager(
    kube: KubeClient, synced: Reconciler
) -> None:
    """The server names the manager of a write sent without a fieldManager (an Event's create
    and its series patch) after the User-Agent; before, that was `OpenAPI-Generator`."""
    policy = kube.get(kinds.CAPACITY_POLICY, "gpu-fleet")
    assert policy is not None
    recorder = EventRecorder(kube, reporting_instance="test")
    for _ in range(2):  # a create, then a patch of the series
        recorder.emit(policy, type="Normal", reason="Probe", action="Test", note="same note")
    # Of what the tests and the controller wrote: a kube-apiserver's own objects carry its
    # own managers.
    managers: dict[str, set[str]] = {}
    for kind, item in written_objects(kube):
        for entry in item["metadata"].get("managedFields") or []:
            managers.setdefault(entry["manager"], set()).add(kind.kind)
    probe = next(
        e for e in kube.list(kinds.EVENT)[0] if e.get("reason") == "Probe" and e.get("series")
    )
    assert {(e["manager"], e["operation"]) for e in probe["metadata"]["managedFields"]} == {
        (names.FIELD_MANAGER, "Update")
    }
    assert "OpenAPI-Generator" not in managers
    assert {"Event", "ClusterQueue", "CapacityPolicy"} <= managers[names.FIELD_MANAGER]
