"""`quartermaster plan` as a user runs it: a subprocess against a real API server.

Each test copies the bundled example policy to a temporary directory (the "Git checkout"),
changes the copy or the cluster, and runs `python -m controller.cli plan -f DIR --kubeconfig K`,
checking the exit code (0 in sync, 2 changes pending, 1 invalid policy or unreadable cluster)
and every line it prints. The cluster side is set up as in test_reconcile: policy objects
applied by a "gitops" field manager, then one Reconciler pass.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.api.loader import load_path
from controller.examples import EXAMPLE_DIR
from controller.kube import kinds
from controller.kube.client import KubeClient
from controller.reconcile.reconciler import Reconciler
from controller.render.desired import render
from testenv import controller_process
from testenv.controller_process import PlanRun
from testenv.controlplane import ControlPlane, free_ports
from tests.integration.conftest import Server, written_objects
from tests.integration.test_reconcile import apply_doc, example_documents, workload

REPO_ROOT = Path(__file__).parents[2]
IN_SYNC = "No changes: the cluster matches the policy."
# The example's a100 pool: 16 on-demand GPUs (its floor) and 108 on spot (README, `make demo`).
A100_SPOT_GPUS = 112
"""The a100 spot NodePool limit: 108 GPUs of spot quota, rounded up to whole 8-GPU nodes."""

Document = dict[str, Any]


def run_plan(policy_dir: Path, kubeconfig: Path) -> PlanRun:
    """`quartermaster plan` of this checkout, as a user runs it."""
    return controller_process.run_plan(policy_dir, kubeconfig, root=REPO_ROOT)


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    """A copy of the bundled example policy: the user's Git checkout."""
    directory = tmp_path / "policy"
    directory.mkdir()
    for path in sorted(EXAMPLE_DIR.glob("*.yaml")):
        shutil.copy(path, directory / path.name)
    return directory


def edit_projects(
    policy_dir: Path, edit: Callable[[list[Document]], list[Document]]
) -> list[Document]:
    """Rewrite the local projects.yaml through `edit`; returns the new documents."""
    path = policy_dir / "projects.yaml"
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    edited = edit(documents)
    path.write_text(yaml.safe_dump_all(edited, sort_keys=False))
    return edited


def named(documents: list[Document], name: str) -> Document:
    return next(d for d in documents if d["metadata"]["name"] == name)


def without(name: str) -> Callable[[list[Document]], list[Document]]:
    return lambda documents: [d for d in documents if d["metadata"]["name"] != name]


def with_new_team(documents: list[Document]) -> list[Document]:
    """A copy of nlp-eval (8 a100 GPUs, research tier) under a new name and namespaces."""
    new = copy.deepcopy(named(documents, "nlp-eval"))
    new["metadata"]["name"] = "new-team"
    new["spec"]["namespaces"] = ["new-team", "new-team-dev"]
    return [*documents, new]


def a100_spot_change(gpus: int) -> list[str]:
    return [
        "~ update NodePool/a100-spot",
        f"    spec.limits.nvidia.com/gpu: {A100_SPOT_GPUS} -> {gpus}",
    ]


def take_over_a100_limit(kube: KubeClient) -> None:
    """Someone edits a field the controller owns, with their own field manager."""
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


def pending_workload_in_interns(kube: KubeClient) -> None:
    kube.apply(kinds.WORKLOAD, workload("interns", "train-1", "interns"), field_manager="kueue")


@pytest.fixture
def synced(kube: KubeClient) -> Iterator[Reconciler]:
    """The example policy applied to the cluster and reconciled once."""
    for doc in example_documents():
        apply_doc(kube, doc)
    reconciler = Reconciler(kube)
    reconciler.reconcile()
    yield reconciler


@pytest.fixture
def kubeconfig(control_plane: ControlPlane) -> Path:
    return control_plane.kubeconfig


def unserved_lines(server: Server) -> list[str]:
    """What `plan` says of the example's kinds this server does not serve, from discovery:
    apps/v1 Deployment on the CRD-only server, nothing on a kube-apiserver."""
    rendered = render(load_path(EXAMPLE_DIR)).objects
    return [f"? not served by the cluster, skipped: {kind}" for kind in server.unserved(rendered)]


