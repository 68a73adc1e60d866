"""The RBAC evaluator the RBAC integration test relies on: request attributes and rule matching
as the API server's RequestInfo and RBAC authorizer define them."""

from __future__ import annotations

import pytest

from testenv.rbac import Attributes, Grant, attributes, denied, grants


@pytest.mark.parametrize(
    ("method", "path", "query", "want"),
    [
        pytest.param(
            "GET",
            "/apis/karpenter.sh/v1/nodepools",
            "",
            Attributes("list", "karpenter.sh", "nodepools", "", ""),
            id="a list",
        ),
        pytest.param(
            "GET",
            "/apis/karpenter.sh/v1/nodepools",
            "watch=true&resourceVersion=5",
            Attributes("watch", "karpenter.sh", "nodepools", "", ""),
            id="a watch",
        ),
        pytest.param(
            "PATCH",
            "/apis/quartermaster.dev/v1alpha1/trainingprojects/nlp/status",
            "fieldManager=q",
            Attributes("patch", "quartermaster.dev", "trainingprojects/status", "", "nlp"),
            id="a status patch",
        ),
        pytest.param(
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/qm/leases/lead",
            "",
            Attributes("update", "coordination.k8s.io", "leases", "qm", "lead"),
            id="a namespaced update",
        ),
        pytest.param(
            "POST",
            "/apis/events.k8s.io/v1/namespaces/default/events",
            "",
            Attributes("create", "events.k8s.io", "events", "default", ""),
            id="a create",
        ),
        pytest.param(
            "DELETE",
            "/api/v1/namespaces/a/pods/p",
            "",
            Attributes("delete", "", "pods", "a", "p"),
            id="a core delete",
        ),
        pytest.param("GET", "/apis/karpenter.sh/v1", "", None, id="discovery"),
        pytest.param("GET", "/apis", "", None, id="the group list"),
    ],
)
def test_request_attributes(method: str, path: str, query: str, want: Attributes | None) -> None:
    assert attributes(method, path, query) == want


ROLES = [
    {
        "kind": "ClusterRole",
        "metadata": {"name": "c"},
        "rules": [{"apiGroups": ["karpenter.sh"], "resources": ["nodepools"], "verbs": ["list"]}],
    },
    {
        "kind": "Role",
        "metadata": {"name": "r", "namespace": "qm"},
        "rules": [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": ["lead"],
                "verbs": ["get"],
            }
        ],
    },
    {
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "c"},
        "roleRef": {"kind": "ClusterRole", "name": "c"},
        "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "qm"}],
    },
    {
        "kind": "RoleBinding",
        "metadata": {"name": "r", "namespace": "qm"},
        "roleRef": {"kind": "Role", "name": "r"},
        "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "qm"}],
    },
]


@pytest.mark.parametrize(
    ("request_", "allowed"),
    [
        pytest.param(Attributes("list", "karpenter.sh", "nodepools", "", ""), True, id="granted"),
        pytest.param(
            Attributes("delete", "karpenter.sh", "nodepools", "", "x"), False, id="another verb"
        ),
        pytest.param(
            Attributes("get", "coordination.k8s.io", "leases", "qm", "lead"),
            True,
            id="the named lease",
        ),
        pytest.param(
            Attributes("get", "coordination.k8s.io", "leases", "qm", "other"),
            False,
            id="another name",
        ),
        pytest.param(
            Attributes("get", "coordination.k8s.io", "leases", "kube-system", "lead"),
            False,
            id="a role outside its namespace",
        ),
    ],
)
def test_rules_allow_exactly_what_they_name(request_: Attributes, allowed: bool) -> None:
    granted = grants(ROLES, subject=("qm", "sa"))
    assert (denied([request_], granted) == []) is allowed


def test_roles_bound_to_someone_else_grant_nothing() -> None:
    assert grants(ROLES, subject=("qm", "other")) == []


def test_a_grant_reads_as_a_permission() -> None:
    grant = Grant("coordination.k8s.io", "leases", "get", "qm", frozenset({"lead"}))
    assert str(grant) == "get coordination.k8s.io/leases ['lead'] in qm"
