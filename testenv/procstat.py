"""Processes measured from outside, through /proc: memory, threads, open files, CPU.

A soak or a bench judges the controller as an operator would, by what the kernel says of its
process, not by what the process says of itself: a leak in a C extension or a thread never
joined shows there and nowhere else. The parsing is pure (over the text of `/proc/<pid>/stat`,
`/proc/<pid>/status` and `/proc/stat`) and tested on constructed text; reading the files is the
thin layer around it. Linux only, as the harness is.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
"""The unit of the CPU times in /proc (USER_HZ, 100 on Linux)."""
MACHINE = "(machine)"
"""The key of the machine-wide busy time among the per-process CPU figures."""
PROC = Path("/proc")


@dataclass(frozen=True)
class ProcSample:
    at: float
    """time.monotonic()."""
    rss_mib: float
    hwm_mib: float
    anon_mib: float
    """Anonymous resident memory (the heaps, Python's arenas, thread stacks): where a leak is."""
    file_mib: float
    """File-backed resident memory: code and data of the interpreter and the libraries, paged in
    as a path first runs, which is not a leak; 0 when the kernel does not say (before 4.5)."""
    threads: int
    fds: int
    cpu_seconds: float


# ------------------------------------------------------------------------------- pure parsing
def command_of(stat: str) -> str:
    """The command name of a /proc/<pid>/stat line (it may hold spaces and parentheses)."""
    return stat[stat.index("(") + 1 : stat.rindex(")")]


def _after_command(stat: str) -> list[str]:
    """The fields after the command name: state, ppid, ..., utime (12th), stime (13th)."""
    return stat[stat.rindex(")") + 2 :].split()


def parent_of(stat: str) -> int:
    """The parent PID of a /proc/<pid>/stat line."""
    return int(_after_command(stat)[1])


def cpu_seconds(stat: str, *, ticks: int = CLOCK_TICKS) -> float:
    """utime + stime from a /proc/<pid>/stat line."""
    after_name = _after_command(stat)
    return (int(after_name[11]) + int(after_name[12])) / ticks


def busy_seconds(proc_stat: str, *, ticks: int = CLOCK_TICKS) -> float:
    """CPU seconds the machine spent busy since boot, from /proc/stat: every time but idle
    and iowait, summed over the cores."""
    first = proc_stat.splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in first[:8])
    return (user + nice + system + irq + softirq + steal) / ticks


def status_fields(status: str) -> dict[str, str]:
    """`Name: value` rows of /proc/<pid>/status."""
    return dict(row.split(":", 1) for row in status.splitlines() if ":" in row)


def kib_as_mib(value: str) -> float:
    """A status value such as `  81234 kB`, in MiB."""
    return int(value.split(maxsplit=1)[0]) / 1024


def sample_of(status: str, stat: str, *, fds: int, at: float) -> ProcSample:
    """One process's sample from the text of its status and stat files."""
    fields = status_fields(status)
    return ProcSample(
        at=at,
        rss_mib=kib_as_mib(fields["VmRSS"]),
        hwm_mib=kib_as_mib(fields["VmHWM"]),
        anon_mib=kib_as_mib(fields.get("RssAnon", "0 kB")),
        file_mib=kib_as_mib(fields.get("RssFile", "0 kB")),
        threads=int(fields["Threads"].strip()),
        fds=fds,
        cpu_seconds=cpu_seconds(stat),
    )


# ------------------------------------------------------------------------------- reading /proc
def proc_sample(pid: int) -> ProcSample | None:
    """None when the process is gone."""
    base = PROC / str(pid)
    try:
        status = (base / "status").read_text()
        stat = (base / "stat").read_text()
        fds = len(os.listdir(base / "fd"))
    except OSError:
        return None
    return sample_of(status, stat, fds=fds, at=time.monotonic())


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy since boot (every process, every core)."""
    return busy_seconds((PROC / "stat").read_text())


def children() -> Iterator[tuple[int, str]]:
    """(pid, stat line) of every child of this process: the servers and the controller."""
    parent = os.getpid()
    for proc in PROC.iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        if parent_of(stat) == parent:
            yield int(proc.name), stat


def cpu_by_process(controller: int, *, own: str) -> dict[str, float]:
    """CPU seconds so far of this process (under the name `own`) and of its children by command
    name, the `controller` PID under "controller": is the machine, not the controller, busy?"""
    used = {own: cpu_seconds((PROC / "self" / "stat").read_text())}
    for pid, stat in children():
        name = "controller" if pid == controller else command_of(stat)
        used[name] = used.get(name, 0.0) + cpu_seconds(stat)
    return used


def child_peak_rss_mib() -> dict[str, float]:
    """Peak RSS (VmHWM) of this process's children (etcd, the API server), by command name."""
    peaks: dict[str, float] = {}
    for pid, stat in children():
        try:
            status = (PROC / str(pid) / "status").read_text()
        except OSError:
            continue
        fields = status_fields(status)
        if "VmHWM" in fields:
            peaks[command_of(stat)] = kib_as_mib(fields["VmHWM"])
    return peaks
