"""The reconciler against a real API server enforcing the real Kueue/Karpenter/KEDA schemas.

Passes run in-process so every API write can be counted. Policy objects are applied under a
separate field manager ("gitops"), as Argo CD or Flux would.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from controller import names
from controller.api.loader import load_path
from controller.examples import EXAMPLE_DIR
from controller.kube import kinds
from controller.kube.client import KubeClient, KubeError
from controller.kube.events import EventRecorder
from controller.reconcile.diff import is_subset, ref, show_ref
from controller.reconcile.reconciler import Reconciler, ReconcileResult
from controller.reconcile.stored import stored_form
from controller.render.desired import render
from testenv.namespaces import policy_namespaces
from tests.integration.conftest import Server, ensure_namespaces

GITOPS = "gitops"
FIXED_NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
"""The deadline test's clock: recsys-prod's deadlines are behind and ahead of it on any date."""


def example_documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(EXAMPLE_DIR.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def apply_doc(kube: KubeClient, doc: dict[str, Any]) -> None:
    """Apply as GitOps would, a project's namespaces first (a repository holds them beside the
    project); on the CRD-only server, which has no namespaces, only the document."""
    ensure_namespaces(kube, *policy_namespaces([doc]))
    kube.apply(kinds.kind_of(doc), doc, field_manager=GITOPS)


def managed(kube: KubeClient) -> dict[str, dict[str, Any]]:
    served = kube.served_group_versions()
    out: dict[str, dict[str, Any]] = {}
    for kind in kinds.MANAGED_KINDS:
        if kind.group_version in served:
            items, _ = kube.list(kind, label_selector=names.MANAGED_SELECTOR)
            out.update({show_ref(ref(item)): item for item in items})
    return out


def writes_of(kube: KubeClient, reconciler: Reconciler) -> tuple[ReconcileResult, int]:
    before = kube.stats.writes
    result = reconciler.reconcile()
    return result, kube.stats.writes - before


def project(name: str) -> dict[str, Any]:
    return next(
        d
        for d in example_documents()
        if d["kind"] == "TrainingProject" and d["metadata"]["name"] == name
    )


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == type_)


@pytest.fixture
def synced(kube: KubeClient) -> Iterator[Reconciler]:
    """The example policy applied and reconciled once."""
    for doc in example_documents():
        apply_doc(kube, doc)
    reconciler = Reconciler(kube, events=EventRecorder(kube, reporting_instance="test"))
    reconciler.reconcile()
    yield reconciler


class TestFirstSync:
    def test_every_rendered_object_exists_as_rendered(
        self, kube: KubeClient, synced: Reconciler
    ) -> None:
        rendered = render(load_path(EXAMPLE_DIR))
        live = managed(kube)
        served = kube.served_group_versions()
        expected = {
            show_ref(ref(o)): o
            for o in rendered.objects
            if kinds.kind_of(o).group_version in served
        }
        assert sorted(live) == sorted(expected)
        for key, obj in expected.items():
            # In the stored form: a kube-apiserver re-encodes built-in kinds (PriorityClass,
            # Deployment); the CRD-only server stores them as sent.
            assert is_subset(stored_form(obj), stored_form(live[key])), key

    def test_a_second_pass_writes_nothing(self, kube: KubeClient, synced: Reconciler) -> None:
        result, writes = writes_of(kube, synced)
        assert writes == 0
        assert (result.created, result.updated, result.pruned, result.status_writes) == (0, 0, 0, 0)

    def test_status_says_ready_and_shows_the_split(
        self, kube: KubeClient, server: Server, synced: Reconciler
    ) -> None:
        live = kube.get(kinds.TRAINING_PROJECT, "llm-pretrain")
        assert live is not None
        assert condition(live, "Ready")["status"] == "True"
        assert condition(live, "Valid")["status"] == "True"
        assert live["status"]["observedGeneration"] == live["metadata"]["generation"]
        assert live["status"]["nominalGpus"] == 96
        policy = kube.get(kinds.CAPACITY_POLICY, "gpu-fleet")
        assert policy is not None
        assert policy["status"]["projects"] == 7
        assert kinds_served(policy) == expected_kinds_served(server, rendered=True)

    def test_a_reconciled_event_is_recorded(
        self, kube: KubeClient, server: Server, synced: Reconciler
    ) -> None:
        events, _ = kube.list(kinds.EVENT)
        reconciled = [e for e in events if e.get("reason") == "Reconciled"]
        assert reconciled, [e.get("reason") for e in events]
        assert reconciled[0]["regarding"]["name"] == "gpu-fleet"
        # Every rendered object of a kind the server serves: 33 of 35 on the CRD-only server
        # (no apps/v1 Deployments), all 35 on a kube-apiserver.
        created = server.served_count(render(load_path(EXAMPLE_DIR)).objects)
        assert f"created {created}," in reconciled[0]["note"]


class TestChanges:
    def test_a_quota_change_rewrites_only_that_queue_and_its_pool(
        self, kube: KubeClient, synced: Reconciler
    ) -> None:
        doc = project("vision-research")
        doc["spec"]["quotas"][0]["nominalGpus"] = 32
        apply_doc(kube, doc)
        result, _ = writes_of(kube, synced)
        assert result.plan is not None
        updated = sorted(show_ref(ref(u.desired)) for u in result.plan.updates)
        # The a100 pool total grows by 8 GPUs: its spot NodePool limit grows with it.
        assert updated == ["ClusterQueue/vision-research", "NodePool/a100-spot"]
        assert (result.created, result.pruned) == (0, 0)
        cq = kube.get(kinds.CLUSTER_QUEUE, "vision-research")
        assert cq is not None
        gpus = [
            r["nominalQuota"]
            for f in cq["spec"]["resourceGroups"][0]["flavors"]
            for r in f["resources"]
            if r["name"] == "nvidia.com/gpu"
        ]
        assert sum(gpus) == 32

    def test_a_new_project_creates_its_queues(self, kube: KubeClient, synced: Reconciler) -> None:
        doc = copy.deepcopy(project("nlp-eval"))
        doc["metadata"]["name"] = "new-team"
        doc["spec"]["namespaces"] = ["new-team", "new-team-dev"]
        apply_doc(kube, doc)
        result, _ = writes_of(kube, synced)
        assert result.plan is not None
        assert sorted(show_ref(ref(o)) for o in result.plan.creates) == [
            "ClusterQueue/new-team",
            "LocalQueue/new-team-dev/new-team",
            "LocalQueue/new-team/new-team",
        ]
        assert result.pruned == 0
        assert [show_ref(ref(u.desired)) for u in result.plan.updates] == ["NodePool/a100-spot"]

    def test_a_removed_project_is_pruned(self, kube: KubeClient, synced: Reconciler) -> None:
        kube.delete(kinds.TRAINING_PROJECT, "interns")
        result, _ = writes_of(kube, synced)
        assert result.plan is not None
        assert sorted(show_ref(ref(o)) for o in result.plan.prunes) == [
            "ClusterQueue/interns",
            "LocalQueue/interns/interns",
        ]
        assert kube.get(kinds.CLUSTER_QUEUE, "interns") is None

    def test_a_queue_with_workloads_is_kept_and_reported(
        self, kube: KubeClient, synced: Reconciler
    ) -> None:
        kube.apply(kinds.WORKLOAD, workload("interns", "train-1", "interns"), field_manager="kueue")
        kube.delete(kinds.TRAINING_PROJECT, "interns")
        result, _ = writes_of(kube, synced)
        assert sorted(result.kept) == ["ClusterQueue/interns", "LocalQueue/interns/interns"]
        assert result.pruned == 0
        assert kube.get(kinds.CLUSTER_QUEUE, "interns") is not None
        policy = kube.get(kinds.CAPACITY_POLICY, "gpu-fleet")
        assert policy is not None
        blocked = condition(policy, "PruneBlocked")
        assert (blocked["status"], blocked["reason"]) == ("True", "WorkloadsPresent")
        assert "ClusterQueue/interns" in blocked["message"]
        events, _ = kube.list(kinds.EVENT)
        assert any(
            e.get("reason") == "PruneBlocked" and e["regarding"]["name"] == "interns"
            for e in events
        )
        # Once the workload finishes, the queues go.
        finished = workload("interns", "train-1", "interns")
        finished["status"] = {
            "conditions": [
                {
                    "type": "Finished",
                    "status": "True",
                    "reason": "Succeeded",
                    "message": "done",
                    "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            ]
        }
        kube.apply(kinds.WORKLOAD, finished, field_manager="kueue", subresource="status")
        result, _ = writes_of(kube, synced)
        assert result.pruned == 2
        assert kube.get(kinds.CLUSTER_QUEUE, "interns") is None


def kinds_served(policy: dict[str, Any]) -> tuple[str, str, str]:
    served = condition(policy, "KindsServed")
    return served["status"], served["reason"], served["message"]


def expected_kinds_served(server: Server, *, rendered: bool) -> tuple[str, str, str]:
    """KindsServed as this server should make the controller report it, from discovery: the
    example's rendered kinds it lacks, or, while nothing is rendered, every kind the controller
    writes that it lacks. On the CRD-only server both are apps/v1 Deployment; on a
    kube-apiserver with the upstream CRDs, none."""
    if rendered:
        lacking = server.unserved(render(load_path(EXAMPLE_DIR)).objects)
    else:
        lacking = sorted(
            f"{k.api_version} {k.kind}"
            for k in kinds.MANAGED_KINDS
            if not server.serves(k.group_version)
        )
    if not lacking:
        return "True", "AllServed", ""
    listed = ", ".join(lacking)
    if rendered:
        return "False", "NotServed", f"not served by this cluster, not applied: {listed}"
    return (
        "False",
        "NotServed",
        f"not served by this cluster: {listed} (the policy is invalid, so nothing is rendered; "
        "these are the kinds the controller writes that the cluster lacks)",
    )


def workload(namespace: str, name: str, queue: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "queueName": queue,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "train",
                                    "image": "trainer:1",
                                    "resources": {"requests": {"nvidia.com/gpu": "1"}},
                                }
                            ],
                            "restartPolicy": "Never",
                        }
                    },
                }
            ],
        },
    }


class TestBadInput:
    @pytest.mark.parametrize(
        ("path", "value", "want_in_message"),
        [
            pytest.param(("spec", "tier"), "Gold", "spec.tier", id="a tier name in capitals"),
            pytest.param(
                ("spec", "quotas"),
                [{"pool": "a100", "nominalGpus": -1}],
                "spec.quotas[0].nominalGpus",
                id="a negative quota",
            ),
            pytest.param(
                ("spec", "deadlines"),
                [{"name": "d"}],
                "exactly one of at",
                id="a deadline with neither a time nor a schedule",
            ),
            pytest.param(
                ("spec", "quotas"),
                [{"pool": "a100", "nominalGpus": 4, "lendingLimitGpus": 8}],
                "lendingLimitGpus must not exceed nominalGpus",
                id="lending more than the quota",
            ),
            pytest.param(("spec", "namespaces"), [], "spec.namespaces", id="no namespaces"),
        ],
    )
    def test_the_api_server_refuses_a_bad_project_with_the_field(
        self, kube: KubeClient, path: tuple[str, str], value: Any, want_in_message: str
    ) -> None:
        doc = project("nlp-eval")
        doc[path[0]][path[1]] = value
        with pytest.raises(KubeError) as raised:
            apply_doc(kube, doc)
        assert raised.value.status == 422
        assert want_in_message in str(raised.value)

    def test_an_unknown_pool_marks_the_project_invalid_and_keeps_its_objects(
        self, kube: KubeClient, synced: Reconciler
    ) -> None:
        before = managed(kube)
        doc = project("vision-research")
        doc["spec"]["quotas"] = [{"pool": "v100", "nominalGpus": 8}]
        apply_doc(kube, doc)
        result, _ = writes_of(kube, synced)
        assert result.invalid == ("vision-research",)
        assert result.pruned == 0
        after = managed(kube)
        assert (
            after["ClusterQueue/vision-research"]["spec"]
            == (before["ClusterQueue/vision-research"]["spec"])
        )
        live = kube.get(kinds.TRAINING_PROJECT, "vision-research")
        assert live is not None
        valid = condition(live, "Valid")
        assert (valid["status"], valid["reason"]) == ("False", "Invalid")
        assert "spec.quotas[0].pool: unknown pool 'v100'" in valid["message"]
        assert valid["message"].endswith("; the objects applied before are kept")
        assert condition(live, "Ready")["status"] == "False"
        # The other projects are untouched and still ready.
        other = kube.get(kinds.TRAINING_PROJECT, "nlp-eval")
        assert other is not None and condition(other, "Ready")["status"] == "True"

    def test_an_over_subscribed_pool_stops_all_changes(
        self, kube: KubeClient, server: Server, synced: Reconciler
    ) -> None:
        doc = project("sandbox")
        doc["spec"]["quotas"] = [{"pool": "h100", "nominalGpus": 100}]
        apply_doc(kube, doc)
        kube.delete(kinds.TRAINING_PROJECT, "interns")
        result, _ = writes_of(kube, synced)
        assert (result.created, result.updated, result.pruned) == (0, 0, 0)
        assert kube.get(kinds.CLUSTER_QUEUE, "interns") is not None
        policy = kube.get(kinds.CAPACITY_POLICY, "gpu-fleet")
        assert policy is not None
        assert condition(policy, "Valid")["status"] == "False"
        assert "exceed maxGpus" in condition(policy, "Valid")["message"]
        # An invalid policy must not claim that the kinds the server lacks are served (on
        # the CRD-only server, Deployments).
        assert kinds_served(policy) == expected_kinds_served(server, rendered=False)

    def test_a_policy_invalid_from_the_first_pass_reports_the_kinds_not_served(
        self, kube: KubeClient, server: Server
    ) -> None:
        """What it reports is what discovery lacks: apps/v1 Deployment on the CRD-only server,
        nothing on a kube-apiserver (AllServed)."""
        for doc in example_documents():
            if doc["kind"] == "TrainingProject" and doc["metadata"]["name"] == "sandbox":
                doc["spec"]["quotas"] = [{"pool": "h100", "nominalGpus": 100}]
            apply_doc(kube, doc)
        result = Reconciler(kube).reconcile()
        assert (result.created, result.updated) == (0, 0)
        policy = kube.get(kinds.CAPACITY_POLICY, "gpu-fleet")
        assert policy is not None
        assert condition(policy, "Valid")["status"] == "False"
        assert kinds_served(policy) == expected_kinds_served(server, rendered=False)

    def test_a_new_invalid_project_says_nothing_was_applied_for_it(
        self, kube: KubeClient, synced: Reconciler
    ) -> None:
        doc = copy.deepcopy(project("nlp-eval"))
        doc["metadata"]["name"] = "new-team"
        doc["spec"]["namespaces"] = ["new-team"]
        doc["spec"]["quotas"] = [{"pool": "v100", "nominalGpus": 8}]
        apply_doc(kube, doc)
        result, _ = writes_of(kube, synced)
        assert result.invalid == ("new-team",)
        live = kube.get(kinds.TRAINING_PROJECT, "new-team")
        assert live is not None
        valid = condition(live, "Valid")
        assert (valid["status"], valid["reason"]) == ("False", "Invalid")
        assert valid["message"] == (
            "spec.quotas[0].pool: unknown pool 'v100'; defined pools: a100, h100; "
            "nothing has been applied for this project yet"
        )
        events, _ = kube.list(kinds.EVENT)
        notes = [
            e["note"]
            for e in events
            if e.get("reason") == "InvalidSpec" and e["regarding"]["name"] == "new-team"
        ]
        assert notes == [valid["message"]]


class TestDeadlines:
    def test_a_passed_one_off_deadline_sets_deadlines_current_false(self, kube: KubeClient) -> None:
        """The clock is fixed, so the deadlines are behind and ahead of it whatever the date."""
        now = FIXED_NOW
        for doc in example_documents():
            if doc["kind"] == "TrainingProject" and doc["metadata"]["name"] == "recsys-prod":
                doc["spec"]["deadlines"] = [
                    {"name": "q2-refresh", "at": "2025-05-01T00:00:00Z"},
                    {"name": "q4-refresh", "at": "2026-12-15T17:00:00Z"},
                ]
            apply_doc(kube, doc)
        reconciler = Reconciler(kube, wall_clock=lambda: now)
        reconciler.reconcile()
        late = kube.get(kinds.TRAINING_PROJECT, "recsys-prod")
        assert late is not None
        current = condition(late, "DeadlinesCurrent")
        assert (current["status"], current["reason"]) == ("False", "DeadlinePassed")
        assert current["message"].startswith(
            "one-off deadlines already passed: q2-refresh (2025-05-01T00:00:00Z);"
        )
        assert condition(late, "Ready")["status"] == "True"
        ahead = kube.get(kinds.TRAINING_PROJECT, "nlp-eval")
        assert ahead is not None
        assert condition(ahead, "DeadlinesCurrent")["status"] == "True"
        # The message does not age: an hour later the condition is written as it was.
        Reconciler(kube, wall_clock=lambda: now + timedelta(hours=1)).reconcile()
        again = kube.get(kinds.TRAINING_PROJECT, "recsys-prod")
        assert again is not None
        assert condition(again, "DeadlinesCurrent") == current

    def test_workloads_without_the_deadline_label_turn_deadlines_tracked_false(
        self, kube: KubeClient, synced: Reconciler
    ) -> None:
        """Workloads in llm-pretrain's queue without quartermaster.dev/deadline, as Kueue makes
        them from Jobs while its labelKeysToCopy lacks the key: the deadline's risk would read
        0, and the condition and a Warning Event say why. No Kueue runs here: the test writes
        the Workloads as Kueue would."""

        def tracked() -> dict[str, Any]:
            live = kube.get(kinds.TRAINING_PROJECT, "llm-pretrain")
            assert live is not None
            return condition(live, "DeadlinesTracked")

        def warnings() -> list[dict[str, Any]]:
            return [
                e
                for e in kube.list(kinds.EVENT)[0]
                if e.get("reason") == "NoMatchingWorkloads"
                and e["regarding"]["name"] == "llm-pretrain"
            ]

        assert (tracked()["status"], tracked()["reason"]) == ("True", "NoWorkloads")
        for index in range(2):
            kube.apply(
                kinds.WORKLOAD,
                workload("llm", f"job-train-{index}", "llm-pretrain"),
                field_manager="kueue",
            )
        synced.reconcile()
        untracked = tracked()
        assert (untracked["status"], untracked["reason"]) == ("False", "NoMatchingWorkloads")
        assert untracked["message"].startswith(
            "no unfinished Workload in the project's queues counts toward its deadlines: "
            "weekly-checkpoint (label quartermaster.dev/deadline=weekly-checkpoint); "
        )
        assert "integrations.labelKeysToCopy" in untracked["message"]
        [event] = warnings()
        assert (event["type"], event["note"]) == ("Warning", untracked["message"])
        other = kube.get(kinds.TRAINING_PROJECT, "vision-research")
        assert other is not None
        assert condition(other, "DeadlinesTracked")["reason"] == "NoWorkloads"

        synced.reconcile()
        assert tracked() == untracked, "a steady pass rewrites nothing"
        assert len(warnings()) == 1 and "series" not in warnings()[0], "one Event per turn"

        # The label reaches one Workload (Kueue configured to copy it): tracked again.
        labelled = workload("llm", "job-train-0", "llm-pretrain")
        labelled["metadata"]["labels"] = {names.LABEL_DEADLINE: "weekly-checkpoint"}
        kube.apply(kinds.WORKLOAD, labelled, field_manager="kueue")
        synced.reconcile()
        assert (tracked()["status"], tracked()["reason"]) == ("True", "Tracked")


class TestOwnership:
    def test_a_field_we_own_edited_by_someone_else_is_taken_back(
        self, kube: KubeClient, synced: Reconciler
    ) -> None:
        pool = kube.get(kinds.NODE_POOL, "a100-on-demand")
        assert pool is not None
        wanted = pool["spec"]["limits"]["nvidia.com/gpu"]
        kube.apply(
            kinds.NODE_POOL,
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": "a100-on-demand"},
                "spec": {"limits": {"nvidia.com/gpu": 999}},
            },
            field_manager="someone-else",
            force=True,
        )
        result, _ = writes_of(kube, synced)
        assert [show_ref(ref(u.desired)) for u in (result.plan.updates if result.plan else ())] == [
            "NodePool/a100-on-demand"
        ]
        pool = kube.get(kinds.NODE_POOL, "a100-on-demand")
        assert pool is not None
        assert pool["spec"]["limits"]["nvidia.com/gpu"] == wanted

    def test_a_field_we_do_not_set_is_left_alone(
        self, kube: KubeClient, synced: Reconciler
    ) -> None:
        kube.apply(
            kinds.NODE_POOL,
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": "a100-spot", "labels": {"team.example.com/owner": "infra"}},
                "spec": {"template": {"metadata": {"annotations": {"example.com/note": "kept"}}}},
            },
            field_manager="someone-else",
        )
        _, writes = writes_of(kube, synced)
        assert writes == 0
        pool = kube.get(kinds.NODE_POOL, "a100-spot")
        assert pool is not None
        assert pool["metadata"]["labels"]["team.example.com/owner"] == "infra"
        assert pool["spec"]["template"]["metadata"]["annotations"] == {"example.com/note": "kept"}
