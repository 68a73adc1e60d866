"""`quartermaster` as a child process: `run` started, probed, settled and stopped; `plan` run.

The process tests, `make cluster`, the e2e scenario, the soak and the scale bench all run the
controller as a cluster runs it, as its own process, and judge it from outside: its /readyz,
its JSON log, its exit code on SIGTERM. Its command line is built in one place
(`run_command`), so every one of them runs the same controller with the same flags; each
passes only what it chooses (identity, lease, resync, log format). The child dies with the
harness however the harness ends (`processes.spawn`).

The command runs as `python -m controller.cli` with this interpreter. `root` names the
checkout whose controller runs (its working directory and PYTHONPATH, so `-m` imports that
checkout's `controller`); without it, the installed package runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from testenv.logtail import LogTail
from testenv.processes import spawn

READY_BODY = "leading; synced"
"""What /readyz answers once the replica leads and its first pass has returned."""
STOP_TIMEOUT_SECONDS = 20.0
PLAN_TIMEOUT_SECONDS = 120.0


class ControllerExitedError(RuntimeError):
    """The controller process exited while it was still needed."""


class ControllerNotReadyError(RuntimeError):
    """The controller did not become ready in time."""


@dataclass(frozen=True)
class RunOptions:
    """The flags of one `quartermaster run`; None leaves a flag out (the CLI's default)."""

    kubeconfig: Path
    identity: str
    health_port: int
    namespace: str | None = None
    lease_duration: float | None = None
    resync_seconds: float | None = None
    log_format: str = "json"


def run_command(options: RunOptions, *, python: str = sys.executable) -> list[str]:
    """The command line of `quartermaster run` with these options."""
    command = [python, "-m", "controller.cli", "run", "--kubeconfig", str(options.kubeconfig)]
    if options.namespace is not None:
        command += ["--namespace", options.namespace]
    command += ["--identity", options.identity]
    if options.lease_duration is not None:
        command += ["--lease-duration", str(options.lease_duration)]
    if options.resync_seconds is not None:
        command += ["--resync-seconds", str(options.resync_seconds)]
    command += [
        "--health-address",
        f"127.0.0.1:{options.health_port}",
        "--log-format",
        options.log_format,
    ]
    return command


def plan_command(
    policy_dir: Path,
    kubeconfig: Path,
    *,
    namespace: str | None = None,
    python: str = sys.executable,
) -> list[str]:
    """The command line of `quartermaster plan -f policy_dir` against the cluster."""
    command = [python, "-m", "controller.cli", "plan", "-f", str(policy_dir)]
    command += ["--kubeconfig", str(kubeconfig)]
    if namespace is not None:
        command += ["--namespace", namespace]
    return command


def _environment(root: Path | None) -> dict[str, str]:
    """This environment, with `root` first on the import path when given."""
    return {**os.environ, "PYTHONPATH": str(root)} if root is not None else dict(os.environ)


@dataclass
class ControllerProcess:
    """One `quartermaster run` process: its health port, its log, when it started."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    """Where its output goes (stderr too, unless it was given a file of its own)."""
    started: float
    """time.monotonic() at the start."""

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def metrics_url(self) -> str:
        return self.url("/metrics")

    def probe(self, path: str) -> tuple[int, str]:
        """(status, body) of a GET of `path` on the health port; (0, error) when closed."""
        return get_status(self.url(path))


def start_controller(
    options: RunOptions,
    *,
    log: Path,
    stderr: Path | None = None,
    root: Path | None = None,
    append: bool = False,
) -> ControllerProcess:
    """Start `quartermaster run`; its stdout and stderr go to `log` (stderr to `stderr` when
    given), appended to when `append`, else written afresh."""
    mode = "ab" if append else "wb"
    with log.open(mode) as out:
        if stderr is None:
            process = _spawn(options, out, subprocess.STDOUT, root)
        else:
            with stderr.open(mode) as err:
                process = _spawn(options, out, err, root)
    return ControllerProcess(process, options.health_port, log, time.monotonic())


def _spawn(
    options: RunOptions, out: IO[bytes], err: IO[bytes] | int, root: Path | None
) -> subprocess.Popen[bytes]:
    return spawn(
        run_command(options),
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=err,
        env={**_environment(root), "PYTHONUNBUFFERED": "1"},  # each log line as it is written
        cwd=root,
    )


def get_status(url: str) -> tuple[int, str]:
    """(status, body) of a GET; (0, error) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status), response.read().decode().strip()
    except urllib.error.HTTPError as error:
        with error:
            return int(error.code), error.read().decode().strip()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
        return 0, str(error)


def wait_ready(
    controller: ControllerProcess,
    *,
    timeout: float,
    body: str | None = READY_BODY,
    poll: float = 0.2,
) -> float:
    """Seconds from the start until /readyz answers 200 (with `body`, unless None).

    ControllerExitedError when the process exits first; ControllerNotReadyError after
    `timeout` seconds from the start.
    """
    while time.monotonic() - controller.started < timeout:
        if controller.process.poll() is not None:
            raise ControllerExitedError(
                f"the controller exited with {controller.process.returncode}"
            )
        status, answer = controller.probe("/readyz")
        if status == 200 and (body is None or answer == body):
            return time.monotonic() - controller.started
        time.sleep(poll)
    wanted = f"{body!r}" if body is not None else "ready"
    raise ControllerNotReadyError(f"the controller was not {wanted} within {timeout:.0f} s")


def settle(
    log: LogTail,
    since_wall: float,
    *,
    timeout: float,
    process: subprocess.Popen[bytes] | None = None,
    poll: float = 0.5,
) -> float | None:
    """Seconds until a pass that started after `since_wall` (epoch seconds) wrote nothing;
    None after `timeout`, or as soon as `process` (when given) has exited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        log.poll()
        if process is not None and process.poll() is not None:
            return None
        if any(p.ended - p.seconds > since_wall and p.writes == 0 for p in log.passes):
            return time.monotonic() - started
        time.sleep(poll)
    return None


def stop_controller(
    process: subprocess.Popen[bytes], *, timeout: float = STOP_TIMEOUT_SECONDS
) -> tuple[int | None, float]:
    """SIGTERM, as a Deployment rollout sends; (exit code, seconds it took). Killed after
    `timeout` seconds, and then the code is None."""
    if process.poll() is not None:
        return process.returncode, 0.0
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None, time.monotonic() - sent
    return code, time.monotonic() - sent


@dataclass(frozen=True)
class PlanRun:
    """How `quartermaster plan` ended: its exit code and the lines it printed."""

    code: int
    stdout: list[str]
    stderr: list[str]

    @property
    def output(self) -> str:
        """Everything it printed, stdout first."""
        return "\n".join([*self.stdout, *self.stderr]).strip()


def run_plan(
    policy_dir: Path,
    kubeconfig: Path,
    *,
    namespace: str | None = None,
    root: Path | None = None,
    timeout: float = PLAN_TIMEOUT_SECONDS,
) -> PlanRun:
    """Run `quartermaster plan` to its end, as a user runs it."""
    completed = subprocess.run(
        plan_command(policy_dir, kubeconfig, namespace=namespace),
        capture_output=True,
        text=True,
        cwd=root,
        env=_environment(root),
        timeout=timeout,
        check=False,
    )
    return PlanRun(
        completed.returncode, completed.stdout.splitlines(), completed.stderr.splitlines()
    )
