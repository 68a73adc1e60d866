"""How the counting proxies file a request: its verb and its resource, from the method, the
path and the query alone."""

from __future__ import annotations

from collections import Counter

import pytest

from testenv.counting import authorized_verb, method_verb, resource_of, writes_of


@pytest.mark.parametrize(
    ("path", "want"),
    [
        pytest.param("/apis/kueue.x-k8s.io/v1beta1/clusterqueues", "clusterqueues", id="a list"),
        pytest.param(
            "/apis/quartermaster.dev/v1alpha1/trainingprojects/nlp/status",
            "trainingprojects/status",
            id="a status subresource",
        ),
        pytest.param(
            "/apis/kueue.x-k8s.io/v1beta1/namespaces/team/workloads/job-1",
            "workloads",
            id="one namespaced object",
        ),
        pytest.param(
            "/apis/coordination.k8s.io/v1/namespaces/qm/leases?watch=true",
            "leases",
            id="a namespaced collection, query left out",
        ),
        pytest.param("/api/v1/namespaces", "namespaces", id="core namespaces"),
        pytest.param("/apis/karpenter.sh/v1", "discovery", id="a group version"),
        pytest.param("/api", "discovery", id="the core API list"),
    ],
)
def test_resource_of(path: str, want: str) -> None:
    assert resource_of(path) == want


@pytest.mark.parametrize(
    ("method", "path", "query", "want_method", "want_authorized"),
    [
        pytest.param("GET", "/apis/karpenter.sh/v1/nodepools", "", "GET", "LIST", id="a list"),
        pytest.param(
            "GET",
            "/apis/karpenter.sh/v1/nodepools",
            "watch=true&resourceVersion=5",
            "WATCH",
            "WATCH",
            id="a watch",
        ),
        pytest.param(
            "GET", "/apis/karpenter.sh/v1/nodepools/a100", "", "GET", "GET", id="one object"
        ),
        pytest.param("GET", "/apis/karpenter.sh/v1", "", "GET", "DISCOVERY", id="discovery"),
        pytest.param(
            "PATCH",
            "/apis/karpenter.sh/v1/nodepools/a100",
            "fieldManager=q",
            "PATCH",
            "PATCH",
            id="a write keeps its method",
        ),
    ],
)
def test_verbs(method: str, path: str, query: str, want_method: str, want_authorized: str) -> None:
    assert method_verb(method, query) == want_method
    assert authorized_verb(method, path, query) == want_authorized


def test_writes_of_keeps_only_write_verbs() -> None:
    counts = Counter(
        {
            ("PATCH", "nodepools"): 3,
            ("POST", "events"): 2,
            ("DELETE", "workloads"): 1,
            ("PUT", "leases"): 4,
            ("GET", "nodepools"): 9,
            ("WATCH", "nodepools"): 1,
        }
    )
    assert writes_of(counts) == {
        ("PATCH", "nodepools"): 3,
        ("POST", "events"): 2,
        ("DELETE", "workloads"): 1,
        ("PUT", "leases"): 4,
    }
