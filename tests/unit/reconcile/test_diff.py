"""The plan: create-only fields (a warm pool's starting replicas), hand-overs, empty fields.

The last test drives the reconciler's write step with a recording applier (no API server:
the test server does not serve apps/v1 Deployments) to show the order of the writes.
"""

from __future__ import annotations

import copy
import json
from typing import Any, cast

import pytest

from controller import names
from controller.api.loader import load_policy_set
from controller.kube.cache import Observed
from controller.kube.client import KubeClient
from controller.kube.kinds import Kind
from controller.reconcile.diff import (
    format_plan,
    is_subset,
    last_applied,
    make_plan,
    pending_hand_over,
    update_form,
    with_last_applied,
)
from controller.reconcile.reconciler import Reconciler, ReconcileResult
from controller.reconcile.validation import ClusterValidation
from controller.render.desired import render
from tests.builders import policy_doc, pool_doc, project_doc

Doc = dict[str, Any]

POLICY_SET = load_policy_set(
    [
        ("policy.yaml", policy_doc(pools=[pool_doc(warmPool={"minGpus": 0, "maxGpus": 16})])),
        ("projects.yaml", project_doc()),
    ]
)
RENDERED = render(POLICY_SET)


def rendered(kind: str) -> Doc:
    return copy.deepcopy(next(o for o in RENDERED.objects if o["kind"] == kind))


def managed_fields(*owners: tuple[str, str]) -> list[Doc]:
    """managedFields entries, each owning `spec.replicas`, for (manager, operation) pairs."""
    return [
        {
            "manager": manager,
            "operation": operation,
            "apiVersion": "apps/v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:replicas": {}}},
            **({"subresource": "scale"} if manager == "keda-operator" else {}),
        }
        for manager, operation in owners
    ]


def live_deployment(replicas: int, *owners: tuple[str, str]) -> Doc:
    """The warm-pool Deployment as applied by us, `replicas` as its owners left it."""
    live = with_last_applied(rendered("Deployment"))
    live["spec"] = {**live["spec"], "replicas": replicas}
    live["metadata"]["managedFields"] = managed_fields(*owners)
    return live


OURS = (names.FIELD_MANAGER, "Apply")
INITIAL = (names.INITIAL_FIELD_MANAGER, "Apply")
KEDA = ("keda-operator", "Update")


class TestCreateOnlyReplicas:
    def test_the_create_carries_replicas_and_later_applies_do_not(self) -> None:
        deployment = rendered("Deployment")
        plan = make_plan([deployment], [])
        assert [c["spec"]["replicas"] for c in plan.creates] == [0]
        assert "replicas" not in update_form(deployment)["spec"]
        # The annotation records what later applies send, so the next pass finds no change.
        assert last_applied(with_last_applied(deployment)) == update_form(deployment)

    def test_a_create_is_followed_by_a_hand_over_of_the_replicas(self) -> None:
        plan = make_plan([rendered("Deployment")], [])
        assert plan.hand_overs == (
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "warm-a100", "namespace": "quartermaster-system"},
                "spec": {"replicas": 0},
            },
        )
        assert plan.live_hand_overs == ()

    @pytest.mark.parametrize(
        ("replicas", "owners"),
        [
            pytest.param(3, (KEDA,), id="KEDA scaled it to 3 and owns the field"),
            pytest.param(0, (INITIAL,), id="still at its start, held by the initial manager"),
            pytest.param(0, (OURS, INITIAL), id="right after the create and its hand-over"),
            pytest.param(2, (), id="a server that records no managed fields"),
        ],
    )
    def test_a_live_deployment_with_any_replicas_is_no_change(
        self, replicas: int, owners: tuple[tuple[str, str], ...]
    ) -> None:
        plan = make_plan([rendered("Deployment")], [live_deployment(replicas, *owners)])
        assert plan.empty, format_plan(plan)

    def test_replicas_ours_alone_are_handed_over_at_their_live_value(self) -> None:
        """The pass stopped between the create and its hand-over: the next one finishes it,
        before any update of ours could drop the field."""
        live = live_deployment(2, OURS)
        plan = make_plan([rendered("Deployment")], [live])
        assert plan.live_hand_overs == (pending_hand_over(live),)
        assert plan.hand_overs[0]["spec"] == {"replicas": 2}
        assert format_plan(plan).splitlines() == [
            "> hand over Deployment/quartermaster-system/warm-a100: spec.replicas "
            "to quartermaster-initial",
            "Plan: 0 to create, 0 to update, 0 to prune, 0 kept, 1 to hand over.",
        ]

    def test_an_update_never_names_replicas(self) -> None:
        live = live_deployment(3, KEDA)
        live["spec"]["template"]["spec"]["nodeSelector"] = {"elsewhere": "true"}
        [update] = make_plan([rendered("Deployment")], [live]).updates
        assert "replicas" not in update.desired["spec"]
        assert [c.path for c in update.changes] == [
            "spec.template.spec.nodeSelector.quartermaster.dev/pool"
        ]