@pytest.fixture
def unserved(server: Server) -> list[str]:
    return unserved_lines(server)


class TestExitCodes:
    def test_in_sync_exits_0(
        self, synced: Reconciler, policy_dir: Path, kubeconfig: Path, unserved: list[str]
    ) -> None:
        run = run_plan(policy_dir, kubeconfig)
        assert (run.code, run.stdout, run.stderr) == (0, [*unserved, IN_SYNC], [])

    def test_a_field_edited_by_someone_else_is_drift(
        self,
        kube: KubeClient,
        synced: Reconciler,
        policy_dir: Path,
        kubeconfig: Path,
        unserved: list[str],
    ) -> None:
        take_over_a100_limit(kube)
        run = run_plan(policy_dir, kubeconfig)
        assert (run.code, run.stderr) == (2, [])
        assert run.stdout == [
            "~ update NodePool/a100-on-demand",
            "    spec.limits.nvidia.com/gpu: 999 -> 16",
            *unserved,
            "Plan: 0 to create, 1 to update, 0 to prune, 0 kept.",
        ]
        # The controller takes the field back; then the plan is empty again.
        synced.reconcile()
        assert run_plan(policy_dir, kubeconfig).code == 0

    def test_a_new_local_project_would_create_its_queues(
        self, synced: Reconciler, policy_dir: Path, kubeconfig: Path, unserved: list[str]
    ) -> None:
        edit_projects(policy_dir, with_new_team)
        run = run_plan(policy_dir, kubeconfig)
        assert (run.code, run.stderr) == (2, [])
        assert run.stdout == [
            "+ create ClusterQueue/new-team",
            "+ create LocalQueue/new-team/new-team",
            "+ create LocalQueue/new-team-dev/new-team",
            # Its 8 a100 GPUs go to spot, beyond the pool's on-demand floor.
            *a100_spot_change(120),  # 116 GPUs of quota on whole nodes
            *unserved,
            "Plan: 3 to create, 1 to update, 0 to prune, 0 kept.",
        ]

    def test_a_project_removed_locally_would_be_pruned(
        self, synced: Reconciler, policy_dir: Path, kubeconfig: Path, unserved: list[str]
    ) -> None:
        edit_projects(policy_dir, without("interns"))
        run = run_plan(policy_dir, kubeconfig)
        assert (run.code, run.stderr) == (2, [])
        assert run.stdout == [
            *a100_spot_change(104),
            "- prune  LocalQueue/interns/interns",
            "- prune  ClusterQueue/interns",
            *unserved,
            "Plan: 0 to create, 1 to update, 2 to prune, 0 kept.",
        ]

    def test_a_removed_project_with_a_pending_workload_keeps_its_queues(
        self,
        kube: KubeClient,
        synced: Reconciler,
        policy_dir: Path,
        kubeconfig: Path,
        unserved: list[str],
    ) -> None:
        pending_workload_in_interns(kube)
        edit_projects(policy_dir, without("interns"))
        keep = [
            "! keep   ClusterQueue/interns: WorkloadsPresent: "
            "1 workload(s) pending in or admitted to it",
            "! keep   LocalQueue/interns/interns: WorkloadsPresent: "
            "1 workload(s) pending in or admitted to it",
        ]
        run = run_plan(policy_dir, kubeconfig)
        assert (run.code, run.stderr) == (2, [])
        assert run.stdout == [
            *a100_spot_change(104),  # the pool still shrinks
            *keep,
            *unserved,
            "Plan: 0 to create, 1 to update, 0 to prune, 2 kept.",
        ]
        # Once the cluster has caught up (the project deleted there too and reconciled), the
        # queues are kept but nothing would change: exit 0, and the keep lines remain.
        kube.delete(kinds.TRAINING_PROJECT, "interns")
        result = synced.reconcile()
        assert (result.pruned, len(result.kept)) == (0, 2)
        run = run_plan(policy_dir, kubeconfig)
        assert (run.code, run.stdout, run.stderr) == (0, [*keep, *unserved, IN_SYNC], [])

    def test_an_invalid_local_policy_exits_1_with_one_line_per_error(
        self, synced: Reconciler, policy_dir: Path, kubeconfig: Path
    ) -> None:
        def break_two(documents: list[Document]) -> list[Document]:
            named(documents, "llm-pretrain")["spec"]["tier"] = "gold"
            named(documents, "recsys-prod")["spec"]["quotas"][0]["nominalGpus"] = -1
            return documents

        edit_projects(policy_dir, break_two)
        run = run_plan(policy_dir, kubeconfig)
        projects = policy_dir / "projects.yaml"
        assert (run.code, run.stdout) == (1, [])
        assert run.stderr == [
            f"{projects}#1: TrainingProject/llm-pretrain: spec.tier: unknown tier 'gold'; "
            "defined tiers: production, research, exploratory",
            f"{projects}#2: TrainingProject/recsys-prod: spec.quotas[0].nominalGpus: "
            "must be greater than or equal to 0, got -1",
            f"{policy_dir}: 2 errors",
        ]


