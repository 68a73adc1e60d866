"""Child processes that die with the process that started them.

Tests, the demo and `make cluster` start etcd, the API server, Prometheus and the controller as
children. If the starting process is killed (SIGKILL, a SIGTERM it does not handle, a crash),
nothing runs its cleanup, and the children would be adopted by PID 1 and keep running with
their ports and state directories. On Linux each child therefore asks the kernel, before it
execs, for SIGKILL when its parent goes (`prctl(PR_SET_PDEATHSIG, SIGKILL)`); elsewhere the
children are ordinary ones and only a clean stop ends them.

The kernel's "parent" there is the *thread* that forked, not the process: a server started
from a worker thread would be killed as soon as that thread ended. So every child is forked by
one thread kept for the purpose, which lives exactly as long as the process.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

PR_SET_PDEATHSIG = 1
"""From <linux/prctl.h>."""

_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
# Loaded before any fork: the child must not load libraries between fork and exec.

_FORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="testenv-forker")
"""The one thread every child is forked from (see the module docstring)."""


def _die_with(parent: int) -> Callable[[], None] | None:
    """The child's last step before exec: SIGKILL when `parent` dies.

    If the parent died between fork and prctl, no signal will ever come: the child sees it has
    been re-parented and kills itself at once.
    """
    if _LIBC is None:
        return None
    prctl = _LIBC.prctl

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def spawn(
    args: Sequence[str],
    *,
    stdin: int | None = None,
    stdout: int | IO[bytes] | IO[str] | None = None,
    stderr: int | IO[bytes] | IO[str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    new_session: bool = True,
) -> subprocess.Popen[bytes]:
    """Start `args` as a child that is killed when this process dies, however it dies.

    `new_session` (the default) keeps a terminal's Ctrl-C from reaching the child directly, so
    the caller stops its children itself, in order.
    """
    parent = os.getpid()

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            list(args),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=new_session,
            # Safe here despite the threads: the hook only calls prctl, getppid and kill, CPython
            # re-initialises its own locks in the child, and glibc its malloc locks.
            preexec_fn=_die_with(parent),  # noqa: PLW1509
        )

    return _FORKER.submit(start).result()


def pid_gone(pid: int) -> bool:
    """True when no process has this PID any more, or only its zombie is left (a zombie runs
    nothing and holds no port; whoever adopted it reaps it in its own time)."""
    if Path("/proc/self/stat").exists():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        # The state is the first field after the parenthesised command name.
        return stat.rpartition(")")[2].split()[0] in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def sigterm_as_keyboard_interrupt() -> None:
    """From now on, the first SIGTERM raises KeyboardInterrupt in the main thread.

    For pytest: a CI job cancelled, or `timeout`, sends SIGTERM, which by default ends the run
    at once and skips every fixture's teardown (the children still die, see above, but their
    state directories stay). As a KeyboardInterrupt, pytest stops the way Ctrl-C stops it,
    with the teardown. A second SIGTERM kills at once, as before.
    """

    def interrupt(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")

    signal.signal(signal.SIGTERM, interrupt)
