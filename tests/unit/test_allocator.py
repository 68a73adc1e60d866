"""Freed memory kept for the next pass: a pass's arrays come from memory the process already
has, not from fresh pages each time (`controller/allocator.py`).

Measured in fresh interpreters, since the setting is process-wide and stays: the minor page
faults of making three 8 MiB arrays and freeing them, ten times after a first time, as a pass's
batches do. By default glibc raises its mmap threshold past 8 MiB after the first free, but
hands what is freed at the top of its heap back each time (more than twice that threshold),
so each round touches fresh pages.
"""

from __future__ import annotations

import platform
import subprocess
import sys

from controller.allocator import keep_freed_memory

PROBE = """
import resource, sys
import numpy as np
from controller.allocator import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
def arrays():
    first = np.ones(2 * 1024 * 1024, dtype=np.float32)
    second = np.ones(2 * 1024 * 1024, dtype=np.float32)
    third = np.ones(2 * 1024 * 1024, dtype=np.float32)
    del third, second, first
arrays()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    arrays()
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
PAGES = 8 * 1024 * 1024 // 4096
"""An 8 MiB array's pages, each a fault when they are fresh."""


def faults(mode: str) -> tuple[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    kept, count = done.stdout.split()
    return kept, int(count)


def test_glibc_is_told_and_says_yes() -> None:
    assert keep_freed_memory() is (platform.libc_ver()[0] == "glibc")


def test_an_array_made_again_reuses_pages_instead_of_faulting_in_fresh_ones() -> None:
    _, fresh = faults("default")
    kept, reused = faults("keep")
    assert kept == "True"
    assert fresh >= 4 * PAGES  # by default, megabytes of fresh pages every round
    assert reused < PAGES // 8  # kept: next to none in all ten


GIVE_BACK = """
import resource
import numpy as np
from controller.allocator import give_back_freed_memory, keep_freed_memory
keep_freed_memory()
def arrays():
    first = np.ones(2 * 1024 * 1024, dtype=np.float32)
    second = np.ones(2 * 1024 * 1024, dtype=np.float32)
    del second, first
arrays()
kept = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
arrays()
kept = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - kept
given = give_back_freed_memory()
again = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
arrays()
print(given, kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - again)
"""


def test_freed_memory_is_given_back_when_asked() -> None:
    """Kept, two 8 MiB arrays made again fault in next to nothing; once the free pages are
    given back, the same two arrays fault in megabytes of fresh pages (1,030 pages here)."""
    done = subprocess.run(
        [sys.executable, "-c", GIVE_BACK], capture_output=True, text=True, check=True
    )
    given, kept, after = done.stdout.split()
    assert given == str(platform.libc_ver()[0] == "glibc")
    if given == "True":
        assert int(kept) < PAGES // 8
        assert int(after) >= PAGES // 4
