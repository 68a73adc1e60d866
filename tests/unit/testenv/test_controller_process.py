"""The `quartermaster` command lines the harness runs, built in one place: each caller's flags,
in the order the soak, the scale bench, the process tests, `make cluster` and the e2e scenario
wrote them out by hand before."""

from __future__ import annotations

from pathlib import Path

import pytest

from testenv.controller_process import PlanRun, RunOptions, plan_command, run_command

KUBECONFIG = Path("/state/kubeconfig")
PYTHON = "/venv/bin/python"
RUN = [PYTHON, "-m", "controller.cli", "run", "--kubeconfig", str(KUBECONFIG)]


@pytest.mark.parametrize(
    ("options", "want"),
    [
        pytest.param(
            RunOptions(
                kubeconfig=KUBECONFIG,
                identity="soak",
                health_port=8081,
                namespace="quartermaster-system",
                lease_duration=15.0,
                resync_seconds=10.0,
            ),
            [
                *RUN,
                "--namespace",
                "quartermaster-system",
                "--identity",
                "soak",
                "--lease-duration",
                "15.0",
                "--resync-seconds",
                "10.0",
                "--health-address",
                "127.0.0.1:8081",
                "--log-format",
                "json",
            ],
            id="every flag: the soak and the process tests",
        ),
        pytest.param(
            RunOptions(
                kubeconfig=KUBECONFIG,
                identity="bench-scale",
                health_port=9000,
                namespace="quartermaster-system",
            ),
            [
                *RUN,
                "--namespace",
                "quartermaster-system",
                "--identity",
                "bench-scale",
                "--health-address",
                "127.0.0.1:9000",
                "--log-format",
                "json",
            ],
            id="lease and resync left to the CLI's defaults: the scale bench",
        ),
        pytest.param(
            RunOptions(
                kubeconfig=KUBECONFIG,
                identity="local-0",
                health_port=9001,
                resync_seconds=30,
                log_format="console",
            ),
            [
                *RUN,
                "--identity",
                "local-0",
                "--resync-seconds",
                "30",
                "--health-address",
                "127.0.0.1:9001",
                "--log-format",
                "console",
            ],
            id="no namespace, whole seconds, console logs: make cluster",
        ),
        pytest.param(
            RunOptions(
                kubeconfig=KUBECONFIG,
                identity="e2e-0",
                health_port=9002,
                lease_duration=5,
                resync_seconds=3,
            ),
            [
                *RUN,
                "--identity",
                "e2e-0",
                "--lease-duration",
                "5",
                "--resync-seconds",
                "3",
                "--health-address",
                "127.0.0.1:9002",
                "--log-format",
                "json",
            ],
            id="a lease but no namespace: the e2e scenario",
        ),
    ],
)
def test_run_command(options: RunOptions, want: list[str]) -> None:
    assert run_command(options, python=PYTHON) == want


@pytest.mark.parametrize(
    ("namespace", "want_tail"),
    [
        pytest.param(None, [], id="the CLI's namespace: the plan tests"),
        pytest.param("qm", ["--namespace", "qm"], id="a namespace: the soak"),
    ],
)
def test_plan_command(namespace: str | None, want_tail: list[str]) -> None:
    command = plan_command(Path("policy"), KUBECONFIG, namespace=namespace, python=PYTHON)
    assert command == [
        PYTHON,
        "-m",
        "controller.cli",
        "plan",
        "-f",
        "policy",
        "--kubeconfig",
        str(KUBECONFIG),
        *want_tail,
    ]


def test_a_plan_runs_output_is_stdout_then_stderr_trimmed() -> None:
    run = PlanRun(2, ["~ update NodePool/a", "Plan: 0 to create, 1 to update.", ""], ["warn"])
    assert run.output == "~ update NodePool/a\nPlan: 0 to create, 1 to update.\n\nwarn"
    assert PlanRun(0, [], []).output == ""
