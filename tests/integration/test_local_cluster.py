"""`make cluster` (`python -m e2e.cluster`): a local cluster to try things on, as the README's
walkthrough uses it.

It runs as a user runs it, a process of its own: the test waits for the `export KUBECONFIG=`
line, runs `quartermaster plan` and `quartermaster explain` against the cluster as separate
commands, then presses Ctrl-C (SIGINT) and checks that every server it started is gone.
Everything is real: etcd and the CRD API server, Prometheus, the controller process.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from testenv.processes import pid_gone

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "manifests" / "examples"
EXPORT = "export KUBECONFIG="


class Output:
    """The cluster's standard output, line by line, read on a thread so waits can time out."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, prefix: str, *, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(
                    f"no line starting {prefix!r} in {timeout} s:\n{''.join(self.lines)}"
                ) from None
            if line is None:
                raise AssertionError(f"the cluster exited:\n{''.join(self.lines)}")
            self.lines.append(line)
            if line.strip().startswith(prefix):
                return line.strip()

    def rest(self, *, timeout: float) -> str:
        """Everything until the stream ends."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.01))
            if line is None:
                break
            self.lines.append(line)
        return "".join(self.lines)


def quartermaster(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Output, Path]]:
    state = tmp_path / "cluster"
    process = subprocess.Popen(
        [sys.executable, "-m", "e2e.cluster", "--state-dir", str(state)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    try:
        yield process, Output(process.stdout), state
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()


def test_plan_explain_then_ctrl_c_stops_everything(
    cluster: tuple[subprocess.Popen[str], Output, Path],
) -> None:
    process, output, state = cluster
    export = output.wait_for(EXPORT, timeout=300)
    kubeconfig = export.removeprefix(EXPORT)
    assert Path(kubeconfig).is_file()
    info = json.loads((state / "cluster.json").read_text())
    assert info["kubeconfig"] == kubeconfig
    assert set(info["pids"]) == {"etcd", "apiserver", "prometheus", "controller"}

    # The files it applied: the cluster matches them.
    in_sync = quartermaster("plan", "-f", info["policy"], "--kubeconfig", kubeconfig)
    assert in_sync.returncode == 0, in_sync.stdout + in_sync.stderr
    assert "No changes" in in_sync.stdout

    # The bundled example differs in one place only: the cluster's policy points at the local
    # Prometheus, which the warm pools' ScaledObjects query.
    example = quartermaster("plan", "-f", str(EXAMPLES), "--kubeconfig", kubeconfig)
    assert example.returncode == 2, example.stdout + example.stderr
    changes = [line for line in example.stdout.splitlines() if line.startswith(("+", "~", "-"))]
    assert changes == [
        "~ update ScaledObject/quartermaster-system/warm-a100",
        "~ update ScaledObject/quartermaster-system/warm-h100",
    ]
    assert f'{info["prometheus"]}" -> "http://prometheus-operated' in example.stdout

    # As the walkthrough has it: KUBECONFIG exported, no --kubeconfig.
    explained = quartermaster(
        "explain", "llm-pretrain", env={**os.environ, "KUBECONFIG": kubeconfig}
    )
    assert explained.returncode == 0, explained.stdout + explained.stderr
    assert explained.stdout.startswith("TrainingProject llm-pretrain (tier production)")
    assert "Ready=True" in explained.stdout
    missing = quartermaster("explain", "no-such-project", "--kubeconfig", kubeconfig)
    assert missing.returncode == 1
    assert "TrainingProject 'no-such-project' not found" in missing.stderr

    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=120) == 0, output.rest(timeout=5)
    assert "stopped; logs are kept in" in output.rest(timeout=5)
    deadline = time.monotonic() + 60
    while alive := {n: p for n, p in info["pids"].items() if not pid_gone(p)}:
        assert time.monotonic() < deadline, f"still running after Ctrl-C: {alive}"
        time.sleep(0.1)
    assert "[error" not in (state / "controller.log").read_text()
