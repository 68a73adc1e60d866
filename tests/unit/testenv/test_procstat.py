"""/proc parsing on constructed text: the fields the soak's memory and CPU figures come from."""

from __future__ import annotations

import pytest

from testenv.procstat import (
    ProcSample,
    busy_seconds,
    command_of,
    cpu_seconds,
    kib_as_mib,
    parent_of,
    sample_of,
)


def stat_line(command: str, *, ppid: int, utime: int, stime: int) -> str:
    """A /proc/<pid>/stat line: pid, (comm), state, ppid, ... utime and stime are fields 14, 15."""
    middle = ["0"] * 9  # pgrp, session, tty_nr, tpgid, flags, minflt, cminflt, majflt, cmajflt
    rest = ["0", "0", "20", "0", "4"]  # cutime, cstime, priority, nice, num_threads
    return " ".join(
        ["4242", f"({command})", "S", str(ppid), *middle, str(utime), str(stime), *rest]
    )


@pytest.mark.parametrize(
    "command",
    [
        pytest.param("etcd", id="a plain name"),
        pytest.param("kube apiserver", id="a name with a space"),
        pytest.param("python3 (x)", id="a name with parentheses"),
    ],
)
def test_the_command_and_parent_are_read_around_any_name(command: str) -> None:
    stat = stat_line(command, ppid=77, utime=1, stime=2)
    assert (command_of(stat), parent_of(stat)) == (command, 77)


def test_cpu_seconds_are_user_and_system_ticks() -> None:
    stat = stat_line("python3 (x)", ppid=1, utime=250, stime=50)
    assert cpu_seconds(stat, ticks=100) == 3.0


def test_machine_busy_time_leaves_out_idle_and_iowait() -> None:
    proc_stat = (
        "cpu  100 20 30 5000 400 6 7 8 0 0\n"  # user nice system idle iowait irq softirq steal
        "cpu0 50 10 15 2500 200 3 4 4 0 0\n"
    )
    assert busy_seconds(proc_stat, ticks=100) == pytest.approx((100 + 20 + 30 + 6 + 7 + 8) / 100)


def test_a_sample_reads_memory_threads_and_cpu() -> None:
    status = (
        "Name:\tpython3\nVmHWM:\t   92160 kB\nVmRSS:\t   81920 kB\nRssAnon:\t   51200 kB\n"
        "RssFile:\t   29696 kB\nRssShmem:\t    1024 kB\nThreads:\t12\nSigQ:\t0/63456\n"
    )
    stat = stat_line("python3", ppid=1, utime=400, stime=100)
    sample = sample_of(status, stat, fds=31, at=12.5)
    want_cpu = cpu_seconds(stat)
    assert sample == ProcSample(
        at=12.5,
        rss_mib=80.0,
        hwm_mib=90.0,
        anon_mib=50.0,
        file_mib=29.0,
        threads=12,
        fds=31,
        cpu_seconds=want_cpu,
    )


def test_a_kernel_without_the_rss_split_reads_as_zero_not_an_error() -> None:
    status = "Name:\tpython3\nVmHWM:\t   92160 kB\nVmRSS:\t   81920 kB\nThreads:\t12\n"
    sample = sample_of(status, stat_line("python3", ppid=1, utime=1, stime=1), fds=3, at=0.0)
    assert (sample.rss_mib, sample.anon_mib, sample.file_mib) == (80.0, 0.0, 0.0)


def test_a_status_value_in_kib_is_read_as_mib() -> None:
    assert kib_as_mib("  1536 kB") == 1.5