PLAN_LINE_PREFIXES = ("+ ", "~ ", "- ", "! ", "? ", "No changes", "Plan:")


@pytest.fixture(scope="module")
def unreachable_run(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> PlanRun:
    """`plan` with a kubeconfig naming a port nobody listens on (retried for ~10 s, once)."""
    (port,) = free_ports(1)
    text = control_plane.kubeconfig.read_text().replace(
        control_plane.server, f"https://127.0.0.1:{port}"
    )
    assert f":{port}" in text
    directory = tmp_path_factory.mktemp("unreachable")
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(text)
    return run_plan(EXAMPLE_DIR, kubeconfig)


class TestUnreadableCluster:
    def test_an_unreachable_cluster_exits_1(self, unreachable_run: PlanRun) -> None:
        assert unreachable_run.code == 1
        assert unreachable_run.stderr[-1].startswith(
            "cannot read the cluster: GET /api: connection failed:"
        )
        assert "Connection refused" in unreachable_run.stderr[-1]
        assert not [line for line in unreachable_run.stdout if line.startswith(PLAN_LINE_PREFIXES)]

    def test_retry_logs_stay_off_stdout(self, unreachable_run: PlanRun) -> None:
        assert unreachable_run.stdout == []

    def test_a_missing_kubeconfig_is_one_line(self, tmp_path: Path) -> None:
        run = run_plan(EXAMPLE_DIR, tmp_path / "no-such-kubeconfig")
        assert run.code == 1
        assert run.stdout == []
        assert len(run.stderr) == 1
        assert run.stderr[0].startswith("cannot read the cluster: ")


def snapshot(kube: KubeClient) -> dict[tuple[str, str, str], str]:
    """(kind, namespace, name) -> resourceVersion of every object of every kind we touch that a
    test or the controller wrote (a kube-apiserver renews its own Leases in kube-system)."""
    versions: dict[tuple[str, str, str], str] = {}
    for kind, item in written_objects(kube):
        meta = item["metadata"]
        versions[(kind.kind, meta.get("namespace", ""), meta["name"])] = meta["resourceVersion"]
    return versions


def test_plan_is_read_only(
    kube: KubeClient, synced: Reconciler, policy_dir: Path, kubeconfig: Path
) -> None:
    """A plan with every kind of line, run with the same admin kubeconfig, writes nothing."""
    take_over_a100_limit(kube)
    pending_workload_in_interns(kube)
    edit_projects(policy_dir, without("interns"))
    edit_projects(policy_dir, with_new_team)
    edit_projects(policy_dir, without("sandbox"))
    before = snapshot(kube)
    assert len(before) > 30

    run = run_plan(policy_dir, kubeconfig)

    assert (run.code, run.stderr) == (2, [])
    kinds_of_lines = {line[:2] for line in run.stdout if line[:1] in "+~-!"}
    assert kinds_of_lines == {"+ ", "~ ", "- ", "! "}, run.stdout
    assert snapshot(kube) == before
