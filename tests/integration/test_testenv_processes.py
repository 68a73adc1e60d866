"""The test servers die with the process that started them, however it ends.

etcd, the API server and Prometheus are children of the test (or demo) process. Killed with
SIGTERM or SIGKILL, that process runs no cleanup; before `testenv.processes` the
servers were adopted by PID 1 and kept running. Each case starts a real Python process that
starts the real servers, reports their PIDs, and is then killed; the test waits, polling, for
every reported PID to be gone.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from testenv.processes import pid_gone

REPO = Path(__file__).resolve().parents[2]
DEADLINE_SECONDS = 60.0

STARTER = """
import json, os, sys, threading, time
from pathlib import Path
from controller.kube.client import KubeClient
from testenv.controlplane import ControlPlane
from testenv.prometheus import PrometheusServer

started = {}
def start():
    started["plane"] = ControlPlane().start()
    started["prometheus"] = PrometheusServer().start()

if sys.argv[1] == "worker-thread":
    worker = threading.Thread(target=start)
    worker.start()
    worker.join()
    # Wait until the OS thread is gone, not only the Python one: a child whose parent death
    # signal were tied to that thread would have been sent SIGKILL by then.
    while Path(f"/proc/self/task/{worker.native_id}").exists():
        time.sleep(0.01)
else:
    start()
plane, prometheus = started["plane"], started["prometheus"]
# Both answer after the starting thread is gone: they were not killed with it.
client = KubeClient.from_kubeconfig(str(plane.kubeconfig))
client.served_group_versions()
client.close()
prometheus.query("vector(1)")
print(json.dumps({"pids": {**plane.pids, "prometheus": prometheus.pid},
                  "state": [str(plane.state), str(prometheus.state)]}), flush=True)
time.sleep(600)
"""


def read_line(stream: Any, *, timeout: float) -> str:
    """The next line of a child's output, or "" at EOF; TimeoutError after `timeout`."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        raise TimeoutError(f"no line from the child in {timeout} s") from None


def wait_until_gone(pids: dict[str, int]) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        alive = {name: pid for name, pid in pids.items() if not pid_gone(pid)}
        if not alive:
            return
        assert time.monotonic() < deadline, f"still running {DEADLINE_SECONDS} s later: {alive}"
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("how", "where"),
    [
        pytest.param(signal.SIGTERM, "main-thread", id="SIGTERM, unhandled: no cleanup runs"),
        pytest.param(
            signal.SIGKILL,
            "worker-thread",
            id="SIGKILL, servers started from a thread that has since ended",
        ),
    ],
)
def test_servers_die_with_the_process_that_started_them(
    how: signal.Signals, where: str, tmp_path: Path
) -> None:
    with (tmp_path / "stderr").open("w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", STARTER, where],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    states: list[str] = []
    try:
        line = read_line(child.stdout, timeout=120)
        assert line, f"the starter failed:\n{(tmp_path / 'stderr').read_text()[-3000:]}"
        report = json.loads(line)
        states = report["state"]
        pids: dict[str, int] = report["pids"]
        assert set(pids) == {"etcd", "apiserver", "prometheus"}
        assert not any(pid_gone(pid) for pid in pids.values())

        child.send_signal(how)
        assert child.wait(timeout=30) == -how
        wait_until_gone(pids)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        assert child.stdout is not None
        child.stdout.close()
        for state in states:  # nothing cleaned up after the kill: the test does
            shutil.rmtree(state, ignore_errors=True)


PYTEST_RUN = """
import json, os, time
from pathlib import Path
import pytest
from testenv.controlplane import ControlPlane
from testenv.prometheus import PrometheusServer

@pytest.fixture(scope="session")
def servers():
    with ControlPlane() as plane, PrometheusServer() as prometheus:
        yield plane, prometheus

def test_runs_until_terminated(servers):
    plane, prometheus = servers
    report = {"pids": {**plane.pids, "prometheus": prometheus.pid},
              "state": [str(plane.state), str(prometheus.state)]}
    Path(os.environ["QM_REPORT"]).write_text(json.dumps(report))
    time.sleep(600)
"""


def test_sigterm_to_pytest_runs_the_fixture_teardown(tmp_path: Path) -> None:
    """With tests/conftest.py's hook, SIGTERM stops pytest as Ctrl-C does: the fixtures stop
    the servers and remove their state directories (a kill would leave the directories)."""
    (tmp_path / "test_held.py").write_text(PYTEST_RUN)
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    report_file = tmp_path / "report.json"
    with (tmp_path / "output").open("w") as output_file:
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "tests.conftest",
                "-p",
                "no:cacheprovider",
                "-c",
                str(tmp_path / "pytest.ini"),
                "--rootdir",
                str(tmp_path),
                str(tmp_path / "test_held.py"),
            ],
            cwd=REPO,
            env={**os.environ, "QM_REPORT": str(report_file), "PYTHONPATH": str(REPO)},
            stdout=output_file,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while not report_file.exists():
            assert run.poll() is None, (tmp_path / "output").read_text()[-3000:]
            assert time.monotonic() < deadline, "the held test did not start its servers"
            time.sleep(0.1)
        report = json.loads(report_file.read_text())
        assert not any(pid_gone(pid) for pid in report["pids"].values())

        run.send_signal(signal.SIGTERM)
        code = run.wait(timeout=60)
        output = (tmp_path / "output").read_text()
        assert code == pytest.ExitCode.INTERRUPTED, output[-3000:]
        assert "SIGTERM received" in output
        wait_until_gone(report["pids"])
        assert [state for state in report["state"] if Path(state).exists()] == []
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