class TestEmptyFields:
    @pytest.mark.parametrize(
        ("want", "have", "subset"),
        [
            pytest.param({"spec": {}}, {}, True, id="an empty map matches an absent one"),
            pytest.param({"a": []}, {"b": 1}, True, id="an empty list matches an absent one"),
            pytest.param({"a": []}, {"a": [1]}, False, id="an empty list is not a full one"),
            pytest.param({"a": {"b": 1}}, {}, False, id="a map with fields is not absent"),
            pytest.param({"a": 0}, {}, False, id="a zero is compared like any value"),
        ],
    )
    def test_is_subset(self, want: Doc, have: Doc, subset: bool) -> None:
        assert is_subset(want, have) is subset

    def test_the_root_cohort_without_its_empty_spec_is_no_change(self) -> None:
        cohort = next(o for o in RENDERED.objects if o["kind"] == "Cohort" and o["spec"] == {})
        live = with_last_applied(cohort)
        del live["spec"]
        assert make_plan([cohort], [live]).empty


class RecordingApplier:
    """Records each apply (field manager and body) instead of sending it."""

    def __init__(self) -> None:
        self.applies: list[tuple[str, Doc]] = []

    def apply(self, kind: Kind, obj: Doc, *, field_manager: str, **_: Any) -> Doc:
        self.applies.append((field_manager, copy.deepcopy(obj)))
        return obj


def converge(live: list[Doc]) -> tuple[RecordingApplier, ReconcileResult]:
    applier = RecordingApplier()
    reconciler = Reconciler(cast(KubeClient, applier))
    served = frozenset(str(o["apiVersion"]) for o in RENDERED.objects)
    observed = Observed(served, (), (), tuple(live), ())
    result = ReconcileResult()
    reconciler._converge(observed, ClusterValidation(POLICY_SET), RENDERED, result)
    return applier, result


def test_the_create_and_its_hand_over_are_written_back_to_back() -> None:
    applier, result = converge([])
    deployment = next(
        i for i, (_, body) in enumerate(applier.applies) if body["kind"] == "Deployment"
    )
    (manager, created), (handover_manager, handed) = applier.applies[deployment : deployment + 2]
    assert (manager, created["spec"]["replicas"]) == (names.FIELD_MANAGER, 0)
    annotation = created["metadata"]["annotations"][names.ANNOTATION_LAST_APPLIED]
    assert "replicas" not in json.loads(annotation)["spec"]
    assert (handover_manager, handed["kind"], handed["spec"]) == (
        names.INITIAL_FIELD_MANAGER,
        "Deployment",
        {"replicas": 0},
    )
    assert result.created == len(RENDERED.objects)
    assert result.handed_over == 1


def test_a_synced_deployment_scaled_by_keda_gets_no_write() -> None:
    live = [with_last_applied(o) for o in RENDERED.objects if o["kind"] != "Deployment"]
    applier, result = converge([*live, live_deployment(3, KEDA)])
    assert applier.applies == []
    assert result.writes == 0
