"""Rendered objects are what Kueue, Karpenter, KEDA and Kubernetes itself accept.

Checked offline against the pinned upstream CRDs (structural schema and the CEL rules celpy can
evaluate) and the Kubernetes OpenAPI schemas kubernetes_validate ships, in strict mode; see
`tests.upstream`. The negative controls prove each validator rejects what the API server
would, so a clean result means something.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.api.loader import load_path, load_policy_set
from controller.api.policy_set import InvalidPolicyError
from controller.examples import EXAMPLE_DIR, synthetic
from controller.render.desired import render
from controller.render.objects import KubeObject
from controller.yamlio import dump_documents
from tests import upstream
from tests.builders import policy_doc, pool_doc, project_doc

EXAMPLE_POLICY = "gpu-fleet"
CUSTOM_KINDS = frozenset(
    {
        "WorkloadPriorityClass",
        "ResourceFlavor",
        "Cohort",
        "ClusterQueue",
        "LocalQueue",
        "NodePool",
        "ScaledObject",
    }
)
BUILTIN_KINDS = frozenset({"Deployment", "PriorityClass"})


def object_id(obj: KubeObject) -> str:
    """`ClusterQueue/llm-pretrain`, or `LocalQueue/recsys-batch/recsys-prod` when namespaced."""
    meta = obj["metadata"]
    if "namespace" in meta:
        return f"{obj['kind']}/{meta['namespace']}/{meta['name']}"
    return f"{obj['kind']}/{meta['name']}"


def example_objects() -> tuple[KubeObject, ...]:
    return render(load_path(EXAMPLE_DIR)).objects


EXAMPLE_OBJECTS = example_objects()
EXAMPLE_PARAMS = [pytest.param(obj, id=object_id(obj)) for obj in EXAMPLE_OBJECTS]
EXAMPLE_CUSTOM_PARAMS = [
    pytest.param(obj, id=object_id(obj)) for obj in EXAMPLE_OBJECTS if obj["kind"] in CUSTOM_KINDS
]


def all_errors(obj: KubeObject) -> list[str]:
    """Schema, metadata and (for custom resources) CEL errors together."""
    errors = upstream.validate(obj)
    if not upstream.is_builtin(obj):
        errors += upstream.evaluate_cel_rules(obj).errors
    return errors


# --------------------------------------------------------------------------------------------
# Where the upstream CRDs come from


def test_the_pinned_upstream_crds_are_found() -> None:
    directory = upstream.upstream_crds_dir()
    for project in ("kueue", "keda", "karpenter"):
        assert (directory / project).is_dir(), f"{directory / project} is missing"


def test_a_missing_crd_directory_fails_with_a_message_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "no-crds-here"
    monkeypatch.setenv(upstream.ENV_VAR, str(missing))
    with pytest.raises(upstream.UpstreamCrdsMissingError, match=str(missing)):
        upstream.upstream_crds_dir()


def test_every_kind_the_example_renders_has_an_upstream_or_builtin_schema() -> None:
    kinds = {obj["kind"] for obj in EXAMPLE_OBJECTS}
    assert kinds == CUSTOM_KINDS | BUILTIN_KINDS


# --------------------------------------------------------------------------------------------
# (a, b) Schemas


@pytest.mark.parametrize("obj", EXAMPLE_PARAMS)
def test_example_object_matches_its_upstream_schema(obj: KubeObject) -> None:
    assert upstream.validate(obj) == []


def test_every_object_of_a_1000_project_4_pool_policy_matches_its_upstream_schema() -> None:
    documents = synthetic.synthetic_documents(projects=1000, pools=4)
    policy_set = load_policy_set([(f"doc#{i}", d) for i, d in enumerate(documents)])
    objects = render(policy_set).objects
    assert len(objects) > 3000
    failures = [f"{object_id(obj)}: {error}" for obj in objects for error in upstream.validate(obj)]
    assert not failures, f"{len(failures)} errors, the first 20:\n" + "\n".join(failures[:20])


# --------------------------------------------------------------------------------------------
# (c) CEL rules


@pytest.mark.parametrize("obj", EXAMPLE_CUSTOM_PARAMS)
def test_example_object_passes_the_upstream_cel_rules_celpy_can_evaluate(obj: KubeObject) -> None:
    assert upstream.evaluate_cel_rules(obj).errors == []


def test_reports_the_upstream_cel_rules_left_to_the_api_server_tests() -> None:
    evaluated: set[upstream.CelRule] = set()
    not_evaluated: set[upstream.UnevaluatedRule] = set()
    for obj in EXAMPLE_OBJECTS:
        if obj["kind"] in CUSTOM_KINDS:
            report = upstream.evaluate_cel_rules(obj)
            evaluated.update(report.evaluated)
            not_evaluated.update(report.not_evaluated)
    all_rules = {
        rule
        for obj in {(o["apiVersion"], o["kind"]): o for o in EXAMPLE_OBJECTS}.values()
        if obj["kind"] in CUSTOM_KINDS
        for rule in upstream.crd_cel_rules(obj["apiVersion"], obj["kind"])
    }
    unreached = all_rules - evaluated - {u.rule for u in not_evaluated}
    # Captured: pytest shows it with a failure, and -q output stays clean.
    print(f"\nUpstream CEL rules: {len(evaluated)} evaluated on the example objects.")
    print(f"Not evaluated by celpy ({len(not_evaluated)}), left to the API server tests:")
    for item in sorted(not_evaluated, key=str):
        print(f"  - {item}")
    print(f"Not reached: no example object has the field ({len(unreached)}):")
    for rule in sorted(unreached, key=str):
        print(f"  - {rule}")
    # The rules our objects depend on most are among those evaluated, including one that needs
    # the Kubernetes regex library `find` that tests.upstream adds to celpy.
    evaluated_rules = {(r.kind, r.rule) for r in evaluated}
    assert (
        "ClusterQueue",
        "self.flavors.all(x, size(x.resources) == size(self.coveredResources))",
    ) in evaluated_rules
    assert any(kind == "NodePool" and ".find(" in rule for kind, rule in evaluated_rules)
    assert all(item.reason for item in not_evaluated)


# --------------------------------------------------------------------------------------------
# (d) Negative controls: the validators reject what the API server would

Mutation = Callable[[KubeObject], None]


def _drop_one_resource_from_a_flavor(obj: KubeObject) -> None:
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop()


def _duplicate_a_flavor(obj: KubeObject) -> None:
    flavors = obj["spec"]["resourceGroups"][0]["flavors"]
    flavors.insert(1, copy.deepcopy(flavors[0]))


def _borrow_without_a_cohort(obj: KubeObject) -> None:
    obj["spec"].pop("cohortName", None)
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = 4


def _weight_zero(obj: KubeObject) -> None:
    obj["spec"]["weight"] = 0


def _karpenter_label_in_template(obj: KubeObject) -> None:
    obj["spec"]["template"]["metadata"]["labels"]["karpenter.sh/team"] = "ml"


def _budget_in_words(obj: KubeObject) -> None:
    obj["spec"]["disruption"]["budgets"][0]["nodes"] = "ten percent"


def _no_triggers(obj: KubeObject) -> None:
    del obj["spec"]["triggers"]


def _min_above_max_replicas(obj: KubeObject) -> None:
    obj["spec"]["minReplicaCount"] = obj["spec"]["maxReplicaCount"] + 1


def _unknown_container_field(obj: KubeObject) -> None:
    obj["spec"]["template"]["spec"]["containers"][0]["gpus"] = 8


def _selector_not_matching_pods(obj: KubeObject) -> None:
    obj["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "other"


def _gpu_without_a_domain(obj: KubeObject) -> None:
    resources = obj["spec"]["template"]["spec"]["containers"][0]["resources"]
    resources["requests"] = {"gpu": 8}
    resources["limits"] = {"gpu": 8}


def _priority_as_word(obj: KubeObject) -> None:
    obj["value"] = "lowest"


def _unknown_flavor_field(obj: KubeObject) -> None:
    obj["spec"]["nodeSelector"] = {"a": "b"}


def _upper_case_name(obj: KubeObject) -> None:
    obj["metadata"]["name"] = "LLM_Pretrain"


def _long_label_value(obj: KubeObject) -> None:
    obj["metadata"]["labels"]["quartermaster.dev/project"] = "x" * 64


NEGATIVE_CONTROLS = [
    pytest.param(
        "ClusterQueue",
        _drop_one_resource_from_a_flavor,
        "$.spec.resourceGroups[0]",
        "flavors must have the same number of resources as the coveredResources",
        id="a ClusterQueue flavor missing one of the covered resources breaks a CEL rule",
    ),
    pytest.param(
        "ClusterQueue",
        _duplicate_a_flavor,
        "$.spec.resourceGroups[0].flavors[1]",
        "duplicate entry",
        id="a ClusterQueue listing a flavor twice breaks its list-map key",
    ),
    pytest.param(
        "ClusterQueue",
        _borrow_without_a_cohort,
        "$.spec",
        "borrowingLimit must be nil when cohort is empty",
        id="a ClusterQueue borrowing without a cohort breaks a CEL rule",
    ),
    pytest.param(
        "ClusterQueue",
        _upper_case_name,
        "$.metadata.name",
        "not a valid name",
        id="an upper-case name with an underscore is not an RFC 1123 subdomain",
    ),
    pytest.param(
        "LocalQueue",
        _long_label_value,
        '$.metadata.labels["quartermaster.dev/project"]',
        "at most 63",
        id="a label value of 64 characters is too long",
    ),
    pytest.param(
        "ResourceFlavor",
        _unknown_flavor_field,
        "$.spec",
        "'nodeSelector' was unexpected",
        id="a field the ResourceFlavor schema does not know is rejected",
    ),
    pytest.param(
        "NodePool",
        _weight_zero,
        "$.spec.weight",
        "0 is less than the minimum of 1",
        id="a NodePool with weight 0 is below the schema minimum",
    ),
    pytest.param(
        "NodePool",
        _karpenter_label_in_template,
        "$.spec.template.metadata.labels",
        'label domain "karpenter.sh" is restricted',
        id="a NodePool template label in the karpenter.sh domain breaks a CEL rule",
    ),
    pytest.param(
        "NodePool",
        _budget_in_words,
        "$.spec.disruption.budgets[0].nodes",
        "does not match",
        id="a disruption budget that is neither a count nor a percentage is rejected",
    ),
    pytest.param(
        "ScaledObject",
        _no_triggers,
        "$.spec",
        "'triggers' is a required property",
        id="a ScaledObject without triggers misses a required field",
    ),
    pytest.param(
        "ScaledObject",
        _min_above_max_replicas,
        "$.spec",
        "minReplicaCount must be less than or equal to maxReplicaCount",
        id="a ScaledObject with more minimum than maximum replicas breaks a CEL rule",
    ),
    pytest.param(
        "Deployment",
        _unknown_container_field,
        "$.spec.template.spec.containers[0]",
        "'gpus' was unexpected",
        id="a Deployment with an unknown container field fails strict validation",
    ),
    pytest.param(
        "Deployment",
        _selector_not_matching_pods,
        "$.spec.template.metadata.labels",
        "selector does not match template labels",
        id="a Deployment whose selector does not match its pods is rejected",
    ),
    pytest.param(
        "Deployment",
        _gpu_without_a_domain,
        "$.spec.template.spec.containers[0].resources.requests.gpu",
        "must be a standard resource for containers",
        id="a Deployment requesting a resource name without a domain is rejected",
    ),
    pytest.param(
        "PriorityClass",
        _priority_as_word,
        "$.value",
        "is not of type 'integer'",
        id="a PriorityClass value that is not an integer is rejected",
    ),
]


def _first_example(kind: str) -> KubeObject:
    obj = next(o for o in EXAMPLE_OBJECTS if o["kind"] == kind)
    return copy.deepcopy(obj)


@pytest.mark.parametrize(("kind", "mutate", "path", "fragment"), NEGATIVE_CONTROLS)
def test_a_broken_object_is_reported(kind: str, mutate: Mutation, path: str, fragment: str) -> None:
    obj = _first_example(kind)
    assert all_errors(obj) == [], "the control must start from a valid object"
    mutate(obj)
    errors = all_errors(obj)
    assert any(e.startswith(f"{path}: ") and fragment in e for e in errors), errors


# --------------------------------------------------------------------------------------------
# (e) Labels


@pytest.mark.parametrize("obj", EXAMPLE_PARAMS)
def test_every_rendered_object_carries_the_ownership_labels(obj: KubeObject) -> None:
    labels: dict[str, Any] = obj["metadata"].get("labels", {})
    assert labels.get("app.kubernetes.io/managed-by") == "quartermaster"
    assert labels.get("quartermaster.dev/policy") == EXAMPLE_POLICY


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(obj, id=object_id(obj))
        for obj in EXAMPLE_OBJECTS
        if obj["kind"] in ("ClusterQueue", "LocalQueue")
    ],
)
def test_every_queue_carries_its_project_label(obj: KubeObject) -> None:
    # A ClusterQueue is named after its project; a LocalQueue points at its project's queue.
    project = (
        obj["metadata"]["name"] if obj["kind"] == "ClusterQueue" else obj["spec"]["clusterQueue"]
    )
    assert obj["metadata"]["labels"].get("quartermaster.dev/project") == project


# --------------------------------------------------------------------------------------------
# (f) Determinism


def test_two_renders_of_the_example_dump_to_identical_yaml() -> None:
    first = dump_documents(example_objects())
    second = dump_documents(example_objects())
    assert first == second
    assert first.count("\nkind: ") == len(EXAMPLE_OBJECTS)


# --------------------------------------------------------------------------------------------
# (g) A policy the loader accepts renders objects the API servers accept
#
# Rejecting a policy is as good as rendering it correctly; accepting it and rendering objects
# that Karpenter or Kubernetes refuse (or that can never be satisfied) is a bug.


WARM_POOL = {"minGpus": 0, "maxGpus": 16}


def _docs_with_pool(**pool: Any) -> list[tuple[str, Any]]:
    return [
        ("policy.yaml", policy_doc(pools=[pool_doc(warmPool=WARM_POOL, **pool)])),
        ("projects.yaml", project_doc()),
    ]


def _rendered_or_none(docs: list[tuple[str, Any]]) -> tuple[KubeObject, ...] | None:
    """The rendered objects, or None when the loader rejects the policy."""
    try:
        return render(load_policy_set(docs)).objects
    except InvalidPolicyError:
        return None


@pytest.mark.parametrize(
    "pool",
    [
        pytest.param(
            {"nodeLabels": {"example.com/rack": "r1"}}, id="a node label in the user's own domain"
        ),
        pytest.param(
            {"nodeLabels": {"karpenter.k8s.aws/instance-family": "p4d"}},
            id="a node label of the cloud provider's Karpenter domain",
        ),
        pytest.param({"gpuResource": "amd.com/gpu"}, id="an AMD GPU resource"),
        pytest.param(
            {"nodeLabels": {"karpenter.sh/team": "ml"}},
            id="a node label in the karpenter.sh domain",
        ),
        pytest.param(
            {"nodeLabels": {"karpenter.sh/nodepool": "other"}},
            id="a node label naming the NodePool",
        ),
        pytest.param(
            {"nodeLabels": {"kubernetes.io/hostname": "node-1"}},
            id="a node label pinning one host",
        ),
        pytest.param(
            {"gpuResource": "gpu"},
            id="a GPU resource without a domain",
        ),
        pytest.param(
            {"gpuResource": "kubernetes.io/gpu"},
            id="a GPU resource in the kubernetes.io domain",
        ),
    ],
)
def test_an_accepted_pool_renders_objects_the_api_servers_accept(pool: dict[str, Any]) -> None:
    objects = _rendered_or_none(_docs_with_pool(**pool))
    errors = [f"{object_id(obj)}: {e}" for obj in objects or () for e in all_errors(obj)]
    assert errors == []


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("karpenter.sh/capacity-type", id="the capacity type"),
        pytest.param("quartermaster.dev/pool", id="the pool label"),
        pytest.param("topology.kubernetes.io/zone", id="the zone"),
        pytest.param(
            "node.kubernetes.io/instance-type",
            id="the instance type",
        ),
    ],
)
def test_an_accepted_pool_node_label_cannot_contradict_the_labels_the_controller_sets(
    key: str,
) -> None:
    objects = _rendered_or_none(
        _docs_with_pool(instanceTypes=["p4d.24xlarge"], nodeLabels={key: "other"})
    )
    for obj in objects or ():
        if obj["kind"] == "ResourceFlavor":
            capacity_type = "spot" if obj["metadata"]["name"].endswith("-spot") else "on-demand"
            node_labels = obj["spec"]["nodeLabels"]
            assert node_labels["karpenter.sh/capacity-type"] == capacity_type
            assert (
                node_labels["quartermaster.dev/pool"]
                == obj["metadata"]["labels"]["quartermaster.dev/pool"]
            )
        if obj["kind"] == "NodePool":
            keys = [r["key"] for r in obj["spec"]["template"]["spec"]["requirements"]]
            assert len(keys) == len(set(keys)), f"{object_id(obj)} requires {keys}"
